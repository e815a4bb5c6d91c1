//! Sharing pools and their allocations between processes
//! ([cuMemPoolExportToShareableHandle](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html)).
//!
//! The exporting process creates a pool with [`ShareableHandle::PosixFileDescriptor`], sends
//! the descriptor from [`MemPool::export_to_fd`] to the other process (over a Unix socket with
//! `SCM_RIGHTS`, or by inheritance), and sends each allocation's [`PointerExportData`]. The
//! importer calls [`MemPool::import_from_fd`] and [`MemPool::import_pointer`]; it must drop the
//! imported pointer before the exporter frees the allocation.
//!
//! [`ShareableHandle::PosixFileDescriptor`]: super::ShareableHandle::PosixFileDescriptor

use super::MemPool;
use crate::error::check;
use crate::{Context, Error, Result};
use cuda_driver_sys as sys;

/// What identifies one allocation of an exported pool to an importing process: 64 opaque
/// bytes, safe to send by any means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PointerExportData(pub [u8; 64]);

impl MemPool {
    /// Exports the pool as a POSIX file descriptor, owned by the caller
    /// ([`cuMemPoolExportToShareableHandle`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html)).
    #[cfg(unix)]
    pub fn export_to_fd(&self) -> Result<std::os::fd::OwnedFd> {
        use std::os::fd::FromRawFd;
        let mut fd: std::ffi::c_int = -1;
        // SAFETY: for the POSIX handle type the driver writes an int through the pointer.
        check("cuMemPoolExportToShareableHandle", unsafe {
            sys::cuMemPoolExportToShareableHandle(
                (&mut fd as *mut std::ffi::c_int).cast(),
                self.as_raw(),
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            )
        })?;
        // SAFETY: the driver returned a new descriptor that nobody else owns.
        Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
    }

    /// Imports a pool exported by another process; the descriptor stays the caller's
    /// ([`cuMemPoolImportFromShareableHandle`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html)).
    #[cfg(unix)]
    pub fn import_from_fd(fd: std::os::fd::BorrowedFd<'_>) -> Result<MemPool> {
        use std::os::fd::{AsFd, AsRawFd};
        crate::device::init()?;
        // The handle travels as a pointer-sized integer, so descriptor 0 would read as null:
        // import a duplicate (numbered 3 or above) instead.
        let duplicate = if fd.as_raw_fd() == 0 {
            Some(fd.try_clone_to_owned().map_err(|e| {
                Error::invalid("MemPool::import_from_fd", format!("could not duplicate descriptor 0: {e}"))
            })?)
        } else {
            None
        };
        let fd = duplicate.as_ref().map_or(fd, |d| d.as_fd());
        let mut raw = std::ptr::null_mut();
        // SAFETY: for the POSIX handle type the handle is the descriptor itself, cast to a pointer.
        check("cuMemPoolImportFromShareableHandle", unsafe {
            sys::cuMemPoolImportFromShareableHandle(
                &mut raw,
                fd.as_raw_fd() as usize as *mut std::ffi::c_void,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            )
        })?;
        // SAFETY: the imported pool is new and owned by this value.
        Ok(unsafe { MemPool::from_raw(raw, true) })
    }

    /// The data another process needs to import the allocation at `ptr` of this (exported)
    /// pool ([`cuMemPoolExportPointer`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html)).
    pub fn export_pointer(&self, ptr: sys::CUdeviceptr) -> Result<PointerExportData> {
        let mut data = sys::CUmemPoolPtrExportData { reserved: [0; 64] };
        // SAFETY: one out-parameter; the driver checks that `ptr` belongs to an exported pool.
        check("cuMemPoolExportPointer", unsafe { sys::cuMemPoolExportPointer(&mut data, ptr) })?;
        Ok(PointerExportData(data.reserved))
    }

    /// Maps an allocation exported by another process from the pool this one was imported
    /// from ([`cuMemPoolImportPointer`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html)).
    pub fn import_pointer(&self, context: &Context, data: &PointerExportData) -> Result<ImportedPointer> {
        context.enter()?;
        let mut raw = sys::CUmemPoolPtrExportData { reserved: data.0 };
        let mut ptr = 0;
        // SAFETY: one out-parameter and the export data, both live locals.
        check("cuMemPoolImportPointer", unsafe {
            sys::cuMemPoolImportPointer(&mut ptr, self.as_raw(), &mut raw)
        })?;
        Ok(ImportedPointer { ptr, context: context.clone() })
    }
}

/// An allocation of another process, mapped into this one; unmapped (`cuMemFree`) on drop,
/// which must happen before the exporter frees it.
#[derive(Debug)]
pub struct ImportedPointer {
    ptr: sys::CUdeviceptr,
    context: Context,
}

impl ImportedPointer {
    /// The device address in this process.
    pub fn as_raw(&self) -> sys::CUdeviceptr {
        self.ptr
    }
}

impl Drop for ImportedPointer {
    fn drop(&mut self) {
        let ptr = self.ptr;
        // SAFETY: the mapping is released once.
        self.context.with_current_for_drop("cuMemFree", || unsafe { sys::cuMemFree(ptr) });
    }
}
