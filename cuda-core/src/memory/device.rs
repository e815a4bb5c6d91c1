//! [`DeviceBuffer`]: an owned, typed allocation of device memory.

use super::checked_bytes;
use super::view::{DeviceView, DeviceViewMut};
use crate::context::Context;
use crate::error::{Result, check};
use crate::stream::Stream;
use bytemuck::Pod;
use cuda_driver_sys as sys;
use std::marker::PhantomData;
use std::ops::RangeBounds;

/// `len` elements of `T` in device memory, freed on drop.
///
/// Memory allocated with [`DeviceBuffer::new_async`], or given a stream with
/// [`DeviceBuffer::set_free_stream`], is freed in that stream's order (`cuMemFreeAsync`);
/// otherwise it is freed with `cuMemFree`. An error while freeing is kept in the context (see
/// [`Context::take_deferred_errors`]).
#[derive(Debug)]
pub struct DeviceBuffer<T: Pod> {
    ptr: sys::CUdeviceptr,
    len: usize,
    ctx: Context,
    free_stream: Option<Stream>,
    _marker: PhantomData<T>,
}

// SAFETY: the buffer owns its device memory; T is plain data.
unsafe impl<T: Pod> Send for DeviceBuffer<T> {}
// SAFETY: shared access only reads through copies the driver orders.
unsafe impl<T: Pod> Sync for DeviceBuffer<T> {}

impl<T: Pod> DeviceBuffer<T> {
    /// Allocates `len` uninitialised elements (the bytes are whatever the device held)
    /// ([`cuMemAlloc`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// A length of 0, or one whose byte size overflows, is an [`crate::Error::InvalidArgument`].
    pub fn new(ctx: &Context, len: usize) -> Result<DeviceBuffer<T>> {
        let bytes = checked_bytes::<T>("DeviceBuffer::new", len)?;
        ctx.enter()?;
        let mut ptr = 0;
        // SAFETY: one out-parameter; the context is current.
        check("cuMemAlloc", unsafe { sys::cuMemAlloc(&mut ptr, bytes) })?;
        Ok(DeviceBuffer { ptr, len, ctx: ctx.clone(), free_stream: None, _marker: PhantomData })
    }

    /// Allocates `len` elements in `stream`'s order from the device's current memory pool, and
    /// frees them in that stream's order
    /// ([`cuMemAllocAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    /// The memory may be used by work on `stream` at once, and by other streams after
    /// synchronizing with it.
    pub fn new_async(stream: &Stream, len: usize) -> Result<DeviceBuffer<T>> {
        let bytes = checked_bytes::<T>("DeviceBuffer::new_async", len)?;
        let ctx = stream.context();
        ctx.enter()?;
        let mut ptr = 0;
        // SAFETY: one out-parameter; the stream is alive and its context current.
        check("cuMemAllocAsync", unsafe { sys::cuMemAllocAsync(&mut ptr, bytes, stream.as_raw()) })?;
        Ok(DeviceBuffer {
            ptr,
            len,
            ctx: ctx.clone(),
            free_stream: Some(stream.clone()),
            _marker: PhantomData,
        })
    }

    /// Allocates `len` elements set to zero bytes; returns once they are zero, so any stream
    /// may use them.
    pub fn zeroed(ctx: &Context, len: usize) -> Result<DeviceBuffer<T>> {
        let mut b = DeviceBuffer::new(ctx, len)?;
        b.view_mut().memset_d8(0)?;
        Ok(b)
    }

    /// Allocates `len` elements in `stream`'s order and zeroes them in that order
    /// ([`cuMemAllocAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html),
    /// [`cuMemsetD8Async`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn zeroed_async(stream: &Stream, len: usize) -> Result<DeviceBuffer<T>> {
        let mut b = DeviceBuffer::new_async(stream, len)?;
        b.view_mut().memset_d8_async(0, stream)?;
        Ok(b)
    }

    /// Allocates a buffer holding a copy of `src`.
    pub fn from_slice(ctx: &Context, src: &[T]) -> Result<DeviceBuffer<T>> {
        let mut b = DeviceBuffer::new(ctx, src.len())?;
        b.copy_from(src)?;
        Ok(b)
    }

    /// Takes ownership of a device allocation.
    ///
    /// # Safety
    ///
    /// `ptr` must be an allocation of `ctx` (from `cuMemAlloc`, or `cuMemAllocAsync` if
    /// `free_stream` is given) of at least `len` elements of `T`, owned by nothing else.
    pub unsafe fn from_raw(
        ctx: &Context,
        ptr: sys::CUdeviceptr,
        len: usize,
        free_stream: Option<&Stream>,
    ) -> Self {
        DeviceBuffer { ptr, len, ctx: ctx.clone(), free_stream: free_stream.cloned(), _marker: PhantomData }
    }

    /// Gives up ownership and returns the device address; the caller must free it.
    pub fn into_raw(self) -> sys::CUdeviceptr {
        let ptr = self.ptr;
        // Drop the other fields without freeing the memory.
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: each field is read once and `this` is never used or dropped again.
        unsafe {
            drop(std::ptr::read(&this.ctx));
            drop(std::ptr::read(&this.free_stream));
        }
        ptr
    }

    /// Frees the memory in `stream`'s order when the buffer is dropped (`cuMemFreeAsync`):
    /// work queued on `stream` before the drop may still use it.
    pub fn set_free_stream(&mut self, stream: &Stream) {
        self.free_stream = Some(stream.clone());
    }

    /// The stream the memory is freed on, if any.
    pub fn free_stream(&self) -> Option<&Stream> {
        self.free_stream.as_ref()
    }

    /// The device address of the first element.
    #[inline]
    pub fn as_raw(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    /// The device address of the first element (same as [`DeviceBuffer::as_raw`]).
    #[inline]
    pub fn device_ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    /// The number of elements.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: buffers hold at least one element.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The size in bytes.
    #[inline]
    pub fn size_in_bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// The context the memory belongs to.
    #[inline]
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// A shared view of the whole buffer.
    #[inline]
    pub fn view(&self) -> DeviceView<'_, T> {
        DeviceView { ptr: self.ptr, len: self.len, ctx: &self.ctx, _marker: PhantomData }
    }

    /// An exclusive view of the whole buffer.
    #[inline]
    pub fn view_mut(&mut self) -> DeviceViewMut<'_, T> {
        DeviceViewMut { ptr: self.ptr, len: self.len, ctx: &self.ctx, _marker: PhantomData }
    }

    /// A shared view of `range`; past the end is an [`crate::Error::InvalidArgument`].
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceView<'_, T>> {
        let (start, end) = super::view::range_of("DeviceBuffer::slice", range, self.len)?;
        Ok(DeviceView {
            ptr: self.ptr + (start * std::mem::size_of::<T>()) as u64,
            len: end - start,
            ctx: &self.ctx,
            _marker: PhantomData,
        })
    }

    /// An exclusive view of `range`; past the end is an [`crate::Error::InvalidArgument`].
    pub fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> Result<DeviceViewMut<'_, T>> {
        let (start, end) = super::view::range_of("DeviceBuffer::slice_mut", range, self.len)?;
        Ok(DeviceViewMut {
            ptr: self.ptr + (start * std::mem::size_of::<T>()) as u64,
            len: end - start,
            ctx: &self.ctx,
            _marker: PhantomData,
        })
    }

    /// Copies `src` from the host into the buffer; lengths must match
    /// ([`cuMemcpyHtoD`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_from(&mut self, src: &[T]) -> Result<()> {
        self.view_mut().copy_from_host(src)
    }

    /// Copies the buffer into `dst` on the host; lengths must match
    /// ([`cuMemcpyDtoH`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_to(&self, dst: &mut [T]) -> Result<()> {
        self.view().copy_to_host(dst)
    }

    /// Queues a copy of `src` from the host into the buffer on `stream`
    /// ([`cuMemcpyHtoDAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// # Safety
    ///
    /// As [`DeviceViewMut::copy_from_host_async`]: `src` must stay alive and unmodified until
    /// `stream` has passed the copy.
    #[inline]
    pub unsafe fn copy_from_async(&mut self, src: &[T], stream: &Stream) -> Result<()> {
        // SAFETY: the caller upholds the contract, which is the same.
        unsafe { self.view_mut().copy_from_host_async(src, stream) }
    }

    /// Queues a copy of the buffer into `dst` on the host on `stream`
    /// ([`cuMemcpyDtoHAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// # Safety
    ///
    /// As [`DeviceView::copy_to_host_async`]: `dst` must stay alive and untouched until
    /// `stream` has passed the copy.
    #[inline]
    pub unsafe fn copy_to_async(&self, dst: &mut [T], stream: &Stream) -> Result<()> {
        // SAFETY: the caller upholds the contract, which is the same.
        unsafe { self.view().copy_to_host_async(dst, stream) }
    }

    /// Copies another device buffer into this one; lengths must match
    /// ([`cuMemcpyDtoD`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_from_device(&mut self, src: &DeviceBuffer<T>) -> Result<()> {
        self.view_mut().copy_from_device(&src.view())
    }

    /// Queues a copy of another device buffer into this one on `stream`
    /// ([`cuMemcpyDtoDAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    #[inline]
    pub fn copy_from_device_async(&mut self, src: &DeviceBuffer<T>, stream: &Stream) -> Result<()> {
        self.view_mut().copy_from_device_async(&src.view(), stream)
    }

    /// Copies the buffer into a new `Vec`.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.view().to_vec()
    }
}

impl<T: Pod> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        let ptr = self.ptr;
        match &self.free_stream {
            Some(stream) => {
                let raw = stream.as_raw();
                // SAFETY: this buffer owns the allocation; it is freed once, after the work
                // queued on `stream` before now.
                self.ctx.with_current_for_drop("cuMemFreeAsync", || unsafe { sys::cuMemFreeAsync(ptr, raw) });
            }
            // SAFETY: this buffer owns the allocation and frees it once.
            None => self.ctx.with_current_for_drop("cuMemFree", || unsafe { sys::cuMemFree(ptr) }),
        }
    }
}
