//! Stream capture: the work queued on a stream recorded into a graph instead of run.

use super::keep::KeepAlive;
use super::{Graph, GraphNode};
use crate::error::{Error, Result};
use crate::stream::capturing::{self, Taken};
use crate::stream::{CaptureStatus, Stream};
use cuhost_driver_sys as sys;
use std::sync::Arc;

/// Which calls made while a stream is captured are refused because they could wait on the
/// work being captured (`CUstreamCaptureMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CaptureMode {
    /// `CU_STREAM_CAPTURE_MODE_GLOBAL`: refused on every thread while any capture in
    /// global mode is under way in the process (and on this thread while it captures in
    /// thread-local mode).
    Global,
    /// `CU_STREAM_CAPTURE_MODE_THREAD_LOCAL`: refused on this thread only.
    ThreadLocal,
    /// `CU_STREAM_CAPTURE_MODE_RELAXED`: not refused; the caller makes sure nothing waits on
    /// captured work.
    Relaxed,
}

impl CaptureMode {
    /// The raw value.
    pub fn as_raw(self) -> sys::CUstreamCaptureMode {
        use sys::CUstreamCaptureMode as M;
        match self {
            CaptureMode::Global => M::CU_STREAM_CAPTURE_MODE_GLOBAL,
            CaptureMode::ThreadLocal => M::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            CaptureMode::Relaxed => M::CU_STREAM_CAPTURE_MODE_RELAXED,
        }
    }
}

impl TryFrom<sys::CUstreamCaptureMode> for CaptureMode {
    type Error = Error;
    fn try_from(raw: sys::CUstreamCaptureMode) -> Result<CaptureMode> {
        use sys::CUstreamCaptureMode as M;
        match raw {
            M::CU_STREAM_CAPTURE_MODE_GLOBAL => Ok(CaptureMode::Global),
            M::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL => Ok(CaptureMode::ThreadLocal),
            M::CU_STREAM_CAPTURE_MODE_RELAXED => Ok(CaptureMode::Relaxed),
            other => Err(Error::invalid(
                "CaptureMode::try_from",
                format!("unknown CUstreamCaptureMode {}", other.0),
            )),
        }
    }
}

/// Sets the calling thread's capture mode, which decides what this thread may call while
/// another thread captures in global mode, and returns the previous one
/// ([`cuThreadExchangeStreamCaptureMode`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)).
/// Setting [`CaptureMode::Relaxed`] lets a thread make such calls; set the previous mode back
/// afterwards.
pub fn exchange_capture_mode(mode: CaptureMode) -> Result<CaptureMode> {
    let mut raw = mode.as_raw();
    // SAFETY: one in-out parameter.
    unsafe { driver!(cuThreadExchangeStreamCaptureMode(&mut raw)) }?;
    CaptureMode::try_from(raw)
}

/// Where a stream's capture stands
/// ([`cuStreamGetCaptureInfo`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CaptureInfo {
    /// Whether the stream is capturing.
    pub status: CaptureStatus,
    /// The capture's process-unique id, while capturing.
    pub id: Option<u64>,
    /// How many nodes the next captured work will depend on.
    pub dependencies: usize,
}

/// A capture under way on a stream, begun by [`Stream::begin_capture`]. [`end`](Self::end)
/// ends it and returns the graph; dropping it ends it and discards what was captured.
///
/// It holds its own handle of the stream and borrows nothing, so a stream kept in a struct
/// can be captured while the struct's `&mut self` methods queue the work:
///
/// ```no_run
/// use cuhost::graph::{CaptureMode, Graph};
/// use cuhost::{DeviceBuffer, Stream};
///
/// struct Step {
///     stream: Stream,
///     data: DeviceBuffer<u32>,
/// }
///
/// impl Step {
///     fn enqueue(&mut self) -> cuhost::Result<()> {
///         self.data.view_mut().memset_d32_async(7, &self.stream)
///     }
///
///     fn record(&mut self) -> cuhost::Result<Graph> {
///         // The graph holds `self.data` for as long as it and its executable graphs live.
///         let capture = self.stream.begin_capture(CaptureMode::ThreadLocal)?;
///         self.enqueue()?;
///         capture.end()
///     }
/// }
/// ```
#[derive(Debug)]
#[must_use = "the capture ends when this is dropped; call `end` to get the graph"]
pub struct Capture {
    active: Active,
}

impl Capture {
    /// The stream being captured.
    pub fn stream(&self) -> &Stream {
        &self.active.stream
    }

    /// Ends the capture ([`cuStreamEndCapture`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html))
    /// and returns the graph of the captured work. It holds what the work uses: the device
    /// buffers (their release waits for the graph), the [`PinnedBuffer`](crate::memory::PinnedBuffer)s
    /// (through their trackers, its executable graphs' launches are also ordered after the
    /// buffers' copies in flight and waited for by the host before it reads or writes them),
    /// host closures, and the events its launches wait for. Memory allocated in the capture and
    /// still alive is freed by a free node added now: outside the graph's launches such a
    /// buffer has no memory, and every use of it is refused.
    ///
    /// A capture broken by a call that is not allowed while capturing (for instance
    /// synchronizing the captured stream) fails here with `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`;
    /// so does ending on a stream that work of other streams joined but did not rejoin
    /// (`CUDA_ERROR_STREAM_CAPTURE_UNJOINED`). The stream is no longer capturing either way.
    pub fn end(mut self) -> Result<Graph> {
        let freed = self.active.free_allocations();
        let (raw, taken) = self.active.end();
        let graph = Graph::adopt(self.active.stream.context(), raw?, Arc::new(KeepAlive::default()));
        for item in taken {
            graph.keep.push(item);
        }
        // A graph whose memory could not all be freed in it is dropped (never launched).
        freed.map(|()| graph)
    }
}

/// A capture into an existing graph, begun by [`Stream::begin_capture_to_graph`].
/// [`end`](Self::end) ends it, the captured nodes staying in the graph; dropping it ends it
/// too (the nodes captured so far stay when the capture was valid, and the graph holds what
/// they use).
#[derive(Debug)]
#[must_use = "the capture ends when this is dropped"]
pub struct CaptureToGraph<'g> {
    active: Active,
    graph: &'g Graph,
}

impl Drop for CaptureToGraph<'_> {
    fn drop(&mut self) {
        if self.active.ended {
            return;
        }
        // Errors are not kept, as for a dropped `Capture`; the nodes that stay are whole.
        let _ = self.active.free_allocations();
        let (_, taken) = self.active.end();
        for item in taken {
            self.graph.keep.push(item);
        }
    }
}

impl CaptureToGraph<'_> {
    /// The stream being captured.
    pub fn stream(&self) -> &Stream {
        &self.active.stream
    }

    /// Ends the capture, as [`Capture::end`] does, with the nodes left in the graph.
    ///
    /// Fails as [`Capture::end`] does: with `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED` when a call
    /// not allowed during capture broke it, or `CUDA_ERROR_STREAM_CAPTURE_UNJOINED` when other
    /// streams' work joined and did not rejoin. The stream is no longer capturing either way.
    pub fn end(mut self) -> Result<()> {
        let freed = self.active.free_allocations();
        let (raw, taken) = self.active.end();
        // Whatever the outcome, nodes captured so far may stay in the graph: it holds what
        // they use.
        for item in taken {
            self.graph.keep.push(item);
        }
        raw?;
        freed
    }
}

impl<'g> CaptureToGraph<'g> {
    /// Makes the next captured work depend also on `nodes`, nodes of the graph captured into
    /// (`CU_STREAM_ADD_CAPTURE_DEPENDENCIES` of
    /// [`cuStreamUpdateCaptureDependencies`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)).
    ///
    /// Adding dependencies only adds order, so this is safe. A node of another graph is an
    /// [`Error::InvalidArgument`], checked before the call.
    pub fn add_dependencies(&self, nodes: &[GraphNode<'g>]) -> Result<()> {
        self.update(
            "CaptureToGraph::add_dependencies",
            nodes,
            sys::CUstreamUpdateCaptureDependencies_flags::CU_STREAM_ADD_CAPTURE_DEPENDENCIES,
        )
    }

    /// Makes the next captured work depend on `nodes` only, in place of what it would depend
    /// on in stream order (`CU_STREAM_SET_CAPTURE_DEPENDENCIES` of
    /// [`cuStreamUpdateCaptureDependencies`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)).
    ///
    /// A node of another graph is an [`Error::InvalidArgument`], checked before the call.
    ///
    /// # Safety
    ///
    /// The safe calls made while capturing order their work after the stream's earlier work
    /// (a kernel after the copy that fills its input, a free after the kernel that reads the
    /// memory). Work captured after this call is ordered only after `nodes`: the caller
    /// makes sure it does not use memory that work outside `nodes`' ancestors still writes,
    /// reads or frees.
    pub unsafe fn set_dependencies(&self, nodes: &[GraphNode<'g>]) -> Result<()> {
        self.update(
            "CaptureToGraph::set_dependencies",
            nodes,
            sys::CUstreamUpdateCaptureDependencies_flags::CU_STREAM_SET_CAPTURE_DEPENDENCIES,
        )
    }

    fn update(
        &self,
        operation: &'static str,
        nodes: &[GraphNode<'g>],
        flags: sys::CUstreamUpdateCaptureDependencies_flags,
    ) -> Result<()> {
        self.graph.check_nodes(operation, nodes)?;
        let stream = &self.active.stream;
        stream.bind_if_default()?;
        let mut raw: Vec<sys::CUgraphNode> = nodes.iter().map(GraphNode::as_raw).collect();
        // SAFETY: the stream is live and capturing into `graph`, whose live nodes `raw` holds;
        // no edge data.
        unsafe {
            driver!(cuStreamUpdateCaptureDependencies(
                stream.as_raw(),
                raw.as_mut_ptr(),
                std::ptr::null(),
                raw.len(),
                flags.0,
            ))
        }
    }
}

/// A stream being captured; ends the capture once, by `end` or on drop.
#[derive(Debug)]
struct Active {
    /// A handle of the stream being captured (a clone: the capture does not borrow the
    /// caller's, which may sit in a struct that the captured work also uses).
    stream: Stream,
    /// The capture's id.
    id: u64,
    /// Whether the graph the driver returns is a new one, which a dropped capture destroys.
    new_graph: bool,
    ended: bool,
}

impl Active {
    /// Frees, in the graph, the memory the capture allocated and that is still allocated: a
    /// free node on the stream of each allocation, joined into the capture's stream, and joins
    /// the streams of the free nodes captured earlier (see [the rule](crate::track)). Tries
    /// each and returns the first failure.
    fn free_allocations(&self) -> Result<()> {
        let allocations = capturing::allocations_of(self.id);
        let freed = allocations.iter().map(|a| a.free_at_end(&self.stream)).fold(Ok(()), Result::and);
        // The free nodes drops captured on other streams are joined back: the user cannot see
        // them to join them.
        let joined = capturing::freed_on(self.id)
            .iter()
            .map(|s| crate::track::join(&self.stream, s))
            .fold(Ok(()), Result::and);
        freed.and(joined)
    }

    /// Ends the capture of the stream and returns the driver's graph handle, and the pinned
    /// buffers the captured copies took.
    fn end(&mut self) -> (Result<sys::CUgraph>, Vec<Taken>) {
        self.ended = true;
        capturing::closing(self.id);
        let raw = self.stream.bind_if_default().and_then(|()| {
            let mut raw = std::ptr::null_mut();
            // SAFETY: the stream is live; one out-parameter.
            unsafe { driver!(cuStreamEndCapture(self.stream.as_raw(), &mut raw)) }.map(|()| raw)
        });
        (raw, capturing::ended(self.id))
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        // Discarding: an invalidated capture is what a caller that gave up expects, so errors
        // are not kept.
        if let (Ok(raw), _) = self.end() {
            if self.new_graph && !raw.is_null() {
                // SAFETY: the new graph is this capture's alone.
                let _ = unsafe { sys::cuGraphDestroy(raw) };
            }
        }
    }
}

impl Stream {
    /// Starts capturing this stream: work queued on it afterwards (and on streams that join
    /// it by waiting on an event recorded here) is recorded into a graph instead of run, until
    /// [`Capture::end`]
    /// ([`cuStreamBeginCapture`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)).
    ///
    /// Safe: the work is recorded now to run at every launch of the graph, later, and what the
    /// safe calls made while capturing use is kept alive by the graph and every executable
    /// graph made from it, and let go once the last of them is gone (after their launches have
    /// finished): device buffers and views, pinned buffers, host closures
    /// ([`launch_replayable_host_func`](Stream::launch_replayable_host_func)). Memory allocated
    /// on a capturing stream is the graph's own (an allocation node), freed in the graph. The
    /// rule, with what each launch waits for, is stated once in `track` (the crate's stream
    /// rule; the guide's graphs chapter tells it with examples). What cannot be held is
    /// refused on a capturing stream with an [`Error::InvalidArgument`](crate::Error): chunks
    /// of pinned buffers, arrays, VMM mappings and the other owners that wait for streams,
    /// external-semaphore signals and waits, `EXTERNAL` event records and waits, NCCL calls.
    /// Kernel launches stay `unsafe` (the arguments' types cannot be checked); the graph holds
    /// the module of a [`Function`](crate::Function) looked up in a [`Module`](crate::Module),
    /// and the launch's contract covers the rest: the library of a
    /// [`Kernel`](crate::Kernel), a function adopted from a raw handle, and what the arguments
    /// refer to beyond the crate's buffers and views ([`Graph::keep`] holds such things).
    ///
    /// Synchronous copies and other calls that wait break the capture: the driver refuses them
    /// and [`Capture::end`] then fails; nothing captured so far is left dangling. The futures of
    /// the `async` feature refuse a capturing stream; one made while its stream joins a capture
    /// on another thread may resolve before the work it covers runs (at the graph's launches):
    /// `to_vec_async` then resolves to zeros (its staging memory is zeroed), never to memory
    /// nothing wrote.
    pub fn begin_capture(&self, mode: CaptureMode) -> Result<Capture> {
        self.context().take_deferred()?;
        self.bind_if_default()?;
        let id = capturing::begin(self, || {
            // SAFETY: the stream is live.
            unsafe { driver!(cuStreamBeginCapture(self.as_raw(), mode.as_raw())) }
        })?;
        Ok(Capture { active: Active { stream: self.clone(), id, new_graph: true, ended: false } })
    }

    /// Starts capturing this stream into `graph`, the captured work depending on
    /// `dependencies` (nodes of `graph`)
    /// ([`cuStreamBeginCaptureToGraph`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html);
    /// driver 12.3 or later).
    ///
    /// Safe as [`begin_capture`](Self::begin_capture) is: `graph` holds what the captured work
    /// uses once the capture ends (by [`CaptureToGraph::end`] or by being dropped).
    pub fn begin_capture_to_graph<'g>(
        &self,
        graph: &'g Graph,
        dependencies: &[GraphNode<'_>],
        mode: CaptureMode,
    ) -> Result<CaptureToGraph<'g>> {
        self.context().take_deferred()?;
        self.bind_if_default()?;
        let id = capturing::begin(self, || {
            // SAFETY: the stream, the graph and the nodes are live; no edge data.
            unsafe {
                driver!(cuStreamBeginCaptureToGraph(
                    self.as_raw(),
                    graph.as_raw(),
                    super::node::raw_nodes(dependencies),
                    std::ptr::null(),
                    dependencies.len(),
                    mode.as_raw(),
                ))
            }
        })?;
        Ok(CaptureToGraph {
            active: Active { stream: self.clone(), id, new_graph: false, ended: false },
            graph,
        })
    }

    /// Where this stream's capture stands: status, id and the number of nodes the next
    /// captured work depends on
    /// ([`cuStreamGetCaptureInfo`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)).
    pub fn capture_info(&self) -> Result<CaptureInfo> {
        self.bind_if_default()?;
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let mut id = 0;
        let mut dependencies: *const sys::CUgraphNode = std::ptr::null();
        let mut count = 0;
        // SAFETY: the stream is live; out-parameters or null for what is not asked.
        unsafe {
            driver!(cuStreamGetCaptureInfo(
                self.as_raw(),
                &mut status,
                &mut id,
                std::ptr::null_mut(),
                &mut dependencies,
                std::ptr::null_mut(),
                &mut count,
            ))
        }?;
        let status = CaptureStatus::try_from(status)?;
        let capturing = status != CaptureStatus::None;
        Ok(CaptureInfo {
            status,
            id: capturing.then_some(id),
            dependencies: if capturing { count } else { 0 },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_round_trip_through_the_raw_values() {
        for mode in [CaptureMode::Global, CaptureMode::ThreadLocal, CaptureMode::Relaxed] {
            assert_eq!(CaptureMode::try_from(mode.as_raw()).ok(), Some(mode));
        }
        assert!(CaptureMode::try_from(sys::CUstreamCaptureMode(77)).is_err());
    }
}
