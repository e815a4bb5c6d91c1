//! [`DeviceBuffer`]: the one owning, typed buffer of device (or managed) memory, over any
//! allocator, freed in stream order.

use super::checked_bytes;
use super::source::{HeldStream, Source};
use super::space::{DeviceOnly, MemorySpace};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::pool::{Allocator, DeviceAllocation};
use crate::stream::Stream;
use bytemuck::Pod;
use cuda_driver_sys as sys;
use std::marker::PhantomData;
use std::sync::Arc;

/// `len` elements of `T` in memory space `S` ([`DeviceOnly`] by default, or
/// [`Managed`](super::Managed)), from an allocator, given back in stream order when dropped.
///
/// * **Where the memory comes from.** [`DeviceBuffer::new`] asks the thread's current
///   allocator ([`pool::set_allocator`](crate::pool::set_allocator),
///   [`pool::using_allocator`](crate::pool::using_allocator)); with none set, the
///   [`MemoryPool`](crate::pool::MemoryPool) of the stream's device. [`DeviceBuffer::new_in`]
///   names the allocator: plain `cuMemAlloc` ([`DeviceAllocator`](crate::pool::DeviceAllocator)),
///   the stream-ordered allocator of the driver
///   ([`AsyncAllocator`](crate::pool::AsyncAllocator), on the default or a created
///   [`MemPool`](crate::mempool::MemPool)), a `MemoryPool`, or an [`Allocator`] of yours.
///   Managed memory is [`ManagedBuffer::new_managed`](super::ManagedBuffer::new_managed).
/// * **Stream order.** A buffer belongs to the stream it was allocated on; it is given back in
///   that stream's order, so work queued there before the drop may still use it. Work on other
///   streams must be declared with [`record_stream`](Self::record_stream) (the memory is then
///   not reused until those streams have passed the point of the drop) or the buffer moved to
///   another stream with [`set_stream`](Self::set_stream). This holds whatever the allocator.
/// * **Synchronous copies** (`copy_from`, `copy_to`, `to_vec`, and the views' synchronous
///   copies and memsets) run in the buffer's stream's order and return when they are done.
/// * **Kernels** take the buffer, or a view of it, as an argument directly (its device address
///   is passed).
///
/// Errors while giving memory back in `Drop` are kept in the context (see
/// [`Context::take_deferred_errors`]); [`free`](Self::free) reports them instead.
pub struct DeviceBuffer<T: Pod, S: MemorySpace = DeviceOnly> {
    /// The device address of the first element; a kernel argument points at this field.
    pub(crate) ptr: sys::CUdeviceptr,
    len: usize,
    allocation: DeviceAllocation,
    source: Source,
    stream: HeldStream,
    recorded: Vec<Stream>,
    _marker: PhantomData<(T, S)>,
}

// SAFETY: the buffer owns its memory, its allocator is Send + Sync, and T is plain data.
unsafe impl<T: Pod, S: MemorySpace> Send for DeviceBuffer<T, S> {}
// SAFETY: shared access only reads the handle; the driver orders access to the memory.
unsafe impl<T: Pod, S: MemorySpace> Sync for DeviceBuffer<T, S> {}

impl<T: Pod, S: MemorySpace> std::fmt::Debug for DeviceBuffer<T, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .field("space", &S::NAME)
            .field("allocator", &self.source.name())
            .field("stream", &self.stream.as_raw())
            .finish()
    }
}

impl<T: Pod> DeviceBuffer<T> {
    /// Allocates `len` elements for use on `stream` from the thread's current allocator (by
    /// default the [`MemoryPool`](crate::pool::MemoryPool) of the stream's device). The
    /// contents are whatever the memory held.
    ///
    /// A length of 0, or one whose byte size overflows, is an [`Error::InvalidArgument`].
    #[inline]
    #[track_caller]
    pub fn new(stream: &Stream, len: usize) -> Result<DeviceBuffer<T>> {
        let bytes = checked_bytes::<T>("DeviceBuffer::new", len)?;
        let source = Source::current(stream)?;
        // SAFETY: device memory from any allocator is device memory.
        unsafe { DeviceBuffer::allocate(source, stream, len, bytes) }
    }

    /// Allocates `len` elements for use on `stream` from `allocator`.
    ///
    /// A length of 0, or one whose byte size overflows, is an [`Error::InvalidArgument`];
    /// otherwise it fails when `allocator` does ([`Error::OutOfMemory`] from a pool, or the
    /// driver's status from a plain allocator).
    #[track_caller]
    pub fn new_in(stream: &Stream, len: usize, allocator: Arc<dyn Allocator>) -> Result<DeviceBuffer<T>> {
        let bytes = checked_bytes::<T>("DeviceBuffer::new_in", len)?;
        // SAFETY: as in `new`.
        unsafe { DeviceBuffer::allocate(Source::Shared(allocator), stream, len, bytes) }
    }

    /// Allocates `len` elements set to zero bytes, in `stream`'s order
    /// ([`cuMemsetD8Async`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// Fails as [`DeviceBuffer::new`] does, or with the memset's status.
    #[track_caller]
    pub fn zeroed(stream: &Stream, len: usize) -> Result<DeviceBuffer<T>> {
        let mut b = DeviceBuffer::new(stream, len)?;
        b.view_mut().memset_d8_async(0, stream)?;
        Ok(b)
    }

    /// Allocates a buffer on `stream` holding a copy of `src`; returns once the copy is done.
    ///
    /// An empty `src` is an [`Error::InvalidArgument`], as for [`DeviceBuffer::new`]; the
    /// allocation's and the copy's failures are returned.
    #[track_caller]
    pub fn from_slice(stream: &Stream, src: &[T]) -> Result<DeviceBuffer<T>> {
        let mut b = DeviceBuffer::new(stream, src.len())?;
        b.copy_from(src)?;
        Ok(b)
    }
}

impl<T: Pod, S: MemorySpace> DeviceBuffer<T, S> {
    /// Allocates `bytes` from `source` and wraps them.
    ///
    /// # Safety
    ///
    /// `source` hands out memory of space `S`.
    #[inline]
    #[track_caller]
    pub(crate) unsafe fn allocate(
        source: Source,
        stream: &Stream,
        len: usize,
        bytes: usize,
    ) -> Result<DeviceBuffer<T, S>> {
        let (allocation, held) = source.allocate(bytes, stream)?;
        Ok(DeviceBuffer {
            ptr: allocation.ptr,
            len,
            allocation,
            source,
            stream: held,
            recorded: Vec::new(),
            _marker: PhantomData,
        })
    }

    /// Adopts memory that `allocator` handed out: the buffer gives it back to `allocator` in
    /// `stream`'s order when dropped. This is how memory of other origins (imported, mapped,
    /// made by another library) becomes a buffer: implement [`Allocator`] for its owner.
    ///
    /// A length of 0, or more elements than `allocation.size` bytes hold, is an
    /// [`Error::InvalidArgument`].
    ///
    /// # Safety
    ///
    /// `allocation` came from `allocator.allocate` (or is memory `allocator.deallocate` gives
    /// back correctly), is owned by nothing else, is memory of space `S` usable in `stream`'s
    /// context, and its address is aligned for `T`.
    pub unsafe fn from_allocation(
        stream: &Stream,
        allocator: Arc<dyn Allocator>,
        allocation: DeviceAllocation,
        len: usize,
    ) -> Result<DeviceBuffer<T, S>> {
        let bytes = checked_bytes::<T>("DeviceBuffer::from_allocation", len)?;
        if bytes > allocation.size {
            return Err(Error::invalid(
                "DeviceBuffer::from_allocation",
                format!("{len} elements need {bytes} bytes but the allocation has {}", allocation.size),
            ));
        }
        Ok(DeviceBuffer {
            ptr: allocation.ptr,
            len,
            allocation,
            source: Source::Shared(allocator),
            stream: HeldStream::Counted(stream.clone()),
            recorded: Vec::new(),
            _marker: PhantomData,
        })
    }

    /// The device address of the first element.
    #[inline]
    pub fn as_raw(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    super::element_count!();

    /// The allocation behind the buffer: its address, the bytes reserved (an allocator may
    /// round the request up) and the allocator's token.
    #[inline]
    pub fn allocation(&self) -> DeviceAllocation {
        self.allocation
    }

    /// The short name of the allocator the memory came from (`MemoryPool`, `cuMemAlloc`, ...).
    pub fn allocator_name(&self) -> &'static str {
        self.source.name()
    }

    /// The context the memory belongs to (the stream's).
    #[inline]
    pub fn context(&self) -> &Context {
        self.stream.context()
    }

    /// The stream the buffer is ordered on: the one it was allocated on, or last given with
    /// [`set_stream`](Self::set_stream).
    #[inline]
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Orders the buffer on `stream` from now on: synchronous copies run there, and the memory
    /// is given back after the work queued there (and on the streams it was on before).
    pub fn set_stream(&mut self, stream: &Stream) {
        if *stream != *self.stream {
            let previous = std::mem::replace(&mut self.stream, HeldStream::Counted(stream.clone()));
            self.record_stream(&previous);
        }
    }

    /// Declares that work queued on `stream` uses the buffer: when it is dropped, the memory is
    /// not reused until `stream` has passed that point (PyTorch's `record_stream`), whatever the
    /// allocator. Recording the buffer's own stream does nothing.
    pub fn record_stream(&mut self, stream: &Stream) {
        if *stream != *self.stream && !self.recorded.contains(stream) {
            self.recorded.push(stream.clone());
        }
    }

    /// The streams declared with [`record_stream`](Self::record_stream).
    pub fn recorded_streams(&self) -> &[Stream] {
        &self.recorded
    }

    crate::memory::device_views!("DeviceBuffer");

    /// Copies `src` from the host into the buffer, in the buffer's stream's order, and returns
    /// when it is done; the lengths must match
    /// ([`cuMemcpyHtoDAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// Lengths that differ are an [`Error::InvalidArgument`], checked before any call.
    pub fn copy_from(&mut self, src: &[T]) -> Result<()> {
        self.view_mut().copy_from_host(src)
    }

    /// Copies the buffer into `dst` on the host, in the buffer's stream's order, and returns
    /// when it is done; the lengths must match
    /// ([`cuMemcpyDtoHAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// Lengths that differ are an [`Error::InvalidArgument`], checked before any call; an
    /// earlier kernel's fault on the stream is reported here by the driver's status.
    pub fn copy_to(&self, dst: &mut [T]) -> Result<()> {
        self.view().copy_to_host(dst)
    }

    /// Copies the buffer into a new `Vec`, as [`copy_to`](Self::copy_to), and fails as it does.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.view().to_vec()
    }

    /// Copies another buffer (of any memory space, context or device) into this one and returns
    /// when it is done, as [`DeviceViewMut::copy_from_device`](super::DeviceViewMut::copy_from_device); the lengths must match.
    ///
    /// Lengths that differ are an [`Error::InvalidArgument`]; a peer copy between devices that
    /// cannot reach each other fails with the driver's status.
    pub fn copy_from_device<S2: MemorySpace>(&mut self, src: &DeviceBuffer<T, S2>) -> Result<()> {
        self.view_mut().copy_from_device(&src.view())
    }

    /// Queues a copy of pinned host memory into the buffer on `stream`; safe, because `src`
    /// stays readable but cannot be written or freed until the copy is done (see
    /// [`PinnedBuffer`](super::PinnedBuffer))
    /// ([`cuMemcpyHtoDAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// Fails as [`DeviceViewMut::copy_from_pinned_async`](super::DeviceViewMut::copy_from_pinned_async)
    /// does: lengths that differ are an [`Error::InvalidArgument`].
    #[inline]
    pub fn copy_from_pinned_async(&mut self, src: &super::PinnedBuffer<T>, stream: &Stream) -> Result<()> {
        self.view_mut().copy_from_pinned_async(src, stream)
    }

    /// Queues a copy of the buffer into pinned host memory on `stream`; safe, because `dst`
    /// cannot be read, written or freed until the copy is done (see
    /// [`PinnedBuffer`](super::PinnedBuffer))
    /// ([`cuMemcpyDtoHAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// Fails as [`DeviceView::copy_to_pinned_async`](super::DeviceView::copy_to_pinned_async)
    /// does: lengths that differ are an [`Error::InvalidArgument`].
    #[inline]
    pub fn copy_to_pinned_async(&self, dst: &mut super::PinnedBuffer<T>, stream: &Stream) -> Result<()> {
        self.view().copy_to_pinned_async(dst, stream)
    }

    /// Gives the memory back now, returning what `Drop` would have kept in the context.
    ///
    /// The error is the allocator's: for memory freed by the driver, its status, which after a
    /// kernel faulted is that fault (`CUDA_ERROR_ILLEGAL_ADDRESS`, for instance). The memory is
    /// given up either way.
    #[track_caller]
    pub fn free(self) -> Result<()> {
        let mut this = std::mem::ManuallyDrop::new(self);
        let recorded = std::mem::take(&mut this.recorded);
        // SAFETY: each field is moved out once and `this` is never used or dropped again.
        let (source, stream) = unsafe { (std::ptr::read(&this.source), std::ptr::read(&this.stream)) };
        // SAFETY: the allocation came from `source` and is given back once; the streams that
        // may use it are the buffer's and the recorded ones.
        unsafe { source.deallocate(this.allocation, &stream, &recorded) }
    }
}

impl<T: Pod, S: MemorySpace> Drop for DeviceBuffer<T, S> {
    #[track_caller]
    fn drop(&mut self) {
        // SAFETY: the allocation came from `source` and is given back once; the streams that
        // may use it are the buffer's and the recorded ones.
        let r = unsafe { self.source.deallocate(self.allocation, &self.stream, &self.recorded) };
        if let Err(e) = r {
            match &self.stream {
                HeldStream::Counted(stream) => stream.context().defer(e),
                // The allocation is back: the borrowed handle may be gone.
                HeldStream::Kept(_) => self.source.defer(e),
            }
        }
    }
}
