//! Upstream allocators: where a pool's memory comes from.
//!
//! Each one makes its context current (if another is) before calling the driver, so that a
//! pool may be used from any thread. Giving memory back is a release path: it makes the context
//! current without reporting the context's deferred errors ([`Context::make_current`]), so a
//! pending error from elsewhere (a panicked host callback, a failed `Drop`) never makes a free
//! return early and leak the memory.

use super::allocator::{
    Allocator, DeviceAllocation, PinnedAllocation, PinnedAllocator, StreamEvents, StreamRef,
};
use crate::context::Context;
use crate::error::Result;
use cuhost_driver_sys as sys;

/// Which streams may access managed memory (`CUmemAttach_flags`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemAttach {
    /// `CU_MEM_ATTACH_GLOBAL`: any stream on any device.
    Global,
    /// `CU_MEM_ATTACH_HOST`: the host only, until attached to a stream.
    Host,
    /// `CU_MEM_ATTACH_SINGLE`: one stream (`ManagedBuffer::attach_async` only).
    Single,
}

impl MemAttach {
    pub(crate) fn bits(self) -> u32 {
        match self {
            MemAttach::Global => sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL.0,
            MemAttach::Host => sys::CUmemAttach_flags::CU_MEM_ATTACH_HOST.0,
            MemAttach::Single => sys::CUmemAttach_flags::CU_MEM_ATTACH_SINGLE.0,
        }
    }
}

/// Plain device memory from
/// [`cuMemAlloc`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html), freed
/// with `cuMemFree` (which waits for the device to be done with it).
#[derive(Clone, Debug)]
pub struct DeviceAllocator {
    context: Context,
}

impl DeviceAllocator {
    /// Allocates in `context`.
    pub fn new(context: &Context) -> Self {
        DeviceAllocator { context: context.clone() }
    }
}

// SAFETY: `cuMemAlloc` returns device memory of the allocator's context, of the size asked,
// aligned to 256 bytes, owned by the caller until `cuMemFree`; `cuMemFree` waits for the
// device to be done with it.
unsafe impl Allocator for DeviceAllocator {
    fn context(&self) -> Option<&Context> {
        Some(&self.context)
    }

    fn allocate(&self, size: usize, _stream: StreamRef<'_>) -> Result<DeviceAllocation> {
        self.context.enter()?;
        let mut ptr = 0;
        // SAFETY: one out-parameter; the context is current.
        unsafe { driver!(cuMemAlloc(&mut ptr, size)) }?;
        Ok(DeviceAllocation { ptr, size, token: 0 })
    }

    unsafe fn deallocate(&self, allocation: DeviceAllocation, _stream: StreamRef<'_>) -> Result<()> {
        // A release: a deferred error pending in the context must not skip the free.
        self.context.make_current()?;
        // SAFETY: the caller gives back an allocation of this allocator, once.
        unsafe { driver!(cuMemFree(allocation.ptr)) }
    }

    fn name(&self) -> &'static str {
        "cuMemAlloc"
    }
}

/// Managed (unified) memory from
/// [`cuMemAllocManaged`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html),
/// attached globally: reachable from the host and from every device and stream.
#[derive(Clone, Debug)]
pub struct ManagedAllocator {
    context: Context,
    attach: MemAttach,
}

impl ManagedAllocator {
    /// Allocates in `context`, attached globally.
    pub fn new(context: &Context) -> Self {
        ManagedAllocator::with_attach(context, MemAttach::Global)
    }

    /// Allocates in `context`, attached as `attach` says (`Global` or `Host`).
    pub fn with_attach(context: &Context, attach: MemAttach) -> Self {
        ManagedAllocator { context: context.clone(), attach }
    }
}

// SAFETY: `cuMemAllocManaged` returns managed memory (reachable from the host and the
// devices), of the size asked, aligned to 256 bytes, owned by the caller until `cuMemFree`,
// which waits for the device to be done with it.
unsafe impl Allocator for ManagedAllocator {
    fn context(&self) -> Option<&Context> {
        Some(&self.context)
    }

    fn allocate(&self, size: usize, _stream: StreamRef<'_>) -> Result<DeviceAllocation> {
        self.context.enter()?;
        let mut ptr = 0;
        // SAFETY: one out-parameter; the context is current.
        unsafe { driver!(cuMemAllocManaged(&mut ptr, size, self.attach.bits())) }?;
        Ok(DeviceAllocation { ptr, size, token: 0 })
    }

    unsafe fn deallocate(&self, allocation: DeviceAllocation, _stream: StreamRef<'_>) -> Result<()> {
        // A release: a deferred error pending in the context must not skip the free.
        self.context.make_current()?;
        // SAFETY: the caller gives back an allocation of this allocator, once.
        unsafe { driver!(cuMemFree(allocation.ptr)) }
    }

    fn name(&self) -> &'static str {
        "cuMemAllocManaged"
    }
}

/// Page-locked host memory from
/// [`cuMemHostAlloc`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)
/// (portable: usable from every context), freed with `cuMemFreeHost`.
#[derive(Clone, Debug)]
pub struct HostAllocator {
    context: Context,
    flags: u32,
}

impl HostAllocator {
    /// Allocates portable pinned memory through `context`.
    pub fn new(context: &Context) -> Self {
        HostAllocator { context: context.clone(), flags: sys::CU_MEMHOSTALLOC_PORTABLE }
    }

    /// With `cuMemHostAlloc` flags of your choice (`CU_MEMHOSTALLOC_*`).
    pub fn with_flags(context: &Context, flags: u32) -> Self {
        HostAllocator { context: context.clone(), flags }
    }
}

// SAFETY: `cuMemHostAlloc` returns page-locked host memory of the size asked, owned by the
// caller until `cuMemFreeHost`; nothing else refers to it.
unsafe impl PinnedAllocator for HostAllocator {
    fn allocate(&self, size: usize) -> Result<PinnedAllocation> {
        self.context.enter()?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: one out-parameter; the context is current.
        unsafe { driver!(cuMemHostAlloc(&mut ptr, size, self.flags)) }?;
        Ok(PinnedAllocation { ptr: ptr.cast(), size })
    }

    unsafe fn deallocate(&self, allocation: PinnedAllocation) -> Result<()> {
        // A release: a deferred error pending in the context must not skip the free.
        self.context.make_current()?;
        // SAFETY: the caller gives back an allocation of this allocator, once, unused by copies.
        unsafe { driver!(cuMemFreeHost(allocation.ptr.cast())) }
    }

    fn context(&self) -> Option<&Context> {
        Some(&self.context)
    }
}

/// Whether `status`, the answer of `cuEventQuery` on an event the crate recorded, says that
/// the work queued before the recording can no longer touch memory: it has completed, or its
/// context is gone or has faulted (a sticky error, after which none of its work runs).
///
/// Every other answer keeps the memory: not ready, and an event last recorded into a stream
/// capture, for which nothing real was recorded. The 13.0 driver answers the latter with
/// `CUDA_ERROR_CAPTURED_EVENT` while the capture runs and with `CUDA_ERROR_INVALID_VALUE` once it
/// has ended, while the graph made from it may still run. An answer not listed here keeps the
/// memory too: a block kept too long is a leak, one reused too soon is a write under running
/// work.
pub(crate) fn recorded_work_is_over(status: sys::CUresult) -> bool {
    use sys::CUresult as R;
    matches!(
        status,
        R::CUDA_SUCCESS
            | R::CUDA_ERROR_DEINITIALIZED
            | R::CUDA_ERROR_CONTEXT_IS_DESTROYED
            | R::CUDA_ERROR_INVALID_CONTEXT
            | R::CUDA_ERROR_ILLEGAL_ADDRESS
            | R::CUDA_ERROR_LAUNCH_FAILED
            | R::CUDA_ERROR_LAUNCH_TIMEOUT
            | R::CUDA_ERROR_HARDWARE_STACK_ERROR
            | R::CUDA_ERROR_ILLEGAL_INSTRUCTION
            | R::CUDA_ERROR_MISALIGNED_ADDRESS
            | R::CUDA_ERROR_INVALID_ADDRESS_SPACE
            | R::CUDA_ERROR_INVALID_PC
            | R::CUDA_ERROR_ECC_UNCORRECTABLE
            | R::CUDA_ERROR_ASSERT
    )
}

/// Events of the driver, created without timing in one context
/// ([`cuEventRecord`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html),
/// `cuEventQuery`): what the crate's pools record.
///
/// Private to the crate: its methods take raw handles, which only the pools (passing handles
/// that `create` made and that were not destroyed) may give it.
#[derive(Clone, Debug)]
pub(crate) struct DriverEvents {
    context: Context,
}

impl DriverEvents {
    /// Events in `context`.
    pub(crate) fn new(context: &Context) -> Self {
        DriverEvents { context: context.clone() }
    }
}

// SAFETY: `is_complete` is `cuEventQuery` read by `recorded_work_is_over` (true once the
// recorded work completed, or when the event's context is gone or faulted); `record` is `cuEventRecord`, which either
// records or fails. The type is private to the crate, whose pools pass only handles that
// `create` made and did not destroy.
unsafe impl StreamEvents for DriverEvents {
    fn create(&self) -> Result<u64> {
        self.context.enter()?;
        let mut event = std::ptr::null_mut();
        let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING.0;
        // SAFETY: one out-parameter; the context is current.
        unsafe { driver!(cuEventCreate(&mut event, flags)) }?;
        Ok(event as u64)
    }

    fn record(&self, event: u64, stream: StreamRef<'_>) -> Result<()> {
        if stream.is_default() {
            // The handle names the default stream of the current context, which must be the
            // events' context (an event is recorded on a stream of its own context). A
            // release path (a buffer being given back): deferred errors stay where they are.
            self.context.make_current()?;
        }
        // SAFETY: the event was created by `create` and is alive until `destroy` (the pools
        // pass only such handles; the type is private); the stream is alive (the caller holds
        // it).
        unsafe { driver!(cuEventRecord(event as sys::CUevent, stream.as_raw())) }
    }

    fn is_complete(&self, event: u64) -> bool {
        // SAFETY: as in `record`.
        recorded_work_is_over(unsafe { sys::cuEventQuery(event as sys::CUevent) })
    }

    fn destroy(&self, event: u64) {
        self.context.with_current_for_drop("DeviceBuffer", || {
            // SAFETY: destroyed once; the driver defers it until recorded work is done.
            unsafe { driver!(cuEventDestroy(event as sys::CUevent)) }
        });
    }
}
