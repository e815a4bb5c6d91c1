//! Which streams are being captured into a graph, and what the work captured there uses: work
//! queued on a capturing stream runs at the graph's launches, not now, so what tracks work in
//! flight (device and pinned buffers, the cross-stream rule) must not record it as queued, and
//! what it uses is handed to the graph the capture makes (see [the rule](crate::track)).

use super::Stream;
use crate::error::{Error, Result};
use crate::event::{Event, EventFlags};
use cuhost_driver_sys as sys;
use std::any::Any;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Something captured work uses, handed to the capture's graph when the capture ends (the
/// graph keeps it, and looks into it at instantiation).
pub(crate) type Taken = Arc<dyn Any + Send + Sync>;

/// How many captures begun through this crate are under way: while none is, no stream is
/// asked whether it is capturing (one atomic load on the copy path).
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// Bumped as each capture ends (before the driver ends it): a use noted in a capture while the
/// count read the same is still in that capture, so it need not ask the driver again.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// The captures under way, by id, until they end.
static CAPTURES: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

/// One capture under way.
struct Entry {
    id: u64,
    /// The stream it was begun on (its raw handle, as an address).
    origin: usize,
    /// An event recorded on the origin stream just before the capture began: the work queued
    /// there before, which captured work on memory of that stream must wait for at each launch.
    before: Option<Arc<Event>>,
    /// For each stream that joined the capture through [`Stream::wait_event`] (its raw handle,
    /// as an address): an event recorded on it just before it joined, covering the work queued
    /// there before, which captured work on memory of that stream waits for at each launch.
    joined: Vec<(usize, Arc<Event>)>,
    /// What the captured work took so far.
    taken: Vec<Taken>,
    /// The memory allocated by the capture (graph memory nodes), to free in the graph when it
    /// ends ([`GraphAlloc`](crate::track::GraphAlloc)s, held weakly).
    allocations: Vec<std::sync::Weak<crate::track::GraphAlloc>>,
    /// The streams other than the origin on which a drop captured a free node: joined back
    /// into the origin at the end, so that a free the user never sees cannot leave its stream
    /// unjoined.
    freed_on: Vec<Stream>,
    /// The addresses of what [`CaptureRef::note_once`] handed over, each once.
    once: std::collections::HashSet<usize>,
}

fn captures() -> MutexGuard<'static, Vec<Entry>> {
    CAPTURES.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A capture under way, as work queued on one of its streams sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CaptureRef(u64);

impl CaptureRef {
    /// The capture's process-unique id.
    #[inline]
    pub(crate) fn id(self) -> u64 {
        self.0
    }

    /// Hands `item` to the graph the capture makes.
    pub(crate) fn note(&self, item: Taken) {
        if let Some(entry) = captures().iter_mut().find(|e| e.id == self.0) {
            entry.taken.push(item);
        } else {
            // The capture ended meanwhile (another thread ended it): the work queued on its
            // stream since is real, and what it uses is kept for good rather than let go early.
            std::mem::forget(item);
        }
    }

    /// Hands `item` to the graph the capture makes, unless it was handed already (the same
    /// `Arc`): for what many captured calls share, such as a module's code.
    pub(crate) fn note_once(&self, item: Taken) {
        let mut all = captures();
        let Some(entry) = all.iter_mut().find(|e| e.id == self.0) else {
            drop(all);
            return self.note(item);
        };
        let key = Arc::as_ptr(&item).cast::<()>() as usize;
        if entry.once.insert(key) {
            entry.taken.push(item);
        }
    }

    /// Registers memory allocated by the capture, to be freed in the graph at its end if it is
    /// still allocated then.
    pub(crate) fn note_allocation(&self, alloc: &Arc<crate::track::GraphAlloc>) {
        if let Some(entry) = captures().iter_mut().find(|e| e.id == self.0) {
            entry.allocations.retain(|a| a.strong_count() > 0);
            entry.allocations.push(Arc::downgrade(alloc));
        }
    }

    /// Notes that a free node was captured on `stream`, to be joined back into the capture's
    /// first stream at the end.
    pub(crate) fn note_free_on(&self, stream: &Stream) {
        if let Some(entry) = captures().iter_mut().find(|e| e.id == self.0) {
            if entry.origin != stream.as_raw() as usize && !entry.freed_on.contains(stream) {
                entry.freed_on.push(stream.clone());
            }
        }
    }

    /// Notes that `stream` joined the capture after `before` was recorded on it (the work it had
    /// queued until then).
    pub(crate) fn note_joined(&self, stream: &Stream, before: Event) {
        if let Some(entry) = captures().iter_mut().find(|e| e.id == self.0) {
            let key = stream.as_raw() as usize;
            if !entry.joined.iter().any(|(s, _)| *s == key) {
                entry.joined.push((key, Arc::new(before)));
            }
        }
    }

    /// Whether the work queued on `own` before it took part in the capture can be waited for
    /// at the graph's launches: it is the origin stream, or it joined through this crate.
    pub(crate) fn knows_before(&self, own: &Stream) -> bool {
        let key = own.as_raw() as usize;
        captures()
            .iter()
            .any(|e| e.id == self.0 && (e.origin == key || e.joined.iter().any(|(s, _)| *s == key)))
    }

    /// Makes the work captured on `stream` from now on wait, at each launch, for the work queued
    /// on `own` (the origin stream, or one that joined through this crate) before it took part
    /// in the capture: an external event wait node (`CU_EVENT_WAIT_EXTERNAL`) on the event
    /// recorded then, which the graph keeps.
    pub(crate) fn wait_before(&self, stream: &Stream, own: &Stream) -> Result<()> {
        let key = own.as_raw() as usize;
        let before = captures().iter().find(|e| e.id == self.0).and_then(|e| {
            if e.origin == key {
                e.before.clone()
            } else {
                e.joined.iter().find(|(s, _)| *s == key).map(|(_, ev)| Arc::clone(ev))
            }
        });
        let Some(before) = before else {
            return Err(Error::invalid("capture", "the capture ended while work was being queued on it"));
        };
        let external = sys::CUevent_wait_flags::CU_EVENT_WAIT_EXTERNAL.0;
        stream.bind_if_default()?;
        // SAFETY: both handles are live; the graph keeps the event (noted below).
        unsafe { driver!(cuStreamWaitEvent(stream.as_raw(), before.as_raw(), external)) }?;
        self.note(before);
        Ok(())
    }
}

/// The count of captures that ended (see [`GENERATION`]).
#[inline]
pub(crate) fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

/// The capture `id` is about to end: uses noted in it are looked at again from now on, and
/// the memory it allocated that no free node frees is gone from the buffers that hold it.
pub(crate) fn closing(id: u64) {
    GENERATION.fetch_add(1, Ordering::AcqRel);
    for alloc in allocations_of(id) {
        alloc.capture_ended();
    }
}

/// Whether any capture begun through this crate is under way, in the process: one atomic load.
#[inline]
pub(crate) fn any() -> bool {
    ACTIVE.load(Ordering::Acquire) != 0
}

/// The memory the capture `id` allocated that is still alive.
pub(crate) fn allocations_of(id: u64) -> Vec<Arc<crate::track::GraphAlloc>> {
    captures()
        .iter()
        .find(|e| e.id == id)
        .map(|e| e.allocations.iter().filter_map(std::sync::Weak::upgrade).collect())
        .unwrap_or_default()
}

/// The streams on which drops captured free nodes in the capture `id` (see
/// [`CaptureRef::note_free_on`]).
pub(crate) fn freed_on(id: u64) -> Vec<Stream> {
    captures().iter().find(|e| e.id == id).map(|e| e.freed_on.clone()).unwrap_or_default()
}

/// Whether the capture `id` is still under way.
pub(crate) fn is_active(id: u64) -> bool {
    captures().iter().any(|e| e.id == id)
}

/// The capture `stream` takes part in, if any: one begun through this crate (captures begun
/// through raw calls are not seen). Costs one atomic load while no capture is under way.
#[inline]
pub(crate) fn capture_of(stream: &Stream) -> Result<Option<CaptureRef>> {
    if !any() {
        return Ok(None);
    }
    ours(stream)
}

/// [`capture_of`] while some capture is under way.
#[cold]
#[inline(never)]
fn ours(stream: &Stream) -> Result<Option<CaptureRef>> {
    let Some(id) = capture_id(stream)? else { return Ok(None) };
    // A capture begun by a raw call is not ours: its contract is its caller's.
    Ok(captures().iter().any(|e| e.id == id).then_some(CaptureRef(id)))
}

/// The id of the capture `stream` takes part in, if it is capturing.
#[cold]
fn capture_id(stream: &Stream) -> Result<Option<u64>> {
    stream.bind_if_default()?;
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut id = 0;
    // SAFETY: the stream is live; two out-parameters, null for what is not asked.
    unsafe {
        driver!(cuStreamGetCaptureInfo(
            stream.as_raw(),
            &mut status,
            &mut id,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        ))
    }?;
    Ok((status == sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE).then_some(id))
}

/// Begins a capture with `begin` (a `cuStreamBeginCapture` call on `stream`), counted as under
/// way from before the call, and returns its id. Each success is matched by one [`ended`].
///
/// An event is recorded on `stream` just before: captured work on memory ordered on `stream`
/// waits for it at each launch (the work queued there before the capture, which a launch on
/// another stream would not otherwise follow).
pub(crate) fn begin(stream: &Stream, begin: impl FnOnce() -> Result<()>) -> Result<u64> {
    let before = Event::new(stream.context(), EventFlags::DISABLE_TIMING)
        .and_then(|e| e.record(stream).map(|()| Arc::new(e)))?;
    ACTIVE.fetch_add(1, Ordering::AcqRel);
    // Under the table's lock, so that a thread that sees the stream capturing (from the driver)
    // finds the capture listed: work it queues there is tracked as captured.
    let mut all = captures();
    let begun = begin().and_then(|()| capture_id(stream));
    let id = match begun {
        Ok(Some(id)) => id,
        Ok(None) => {
            ACTIVE.fetch_sub(1, Ordering::AcqRel);
            return Err(Error::invalid(
                "begin_capture",
                "the stream is not capturing after cuStreamBeginCapture",
            ));
        }
        Err(e) => {
            ACTIVE.fetch_sub(1, Ordering::AcqRel);
            return Err(e);
        }
    };
    all.push(Entry {
        id,
        origin: stream.as_raw() as usize,
        before: Some(before),
        joined: Vec::new(),
        taken: Vec::new(),
        allocations: Vec::new(),
        freed_on: Vec::new(),
        once: std::collections::HashSet::new(),
    });
    Ok(id)
}

/// The capture `id`, begun with [`begin`], has ended (or failed): returns what its work took.
/// The memory it allocated that no free node frees is marked as gone from the buffers that
/// hold it: it exists only within the graph's launches.
pub(crate) fn ended(id: u64) -> Vec<Taken> {
    let entry = {
        let mut all = captures();
        let found = all.iter().position(|e| e.id == id);
        found.map(|i| all.swap_remove(i))
    };
    ACTIVE.fetch_sub(1, Ordering::AcqRel);
    let Some(entry) = entry else { return Vec::new() };
    for alloc in entry.allocations.iter().filter_map(std::sync::Weak::upgrade) {
        alloc.capture_ended();
    }
    entry.taken
}
