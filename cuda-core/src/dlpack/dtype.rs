//! The mapping from Rust element types to DLPack data types.

use super::ffi::{DLDataType, DLDataTypeCode};
use bytemuck::Pod;

/// An element type that DLPack can describe: the [`DLDataType`] a tensor of `Self` carries.
///
/// Implemented for `i8`..`i64`, `u8`..`u64`, `f32` and `f64`. `bool` is left out because it is
/// not [`Pod`] (not every byte is a valid `bool`). Other types can be added where the crate
/// defining them is known here, e.g. 16-bit floats as `DLDataType::new(kDLFloat, 16, 1)` and
/// bfloat16 as `DLDataType::new(kDLBfloat, 16, 1)`; a type of your own (a `#[repr(transparent)]`
/// wrapper, a vector type with `lanes > 1`) may implement it too.
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

/// Whether `T`'s declared data type has exactly `T`'s size.
pub(crate) fn size_matches<T: DlpackDtype>() -> bool {
    u64::from(T::DTYPE.size_in_bits()) == (std::mem::size_of::<T>() as u64) * 8
}
