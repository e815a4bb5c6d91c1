//! Page-locked host memory: pinned allocations ([`PinnedHostBuffer`]) and registered
//! existing memory ([`RegisteredHostMemory`]).

use super::checked_bytes;
use crate::context::Context;
use crate::error::{Result, check};
use bitflags::bitflags;
use bytemuck::Pod;
use cuda_driver_sys as sys;
use std::ffi::c_void;

bitflags! {
    /// Flags of [`PinnedHostBuffer::new`] (`CU_MEMHOSTALLOC_*`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
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

bitflags! {
    /// Flags of [`RegisteredHostMemory::register`] (`CU_MEMHOSTREGISTER_*`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
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

/// `len` elements of `T` in page-locked host memory, zero-initialised, freed on drop
/// ([`cuMemHostAlloc`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
///
/// It dereferences to `[T]`. Copies to and from it run at full bus speed and truly
/// asynchronously.
#[derive(Debug)]
pub struct PinnedHostBuffer<T: Pod> {
    ptr: *mut T,
    len: usize,
    flags: HostAllocFlags,
    ctx: Context,
}

// SAFETY: the buffer owns its memory; T is plain data.
unsafe impl<T: Pod> Send for PinnedHostBuffer<T> {}
// SAFETY: shared access is read-only through `&[T]`.
unsafe impl<T: Pod> Sync for PinnedHostBuffer<T> {}

impl<T: Pod> PinnedHostBuffer<T> {
    /// Allocates `len` zeroed elements of pinned host memory
    /// ([`cuMemHostAlloc`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn new(ctx: &Context, len: usize, flags: HostAllocFlags) -> Result<PinnedHostBuffer<T>> {
        let bytes = checked_bytes::<T>("PinnedHostBuffer::new", len)?;
        ctx.enter()?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: one out-parameter; the context is current.
        check("cuMemHostAlloc", unsafe { sys::cuMemHostAlloc(&mut p, bytes, flags.bits()) })?;
        // SAFETY: `bytes` bytes were just allocated at `p`; zero bytes are a valid `T` (Pod).
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, bytes) };
        Ok(PinnedHostBuffer { ptr: p.cast(), len, flags, ctx: ctx.clone() })
    }

    /// Allocates a pinned copy of `src`.
    pub fn from_slice(ctx: &Context, src: &[T], flags: HostAllocFlags) -> Result<PinnedHostBuffer<T>> {
        let mut b = PinnedHostBuffer::new(ctx, src.len(), flags)?;
        b.copy_from_slice(src);
        Ok(b)
    }

    /// The host address.
    pub fn as_ptr(&self) -> *const T {
        self.ptr
    }

    /// The host address, for writing.
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.ptr
    }

    /// The flags it was allocated with.
    pub fn flags(&self) -> HostAllocFlags {
        self.flags
    }

    /// The flags the driver reports for the allocation
    /// ([`cuMemHostGetFlags`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn driver_flags(&self) -> Result<HostAllocFlags> {
        let mut f = 0;
        // SAFETY: the pointer is a live pinned allocation; one out-parameter.
        check("cuMemHostGetFlags", unsafe { sys::cuMemHostGetFlags(&mut f, self.ptr.cast()) })?;
        Ok(HostAllocFlags::from_bits_retain(f))
    }

    /// The device address of the memory, for kernels to read and write it over the bus
    /// ([`cuMemHostGetDevicePointer`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn device_ptr(&self) -> Result<sys::CUdeviceptr> {
        host_device_ptr(&self.ctx, self.ptr.cast())
    }

    /// The context it was allocated in.
    pub fn context(&self) -> &Context {
        &self.ctx
    }
}

fn host_device_ptr(ctx: &Context, p: *mut c_void) -> Result<sys::CUdeviceptr> {
    ctx.enter()?;
    let mut d = 0;
    // SAFETY: `p` is page-locked memory; the flags must be 0.
    check("cuMemHostGetDevicePointer", unsafe { sys::cuMemHostGetDevicePointer(&mut d, p, 0) })?;
    Ok(d)
}

impl<T: Pod> std::ops::Deref for PinnedHostBuffer<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `len` initialised elements live at `ptr` while `self` does.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T: Pod> std::ops::DerefMut for PinnedHostBuffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as above, borrowed exclusively.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl<T: Pod> Drop for PinnedHostBuffer<T> {
    fn drop(&mut self) {
        let p = self.ptr.cast::<c_void>();
        // SAFETY: this value owns the allocation and frees it once.
        self.ctx.with_current_for_drop("cuMemFreeHost", || unsafe { sys::cuMemFreeHost(p) });
    }
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
    /// [`crate::Error::InvalidArgument`].
    pub fn register(ctx: &Context, slice: &'a mut [T], flags: HostRegisterFlags) -> Result<Self> {
        let bytes = checked_bytes::<T>("RegisteredHostMemory::register", slice.len())?;
        ctx.enter()?;
        // SAFETY: the slice is live and exclusively borrowed for as long as it stays registered.
        check("cuMemHostRegister", unsafe {
            sys::cuMemHostRegister(slice.as_mut_ptr().cast(), bytes, flags.bits())
        })?;
        Ok(RegisteredHostMemory { slice, ctx: ctx.clone() })
    }

    /// The device address of the memory (needs `DEVICEMAP`, or a device with unified addressing)
    /// ([`cuMemHostGetDevicePointer`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
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
        self.ctx.with_current_for_drop("cuMemHostUnregister", || unsafe { sys::cuMemHostUnregister(p) });
    }
}
