//! Memory and semaphores exported by another API, imported into CUDA.
//!
//! Vulkan (`VK_KHR_external_memory_fd`, `VK_KHR_external_semaphore_fd`), Direct3D 11 and 12,
//! NvSci and other CUDA processes export memory objects and synchronisation primitives as
//! operating-system handles. [`ExternalMemory::import`] takes one in and maps ranges of it as
//! [`DeviceBuffer`](crate::memory::DeviceBuffer)s or whole [`MipmappedArray`](crate::memory::MipmappedArray)s;
//! [`ExternalSemaphore::import`] takes a semaphore in, to be signalled and waited on in a
//! stream's order, with fence values for timeline semaphores.
//!
//! A POSIX file descriptor is consumed when the import succeeds, as the driver requires (the
//! driver is given a duplicate and closes it when the object is destroyed), and comes back to
//! the caller, open, in a [`Refused`] when it fails. Windows handles stay
//! the caller's either way, and are [`Error::Unsupported`] on the POSIX systems this crate
//! builds for.
//!
//! See [External Resource Interoperability](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXTRES__INTEROP.html).

mod memory;
mod semaphore;

pub(crate) use semaphore::Batch;

pub use memory::{ExternalMemory, ExternalMemoryFlags, MemoryHandle, NvSciBufObject};
pub use semaphore::{
    ExternalSemaphore, NvSciSyncObject, SemaphoreHandle, SemaphoreKind, SignalParams, WaitParams, signal_all,
    wait_all,
};

use super::Refused;
use crate::error::Error;
use std::ffi::c_void;
use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd, RawFd};

/// A Windows handle to import: an NT handle, or the name of a named object. This crate builds
/// for POSIX systems, where importing one is an [`Error::Unsupported`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Win32Handle {
    /// An NT handle (`HANDLE`); it stays the caller's to close.
    Handle(*mut c_void),
    /// The name of a named object, as UTF-16 code units ending with a NUL.
    Name(Vec<u16>),
}

/// The platform part of a handle description, in the form both descriptor unions take: a
/// file descriptor (a duplicate of the caller's) or an NvSci object.
pub(crate) enum Raw {
    Fd(Duplicate),
    Object(*const c_void),
}

/// A duplicate of the caller's descriptor, which is what the driver is given, so that the
/// caller's own descriptor never reaches the driver and is the caller's whatever happens.
///
/// NVIDIA documents for `cuImportExternalMemory` and `cuImportExternalSemaphore` that
/// "ownership of the file descriptor is transferred to the CUDA driver when the handle is
/// imported successfully", but the driver also closes it when it refuses some imports (a
/// descriptor of `/dev/null`, seen on driver 580). Closing it again could close a descriptor
/// another thread opened meanwhile under the same number, so once the driver has been called
/// with the duplicate it is given away ([`given`](Self::given)), whatever the outcome: a refused
/// import may leak one descriptor, never close a foreign one. A duplicate the driver never saw
/// (a check failed before the call) is closed by its drop.
pub(crate) struct Duplicate {
    fd: OwnedFd,
}

impl Duplicate {
    fn new(operation: &'static str, fd: &OwnedFd) -> Result<Duplicate, Error> {
        // A new descriptor, close-on-exec and numbered 3 or above (`F_DUPFD_CLOEXEC`).
        let duplicate = fd.try_clone().map_err(|why| {
            Error::invalid(operation, format!("descriptor {} could not be duplicated: {why}", fd.as_raw_fd()))
        })?;
        Ok(Duplicate { fd: duplicate })
    }

    /// The number the driver is given.
    pub(crate) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The driver has been called with the descriptor: it is the driver's now (or closed by
    /// it), and is not closed here.
    pub(crate) fn given(self) {
        let _ = self.fd.into_raw_fd();
    }
}

/// The refusal of a Windows handle: this crate builds for POSIX systems, which have none.
pub(crate) fn unsupported_win32(operation: &'static str) -> Error {
    Error::Unsupported {
        operation,
        message: "Windows handles exist only on Windows; on this system import a POSIX file descriptor"
            .into(),
    }
}

/// The raw form of a file descriptor: a duplicate for the driver.
pub(crate) fn fd_raw(operation: &'static str, fd: &OwnedFd) -> Result<Raw, Error> {
    Duplicate::new(operation, fd).map(Raw::Fd)
}

/// Completes an import: on success the caller's handle is dropped (the driver holds its own
/// duplicate of a descriptor); on failure it goes back to the caller.
pub(crate) fn settle<H, T>(outcome: Result<T, Error>, handle: H) -> Result<T, Box<Refused<H>>> {
    match outcome {
        Ok(value) => {
            drop(handle);
            Ok(value)
        }
        Err(error) => Err(Refused::new(error, handle)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pipe() -> (OwnedFd, OwnedFd) {
        use std::os::fd::FromRawFd;
        let mut ends = [-1; 2];
        // SAFETY: pipe writes two new descriptors into the array.
        assert_eq!(unsafe { libc::pipe(ends.as_mut_ptr()) }, 0, "pipe failed");
        // SAFETY: both are new descriptors that nothing else owns.
        unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) }
    }

    fn is_open(fd: RawFd) -> bool {
        // SAFETY: F_GETFD only reads the flags.
        unsafe { libc::fcntl(fd, libc::F_GETFD) != -1 }
    }

    /// Whether `fd` is open on the same file as `other`: tests running beside this one may
    /// open files that take a number just closed.
    fn same_file(fd: RawFd, other: RawFd) -> bool {
        let stat = |fd: RawFd| {
            // SAFETY: a plain C struct filled by fstat.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: `st` is a live out-parameter.
            (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
        };
        stat(fd).is_some_and(|a| Some(a) == stat(other))
    }

    #[test]
    fn a_duplicate_the_driver_never_saw_is_closed_and_the_original_kept() -> Result<(), Error> {
        let (reader, _writer) = pipe();
        let duplicate = Duplicate::new("test", &reader)?;
        let number = duplicate.raw();
        assert!(number >= 3 && number != reader.as_raw_fd());
        assert!(is_open(number));
        drop(duplicate);
        assert!(!same_file(number, reader.as_raw_fd()), "the duplicate is still open");
        assert!(is_open(reader.as_raw_fd()), "the original was closed");
        Ok(())
    }

    #[test]
    fn a_given_duplicate_stays_open_for_the_driver() -> Result<(), Error> {
        let (reader, _writer) = pipe();
        let duplicate = Duplicate::new("test", &reader)?;
        let number = duplicate.raw();
        duplicate.given();
        assert!(is_open(number), "a descriptor the driver owns was closed");
        // SAFETY: the test plays the driver, which owns and closes it.
        unsafe { libc::close(number) };
        Ok(())
    }

    #[test]
    fn windows_handles_are_unsupported_here() {
        assert!(matches!(unsupported_win32("test"), Error::Unsupported { .. }));
    }
}
