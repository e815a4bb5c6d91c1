//! Memory nodes: memset and memcpy over device memory the graph keeps alive, and the
//! allocation and free nodes of graph-owned memory.

use super::{Graph, GraphNode};
use crate::error::{Error, Result};
use crate::memory::{DeviceBuffer, range_of};
use bytemuck::Pod;
use cuhost_driver_sys as sys;
use std::any::Any;
use std::marker::PhantomData;
use std::ops::RangeBounds;
use std::sync::Arc;

/// A range of device memory that a memset or memcpy node refers to, with what keeps it
/// allocated: a shared buffer, which the graph then holds, or (unsafely) nothing.
pub struct GraphSlice<T> {
    ptr: sys::CUdeviceptr,
    len: usize,
    owner: Option<Arc<dyn Any + Send + Sync>>,
    /// Whether the buffer is memory a capture allocated (it exists only inside that capture's
    /// graph, so nodes of this graph are refused).
    captured: bool,
    _element: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for GraphSlice<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphSlice")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .field("kept", &self.owner.is_some())
            .finish()
    }
}

impl<T: Pod> GraphSlice<T> {
    /// All of `buffer`; a node made from it keeps the buffer alive.
    pub fn whole(buffer: &Arc<DeviceBuffer<T>>) -> GraphSlice<T> {
        GraphSlice {
            ptr: buffer.as_raw(),
            len: buffer.len(),
            owner: Some(buffer.clone()),
            captured: buffer.is_graph_memory(),
            _element: PhantomData,
        }
    }

    /// Elements `range` of `buffer`; past the end is an [`Error::InvalidArgument`].
    pub fn new(buffer: &Arc<DeviceBuffer<T>>, range: impl RangeBounds<usize>) -> Result<GraphSlice<T>> {
        let (start, end) = range_of("GraphSlice::new", range, buffer.len())?;
        Ok(GraphSlice {
            ptr: buffer.as_raw() + (start * std::mem::size_of::<T>()) as u64,
            len: end - start,
            owner: Some(buffer.clone()),
            captured: buffer.is_graph_memory(),
            _element: PhantomData,
        })
    }

    /// `len` elements at device address `ptr`, kept alive by nothing: memory from an
    /// allocation node ([`Graph::add_mem_alloc_node`]) or from elsewhere.
    ///
    /// # Safety
    ///
    /// `ptr` is aligned for `T`, and the `len` elements there are device memory of the
    /// graph's context whenever a node made from this slice runs:
    ///
    /// * **Memory of an allocation node** of the graph: the node made from the slice depends,
    ///   directly or through other nodes, on that allocation node, and runs before the memory
    ///   is freed: its free node, if the graph has one, depends on it; without one, nothing
    ///   frees the memory (`cuMemFreeAsync`, or a later launch of an executable graph
    ///   instantiated with [`AUTO_FREE_ON_LAUNCH`](super::InstantiateFlags::AUTO_FREE_ON_LAUNCH))
    ///   while a launch may still run the node. The range lies within the allocation's bytes.
    /// * **Any other memory** stays allocated as long as the graph, its clones, the graphs
    ///   holding it as a child, and their executable graphs may run (hand its owner to
    ///   [`Graph::keep`]).
    pub unsafe fn from_raw(ptr: sys::CUdeviceptr, len: usize) -> GraphSlice<T> {
        GraphSlice { ptr, len, owner: None, captured: false, _element: PhantomData }
    }

    /// The device address of the first element.
    pub fn as_raw(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    crate::memory::element_count!();

    /// The same memory as elements of `U`, kept alive by the same owner: a memset of 1-, 2- or
    /// 4-byte values over a buffer of wider or narrower elements, for instance.
    ///
    /// An address not aligned for `U`, or a size that is not a whole number of `U`s, is an
    /// [`Error::InvalidArgument`], as for [`DeviceView::cast`](crate::memory::DeviceView::cast).
    pub fn cast<U: Pod>(&self) -> Result<GraphSlice<U>> {
        let len = crate::memory::cast_check::<T, U>("GraphSlice::cast", self.ptr, self.len)?;
        Ok(GraphSlice {
            ptr: self.ptr,
            len,
            owner: self.owner.clone(),
            captured: self.captured,
            _element: PhantomData,
        })
    }
}

impl<T> GraphSlice<T> {
    /// What keeps the memory allocated, if anything.
    pub(crate) fn owner(&self) -> Option<Arc<dyn Any + Send + Sync>> {
        self.owner.clone()
    }

    /// Refuses a buffer a capture allocated: its memory exists only inside the launches of
    /// that capture's graph, not in a node of another.
    pub(crate) fn check_node_memory(&self, operation: &'static str) -> Result<()> {
        if self.captured {
            return Err(Error::refused(
                crate::error::Reason::DURING_CAPTURE,
                operation,
                "the buffer was allocated in a stream capture: its memory exists only inside that graph's \
                 launches; give the node a buffer allocated outside captures",
            ));
        }
        Ok(())
    }
}

/// The parameters of a memset of `dst` to `value`, one row of 1-, 2- or 4-byte elements.
pub(crate) fn memset_params<T: Pod>(
    operation: &'static str,
    dst: &GraphSlice<T>,
    value: T,
) -> Result<sys::CUDA_MEMSET_NODE_PARAMS> {
    dst.check_node_memory(operation)?;
    let size = std::mem::size_of::<T>();
    if !matches!(size, 1 | 2 | 4) {
        return Err(Error::invalid(
            operation,
            format!(
                "a memset sets 1-, 2- or 4-byte elements, not {size}-byte ones; view the memory as u8, u16 or u32"
            ),
        ));
    }
    if dst.len == 0 {
        return Err(Error::invalid(operation, "the destination is empty; give at least one element"));
    }
    let mut bits = [0u8; 4];
    bits[..size].copy_from_slice(bytemuck::bytes_of(&value));
    Ok(sys::CUDA_MEMSET_NODE_PARAMS {
        dst: dst.ptr,
        pitch: 0,
        value: u32::from_ne_bytes(bits),
        elementSize: size as u32,
        width: dst.len,
        height: 1,
        ..Default::default()
    })
}

/// The parameters of a device-to-device copy of `src` into `dst`, of equal lengths.
pub(crate) fn memcpy_params<T: Pod>(
    operation: &'static str,
    dst: &GraphSlice<T>,
    src: &GraphSlice<T>,
) -> Result<sys::CUDA_MEMCPY3D> {
    crate::memory::same_len(operation, dst.len, src.len)?;
    dst.check_node_memory(operation)?;
    src.check_node_memory(operation)?;
    if dst.len == 0 {
        return Err(Error::invalid(operation, "the slices are empty; give at least one element"));
    }
    // SAFETY: CUDA_MEMCPY3D is plain C data; all-zero is "nothing set".
    let mut p: sys::CUDA_MEMCPY3D = unsafe { std::mem::zeroed() };
    p.srcMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
    p.srcDevice = src.ptr;
    p.dstMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
    p.dstDevice = dst.ptr;
    p.WidthInBytes = dst.size_in_bytes();
    p.Height = 1;
    p.Depth = 1;
    Ok(p)
}

impl Graph {
    /// Adds a node that sets every element of `dst` to `value`; elements of 1, 2 or 4 bytes
    /// ([`cuGraphAddMemsetNode`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    /// The graph keeps the memory alive.
    pub fn add_memset_node<T: Pod>(
        &self,
        dependencies: &[GraphNode<'_>],
        dst: &GraphSlice<T>,
        value: T,
    ) -> Result<GraphNode<'_>> {
        let params = memset_params("Graph::add_memset_node", dst, value)?;
        let (graph, ctx) = (self.raw, self.ctx.as_raw());
        // SAFETY: the graph is live; `params` describes memory that stays allocated (kept
        // below, or vouched for by `GraphSlice::from_raw`).
        let node = self.add_with("cuGraphAddMemsetNode", dependencies, |out, deps, n| unsafe {
            sys::cuGraphAddMemsetNode(out, graph, deps, n, &params, ctx)
        })?;
        self.keep_slice(dst);
        Ok(node)
    }

    /// Adds a node that copies `src` into `dst` (device to device; the lengths must match)
    /// ([`cuGraphAddMemcpyNode`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    /// The graph keeps both alive.
    pub fn add_memcpy_node<T: Pod>(
        &self,
        dependencies: &[GraphNode<'_>],
        dst: &GraphSlice<T>,
        src: &GraphSlice<T>,
    ) -> Result<GraphNode<'_>> {
        let params = memcpy_params("Graph::add_memcpy_node", dst, src)?;
        let (graph, ctx) = (self.raw, self.ctx.as_raw());
        // SAFETY: as in `add_memset_node`.
        let node = self.add_with("cuGraphAddMemcpyNode", dependencies, |out, deps, n| unsafe {
            sys::cuGraphAddMemcpyNode(out, graph, deps, n, &params, ctx)
        })?;
        self.keep_slice(dst);
        self.keep_slice(src);
        Ok(node)
    }

    /// Adds a node that makes any copy a `CUDA_MEMCPY3D` describes: 2D and 3D regions,
    /// pitched memory, CUDA arrays, pinned host memory
    /// ([`cuGraphAddMemcpyNode`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)),
    /// as [`copy::memcpy_3d`](crate::copy::memcpy_3d) does at once.
    ///
    /// # Safety
    ///
    /// Every address and array `copy` names must stay live as long as the graph and its
    /// executable graphs may run (hand their owners to [`Graph::keep`]), and the box must lie
    /// within both sides. An array of a [`SparseArray`](crate::vmm::SparseArray) is live only
    /// where its tiles are mapped, and its unmaps do not wait for graph launches.
    pub unsafe fn add_memcpy_3d_node(
        &self,
        dependencies: &[GraphNode<'_>],
        copy: &sys::CUDA_MEMCPY3D,
    ) -> Result<GraphNode<'_>> {
        let (graph, ctx) = (self.raw, self.ctx.as_raw());
        // SAFETY: the graph is live; the caller vouches for the descriptor.
        self.add_with("cuGraphAddMemcpyNode", dependencies, |out, deps, n| unsafe {
            sys::cuGraphAddMemcpyNode(out, graph, deps, n, copy, ctx)
        })
    }

    fn keep_slice<T>(&self, slice: &GraphSlice<T>) {
        if let Some(owner) = slice.owner() {
            self.keep.push(owner);
        }
    }

    /// Adds a node that allocates `bytes` of device memory on the graph's device, owned by
    /// the graph, and returns it with the memory's address
    /// ([`cuGraphAddMemAllocNode`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// The address is the same at every launch. Nodes that depend on this one may use the
    /// memory (through [`GraphSlice::from_raw`] or a kernel argument) until a free node
    /// ([`add_mem_free_node`](Self::add_mem_free_node), `unsafe`), or, without one, until it is freed
    /// outside the graph (`cuMemFreeAsync`) or by a launch of an executable graph
    /// instantiated with [`AUTO_FREE_ON_LAUNCH`](super::InstantiateFlags::AUTO_FREE_ON_LAUNCH).
    ///
    /// Zero bytes is an [`Error::InvalidArgument`]; the driver's status is returned when it
    /// refuses the node (a device without stream-ordered memory pools, or a dependency from
    /// another graph).
    pub fn add_mem_alloc_node(
        &self,
        dependencies: &[GraphNode<'_>],
        bytes: usize,
    ) -> Result<(GraphNode<'_>, sys::CUdeviceptr)> {
        if bytes == 0 {
            return Err(Error::invalid(
                "Graph::add_mem_alloc_node",
                "0 bytes were asked for; ask for at least one",
            ));
        }
        // SAFETY: CUDA_MEM_ALLOC_NODE_PARAMS is plain C data; all-zero is "nothing set".
        let mut params: sys::CUDA_MEM_ALLOC_NODE_PARAMS = unsafe { std::mem::zeroed() };
        params.poolProps.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        params.poolProps.location = crate::c_layout::mem_location(
            sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            self.ctx.device().as_raw(),
        );
        params.bytesize = bytes;
        let graph = self.raw;
        let params_ptr: *mut sys::CUDA_MEM_ALLOC_NODE_PARAMS = &mut params;
        // SAFETY: the graph is live; the driver writes the address into `params`.
        let node = self.add_with("cuGraphAddMemAllocNode", dependencies, |out, deps, n| unsafe {
            sys::cuGraphAddMemAllocNode(out, graph, deps, n, params_ptr)
        })?;
        Ok((node, params.dptr))
    }

    /// Adds a node that frees `ptr`, the memory of an allocation node
    /// ([`cuGraphAddMemFreeNode`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    /// To free a [`GraphBuffer`](super::GraphBuffer), use the safe
    /// [`add_buffer_free_node`](Self::add_buffer_free_node), which tells the buffer.
    ///
    /// The driver refuses an address that no allocation node returned and a second free node
    /// of one allocation in this graph, with its status. It accepts the address of an
    /// allocation node of *another* graph, and knows nothing of frees made outside graphs,
    /// hence the contract below.
    ///
    /// # Safety
    ///
    /// `ptr` is an address that [`add_mem_alloc_node`](Self::add_mem_alloc_node) returned, of
    /// this graph or another one, and not the memory of a [`GraphBuffer`](super::GraphBuffer)
    /// (whose bookkeeping would not learn of this free, and would free it again). Every launch
    /// that runs this node finds the memory allocated and frees it once: no other free of it
    /// (another free node, in this graph or another, or `cuMemFreeAsync`) is made between the
    /// allocation and this node. Nothing uses the memory once this node has run: the nodes that
    /// use it are among its dependencies, as [`GraphSlice::from_raw`] asks.
    ///
    /// Calling it is `unsafe`:
    ///
    /// ```compile_fail,E0133
    /// # fn f(graph: &cuhost::graph::Graph) -> cuhost::Result<()> {
    /// let (alloc, ptr) = graph.add_mem_alloc_node(&[], 4096)?;
    /// graph.add_mem_free_node(&[alloc], ptr)?;
    /// # Ok(()) }
    /// ```
    pub unsafe fn add_mem_free_node(
        &self,
        dependencies: &[GraphNode<'_>],
        ptr: sys::CUdeviceptr,
    ) -> Result<GraphNode<'_>> {
        let graph = self.raw;
        // SAFETY: the graph is live; the driver checks that `ptr` is graph memory, and the
        // caller vouches that this is its one free.
        self.add_with("cuGraphAddMemFreeNode", dependencies, |out, deps, n| unsafe {
            sys::cuGraphAddMemFreeNode(out, graph, deps, n, ptr)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw<T: Pod>(len: usize) -> GraphSlice<T> {
        // SAFETY: only parameters are built; nothing is launched.
        unsafe { GraphSlice::from_raw(0x1000, len) }
    }

    #[test]
    fn memsets_take_elements_of_one_two_or_four_bytes() {
        let p = memset_params("t", &raw::<u32>(8), 0xdead_beefu32).ok();
        let p = p.map(|p| (p.value, p.elementSize, p.width, p.height));
        assert_eq!(p, Some((0xdead_beef, 4, 8, 1)));
        let p = memset_params("t", &raw::<u16>(3), 0xabcdu16).ok().map(|p| (p.value, p.elementSize));
        assert_eq!(p, Some((0xabcd, 2)));
        let p = memset_params("t", &raw::<u8>(3), 7u8).ok().map(|p| (p.value, p.elementSize));
        assert_eq!(p, Some((7, 1)));
        let p = memset_params("t", &raw::<f32>(1), 1.0f32).ok().map(|p| p.value);
        assert_eq!(p, Some(1.0f32.to_bits()));
        assert!(matches!(memset_params("t", &raw::<u64>(1), 1u64), Err(Error::InvalidArgument { .. })));
        assert!(matches!(memset_params("t", &raw::<u32>(0), 1u32), Err(Error::InvalidArgument { .. })));
    }

    #[test]
    fn casts_keep_the_owner_and_check_alignment_and_whole_elements() {
        let owner: Arc<dyn Any + Send + Sync> = Arc::new(0u8);
        let words = GraphSlice::<u64> {
            ptr: 0x1000,
            len: 3,
            owner: Some(owner.clone()),
            captured: false,
            _element: PhantomData,
        };
        let bytes = words.cast::<u8>();
        assert_eq!(bytes.as_ref().map(|b| (b.as_raw(), b.len())).ok(), Some((0x1000, 24)));
        assert!(bytes.as_ref().is_ok_and(|b| b.owner().is_some_and(|o| Arc::ptr_eq(&o, &owner))));
        let halves = raw::<u16>(3).cast::<u32>();
        assert!(matches!(halves, Err(Error::InvalidArgument { .. })), "6 bytes are not whole u32s");
        // SAFETY: only parameters are built; nothing is launched.
        let odd = unsafe { GraphSlice::<u8>::from_raw(0x1002, 8) };
        assert!(matches!(odd.cast::<u32>(), Err(Error::InvalidArgument { .. })), "misaligned");
        assert!(matches!(raw::<u8>(4).cast::<()>(), Err(Error::InvalidArgument { .. })));
        let p =
            bytes.ok().and_then(|b| memset_params("t", &b, 0xabu8).ok()).map(|p| (p.width, p.elementSize));
        assert_eq!(p, Some((24, 1)));
    }

    #[test]
    fn copies_need_equal_lengths_and_count_bytes() {
        let p = memcpy_params("t", &raw::<u64>(4), &raw::<u64>(4)).ok();
        assert_eq!(p.map(|p| (p.WidthInBytes, p.Height, p.Depth)), Some((32, 1, 1)));
        assert!(matches!(
            memcpy_params("t", &raw::<u64>(4), &raw::<u64>(5)),
            Err(Error::InvalidArgument { .. })
        ));
    }
}
