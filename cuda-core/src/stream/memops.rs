//! Stream memory operations: wait on and write 32- and 64-bit values in device memory, and
//! batches of such operations.

use super::Stream;
use crate::error::{Error, Result};
use crate::flags::flags;
use cuhost_driver_sys as sys;

flags! {
    /// How [`Stream::wait_value_32`] compares (`CUstreamWaitValue_flags`). The comparison is
    /// one of `GEQ` (the default, 0), `EQ`, `AND`, `NOR`; `FLUSH` may be added.
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
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

flags! {
    /// Flags of [`Stream::write_value_32`] (`CUstreamWriteValue_flags`).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct StreamWriteValueFlags: u32 {
        /// `CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER`: skip the memory barrier before the write.
        const NO_MEMORY_BARRIER = 0x1;
    }
}

/// The most operations one [`Stream::batch_mem_ops`] call takes.
pub const MAX_BATCH_MEM_OPS: usize = 256;

/// One operation of [`Stream::batch_mem_ops`] (`CUstreamBatchMemOpParams`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamMemOp {
    /// Wait until the 32-bit value at `address` satisfies the comparison with `value`.
    WaitValue32 {
        /// A 4-byte-aligned device address.
        address: sys::CUdeviceptr,
        /// The value compared with.
        value: u32,
        /// The comparison.
        flags: StreamWaitValueFlags,
    },
    /// Wait until the 64-bit value at `address` satisfies the comparison with `value`.
    WaitValue64 {
        /// An 8-byte-aligned device address.
        address: sys::CUdeviceptr,
        /// The value compared with.
        value: u64,
        /// The comparison.
        flags: StreamWaitValueFlags,
    },
    /// Write a 32-bit value to `address`.
    WriteValue32 {
        /// A 4-byte-aligned device address.
        address: sys::CUdeviceptr,
        /// The value written.
        value: u32,
        /// Barrier behaviour.
        flags: StreamWriteValueFlags,
    },
    /// Write a 64-bit value to `address`.
    WriteValue64 {
        /// An 8-byte-aligned device address.
        address: sys::CUdeviceptr,
        /// The value written.
        value: u64,
        /// Barrier behaviour.
        flags: StreamWriteValueFlags,
    },
    /// Flush remote (RDMA) writes before later operations.
    FlushRemoteWrites,
    /// A memory barrier over the whole system (`true`) or the GPU only (`false`).
    Barrier {
        /// `CU_STREAM_MEMORY_BARRIER_TYPE_SYS` when true, `_GPU` when false.
        system: bool,
    },
}

impl StreamMemOp {
    pub(crate) fn to_raw(self) -> sys::CUstreamBatchMemOpParams {
        use sys::CUstreamBatchMemOpType as T;
        // SAFETY: plain C unions; all zeroes is a valid value.
        let mut p: sys::CUstreamBatchMemOpParams = unsafe { std::mem::zeroed() };
        match self {
            StreamMemOp::WaitValue32 { address, value, flags } => {
                p.waitValue.operation = T::CU_STREAM_MEM_OP_WAIT_VALUE_32;
                p.waitValue.address = address;
                p.waitValue.__bindgen_anon_1.value = value;
                p.waitValue.flags = flags.bits();
            }
            StreamMemOp::WaitValue64 { address, value, flags } => {
                p.waitValue.operation = T::CU_STREAM_MEM_OP_WAIT_VALUE_64;
                p.waitValue.address = address;
                p.waitValue.__bindgen_anon_1.value64 = value;
                p.waitValue.flags = flags.bits();
            }
            StreamMemOp::WriteValue32 { address, value, flags } => {
                p.writeValue.operation = T::CU_STREAM_MEM_OP_WRITE_VALUE_32;
                p.writeValue.address = address;
                p.writeValue.__bindgen_anon_1.value = value;
                p.writeValue.flags = flags.bits();
            }
            StreamMemOp::WriteValue64 { address, value, flags } => {
                p.writeValue.operation = T::CU_STREAM_MEM_OP_WRITE_VALUE_64;
                p.writeValue.address = address;
                p.writeValue.__bindgen_anon_1.value64 = value;
                p.writeValue.flags = flags.bits();
            }
            StreamMemOp::FlushRemoteWrites => {
                p.flushRemoteWrites.operation = T::CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES;
            }
            StreamMemOp::Barrier { system } => {
                p.memoryBarrier.operation = T::CU_STREAM_MEM_OP_BARRIER;
                p.memoryBarrier.flags = if system {
                    sys::CUstreamMemoryBarrier_flags::CU_STREAM_MEMORY_BARRIER_TYPE_SYS.0
                } else {
                    sys::CUstreamMemoryBarrier_flags::CU_STREAM_MEMORY_BARRIER_TYPE_GPU.0
                };
            }
        }
        p
    }

    /// The operation a raw `CUstreamBatchMemOpParams` holds, as the driver reads it back;
    /// an operation kind this crate does not know is an [`Error::InvalidArgument`].
    pub(crate) fn from_raw(raw: &sys::CUstreamBatchMemOpParams) -> Result<StreamMemOp> {
        use sys::CUstreamBatchMemOpType as T;
        // SAFETY: every member of the union starts with the operation; the member read after
        // it is the one the operation names, all plain integers.
        let op = unsafe {
            match raw.operation {
                T::CU_STREAM_MEM_OP_WAIT_VALUE_32 => StreamMemOp::WaitValue32 {
                    address: raw.waitValue.address,
                    value: raw.waitValue.__bindgen_anon_1.value,
                    flags: StreamWaitValueFlags::from_bits_retain(raw.waitValue.flags),
                },
                T::CU_STREAM_MEM_OP_WAIT_VALUE_64 => StreamMemOp::WaitValue64 {
                    address: raw.waitValue.address,
                    value: raw.waitValue.__bindgen_anon_1.value64,
                    flags: StreamWaitValueFlags::from_bits_retain(raw.waitValue.flags),
                },
                T::CU_STREAM_MEM_OP_WRITE_VALUE_32 => StreamMemOp::WriteValue32 {
                    address: raw.writeValue.address,
                    value: raw.writeValue.__bindgen_anon_1.value,
                    flags: StreamWriteValueFlags::from_bits_retain(raw.writeValue.flags),
                },
                T::CU_STREAM_MEM_OP_WRITE_VALUE_64 => StreamMemOp::WriteValue64 {
                    address: raw.writeValue.address,
                    value: raw.writeValue.__bindgen_anon_1.value64,
                    flags: StreamWriteValueFlags::from_bits_retain(raw.writeValue.flags),
                },
                T::CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES => StreamMemOp::FlushRemoteWrites,
                T::CU_STREAM_MEM_OP_BARRIER => StreamMemOp::Barrier {
                    system: raw.memoryBarrier.flags
                        == sys::CUstreamMemoryBarrier_flags::CU_STREAM_MEMORY_BARRIER_TYPE_SYS.0,
                },
                other => {
                    return Err(Error::invalid(
                        "StreamMemOp::from_raw",
                        format!("unknown stream memory operation {}", other.0),
                    ));
                }
            }
        };
        Ok(op)
    }
}

impl Stream {
    /// Makes later work on the stream wait until the 32-bit value at `addr` satisfies the
    /// comparison with `value` (by default `*addr >= value`, wrapping)
    /// ([`cuStreamWaitValue32`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEMOP.html)).
    /// Check [`crate::device::Device::can_use_stream_mem_ops_v1`] or newer equivalents for support.
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
        unsafe { driver!(cuStreamWaitValue32(self.as_raw(), addr, value, flags.bits())) }
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
        unsafe { driver!(cuStreamWaitValue64(self.as_raw(), addr, value, flags.bits())) }
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
        unsafe { driver!(cuStreamWriteValue32(self.as_raw(), addr, value, flags.bits())) }
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
        unsafe { driver!(cuStreamWriteValue64(self.as_raw(), addr, value, flags.bits())) }
    }

    /// Queues a batch of memory operations in one call; at most [`MAX_BATCH_MEM_OPS`]
    /// ([`cuStreamBatchMemOp`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEMOP.html)).
    /// The operations are built on the stack: nothing is allocated.
    ///
    /// No operations, or more than [`MAX_BATCH_MEM_OPS`], is an
    /// [`Error::InvalidArgument`]; a device without stream
    /// memory operations fails with the driver's status.
    ///
    /// # Safety
    ///
    /// Every address must satisfy the contract of [`Stream::wait_value_32`] or
    /// [`Stream::write_value_32`] (or their 64-bit forms) for its operation.
    pub unsafe fn batch_mem_ops(&self, ops: &[StreamMemOp]) -> Result<()> {
        if ops.is_empty() || ops.len() > MAX_BATCH_MEM_OPS {
            return Err(crate::error::Error::invalid(
                "Stream::batch_mem_ops",
                format!("{} operations; give between 1 and {MAX_BATCH_MEM_OPS}", ops.len()),
            ));
        }
        // SAFETY: plain C unions; all zeroes is a valid value.
        let mut raw: [sys::CUstreamBatchMemOpParams; MAX_BATCH_MEM_OPS] = unsafe { std::mem::zeroed() };
        for (slot, op) in raw.iter_mut().zip(ops) {
            *slot = op.to_raw();
        }
        // The length was checked against MAX_BATCH_MEM_OPS above.
        let count = ops.len() as u32;
        // SAFETY: the caller guarantees the addresses; `count` initialised operations.
        unsafe { driver!(cuStreamBatchMemOp(self.as_raw(), count, raw.as_mut_ptr(), 0)) }
    }
}
