//! Runtime allocations as the crate's buffers: the runtime's allocators (`cudaMalloc`,
//! `cudaMallocManaged`, `cudaHostAlloc`) behind [`DeviceBuffer`], [`ManagedBuffer`] and
//! [`PinnedBuffer`]; registered host memory; memset, prefetch, advice and pointer attributes.

use super::copy::{CopyDestination, DeviceResident, finished};
use super::{defer, ordinal};
use crate::alloc::{Allocator, DeviceAllocation, PinnedAllocation, PinnedAllocator, StreamRef};
use crate::context::Context;
use crate::error::{Error, Result, check_runtime};
use crate::memory::{
    DeviceBuffer, HostAllocFlags, HostRegisterFlags, Managed, ManagedBuffer, PinnedBuffer, checked_bytes,
};
use bytemuck::Pod;
use cuhost_cudart_sys as rt;
use std::ffi::c_void;
use std::sync::Arc;

/// How a managed allocation is attached at first (`cudaMemAttach*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ManagedAttach {
    /// `cudaMemAttachGlobal`: any stream on any device may use it.
    Global,
    /// `cudaMemAttachHost`: only the host, until attached to a stream.
    Host,
}

impl ManagedAttach {
    fn bits(self) -> u32 {
        match self {
            ManagedAttach::Global => rt::cudaMemAttachGlobal,
            ManagedAttach::Host => rt::cudaMemAttachHost,
        }
    }
}

/// Device memory from
/// [`cudaMalloc`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html),
/// given back with
/// [`cudaFree`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)
/// (which waits for the device to be done with it), as an [`Allocator`] of the crate: what
/// [`malloc`] allocates through, and an upstream for a
/// [`MemoryPool`](crate::pool::MemoryPool).
///
/// The runtime allocates in the thread's current context; this allocator makes its context
/// current first (the runtime shares a device's primary context with the driver).
#[derive(Clone, Debug)]
pub struct RuntimeAllocator {
    context: Context,
}

impl RuntimeAllocator {
    /// Allocates in `context`.
    pub fn new(context: &Context) -> RuntimeAllocator {
        RuntimeAllocator { context: context.clone() }
    }
}

// SAFETY: `cudaMalloc` returns device memory of the context's device, of the size asked,
// aligned to 256 bytes, owned by the caller until `cudaFree`, which waits for the device's work.
unsafe impl Allocator for RuntimeAllocator {
    fn context(&self) -> Option<&Context> {
        Some(&self.context)
    }

    fn allocate(&self, size: usize, _stream: StreamRef<'_>) -> Result<DeviceAllocation> {
        self.context.enter()?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: one out-parameter; the context is current.
        check_runtime("cudaMalloc", unsafe { rt::cudaMalloc(&mut ptr, size) })?;
        Ok(DeviceAllocation { ptr: ptr as u64, size, token: 0 })
    }

    unsafe fn deallocate(&self, allocation: DeviceAllocation, _stream: StreamRef<'_>) -> Result<()> {
        self.context.make_current()?;
        // SAFETY: the caller gives back an allocation of this allocator, once; cudaFree waits
        // for the work that may still use it.
        check_runtime("cudaFree", unsafe { rt::cudaFree(allocation.ptr as *mut c_void) })
    }

    fn name(&self) -> &'static str {
        "cudaMalloc"
    }
}

/// Managed memory from
/// [`cudaMallocManaged`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html),
/// attached as a [`ManagedAttach`] says, given back with `cudaFree`: what [`malloc_managed`]
/// allocates through.
///
/// Buffers of managed memory have the type [`ManagedBuffer`], which only
/// [`malloc_managed`] (or [`DeviceBuffer::from_allocation`]) makes from this allocator:
/// [`DeviceBuffer::new_in`] with it would type the memory as device-only, which is allowed (it
/// is device memory too) but loses the host access and advice.
#[derive(Clone, Debug)]
pub struct RuntimeManagedAllocator {
    context: Context,
    attach: ManagedAttach,
}

impl RuntimeManagedAllocator {
    /// Allocates in `context`, attached as `attach` says.
    pub fn new(context: &Context, attach: ManagedAttach) -> RuntimeManagedAllocator {
        RuntimeManagedAllocator { context: context.clone(), attach }
    }

    /// How new allocations are attached.
    pub fn attach(&self) -> ManagedAttach {
        self.attach
    }
}

// SAFETY: `cudaMallocManaged` returns managed memory (reachable from the host and the devices),
// of the size asked, aligned to 256 bytes, owned by the caller until `cudaFree`, which waits
// for the device's work.
unsafe impl Allocator for RuntimeManagedAllocator {
    fn context(&self) -> Option<&Context> {
        Some(&self.context)
    }

    fn allocate(&self, size: usize, _stream: StreamRef<'_>) -> Result<DeviceAllocation> {
        self.context.enter()?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: one out-parameter; the context is current; the flag is cudaMallocManaged's.
        check_runtime("cudaMallocManaged", unsafe {
            rt::cudaMallocManaged(&mut ptr, size, self.attach.bits())
        })?;
        Ok(DeviceAllocation { ptr: ptr as u64, size, token: 0 })
    }

    unsafe fn deallocate(&self, allocation: DeviceAllocation, _stream: StreamRef<'_>) -> Result<()> {
        self.context.make_current()?;
        // SAFETY: as for `RuntimeAllocator`.
        check_runtime("cudaFree", unsafe { rt::cudaFree(allocation.ptr as *mut c_void) })
    }

    fn name(&self) -> &'static str {
        "cudaMallocManaged"
    }
}

/// Page-locked host memory from
/// [`cudaHostAlloc`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)
/// with [`HostAllocFlags`], given back with
/// [`cudaFreeHost`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html),
/// as a [`PinnedAllocator`] of the crate: what [`host_alloc`] allocates through.
///
/// The runtime allocates through the current device's context; with
/// [`HostAllocFlags::PORTABLE`] the memory is pinned for every context.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuntimeHostAllocator {
    flags: HostAllocFlags,
}

impl RuntimeHostAllocator {
    /// Allocates with `flags` (`cudaHostAllocPortable`, `cudaHostAllocMapped`,
    /// `cudaHostAllocWriteCombined` have the bits of the driver's flags).
    pub fn new(flags: HostAllocFlags) -> RuntimeHostAllocator {
        RuntimeHostAllocator { flags }
    }

    /// The flags new allocations get.
    pub fn flags(&self) -> HostAllocFlags {
        self.flags
    }
}

// SAFETY: `cudaHostAlloc` returns page-locked host memory of the size asked, owned by the
// caller until `cudaFreeHost`; nothing else refers to it.
unsafe impl PinnedAllocator for RuntimeHostAllocator {
    fn allocate(&self, size: usize) -> Result<PinnedAllocation> {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: one out-parameter; the flag bits are cudaHostAlloc's.
        check_runtime("cudaHostAlloc", unsafe { rt::cudaHostAlloc(&mut ptr, size, self.flags.bits()) })?;
        Ok(PinnedAllocation { ptr: ptr.cast(), size })
    }

    unsafe fn deallocate(&self, allocation: PinnedAllocation) -> Result<()> {
        // SAFETY: the caller gives back an allocation of this allocator, once, that no queued
        // copy uses.
        check_runtime("cudaFreeHost", unsafe { rt::cudaFreeHost(allocation.ptr.cast()) })
    }
}

/// Allocates `len` elements of device memory with `cudaMalloc` in `stream`'s context, as a
/// [`DeviceBuffer`] ordered on `stream`; given back with `cudaFree` when dropped
/// ([`cudaMalloc`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
/// The contents are whatever the memory held (any bit pattern is a valid `T`).
///
/// `stream` may be a runtime [`Stream`](super::Stream) (`&stream` dereferences to the driver
/// stream it is) or any [`crate::stream::Stream`]. A length of 0, or one whose byte size overflows, is
/// an [`Error::InvalidArgument`]; the runtime's out-of-memory is
/// [`Error::Runtime`] with `cudaErrorMemoryAllocation`.
#[track_caller]
pub fn malloc<T: Pod>(stream: &crate::stream::Stream, len: usize) -> Result<DeviceBuffer<T>> {
    DeviceBuffer::new_in(stream, len, Arc::new(RuntimeAllocator::new(stream.context())))
}

/// Allocates `len` elements of managed memory with `cudaMallocManaged` in `stream`'s context,
/// attached as `attach` says, as a [`ManagedBuffer`] ordered on `stream`; given back with
/// `cudaFree` when dropped
/// ([`cudaMallocManaged`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
/// The contents are not initialised (the host reads zeros from pages never written).
///
/// A length of 0, or one whose byte size overflows, is an [`Error::InvalidArgument`].
#[track_caller]
pub fn malloc_managed<T: Pod>(
    stream: &crate::stream::Stream,
    len: usize,
    attach: ManagedAttach,
) -> Result<ManagedBuffer<T>> {
    let bytes = checked_bytes::<T>("runtime::malloc_managed", len)?;
    let allocator = Arc::new(RuntimeManagedAllocator::new(stream.context(), attach));
    let allocation = allocator.allocate(bytes, StreamRef::from(stream))?;
    let shared: Arc<dyn Allocator> = allocator.clone();
    // SAFETY: `cudaMallocManaged` just handed out `bytes` bytes of managed memory in the
    // stream's context, aligned to 256 bytes, that nothing else owns; `shared` gives it back.
    match unsafe { DeviceBuffer::<T, Managed>::from_allocation(stream, shared, allocation, len) } {
        Ok(buffer) => Ok(buffer),
        Err(e) => {
            // SAFETY: the allocation was not adopted and nothing used it.
            let _ = unsafe { allocator.deallocate(allocation, StreamRef::from(stream)) };
            Err(e)
        }
    }
}

/// Allocates `len` zeroed elements of page-locked host memory with `cudaHostAlloc` and `flags`,
/// as a [`PinnedBuffer`]; given back with `cudaFreeHost` when dropped
/// ([`cudaHostAlloc`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
///
/// A length of 0, or one whose byte size overflows, is an [`Error::InvalidArgument`].
#[track_caller]
pub fn host_alloc<T: Pod>(len: usize, flags: HostAllocFlags) -> Result<PinnedBuffer<T>> {
    PinnedBuffer::new_in(len, Arc::new(RuntimeHostAllocator::new(flags)))
}

/// A host slice page-locked with `cudaHostRegister` while this value lives, unregistered with
/// [`cudaHostUnregister`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)
/// on drop: a borrow of memory the caller owns, like the driver's
/// [`RegisteredHostMemory`](crate::memory::RegisteredHostMemory). It dereferences to the slice
/// and is a source or destination of the synchronous copies; stream-ordered copies with it are
/// [`memcpy_async_unchecked`](super::memcpy_async_unchecked) (the host could touch the slice
/// while they run). Unregistering errors are kept (see
/// [`take_deferred_errors`](super::take_deferred_errors)).
#[derive(Debug)]
pub struct HostRegistration<'a, T: Pod> {
    slice: &'a mut [T],
}

impl<'a, T: Pod> HostRegistration<'a, T> {
    /// Page-locks `slice`
    /// ([`cudaHostRegister`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
    ///
    /// An empty slice is an [`Error::InvalidArgument`]; memory that is already registered
    /// (`cudaErrorHostMemoryAlreadyRegistered`) or cannot be locked fails with the runtime's
    /// status.
    pub fn register(slice: &'a mut [T], flags: HostRegisterFlags) -> Result<HostRegistration<'a, T>> {
        let bytes = std::mem::size_of_val(slice);
        if bytes == 0 {
            return Err(Error::invalid("HostRegistration::register", "cannot register an empty slice"));
        }
        // SAFETY: the slice is `bytes` bytes of live memory, borrowed for as long as it is registered.
        check_runtime("cudaHostRegister", unsafe {
            rt::cudaHostRegister(slice.as_mut_ptr().cast(), bytes, flags.bits())
        })?;
        Ok(HostRegistration { slice })
    }
}

impl<T: Pod> std::ops::Deref for HostRegistration<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.slice
    }
}

impl<T: Pod> std::ops::DerefMut for HostRegistration<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.slice
    }
}

impl<T: Pod> Drop for HostRegistration<'_, T> {
    fn drop(&mut self) {
        // SAFETY: the slice was registered by this value.
        if let Err(e) = check_runtime("cudaHostUnregister", unsafe {
            rt::cudaHostUnregister(self.slice.as_mut_ptr().cast())
        }) {
            defer(e);
        }
    }
}

/// Sets every byte of `dst` (device memory: a [`DeviceBuffer`] of any memory space or a
/// [`DeviceViewMut`](crate::memory::DeviceViewMut)) to `value`, in its context
/// ([`cudaMemset`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
/// Like `cudaMemset`, it runs on the default stream: work queued on non-blocking streams that
/// uses `dst` must be waited for first. It then waits for the default stream (the C call may
/// return once the memset is queued), so the result is visible to any stream.
pub fn memset<T: Pod, D: CopyDestination<T> + DeviceResident + ?Sized>(dst: &mut D, value: u8) -> Result<()> {
    let bytes = dst.destination_len() * std::mem::size_of::<T>();
    dst.resident_context().enter()?;
    let ptr = dst.destination_ptr()?;
    // SAFETY: device memory of `bytes` bytes, exclusively borrowed.
    finished(check_runtime("cudaMemset", unsafe { rt::cudaMemset(ptr, i32::from(value), bytes) }))
}

/// [`memset`] queued on `stream`
/// ([`cudaMemsetAsync`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
/// `dst` notes `stream` when it is not its own, and is not given back before `stream` has
/// passed the memset, so the memset never writes memory given back.
///
/// A default stream of another thread or context is an
/// [`Error::InvalidArgument`](crate::error::Error::InvalidArgument).
pub fn memset_async<T: Pod, D: CopyDestination<T> + DeviceResident + ?Sized>(
    dst: &mut D,
    value: u8,
    stream: &crate::stream::Stream,
) -> Result<()> {
    let bytes = dst.destination_len() * std::mem::size_of::<T>();
    stream.context().enter()?;
    dst.note_stream(stream)?;
    let ptr = dst.destination_ptr()?;
    // SAFETY: device memory of `bytes` bytes, exclusively borrowed while the call is queued,
    // and not given back before `stream` has passed it (noted above).
    check_runtime("cudaMemsetAsync", unsafe {
        rt::cudaMemsetAsync(ptr, i32::from(value), bytes, stream.as_raw().cast())
    })
}

/// Where managed memory should live, or who accesses it (`cudaMemLocation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemLocation {
    /// A device, by ordinal.
    Device(usize),
    /// The host.
    Host,
}

impl MemLocation {
    fn to_raw(self, operation: &'static str) -> Result<rt::cudaMemLocation> {
        Ok(match self {
            MemLocation::Device(d) => crate::c_layout::runtime::mem_location(
                rt::cudaMemLocationType::cudaMemLocationTypeDevice,
                ordinal(operation, d)?,
            ),
            MemLocation::Host => {
                crate::c_layout::runtime::mem_location(rt::cudaMemLocationType::cudaMemLocationTypeHost, 0)
            }
        })
    }
}

/// Migrates managed memory to `location` ahead of use, in `stream`'s order
/// ([`cudaMemPrefetchAsync`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
///
/// Only managed memory can be prefetched, and the type says so: memory from [`malloc`] does not
/// compile here.
///
/// ```compile_fail
/// # fn f(memory: &cuhost::DeviceBuffer<u32>, stream: &cuhost::Stream) {
/// use cuhost::runtime::{MemLocation, mem_prefetch_async};
/// let _ = mem_prefetch_async(memory, MemLocation::Device(0), stream); // device memory: refused
/// # }
/// ```
pub fn mem_prefetch_async<T: Pod>(
    memory: &ManagedBuffer<T>,
    location: MemLocation,
    stream: &crate::stream::Stream,
) -> Result<()> {
    let loc = location.to_raw("runtime::mem_prefetch_async")?;
    stream.context().enter()?;
    memory.used_on(stream.context(), stream, crate::track::Access::Read)?;
    // SAFETY: the whole managed allocation of the buffer; flags must be 0. The memory is given
    // back only after the work queued on the buffer's stream and on `stream` (noted above).
    check_runtime("cudaMemPrefetchAsync", unsafe {
        rt::cudaMemPrefetchAsync(
            memory.as_raw() as *const c_void,
            memory.size_in_bytes(),
            loc,
            0,
            stream.as_raw().cast(),
        )
    })
}

/// Advice about how managed memory is used (`cudaMemoryAdvise`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemoryAdvise {
    /// `cudaMemAdviseSetReadMostly`: mostly read; read-only copies may be made.
    SetReadMostly,
    /// `cudaMemAdviseUnsetReadMostly`.
    UnsetReadMostly,
    /// `cudaMemAdviseSetPreferredLocation`: keep it at the location.
    SetPreferredLocation,
    /// `cudaMemAdviseUnsetPreferredLocation`.
    UnsetPreferredLocation,
    /// `cudaMemAdviseSetAccessedBy`: map it for the location.
    SetAccessedBy,
    /// `cudaMemAdviseUnsetAccessedBy`.
    UnsetAccessedBy,
}

/// Gives advice about managed memory
/// ([`cudaMemAdvise`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
///
/// Only managed memory can be advised, and the type says so: memory from [`malloc`] does not
/// compile here.
///
/// ```compile_fail
/// # fn f(memory: &cuhost::DeviceBuffer<u32>) {
/// use cuhost::runtime::{MemLocation, MemoryAdvise, mem_advise};
/// let _ = mem_advise(memory, MemoryAdvise::SetReadMostly, MemLocation::Device(0)); // refused
/// # }
/// ```
pub fn mem_advise<T: Pod>(
    memory: &ManagedBuffer<T>,
    advice: MemoryAdvise,
    location: MemLocation,
) -> Result<()> {
    let loc = location.to_raw("runtime::mem_advise")?;
    let raw = rt::cudaMemoryAdvise(advice as u32 + 1);
    memory.context().enter()?;
    // SAFETY: the whole managed allocation of the buffer.
    check_runtime("cudaMemAdvise", unsafe {
        rt::cudaMemAdvise(memory.as_raw() as *const c_void, memory.size_in_bytes(), raw, loc)
    })
}

/// What kind of memory a pointer points to (`cudaMemoryType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemoryType {
    /// Host memory the runtime does not know.
    Unregistered,
    /// Pinned or registered host memory.
    Host,
    /// Device memory.
    Device,
    /// Managed memory.
    Managed,
}

/// What the runtime knows about a pointer (`cudaPointerAttributes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PointerAttributes {
    /// The kind of memory.
    pub memory_type: MemoryType,
    /// The device it belongs to (for host memory, the device current when it was allocated).
    pub device: i32,
    /// Its device address, if it has one.
    pub device_pointer: u64,
    /// Its host address, if it has one.
    pub host_pointer: usize,
}

/// What the runtime knows about the memory at `address` (a host or device address)
/// ([`cudaPointerGetAttributes`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__UNIFIED.html)).
/// Any address may be asked about; unknown host memory is [`MemoryType::Unregistered`], not
/// an error. It fails only when the runtime cannot answer at all (no device, or the runtime
/// cannot be loaded).
pub fn pointer_get_attributes(address: u64) -> Result<PointerAttributes> {
    let ptr = address as usize as *const c_void;
    // SAFETY: a plain C struct, all zeroes is valid.
    let mut raw: rt::cudaPointerAttributes = unsafe { std::mem::zeroed() };
    // SAFETY: one out-parameter; the pointer is only looked up, never dereferenced.
    check_runtime("cudaPointerGetAttributes", unsafe { rt::cudaPointerGetAttributes(&mut raw, ptr) })?;
    let memory_type = match raw.type_ {
        rt::cudaMemoryType::cudaMemoryTypeHost => MemoryType::Host,
        rt::cudaMemoryType::cudaMemoryTypeDevice => MemoryType::Device,
        rt::cudaMemoryType::cudaMemoryTypeManaged => MemoryType::Managed,
        _ => MemoryType::Unregistered,
    };
    Ok(PointerAttributes {
        memory_type,
        device: raw.device,
        device_pointer: raw.devicePointer as u64,
        host_pointer: raw.hostPointer as usize,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attach_and_advice_have_the_runtime_values() {
        assert_eq!(ManagedAttach::Global.bits(), rt::cudaMemAttachGlobal);
        assert_eq!(ManagedAttach::Host.bits(), rt::cudaMemAttachHost);
        let raw = |a: MemoryAdvise| rt::cudaMemoryAdvise(a as u32 + 1);
        use rt::cudaMemoryAdvise as A;
        assert_eq!(raw(MemoryAdvise::SetReadMostly), A::cudaMemAdviseSetReadMostly);
        assert_eq!(raw(MemoryAdvise::UnsetReadMostly), A::cudaMemAdviseUnsetReadMostly);
        assert_eq!(raw(MemoryAdvise::SetPreferredLocation), A::cudaMemAdviseSetPreferredLocation);
        assert_eq!(raw(MemoryAdvise::UnsetPreferredLocation), A::cudaMemAdviseUnsetPreferredLocation);
        assert_eq!(raw(MemoryAdvise::SetAccessedBy), A::cudaMemAdviseSetAccessedBy);
        assert_eq!(raw(MemoryAdvise::UnsetAccessedBy), A::cudaMemAdviseUnsetAccessedBy);
    }

    #[test]
    fn host_alloc_flags_have_the_runtime_bits() {
        assert_eq!(HostAllocFlags::PORTABLE.bits(), rt::cudaHostAllocPortable);
        assert_eq!(HostAllocFlags::DEVICEMAP.bits(), rt::cudaHostAllocMapped);
        assert_eq!(HostAllocFlags::WRITECOMBINED.bits(), rt::cudaHostAllocWriteCombined);
        let a = RuntimeHostAllocator::new(HostAllocFlags::PORTABLE);
        assert_eq!(a.flags(), HostAllocFlags::PORTABLE);
    }

    #[test]
    fn bad_host_lengths_are_refused_before_any_call() {
        let zero = host_alloc::<u32>(0, HostAllocFlags::empty());
        assert!(matches!(zero, Err(Error::InvalidArgument { .. })), "{zero:?}");
        let overflow = host_alloc::<u64>(usize::MAX / 4, HostAllocFlags::empty());
        assert!(matches!(overflow, Err(Error::InvalidArgument { .. })), "{overflow:?}");
    }

    #[test]
    fn locations_name_devices_by_ordinal() {
        let device = MemLocation::Device(3).to_raw("t").ok();
        assert_eq!(
            device.map(|l| (l.type_, crate::c_layout::runtime::mem_location_id(&l))),
            Some((rt::cudaMemLocationType::cudaMemLocationTypeDevice, 3))
        );
        let host = MemLocation::Host.to_raw("t").ok();
        assert_eq!(host.map(|l| l.type_), Some(rt::cudaMemLocationType::cudaMemLocationTypeHost));
        assert!(MemLocation::Device(usize::MAX).to_raw("t").is_err());
    }
}
