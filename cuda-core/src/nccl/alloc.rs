//! [`NcclAllocator`]: device memory from `ncclMemAlloc`, for buffers that NCCL moves fastest.

use super::version::{require, since};
use crate::alloc::{Allocator, DeviceAllocation, StreamRef};
use crate::context::Context;
use crate::error::{Result, check_nccl};
use cuhost_driver_sys as sys;
use cuhost_nccl_sys as nccl;

/// Device memory from
/// [`ncclMemAlloc`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/comms.html#ncclmemalloc)
/// (NCCL 2.19), freed with `ncclMemFree`: memory that NCCL can register for zero-copy
/// transfers and NVLink access, which plain `cuMemAlloc` memory is not.
///
/// Use it as the allocator of buffers, directly or under a
/// [`MemoryPool`](crate::pool::MemoryPool) (`ncclMemAlloc` is slow: it maps memory):
///
/// ```no_run
/// use cuhost::nccl::NcclAllocator;
/// use cuhost::{Context, Device, DeviceBuffer, Stream, StreamFlags};
/// use std::sync::Arc;
/// # fn main() -> cuhost::Result<()> {
/// let ctx = Context::primary(&Device::get(0)?)?;
/// let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
/// let buffer = DeviceBuffer::<f32>::new_in(&stream, 1 << 20, Arc::new(NcclAllocator::new(&ctx)))?;
/// # Ok(()) }
/// ```
///
/// `ncclMemFree` is not stream-ordered: giving memory back waits for the stream it is given
/// back on first.
#[derive(Clone, Debug)]
pub struct NcclAllocator {
    context: Context,
}

impl NcclAllocator {
    /// Allocates on the device of `context`.
    pub fn new(context: &Context) -> NcclAllocator {
        NcclAllocator { context: context.clone() }
    }
}

// SAFETY: `ncclMemAlloc` returns device memory of the context's device, of the size asked,
// aligned at least as `cuMemAlloc`, owned by the caller until `ncclMemFree`; `deallocate` waits
// for the stream's work before freeing it.
unsafe impl Allocator for NcclAllocator {
    fn context(&self) -> Option<&Context> {
        Some(&self.context)
    }

    fn allocate(&self, size: usize, _stream: StreamRef<'_>) -> Result<DeviceAllocation> {
        require("ncclMemAlloc", since::REGISTER)?;
        self.context.enter()?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: one out-parameter; the context (and so the device) is current.
        check_nccl("ncclMemAlloc", unsafe { nccl::ncclMemAlloc(&mut ptr, size) })?;
        Ok(DeviceAllocation { ptr: ptr as usize as sys::CUdeviceptr, size, token: 0 })
    }

    unsafe fn deallocate(&self, allocation: DeviceAllocation, stream: StreamRef<'_>) -> Result<()> {
        // A release path: a deferred error from elsewhere must not skip the wait or the free.
        // The free is not stream-ordered: wait for the work that may use the memory.
        stream.wait_for_users(&self.context)?;
        // SAFETY: the caller gives back an allocation of this allocator, once, and no work
        // uses it any more.
        check_nccl("ncclMemFree", unsafe {
            nccl::ncclMemFree(allocation.ptr as usize as *mut std::ffi::c_void)
        })
    }

    fn name(&self) -> &'static str {
        "ncclMemAlloc"
    }
}
