//! Memcpy nodes between device memory and a pinned host buffer that graphs share:
//! [`SharedPinnedBuffer`], whose launches are tracked as captured pinned copies are, and whose
//! host slices are guards that keep conflicting launches from being queued.

use super::memory::GraphSlice;
use super::{Graph, GraphNode};
use crate::error::{Error, Result};
use crate::memory::{HostAccess, PinnedBuffer, PinnedSlice, PinnedSliceMut, begin_borrow};
use bytemuck::Pod;
use cuhost_driver_sys as sys;
use std::sync::Arc;

/// A [`PinnedBuffer`] that graphs copy to and from with memcpy nodes
/// ([`Graph::add_memcpy_to_pinned_node`], [`Graph::add_memcpy_from_pinned_node`]) while the
/// host reads and writes it between launches.
///
/// Each graph that copies it keeps its memory allocated (dropping this value and every graph
/// and executable graph that copies it gives the buffer back). Every launch of an executable
/// graph made from such a graph is tracked on the buffer as a captured pinned copy is: it is
/// ordered after the buffer's uses in flight on other streams and recorded on the buffer as one
/// more, so
///
/// * [`as_slice`](Self::as_slice) waits for the launches that write the buffer (device to
///   host),
/// * [`as_mut_slice`](Self::as_mut_slice) waits for every launch that uses it.
///
/// The host's slices are guards: while one from `as_slice` lives, a launch that writes the
/// buffer is refused, and while one from `as_mut_slice` lives, any launch that uses it is, with
/// an [`Error::InvalidArgument`](crate::error::Error::InvalidArgument) and nothing queued. So the
/// device never writes memory the host is reading, nor reads memory the host is writing.
///
/// ```no_run
/// use cuhost::graph::{Graph, GraphSlice, InstantiateFlags, SharedPinnedBuffer};
/// use cuhost::{Context, Device, DeviceBuffer, PinnedBuffer, Stream, StreamFlags};
/// use std::sync::Arc;
/// # fn main() -> cuhost::Result<()> {
/// let ctx = Context::primary(&Device::get(0)?)?;
/// let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
/// let mut input = SharedPinnedBuffer::new(PinnedBuffer::<f32>::new(1024)?)?;
/// let output = SharedPinnedBuffer::new(PinnedBuffer::<f32>::new(1024)?)?;
/// let device = Arc::new(DeviceBuffer::<f32>::zeroed(&stream, 1024)?);
/// let graph = Graph::new(&ctx)?;
/// let up = graph.add_memcpy_from_pinned_node(&[], &GraphSlice::whole(&device), &input)?;
/// graph.add_memcpy_to_pinned_node(&[up], &output, &GraphSlice::whole(&device))?;
/// let exec = graph.instantiate(InstantiateFlags::empty())?;
/// for step in 0..4 {
///     input.as_mut_slice()?.fill(step as f32); // waits for the launch that read it
///     exec.launch(&stream)?;
///     assert!(output.as_slice()?.iter().all(|&v| v == step as f32)); // waits for this launch
/// }
/// # Ok(()) }
/// ```
pub struct SharedPinnedBuffer<T: Pod> {
    buffer: Arc<PinnedBuffer<T>>,
    /// The buffer's tracker, shared with the graphs (its `writes` is unused here).
    access: HostAccess,
}

impl<T: Pod> std::fmt::Debug for SharedPinnedBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedPinnedBuffer").field("buffer", &self.buffer).finish()
    }
}

impl<T: Pod> SharedPinnedBuffer<T> {
    /// Makes `buffer` shareable with graphs. Its copies in flight (on streams, or by launches
    /// of graphs that captured copies of it) stay tracked: the first slice waits for them.
    ///
    /// Fails when the copies of its chunks can be neither ordered nor waited for (see
    /// [`PinnedBuffer::chunks_mut`]).
    pub fn new(buffer: PinnedBuffer<T>) -> Result<SharedPinnedBuffer<T>> {
        let access = buffer.uses()?.graph_access(false);
        Ok(SharedPinnedBuffer { buffer: Arc::new(buffer), access })
    }

    /// The number of elements.
    #[inline]
    pub fn len(&self) -> usize {
        self.buffer.len()
    }

    /// Whether there are no elements (never: a pinned buffer has at least one).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.buffer.is_empty()
    }

    /// The host address of the first element. Reading or writing through it while a launch
    /// uses the memory is a data race; use the slices.
    #[inline]
    pub fn as_ptr(&self) -> *const T {
        self.buffer.as_ptr()
    }

    /// The elements, once the launches that write them have completed (waits for them). While
    /// the guard lives, launches of graphs that write the buffer are refused.
    ///
    /// Fails when the wait fails (a fault in earlier work, reported by the driver).
    pub fn as_slice(&self) -> Result<PinnedSlice<'_, T>> {
        begin_borrow(&self.access.uses, false)?;
        // SAFETY: `len` initialised elements owned by the buffer; no launch in flight writes
        // them (waited for above), and none can be queued while the guard lives.
        let slice = unsafe { std::slice::from_raw_parts(self.buffer.as_ptr(), self.buffer.len()) };
        Ok(PinnedSlice::new(slice, Some(&self.access.uses)))
    }

    /// The elements for writing, once every launch that uses them has completed (waits for
    /// them). While the guard lives, launches of graphs that use the buffer are refused.
    ///
    /// Fails when the wait fails (a fault in earlier work, reported by the driver).
    pub fn as_mut_slice(&mut self) -> Result<PinnedSliceMut<'_, T>> {
        begin_borrow(&self.access.uses, true)?;
        // SAFETY: as in `as_slice`, exclusively: `&mut self` excludes every other guard, no
        // launch in flight uses the memory, and none can be queued while the guard lives. The
        // memory is only ever written through this guard, never through the shared buffer.
        let slice =
            unsafe { std::slice::from_raw_parts_mut(self.buffer.as_ptr().cast_mut(), self.buffer.len()) };
        Ok(PinnedSliceMut::new(slice, Some(&self.access.uses)))
    }

    /// The first element's address, and the owner and tracker of the buffer as a node that
    /// copies to it (`writes`) or from it keeps them.
    fn node_parts(&self, writes: bool) -> (*mut T, Arc<PinnedBuffer<T>>, HostAccess) {
        let access = HostAccess { uses: self.access.uses.clone(), writes };
        (self.buffer.as_ptr().cast_mut(), self.buffer.clone(), access)
    }
}

/// The parameters of a copy of `bytes` between the device address `device` and the host
/// address `host`, in the direction `to_host` says.
fn host_copy_params(
    device: sys::CUdeviceptr,
    host: *mut u8,
    bytes: usize,
    to_host: bool,
) -> sys::CUDA_MEMCPY3D {
    // SAFETY: CUDA_MEMCPY3D is plain C data; all-zero is "nothing set".
    let mut p: sys::CUDA_MEMCPY3D = unsafe { std::mem::zeroed() };
    if to_host {
        p.srcMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
        p.srcDevice = device;
        p.dstMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_HOST;
        p.dstHost = host.cast();
    } else {
        p.srcMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_HOST;
        p.srcHost = host.cast_const().cast();
        p.dstMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
        p.dstDevice = device;
    }
    p.WidthInBytes = bytes;
    p.Height = 1;
    p.Depth = 1;
    p
}

impl Graph {
    /// Adds a node that copies `src`, device memory, into `dst`, a pinned buffer shared with
    /// graphs (device to host; the lengths must match)
    /// ([`cuGraphAddMemcpyNode`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// The graph keeps both alive; every launch of an executable graph made from it is
    /// recorded on `dst` as a copy that writes it (see [`SharedPinnedBuffer`]). Lengths that
    /// differ are an [`Error::InvalidArgument`].
    pub fn add_memcpy_to_pinned_node<T: Pod>(
        &self,
        dependencies: &[GraphNode<'_>],
        dst: &SharedPinnedBuffer<T>,
        src: &GraphSlice<T>,
    ) -> Result<GraphNode<'_>> {
        self.add_pinned_copy("Graph::add_memcpy_to_pinned_node", dependencies, dst, src, true)
    }

    /// Adds a node that copies `src`, a pinned buffer shared with graphs, into `dst`, device
    /// memory (host to device; the lengths must match)
    /// ([`cuGraphAddMemcpyNode`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// The graph keeps both alive; every launch of an executable graph made from it is
    /// recorded on `src` as a copy that reads it (see [`SharedPinnedBuffer`]). Lengths that
    /// differ are an [`Error::InvalidArgument`].
    pub fn add_memcpy_from_pinned_node<T: Pod>(
        &self,
        dependencies: &[GraphNode<'_>],
        dst: &GraphSlice<T>,
        src: &SharedPinnedBuffer<T>,
    ) -> Result<GraphNode<'_>> {
        self.add_pinned_copy("Graph::add_memcpy_from_pinned_node", dependencies, src, dst, false)
    }

    fn add_pinned_copy<T: Pod>(
        &self,
        operation: &'static str,
        dependencies: &[GraphNode<'_>],
        pinned: &SharedPinnedBuffer<T>,
        device: &GraphSlice<T>,
        to_host: bool,
    ) -> Result<GraphNode<'_>> {
        crate::memory::same_len(operation, pinned.len(), device.len())?;
        device.check_node_memory(operation)?;
        if device.is_empty() {
            return Err(Error::invalid(operation, "the slice is empty; give at least one element"));
        }
        let (host, owner, access) = pinned.node_parts(to_host);
        let params = host_copy_params(device.as_raw(), host.cast(), device.size_in_bytes(), to_host);
        let (graph, ctx) = (self.raw, self.ctx.as_raw());
        // SAFETY: the graph is live; `params` describes one row of `bytes` within both the
        // pinned buffer and the device slice, both kept alive below; the launches that run the
        // node are tracked on the buffer, and refused while the host holds it.
        let node = self.add_with("cuGraphAddMemcpyNode", dependencies, |out, deps, n| unsafe {
            sys::cuGraphAddMemcpyNode(out, graph, deps, n, &params, ctx)
        })?;
        self.keep.push(owner);
        self.keep.push(Arc::new(access));
        if let Some(owner) = device.owner() {
            self.keep.push(owner);
        }
        Ok(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_copies_name_the_host_side_and_count_bytes() {
        let mut host = [0u8; 16];
        let down = host_copy_params(0x1000, host.as_mut_ptr(), 16, true);
        assert_eq!(down.dstMemoryType, sys::CUmemorytype::CU_MEMORYTYPE_HOST);
        assert_eq!(down.srcMemoryType, sys::CUmemorytype::CU_MEMORYTYPE_DEVICE);
        assert_eq!((down.srcDevice, down.WidthInBytes, down.Height, down.Depth), (0x1000, 16, 1, 1));
        assert_eq!(down.dstHost, host.as_mut_ptr().cast());
        let up = host_copy_params(0x2000, host.as_mut_ptr(), 8, false);
        assert_eq!(up.srcMemoryType, sys::CUmemorytype::CU_MEMORYTYPE_HOST);
        assert_eq!((up.dstDevice, up.WidthInBytes), (0x2000, 8));
        assert_eq!(up.srcHost, host.as_ptr().cast());
    }
}
