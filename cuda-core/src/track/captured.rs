//! Memory and stream capture: what [the rule](super) does while a stream is being captured into
//! a graph.
//!
//! * [`GraphAlloc`]: memory allocated on a capturing stream, a graph memory node. It exists
//!   only inside the graph's launches, from the allocation node until its free node. It may be
//!   used on the streams of its capture (the first use on another one is ordered after the
//!   allocation by a captured edge), and it is freed in the capture: when the buffer is
//!   dropped there (a free node, ordered after every stream of the capture that used it), or
//!   when the capture ends (a free node added then). Outside its capture it is refused.
//! * [`Retained`]: memory allocated outside a capture and used by captured work. The graph,
//!   its clones and its executable graphs hold the cell; the buffer's release is handed to it
//!   and runs once the last of them is gone (an executable graph that was launched waits for
//!   its launches before it lets go).
//! * [`order_captured_use`]: the first captured use of such memory on a stream waits, at each
//!   launch, for the work queued on the memory's own stream before the capture (an external
//!   event wait node).

use crate::error::{Error, Result};
use crate::event::{Event, EventFlags};
use crate::stream::Stream;
use crate::stream::capturing::{CaptureRef, capture_of};
use cuhost_driver_sys as sys;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Memory allocated by a graph memory node of a capture under way (or that was).
#[derive(Debug)]
pub(crate) struct GraphAlloc {
    ptr: sys::CUdeviceptr,
    /// The capture that allocated it.
    capture: u64,
    /// The stream it was allocated on, where its free is captured.
    stream: Stream,
    state: Mutex<AllocState>,
}

#[derive(Debug)]
struct AllocState {
    phase: Phase,
    /// The other streams of the capture that used it: its free is ordered after them.
    streams: Vec<Stream>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Allocated in a capture under way, not freed yet.
    Live,
    /// Freed by a free node the buffer's drop captured.
    Freed,
    /// Its capture has ended: freed by a free node added at the end, or never made (the
    /// capture was discarded).
    Gone,
}

impl GraphAlloc {
    /// Allocates `bytes` on `stream`, which `capture` is capturing: the driver records an
    /// allocation node ([`cuMemAllocAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html)
    /// during capture) and returns the address that node's memory has at every launch.
    pub(crate) fn allocate(stream: &Stream, capture: CaptureRef, bytes: usize) -> Result<Arc<GraphAlloc>> {
        let mut ptr = 0;
        stream.context().enter()?;
        // SAFETY: the stream is live and capturing; one out-parameter.
        unsafe { driver!(cuMemAllocAsync(&mut ptr, bytes, stream.as_raw())) }?;
        let alloc = Arc::new(GraphAlloc {
            ptr,
            capture: capture.id(),
            stream: stream.clone(),
            state: Mutex::new(AllocState { phase: Phase::Live, streams: Vec::new() }),
        });
        capture.note_allocation(&alloc);
        Ok(alloc)
    }

    /// The address of the memory at every launch.
    #[inline]
    pub(crate) fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    /// The stream it was allocated on.
    #[inline]
    pub(crate) fn stream(&self) -> &Stream {
        &self.stream
    }

    fn lock(&self) -> MutexGuard<'_, AllocState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes that work using the memory is about to be captured on `stream` (part of
    /// `capture`, if any): refused outside its capture and once freed; the first use on a
    /// stream other than the one it was allocated on is ordered after the allocation (an
    /// event recorded there and waited for on `stream`, both captured: a graph edge).
    pub(crate) fn use_on(&self, stream: &Stream, capture: Option<CaptureRef>) -> Result<()> {
        let mut state = self.lock();
        self.usable(&state, capture)?;
        if *stream != self.stream && !state.streams.contains(stream) {
            join(stream, &self.stream)?;
            state.streams.push(stream.clone());
        }
        Ok(())
    }

    /// Whether work using the memory may be captured on `stream` with nothing more to do: the
    /// memory is still allocated in its capture (which therefore has not ended), and `stream`
    /// was already seen in it. No driver call.
    pub(crate) fn known_on(&self, stream: &Stream) -> bool {
        let state = self.lock();
        state.phase == Phase::Live && (*stream == self.stream || state.streams.contains(stream))
    }

    /// Refuses a use in `capture` when the memory does not exist there.
    fn usable(&self, state: &AllocState, capture: Option<CaptureRef>) -> Result<()> {
        match state.phase {
            Phase::Live if capture.is_some_and(|c| c.id() == self.capture) => Ok(()),
            Phase::Freed => Err(Error::refused(
                crate::error::Reason::DURING_CAPTURE,
                "graph memory",
                "the buffer was allocated in a stream capture and freed there; it has no memory left",
            )),
            _ => Err(outside_capture()),
        }
    }

    /// Frees the memory where the buffer is dropped: inside its capture, a free node on the
    /// stream it was allocated on, after every other stream of the capture that used it;
    /// after the capture, nothing (the capture freed it in the graph at its end).
    pub(crate) fn free_on_drop(&self) -> Result<()> {
        let mut state = self.lock();
        if state.phase != Phase::Live {
            return Ok(());
        }
        let capture = match capture_of(&self.stream) {
            Ok(Some(c)) if c.id() == self.capture => c,
            _ => {
                // The capture is over (or broken): the end freed the memory in the graph, or
                // the graph was discarded and the memory never existed.
                state.phase = Phase::Gone;
                return Ok(());
            }
        };
        let freed = self.free_in_graph(&state.streams);
        capture.note_free_on(&self.stream);
        // Freed or not (a broken capture), the buffer no longer has memory.
        state.phase = Phase::Freed;
        freed
    }

    /// At the end of its capture, on `origin` (the stream the capture began on), before the
    /// capture ends: frees the memory in the graph if it is still allocated, and joins the
    /// stream of the free into `origin`.
    pub(crate) fn free_at_end(&self, origin: &Stream) -> Result<()> {
        let mut state = self.lock();
        if state.phase != Phase::Live {
            return Ok(());
        }
        state.phase = Phase::Gone;
        self.free_in_graph(&state.streams)?;
        if self.stream != *origin { join(origin, &self.stream) } else { Ok(()) }
    }

    /// Captures the free on the allocation's stream after the other `streams` that used it.
    fn free_in_graph(&self, streams: &[Stream]) -> Result<()> {
        for other in streams {
            join(&self.stream, other)?;
        }
        self.stream.context().enter()?;
        // SAFETY: the memory is allocated by this capture and not freed (phase `Live`, under
        // the lock); the free is captured after every use the capture recorded: on the
        // allocation's stream in stream order, on the others through the edges above.
        unsafe { driver!(cuMemFreeAsync(self.ptr, self.stream.as_raw())) }
    }

    /// Its capture has ended: memory not freed in it is gone from the buffer.
    pub(crate) fn capture_ended(&self) {
        let mut state = self.lock();
        if state.phase == Phase::Live {
            state.phase = Phase::Gone;
        }
    }
}

/// The refusal of memory allocated in a capture, used outside it.
#[cold]
pub(crate) fn outside_capture() -> Error {
    Error::refused(
        crate::error::Reason::DURING_CAPTURE,
        "graph memory",
        "the buffer was allocated while its stream was being captured: its memory is a graph memory node and \
         exists only inside the graph's launches, so it can be used only by work captured in that capture; \
         allocate memory that outlives the capture before it begins",
    )
}

/// Makes `later` wait for the work captured so far on `earlier`, both in the same capture: an
/// event recorded on `earlier` and waited for on `later`, which the driver turns into an edge
/// of the graph (the event itself is not part of it, and is destroyed at once).
pub(crate) fn join(later: &Stream, earlier: &Stream) -> Result<()> {
    let mut event = std::ptr::null_mut();
    earlier.context().with_current(|| {
        // SAFETY: one out-parameter; the context is current.
        unsafe { driver!(cuEventCreate(&mut event, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING.0)) }?;
        // SAFETY: both handles are alive; captured, the record becomes the edge's source.
        unsafe { driver!(cuEventRecord(event, earlier.as_raw())) }
    })?;
    // SAFETY: both are alive; captured, the wait adds the edge.
    let waited = later
        .bind_if_default()
        .and_then(|()| unsafe { driver!(cuStreamWaitEvent(later.as_raw(), event, 0)) });
    // SAFETY: created above, destroyed once.
    let destroyed = unsafe { driver!(cuEventDestroy(event)) };
    waited.and(destroyed)
}

/// The release of memory that captured work uses, held by the graphs that captured it: it runs
/// when the last holder is gone (the buffer, the graph, its clones and child copies, its
/// executable graphs).
#[derive(Default)]
pub(crate) struct Retained {
    release: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl std::fmt::Debug for Retained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Retained")
    }
}

impl Retained {
    /// Hands the memory's release over, to run once the last holder is gone.
    pub(crate) fn deposit(&self, release: Box<dyn FnOnce() + Send>) {
        *self.release.lock().unwrap_or_else(PoisonError::into_inner) = Some(release);
    }
}

impl Drop for Retained {
    fn drop(&mut self) {
        if let Some(release) = self.release.get_mut().unwrap_or_else(PoisonError::into_inner).take() {
            release();
        }
    }
}

/// Orders the first use of memory on `stream`, being captured by `capture`, after the work
/// queued on the memory's own stream `own` before: at each launch, the graph waits for it.
///
/// * `own` outside any capture: an event recorded on it now, waited for by an external event
///   wait node (`CU_EVENT_WAIT_EXTERNAL`) on `stream`; the graph keeps the event.
/// * `own` is the stream the capture began on, or joined it through [`Stream::wait_event`]: the
///   event recorded there just before the capture began (or it joined), waited for the same way.
/// * `own` joined the capture otherwise (a raw wait), or is captured by another one: its work
///   queued before cannot be named from the capture, and the use is refused.
pub(crate) fn order_captured_use(stream: &Stream, own: &Stream, capture: CaptureRef) -> Result<()> {
    match capture_of(own)? {
        Some(c) if c == capture && capture.knows_before(own) => capture.wait_before(stream, own),
        Some(_) => Err(Error::refused(
            crate::error::Reason::DURING_CAPTURE,
            "captured use",
            "the memory's own stream is captured too, but it joined the capture other than through \
             Stream::wait_event (or it is in another capture), so the work queued on the memory there before \
             cannot be waited for at the graph's launches; join streams with Stream::wait_event, or allocate \
             or move (set_stream) the memory on the capture's first stream or a stream outside the capture",
        )),
        None if own.is_other_threads() => own.synchronize_for_release(),
        None => {
            let event = Event::new(own.context(), EventFlags::DISABLE_TIMING)?;
            own.bind_if_default()?;
            let external = sys::CUevent_wait_flags::CU_EVENT_WAIT_EXTERNAL.0;
            // SAFETY: both handles are alive. `own` is not captured by a capture of this crate;
            // one begun by a raw call would capture the record, and the driver then refuses the
            // external wait of an event recorded in another capture.
            unsafe { driver!(cuEventRecord(event.as_raw(), own.as_raw())) }?;
            stream.bind_if_default()?;
            // SAFETY: both handles are alive; the graph keeps the event (noted below).
            unsafe { driver!(cuStreamWaitEvent(stream.as_raw(), event.as_raw(), external)) }?;
            capture.note(Arc::new(event));
            Ok(())
        }
    }
}
