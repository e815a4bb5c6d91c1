//! Which atomic operations work on memory shared with the host or with a peer device
//! ([`Device::host_atomic_capabilities`], [`Device::p2p_atomic_capabilities`], CUDA 13.0).

use super::Device;
use crate::error::{Error, Result};
use cuhost_driver_sys as sys;

/// An atomic operation (`CUatomicOperation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    /// `CU_ATOMIC_OPERATION_INTEGER_ADD`.
    IntegerAdd,
    /// `CU_ATOMIC_OPERATION_INTEGER_MIN`.
    IntegerMin,
    /// `CU_ATOMIC_OPERATION_INTEGER_MAX`.
    IntegerMax,
    /// `CU_ATOMIC_OPERATION_INTEGER_INCREMENT`.
    IntegerIncrement,
    /// `CU_ATOMIC_OPERATION_INTEGER_DECREMENT`.
    IntegerDecrement,
    /// `CU_ATOMIC_OPERATION_AND`.
    And,
    /// `CU_ATOMIC_OPERATION_OR`.
    Or,
    /// `CU_ATOMIC_OPERATION_XOR`.
    Xor,
    /// `CU_ATOMIC_OPERATION_EXCHANGE`.
    Exchange,
    /// `CU_ATOMIC_OPERATION_CAS`: compare and swap.
    CompareAndSwap,
    /// `CU_ATOMIC_OPERATION_FLOAT_ADD`.
    FloatAdd,
    /// `CU_ATOMIC_OPERATION_FLOAT_MIN`.
    FloatMin,
    /// `CU_ATOMIC_OPERATION_FLOAT_MAX`.
    FloatMax,
}

impl AtomicOp {
    /// Every operation, in the header's order.
    pub const ALL: [AtomicOp; 13] = [
        AtomicOp::IntegerAdd,
        AtomicOp::IntegerMin,
        AtomicOp::IntegerMax,
        AtomicOp::IntegerIncrement,
        AtomicOp::IntegerDecrement,
        AtomicOp::And,
        AtomicOp::Or,
        AtomicOp::Xor,
        AtomicOp::Exchange,
        AtomicOp::CompareAndSwap,
        AtomicOp::FloatAdd,
        AtomicOp::FloatMin,
        AtomicOp::FloatMax,
    ];

    /// The raw `CUatomicOperation`.
    pub fn as_raw(self) -> sys::CUatomicOperation {
        use sys::CUatomicOperation as O;
        match self {
            AtomicOp::IntegerAdd => O::CU_ATOMIC_OPERATION_INTEGER_ADD,
            AtomicOp::IntegerMin => O::CU_ATOMIC_OPERATION_INTEGER_MIN,
            AtomicOp::IntegerMax => O::CU_ATOMIC_OPERATION_INTEGER_MAX,
            AtomicOp::IntegerIncrement => O::CU_ATOMIC_OPERATION_INTEGER_INCREMENT,
            AtomicOp::IntegerDecrement => O::CU_ATOMIC_OPERATION_INTEGER_DECREMENT,
            AtomicOp::And => O::CU_ATOMIC_OPERATION_AND,
            AtomicOp::Or => O::CU_ATOMIC_OPERATION_OR,
            AtomicOp::Xor => O::CU_ATOMIC_OPERATION_XOR,
            AtomicOp::Exchange => O::CU_ATOMIC_OPERATION_EXCHANGE,
            AtomicOp::CompareAndSwap => O::CU_ATOMIC_OPERATION_CAS,
            AtomicOp::FloatAdd => O::CU_ATOMIC_OPERATION_FLOAT_ADD,
            AtomicOp::FloatMin => O::CU_ATOMIC_OPERATION_FLOAT_MIN,
            AtomicOp::FloatMax => O::CU_ATOMIC_OPERATION_FLOAT_MAX,
        }
    }
}

crate::flags::flags! {
    /// How an atomic operation is supported (`CUatomicOperationCapability`); empty when it is
    /// not.
    #[derive(Clone, Copy, PartialEq, Eq, Hash)]
    pub struct AtomicCaps: u32 {
        /// On signed integers.
        const SIGNED = 1 << 0;
        /// On unsigned integers.
        const UNSIGNED = 1 << 1;
        /// As a reduction (no value returned).
        const REDUCTION = 1 << 2;
        /// On 32-bit scalars.
        const SCALAR_32 = 1 << 3;
        /// On 64-bit scalars.
        const SCALAR_64 = 1 << 4;
        /// On 128-bit scalars.
        const SCALAR_128 = 1 << 5;
        /// On vectors of four 32-bit values.
        const VECTOR_32X4 = 1 << 6;
    }
}

/// The raw operations of `ops`, and their count as the call takes it.
fn raw_ops(operation: &'static str, ops: &[AtomicOp]) -> Result<(Vec<sys::CUatomicOperation>, u32)> {
    let count = u32::try_from(ops.len()).map_err(|_| Error::invalid(operation, "too many operations"))?;
    if count == 0 {
        return Err(Error::invalid(operation, "no operation asked about; give at least one"));
    }
    Ok((ops.iter().map(|o| o.as_raw()).collect(), count))
}

impl Device {
    /// How each of `ops` is supported on memory this device shares with the host, in the
    /// order asked
    /// ([`cuDeviceGetHostAtomicCapabilities`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html),
    /// CUDA 13.0).
    ///
    /// An empty `ops` is an [`Error::InvalidArgument`]; otherwise it fails with the driver's
    /// status, or [`Error::Load`] on a driver older than 13.0.
    pub fn host_atomic_capabilities(&self, ops: &[AtomicOp]) -> Result<Vec<AtomicCaps>> {
        let (raw, count) = raw_ops("Device::host_atomic_capabilities", ops)?;
        let mut caps = vec![0u32; raw.len()];
        // SAFETY: both arrays hold `count` entries.
        unsafe {
            driver!(cuDeviceGetHostAtomicCapabilities(caps.as_mut_ptr(), raw.as_ptr(), count, self.as_raw()))
        }?;
        Ok(caps.into_iter().map(AtomicCaps::from_bits_retain).collect())
    }

    /// How each of `ops` is supported on memory of `peer` accessed from this device, in the
    /// order asked
    /// ([`cuDeviceGetP2PAtomicCapabilities`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PEER__ACCESS.html),
    /// CUDA 13.0).
    ///
    /// Fails as [`host_atomic_capabilities`](Self::host_atomic_capabilities) does.
    pub fn p2p_atomic_capabilities(&self, peer: &Device, ops: &[AtomicOp]) -> Result<Vec<AtomicCaps>> {
        let (raw, count) = raw_ops("Device::p2p_atomic_capabilities", ops)?;
        let mut caps = vec![0u32; raw.len()];
        // SAFETY: both arrays hold `count` entries.
        unsafe {
            driver!(cuDeviceGetP2PAtomicCapabilities(
                caps.as_mut_ptr(),
                raw.as_ptr(),
                count,
                self.as_raw(),
                peer.as_raw(),
            ))
        }?;
        Ok(caps.into_iter().map(AtomicCaps::from_bits_retain).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_map_to_distinct_raw_values_in_the_header_order() {
        for (i, op) in AtomicOp::ALL.iter().enumerate() {
            assert_eq!(op.as_raw().0 as usize, i, "{op:?}");
        }
        assert!(matches!(raw_ops("t", &[]), Err(Error::InvalidArgument { .. })));
    }
}
