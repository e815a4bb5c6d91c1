//! Stream memory operations: wait on and write 32- and 64-bit values in device memory, and
//! batches of such operations.

use super::Stream;
use crate::error::{Result, check};
use bitflags::bitflags;
use cuda_driver_sys as sys;

bitflags! {
    /// How [`Stream::wait_value_32`] compares (`CUstreamWaitValue_flags`). The comparison is
    /// one of `GEQ` (the default, 0), `EQ`, `AND`, `NOR`; `FLUSH` may be added.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct StreamWaitValueFlags: u32 {
        /// `CU_STREAM_WAIT_VALUE_EQ`: wait until `*addr == value`.
        const EQ = 0x1;
        /// `CU_STREAM_WAIT_VALUE_AND`: wait until `(*addr & value) != 0`.
        const AND = 0x2;
        /// `CU_STREAM_WAIT_VALUE_NOR`: wait until `!(*addr | value) != 0`.
        const NOR = 0x3;
        /// `CU_STREAM_WAIT_VALUE_FLUSH`: flush remote writes before later work runs.
        const FLUSH = 0x4000_0000;
    }
}

bitflags! {
    /// Flags of [`Stream::write_value_32`] (`CUstreamWriteValue_flags`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct StreamWriteValueFlags: u32 {
        /// `CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER`: skip the memory barrier before the write.
        const NO_MEMORY_BARRIER = 0x1;
    }
}

impl Stream {
    /// Makes later work on the stream wait until the 32-bit value at `addr` satisfies the
    /// comparison with `value` (by default `*addr >= value`, wrapping)
    /// ([`cuStreamWaitValue32`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEMOP.html)).
    /// Check [`crate::Device::can_use_stream_mem_ops_v1`] or newer equivalents for support.
    ///
    /// # Safety
    ///
    /// `addr` must be a 4-byte-aligned device address (device memory, or mapped host memory)
    /// that stays valid until the stream has passed this wait, and something must eventually
    /// satisfy the condition or the stream never proceeds.
    pub unsafe fn wait_value_32(
        &self,
        addr: sys::CUdeviceptr,
        value: u32,
        flags: StreamWaitValueFlags,
    ) -> Result<()> {
        // SAFETY: the caller guarantees the address.
        check("cuStreamWaitValue32", unsafe {
            sys::cuStreamWaitValue32(self.as_raw(), addr, value, flags.bits())
        })
    }

    /// The 64-bit form of [`Stream::wait_value_32`]
    /// ([`cuStreamWaitValue64`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEMOP.html)).
    ///
    /// # Safety
    ///
    /// As [`Stream::wait_value_32`], with an 8-byte-aligned address.
    pub unsafe fn wait_value_64(
        &self,
        addr: sys::CUdeviceptr,
        value: u64,
        flags: StreamWaitValueFlags,
    ) -> Result<()> {
        // SAFETY: the caller guarantees the address.
        check("cuStreamWaitValue64", unsafe {
            sys::cuStreamWaitValue64(self.as_raw(), addr, value, flags.bits())
        })
    }

    /// Writes a 32-bit value to `addr` in stream order
    /// ([`cuStreamWriteValue32`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEMOP.html)).
    ///
    /// # Safety
    ///
    /// `addr` must be a 4-byte-aligned device address that stays valid until the write has run,
    /// and nothing may read or write it as other data concurrently.
    pub unsafe fn write_value_32(
        &self,
        addr: sys::CUdeviceptr,
        value: u32,
        flags: StreamWriteValueFlags,
    ) -> Result<()> {
        // SAFETY: the caller guarantees the address.
        check("cuStreamWriteValue32", unsafe {
            sys::cuStreamWriteValue32(self.as_raw(), addr, value, flags.bits())
        })
    }

    /// The 64-bit form of [`Stream::write_value_32`]
    /// ([`cuStreamWriteValue64`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEMOP.html)).
    ///
    /// # Safety
    ///
    /// As [`Stream::write_value_32`], with an 8-byte-aligned address.
    pub unsafe fn write_value_64(
        &self,
        addr: sys::CUdeviceptr,
        value: u64,
        flags: StreamWriteValueFlags,
    ) -> Result<()> {
        // SAFETY: the caller guarantees the address.
        check("cuStreamWriteValue64", unsafe {
            sys::cuStreamWriteValue64(self.as_raw(), addr, value, flags.bits())
        })
    }

    /// Queues a batch of wait/write/flush operations in one call
    /// ([`cuStreamBatchMemOp`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEMOP.html)).
    ///
    /// # Safety
    ///
    /// Every operation must be fully initialised and name addresses that satisfy the contracts
    /// of [`Stream::wait_value_32`] and [`Stream::write_value_32`].
    pub unsafe fn batch_mem_op(&self, ops: &mut [sys::CUstreamBatchMemOpParams]) -> Result<()> {
        let count = u32::try_from(ops.len())
            .map_err(|_| crate::Error::invalid("Stream::batch_mem_op", "more than u32::MAX operations"))?;
        // SAFETY: the caller guarantees the operations; the count matches the slice.
        check("cuStreamBatchMemOp", unsafe {
            sys::cuStreamBatchMemOp(self.as_raw(), count, ops.as_mut_ptr(), 0)
        })
    }
}
