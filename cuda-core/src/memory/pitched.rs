//! Pitched 2D allocations: rows padded by the driver for aligned access, with 2D copies and
//! 2D memset.

use super::checked_bytes;
use crate::context::Context;
use crate::error::{Error, Result, check};
use crate::stream::Stream;
use bytemuck::Pod;
use cuda_driver_sys as sys;
use std::marker::PhantomData;

/// A `width` × `height` matrix of `T` in device memory whose rows start `pitch` bytes apart,
/// freed on drop
/// ([`cuMemAllocPitch`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
#[derive(Debug)]
pub struct PitchedBuffer<T: Pod> {
    ptr: sys::CUdeviceptr,
    pitch: usize,
    width: usize,
    height: usize,
    ctx: Context,
    _marker: PhantomData<T>,
}

// SAFETY: the buffer owns its memory; T is plain data.
unsafe impl<T: Pod> Send for PitchedBuffer<T> {}
// SAFETY: shared access only reads.
unsafe impl<T: Pod> Sync for PitchedBuffer<T> {}

impl<T: Pod> PitchedBuffer<T> {
    /// Allocates `height` rows of `width` elements each.
    pub fn new(ctx: &Context, width: usize, height: usize) -> Result<PitchedBuffer<T>> {
        let row = checked_bytes::<T>("PitchedBuffer::new", width)?;
        if height == 0 {
            return Err(Error::invalid("PitchedBuffer::new", "a height of 0 rows was requested"));
        }
        if row.checked_mul(height).is_none_or(|b| b > isize::MAX as usize) {
            return Err(Error::invalid(
                "PitchedBuffer::new",
                format!("{width} × {height} elements overflow"),
            ));
        }
        // The call accepts 4, 8 or 16 as the access size it aligns rows for.
        let element = match std::mem::size_of::<T>() {
            s if s >= 16 => 16,
            8..=15 => 8,
            _ => 4,
        };
        ctx.enter()?;
        let (mut ptr, mut pitch) = (0, 0);
        // SAFETY: two out-parameters; the context is current.
        check("cuMemAllocPitch", unsafe {
            sys::cuMemAllocPitch(&mut ptr, &mut pitch, row, height, element)
        })?;
        Ok(PitchedBuffer { ptr, pitch, width, height, ctx: ctx.clone(), _marker: PhantomData })
    }

    /// The device address of the first row.
    pub fn as_raw(&self) -> sys::CUdeviceptr {
        self.ptr
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
        &self.ctx
    }

    fn row_bytes(&self) -> usize {
        self.width * std::mem::size_of::<T>()
    }

    fn host_copy(&self, operation: &'static str, host_len: usize) -> Result<sys::CUDA_MEMCPY2D> {
        let want = self.width * self.height;
        if host_len != want {
            return Err(Error::invalid(
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
        c.dstDevice = self.ptr;
        c.dstPitch = self.pitch;
        self.ctx.enter()?;
        Ok(c)
    }

    fn d2h(&self, operation: &'static str, dst: &mut [T]) -> Result<sys::CUDA_MEMCPY2D> {
        let mut c = self.host_copy(operation, dst.len())?;
        c.srcMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
        c.srcDevice = self.ptr;
        c.srcPitch = self.pitch;
        c.dstMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_HOST;
        c.dstHost = dst.as_mut_ptr().cast();
        c.dstPitch = self.row_bytes();
        self.ctx.enter()?;
        Ok(c)
    }

    /// Copies a densely packed row-major host matrix into the buffer
    /// ([`cuMemcpy2D`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        let c = self.h2d("PitchedBuffer::copy_from_host", src)?;
        // SAFETY: the descriptor names `src` and this allocation with matching sizes.
        super::finished(check("cuMemcpy2D", unsafe { sys::cuMemcpy2D(&c) }))
    }

    /// Copies the buffer into a densely packed row-major host matrix
    /// ([`cuMemcpy2D`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        let c = self.d2h("PitchedBuffer::copy_to_host", dst)?;
        // SAFETY: the descriptor names this allocation and `dst` with matching sizes.
        check("cuMemcpy2D", unsafe { sys::cuMemcpy2D(&c) })
    }

    /// [`PitchedBuffer::copy_from_host`] in `stream`'s order
    /// ([`cuMemcpy2DAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// # Safety
    ///
    /// `src` must stay alive and unmodified until `stream` has passed the copy.
    pub unsafe fn copy_from_host_async(&mut self, src: &[T], stream: &Stream) -> Result<()> {
        let c = self.h2d("PitchedBuffer::copy_from_host_async", src)?;
        // SAFETY: as copy_from_host; the caller keeps `src` alive.
        check("cuMemcpy2DAsync", unsafe { sys::cuMemcpy2DAsync(&c, stream.as_raw()) })
    }

    /// [`PitchedBuffer::copy_to_host`] in `stream`'s order
    /// ([`cuMemcpy2DAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// # Safety
    ///
    /// `dst` must stay alive and untouched until `stream` has passed the copy.
    pub unsafe fn copy_to_host_async(&self, dst: &mut [T], stream: &Stream) -> Result<()> {
        let c = self.d2h("PitchedBuffer::copy_to_host_async", dst)?;
        // SAFETY: as copy_to_host; the caller keeps `dst` alive.
        check("cuMemcpy2DAsync", unsafe { sys::cuMemcpy2DAsync(&c, stream.as_raw()) })
    }

    fn units(&self, operation: &'static str, width: usize) -> Result<usize> {
        let row = self.row_bytes();
        if row % width != 0 {
            return Err(Error::invalid(
                operation,
                format!("rows of {row} bytes are not a multiple of {width} bytes"),
            ));
        }
        self.ctx.enter()?;
        Ok(row / width)
    }

    /// Sets every byte of every row (not the padding) to `value`
    /// ([`cuMemsetD2D8`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn memset_d8(&mut self, value: u8) -> Result<()> {
        let w = self.units("PitchedBuffer::memset_d8", 1)?;
        // SAFETY: the rectangle lies within this allocation.
        super::finished(check("cuMemsetD2D8", unsafe {
            sys::cuMemsetD2D8(self.ptr, self.pitch, value, w, self.height)
        }))
    }

    /// Sets every 16-bit unit of every row to `value`
    /// ([`cuMemsetD2D16`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn memset_d16(&mut self, value: u16) -> Result<()> {
        let w = self.units("PitchedBuffer::memset_d16", 2)?;
        // SAFETY: the rectangle lies within this allocation; rows are pitch-aligned.
        super::finished(check("cuMemsetD2D16", unsafe {
            sys::cuMemsetD2D16(self.ptr, self.pitch, value, w, self.height)
        }))
    }

    /// Sets every 32-bit unit of every row to `value`
    /// ([`cuMemsetD2D32`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn memset_d32(&mut self, value: u32) -> Result<()> {
        let w = self.units("PitchedBuffer::memset_d32", 4)?;
        // SAFETY: the rectangle lies within this allocation; rows are pitch-aligned.
        super::finished(check("cuMemsetD2D32", unsafe {
            sys::cuMemsetD2D32(self.ptr, self.pitch, value, w, self.height)
        }))
    }

    /// [`PitchedBuffer::memset_d8`] in `stream`'s order
    /// ([`cuMemsetD2D8Async`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn memset_d8_async(&mut self, value: u8, stream: &Stream) -> Result<()> {
        let w = self.units("PitchedBuffer::memset_d8_async", 1)?;
        // SAFETY: as memset_d8; device memory is freed only after queued work.
        check("cuMemsetD2D8Async", unsafe {
            sys::cuMemsetD2D8Async(self.ptr, self.pitch, value, w, self.height, stream.as_raw())
        })
    }

    /// [`PitchedBuffer::memset_d16`] in `stream`'s order
    /// ([`cuMemsetD2D16Async`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn memset_d16_async(&mut self, value: u16, stream: &Stream) -> Result<()> {
        let w = self.units("PitchedBuffer::memset_d16_async", 2)?;
        // SAFETY: as memset_d16; device memory is freed only after queued work.
        check("cuMemsetD2D16Async", unsafe {
            sys::cuMemsetD2D16Async(self.ptr, self.pitch, value, w, self.height, stream.as_raw())
        })
    }

    /// [`PitchedBuffer::memset_d32`] in `stream`'s order
    /// ([`cuMemsetD2D32Async`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn memset_d32_async(&mut self, value: u32, stream: &Stream) -> Result<()> {
        let w = self.units("PitchedBuffer::memset_d32_async", 4)?;
        // SAFETY: as memset_d32; device memory is freed only after queued work.
        check("cuMemsetD2D32Async", unsafe {
            sys::cuMemsetD2D32Async(self.ptr, self.pitch, value, w, self.height, stream.as_raw())
        })
    }
}

impl<T: Pod> Drop for PitchedBuffer<T> {
    fn drop(&mut self) {
        let ptr = self.ptr;
        // SAFETY: this value owns the allocation and frees it once.
        self.ctx.with_current_for_drop("cuMemFree", || unsafe { sys::cuMemFree(ptr) });
    }
}
