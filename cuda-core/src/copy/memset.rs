//! Setting device memory to a repeated 8-, 16- or 32-bit value.

use crate::error::{Error, Result};
use crate::memory::DeviceViewMut;
use crate::stream::Stream;
use crate::track::Access;
use bytemuck::Pod;

impl<T: Pod> DeviceViewMut<'_, T> {
    fn units(&self, operation: &'static str, width: usize) -> Result<usize> {
        let bytes = self.size_in_bytes();
        if self.ptr % width as u64 != 0 || bytes % width != 0 {
            return Err(Error::invalid(
                operation,
                format!(
                    "the view at {:#x} of {bytes} bytes is not aligned to, or a multiple of, {width} bytes",
                    self.ptr
                ),
            ));
        }
        Ok(bytes / width)
    }

    /// Sets every byte of the view to `value`
    /// ([`cuMemsetD8Async`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)
    /// in the order of the view's stream; returns when it is done).
    pub fn memset_d8(&mut self, value: u8) -> Result<()> {
        self.check_sync(Access::Write)?;
        let n = self.units("memset_d8", 1)?;
        let own = self.sync_stream()?;
        self.ctx.enter()?;
        // SAFETY: `n` bytes of exclusively borrowed device memory.
        unsafe { driver!(cuMemsetD8Async(self.ptr, value, n, own)) }?;
        self.synchronize_stream()
    }

    /// Sets every 16-bit unit of the view to `value`; the view must be 2-byte aligned and sized
    /// ([`cuMemsetD16Async`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)
    /// in the order of the view's stream; returns when it is done).
    pub fn memset_d16(&mut self, value: u16) -> Result<()> {
        self.check_sync(Access::Write)?;
        let n = self.units("memset_d16", 2)?;
        let own = self.sync_stream()?;
        self.ctx.enter()?;
        // SAFETY: `n` aligned 16-bit units of exclusively borrowed device memory.
        unsafe { driver!(cuMemsetD16Async(self.ptr, value, n, own)) }?;
        self.synchronize_stream()
    }

    /// Sets every 32-bit unit of the view to `value`; the view must be 4-byte aligned and sized
    /// ([`cuMemsetD32Async`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)
    /// in the order of the view's stream; returns when it is done).
    pub fn memset_d32(&mut self, value: u32) -> Result<()> {
        self.check_sync(Access::Write)?;
        let n = self.units("memset_d32", 4)?;
        let own = self.sync_stream()?;
        self.ctx.enter()?;
        // SAFETY: `n` aligned 32-bit units of exclusively borrowed device memory.
        unsafe { driver!(cuMemsetD32Async(self.ptr, value, n, own)) }?;
        self.synchronize_stream()
    }

    /// [`Self::memset_d8`] in `stream`'s order
    /// ([`cuMemsetD8Async`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn memset_d8_async(&mut self, value: u8, stream: &Stream) -> Result<()> {
        let n = self.units("memset_d8_async", 1)?;
        self.ctx.enter()?;
        self.used_on(self.ctx, stream, Access::Write)?;
        // SAFETY: as memset_d8; the buffer behind the view is given back only after the work
        // queued on its own stream and on the streams noted on it.
        unsafe { driver!(cuMemsetD8Async(self.ptr, value, n, stream.as_raw())) }
    }

    /// [`Self::memset_d16`] in `stream`'s order
    /// ([`cuMemsetD16Async`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn memset_d16_async(&mut self, value: u16, stream: &Stream) -> Result<()> {
        let n = self.units("memset_d16_async", 2)?;
        self.ctx.enter()?;
        self.used_on(self.ctx, stream, Access::Write)?;
        // SAFETY: as memset_d16; the buffer behind the view is given back only after the work
        // queued on its own stream and on the streams noted on it.
        unsafe { driver!(cuMemsetD16Async(self.ptr, value, n, stream.as_raw())) }
    }

    /// [`Self::memset_d32`] in `stream`'s order
    /// ([`cuMemsetD32Async`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn memset_d32_async(&mut self, value: u32, stream: &Stream) -> Result<()> {
        let n = self.units("memset_d32_async", 4)?;
        self.ctx.enter()?;
        self.used_on(self.ctx, stream, Access::Write)?;
        // SAFETY: as memset_d32; the buffer behind the view is given back only after the work
        // queued on its own stream and on the streams noted on it.
        unsafe { driver!(cuMemsetD32Async(self.ptr, value, n, stream.as_raw())) }
    }
}
