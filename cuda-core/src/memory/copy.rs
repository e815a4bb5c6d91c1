//! Linear copies between host slices and device views: host to device, device to host, device
//! to device (and between contexts, as peer copies), synchronous and stream-ordered.

use super::same_len;
use super::view::{DeviceView, DeviceViewMut};
use crate::error::{Result, check};
use crate::stream::Stream;
use bytemuck::Pod;
use cuda_driver_sys as sys;

impl<T: Pod> DeviceViewMut<'_, T> {
    /// Copies `src` from host memory into this view; the lengths must match
    /// ([`cuMemcpyHtoD`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        same_len("copy_from_host", self.len, src.len())?;
        if self.len == 0 {
            return Ok(());
        }
        self.ctx.enter()?;
        // SAFETY: the lengths match, the view is exclusively borrowed, and `src` is live memory.
        super::finished(check("cuMemcpyHtoD", unsafe {
            sys::cuMemcpyHtoD(self.ptr, src.as_ptr().cast(), self.size_in_bytes())
        }))
    }

    /// Queues a copy of `src` from host memory into this view on `stream`
    /// ([`cuMemcpyHtoDAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    /// From pinned memory the copy is asynchronous; from pageable memory the driver stages it
    /// and returns once `src` has been read.
    ///
    /// # Safety
    ///
    /// The copy may still be reading `src` after this returns (when `src` is pinned host
    /// memory): `src` must stay alive and unmodified until `stream` has passed the copy (for
    /// example, until [`Stream::synchronize`] returns). Nothing may use this view's memory in
    /// the meantime except work ordered after the copy.
    #[inline]
    pub unsafe fn copy_from_host_async(&mut self, src: &[T], stream: &Stream) -> Result<()> {
        same_len("copy_from_host_async", self.len, src.len())?;
        if self.len == 0 {
            return Ok(());
        }
        self.ctx.enter()?;
        // SAFETY: the lengths match; the caller keeps `src` alive until the copy has run.
        check("cuMemcpyHtoDAsync", unsafe {
            sys::cuMemcpyHtoDAsync(self.ptr, src.as_ptr().cast(), self.size_in_bytes(), stream.as_raw())
        })
    }

    /// Copies `src` from device memory into this view; the lengths must match. Views of
    /// different contexts are copied as peer copies
    /// ([`cuMemcpyDtoD`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html),
    /// [`cuMemcpyPeer`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_from_device(&mut self, src: &DeviceView<'_, T>) -> Result<()> {
        same_len("copy_from_device", self.len, src.len)?;
        if self.len == 0 {
            return Ok(());
        }
        self.ctx.enter()?;
        let bytes = self.size_in_bytes();
        if self.ctx.as_raw() == src.ctx.as_raw() {
            // SAFETY: both ranges are live device memory of `bytes` bytes; the destination is exclusive.
            super::finished(check("cuMemcpyDtoD", unsafe { sys::cuMemcpyDtoD(self.ptr, src.ptr, bytes) }))
        } else {
            // SAFETY: as above, each range named with its own context.
            super::finished(check("cuMemcpyPeer", unsafe {
                sys::cuMemcpyPeer(self.ptr, self.ctx.as_raw(), src.ptr, src.ctx.as_raw(), bytes)
            }))
        }
    }

    /// Queues a copy of `src` from device memory into this view on `stream`; views of
    /// different contexts are copied as peer copies
    /// ([`cuMemcpyDtoDAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html),
    /// [`cuMemcpyPeerAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// Device memory is freed in stream order or after the device is idle, so the copy never
    /// reads freed memory; order other work on the two views after it with events or the same
    /// stream.
    #[inline]
    pub fn copy_from_device_async(&mut self, src: &DeviceView<'_, T>, stream: &Stream) -> Result<()> {
        same_len("copy_from_device_async", self.len, src.len)?;
        if self.len == 0 {
            return Ok(());
        }
        self.ctx.enter()?;
        let bytes = self.size_in_bytes();
        if self.ctx.as_raw() == src.ctx.as_raw() {
            // SAFETY: both ranges are live device memory of `bytes` bytes.
            check("cuMemcpyDtoDAsync", unsafe {
                sys::cuMemcpyDtoDAsync(self.ptr, src.ptr, bytes, stream.as_raw())
            })
        } else {
            // SAFETY: as above, each range named with its own context.
            check("cuMemcpyPeerAsync", unsafe {
                sys::cuMemcpyPeerAsync(
                    self.ptr,
                    self.ctx.as_raw(),
                    src.ptr,
                    src.ctx.as_raw(),
                    bytes,
                    stream.as_raw(),
                )
            })
        }
    }
}

impl<T: Pod> DeviceView<'_, T> {
    /// Copies this view into `dst` in host memory; the lengths must match
    /// ([`cuMemcpyDtoH`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        same_len("copy_to_host", dst.len(), self.len)?;
        if self.len == 0 {
            return Ok(());
        }
        self.ctx.enter()?;
        // SAFETY: the lengths match and `dst` is exclusively borrowed host memory.
        check("cuMemcpyDtoH", unsafe {
            sys::cuMemcpyDtoH(dst.as_mut_ptr().cast(), self.ptr, self.size_in_bytes())
        })
    }

    /// Queues a copy of this view into `dst` in host memory on `stream`
    /// ([`cuMemcpyDtoHAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    /// To pinned memory the copy is asynchronous; to pageable memory the call returns once the
    /// copy is done.
    ///
    /// # Safety
    ///
    /// The copy may still be writing `dst` after this returns (when `dst` is pinned host
    /// memory): `dst` must stay alive, and must not be read or written, until `stream` has
    /// passed the copy (for example, until [`Stream::synchronize`] returns).
    #[inline]
    pub unsafe fn copy_to_host_async(&self, dst: &mut [T], stream: &Stream) -> Result<()> {
        same_len("copy_to_host_async", dst.len(), self.len)?;
        if self.len == 0 {
            return Ok(());
        }
        self.ctx.enter()?;
        // SAFETY: the lengths match; the caller keeps `dst` alive and untouched until the copy has run.
        check("cuMemcpyDtoHAsync", unsafe {
            sys::cuMemcpyDtoHAsync(dst.as_mut_ptr().cast(), self.ptr, self.size_in_bytes(), stream.as_raw())
        })
    }

    /// Copies the view into a new `Vec`.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut v = vec![T::zeroed(); self.len];
        self.copy_to_host(&mut v)?;
        Ok(v)
    }
}
