//! Shape and stride checks, as pure functions over slices (strides count elements).

#![forbid(unsafe_code)]

use crate::error::{Error, Result};

fn overflow(operation: &'static str, what: &str, shape: &[i64]) -> Error {
    Error::invalid(operation, format!("{what} of shape {shape:?} overflows"))
}

/// Checks that no extent is negative.
fn check_extents(operation: &'static str, shape: &[i64]) -> Result<()> {
    match shape.iter().position(|&d| d < 0) {
        Some(i) => Err(Error::invalid(
            operation,
            format!("shape[{i}] is {}; extents must not be negative (shape {shape:?})", shape[i]),
        )),
        None => Ok(()),
    }
}

/// The number of elements of `shape`, the product of its extents (1 for no dimensions).
/// A negative extent or a product past `usize` is an [`Error::InvalidArgument`].
pub(crate) fn element_count(operation: &'static str, shape: &[i64]) -> Result<usize> {
    check_extents(operation, shape)?;
    if shape.contains(&0) {
        return Ok(0);
    }
    shape.iter().try_fold(1usize, |n, &d| {
        usize::try_from(d)
            .ok()
            .and_then(|d| n.checked_mul(d))
            .ok_or_else(|| overflow(operation, "the element count", shape))
    })
}

/// The strides of a compact row-major (C order) tensor of `shape`. Extents of 0 count as 1,
/// so that every stride is positive.
pub(crate) fn compact_strides(operation: &'static str, shape: &[i64]) -> Result<Vec<i64>> {
    check_extents(operation, shape)?;
    let mut strides = vec![0i64; shape.len()];
    let mut step = 1i64;
    for (stride, &d) in strides.iter_mut().zip(shape).rev() {
        *stride = step;
        step = step.checked_mul(d.max(1)).ok_or_else(|| overflow(operation, "the strides", shape))?;
    }
    Ok(strides)
}

/// How many elements from the first one a tensor reaches: one past the largest index that
/// `shape` and non-negative `strides` address (0 when an extent is 0).
pub(crate) fn extent(operation: &'static str, shape: &[i64], strides: &[i64]) -> Result<usize> {
    check_extents(operation, shape)?;
    if strides.len() != shape.len() {
        return Err(Error::invalid(
            operation,
            format!(
                "strides {strides:?} has {} entries but shape {shape:?} has {}",
                strides.len(),
                shape.len()
            ),
        ));
    }
    if let Some(i) = strides.iter().position(|&s| s < 0) {
        return Err(Error::invalid(
            operation,
            format!("strides[{i}] is {}; exported strides must not be negative", strides[i]),
        ));
    }
    if shape.contains(&0) {
        return Ok(0);
    }
    let mut last: u128 = 0;
    for (&d, &s) in shape.iter().zip(strides) {
        // Both are non-negative and below 2^63, so the product fits in 126 bits.
        let reach = (d as u128 - 1) * s as u128;
        last =
            last.checked_add(reach).ok_or_else(|| overflow(operation, "the reach of the strides", shape))?;
    }
    last.checked_add(1)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| overflow(operation, "the reach of the strides", shape))
}

/// Checks that a tensor of `shape` (and `strides`, if given) over `len` elements stays inside
/// them, and that its dimension count fits DLPack's `int32_t ndim`.
pub(crate) fn check_fits(
    operation: &'static str,
    shape: &[i64],
    strides: Option<&[i64]>,
    len: usize,
) -> Result<()> {
    if i32::try_from(shape.len()).is_err() {
        return Err(Error::invalid(
            operation,
            format!("{} dimensions do not fit DLPack's ndim", shape.len()),
        ));
    }
    match strides {
        None => {
            let count = element_count(operation, shape)?;
            if count > len {
                return Err(Error::refused(
                    crate::error::Reason::OUT_OF_BOUNDS,
                    operation,
                    format!("shape {shape:?} holds {count} elements but the buffer has {len}"),
                ));
            }
        }
        Some(strides) => {
            let reach = extent(operation, shape, strides)?;
            if reach > len {
                return Err(Error::refused(
                    crate::error::Reason::OUT_OF_BOUNDS,
                    operation,
                    format!(
                        "strides {strides:?} over shape {shape:?} reach element {} but the buffer has {len} \
                         elements",
                        reach - 1
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Whether `strides` describe a compact row-major layout of `shape` (whose extents are not
/// negative): null strides do, and so does any tensor with an extent of 0. The stride of an
/// extent of 1 is never used, so any value is accepted there.
pub(crate) fn is_compact(shape: &[i64], strides: Option<&[i64]>) -> bool {
    let Some(strides) = strides else { return true };
    if strides.len() != shape.len() {
        return false;
    }
    if shape.contains(&0) {
        return true;
    }
    let mut step = 1i64;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d != 1 && s != step {
            return false;
        }
        match step.checked_mul(d) {
            Some(next) => step = next,
            None => return false,
        }
    }
    true
}
