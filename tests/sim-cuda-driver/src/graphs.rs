//! Stream capture and graphs: work queued on a capturing stream is recorded as a node of the
//! capture's graph (with the ranges it reads and writes) instead of queued; an executable
//! graph is a copy of a graph's nodes, and a launch queues them on the stream in the order the
//! capture recorded them, each checked as the work it stands for.
//!
//! A capture is linear (one stream; a stream joining it through an event is not supported).
//! An external event wait (`CU_EVENT_WAIT_EXTERNAL`) of an event recorded outside the capture
//! is a node that waits, at each launch, for that record. Allocation and free nodes
//! (`cuMemAllocAsync`, `cuMemFreeAsync` while capturing) are nodes that do nothing: the memory
//! is allocated when the allocation node is captured and stays allocated.
//! What the driver refuses while capturing is refused here too, with its status: a
//! synchronization of the capturing stream (which also invalidates the capture), a wait for an
//! event recorded outside the capture (`CUDA_ERROR_STREAM_CAPTURE_ISOLATION`), and, from a
//! thread that may not make them, the calls that are unsafe during a capture in global or
//! thread-local mode (`cuCtxSynchronize`, `cuMemAlloc`, `cuMemFree`, `cuMemHostAlloc`,
//! `cuMemFreeHost`).

use crate::checker::Range;
use crate::engine::{Sim, Work};
use std::cell::Cell;
use std::ffi::c_uint;

/// `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`.
pub const CAPTURE_UNSUPPORTED: i32 = 900;
/// `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`.
pub const CAPTURE_INVALIDATED: i32 = 901;
/// `CUDA_ERROR_STREAM_CAPTURE_ISOLATION`.
pub const CAPTURE_ISOLATION: i32 = 905;
/// `CUDA_ERROR_CAPTURED_EVENT`.
pub const CAPTURED_EVENT: i32 = 907;
/// `CUDA_ERROR_ILLEGAL_STATE`.
pub const ILLEGAL_STATE: i32 = 401;

/// `CU_STREAM_CAPTURE_MODE_GLOBAL`, `_THREAD_LOCAL`, `_RELAXED`.
pub const MODE_GLOBAL: c_uint = 0;
/// `CU_STREAM_CAPTURE_MODE_THREAD_LOCAL`.
pub const MODE_THREAD_LOCAL: c_uint = 1;
/// `CU_STREAM_CAPTURE_MODE_RELAXED`.
pub const MODE_RELAXED: c_uint = 2;

thread_local! {
    /// The calling thread's capture mode (`cuThreadExchangeStreamCaptureMode`).
    static THREAD_MODE: Cell<c_uint> = const { Cell::new(MODE_GLOBAL) };
}

/// Sets the calling thread's capture mode and returns the old one.
pub fn exchange_thread_mode(mode: c_uint) -> c_uint {
    THREAD_MODE.with(|m| m.replace(mode))
}

/// One recorded operation: what it does and what it reads and writes.
#[derive(Clone, Debug)]
pub struct Node {
    /// The work.
    pub work: Work,
    /// The ranges it reads.
    pub reads: Vec<Range>,
    /// The ranges it writes.
    pub writes: Vec<Range>,
    /// The record an external event wait node waits for at each launch.
    pub after: Option<(usize, crate::clock::VectorClock)>,
    /// The owner (epoch) of each range of `reads` then `writes` when the work was captured:
    /// a launch checks that the memory still has that owner.
    pub epochs: Vec<u64>,
}

/// A capture under way on a stream.
#[derive(Debug)]
pub struct Capture {
    /// The capture's id.
    pub id: u64,
    /// The graph it records into.
    pub graph: u64,
    mode: c_uint,
    /// The host agent of the thread that began it.
    host: usize,
    /// Whether a refused call broke it.
    pub invalid: bool,
    /// The node the next captured work depends on, for `cuStreamGetCaptureInfo` (boxed: the
    /// driver hands out a pointer to it).
    pub deps: Box<[u64; 1]>,
}

/// How a stream takes a piece of work: queued, or recorded into a capture.
pub enum Taken {
    /// Not capturing: queue it.
    Queue,
    /// Recorded (or refused with this status).
    Done(i32),
}

impl Sim {
    /// Begins a capture on stream `handle` in `mode`.
    pub fn begin_capture(&mut self, handle: u64, mode: c_uint) -> i32 {
        let host = self.host();
        let (id, graph) = (self.new_handle(), self.new_handle());
        let Some(stream) = self.stream_mut(handle) else { return crate::INVALID_HANDLE };
        if stream.capture.is_some() {
            return ILLEGAL_STATE;
        }
        stream.capture = Some(Capture { id, graph, mode, host, invalid: false, deps: Box::new([0]) });
        self.graphs.insert(graph, Vec::new());
        crate::SUCCESS
    }

    /// Ends the capture on stream `handle`: its graph, or the status of the failure (the
    /// capture ends either way, and an invalidated one's graph is destroyed).
    pub fn end_capture(&mut self, handle: u64) -> Result<u64, i32> {
        let Some(stream) = self.stream_mut(handle) else { return Err(crate::INVALID_HANDLE) };
        let Some(capture) = stream.capture.take() else { return Err(ILLEGAL_STATE) };
        if capture.invalid {
            self.graphs.remove(&capture.graph);
            return Err(CAPTURE_INVALIDATED);
        }
        Ok(capture.graph)
    }

    /// The capture of stream `handle`, if any; `None` for an unknown stream.
    pub fn capture_of(&mut self, handle: u64) -> Option<Option<&Capture>> {
        self.stream_mut(handle).map(|s| s.capture.as_ref())
    }

    /// How stream `handle` takes `work`: recorded into its capture when it is capturing.
    pub fn capture_work(&mut self, handle: u64, work: Work, reads: &[Range], writes: &[Range]) -> Taken {
        let node_id = self.new_handle();
        let Some(stream) = self.stream_mut(handle) else { return Taken::Done(crate::INVALID_HANDLE) };
        let Some(capture) = stream.capture.as_mut() else { return Taken::Queue };
        if capture.invalid {
            return Taken::Done(CAPTURE_INVALIDATED);
        }
        capture.deps[0] = node_id;
        let graph = capture.graph;
        let epochs = reads.iter().chain(writes).map(|r| self.checker.epoch_of(r.start)).collect();
        let node = Node { work, reads: reads.to_vec(), writes: writes.to_vec(), after: None, epochs };
        self.graphs.entry(graph).or_default().push(node);
        Taken::Done(crate::SUCCESS)
    }

    /// Records into the capture of stream `handle` a node that waits, at each launch, for
    /// `after` (an external event wait); refused when the stream is not capturing.
    pub fn capture_wait(&mut self, handle: u64, after: Option<(usize, crate::clock::VectorClock)>) -> i32 {
        match self.capture_work(handle, Work::Mark, &[], &[]) {
            Taken::Done(crate::SUCCESS) => {}
            Taken::Done(status) => return status,
            Taken::Queue => return ILLEGAL_STATE,
        }
        let graph = self.stream_mut(handle).and_then(|s| s.capture.as_ref()).map(|c| c.graph);
        if let Some(node) = graph.and_then(|g| self.graphs.get_mut(&g)).and_then(|nodes| nodes.last_mut()) {
            node.after = after;
        }
        crate::SUCCESS
    }

    /// Refuses a call that waits (or would make the stream wait) while it captures, and
    /// invalidates the capture, as the driver does; `None` when the stream is not capturing.
    pub fn refuse_if_capturing(&mut self, handle: u64) -> Option<i32> {
        let capture = self.stream_mut(handle)?.capture.as_mut()?;
        capture.invalid = true;
        Some(CAPTURE_UNSUPPORTED)
    }

    /// Whether a call that is unsafe during a capture (an implicit synchronization, an
    /// allocation that is not stream-ordered) is refused for the calling thread now; the
    /// captures it would break are invalidated.
    pub fn refuse_unsafe_call(&mut self) -> bool {
        if THREAD_MODE.with(Cell::get) == MODE_RELAXED {
            return false;
        }
        let host = self.host();
        let mut refused = false;
        for capture in self.captures_mut() {
            let applies = match capture.mode {
                MODE_GLOBAL => true,
                MODE_THREAD_LOCAL => capture.host == host,
                _ => false,
            };
            if applies {
                capture.invalid = true;
                refused = true;
            }
        }
        refused
    }

    /// Instantiates graph `graph`: an executable graph of its nodes as they are now.
    pub fn instantiate(&mut self, graph: u64) -> Option<u64> {
        let nodes = self.graphs.get(&graph)?.clone();
        let exec = self.new_handle();
        self.execs.insert(exec, nodes);
        Some(exec)
    }

    /// Destroys graph `graph`.
    pub fn destroy_graph(&mut self, graph: u64) -> bool {
        self.graphs.remove(&graph).is_some()
    }

    /// Destroys executable graph `exec` (launches in flight still run).
    pub fn destroy_exec(&mut self, exec: u64) -> bool {
        self.execs.remove(&exec).is_some()
    }

    /// Launches `exec` on stream `handle`: its nodes queued in their order (or, on a capturing
    /// stream, recorded into that capture).
    pub fn launch_graph(&mut self, exec: u64, handle: u64) -> i32 {
        let Some(nodes) = self.execs.get(&exec).cloned() else { return crate::INVALID_HANDLE };
        if !self.is_stream(handle) {
            return crate::INVALID_HANDLE;
        }
        for node in nodes {
            // A kernel node of a module unloaded since: the driver would run code that is gone.
            if let Work::Kernel(launch) = &node.work {
                if self.kernel_of(launch.function).is_none() {
                    return crate::INVALID_HANDLE;
                }
            }
            let ranges = node.reads.iter().chain(&node.writes);
            for (&range, &captured) in ranges.zip(&node.epochs) {
                let tracked = self.memory.is_tracked(range.start, range.end - range.start);
                if tracked && self.checker.epoch_of(range.start) != captured {
                    let host = self.host();
                    let site = self.checker.site(host, "cuGraphLaunch");
                    self.checker.stale_graph_access(range, captured, &site);
                }
            }
            let status = match node.after {
                Some(after) => {
                    match self.enqueue(handle, node.work, Some(after), "cuGraphLaunch", &[], &[]) {
                        Some(_) => crate::SUCCESS,
                        None => crate::INVALID_HANDLE,
                    }
                }
                None => self.submit(handle, node.work, "cuGraphLaunch", &node.reads, &node.writes),
            };
            if status != crate::SUCCESS {
                return status;
            }
        }
        crate::SUCCESS
    }
}
