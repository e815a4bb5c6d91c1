//! Memory and semaphores exported by another API, imported into CUDA.
//!
//! Vulkan (`VK_KHR_external_memory_fd`, `VK_KHR_external_semaphore_fd`), Direct3D 11 and 12,
//! NvSci and other CUDA processes export memory objects and synchronisation primitives as
//! operating-system handles. [`ExternalMemory::import`] takes one in and maps ranges of it as
//! [`DeviceBuffer`](crate::DeviceBuffer)s or whole [`MipmappedArray`](crate::memory::MipmappedArray)s;
//! [`ExternalSemaphore::import`] takes a semaphore in, to be signalled and waited on in a
//! stream's order, with fence values for timeline semaphores.
//!
//! A POSIX file descriptor passes to the driver when the import succeeds, as the driver
//! requires, and comes back to the caller in a [`Refused`] when it fails. Windows handles stay
//! the caller's either way, and are [`Error::Unsupported`] on other systems.
//!
//! See [External Resource Interoperability](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXTRES__INTEROP.html).

mod memory;
mod semaphore;

pub use memory::{ExternalMemory, ExternalMemoryFlags, MemoryHandle};
pub use semaphore::{
    ExternalSemaphore, SemaphoreHandle, SemaphoreKind, SignalParams, WaitParams, signal_all, wait_all,
};

use super::Refused;
use crate::error::Error;
use std::ffi::c_void;
use std::os::fd::{IntoRawFd, OwnedFd};

/// A Windows handle to import: an NT handle, or the name of a named object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Win32Handle {
    /// An NT handle (`HANDLE`); it stays the caller's to close.
    Handle(*mut c_void),
    /// The name of a named object, as UTF-16 code units ending with a NUL.
    Name(Vec<u16>),
}

/// The platform part of a handle description: a file descriptor, a Windows handle and name, or
/// an NvSci object, in the form both descriptor unions take.
pub(crate) enum Raw {
    Fd(i32),
    Win32 { handle: *mut c_void, name: *const c_void },
    Object(*const c_void),
}

/// The raw form of `handle`, or `Unsupported` where this platform has no such handle.
pub(crate) fn win32_raw(operation: &'static str, handle: &Win32Handle) -> Result<Raw, Error> {
    if !cfg!(windows) {
        return Err(Error::Unsupported {
            operation,
            message: "Windows handles exist only on Windows; on this system import a POSIX file descriptor"
                .into(),
        });
    }
    Ok(match handle {
        Win32Handle::Handle(h) => Raw::Win32 { handle: *h, name: std::ptr::null() },
        Win32Handle::Name(name) if name.last() == Some(&0) => {
            Raw::Win32 { handle: std::ptr::null_mut(), name: name.as_ptr().cast() }
        }
        Win32Handle::Name(_) => {
            return Err(Error::invalid(operation, "a Win32 name must end with a NUL code unit"));
        }
    })
}

/// The raw form of a file descriptor, or `Unsupported` on Windows.
pub(crate) fn fd_raw(operation: &'static str, fd: &OwnedFd) -> Result<Raw, Error> {
    use std::os::fd::AsRawFd;
    if cfg!(windows) {
        return Err(Error::Unsupported {
            operation,
            message: "POSIX file descriptors do not exist on Windows; import a Win32 handle".into(),
        });
    }
    Ok(Raw::Fd(fd.as_raw_fd()))
}

/// Completes an import: on success the driver owns a file descriptor, so it is released
/// without closing; on failure the handle goes back to the caller.
pub(crate) fn settle<H, T>(
    outcome: Result<T, Error>,
    handle: H,
    into_fd: impl FnOnce(H) -> Option<OwnedFd>,
) -> Result<T, Box<Refused<H>>> {
    match outcome {
        Ok(value) => {
            if let Some(fd) = into_fd(handle) {
                // The driver closes it when the imported object is destroyed.
                let _ = fd.into_raw_fd();
            }
            Ok(value)
        }
        Err(error) => Err(Refused::new(error, handle)),
    }
}
