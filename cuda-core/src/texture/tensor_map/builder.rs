//! [`TensorMapBuilder`]: describes a tensor in device memory and encodes a [`TensorMap`] over
//! it in tiled, im2col or wide im2col mode.

use super::checks::{self, Layout};
use super::{Im2colWideMode, Interleave, L2Promotion, OobFill, Swizzle, TensorDataType, TensorMap};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::memory::{DeviceView, Track};
use bytemuck::Pod;
use cuhost_driver_sys as sys;
use std::ffi::c_void;

/// The most dimensions a tensor map has.
const MAX_RANK: usize = 5;

/// Describes a tensor in device memory: its data type, dimensions (innermost first) and
/// strides in bytes, and how tiles are laid out in shared memory; then encodes a
/// [`TensorMap`] with [`tiled`](Self::tiled), [`im2col`](Self::im2col) or
/// [`im2col_wide`](Self::im2col_wide), which check every documented requirement first.
///
/// ```no_run
/// use cuhost::texture::{Swizzle, TensorDataType, TensorMapBuilder};
/// # fn f(matrix: cuhost::DeviceView<'_, f32>) -> cuhost::Result<()> {
/// // A 256 × 128 row-major f32 matrix, loaded in 32 × 8 tiles with a 128-byte swizzle.
/// let map = TensorMapBuilder::new(matrix, TensorDataType::Float32)
///     .global_dims(&[128, 256])
///     .global_strides(&[128 * 4])
///     .swizzle(Swizzle::Bytes128)
///     .tiled(&[32, 8])?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct TensorMapBuilder<'a> {
    ctx: &'a Context,
    /// The owner of the memory, for launches on other streams to note.
    track: Option<Track<'a>>,
    address: u64,
    bytes: u64,
    element_size: usize,
    data_type: TensorDataType,
    global_dims: Vec<u64>,
    global_strides: Vec<u64>,
    element_strides: Option<Vec<u32>>,
    interleave: Interleave,
    swizzle: Swizzle,
    l2_promotion: L2Promotion,
    oob_fill: OobFill,
}

impl<'a> TensorMapBuilder<'a> {
    /// A tensor of `data_type` elements at `view`; its element type must have the data
    /// type's size (any type, for the packed data types). No dimensions yet; no interleave,
    /// swizzle or L2 promotion, out-of-bounds elements read as zero, element strides 1.
    pub fn new<T: Pod>(view: DeviceView<'a, T>, data_type: TensorDataType) -> TensorMapBuilder<'a> {
        TensorMapBuilder {
            ctx: view.context(),
            track: view.track,
            address: view.as_raw(),
            bytes: view.size_in_bytes() as u64,
            element_size: std::mem::size_of::<T>(),
            data_type,
            global_dims: Vec::new(),
            global_strides: Vec::new(),
            element_strides: None,
            interleave: Interleave::None,
            swizzle: Swizzle::None,
            l2_promotion: L2Promotion::None,
            oob_fill: OobFill::Zero,
        }
    }

    /// The extent of each dimension in elements, innermost first (1 to 5 of them).
    pub fn global_dims(mut self, dims: &[u64]) -> Self {
        self.global_dims = dims.to_vec();
        self
    }

    /// The stride in bytes of each dimension but the innermost (one fewer than the
    /// dimensions); multiples of 16 (32 with a 32-byte interleave), each at least the bytes of
    /// the dimensions inside it.
    pub fn global_strides(mut self, strides: &[u64]) -> Self {
        self.global_strides = strides.to_vec();
        self
    }

    /// The step, in elements, between the elements a tile takes in each dimension (1 to 8;
    /// all 1 unless set).
    pub fn element_strides(mut self, strides: &[u32]) -> Self {
        self.element_strides = Some(strides.to_vec());
        self
    }

    /// The interleaved layout.
    pub fn interleave(mut self, interleave: Interleave) -> Self {
        self.interleave = interleave;
        self
    }

    /// The shared-memory swizzle.
    pub fn swizzle(mut self, swizzle: Swizzle) -> Self {
        self.swizzle = swizzle;
        self
    }

    /// The L2 promotion.
    pub fn l2_promotion(mut self, l2_promotion: L2Promotion) -> Self {
        self.l2_promotion = l2_promotion;
        self
    }

    /// What out-of-bounds elements read as.
    pub fn oob_fill(mut self, oob_fill: OobFill) -> Self {
        self.oob_fill = oob_fill;
        self
    }

    /// The shared checks; returns the footprint, the address alignment and the element
    /// strides with their default filled in.
    fn layout(&self, operation: &'static str, min_rank: usize) -> Result<(u64, u64, [u32; MAX_RANK])> {
        let ones = [1u32; MAX_RANK];
        let rank = self.global_dims.len();
        let element_strides = match &self.element_strides {
            Some(s) => s.as_slice(),
            None => &ones[..rank.min(MAX_RANK)],
        };
        let (footprint, alignment) =
            self.as_layout(element_strides).check(operation, min_rank, self.bytes)?;
        let mut strides = ones;
        strides[..rank].copy_from_slice(element_strides);
        Ok((footprint, alignment, strides))
    }

    fn as_layout<'s>(&'s self, element_strides: &'s [u32]) -> Layout<'s> {
        Layout {
            data_type: self.data_type,
            element_size: self.element_size,
            address: self.address,
            global_dims: &self.global_dims,
            global_strides: &self.global_strides,
            element_strides,
            interleave: self.interleave,
            swizzle: self.swizzle,
            oob_fill: self.oob_fill,
        }
    }

    /// The global strides padded to a full array (the driver reads `rank - 1` of them, and
    /// needs a valid pointer even for rank 1).
    fn strides(&self) -> [u64; MAX_RANK] {
        let mut s = [0u64; MAX_RANK];
        s[..self.global_strides.len()].copy_from_slice(&self.global_strides);
        s
    }

    /// Encodes a tiled map whose tiles are `box_dims` elements (one per dimension, 1 to 256
    /// each; without interleave the innermost takes a multiple of 16 bytes and, with a
    /// swizzle, at most its span)
    /// ([`cuTensorMapEncodeTiled`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TENSOR__MEMORY.html)).
    ///
    /// Every requirement above, and those of the builder's dimensions, strides and address, is
    /// checked first: a mistake is an [`Error::InvalidArgument`] naming the field. What the
    /// driver still refuses comes back as its status.
    pub fn tiled(&self, box_dims: &[u32]) -> Result<TensorMap<'a>> {
        const OP: &str = "TensorMapBuilder::tiled";
        let (footprint, alignment, element_strides) = self.layout(OP, 1)?;
        let rank = self.global_dims.len();
        if box_dims.len() != rank {
            return Err(Error::invalid(
                OP,
                format!("`box_dims` has {} entries; the tensor has {rank} dimensions", box_dims.len()),
            ));
        }
        for (i, &b) in box_dims.iter().enumerate() {
            checks::in_range(OP, &format!("box_dims[{i}]"), b, 256)?;
        }
        let inner = self.data_type.bytes_of(u64::from(box_dims[0]));
        if self.interleave == Interleave::None && inner % 16 != 0 {
            return Err(Error::invalid(
                OP,
                format!(
                    "`box_dims[0]` spans {inner} bytes; without interleave the inner box dimension takes a multiple of 16 bytes"
                ),
            ));
        }
        self.as_layout(&element_strides[..rank]).check_swizzle(OP, "box_dims[0]", inner)?;
        let strides = self.strides();
        let mut raw = sys::CUtensorMap::default();
        self.ctx.enter()?;
        // SAFETY: every array holds at least `rank` (strides: `rank - 1`) values; `raw` is a
        // descriptor aligned as the driver needs; the memory is the view the builder borrows.
        unsafe {
            driver!(cuTensorMapEncodeTiled(
                &mut raw,
                self.data_type.as_raw(),
                rank as u32,
                self.address as *mut c_void,
                self.global_dims.as_ptr(),
                strides.as_ptr(),
                box_dims.as_ptr(),
                element_strides.as_ptr(),
                self.interleave.as_raw(),
                self.swizzle.as_raw(),
                self.l2_promotion.as_raw(),
                self.oob_fill.as_raw(),
            ))
        }?;
        Ok(TensorMap::from_encoded(raw, footprint, alignment, self.track))
    }

    /// Encodes an im2col map of a rank 3 to 5 tensor (channels innermost, then the spatial
    /// dimensions, then the batch): `lower_corner` and `upper_corner` bound the pixel box in
    /// each spatial dimension, and each load takes `pixels_per_column` (1 to 1024) pixels of
    /// `channels_per_pixel` (1 to 256) channels
    /// ([`cuTensorMapEncodeIm2col`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TENSOR__MEMORY.html)).
    pub fn im2col(
        &self,
        lower_corner: &[i32],
        upper_corner: &[i32],
        channels_per_pixel: u32,
        pixels_per_column: u32,
    ) -> Result<TensorMap<'a>> {
        const OP: &str = "TensorMapBuilder::im2col";
        let (footprint, alignment, element_strides) = self.layout(OP, 3)?;
        let rank = self.global_dims.len();
        checks::corner(OP, "lower_corner", rank, lower_corner)?;
        checks::corner(OP, "upper_corner", rank, upper_corner)?;
        checks::in_range(OP, "channels_per_pixel", channels_per_pixel, 256)?;
        checks::in_range(OP, "pixels_per_column", pixels_per_column, 1024)?;
        let inner = self.data_type.bytes_of(u64::from(channels_per_pixel));
        self.as_layout(&element_strides[..rank]).check_swizzle(OP, "channels_per_pixel", inner)?;
        let strides = self.strides();
        let mut raw = sys::CUtensorMap::default();
        self.ctx.enter()?;
        // SAFETY: as in `tiled`; the corners hold `rank - 2` values each.
        unsafe {
            driver!(cuTensorMapEncodeIm2col(
                &mut raw,
                self.data_type.as_raw(),
                rank as u32,
                self.address as *mut c_void,
                self.global_dims.as_ptr(),
                strides.as_ptr(),
                lower_corner.as_ptr(),
                upper_corner.as_ptr(),
                channels_per_pixel,
                pixels_per_column,
                element_strides.as_ptr(),
                self.interleave.as_raw(),
                self.swizzle.as_raw(),
                self.l2_promotion.as_raw(),
                self.oob_fill.as_raw(),
            ))
        }?;
        Ok(TensorMap::from_encoded(raw, footprint, alignment, self.track))
    }

    /// Encodes a wide im2col map, which loads along W only: the pixel box spans
    /// `lower_corner_width..upper_corner_width` in W
    /// ([`cuTensorMapEncodeIm2colWide`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TENSOR__MEMORY.html);
    /// CUDA 12.8 and later, compute capability 10.0 and later).
    ///
    /// A rank under 3, corners outside the range the rank allows, or counts out of range are
    /// an [`Error::InvalidArgument`] naming the field; a driver before 12.8 is an
    /// [`Error::Load`](crate::error::Error::Load), and a device before 10.0 is refused by the driver.
    pub fn im2col_wide(
        &self,
        lower_corner_width: i32,
        upper_corner_width: i32,
        channels_per_pixel: u32,
        pixels_per_column: u32,
        mode: Im2colWideMode,
    ) -> Result<TensorMap<'a>> {
        const OP: &str = "TensorMapBuilder::im2col_wide";
        let (footprint, alignment, element_strides) = self.layout(OP, 3)?;
        let rank = self.global_dims.len();
        let (low, high) = checks::corner_range(rank);
        for (field, v) in
            [("lower_corner_width", lower_corner_width), ("upper_corner_width", upper_corner_width)]
        {
            if !(low..=high).contains(&v) {
                return Err(Error::invalid(
                    OP,
                    format!("`{field}` is {v}; a rank-{rank} tensor takes {low} to {high}"),
                ));
            }
        }
        checks::in_range(OP, "channels_per_pixel", channels_per_pixel, 256)?;
        checks::in_range(OP, "pixels_per_column", pixels_per_column, 1024)?;
        let strides = self.strides();
        let mut raw = sys::CUtensorMap::default();
        self.ctx.enter()?;
        // SAFETY: as in `tiled`.
        unsafe {
            driver!(cuTensorMapEncodeIm2colWide(
                &mut raw,
                self.data_type.as_raw(),
                rank as u32,
                self.address as *mut c_void,
                self.global_dims.as_ptr(),
                strides.as_ptr(),
                lower_corner_width,
                upper_corner_width,
                channels_per_pixel,
                pixels_per_column,
                element_strides.as_ptr(),
                self.interleave.as_raw(),
                mode.as_raw(),
                self.swizzle.as_raw(),
                self.l2_promotion.as_raw(),
                self.oob_fill.as_raw(),
            ))
        }?;
        Ok(TensorMap::from_encoded(raw, footprint, alignment, self.track))
    }
}
