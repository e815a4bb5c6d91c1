//! [`GraphBuffer`]: the memory of an allocation node as a typed value that knows when a launch
//! has allocated it, so that it is freed once, in stream order after that launch, or by a free
//! node of its graph.
//!
//! What the driver requires of graph-allocated memory
//! ([Graph Memory Nodes](https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#graph-memory-nodes)),
//! and how each rule is kept:
//!
//! * The address is fixed when the node is added and is the same at every launch; the memory
//!   exists only from the allocation node of a launch until it is freed. A launch is what
//!   allocates it, so [`GraphBuffer::free_async`] is refused (an [`Error::InvalidArgument`])
//!   until a launch of an executable graph made from the graph was queued, and again after
//!   each free until the next launch: never a free before the allocation, never two frees of
//!   one allocation.
//! * Outside the graph the memory may be used, and freed, by work ordered after the launch.
//!   The buffer has a launch tracker (the one pinned buffers use: an event recorded after each
//!   launch, on the launch's stream): a free on another stream first waits for that event, and
//!   the next launch, on whatever stream, waits for the free.
//! * A launch of an executable graph whose allocations are still unfreed fails, unless it was
//!   instantiated with [`AUTO_FREE_ON_LAUNCH`](super::InstantiateFlags::AUTO_FREE_ON_LAUNCH),
//!   which frees them first in stream order. The launch is refused here before the driver is
//!   asked (and the driver refuses it as well); with the flag it goes on, and the tracker
//!   orders it after the work queued on the memory outside the graph.
//! * A graph with memory nodes cannot be cloned, used as a child, have nodes or edges removed,
//!   or have two executable graphs at once: the driver refuses each. So the dependencies a
//!   free node is given stay, and one executable graph at a time allocates the memory.
//! * A free node in the graph ([`Graph::add_buffer_free_node`]) frees the memory within every
//!   launch; it always depends on the allocation node. The buffer then cannot be freed outside
//!   the graph.
//!
//! What stays `unsafe` is what always was: a kernel node (or a kernel launched on a stream)
//! that takes the buffer as an argument must run after the allocation node and before the
//! memory is freed, as [`Graph::add_kernel_node`]'s contract says of every argument.

use super::keep::KeepAlive;
use super::{Graph, GraphNode};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::launch::KernelArg;
use crate::memory::{HostAccess, checked_bytes};
use crate::stream::{CaptureStatus, Stream};
use bytemuck::Pod;
use cuhost_driver_sys as sys;
use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

/// The allocation of an allocation node, as its graph's keep-alive list, its executable graphs
/// and its [`GraphBuffer`] share it.
#[derive(Debug)]
pub(crate) struct GraphMemory {
    ptr: sys::CUdeviceptr,
    ctx: Context,
    /// The tracker of the launches and of the free queued outside the graph.
    access: HostAccess,
    state: Mutex<MemoryState>,
}

#[derive(Debug, Default)]
struct MemoryState {
    /// The executable graph whose launch allocated the memory, while it is allocated.
    allocated_by: Option<u64>,
    /// Whether a free node of the graph frees it.
    freed_in_graph: bool,
}

impl GraphMemory {
    fn lock(&self) -> MutexGuard<'_, MemoryState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Device memory allocated by an allocation node of a graph
/// ([`Graph::add_buffer_alloc_node`]): `len` elements of `T` at an address that is the same at
/// every launch, which exist from the allocation node of a launch until they are freed.
///
/// It is passed to kernels (of the graph's kernel nodes, or of launches ordered after a
/// launch) as the device address of its first element (`&buffer` or `&mut buffer`, like a
/// [`DeviceBuffer`](crate::memory::DeviceBuffer)). It is freed in one of two ways:
///
/// * by a free node of the graph ([`Graph::add_buffer_free_node`]): every launch allocates and
///   frees it;
/// * outside the graph, after each launch, by [`free_async`](Self::free_async), which queues
///   `cuMemFreeAsync` in stream order after the launch. Until then a second launch of the
///   executable graph is refused (unless it was instantiated with
///   [`AUTO_FREE_ON_LAUNCH`](super::InstantiateFlags::AUTO_FREE_ON_LAUNCH)).
///
/// A free before any launch allocated the memory, a second free of one allocation, and a free
/// outside the graph of memory that a free node frees are each an [`Error::InvalidArgument`].
/// Dropping the buffer frees nothing: memory a launch allocated stays allocated (a later
/// launch of an executable graph made with `AUTO_FREE_ON_LAUNCH` frees it).
///
/// ```no_run
/// use cuhost::graph::{Graph, InstantiateFlags};
/// use cuhost::{Context, Device, LaunchConfig, Module, Stream, StreamFlags};
/// # fn main() -> cuhost::Result<()> {
/// # let ptx = "";
/// let ctx = Context::primary(&Device::get(0)?)?;
/// let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
/// let module = std::sync::Arc::new(Module::from_ptx(&ctx, ptx)?);
/// let fill = module.function("fill_u32")?; // fill_u32(u32* data, u32 n)
/// let graph = Graph::new(&ctx)?;
/// let (alloc, scratch) = graph.add_buffer_alloc_node::<u32>(&[], 1024)?;
/// let n = 1024u32;
/// // SAFETY: fill_u32 takes (u32*, u32); the node runs after the allocation node and before
/// // the memory is freed (outside the graph, after the launch); the graph keeps the module.
/// unsafe {
///     graph.add_kernel_node(&[alloc], &fill, &LaunchConfig::for_elements(n, 256), (&scratch, &n))?
/// };
/// graph.keep(module.clone());
/// let exec = graph.instantiate(InstantiateFlags::empty())?;
/// for _ in 0..3 {
///     exec.launch(&stream)?;
///     scratch.free_async(&stream)?; // after this launch; the next one allocates again
/// }
/// assert!(scratch.free_async(&stream).is_err(), "nothing is allocated now");
/// stream.synchronize()?;
/// # Ok(()) }
/// ```
pub struct GraphBuffer<T> {
    ptr: sys::CUdeviceptr,
    len: usize,
    memory: Arc<GraphMemory>,
    /// The allocation node, which a free node of the graph depends on.
    alloc_node: usize,
    /// The graph the node belongs to: its handle, and its keep-alive list (a weak reference
    /// keeps the list's address from being reused while this buffer lives).
    graph_raw: usize,
    graph_keep: Weak<KeepAlive>,
    _element: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for GraphBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphBuffer")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .field("allocated", &self.is_allocated())
            .finish()
    }
}

impl<T> GraphBuffer<T> {
    /// The device address of the first element (the same at every launch).
    #[inline]
    pub fn as_raw(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    crate::memory::element_count!();

    /// Whether a launch allocated the memory and it has not been freed outside the graph
    /// since (always false for memory a free node frees).
    pub fn is_allocated(&self) -> bool {
        self.memory.lock().allocated_by.is_some()
    }

    /// Frees the memory that the last launch of the graph's executable graph allocated, in
    /// `stream`'s order after that launch and after any work queued on `stream` before
    /// ([`cuMemFreeAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html)).
    /// The next launch, on any stream, is ordered after the free.
    ///
    /// Refused with an [`Error::InvalidArgument`], before any call, when no launch allocated
    /// the memory since it was last freed (or ever), when a free node of the graph frees it, on
    /// a stream of another context, and on a capturing stream (the free would be recorded, not
    /// made). Work queued outside the graph that uses the memory (a kernel taking the buffer)
    /// must be ordered before the free: queue it on `stream`, or make `stream` wait for it.
    pub fn free_async(&self, stream: &Stream) -> Result<()> {
        const OP: &str = "GraphBuffer::free_async";
        let memory = &*self.memory;
        if stream.context() != &memory.ctx {
            return Err(Error::refused(
                crate::error::Reason::WRONG_CONTEXT,
                OP,
                "the stream is of another context than the graph's",
            ));
        }
        stream.bind_if_default()?;
        if stream.capture_status()? != CaptureStatus::None {
            return Err(Error::refused(
                crate::error::Reason::DURING_CAPTURE,
                OP,
                "the stream is being captured: the free would be recorded into a graph, not made now",
            ));
        }
        let mut state = memory.lock();
        if state.freed_in_graph {
            return Err(Error::invalid(OP, "a free node of the graph frees this memory at every launch"));
        }
        if state.allocated_by.is_none() {
            return Err(Error::invalid(
                OP,
                "no launch allocated the memory since it was last freed; launch the graph first",
            ));
        }
        let mut queued = false;
        let result = memory.access.queue(stream, || {
            // SAFETY: the memory is allocated (a launch allocated it and nothing freed it
            // since: both are recorded under this lock), and the free is ordered after the
            // launches that use it by the tracker.
            unsafe { driver!(cuMemFreeAsync(memory.ptr, stream.as_raw())) }?;
            queued = true;
            Ok(())
        });
        if queued {
            state.allocated_by = None;
        }
        result
    }
}

// SAFETY: the pointer is to the address field of the borrowed buffer, 8 bytes, which nothing
// changes while it is borrowed.
unsafe impl<T: Pod> KernelArg for &GraphBuffer<T> {
    #[inline]
    fn arg_ptr(&self) -> *mut c_void {
        (&self.ptr as *const sys::CUdeviceptr).cast_mut().cast()
    }

    #[inline]
    fn arg_size(&self) -> usize {
        std::mem::size_of::<sys::CUdeviceptr>()
    }
}

// SAFETY: as for `&GraphBuffer<T>`.
unsafe impl<T: Pod> KernelArg for &mut GraphBuffer<T> {
    #[inline]
    fn arg_ptr(&self) -> *mut c_void {
        (&self.ptr as *const sys::CUdeviceptr).cast_mut().cast()
    }

    #[inline]
    fn arg_size(&self) -> usize {
        std::mem::size_of::<sys::CUdeviceptr>()
    }
}

impl Graph {
    /// Adds a node that allocates `len` elements of `T` of device memory on the graph's device
    /// and returns it with the memory as a [`GraphBuffer`]
    /// ([`cuGraphAddMemAllocNode`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// Nodes that depend on this one may use the memory until it is freed: by a free node
    /// ([`add_buffer_free_node`](Self::add_buffer_free_node)), or outside the graph after each
    /// launch ([`GraphBuffer::free_async`]). Once the graph has memory nodes the driver refuses
    /// to clone it, to use it as a child graph, to remove its nodes or edges, and to
    /// instantiate it twice at once.
    ///
    /// A length of 0, or one whose byte size overflows, is an [`Error::InvalidArgument`]; the
    /// driver's status is returned when it refuses the node (a device without stream-ordered
    /// memory pools, or a dependency from another graph).
    pub fn add_buffer_alloc_node<T: Pod>(
        &self,
        dependencies: &[GraphNode<'_>],
        len: usize,
    ) -> Result<(GraphNode<'_>, GraphBuffer<T>)> {
        let bytes = checked_bytes::<T>("Graph::add_buffer_alloc_node", len)?;
        let (node, ptr) = self.add_mem_alloc_node(dependencies, bytes)?;
        let memory = Arc::new(GraphMemory {
            ptr,
            ctx: self.ctx.clone(),
            access: HostAccess::fresh(true),
            state: Mutex::new(MemoryState::default()),
        });
        self.keep.push(memory.clone());
        let buffer = GraphBuffer {
            ptr,
            len,
            memory,
            alloc_node: node.as_raw() as usize,
            graph_raw: self.raw as usize,
            graph_keep: Arc::downgrade(&self.keep),
            _element: PhantomData,
        };
        Ok((node, buffer))
    }

    /// Adds a node that frees `buffer`, memory of an allocation node of this graph, after
    /// `dependencies` and after the allocation node (added to the dependencies when missing)
    /// ([`cuGraphAddMemFreeNode`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    /// Every launch then allocates and frees it, and the buffer can no longer be freed outside
    /// the graph. Nodes that use the memory must come before this one (its dependencies).
    ///
    /// A buffer of another graph, and one that a free node already frees, are each an
    /// [`Error::InvalidArgument`].
    pub fn add_buffer_free_node<T>(
        &self,
        dependencies: &[GraphNode<'_>],
        buffer: &GraphBuffer<T>,
    ) -> Result<GraphNode<'_>> {
        let same_graph = buffer.graph_raw == self.raw as usize
            && std::ptr::eq(buffer.graph_keep.as_ptr(), Arc::as_ptr(&self.keep));
        if !same_graph {
            return Err(Error::invalid(
                "Graph::add_buffer_free_node",
                "the buffer was allocated by a node of another graph; free it there",
            ));
        }
        // Holding the state's lock: no free outside the graph slips in between.
        let mut state = buffer.memory.lock();
        if state.freed_in_graph {
            return Err(Error::invalid(
                "Graph::add_buffer_free_node",
                "a free node of the graph already frees the buffer; one free node per allocation",
            ));
        }
        let alloc = GraphNode::wrap(buffer.alloc_node as sys::CUgraphNode);
        let mut deps = dependencies.to_vec();
        if !deps.contains(&alloc) {
            deps.push(alloc);
        }
        // SAFETY: `buffer.ptr` is the memory of the buffer's allocation node, which is among
        // `deps`, and this is its one free: no free node of it exists (checked above, and the
        // driver refuses a second one too), a free node in another graph is `unsafe` and may
        // not name a `GraphBuffer`'s memory, and `free_async` refuses once `freed_in_graph` is
        // set below (under the lock taken above, so no free outside the graph slips in).
        let node = unsafe { self.add_mem_free_node(&deps, buffer.ptr) }?;
        state.freed_in_graph = true;
        Ok(node)
    }
}

/// The graph memory an executable graph allocates and does not free itself: its launches are
/// made under the memory's locks, refused while an earlier launch's allocation is unfreed, and
/// recorded as allocating it.
#[derive(Debug, Default)]
pub(crate) struct ExecMemory {
    /// Sorted by address of the shared state: the order in which a launch locks them.
    items: Vec<Arc<GraphMemory>>,
    /// This executable graph's number, unique in the process.
    id: u64,
    auto_free: bool,
}

impl ExecMemory {
    /// The memory that allocation nodes of the graph whose list is `keep` allocate and no free
    /// node frees, for an executable graph instantiated with `flags`.
    pub(crate) fn of(keep: &KeepAlive, flags: u64) -> ExecMemory {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let mut items: Vec<Arc<GraphMemory>> =
            keep.items_of::<GraphMemory>().into_iter().filter(|m| !m.lock().freed_in_graph).collect();
        if items.is_empty() {
            return ExecMemory::default();
        }
        items.sort_by_key(|m| Arc::as_ptr(m) as usize);
        let auto_free = flags & super::InstantiateFlags::AUTO_FREE_ON_LAUNCH.bits() != 0;
        ExecMemory { items, id: NEXT_ID.fetch_add(1, Ordering::Relaxed), auto_free }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The trackers its launches record themselves on.
    pub(crate) fn accesses(&self) -> impl Iterator<Item = HostAccess> + '_ {
        self.items.iter().map(|m| m.access.clone())
    }

    /// Makes a launch with `launch`, tracked on `host` (the pinned buffers and this memory),
    /// under the memory's locks: refused while memory that an earlier launch allocated is
    /// unfreed (unless this executable graph frees it on launch, having allocated it itself),
    /// and on a capturing stream; the memory is recorded as allocated by this executable graph
    /// once the launch is queued.
    pub(crate) fn launch(
        &self,
        host: &[HostAccess],
        stream: &Stream,
        launch: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        const OP: &str = "GraphExec::launch";
        if stream.capture_status()? != CaptureStatus::None {
            return Err(Error::refused(
                crate::error::Reason::DURING_CAPTURE,
                OP,
                "the graph allocates memory that is freed outside it; it cannot be launched into a \
                 stream capture",
            ));
        }
        let mut states: Vec<MutexGuard<'_, MemoryState>> = self.items.iter().map(|m| m.lock()).collect();
        for state in &states {
            match state.allocated_by {
                Some(by) if by == self.id && self.auto_free => {}
                Some(_) => {
                    return Err(Error::invalid(
                        OP,
                        "memory an earlier launch allocated is not freed yet; free it with \
                         GraphBuffer::free_async (or instantiate with AUTO_FREE_ON_LAUNCH)",
                    ));
                }
                None => {}
            }
        }
        let mut queued = false;
        let result = crate::memory::launch_tracked(host, stream, || {
            launch()?;
            queued = true;
            Ok(())
        });
        if queued {
            for state in &mut states {
                state.allocated_by = Some(self.id);
            }
        }
        result
    }
}
