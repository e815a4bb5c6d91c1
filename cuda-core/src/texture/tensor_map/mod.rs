//! Tensor maps: the 128-byte descriptors through which the Hopper copy engine (TMA,
//! `cp.async.bulk.tensor`) moves tiles between global and shared memory.
//!
//! See [Tensor Map Object Management](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TENSOR__MEMORY.html).
//! A [`TensorMapBuilder`] describes the tensor (data type, dimensions, strides) and encodes a
//! [`TensorMap`] in tiled, im2col or wide im2col mode, after checking every requirement the
//! driver documents, so that a mistake is an [`Error::InvalidArgument`](crate::error::Error) naming
//! the field rather than a bare `CUDA_ERROR_INVALID_VALUE`.

mod builder;
mod checks;
#[cfg(test)]
mod tests;

pub use builder::TensorMapBuilder;

use super::raw_enum;
use crate::error::Result;
use crate::launch::KernelArg;
use crate::memory::{DeviceView, Track};
use crate::stream::Stream;
use bytemuck::Pod;
use cuhost_driver_sys as sys;
use std::ffi::c_void;
use std::marker::PhantomData;

raw_enum! {
    /// The type of the tensor's elements (`CUtensorMapDataType`).
    TensorDataType: sys::CUtensorMapDataType {
        /// `CU_TENSOR_MAP_DATA_TYPE_UINT8`.
        UInt8 = CU_TENSOR_MAP_DATA_TYPE_UINT8,
        /// `CU_TENSOR_MAP_DATA_TYPE_UINT16`.
        UInt16 = CU_TENSOR_MAP_DATA_TYPE_UINT16,
        /// `CU_TENSOR_MAP_DATA_TYPE_UINT32`.
        UInt32 = CU_TENSOR_MAP_DATA_TYPE_UINT32,
        /// `CU_TENSOR_MAP_DATA_TYPE_INT32`.
        Int32 = CU_TENSOR_MAP_DATA_TYPE_INT32,
        /// `CU_TENSOR_MAP_DATA_TYPE_UINT64`.
        UInt64 = CU_TENSOR_MAP_DATA_TYPE_UINT64,
        /// `CU_TENSOR_MAP_DATA_TYPE_INT64`.
        Int64 = CU_TENSOR_MAP_DATA_TYPE_INT64,
        /// `CU_TENSOR_MAP_DATA_TYPE_FLOAT16`.
        Float16 = CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        /// `CU_TENSOR_MAP_DATA_TYPE_FLOAT32`.
        Float32 = CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        /// `CU_TENSOR_MAP_DATA_TYPE_FLOAT64`.
        Float64 = CU_TENSOR_MAP_DATA_TYPE_FLOAT64,
        /// `CU_TENSOR_MAP_DATA_TYPE_BFLOAT16`.
        BFloat16 = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        /// `CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ`: f32, denormals flushed to zero.
        Float32Ftz = CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ,
        /// `CU_TENSOR_MAP_DATA_TYPE_TFLOAT32`: f32 rounded to TF32.
        TFloat32 = CU_TENSOR_MAP_DATA_TYPE_TFLOAT32,
        /// `CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ`: TF32, denormals flushed to zero.
        TFloat32Ftz = CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ,
        /// `CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B`: 16 packed 4-bit values in 8 bytes.
        Packed16U4Align8B = CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B,
        /// `CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B`: 16 packed 4-bit values in 16 bytes.
        Packed16U4Align16B = CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B,
        /// `CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B`: 16 packed 6-bit values in 16 bytes.
        Packed16U6Align16B = CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B,
    }
}

impl TensorDataType {
    /// Bytes of one element, for the types that are not packed.
    pub const fn element_bytes(self) -> Option<usize> {
        use TensorDataType::*;
        match self {
            UInt8 => Some(1),
            UInt16 | Float16 | BFloat16 => Some(2),
            UInt32 | Int32 | Float32 | Float32Ftz | TFloat32 | TFloat32Ftz => Some(4),
            UInt64 | Int64 | Float64 => Some(8),
            Packed16U4Align8B | Packed16U4Align16B | Packed16U6Align16B => None,
        }
    }

    /// Whether the elements are floating point (the NaN out-of-bounds fill needs them).
    pub const fn is_float(self) -> bool {
        use TensorDataType::*;
        matches!(self, Float16 | Float32 | Float64 | BFloat16 | Float32Ftz | TFloat32 | TFloat32Ftz)
    }

    /// Whether the elements are packed in 16-byte groups (which need 32-byte alignment).
    pub(crate) const fn is_packed_16b(self) -> bool {
        matches!(self, TensorDataType::Packed16U4Align16B | TensorDataType::Packed16U6Align16B)
    }

    /// Bytes taken by `count` consecutive elements.
    pub(crate) const fn bytes_of(self, count: u64) -> u64 {
        match self.element_bytes() {
            Some(b) => count * b as u64,
            None => {
                let group = if matches!(self, TensorDataType::Packed16U4Align8B) { 8 } else { 16 };
                count.div_ceil(16) * group
            }
        }
    }
}

raw_enum! {
    /// Interleaved layouts, for tensors whose innermost dimension is split into 16- or 32-byte
    /// chunks (`CUtensorMapInterleave`).
    Interleave: sys::CUtensorMapInterleave {
        /// `CU_TENSOR_MAP_INTERLEAVE_NONE`.
        None = CU_TENSOR_MAP_INTERLEAVE_NONE,
        /// `CU_TENSOR_MAP_INTERLEAVE_16B`.
        Bytes16 = CU_TENSOR_MAP_INTERLEAVE_16B,
        /// `CU_TENSOR_MAP_INTERLEAVE_32B`.
        Bytes32 = CU_TENSOR_MAP_INTERLEAVE_32B,
    }
}

raw_enum! {
    /// How the tile is laid out in shared memory to avoid bank conflicts
    /// (`CUtensorMapSwizzle`).
    Swizzle: sys::CUtensorMapSwizzle {
        /// `CU_TENSOR_MAP_SWIZZLE_NONE`: rows as they are.
        None = CU_TENSOR_MAP_SWIZZLE_NONE,
        /// `CU_TENSOR_MAP_SWIZZLE_32B`: 16-byte chunks permuted within 32-byte spans.
        Bytes32 = CU_TENSOR_MAP_SWIZZLE_32B,
        /// `CU_TENSOR_MAP_SWIZZLE_64B`: 16-byte chunks permuted within 64-byte spans.
        Bytes64 = CU_TENSOR_MAP_SWIZZLE_64B,
        /// `CU_TENSOR_MAP_SWIZZLE_128B`: 16-byte chunks permuted within 128-byte spans.
        Bytes128 = CU_TENSOR_MAP_SWIZZLE_128B,
        /// `CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B`: 128-byte spans of 32-byte atoms.
        Bytes128Atom32B = CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B,
        /// `CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B_FLIP_8B`: as above, 8-byte halves flipped.
        Bytes128Atom32BFlip8B = CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B_FLIP_8B,
        /// `CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B`: 128-byte spans of 64-byte atoms.
        Bytes128Atom64B = CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B,
    }
}

impl Swizzle {
    /// The span in bytes the inner dimension of the box must fit in, or `None` without
    /// swizzling.
    pub const fn span(self) -> Option<u64> {
        match self {
            Swizzle::None => None,
            Swizzle::Bytes32 => Some(32),
            Swizzle::Bytes64 => Some(64),
            _ => Some(128),
        }
    }
}

raw_enum! {
    /// How far the L2 cache fetches beyond each request (`CUtensorMapL2promotion`).
    L2Promotion: sys::CUtensorMapL2promotion {
        /// `CU_TENSOR_MAP_L2_PROMOTION_NONE`.
        None = CU_TENSOR_MAP_L2_PROMOTION_NONE,
        /// `CU_TENSOR_MAP_L2_PROMOTION_L2_64B`.
        Bytes64 = CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
        /// `CU_TENSOR_MAP_L2_PROMOTION_L2_128B`.
        Bytes128 = CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        /// `CU_TENSOR_MAP_L2_PROMOTION_L2_256B`.
        Bytes256 = CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
    }
}

raw_enum! {
    /// What out-of-bounds elements of a tile read as (`CUtensorMapFloatOOBfill`).
    OobFill: sys::CUtensorMapFloatOOBfill {
        /// `CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE`: zeros.
        Zero = CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        /// `CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA`: a NaN that FMA treats as zero
        /// (floating-point data types only).
        NanRequestZeroFma = CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA,
    }
}

raw_enum! {
    /// The wide im2col mode: how many elements each column loads along W
    /// (`CUtensorMapIm2ColWideMode`).
    Im2colWideMode: sys::CUtensorMapIm2ColWideMode {
        /// `CU_TENSOR_MAP_IM2COL_WIDE_MODE_W`: 32 elements.
        W = CU_TENSOR_MAP_IM2COL_WIDE_MODE_W,
        /// `CU_TENSOR_MAP_IM2COL_WIDE_MODE_W128`: 128 elements.
        W128 = CU_TENSOR_MAP_IM2COL_WIDE_MODE_W128,
    }
}

/// An encoded tensor map (`CUtensorMap`): 128 opaque bytes, aligned as the driver needs,
/// describing a tensor in device memory borrowed for `'a`.
///
/// It passes to a kernel by value (`&map` in the argument tuple): the kernel declares the
/// parameter as `const __grid_constant__ CUtensorMap` in CUDA C++, or
/// `.param .align 64 .b8 name[128]` in PTX, and names the parameter (or its generic address)
/// as the tensor map operand of `cp.async.bulk.tensor`. Tensor maps work on devices of compute
/// capability 9.0 and later; encoding one needs no device.
#[derive(Clone, Copy)]
pub struct TensorMap<'a> {
    raw: sys::CUtensorMap,
    /// Bytes from the global address to the end of the last element described.
    footprint: u64,
    /// The alignment the global address needs (16 or 32 bytes).
    alignment: u64,
    /// The owner of the memory, for launches on other streams to note.
    track: Option<Track<'a>>,
    _memory: PhantomData<&'a ()>,
}

impl std::fmt::Debug for TensorMap<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorMap").field("footprint", &self.footprint).finish_non_exhaustive()
    }
}

impl<'a> TensorMap<'a> {
    /// The raw descriptor.
    pub fn as_raw(&self) -> &sys::CUtensorMap {
        &self.raw
    }

    /// Bytes of device memory the map reaches, from its global address.
    pub fn footprint(&self) -> u64 {
        self.footprint
    }

    /// The same map over the tensor at `view` instead, which must be as large and as aligned
    /// as the one it was encoded for
    /// ([`cuTensorMapReplaceAddress`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TENSOR__MEMORY.html)).
    pub fn replace_address<'b, T: Pod>(&self, view: DeviceView<'b, T>) -> Result<TensorMap<'b>> {
        const OP: &str = "TensorMap::replace_address";
        checks::global_address(OP, view.as_raw(), self.alignment)?;
        checks::fits(OP, self.footprint, view.size_in_bytes() as u64)?;
        let mut map = TensorMap {
            raw: self.raw,
            footprint: self.footprint,
            alignment: self.alignment,
            track: view.track,
            _memory: PhantomData,
        };
        // SAFETY: the map is a valid encoded descriptor, aligned as its type says; the address
        // is checked above.
        unsafe { driver!(cuTensorMapReplaceAddress(&mut map.raw, view.as_raw() as *mut c_void)) }?;
        Ok(map)
    }

    pub(crate) fn from_encoded(
        raw: sys::CUtensorMap,
        footprint: u64,
        alignment: u64,
        track: Option<Track<'a>>,
    ) -> TensorMap<'a> {
        TensorMap { raw, footprint, alignment, track, _memory: PhantomData }
    }
}

// SAFETY: the pointer is to the 128 bytes of the borrowed map, which do not change while it
// is borrowed.
unsafe impl KernelArg for &TensorMap<'_> {
    #[inline]
    fn arg_ptr(&self) -> *mut c_void {
        (&self.raw as *const sys::CUtensorMap).cast_mut().cast()
    }

    #[inline]
    fn arg_size(&self) -> usize {
        std::mem::size_of::<sys::CUtensorMap>()
    }

    #[inline]
    fn note_launch(&self, stream: &Stream) -> Result<()> {
        self.track.map_or(Ok(()), |t| t.note_launch(stream))
    }
}

#[cfg(test)]
mod layout_tests {
    use super::*;

    #[test]
    fn the_descriptor_is_128_bytes_aligned_for_the_driver() {
        assert_eq!(std::mem::size_of::<sys::CUtensorMap>(), 128);
        assert!(std::mem::align_of::<sys::CUtensorMap>() >= 64);
        let map = TensorMap::from_encoded(sys::CUtensorMap::default(), 0, 16, None);
        let args = (&map,);
        use crate::launch::KernelArgs;
        assert_eq!(args.sizes(), [128]);
        assert_eq!(args.pointers()[0] as usize % 64, 0);
    }

    #[test]
    fn element_sizes_and_packed_groups() {
        assert_eq!(TensorDataType::Float32.element_bytes(), Some(4));
        assert_eq!(TensorDataType::BFloat16.bytes_of(8), 16);
        assert_eq!(TensorDataType::Packed16U4Align8B.bytes_of(17), 16);
        assert_eq!(TensorDataType::Packed16U6Align16B.bytes_of(16), 16);
        assert!(!TensorDataType::Int32.is_float() && TensorDataType::TFloat32.is_float());
        assert_eq!(Swizzle::Bytes128Atom64B.span(), Some(128));
        assert_eq!(
            Swizzle::try_from(sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_64B).unwrap(),
            Swizzle::Bytes64
        );
    }
}
