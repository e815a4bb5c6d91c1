//! Runtime allocations: device, managed, pinned host, registered host; memset,
//! prefetch, advice and pointer attributes.

use super::{Stream, defer, ordinal};
use crate::error::{Error, Result, check_runtime};
use crate::memory::{HostAllocFlags, HostRegisterFlags};
use bytemuck::Pod;
use cudart_sys as rt;
use std::ffi::c_void;
use std::marker::PhantomData;

fn bytes_of<T>(operation: &'static str, len: usize) -> Result<usize> {
    len.checked_mul(std::mem::size_of::<T>())
        .ok_or_else(|| Error::invalid(operation, format!("{len} elements overflow the address space")))
}

/// How a managed allocation is attached at first (`cudaMemAttach*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ManagedAttach {
    /// `cudaMemAttachGlobal`: any stream on any device may use it.
    Global,
    /// `cudaMemAttachHost`: only the host, until attached to a stream.
    Host,
}

/// Device memory from `cudaMalloc`, or managed memory from `cudaMallocManaged`: `len`
/// elements of `T`, freed with `cudaFree` on drop.
#[derive(Debug)]
pub struct DeviceMemory<T: Pod> {
    ptr: *mut c_void,
    len: usize,
    device: usize,
    managed: bool,
    _element: PhantomData<T>,
}

// SAFETY: device memory is not tied to a thread; the runtime synchronizes access to it.
unsafe impl<T: Pod> Send for DeviceMemory<T> {}
// SAFETY: `&DeviceMemory` only reads the handle.
unsafe impl<T: Pod> Sync for DeviceMemory<T> {}

impl<T: Pod> DeviceMemory<T> {
    /// Allocates `len` elements on the current device
    /// ([`cudaMalloc`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
    /// The contents are not initialised (any bit pattern is a valid `T`).
    pub fn malloc(len: usize) -> Result<DeviceMemory<T>> {
        let bytes = bytes_of::<T>("DeviceMemory::malloc", len)?;
        let device = super::get_device()?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: one out-parameter.
        check_runtime("cudaMalloc", unsafe { rt::cudaMalloc(&mut ptr, bytes) })?;
        Ok(DeviceMemory { ptr, len, device, managed: false, _element: PhantomData })
    }

    /// Allocates `len` elements of managed memory, reachable from the host and every device
    /// ([`cudaMallocManaged`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
    pub fn malloc_managed(len: usize, attach: ManagedAttach) -> Result<DeviceMemory<T>> {
        let bytes = bytes_of::<T>("DeviceMemory::malloc_managed", len)?;
        if bytes == 0 {
            return Err(Error::invalid(
                "DeviceMemory::malloc_managed",
                "a managed allocation needs at least one byte",
            ));
        }
        let device = super::get_device()?;
        let flags = match attach {
            ManagedAttach::Global => rt::cudaMemAttachGlobal,
            ManagedAttach::Host => rt::cudaMemAttachHost,
        };
        let mut ptr = std::ptr::null_mut();
        // SAFETY: one out-parameter.
        check_runtime("cudaMallocManaged", unsafe { rt::cudaMallocManaged(&mut ptr, bytes, flags) })?;
        Ok(DeviceMemory { ptr, len, device, managed: true, _element: PhantomData })
    }

    /// The device address.
    pub fn as_ptr(&self) -> *mut c_void {
        self.ptr
    }

    /// The device address as the driver API's `CUdeviceptr`, e.g. for a kernel argument.
    pub fn device_ptr(&self) -> u64 {
        self.ptr as u64
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The size in bytes.
    pub fn size_in_bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// The device that was current when it was allocated.
    pub fn device(&self) -> usize {
        self.device
    }

    /// Whether this is managed memory.
    pub fn is_managed(&self) -> bool {
        self.managed
    }

    /// Copies `src` in (same length)
    /// ([`cudaMemcpy`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        super::memcpy(self, src)
    }

    /// Copies the contents out into a new vector.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut v = vec![T::zeroed(); self.len];
        super::memcpy(v.as_mut_slice(), self)?;
        Ok(v)
    }
}

impl<T: Pod> Drop for DeviceMemory<T> {
    fn drop(&mut self) {
        if self.ptr.is_null() {
            return;
        }
        // SAFETY: this value owns the allocation; cudaFree waits for work that may use it.
        if let Err(e) = check_runtime("cudaFree", unsafe { rt::cudaFree(self.ptr) }) {
            defer(e);
        }
    }
}

/// Page-locked host memory from `cudaHostAlloc`, zero-initialised, freed with `cudaFreeHost`
/// on drop. It dereferences to `[T]`.
#[derive(Debug)]
pub struct HostMemory<T: Pod> {
    ptr: *mut T,
    len: usize,
    flags: HostAllocFlags,
}

// SAFETY: pinned host memory is ordinary memory; `&mut` access goes through `DerefMut`.
unsafe impl<T: Pod> Send for HostMemory<T> {}
// SAFETY: as above.
unsafe impl<T: Pod> Sync for HostMemory<T> {}

impl<T: Pod> HostMemory<T> {
    /// Allocates `len` elements of pinned host memory
    /// ([`cudaHostAlloc`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
    pub fn alloc(len: usize, flags: HostAllocFlags) -> Result<HostMemory<T>> {
        let bytes = bytes_of::<T>("HostMemory::alloc", len)?;
        if bytes == 0 {
            return Err(Error::invalid("HostMemory::alloc", "a pinned allocation needs at least one byte"));
        }
        let mut ptr = std::ptr::null_mut();
        // SAFETY: one out-parameter; the flag bits are cudaHostAlloc's.
        check_runtime("cudaHostAlloc", unsafe { rt::cudaHostAlloc(&mut ptr, bytes, flags.bits()) })?;
        // SAFETY: the runtime returned `bytes` writable bytes; zeroing makes them initialised.
        unsafe { std::ptr::write_bytes(ptr.cast::<u8>(), 0, bytes) };
        Ok(HostMemory { ptr: ptr.cast(), len, flags })
    }

    /// The flags it was allocated with.
    pub fn flags(&self) -> HostAllocFlags {
        self.flags
    }
}

impl<T: Pod> std::ops::Deref for HostMemory<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `len` initialised elements that live as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T: Pod> std::ops::DerefMut for HostMemory<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as above, borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl<T: Pod> Drop for HostMemory<T> {
    fn drop(&mut self) {
        // SAFETY: this value owns the allocation; cudaFreeHost waits for work that may use it.
        if let Err(e) = check_runtime("cudaFreeHost", unsafe { rt::cudaFreeHost(self.ptr.cast()) }) {
            defer(e);
        }
    }
}

/// A host slice page-locked with `cudaHostRegister` while this value lives; unregistered on
/// drop. It dereferences to the slice.
#[derive(Debug)]
pub struct HostRegistration<'a, T: Pod> {
    slice: &'a mut [T],
}

impl<'a, T: Pod> HostRegistration<'a, T> {
    /// Page-locks `slice`
    /// ([`cudaHostRegister`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
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

/// Sets every byte of `dst` to `value`
/// ([`cudaMemset`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
pub fn memset<T: Pod>(dst: &mut DeviceMemory<T>, value: u8) -> Result<()> {
    // SAFETY: the allocation holds `size_in_bytes()` bytes.
    check_runtime("cudaMemset", unsafe { rt::cudaMemset(dst.ptr, i32::from(value), dst.size_in_bytes()) })
}

/// [`memset`] queued on `stream`
/// ([`cudaMemsetAsync`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
/// Freeing `dst` waits for it.
pub fn memset_async<T: Pod>(dst: &mut DeviceMemory<T>, value: u8, stream: &Stream) -> Result<()> {
    // SAFETY: as above; cudaFree synchronizes, so the memory outlives the operation.
    check_runtime("cudaMemsetAsync", unsafe {
        rt::cudaMemsetAsync(dst.ptr, i32::from(value), dst.size_in_bytes(), stream.as_raw())
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
            MemLocation::Device(d) => rt::cudaMemLocation {
                type_: rt::cudaMemLocationType::cudaMemLocationTypeDevice,
                id: ordinal(operation, d)?,
            },
            MemLocation::Host => {
                rt::cudaMemLocation { type_: rt::cudaMemLocationType::cudaMemLocationTypeHost, id: 0 }
            }
        })
    }
}

fn require_managed<T: Pod>(operation: &'static str, memory: &DeviceMemory<T>) -> Result<()> {
    if memory.managed {
        Ok(())
    } else {
        Err(Error::invalid(
            operation,
            "only managed memory (DeviceMemory::malloc_managed) can be prefetched or advised",
        ))
    }
}

/// Migrates managed memory to `location` ahead of use, on `stream`
/// ([`cudaMemPrefetchAsync`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
pub fn mem_prefetch_async<T: Pod>(
    memory: &DeviceMemory<T>,
    location: MemLocation,
    stream: &Stream,
) -> Result<()> {
    let op = "runtime::mem_prefetch_async";
    require_managed(op, memory)?;
    let loc = location.to_raw(op)?;
    // SAFETY: a managed range of `size_in_bytes()` bytes; flags must be 0.
    check_runtime("cudaMemPrefetchAsync", unsafe {
        rt::cudaMemPrefetchAsync(memory.ptr, memory.size_in_bytes(), loc, 0, stream.as_raw())
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
pub fn mem_advise<T: Pod>(
    memory: &DeviceMemory<T>,
    advice: MemoryAdvise,
    location: MemLocation,
) -> Result<()> {
    let op = "runtime::mem_advise";
    require_managed(op, memory)?;
    let loc = location.to_raw(op)?;
    let raw = rt::cudaMemoryAdvise(advice as u32 + 1);
    // SAFETY: a managed range of `size_in_bytes()` bytes.
    check_runtime("cudaMemAdvise", unsafe { rt::cudaMemAdvise(memory.ptr, memory.size_in_bytes(), raw, loc) })
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
/// Any address may be asked about; unknown host memory is [`MemoryType::Unregistered`].
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
