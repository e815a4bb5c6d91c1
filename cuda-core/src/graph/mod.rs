//! CUDA graphs: work recorded once (by stream capture or node by node) and launched many
//! times for the cost of one launch.
//!
//! See the [Graph Management](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)
//! and [Stream Management](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)
//! sections of the driver API.
//!
//! * **Capture** ([`Stream::begin_capture`](crate::stream::Stream::begin_capture)): the work queued on
//!   a stream between the start and [`Capture::end`] becomes a [`Graph`] instead of running.
//! * **Explicit construction** ([`Graph::new`]): nodes of every kind — kernel, memcpy, memset,
//!   host closure, child graph, empty, event record and wait, external-semaphore signal and
//!   wait, memory allocation and free, batch
//!   memory operations, and conditional (IF, IF/ELSE, WHILE, SWITCH) — each added after the nodes it depends on.
//! * **Executable graphs** ([`Graph::instantiate`] → [`GraphExec`]): launched on a stream,
//!   uploaded ahead of time, updated as a whole from another graph of the same shape
//!   ([`GraphExec::update`], whose refusal is [`Error::GraphUpdate`](crate::error::Error::GraphUpdate))
//!   or node by node (kernel arguments, memsets, memcpys, events, enabling and disabling).
//! * **Graph memory**: what allocation nodes use and hold per device ([`memory_usage`]), and
//!   [`trim_memory`] to give the cached part back.
//!
//! # What a graph keeps alive
//!
//! A graph refers to things by address or handle: device memory, host closures, modules,
//! events, child graphs. The driver does not own them, so this crate keeps them alive for it:
//!
//! * Every graph holds a **keep-alive list** of shared values (`Arc`s). Nodes added by safe
//!   calls put what they refer to on it: the buffers of a memset or memcpy node (given as
//!   [`GraphSlice`]s of an `Arc<DeviceBuffer>`), the closure of a host node, the event of an
//!   event node, the list of a child graph. A capture puts on it what the safe calls captured
//!   use: the cells through which device and pinned buffers hand it their release when dropped,
//!   the events its launches wait for, replayable host closures (the rule's capture section in
//!   `track` says how). [`Graph::keep`] puts anything else on it.
//! * Every [`GraphExec`] instantiated from a graph (or updated from it) shares its list. A
//!   clone of a graph, and a graph that holds it as a child, copy its nodes and hold a
//!   snapshot of its list as it is at that moment: what the copied nodes refer to. (Holding
//!   snapshots rather than the live list means two graphs made children of each other do not
//!   keep each other alive.) The values are dropped once the graph and all of these are gone.
//! * A value an executable graph's node setter replaces ([`GraphExec::set_memcpy_node`] and
//!   the like, [`GraphExec::update`]) is let go of once a later launch is known to be
//!   complete (or at once, if the executable graph was never launched): re-pointing a node in
//!   a loop does not accumulate buffers.
//! * A [`GraphExec`] that has been launched waits, when dropped, for the work queued in its
//!   context before it drops the values it keeps (if it keeps any): a buffer is never given
//!   back while a launch may still use it.
//!
//! What cannot be tracked is `unsafe` and says so:
//!
//! * **Kernel nodes** ([`Graph::add_kernel_node`], [`GraphExec::set_kernel_node_args`]) take
//!   arguments as [`launch`](crate::launch) does: the types cannot be checked, and the memory
//!   the arguments point to, and the module or library of the kernel, must stay alive as long as the
//!   graph and its executables may run. Hand them to [`Graph::keep`] (an `Arc<Module>`, an
//!   `Arc<DeviceBuffer<T>>`) and the graph holds them for exactly that long. The same holds of
//!   kernels launched on a capturing stream, beyond the crate's buffers and views passed as
//!   arguments, which the capture holds.
//! * Raw addresses ([`GraphSlice::from_raw`], the memory of allocation nodes) are the caller's.
//!
//! Launching an executable graph is then safe: whatever it refers to is alive.
//!
//! # Threads
//!
//! The driver does not synchronize access to a graph or an executable graph, so [`Graph`] and
//! [`GraphExec`] are `Send` but not `Sync`: one thread at a time builds, updates or launches
//! each. The bodies of conditional nodes borrow their graph and stay on its thread.
//!
//! # Example
//!
//! ```no_run
//! use cuhost::graph::{CaptureMode, Graph, GraphSlice, InstantiateFlags};
//! use cuhost::{Context, Device, DeviceBuffer, Stream, StreamFlags};
//! use std::sync::Arc;
//! # fn main() -> cuhost::Result<()> {
//! let ctx = Context::primary(&Device::get(0)?)?;
//! let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
//! let data = Arc::new(DeviceBuffer::<u32>::zeroed(&stream, 1024)?);
//! stream.synchronize()?;
//!
//! // Explicitly: a memset, then a copy that depends on it.
//! let copy = Arc::new(DeviceBuffer::<u32>::zeroed(&stream, 1024)?);
//! let graph = Graph::new(&ctx)?;
//! let fill = graph.add_memset_node(&[], &GraphSlice::whole(&data), 7u32)?;
//! graph.add_memcpy_node(&[fill], &GraphSlice::whole(&copy), &GraphSlice::whole(&data))?;
//! let exec = graph.instantiate(InstantiateFlags::empty())?;
//! exec.launch(&stream)?;
//! stream.synchronize()?;
//! assert_eq!(copy.to_vec()?, vec![7; 1024]);
//!
//! // By capture: the work queued between begin and end is recorded, not run; the graph holds
//! // what it uses.
//! let mut out = DeviceBuffer::<u32>::zeroed(&stream, 1024)?;
//! let capture = stream.begin_capture(CaptureMode::ThreadLocal)?;
//! out.view_mut().memset_d32_async(3, &stream)?;
//! let graph = capture.end()?;
//! graph.instantiate(InstantiateFlags::empty())?.launch(&stream)?;
//! stream.synchronize()?;
//! assert_eq!(out.to_vec()?, vec![3; 1024]);
//! # Ok(()) }
//! ```

mod buffer;
mod capture;
mod conditional;
mod dot;
mod edit;
mod exec;
#[cfg(feature = "interop")]
mod external;
#[cfg(feature = "interop")]
mod external_edit;
mod host;
mod host_capture;
#[cfg(cuda_headers_13_1)]
mod ids;
mod keep;
mod kernel;
mod memops;
mod memory;
mod memory_usage;
mod node;
mod params;
mod pinned_copy;
mod user_object;

pub use crate::memory::{PinnedSlice, PinnedSliceMut};
pub use buffer::GraphBuffer;
pub use capture::{Capture, CaptureInfo, CaptureMode, CaptureToGraph, exchange_capture_mode};
pub use conditional::{ConditionalHandle, ConditionalKind, ConditionalNode};
pub use dot::DotFlags;
pub use edit::{Edge, NodeKey};
pub use exec::{GraphExec, InstantiateFlags};
#[cfg(feature = "interop")]
pub use external_edit::SemaphoreNodeEntry;
pub use kernel::NodeKernel;
pub use memory::GraphSlice;
pub use memory_usage::{GraphMemoryUsage, memory_usage, reset_memory_high_watermarks, trim_memory};
pub use node::{EdgeKind, GraphNode, NodeType};
pub use params::{HostNodeParams, KernelNodeParams, MemAllocNodeParams, MemcpyNodeParams, MemsetNodeParams};
pub use pinned_copy::SharedPinnedBuffer;
pub use user_object::UserObject;

use crate::context::Context;
use crate::error::Result;
use cuhost_driver_sys as sys;
use keep::KeepAlive;
use std::any::Any;
use std::marker::PhantomData;
use std::sync::Arc;

/// A CUDA graph (`CUgraph`): nodes and the dependencies between them, destroyed on drop.
///
/// Made empty with [`Graph::new`] and filled with the `add_*_node` methods, or made by stream
/// capture ([`Capture::end`]); run by instantiating it ([`Graph::instantiate`]). Nodes are
/// added through `&self`, and a [`GraphNode`] borrows the graph it belongs to.
///
/// A graph keeps alive what its nodes refer to (see [the module documentation](self)).
pub struct Graph {
    raw: sys::CUgraph,
    ctx: Context,
    /// Whether this value destroys the graph: false for the body graphs of conditional nodes,
    /// which belong to the node.
    owned: bool,
    keep: Arc<KeepAlive>,
}

// SAFETY: a graph may be used from any thread, one at a time; `Graph` is not `Sync`, and the
// keep-alive list holds only `Send + Sync` values.
unsafe impl Send for Graph {}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph").field("raw", &self.raw).field("owned", &self.owned).finish()
    }
}

impl Graph {
    /// Creates an empty graph whose nodes run in `ctx`
    /// ([`cuGraphCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    pub fn new(ctx: &Context) -> Result<Graph> {
        ctx.enter()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: one out-parameter; flags must be 0.
        unsafe { driver!(cuGraphCreate(&mut raw, 0)) }?;
        Ok(Graph::adopt(ctx, raw, Arc::new(KeepAlive::default())))
    }

    /// Wraps a graph this value will own and destroy.
    fn adopt(ctx: &Context, raw: sys::CUgraph, keep: Arc<KeepAlive>) -> Graph {
        Graph { raw, ctx: ctx.clone(), owned: true, keep }
    }

    /// Takes ownership of a raw graph: it is destroyed on drop. Its keep-alive list starts
    /// empty: what its nodes refer to is the caller's to keep alive (see [`Graph::keep`]).
    ///
    /// # Safety
    ///
    /// `raw` must be a live graph whose nodes run in `ctx`, owned by nothing else.
    pub unsafe fn from_raw(ctx: &Context, raw: sys::CUgraph) -> Graph {
        Graph::adopt(ctx, raw, Arc::new(KeepAlive::default()))
    }

    /// The raw `CUgraph`.
    #[inline]
    pub fn as_raw(&self) -> sys::CUgraph {
        self.raw
    }

    /// The context the graph's nodes run in.
    #[inline]
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Keeps `value` alive as long as this graph, the clones made of it and the graphs that
    /// take it as a child from now on, and every executable graph made from any of them: the
    /// way to tie a module, a buffer (`Arc<DeviceBuffer<T>>`) or anything else a kernel node
    /// or captured work uses to the graph's life. Keep what a node uses before copying the
    /// graph (a clone or a child copies the graph's nodes and the values kept so far).
    pub fn keep<T: Any + Send + Sync>(&self, value: T) {
        self.keep.push(Arc::new(value));
    }

    /// The number of values the graph keeps alive, what a clone or child graph copied counted
    /// as one each.
    pub fn kept_count(&self) -> usize {
        self.keep.len()
    }

    /// A copy of the graph with all its nodes
    /// ([`cuGraphClone`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    /// The copy keeps alive what this graph keeps alive now (values kept later are not its
    /// concern: its nodes are copies of the ones that exist now). Nodes of the copy are found
    /// with [`Graph::find_in_clone`].
    pub fn try_clone(&self) -> Result<Graph> {
        self.ctx.enter()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: `self.raw` is a live graph; one out-parameter.
        unsafe { driver!(cuGraphClone(&mut raw, self.raw)) }?;
        let keep = Arc::new(KeepAlive::default());
        keep.push(self.keep.snapshot());
        Ok(Graph::adopt(&self.ctx, raw, keep))
    }

    /// The node of this graph, a clone made by [`try_clone`](Self::try_clone), that copies
    /// `original`, a node of the graph it was cloned from
    /// ([`cuGraphNodeFindInClone`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    pub fn find_in_clone(&self, original: GraphNode<'_>) -> Result<GraphNode<'_>> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: both handles are live; one out-parameter. The driver checks the relation.
        unsafe { driver!(cuGraphNodeFindInClone(&mut raw, original.as_raw(), self.raw)) }?;
        Ok(GraphNode::wrap(raw))
    }

    /// A non-owning view of a graph that belongs to something else (a conditional node's
    /// body), sharing `keep`.
    fn borrowed(ctx: &Context, raw: sys::CUgraph, keep: Arc<KeepAlive>) -> Graph {
        Graph { raw, ctx: ctx.clone(), owned: false, keep }
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        if self.owned {
            let raw = self.raw;
            // SAFETY: this value owns the graph; executable graphs made from it are independent.
            self.ctx.with_current_for_drop("Graph", || unsafe { driver!(cuGraphDestroy(raw)) });
        }
    }
}

/// A graph that belongs to a node of another graph (the body of a conditional node): it is
/// filled through the same methods as any [`Graph`] (it dereferences to one), is destroyed
/// with its node, and cannot outlive the graph it was taken from.
pub struct BodyGraph<'g> {
    graph: Graph,
    _parent: PhantomData<&'g Graph>,
}

impl std::fmt::Debug for BodyGraph<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("BodyGraph").field(&self.graph.raw).finish()
    }
}

impl std::ops::Deref for BodyGraph<'_> {
    type Target = Graph;
    fn deref(&self) -> &Graph {
        &self.graph
    }
}
