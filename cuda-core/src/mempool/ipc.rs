//! Sharing pools and their allocations between processes
//! ([cuMemPoolExportToShareableHandle](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html)).
//!
//! The exporting process creates a pool with [`ShareableHandle::PosixFileDescriptor`], sends
//! the descriptor from [`MemPool::export_to_fd`] to the other process (over a Unix socket with
//! `SCM_RIGHTS`, or by inheritance), and sends each allocation's [`PointerExportData`] with its
//! length. The importer calls [`MemPool::import_from_fd`] and [`MemPool::import_pointer`],
//! which gives the allocation as a [`DeviceBuffer`]; dropping that buffer frees the import
//! (`cuMemFreeAsync` on the buffer's stream), which must happen before the exporter frees the
//! allocation.
//!
//! [`ShareableHandle::PosixFileDescriptor`]: super::ShareableHandle::PosixFileDescriptor

use super::MemPool;
use super::allocator::free_async;
use crate::alloc::{Allocator, DeviceAllocation, StreamRef};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::memory::DeviceBuffer;
use crate::memory::checked_bytes;
use crate::stream::Stream;
use bytemuck::Pod;
use cuhost_driver_sys as sys;
use std::sync::Arc;

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
        unsafe {
            driver!(cuMemPoolExportToShareableHandle(
                (&mut fd as *mut std::ffi::c_int).cast(),
                self.as_raw(),
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            ))
        }?;
        // SAFETY: the driver returned a new descriptor that nobody else owns.
        Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
    }

    /// Imports a pool exported by another process; the descriptor stays the caller's
    /// ([`cuMemPoolImportFromShareableHandle`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html)).
    ///
    /// A descriptor that is not an exported pool is refused by the driver with its status.
    /// Descriptor 0 is imported through a duplicate; when it cannot be duplicated, that is an
    /// [`Error::InvalidArgument`] with the operating system's reason.
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
        unsafe {
            driver!(cuMemPoolImportFromShareableHandle(
                &mut raw,
                fd.as_raw_fd() as usize as *mut std::ffi::c_void,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            ))
        }?;
        // SAFETY: the imported pool is new and owned by this value.
        Ok(unsafe { MemPool::from_raw(raw, true) })
    }

    /// The data another process needs to import the allocation at `ptr` of this (exported)
    /// pool ([`cuMemPoolExportPointer`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html)).
    pub fn export_pointer(&self, ptr: sys::CUdeviceptr) -> Result<PointerExportData> {
        let mut data = sys::CUmemPoolPtrExportData { reserved: [0; 64], ..Default::default() };
        // SAFETY: one out-parameter; the driver checks that `ptr` belongs to an exported pool.
        unsafe { driver!(cuMemPoolExportPointer(&mut data, ptr)) }?;
        Ok(PointerExportData(data.reserved))
    }

    /// Maps an allocation exported by another process from the pool this one was imported
    /// from, as a buffer of `len` elements ordered on `stream`
    /// ([`cuMemPoolImportPointer`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html)).
    ///
    /// The buffer's allocator frees the import with
    /// [`cuMemFreeAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html)
    /// on the buffer's stream when it is dropped, and keeps this (imported) pool alive until
    /// then. A length of 0, or one whose byte size overflows, is an [`Error::InvalidArgument`],
    /// as is an imported address not aligned for `T`.
    ///
    /// # Safety
    ///
    /// The exported allocation holds at least `len` elements of `T` (the importer cannot
    /// check it: send the length with the export data), and the exporting process does not
    /// free it until the returned buffer has been dropped here and that free has completed
    /// (or the exporter's free is ordered after it).
    pub unsafe fn import_pointer<T: Pod>(
        &self,
        stream: &Stream,
        data: &PointerExportData,
        len: usize,
    ) -> Result<DeviceBuffer<T>> {
        let bytes = checked_bytes::<T>("MemPool::import_pointer", len)?;
        let context = stream.context();
        context.enter()?;
        let mut raw = sys::CUmemPoolPtrExportData { reserved: data.0, ..Default::default() };
        let mut ptr = 0;
        // SAFETY: one out-parameter and the export data, both live locals.
        unsafe { driver!(cuMemPoolImportPointer(&mut ptr, self.as_raw(), &mut raw)) }?;
        let allocation = DeviceAllocation { ptr, size: bytes, token: 0 };
        let allocator = Arc::new(ImportedMemory { context: context.clone(), _pool: self.clone() });
        let adopted = if ptr % std::mem::align_of::<T>() as u64 == 0 {
            let shared: Arc<dyn Allocator> = allocator.clone();
            // SAFETY: the import is device memory of the stream's context that nothing else
            // owns, aligned for `T`; the caller vouches that it holds `len` elements and stays
            // allocated until it is freed here; `shared` frees it.
            unsafe { DeviceBuffer::from_allocation(stream, shared, allocation, len) }
        } else {
            Err(Error::invalid(
                "MemPool::import_pointer",
                format!("the imported address {ptr:#x} is not aligned for the element type"),
            ))
        };
        if adopted.is_err() {
            // SAFETY: the import was not adopted and nothing used it.
            let _ = unsafe { allocator.deallocate(allocation, StreamRef::from(stream)) };
        }
        adopted
    }
}

/// The allocator of imported allocations: nothing can be allocated from it; giving an import
/// back unmaps it in this process with `cuMemFreeAsync`, ordered on the buffer's stream.
#[derive(Debug)]
struct ImportedMemory {
    context: Context,
    /// The imported pool, kept alive while its imports are.
    _pool: MemPool,
}

// SAFETY: `allocate` never returns memory; `deallocate` frees an import with `cuMemFreeAsync`
// ordered on the stream it is given back on (after waiting for the context's work when given
// back without a stream), so the memory is not given up while work may use it.
unsafe impl Allocator for ImportedMemory {
    fn context(&self) -> Option<&Context> {
        Some(&self.context)
    }

    fn allocate(&self, _size: usize, _stream: StreamRef<'_>) -> Result<DeviceAllocation> {
        Err(Error::invalid(
            "MemPool::import_pointer",
            "memory of an imported pool cannot be allocated here; the exporting process allocates it",
        ))
    }

    unsafe fn deallocate(&self, allocation: DeviceAllocation, stream: StreamRef<'_>) -> Result<()> {
        // SAFETY: the caller gives back an import of this allocator, once, ordered on `stream`.
        unsafe { free_async(&self.context, allocation, stream) }
    }

    fn name(&self) -> &'static str {
        "cuMemPoolImportPointer"
    }
}
