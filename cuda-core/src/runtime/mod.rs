//! The CUDA runtime calls that CuPy's `cupy.cuda.runtime` offers, made safe, for programs that
//! mix runtime and driver code.
//!
//! Built with the `runtime` feature, which is on by default.
//!
//! The runtime works in each device's primary context, the same one
//! [`Context::primary`](crate::context::Context::primary) retains: memory, streams and events made here
//! are usable by driver code in that context and the other way round (through `as_raw`).
//! Devices are named by ordinal, as the runtime does.
//!
//! Memory is the crate's: [`malloc`], [`malloc_managed`] and [`host_alloc`] return a
//! [`DeviceBuffer`](crate::memory::DeviceBuffer), a [`ManagedBuffer`](crate::memory::ManagedBuffer) and a
//! [`PinnedBuffer`](crate::memory::PinnedBuffer) whose memory comes from the runtime's allocators
//! ([`RuntimeAllocator`], [`RuntimeManagedAllocator`], [`RuntimeHostAllocator`]), and the
//! copies, memsets, prefetches and advice take those buffers, their views, registered host
//! memory and host slices. A runtime [`Stream`] is also a driver [`crate::stream::Stream`], which
//! buffers are allocated on.
//!
//! ```no_run
//! use cuhost::memory::HostAllocFlags;
//! use cuhost::runtime as rt;
//! # fn main() -> cuhost::Result<()> {
//! rt::set_device(0)?;
//! let stream = rt::Stream::create()?;
//! let mut device = rt::malloc::<f32>(&stream, 1024)?; // cudaMalloc
//! let mut pinned = rt::host_alloc::<f32>(1024, HostAllocFlags::PORTABLE)?; // cudaHostAlloc
//! pinned.copy_from_slice(&[1.0; 1024])?;
//! rt::memcpy_async(&mut device, &pinned, &stream)?; // safe: `pinned` records the copy
//! rt::memcpy_async(&mut pinned, &device, &stream)?;
//! assert_eq!(pinned.as_slice()?, &[1.0; 1024][..]); // waits for the copy
//! # Ok(()) }
//! ```
//!
//! See the [CUDA Runtime API](https://docs.nvidia.com/cuda/cuda-runtime-api/index.html).
//! The runtime library (`libcudart.so.13`) is loaded on first use; without it every call
//! returns [`Error::Load`] saying what to install.
//!
//! # Errors in `Drop`
//!
//! Freeing an array or destroying an event can fail after a kernel faulted. Those errors, and
//! panics of stream callbacks, are kept and returned by [`take_deferred_errors`]. Buffers and
//! streams keep theirs in their context, as everywhere in the crate
//! ([`Context::take_deferred_errors`](crate::context::Context::take_deferred_errors)).

mod array;
mod copy;
mod copy_2d;
mod memory;
mod stream;

pub use array::{Array, ChannelFormatDesc, ChannelFormatKind};
pub use copy::{
    AsyncDestination, AsyncSource, CopyDestination, CopySource, DeviceResident, memcpy, memcpy_async,
    memcpy_async_unchecked, memcpy_peer, memcpy_peer_async,
};
pub use copy_2d::{
    memcpy_2d, memcpy_2d_async, memcpy_2d_from_array, memcpy_2d_from_array_async, memcpy_2d_to_array,
    memcpy_2d_to_array_async, memcpy_3d_from_array, memcpy_3d_from_array_async, memcpy_3d_to_array,
    memcpy_3d_to_array_async,
};
pub use memory::{
    HostRegistration, ManagedAttach, MemLocation, MemoryAdvise, MemoryType, PointerAttributes,
    RuntimeAllocator, RuntimeHostAllocator, RuntimeManagedAllocator, host_alloc, malloc, malloc_managed,
    mem_advise, mem_prefetch_async, memset, memset_async, pointer_get_attributes,
};
pub use stream::{Event, Stream};

use crate::error::{Error, Result, check_runtime};
use cuhost_cudart_sys as rt;
use std::ffi::{CString, c_char, c_int};
use std::sync::Mutex;

static DEFERRED: Mutex<Vec<Error>> = Mutex::new(Vec::new());

/// Keeps an error that a `Drop` or a callback could not return.
#[cold]
pub(crate) fn defer(error: Error) {
    DEFERRED.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(error);
}

/// Removes and returns the errors kept from `Drop`s and callbacks of runtime objects, oldest
/// first.
pub fn take_deferred_errors() -> Vec<Error> {
    std::mem::take(&mut *DEFERRED.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
}

/// The primary context of the runtime's current device, where runtime streams are made.
pub(crate) fn current_context() -> Result<crate::context::Context> {
    let device = crate::device::Device::get(get_device()?)?;
    crate::context::Context::primary(&device)
}

/// A device ordinal as the runtime's `int`, rejecting one that does not fit.
pub(crate) fn ordinal(operation: &'static str, device: usize) -> Result<c_int> {
    c_int::try_from(device)
        .map_err(|_| Error::invalid(operation, format!("device ordinal {device} is out of range")))
}

/// The installed driver's CUDA version, e.g. 13000
/// ([`cudaDriverGetVersion`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART____VERSION.html)).
pub fn driver_version() -> Result<i32> {
    let mut v = 0;
    // SAFETY: one out-parameter.
    check_runtime("cudaDriverGetVersion", unsafe { rt::cudaDriverGetVersion(&mut v) })?;
    Ok(v)
}

/// The runtime library's version, e.g. 13000
/// ([`cudaRuntimeGetVersion`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART____VERSION.html)).
pub fn runtime_version() -> Result<i32> {
    let mut v = 0;
    // SAFETY: one out-parameter.
    check_runtime("cudaRuntimeGetVersion", unsafe { rt::cudaRuntimeGetVersion(&mut v) })?;
    Ok(v)
}

/// The number of devices
/// ([`cudaGetDeviceCount`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html)).
pub fn get_device_count() -> Result<usize> {
    let mut n = 0;
    // SAFETY: one out-parameter.
    check_runtime("cudaGetDeviceCount", unsafe { rt::cudaGetDeviceCount(&mut n) })?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// The calling thread's current device
/// ([`cudaGetDevice`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html)).
pub fn get_device() -> Result<usize> {
    let mut d = 0;
    // SAFETY: one out-parameter.
    check_runtime("cudaGetDevice", unsafe { rt::cudaGetDevice(&mut d) })?;
    Ok(usize::try_from(d).unwrap_or(0))
}

/// Makes `device` current on the calling thread, binding its primary context
/// ([`cudaSetDevice`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html)).
/// An ordinal past the last device is an [`Error::InvalidArgument`].
pub fn set_device(device: usize) -> Result<()> {
    let count = get_device_count()?;
    if device >= count {
        return Err(Error::invalid(
            "runtime::set_device",
            format!("device ordinal {device} is out of range: {count} device(s) present"),
        ));
    }
    // SAFETY: a valid ordinal.
    check_runtime("cudaSetDevice", unsafe { rt::cudaSetDevice(device as c_int) })
}

/// Waits for all work on the current device
/// ([`cudaDeviceSynchronize`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html)).
pub fn device_synchronize() -> Result<()> {
    // SAFETY: no arguments.
    check_runtime("cudaDeviceSynchronize", unsafe { rt::cudaDeviceSynchronize() })
}

/// One attribute of `device`
/// ([`cudaDeviceGetAttribute`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html)).
pub fn device_get_attribute(attribute: rt::cudaDeviceAttr, device: usize) -> Result<i32> {
    let d = ordinal("runtime::device_get_attribute", device)?;
    let mut v = 0;
    // SAFETY: one out-parameter.
    check_runtime("cudaDeviceGetAttribute", unsafe { rt::cudaDeviceGetAttribute(&mut v, attribute, d) })?;
    Ok(v)
}

/// The device with a PCI bus id such as `0000:41:00.0`
/// ([`cudaDeviceGetByPCIBusId`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html)).
///
/// A string with a NUL byte is an [`Error::InvalidArgument`]; a malformed id, or one no
/// device has, fails with the runtime's status.
pub fn device_get_by_pci_bus_id(pci_bus_id: &str) -> Result<usize> {
    let id = CString::new(pci_bus_id).map_err(|_| {
        Error::invalid("runtime::device_get_by_pci_bus_id", "the PCI bus id contains a NUL byte")
    })?;
    let mut d = 0;
    // SAFETY: a NUL-terminated string and one out-parameter.
    check_runtime("cudaDeviceGetByPCIBusId", unsafe { rt::cudaDeviceGetByPCIBusId(&mut d, id.as_ptr()) })?;
    Ok(usize::try_from(d).unwrap_or(0))
}

/// The PCI bus id of `device`
/// ([`cudaDeviceGetPCIBusId`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html)).
pub fn device_get_pci_bus_id(device: usize) -> Result<String> {
    let d = ordinal("runtime::device_get_pci_bus_id", device)?;
    let mut buf = [0 as c_char; 64];
    // SAFETY: the buffer's length is passed.
    check_runtime("cudaDeviceGetPCIBusId", unsafe { rt::cudaDeviceGetPCIBusId(buf.as_mut_ptr(), 64, d) })?;
    // SAFETY: the runtime wrote a NUL-terminated string into the buffer.
    Ok(unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
}

/// Whether `device` can access memory of `peer`
/// ([`cudaDeviceCanAccessPeer`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__PEER.html)).
pub fn device_can_access_peer(device: usize, peer: usize) -> Result<bool> {
    let (d, p) = (
        ordinal("runtime::device_can_access_peer", device)?,
        ordinal("runtime::device_can_access_peer", peer)?,
    );
    let mut v = 0;
    // SAFETY: one out-parameter.
    check_runtime("cudaDeviceCanAccessPeer", unsafe { rt::cudaDeviceCanAccessPeer(&mut v, d, p) })?;
    Ok(v != 0)
}

/// Lets the current device access memory of `peer`
/// ([`cudaDeviceEnablePeerAccess`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__PEER.html)).
/// Enabling it twice is `cudaErrorPeerAccessAlreadyEnabled`.
pub fn device_enable_peer_access(peer: usize) -> Result<()> {
    let p = ordinal("runtime::device_enable_peer_access", peer)?;
    // SAFETY: flags must be 0.
    check_runtime("cudaDeviceEnablePeerAccess", unsafe { rt::cudaDeviceEnablePeerAccess(p, 0) })
}

/// Free and total memory of the current device, in bytes
/// ([`cudaMemGetInfo`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
pub fn mem_get_info() -> Result<(usize, usize)> {
    let (mut free, mut total) = (0, 0);
    // SAFETY: two out-parameters.
    check_runtime("cudaMemGetInfo", unsafe { rt::cudaMemGetInfo(&mut free, &mut total) })?;
    Ok((free, total))
}
