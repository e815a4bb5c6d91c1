//! The requirements `cuTensorMapEncode*` documents, checked before the call so that a mistake
//! names the field at fault.

#![forbid(unsafe_code)]

use super::{Interleave, OobFill, Swizzle, TensorDataType};
use crate::error::{Error, Result};

/// The largest extent of a global dimension.
const MAX_GLOBAL_DIM: u64 = 1 << 32;
/// Global strides are below this.
const STRIDE_LIMIT: u64 = 1 << 40;

/// The layout every mode shares, as the builder holds it.
pub(super) struct Layout<'s> {
    pub data_type: TensorDataType,
    pub element_size: usize,
    pub address: u64,
    pub global_dims: &'s [u64],
    pub global_strides: &'s [u64],
    pub element_strides: &'s [u32],
    pub interleave: Interleave,
    pub swizzle: Swizzle,
    pub oob_fill: OobFill,
}

fn fail(operation: &'static str, message: String) -> Error {
    Error::invalid(operation, message)
}

/// The alignment the global address and strides need.
pub(super) fn alignment(data_type: TensorDataType, interleave: Interleave) -> u64 {
    if interleave == Interleave::Bytes32 || data_type.is_packed_16b() { 32 } else { 16 }
}

pub(super) fn global_address(operation: &'static str, address: u64, alignment: u64) -> Result<()> {
    if address % alignment != 0 {
        return Err(fail(
            operation,
            format!("`global_address` {address:#x} is not {alignment}-byte aligned, as this layout needs"),
        ));
    }
    Ok(())
}

pub(super) fn fits(operation: &'static str, footprint: u64, bytes: u64) -> Result<()> {
    if footprint > bytes {
        return Err(fail(
            operation,
            format!(
                "`global_dims`: the tensor reaches {footprint} bytes past its address but the memory holds {bytes}; shrink the dimensions or strides"
            ),
        ));
    }
    Ok(())
}

impl Layout<'_> {
    /// Checks everything but the box; returns the footprint in bytes and the address
    /// alignment. `min_rank` is 1 for tiled maps and 3 for im2col.
    pub(super) fn check(
        &self,
        operation: &'static str,
        min_rank: usize,
        memory_bytes: u64,
    ) -> Result<(u64, u64)> {
        let rank = self.global_dims.len();
        let min_rank = if self.interleave == Interleave::None { min_rank } else { 3 };
        if !(min_rank..=5).contains(&rank) {
            return Err(fail(
                operation,
                format!(
                    "`global_dims` has {rank} dimensions; this layout takes {min_rank} to 5{}",
                    if self.interleave == Interleave::None {
                        ""
                    } else {
                        " (interleaved layouts need at least 3)"
                    }
                ),
            ));
        }
        if let Some(bytes) = self.data_type.element_bytes() {
            if bytes != self.element_size {
                return Err(fail(
                    operation,
                    format!(
                        "`data_type` {:?} has {bytes}-byte elements but the memory holds {}-byte elements",
                        self.data_type, self.element_size
                    ),
                ));
            }
        }
        let alignment = alignment(self.data_type, self.interleave);
        global_address(operation, self.address, alignment)?;
        for (i, &d) in self.global_dims.iter().enumerate() {
            if d == 0 || d > MAX_GLOBAL_DIM {
                return Err(fail(
                    operation,
                    format!("`global_dims[{i}]` is {d}; each dimension takes 1 to 2^32"),
                ));
            }
        }
        if self.global_strides.len() != rank - 1 {
            return Err(fail(
                operation,
                format!(
                    "`global_strides` has {} entries; a rank-{rank} tensor takes {} (the strides in bytes of every dimension but the first)",
                    self.global_strides.len(),
                    rank - 1
                ),
            ));
        }
        let mut below = self.data_type.bytes_of(self.global_dims[0]);
        let mut footprint = below;
        for (i, &s) in self.global_strides.iter().enumerate() {
            if s % alignment != 0 || s >= STRIDE_LIMIT {
                return Err(fail(
                    operation,
                    format!(
                        "`global_strides[{i}]` is {s} bytes; strides are multiples of {alignment} below 2^40"
                    ),
                ));
            }
            if s < below {
                return Err(fail(
                    operation,
                    format!(
                        "`global_strides[{i}]` is {s} bytes but the dimensions inside it take {below}; strides must grow so that rows do not overlap"
                    ),
                ));
            }
            let extent = self.global_dims[i + 1];
            below = s.saturating_mul(extent);
            footprint = footprint.saturating_add(s.saturating_mul(extent - 1));
        }
        if self.element_strides.len() != rank {
            return Err(fail(
                operation,
                format!(
                    "`element_strides` has {} entries; the tensor has {rank} dimensions",
                    self.element_strides.len()
                ),
            ));
        }
        for (i, &e) in self.element_strides.iter().enumerate() {
            if !(1..=8).contains(&e) {
                return Err(fail(
                    operation,
                    format!("`element_strides[{i}]` is {e}; element strides take 1 to 8"),
                ));
            }
        }
        if self.oob_fill == OobFill::NanRequestZeroFma && !self.data_type.is_float() {
            return Err(fail(
                operation,
                format!(
                    "`oob_fill` NanRequestZeroFma needs a floating-point data type, not {:?}",
                    self.data_type
                ),
            ));
        }
        fits(operation, footprint, memory_bytes)?;
        Ok((footprint, alignment))
    }

    /// Checks that the inner dimension of the box, in bytes, fits the swizzle span.
    pub(super) fn check_swizzle(&self, operation: &'static str, field: &str, inner_bytes: u64) -> Result<()> {
        if self.interleave != Interleave::None {
            return Ok(());
        }
        if let Some(span) = self.swizzle.span() {
            if inner_bytes > span {
                return Err(fail(
                    operation,
                    format!(
                        "`swizzle` {:?} spans {span} bytes but the inner box dimension (`{field}`) is {inner_bytes} bytes; narrow the box or pick a wider swizzle",
                        self.swizzle
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Checks a count against its range, naming the field.
pub(super) fn in_range(operation: &'static str, field: &str, value: u32, max: u32) -> Result<()> {
    if value == 0 || value > max {
        return Err(fail(operation, format!("`{field}` is {value}; it takes 1 to {max}")));
    }
    Ok(())
}

/// The range of an im2col corner offset, which depends on the rank.
pub(super) fn corner_range(rank: usize) -> (i32, i32) {
    match rank {
        3 => (-(1 << 15), (1 << 15) - 1),
        4 => (-(1 << 7), (1 << 7) - 1),
        _ => (-(1 << 4), (1 << 4) - 1),
    }
}

pub(super) fn corner(operation: &'static str, field: &str, rank: usize, values: &[i32]) -> Result<()> {
    if values.len() != rank - 2 {
        return Err(fail(
            operation,
            format!("`{field}` has {} entries; a rank-{rank} tensor takes {}", values.len(), rank - 2),
        ));
    }
    let (low, high) = corner_range(rank);
    for (i, &v) in values.iter().enumerate() {
        if !(low..=high).contains(&v) {
            return Err(fail(
                operation,
                format!("`{field}[{i}]` is {v}; a rank-{rank} tensor takes {low} to {high}"),
            ));
        }
    }
    Ok(())
}
