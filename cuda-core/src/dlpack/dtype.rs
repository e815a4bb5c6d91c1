//! The mapping from Rust element types to DLPack data types.

#![forbid(unsafe_code)]

use super::ffi::{DLDataType, DLDataTypeCode};
use bytemuck::Pod;

/// An element type that DLPack can describe: the [`DLDataType`] a tensor of `Self` carries.
///
/// Implemented for `i8`..`i64`, `u8`..`u64`, `f32` and `f64`; with the `half` feature for
/// `half::f16` (`kDLFloat`, 16 bits) and `half::bf16` (`kDLBfloat`); with the `nccl` feature for
/// the 8-bit floats [`Float8E4M3`](crate::nccl::Float8E4M3) (`kDLFloat8_e4m3fn`, PyTorch's
/// `float8_e4m3fn`) and [`Float8E5M2`](crate::nccl::Float8E5M2) (`kDLFloat8_e5m2`). `bool` is
/// left out because it is not [`Pod`] (not every byte is a valid `bool`). A type of your own (a
/// `#[repr(transparent)]` wrapper, a vector type with `lanes > 1`) may implement it too.
///
/// `DTYPE.bits * DTYPE.lanes` must be the size of `Self` in bits. Nothing unsafe follows from a
/// wrong implementation: imports check the size and refuse a mismatch, and any bytes are a valid
/// `Pod` value.
pub trait DlpackDtype: Pod {
    /// The data type of one element.
    const DTYPE: DLDataType;
}

macro_rules! dtypes {
    ($($t:ty => $code:ident),* $(,)?) => {$(
        impl DlpackDtype for $t {
            const DTYPE: DLDataType =
                DLDataType::new(DLDataTypeCode::$code, (std::mem::size_of::<$t>() * 8) as u8, 1);
        }
    )*};
}

dtypes! {
    i8 => kDLInt, i16 => kDLInt, i32 => kDLInt, i64 => kDLInt,
    u8 => kDLUInt, u16 => kDLUInt, u32 => kDLUInt, u64 => kDLUInt,
    f32 => kDLFloat, f64 => kDLFloat,
}

#[cfg(feature = "half")]
dtypes! { half::f16 => kDLFloat, half::bf16 => kDLBfloat }

#[cfg(feature = "nccl")]
dtypes! { crate::nccl::Float8E4M3 => kDLFloat8_e4m3fn, crate::nccl::Float8E5M2 => kDLFloat8_e5m2 }

/// Whether `T`'s declared data type has exactly `T`'s size.
pub(crate) fn size_matches<T: DlpackDtype>() -> bool {
    u64::from(T::DTYPE.size_in_bits()) == (std::mem::size_of::<T>() as u64) * 8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_element_type_declares_its_own_size() {
        assert!(size_matches::<i16>() && size_matches::<u64>() && size_matches::<f64>());
        #[cfg(feature = "half")]
        {
            assert!(size_matches::<half::f16>() && size_matches::<half::bf16>());
            assert_eq!(half::bf16::DTYPE.code, DLDataTypeCode::kDLBfloat.0);
            assert_ne!(half::f16::DTYPE, half::bf16::DTYPE);
        }
        #[cfg(feature = "nccl")]
        {
            use crate::nccl::{Float8E4M3, Float8E5M2};
            assert!(size_matches::<Float8E4M3>() && size_matches::<Float8E5M2>());
            assert_eq!(Float8E4M3::DTYPE.code, DLDataTypeCode::kDLFloat8_e4m3fn.0);
            assert_ne!(Float8E4M3::DTYPE, u8::DTYPE);
        }
    }
}
