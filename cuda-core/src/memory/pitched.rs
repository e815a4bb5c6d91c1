//! Pitched 2D allocations: rows padded by the driver for aligned access, with 2D copies and
//! 2D memset.

use super::DeviceViewMut;
use super::buffer::DeviceBuffer;
use super::checked_bytes;
use crate::alloc::Allocator;
use crate::context::Context;
use crate::error::{Error, Result, check};
use crate::stream::Stream;
use bytemuck::Pod;
use cuhost_driver_sys as sys;
use std::marker::PhantomData;
use std::sync::Arc;

/// A `width` × `height` matrix of `T` in device memory whose rows start `pitch` bytes apart,
/// stored in a [`DeviceBuffer`] from any allocator and given back with it, in stream order.
///
/// The pitch is the row size rounded up to the device's texture pitch alignment (and to 128
/// bytes, for coalesced rows), so the memory can back 2D textures as it is. Its synchronous
/// copies and memsets run on the storage's stream and return when they are done.
#[derive(Debug)]
pub struct PitchedBuffer<T: Pod> {
    storage: DeviceBuffer<u8>,
    pitch: usize,
    width: usize,
    height: usize,
    _marker: PhantomData<T>,
}

/// The alignment of rows: the device's texture pitch alignment, at least 128 bytes.
fn row_alignment(stream: &Stream) -> Result<usize> {
    let texture = stream.context().device().texture_pitch_alignment()?;
    Ok(usize::try_from(texture).unwrap_or(0).max(128).next_power_of_two())
}

impl<T: Pod> PitchedBuffer<T> {
    /// Allocates `height` rows of `width` elements each for use on `stream`, from the thread's
    /// current allocator (as [`DeviceBuffer::new`]).
    ///
    /// A zero width or height, or a size that overflows, is an [`Error::InvalidArgument`];
    /// otherwise it fails when the allocator does.
    #[track_caller]
    pub fn new(stream: &Stream, width: usize, height: usize) -> Result<PitchedBuffer<T>> {
        let (pitch, bytes) = Self::layout(stream, width, height)?;
        Self::wrap(DeviceBuffer::new(stream, bytes)?, pitch, width, height)
    }

    /// Allocates `height` rows of `width` elements each for use on `stream` from `allocator`.
    ///
    /// Fails as [`new`](Self::new) does, and with an [`Error::InvalidArgument`] when
    /// `allocator` returns an address not aligned for `T`.
    #[track_caller]
    pub fn new_in(
        stream: &Stream,
        width: usize,
        height: usize,
        allocator: Arc<dyn Allocator>,
    ) -> Result<PitchedBuffer<T>> {
        let (pitch, bytes) = Self::layout(stream, width, height)?;
        Self::wrap(DeviceBuffer::new_in(stream, bytes, allocator)?, pitch, width, height)
    }

    fn layout(stream: &Stream, width: usize, height: usize) -> Result<(usize, usize)> {
        let row = checked_bytes::<T>("PitchedBuffer::new", width)?;
        if height == 0 {
            return Err(Error::invalid("PitchedBuffer::new", "a height of 0 rows was requested"));
        }
        let align = row_alignment(stream)?;
        let pitch = row.checked_next_multiple_of(align);
        match pitch.and_then(|p| p.checked_mul(height)) {
            Some(bytes) if bytes <= isize::MAX as usize => Ok((pitch.unwrap_or(row), bytes)),
            _ => Err(Error::invalid("PitchedBuffer::new", format!("{width} × {height} elements overflow"))),
        }
    }

    fn wrap(
        storage: DeviceBuffer<u8>,
        pitch: usize,
        width: usize,
        height: usize,
    ) -> Result<PitchedBuffer<T>> {
        if storage.as_raw() % std::mem::align_of::<T>() as u64 != 0 {
            return Err(Error::invalid(
                "PitchedBuffer::new",
                format!("the allocator returned {:#x}, not aligned for the element type", storage.as_raw()),
            ));
        }
        Ok(PitchedBuffer { storage, pitch, width, height, _marker: PhantomData })
    }

    /// The device address of the first row.
    pub fn as_raw(&self) -> sys::CUdeviceptr {
        self.storage.as_raw()
    }

    /// Bytes from one row to the next (at least `width * size_of::<T>()`).
    pub fn pitch(&self) -> usize {
        self.pitch
    }

    /// Elements per row.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Number of rows.
    pub fn height(&self) -> usize {
        self.height
    }

    /// The context the memory belongs to.
    pub fn context(&self) -> &Context {
        self.storage.context()
    }

    /// The buffer that holds the rows (and their padding), shared.
    ///
    /// There is no `&mut` access to it: a replaced storage would leave the pitch and height
    /// describing memory that is not there. What a caller needs it for is on the
    /// `PitchedBuffer` itself ([`set_stream`](Self::set_stream),
    /// [`record_stream`](Self::record_stream), [`bytes_mut`](Self::bytes_mut)):
    ///
    /// ```compile_fail,E0599
    /// # fn main() -> cuhost::Result<()> {
    /// use cuhost::{Context, Device, DeviceBuffer, Stream, StreamFlags, memory::PitchedBuffer};
    /// let ctx = Context::primary(&Device::get(0)?)?;
    /// let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    /// let mut p = PitchedBuffer::<f32>::new(&s, 1024, 1024)?;
    /// // The storage cannot be swapped for a smaller buffer (F8 of the soundness review).
    /// let _old = std::mem::replace(p.storage_mut(), DeviceBuffer::<u8>::new(&s, 1)?);
    /// # Ok(()) }
    /// ```
    ///
    /// ```no_run
    /// # fn main() -> cuhost::Result<()> {
    /// use cuhost::{Context, Device, Stream, StreamFlags, memory::PitchedBuffer};
    /// let ctx = Context::primary(&Device::get(0)?)?;
    /// let (a, b) = (Stream::new(&ctx, StreamFlags::NON_BLOCKING)?, Stream::new(&ctx, StreamFlags::NON_BLOCKING)?);
    /// let mut p = PitchedBuffer::<f32>::new(&a, 64, 64)?;
    /// p.set_stream(&b)?; // ordered on `b` from now on
    /// p.bytes_mut().memset_d8(0)?; // rows and padding
    /// assert!(p.storage().len() >= p.pitch() * p.height());
    /// # Ok(()) }
    /// ```
    pub fn storage(&self) -> &DeviceBuffer<u8> {
        &self.storage
    }

    /// The stream the buffer is ordered on (its storage's): synchronous copies and memsets run
    /// there, and the memory is given back in its order.
    pub fn stream(&self) -> &Stream {
        self.storage.stream()
    }

    /// Orders the buffer on `stream` from now on, as [`DeviceBuffer::set_stream`]; fails as it
    /// does, leaving the buffer where it was.
    pub fn set_stream(&mut self, stream: &Stream) -> Result<()> {
        self.storage.set_stream(stream)
    }

    /// Declares that work queued on `stream` outside this crate uses the buffer, as
    /// [`DeviceBuffer::record_stream`]; fails as it does.
    pub fn record_stream(&self, stream: &Stream) -> Result<()> {
        self.storage.record_stream(stream)
    }

    /// All the bytes of the allocation, rows and padding (`pitch() * height()` bytes at least),
    /// as an exclusive view.
    pub fn bytes_mut(&mut self) -> DeviceViewMut<'_, u8> {
        self.storage.view_mut()
    }

    /// Runs a synchronous 2D operation that reads or writes the buffer (`access`): queued on
    /// the storage's stream, then waited for.
    pub(crate) fn run_sync(
        &self,
        call: &'static str,
        access: crate::track::Access,
        queue: impl FnOnce(sys::CUstream) -> sys::CUresult,
    ) -> Result<()> {
        let view = self.storage.view();
        view.check_sync(access)?;
        check(call, queue(view.sync_stream()?))?;
        view.synchronize_stream()
    }

    fn row_bytes(&self) -> usize {
        self.width * std::mem::size_of::<T>()
    }

    fn host_copy(&self, operation: &'static str, host_len: usize) -> Result<sys::CUDA_MEMCPY2D> {
        let want = self.width * self.height;
        if host_len != want {
            return Err(Error::refused(
                crate::error::Reason::LENGTH_MISMATCH,
                operation,
                format!(
                    "the host slice holds {host_len} elements but the matrix {} × {} = {want}",
                    self.width, self.height
                ),
            ));
        }
        // SAFETY: a plain C struct; all zeroes is a valid value.
        let mut c: sys::CUDA_MEMCPY2D = unsafe { std::mem::zeroed() };
        c.WidthInBytes = self.row_bytes();
        c.Height = self.height;
        Ok(c)
    }

    fn h2d(&mut self, operation: &'static str, src: &[T]) -> Result<sys::CUDA_MEMCPY2D> {
        let mut c = self.host_copy(operation, src.len())?;
        c.srcMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_HOST;
        c.srcHost = src.as_ptr().cast();
        c.srcPitch = self.row_bytes();
        c.dstMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
        c.dstDevice = self.as_raw();
        c.dstPitch = self.pitch;
        self.context().enter()?;
        Ok(c)
    }

    fn d2h(&self, operation: &'static str, dst: &mut [T]) -> Result<sys::CUDA_MEMCPY2D> {
        let mut c = self.host_copy(operation, dst.len())?;
        c.srcMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
        c.srcDevice = self.as_raw();
        c.srcPitch = self.pitch;
        c.dstMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_HOST;
        c.dstHost = dst.as_mut_ptr().cast();
        c.dstPitch = self.row_bytes();
        self.context().enter()?;
        Ok(c)
    }

    /// Copies a densely packed row-major host matrix into the buffer
    /// ([`cuMemcpy2DAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)
    /// on the storage's stream, waited for).
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        let c = self.h2d("PitchedBuffer::copy_from_host", src)?;
        // SAFETY: the descriptor names `src` and this allocation with matching sizes; `src`
        // lives until the copy is waited for.
        self.run_sync("cuMemcpy2DAsync", crate::track::Access::Write, |s| unsafe {
            sys::cuMemcpy2DAsync(&c, s)
        })
    }

    /// Copies the buffer into a densely packed row-major host matrix
    /// ([`cuMemcpy2DAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)
    /// on the storage's stream, waited for).
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        let c = self.d2h("PitchedBuffer::copy_to_host", dst)?;
        // SAFETY: the descriptor names this allocation and `dst` with matching sizes; `dst`
        // lives until the copy is waited for.
        self.run_sync("cuMemcpy2DAsync", crate::track::Access::Read, |s| unsafe {
            sys::cuMemcpy2DAsync(&c, s)
        })
    }

    /// [`PitchedBuffer::copy_from_host`] in `stream`'s order
    /// ([`cuMemcpy2DAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// # Safety
    ///
    /// `src` must stay alive and unmodified until `stream` has passed the copy.
    pub unsafe fn copy_from_host_async(&mut self, src: &[T], stream: &Stream) -> Result<()> {
        let c = self.h2d("PitchedBuffer::copy_from_host_async", src)?;
        self.storage.record_stream(stream)?;
        // SAFETY: as copy_from_host; the caller keeps `src` alive.
        unsafe { driver!(cuMemcpy2DAsync(&c, stream.as_raw())) }
    }

    /// [`PitchedBuffer::copy_to_host`] in `stream`'s order
    /// ([`cuMemcpy2DAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// # Safety
    ///
    /// `dst` must stay alive and untouched until `stream` has passed the copy.
    pub unsafe fn copy_to_host_async(&self, dst: &mut [T], stream: &Stream) -> Result<()> {
        let c = self.d2h("PitchedBuffer::copy_to_host_async", dst)?;
        self.storage.record_stream(stream)?;
        // SAFETY: as copy_to_host; the caller keeps `dst` alive.
        unsafe { driver!(cuMemcpy2DAsync(&c, stream.as_raw())) }
    }

    fn units(&self, operation: &'static str, width: usize) -> Result<usize> {
        let row = self.row_bytes();
        if row % width != 0 {
            return Err(Error::invalid(
                operation,
                format!("rows of {row} bytes are not a multiple of {width} bytes"),
            ));
        }
        self.context().enter()?;
        Ok(row / width)
    }

    /// Sets every byte of every row (not the padding) to `value`
    /// ([`cuMemsetD2D8Async`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)
    /// on the storage's stream, waited for).
    pub fn memset_d8(&mut self, value: u8) -> Result<()> {
        let w = self.units("PitchedBuffer::memset_d8", 1)?;
        let (ptr, pitch, height) = (self.as_raw(), self.pitch, self.height);
        // SAFETY: the rectangle lies within this allocation.
        self.run_sync("cuMemsetD2D8Async", crate::track::Access::Write, |s| unsafe {
            sys::cuMemsetD2D8Async(ptr, pitch, value, w, height, s)
        })
    }

    /// Sets every 16-bit unit of every row to `value`
    /// ([`cuMemsetD2D16Async`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)
    /// on the storage's stream, waited for).
    pub fn memset_d16(&mut self, value: u16) -> Result<()> {
        let w = self.units("PitchedBuffer::memset_d16", 2)?;
        let (ptr, pitch, height) = (self.as_raw(), self.pitch, self.height);
        // SAFETY: the rectangle lies within this allocation.
        self.run_sync("cuMemsetD2D16Async", crate::track::Access::Write, |s| unsafe {
            sys::cuMemsetD2D16Async(ptr, pitch, value, w, height, s)
        })
    }

    /// Sets every 32-bit unit of every row to `value`
    /// ([`cuMemsetD2D32Async`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)
    /// on the storage's stream, waited for).
    pub fn memset_d32(&mut self, value: u32) -> Result<()> {
        let w = self.units("PitchedBuffer::memset_d32", 4)?;
        let (ptr, pitch, height) = (self.as_raw(), self.pitch, self.height);
        // SAFETY: the rectangle lies within this allocation.
        self.run_sync("cuMemsetD2D32Async", crate::track::Access::Write, |s| unsafe {
            sys::cuMemsetD2D32Async(ptr, pitch, value, w, height, s)
        })
    }

    /// [`PitchedBuffer::memset_d8`] in `stream`'s order
    /// ([`cuMemsetD2D8Async`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn memset_d8_async(&mut self, value: u8, stream: &Stream) -> Result<()> {
        let w = self.units("PitchedBuffer::memset_d8_async", 1)?;
        self.storage.record_stream(stream)?;
        // SAFETY: as memset_d8; device memory is freed only after queued work.
        unsafe {
            driver!(cuMemsetD2D8Async(self.as_raw(), self.pitch, value, w, self.height, stream.as_raw()))
        }
    }

    /// [`PitchedBuffer::memset_d16`] in `stream`'s order
    /// ([`cuMemsetD2D16Async`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn memset_d16_async(&mut self, value: u16, stream: &Stream) -> Result<()> {
        let w = self.units("PitchedBuffer::memset_d16_async", 2)?;
        self.storage.record_stream(stream)?;
        // SAFETY: as memset_d16; device memory is freed only after queued work.
        unsafe {
            driver!(cuMemsetD2D16Async(self.as_raw(), self.pitch, value, w, self.height, stream.as_raw()))
        }
    }

    /// [`PitchedBuffer::memset_d32`] in `stream`'s order
    /// ([`cuMemsetD2D32Async`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn memset_d32_async(&mut self, value: u32, stream: &Stream) -> Result<()> {
        let w = self.units("PitchedBuffer::memset_d32_async", 4)?;
        self.storage.record_stream(stream)?;
        // SAFETY: as memset_d32; device memory is freed only after queued work.
        unsafe {
            driver!(cuMemsetD2D32Async(self.as_raw(), self.pitch, value, w, self.height, stream.as_raw()))
        }
    }
}
