//! Linear copies between host slices and device views: host to device, device to host, device
//! to device (and between contexts, as peer copies), synchronous and stream-ordered.

use crate::error::Result;
use crate::memory::PinnedHost;
use crate::memory::same_len;
use crate::memory::{DeviceView, DeviceViewMut};
use crate::stream::Stream;
use crate::track::Access;
use bytemuck::Pod;
use cuhost_driver_sys as sys;

impl<T: Pod> DeviceViewMut<'_, T> {
    /// Copies `src` from host memory into this view, in the order of the view's stream, and
    /// returns when it is done; the lengths must match
    /// ([`cuMemcpyHtoDAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        same_len("copy_from_host", self.len, src.len())?;
        self.check_sync(Access::Write)?;
        if self.len == 0 {
            return Ok(());
        }
        let own = self.sync_stream()?;
        self.ctx.enter()?;
        // SAFETY: the lengths match, the view is exclusively borrowed, and `src` is live memory
        // until the stream is synchronized below.
        unsafe { driver!(cuMemcpyHtoDAsync(self.ptr, src.as_ptr().cast(), self.size_in_bytes(), own)) }?;
        self.synchronize_stream()
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
        self.used_on(self.ctx, stream, Access::Write)?;
        // SAFETY: the lengths match; the caller keeps `src` alive until the copy has run.
        unsafe {
            driver!(cuMemcpyHtoDAsync(self.ptr, src.as_ptr().cast(), self.size_in_bytes(), stream.as_raw()))
        }
    }

    /// Copies `src` from device memory into this view and returns when it is done; the lengths
    /// must match. The copy runs in the order of this view's stream, after the work queued so far
    /// on the source's stream. Views of different contexts are copied as peer copies
    /// ([`cuMemcpyDtoDAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html),
    /// [`cuMemcpyPeerAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// Lengths that differ are an [`Error::InvalidArgument`](crate::error::Error::InvalidArgument),
    /// checked before any call; a failed copy, or a fault of earlier work on either stream,
    /// comes back as the driver's status.
    pub fn copy_from_device(&mut self, src: &DeviceView<'_, T>) -> Result<()> {
        same_len("copy_from_device", self.len, src.len)?;
        self.check_sync(Access::Write)?;
        src.check_sync(Access::Read)?;
        if self.len == 0 {
            return Ok(());
        }
        let own = self.sync_stream()?;
        if src.sync_stream()? != own || src.ctx.as_raw() != self.ctx.as_raw() {
            src.ctx.enter()?;
            src.synchronize_stream()?;
        }
        self.ctx.enter()?;
        self.copy_device_on(src, own)?;
        self.synchronize_stream()
    }

    /// Queues a copy of `src` from device memory into this view on `stream`; views of
    /// different contexts are copied as peer copies
    /// ([`cuMemcpyDtoDAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html),
    /// [`cuMemcpyPeerAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// On a stream other than a view's own, the copy is noted on the buffer behind the view,
    /// whose memory is then not given back before `stream` has passed the copy; so the copy
    /// never touches freed memory. The copy is ordered only on `stream`: order other work on
    /// the two views after it with events or the same stream.
    ///
    /// Lengths that differ are an [`Error::InvalidArgument`](crate::error::Error::InvalidArgument),
    /// checked before any call, and so is a default stream of another context or thread.
    #[inline]
    pub fn copy_from_device_async(&mut self, src: &DeviceView<'_, T>, stream: &Stream) -> Result<()> {
        same_len("copy_from_device_async", self.len, src.len)?;
        if self.len == 0 {
            return Ok(());
        }
        self.ctx.enter()?;
        self.used_on(self.ctx, stream, Access::Write)?;
        src.used_on(self.ctx, stream, Access::Read)?;
        self.copy_device_on(src, stream.as_raw())
    }

    /// Queues the device-to-device (or peer) copy on a raw stream, with this view's context
    /// current; lengths already checked.
    #[inline]
    fn copy_device_on(&mut self, src: &DeviceView<'_, T>, stream: sys::CUstream) -> Result<()> {
        let bytes = self.size_in_bytes();
        if self.ctx.as_raw() == src.ctx.as_raw() {
            // SAFETY: both ranges are live device memory of `bytes` bytes.
            unsafe { driver!(cuMemcpyDtoDAsync(self.ptr, src.ptr, bytes, stream)) }
        } else {
            // SAFETY: as above, each range named with its own context.
            unsafe {
                driver!(cuMemcpyPeerAsync(
                    self.ptr,
                    self.ctx.as_raw(),
                    src.ptr,
                    src.ctx.as_raw(),
                    bytes,
                    stream
                ))
            }
        }
    }
}

impl<T: Pod> DeviceView<'_, T> {
    /// Copies this view into `dst` in host memory, in the order of the view's stream, and
    /// returns when it is done; the lengths must match
    /// ([`cuMemcpyDtoHAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        same_len("copy_to_host", dst.len(), self.len)?;
        self.check_sync(Access::Read)?;
        if self.len == 0 {
            return Ok(());
        }
        let own = self.sync_stream()?;
        self.ctx.enter()?;
        // SAFETY: the lengths match and `dst` is exclusively borrowed host memory until the
        // stream is synchronized below.
        unsafe { driver!(cuMemcpyDtoHAsync(dst.as_mut_ptr().cast(), self.ptr, self.size_in_bytes(), own)) }?;
        self.synchronize_stream()
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
        self.used_on(self.ctx, stream, Access::Read)?;
        // SAFETY: the lengths match; the caller keeps `dst` alive and untouched until the copy has run.
        unsafe {
            driver!(cuMemcpyDtoHAsync(
                dst.as_mut_ptr().cast(),
                self.ptr,
                self.size_in_bytes(),
                stream.as_raw()
            ))
        }
    }

    /// Copies the view into a new `Vec`; fails as [`copy_to_host`](Self::copy_to_host) does.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut v = vec![T::zeroed(); self.len];
        self.copy_to_host(&mut v)?;
        Ok(v)
    }
}

impl<T: Pod> DeviceViewMut<'_, T> {
    /// Queues a copy of pinned host memory into this view on `stream`; the lengths must match
    /// ([`cuMemcpyHtoDAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// Safe: `src` records the copy, and cannot be written or given back until it is done
    /// (reading it meanwhile is allowed). Copies queued on other streams that write `src`
    /// are waited for on `stream` first. On a stream other than the view's own, the copy is
    /// noted on the buffer behind the view, which is not given back before it is done.
    ///
    /// Lengths that differ, or a default stream of another context or thread, are an
    /// [`Error::InvalidArgument`](crate::error::Error::InvalidArgument).
    #[inline]
    pub fn copy_from_pinned_async(&mut self, src: &impl PinnedHost<T>, stream: &Stream) -> Result<()> {
        let crate::memory::pinned_chunk::sealed::Tracked { ptr: host, len, uses } = src.tracked()?;
        same_len("copy_from_pinned_async", self.len, len)?;
        self.ctx.enter()?;
        // The copy runs with this view's context current, and `src` records it on `stream`:
        // both must name the same stream (checked here too for views without an owner).
        crate::track::nameable(self.ctx, stream)?;
        self.used_on(self.ctx, stream, Access::Write)?;
        let (dst, bytes) = (self.ptr, self.size_in_bytes());
        uses.around(stream, false, || {
            // SAFETY: the lengths match; `src` stays alive and unwritten until the event
            // recorded after this copy has completed.
            unsafe { driver!(cuMemcpyHtoDAsync(dst, host.cast(), bytes, stream.as_raw())) }
        })
    }
}

impl<T: Pod> DeviceView<'_, T> {
    /// Queues a copy of this view into pinned host memory on `stream`; the lengths must match
    /// ([`cuMemcpyDtoHAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// Safe: `dst` records the copy, and cannot be read, written or given back until it is
    /// done ([`PinnedBuffer::as_slice`](crate::memory::PinnedBuffer::as_slice) waits for it). On a stream other than the view's own,
    /// the copy is noted on the buffer behind the view, which is not given back before it is
    /// done.
    ///
    /// Lengths that differ, or a default stream of another context or thread, are an
    /// [`Error::InvalidArgument`](crate::error::Error::InvalidArgument).
    #[inline]
    pub fn copy_to_pinned_async(&self, dst: &mut impl PinnedHost<T>, stream: &Stream) -> Result<()> {
        let crate::memory::pinned_chunk::sealed::Tracked { ptr: host, len, uses } = dst.tracked()?;
        same_len("copy_to_pinned_async", len, self.len)?;
        self.ctx.enter()?;
        // As in `copy_from_pinned_async`.
        crate::track::nameable(self.ctx, stream)?;
        self.used_on(self.ctx, stream, Access::Read)?;
        let (src, bytes) = (self.ptr, self.size_in_bytes());
        uses.around(stream, true, || {
            // SAFETY: the lengths match; `dst` stays alive, unread and unwritten by the host
            // until the event recorded after this copy has completed.
            unsafe { driver!(cuMemcpyDtoHAsync(host.cast(), src, bytes, stream.as_raw())) }
        })
    }
}

impl<T: Pod> DeviceView<'_, T> {
    /// A new buffer owned by `stream`, holding a copy of this view made on the device in
    /// `stream`'s order
    /// ([`cuMemcpyDtoDAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html),
    /// or a peer copy from another context): it returns without waiting, as
    /// [`copy_from_device_async`](DeviceViewMut::copy_from_device_async) does.
    ///
    /// The copy is ordered as every use on a stream is (see the crate documentation, *Streams*):
    /// on a stream other than the view's own it first waits for the work queued so far on the
    /// view's stream, and the memory behind the view is not given back before the copy has
    /// run. Work queued on the view's own stream *after* this call is not ordered before the
    /// copy: a write to the source there must wait for `stream` (an event) first. The new
    /// buffer belongs to `stream`, so work on `stream` sees the copy with no wait at all.
    ///
    /// # Errors
    ///
    /// An empty view is an [`Error::InvalidArgument`](crate::Error::InvalidArgument) (no
    /// buffer has zero elements), and so is a default stream of another context or thread;
    /// otherwise it fails as [`DeviceBuffer::new`](crate::DeviceBuffer::new) does or with the
    /// copy's status.
    pub fn clone_on(&self, stream: &Stream) -> Result<crate::DeviceBuffer<T>> {
        let mut copy = crate::DeviceBuffer::new(stream, self.len)?;
        copy.view_mut().copy_from_device_async(self, stream)?;
        Ok(copy)
    }
}

impl<T: Pod, S: crate::memory::MemorySpace> crate::DeviceBuffer<T, S> {
    /// A new buffer owned by `stream` with a copy of this one, made on the device in `stream`'s
    /// order and returned without waiting: cudarc's `CudaSlice::clone`, with the stream named.
    /// See [`DeviceView::clone_on`] for how the copy is ordered; it fails as that does.
    ///
    /// ```no_run
    /// # fn main() -> cuhost::Result<()> {
    /// use cuhost::{Context, Device, DeviceBuffer, Stream, StreamFlags};
    /// let ctx = Context::primary(&Device::get(0)?)?;
    /// let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    /// let a = DeviceBuffer::from_slice(&stream, &[1.0f32, 2.0, 3.0])?;
    /// let b = a.clone_on(&stream)?; // queued after everything on `stream` so far
    /// assert_eq!(b.to_vec()?, [1.0, 2.0, 3.0]);
    /// # Ok(()) }
    /// ```
    pub fn clone_on(&self, stream: &Stream) -> Result<crate::DeviceBuffer<T>> {
        self.view().clone_on(stream)
    }
}
