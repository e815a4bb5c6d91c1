//! Reading back what a node does: the parameters of each node kind as typed values, and the
//! graph a child-graph node runs.

use super::{BodyGraph, Graph, GraphNode};
use crate::error::{Error, Result};
use crate::launch::Dim3;
use cuhost_driver_sys as sys;
use std::collections::HashSet;
use std::ffi::c_void;
use std::marker::PhantomData;

/// What a kernel node launches and how (`CUDA_KERNEL_NODE_PARAMS`, without the arguments,
/// whose layout only the kernel knows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelNodeParams {
    /// The module function launched, or null when the node launches a library kernel.
    pub function: sys::CUfunction,
    /// The library kernel launched, or null when the node launches a module function.
    pub kernel: sys::CUkernel,
    /// The context a library kernel runs in (null for a module function: its module's).
    pub context: sys::CUcontext,
    /// Blocks in the grid.
    pub grid: Dim3,
    /// Threads in a block.
    pub block: Dim3,
    /// Dynamic shared memory per block, in bytes.
    pub shared_mem_bytes: u32,
}

/// What a memset node sets (`CUDA_MEMSET_NODE_PARAMS`): `height` rows of `width` elements of
/// `element_size` bytes, `pitch` bytes apart, from `dst`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MemsetNodeParams {
    /// The device address of the first element.
    pub dst: sys::CUdeviceptr,
    /// Bytes from the start of one row to the next (unused for one row).
    pub pitch: usize,
    /// The value, in the low `element_size` bytes.
    pub value: u32,
    /// 1, 2 or 4.
    pub element_size: u32,
    /// Elements per row.
    pub width: usize,
    /// Rows.
    pub height: usize,
}

/// What a memcpy node copies: the driver's `CUDA_MEMCPY3D`, with typed accessors for the
/// common questions.
#[derive(Clone, Copy)]
pub struct MemcpyNodeParams(sys::CUDA_MEMCPY3D);

impl std::fmt::Debug for MemcpyNodeParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = &self.0;
        f.debug_struct("MemcpyNodeParams")
            .field("src_memory", &p.srcMemoryType)
            .field("src_device", &format_args!("{:#x}", p.srcDevice))
            .field("dst_memory", &p.dstMemoryType)
            .field("dst_device", &format_args!("{:#x}", p.dstDevice))
            .field("extent", &(p.WidthInBytes, p.Height, p.Depth))
            .finish()
    }
}

impl MemcpyNodeParams {
    /// The raw descriptor.
    pub fn as_raw(&self) -> &sys::CUDA_MEMCPY3D {
        &self.0
    }

    /// The kind of memory copied from.
    pub fn src_memory_type(&self) -> sys::CUmemorytype {
        self.0.srcMemoryType
    }

    /// The kind of memory copied to.
    pub fn dst_memory_type(&self) -> sys::CUmemorytype {
        self.0.dstMemoryType
    }

    /// The device (or unified) address copied from, offsets included, when the source is
    /// device or unified memory.
    pub fn src_device(&self) -> Option<sys::CUdeviceptr> {
        let p = &self.0;
        device_end(p.srcMemoryType, p.srcDevice, p.srcXInBytes, p.srcY, p.srcZ, p.srcPitch, p.srcHeight)
    }

    /// The device (or unified) address copied to, offsets included, when the destination is
    /// device or unified memory.
    pub fn dst_device(&self) -> Option<sys::CUdeviceptr> {
        let p = &self.0;
        device_end(p.dstMemoryType, p.dstDevice, p.dstXInBytes, p.dstY, p.dstZ, p.dstPitch, p.dstHeight)
    }

    /// Bytes per row.
    pub fn width_in_bytes(&self) -> usize {
        self.0.WidthInBytes
    }

    /// Rows per slice.
    pub fn height(&self) -> usize {
        self.0.Height
    }

    /// Slices.
    pub fn depth(&self) -> usize {
        self.0.Depth
    }
}

/// The address of a copy's first byte on a device or unified side.
fn device_end(
    kind: sys::CUmemorytype,
    base: sys::CUdeviceptr,
    x: usize,
    y: usize,
    z: usize,
    pitch: usize,
    height: usize,
) -> Option<sys::CUdeviceptr> {
    use sys::CUmemorytype as M;
    if kind != M::CU_MEMORYTYPE_DEVICE && kind != M::CU_MEMORYTYPE_UNIFIED {
        return None;
    }
    let offset = (z as u64).wrapping_mul(height as u64).wrapping_add(y as u64).wrapping_mul(pitch as u64);
    Some(base.wrapping_add(offset).wrapping_add(x as u64))
}

/// What a host node calls (`CUDA_HOST_NODE_PARAMS`). For a node added by this crate the
/// function is the crate's trampoline and the data its closure, which only the graph may use.
#[derive(Clone, Copy, Debug)]
pub struct HostNodeParams {
    /// The function the driver calls.
    pub function: sys::CUhostFn,
    /// The pointer it is called with.
    pub user_data: *mut c_void,
}

/// The memory an allocation node allocates (`CUDA_MEM_ALLOC_NODE_PARAMS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MemAllocNodeParams {
    /// The address of the allocation, the same at every launch.
    pub address: sys::CUdeviceptr,
    /// Its size in bytes.
    pub bytes: usize,
    /// The ordinal of the device it is allocated on.
    pub device: i32,
}

impl<'g> GraphNode<'g> {
    /// The kernel, dimensions and shared memory of a kernel node
    /// ([`cuGraphKernelNodeGetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// Another kind of node fails with the driver's status (`CUDA_ERROR_INVALID_VALUE`).
    pub fn kernel_params(&self) -> Result<KernelNodeParams> {
        let mut raw = sys::CUDA_KERNEL_NODE_PARAMS { ..Default::default() };
        // SAFETY: the node is live while its graph is borrowed; one out-parameter.
        unsafe { driver!(cuGraphKernelNodeGetParams(self.as_raw(), &mut raw)) }?;
        Ok(KernelNodeParams {
            function: raw.func,
            kernel: raw.kern,
            context: raw.ctx,
            grid: Dim3::new(raw.gridDimX, raw.gridDimY, raw.gridDimZ),
            block: Dim3::new(raw.blockDimX, raw.blockDimY, raw.blockDimZ),
            shared_mem_bytes: raw.sharedMemBytes,
        })
    }

    /// A launch attribute of a kernel node
    /// ([`cuGraphKernelNodeGetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    fn kernel_attribute(&self, id: sys::CUkernelNodeAttrID) -> Result<sys::CUkernelNodeAttrValue> {
        let mut value = sys::CUkernelNodeAttrValue { pad: [0; 64] };
        // SAFETY: the node is live; one out-parameter of the union's full size.
        unsafe { driver!(cuGraphKernelNodeGetAttribute(self.as_raw(), id, &mut value)) }?;
        Ok(value)
    }

    /// The priority a kernel node runs at, among the node priorities of an executable graph
    /// instantiated with [`USE_NODE_PRIORITY`](super::InstantiateFlags::USE_NODE_PRIORITY)
    /// (`CU_LAUNCH_ATTRIBUTE_PRIORITY` through
    /// [`cuGraphKernelNodeGetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// Another kind of node fails with the driver's status.
    pub fn kernel_priority(&self) -> Result<i32> {
        let value = self.kernel_attribute(sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PRIORITY)?;
        // SAFETY: the driver wrote the priority member; every bit pattern is an int.
        Ok(unsafe { value.priority })
    }

    /// Whether a kernel node launches cooperatively (`CU_LAUNCH_ATTRIBUTE_COOPERATIVE`
    /// through [`cuGraphKernelNodeGetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// Another kind of node fails with the driver's status.
    pub fn kernel_cooperative(&self) -> Result<bool> {
        let value = self.kernel_attribute(sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_COOPERATIVE)?;
        // SAFETY: the driver wrote the cooperative member; every bit pattern is an int.
        Ok(unsafe { value.cooperative } != 0)
    }

    /// What a memset node sets
    /// ([`cuGraphMemsetNodeGetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// Another kind of node fails with the driver's status.
    pub fn memset_params(&self) -> Result<MemsetNodeParams> {
        let mut raw = sys::CUDA_MEMSET_NODE_PARAMS { ..Default::default() };
        // SAFETY: as in `kernel_params`.
        unsafe { driver!(cuGraphMemsetNodeGetParams(self.as_raw(), &mut raw)) }?;
        Ok(MemsetNodeParams {
            dst: raw.dst,
            pitch: raw.pitch,
            value: raw.value,
            element_size: raw.elementSize,
            width: raw.width,
            height: raw.height,
        })
    }

    /// What a memcpy node copies
    /// ([`cuGraphMemcpyNodeGetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// Another kind of node fails with the driver's status.
    pub fn memcpy_params(&self) -> Result<MemcpyNodeParams> {
        let mut raw = sys::CUDA_MEMCPY3D { ..Default::default() };
        // SAFETY: as in `kernel_params`.
        unsafe { driver!(cuGraphMemcpyNodeGetParams(self.as_raw(), &mut raw)) }?;
        Ok(MemcpyNodeParams(raw))
    }

    /// The function and data a host node calls
    /// ([`cuGraphHostNodeGetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// Another kind of node fails with the driver's status.
    pub fn host_params(&self) -> Result<HostNodeParams> {
        let mut raw = sys::CUDA_HOST_NODE_PARAMS { ..Default::default() };
        // SAFETY: as in `kernel_params`.
        unsafe { driver!(cuGraphHostNodeGetParams(self.as_raw(), &mut raw)) }?;
        Ok(HostNodeParams { function: raw.fn_, user_data: raw.userData })
    }

    /// The event an event record node records
    /// ([`cuGraphEventRecordNodeGetEvent`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)),
    /// compare with [`Event::as_raw`](crate::event::Event::as_raw).
    ///
    /// Another kind of node fails with the driver's status.
    pub fn recorded_event(&self) -> Result<sys::CUevent> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: as in `kernel_params`.
        unsafe { driver!(cuGraphEventRecordNodeGetEvent(self.as_raw(), &mut raw)) }?;
        Ok(raw)
    }

    /// The event an event wait node waits for
    /// ([`cuGraphEventWaitNodeGetEvent`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)),
    /// compare with [`Event::as_raw`](crate::event::Event::as_raw).
    ///
    /// Another kind of node fails with the driver's status.
    pub fn awaited_event(&self) -> Result<sys::CUevent> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: as in `kernel_params`.
        unsafe { driver!(cuGraphEventWaitNodeGetEvent(self.as_raw(), &mut raw)) }?;
        Ok(raw)
    }

    /// The memory an allocation node allocates
    /// ([`cuGraphMemAllocNodeGetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// Another kind of node fails with the driver's status.
    pub fn mem_alloc_params(&self) -> Result<MemAllocNodeParams> {
        let mut raw = sys::CUDA_MEM_ALLOC_NODE_PARAMS { ..Default::default() };
        // SAFETY: as in `kernel_params`; the access descriptors the driver points to are not read.
        unsafe { driver!(cuGraphMemAllocNodeGetParams(self.as_raw(), &mut raw)) }?;
        Ok(MemAllocNodeParams {
            address: raw.dptr,
            bytes: raw.bytesize,
            device: crate::c_layout::mem_location_id(&raw.poolProps.location),
        })
    }

    /// The address a free node frees
    /// ([`cuGraphMemFreeNodeGetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// Another kind of node fails with the driver's status.
    pub fn mem_free_address(&self) -> Result<sys::CUdeviceptr> {
        let mut ptr = 0;
        // SAFETY: as in `kernel_params`.
        unsafe { driver!(cuGraphMemFreeNodeGetParams(self.as_raw(), &mut ptr)) }?;
        Ok(ptr)
    }
}

impl Graph {
    /// Makes the graph's context current, then fails with an [`Error::InvalidArgument`]
    /// unless every node of `nodes` is a node of this graph (not of a graph nested in it).
    /// Setters check this before they keep values alive: a value kept by one graph for a node
    /// of another would not live as long as that node.
    pub(super) fn check_nodes(&self, operation: &'static str, nodes: &[GraphNode<'_>]) -> Result<()> {
        self.ctx.enter()?;
        let own: HashSet<sys::CUgraphNode> = self.nodes()?.iter().map(GraphNode::as_raw).collect();
        match nodes.iter().find(|n| !own.contains(&n.as_raw())) {
            None => Ok(()),
            Some(n) => {
                Err(Error::invalid(operation, format!("node {:p} is not a node of this graph", n.as_raw())))
            }
        }
    }

    /// The graph a child-graph node of this graph runs, borrowed from the node
    /// ([`cuGraphChildGraphNodeGetGraph`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// It is the node's own copy, not the graph given to
    /// [`add_child_graph_node`](Self::add_child_graph_node): nodes added to it, or parameters
    /// set on its nodes, change what the node runs, and what they refer to is kept alive by
    /// this graph. Executable graphs and clones made earlier are not changed.
    ///
    /// A node of another graph is an [`Error::InvalidArgument`]; a node of another kind fails
    /// with the driver's status.
    pub fn child_graph(&self, node: GraphNode<'_>) -> Result<BodyGraph<'_>> {
        self.check_nodes("Graph::child_graph", &[node])?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: the node is live and of this graph; one out-parameter. The graph returned
        // belongs to the node, which lives as long as this graph is borrowed (destroying a node
        // takes the graph mutably).
        unsafe { driver!(cuGraphChildGraphNodeGetGraph(node.as_raw(), &mut raw)) }?;
        Ok(BodyGraph { graph: Graph::borrowed(&self.ctx, raw, self.keep.clone()), _parent: PhantomData })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_ends_of_a_copy_include_their_offsets() {
        use sys::CUmemorytype as M;
        assert_eq!(device_end(M::CU_MEMORYTYPE_DEVICE, 0x1000, 4, 0, 0, 0, 0), Some(0x1004));
        assert_eq!(
            device_end(M::CU_MEMORYTYPE_UNIFIED, 0x1000, 1, 2, 1, 16, 3),
            Some(0x1000 + (3 + 2) * 16 + 1)
        );
        assert_eq!(device_end(M::CU_MEMORYTYPE_HOST, 0x1000, 0, 0, 0, 0, 0), None);
        assert_eq!(device_end(M::CU_MEMORYTYPE_ARRAY, 0x1000, 0, 0, 0, 0, 0), None);
    }

    #[test]
    fn copies_read_back_their_device_addresses_and_extent() {
        let mut raw = sys::CUDA_MEMCPY3D { ..Default::default() };
        raw.srcMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
        raw.srcDevice = 0x2000;
        raw.dstMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_HOST;
        raw.WidthInBytes = 64;
        raw.Height = 1;
        raw.Depth = 1;
        let p = MemcpyNodeParams(raw);
        assert_eq!((p.src_device(), p.dst_device()), (Some(0x2000), None));
        assert_eq!((p.width_in_bytes(), p.height(), p.depth()), (64, 1, 1));
        assert!(format!("{p:?}").contains("0x2000"));
    }
}
