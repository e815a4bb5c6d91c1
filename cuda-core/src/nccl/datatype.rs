//! [`DataType`]: the element types NCCL reduces and moves, mapped to `ncclDataType_t`.

use super::version::since;
use bytemuck::{Pod, Zeroable};
use cuhost_nccl_sys as nccl;

mod sealed {
    pub trait Sealed {}
}

/// An element type NCCL knows
/// ([`ncclDataType_t`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/types.html#ncclDataType_t)):
/// `i8`, `u8`, `i32`, `u32`, `i64`, `u64`, `f32`, `f64`, the 8-bit floats [`Float8E4M3`] and
/// [`Float8E5M2`], and with the `half` feature `half::f16` and
/// `half::bf16`. Sealed: the list is NCCL's.
pub trait DataType: Pod + sealed::Sealed {
    /// The NCCL datatype.
    const RAW: nccl::ncclDataType_t;
    /// The first NCCL version (as its version code) that knows the datatype.
    const SINCE: i32;
}

macro_rules! data_types {
    ($($ty:ty => $raw:ident, $since:expr;)+) => {$(
        impl sealed::Sealed for $ty {}
        impl DataType for $ty {
            const RAW: nccl::ncclDataType_t = nccl::ncclDataType_t::$raw;
            const SINCE: i32 = $since;
        }
    )+};
}

data_types! {
    i8 => ncclInt8, 0;
    u8 => ncclUint8, 0;
    i32 => ncclInt32, 0;
    u32 => ncclUint32, 0;
    i64 => ncclInt64, 0;
    u64 => ncclUint64, 0;
    f32 => ncclFloat32, 0;
    f64 => ncclFloat64, 0;
    Float8E4M3 => ncclFloat8e4m3, since::FP8;
    Float8E5M2 => ncclFloat8e5m2, since::FP8;
}

#[cfg(feature = "half")]
data_types! {
    half::f16 => ncclFloat16, 0;
    half::bf16 => ncclBfloat16, since::AVG_BF16;
}

/// An 8-bit float with 4 exponent and 3 mantissa bits (OCP FP8 E4M3, `__nv_fp8_e4m3`), as its
/// bits. NCCL 2.24 and later reduce it on devices of compute capability 9.0 and newer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct Float8E4M3(pub u8);

/// An 8-bit float with 5 exponent and 2 mantissa bits (OCP FP8 E5M2, `__nv_fp8_e5m2`), as its
/// bits. NCCL 2.24 and later reduce it on devices of compute capability 9.0 and newer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct Float8E5M2(pub u8);

// SAFETY (both types): a transparent wrapper of one `u8`: no padding, every bit pattern valid,
// all zeroes a value.
unsafe impl Zeroable for Float8E4M3 {}
unsafe impl Pod for Float8E4M3 {}
unsafe impl Zeroable for Float8E5M2 {}
unsafe impl Pod for Float8E5M2 {}
