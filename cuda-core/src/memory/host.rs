//! Page-locked host memory: the flags of pinned allocations and registered existing memory
//! ([`RegisteredHostMemory`]).

use super::checked_bytes;
use crate::context::Context;
use crate::error::Result;
use crate::flags::flags;
use bytemuck::Pod;
use cuhost_driver_sys as sys;
use std::ffi::c_void;

flags! {
    /// Flags of [`PinnedBuffer::with_flags`](super::PinnedBuffer::with_flags) (`CU_MEMHOSTALLOC_*`).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct HostAllocFlags: u32 {
        /// `CU_MEMHOSTALLOC_PORTABLE`: pinned for every context, not only the allocating one.
        const PORTABLE = 0x1;
        /// `CU_MEMHOSTALLOC_DEVICEMAP`: mapped into the device address space.
        const DEVICEMAP = 0x2;
        /// `CU_MEMHOSTALLOC_WRITECOMBINED`: write-combined; fast for the device to read, very
        /// slow for the host to read.
        const WRITECOMBINED = 0x4;
    }
}

flags! {
    /// Flags of [`RegisteredHostMemory::register`] (`CU_MEMHOSTREGISTER_*`).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct HostRegisterFlags: u32 {
        /// `CU_MEMHOSTREGISTER_PORTABLE`: pinned for every context.
        const PORTABLE = 0x1;
        /// `CU_MEMHOSTREGISTER_DEVICEMAP`: mapped into the device address space.
        const DEVICEMAP = 0x2;
        /// `CU_MEMHOSTREGISTER_IOMEMORY`: the memory is I/O memory of a third-party device.
        const IOMEMORY = 0x4;
        /// `CU_MEMHOSTREGISTER_READ_ONLY`: the device only reads it.
        const READ_ONLY = 0x8;
    }
}

pub(crate) fn host_device_ptr(ctx: &Context, p: *mut c_void) -> Result<sys::CUdeviceptr> {
    ctx.enter()?;
    let mut d = 0;
    // SAFETY: `p` is page-locked memory; the flags must be 0.
    unsafe { driver!(cuMemHostGetDevicePointer(&mut d, p, 0)) }?;
    Ok(d)
}

/// An existing host slice, page-locked for the lifetime of this value and unregistered on drop
/// ([`cuMemHostRegister`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
#[derive(Debug)]
pub struct RegisteredHostMemory<'a, T: Pod> {
    slice: &'a mut [T],
    ctx: Context,
}

impl<'a, T: Pod> RegisteredHostMemory<'a, T> {
    /// Page-locks `slice` (the driver rounds to whole pages). A slice of no bytes is an
    /// [`crate::error::Error::InvalidArgument`].
    pub fn register(ctx: &Context, slice: &'a mut [T], flags: HostRegisterFlags) -> Result<Self> {
        let bytes = checked_bytes::<T>("RegisteredHostMemory::register", slice.len())?;
        ctx.enter()?;
        // SAFETY: the slice is live and exclusively borrowed for as long as it stays registered.
        unsafe { driver!(cuMemHostRegister(slice.as_mut_ptr().cast(), bytes, flags.bits())) }?;
        Ok(RegisteredHostMemory { slice, ctx: ctx.clone() })
    }

    /// The device address of the memory (needs `DEVICEMAP`, or a device with unified addressing)
    /// ([`cuMemHostGetDevicePointer`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// Without either, the driver refuses with its status (`CUDA_ERROR_INVALID_VALUE`).
    pub fn device_ptr(&self) -> Result<sys::CUdeviceptr> {
        host_device_ptr(&self.ctx, self.slice.as_ptr().cast_mut().cast())
    }
}

impl<T: Pod> std::ops::Deref for RegisteredHostMemory<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.slice
    }
}

impl<T: Pod> std::ops::DerefMut for RegisteredHostMemory<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.slice
    }
}

impl<T: Pod> Drop for RegisteredHostMemory<'_, T> {
    fn drop(&mut self) {
        let p = self.slice.as_mut_ptr().cast::<c_void>();
        // SAFETY: the slice was registered by this value and is unregistered once.
        self.ctx.with_current_for_drop("RegisteredHostMemory", || unsafe { driver!(cuMemHostUnregister(p)) });
    }
}
