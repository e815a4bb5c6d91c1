//! Runtime copies: 1D and peer, synchronous and on a stream; the traits every copy takes.
//! 2D, array and 3D copies are in `copy_2d`.
//!
//! Directions are found by the runtime (`cudaMemcpyDefault`, unified addressing). Lengths and
//! pitches are checked against both sides before any call.
//!
//! An asynchronous copy returns before the data has moved. It is safe between
//! [`DeviceResident`] memory (whose free waits for pending work); with host memory the host
//! could touch the buffer while the copy runs, so that form is
//! [`memcpy_async_unchecked`], which is `unsafe`.

use super::{DeviceMemory, HostMemory, HostRegistration, Stream};
use crate::error::{Error, Result, check_runtime};
use crate::memory::DeviceBuffer;
use bytemuck::Pod;
use cudart_sys as rt;
use std::ffi::c_void;

/// Memory a copy can read: host slices, runtime and driver allocations.
///
/// # Safety
///
/// `source_ptr` must point at `source_len()` readable elements of `T` while `self` is borrowed.
pub unsafe trait CopySource<T: Pod> {
    /// The first element's address.
    fn source_ptr(&self) -> *const c_void;
    /// The number of elements.
    fn source_len(&self) -> usize;
}

/// Memory a copy can write.
///
/// # Safety
///
/// `destination_ptr` must point at `destination_len()` writable elements of `T` while `self`
/// is mutably borrowed.
pub unsafe trait CopyDestination<T: Pod> {
    /// The first element's address.
    fn destination_ptr(&mut self) -> *mut c_void;
    /// The number of elements.
    fn destination_len(&self) -> usize;
}

/// Device memory whose free waits for work still using it, so an asynchronous copy into or
/// out of it cannot outlive it.
///
/// # Safety
///
/// Dropping the memory must wait for pending device work (as `cudaFree` does).
pub unsafe trait DeviceResident {}

// SAFETY: a slice is its elements.
unsafe impl<T: Pod> CopySource<T> for [T] {
    fn source_ptr(&self) -> *const c_void {
        self.as_ptr().cast()
    }
    fn source_len(&self) -> usize {
        self.len()
    }
}

// SAFETY: as above.
unsafe impl<T: Pod> CopyDestination<T> for [T] {
    fn destination_ptr(&mut self) -> *mut c_void {
        self.as_mut_ptr().cast()
    }
    fn destination_len(&self) -> usize {
        self.len()
    }
}

macro_rules! host_like {
    ($($ty:ty),*) => {$(
        // SAFETY: it dereferences to its elements.
        unsafe impl<T: Pod> CopySource<T> for $ty {
            fn source_ptr(&self) -> *const c_void {
                self.as_ptr().cast()
            }
            fn source_len(&self) -> usize {
                self.len()
            }
        }
        // SAFETY: as above.
        unsafe impl<T: Pod> CopyDestination<T> for $ty {
            fn destination_ptr(&mut self) -> *mut c_void {
                self.as_mut_ptr().cast()
            }
            fn destination_len(&self) -> usize {
                self.len()
            }
        }
    )*};
}
host_like!(HostMemory<T>, HostRegistration<'_, T>);

// SAFETY: the allocation holds `len()` elements.
unsafe impl<T: Pod> CopySource<T> for DeviceMemory<T> {
    fn source_ptr(&self) -> *const c_void {
        self.as_ptr()
    }
    fn source_len(&self) -> usize {
        self.len()
    }
}

// SAFETY: as above.
unsafe impl<T: Pod> CopyDestination<T> for DeviceMemory<T> {
    fn destination_ptr(&mut self) -> *mut c_void {
        self.as_ptr()
    }
    fn destination_len(&self) -> usize {
        self.len()
    }
}

// SAFETY: cudaFree waits for work using the allocation.
unsafe impl<T: Pod> DeviceResident for DeviceMemory<T> {}

// SAFETY: the buffer holds `len()` elements in the primary context the runtime shares.
unsafe impl<T: Pod> CopySource<T> for DeviceBuffer<T> {
    fn source_ptr(&self) -> *const c_void {
        self.as_raw() as *const c_void
    }
    fn source_len(&self) -> usize {
        self.len()
    }
}

// SAFETY: as above.
unsafe impl<T: Pod> CopyDestination<T> for DeviceBuffer<T> {
    fn destination_ptr(&mut self) -> *mut c_void {
        self.as_raw() as *mut c_void
    }
    fn destination_len(&self) -> usize {
        self.len()
    }
}

fn same_len(operation: &'static str, dst: usize, src: usize) -> Result<()> {
    if dst == src {
        Ok(())
    } else {
        Err(Error::invalid(
            operation,
            format!("destination has {dst} elements but source has {src}; copy between equal lengths"),
        ))
    }
}

/// Copies all of `src` into `dst`, which must have the same length
/// ([`cudaMemcpy`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
pub fn memcpy<T: Pod, D: CopyDestination<T> + ?Sized, S: CopySource<T> + ?Sized>(
    dst: &mut D,
    src: &S,
) -> Result<()> {
    same_len("runtime::memcpy", dst.destination_len(), src.source_len())?;
    let bytes = src.source_len() * std::mem::size_of::<T>();
    // SAFETY: both sides hold `bytes` bytes (trait contracts and the check above).
    check_runtime("cudaMemcpy", unsafe {
        rt::cudaMemcpy(dst.destination_ptr(), src.source_ptr(), bytes, rt::cudaMemcpyKind::cudaMemcpyDefault)
    })
}

/// Queues a copy between device allocations on `stream`
/// ([`cudaMemcpyAsync`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
pub fn memcpy_async<T, D, S>(dst: &mut D, src: &S, stream: &Stream) -> Result<()>
where
    T: Pod,
    D: CopyDestination<T> + DeviceResident + ?Sized,
    S: CopySource<T> + DeviceResident + ?Sized,
{
    // SAFETY: both sides are device memory whose free waits for this copy.
    unsafe { memcpy_async_unchecked(dst, src, stream) }
}

/// Queues a copy between any two kinds of memory on `stream`
/// ([`cudaMemcpyAsync`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
///
/// # Safety
///
/// The copy may still run after this returns: until `stream` has passed it, host memory on
/// either side must stay allocated and must not be written (nor, for the destination, read)
/// by the host, and device memory must not be freed in a stream-ordered way. Pageable host
/// memory is staged by the runtime, which makes the call partly synchronous, but the rule
/// above is what is guaranteed.
pub unsafe fn memcpy_async_unchecked<T, D, S>(dst: &mut D, src: &S, stream: &Stream) -> Result<()>
where
    T: Pod,
    D: CopyDestination<T> + ?Sized,
    S: CopySource<T> + ?Sized,
{
    same_len("runtime::memcpy_async", dst.destination_len(), src.source_len())?;
    let bytes = src.source_len() * std::mem::size_of::<T>();
    // SAFETY: both sides hold `bytes` bytes; the caller keeps them alive until it completes.
    check_runtime("cudaMemcpyAsync", unsafe {
        rt::cudaMemcpyAsync(
            dst.destination_ptr(),
            src.source_ptr(),
            bytes,
            rt::cudaMemcpyKind::cudaMemcpyDefault,
            stream.as_raw(),
        )
    })
}

/// Copies between allocations of two devices, named by the devices they were allocated on
/// ([`cudaMemcpyPeer`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
/// Works without peer access (staged through the host).
pub fn memcpy_peer<T: Pod>(dst: &mut DeviceMemory<T>, src: &DeviceMemory<T>) -> Result<()> {
    let op = "runtime::memcpy_peer";
    same_len(op, dst.len(), src.len())?;
    let (dd, sd) = (super::ordinal(op, dst.device())?, super::ordinal(op, src.device())?);
    // SAFETY: both allocations hold `size_in_bytes()` bytes on their devices.
    check_runtime("cudaMemcpyPeer", unsafe {
        rt::cudaMemcpyPeer(dst.as_ptr(), dd, src.as_ptr(), sd, src.size_in_bytes())
    })
}

/// [`memcpy_peer`] queued on `stream`
/// ([`cudaMemcpyPeerAsync`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
pub fn memcpy_peer_async<T: Pod>(
    dst: &mut DeviceMemory<T>,
    src: &DeviceMemory<T>,
    stream: &Stream,
) -> Result<()> {
    let op = "runtime::memcpy_peer_async";
    same_len(op, dst.len(), src.len())?;
    let (dd, sd) = (super::ordinal(op, dst.device())?, super::ordinal(op, src.device())?);
    // SAFETY: as above; cudaFree of either side waits for the copy.
    check_runtime("cudaMemcpyPeerAsync", unsafe {
        rt::cudaMemcpyPeerAsync(dst.as_ptr(), dd, src.as_ptr(), sd, src.size_in_bytes(), stream.as_raw())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_must_match() {
        assert!(same_len("t", 3, 4).is_err());
        assert!(same_len("t", 4, 4).is_ok());
    }
}
