//! Runtime 2D, array and 3D copies. Pitches, windows and extents are checked against both
//! sides before any call. The synchronous forms wait for the default stream they run on, so
//! their result is visible to any stream. The stream-ordered forms take device memory and [`PinnedBuffer`]s
//! (which record the copy), as [`memcpy_async`](super::memcpy_async) does.
//!
//! [`PinnedBuffer`]: crate::memory::PinnedBuffer

use super::copy::finished;
use super::{Array, AsyncDestination, AsyncSource, CopyDestination, CopySource};
use crate::error::{Error, Result, check_runtime};
use bytemuck::Pod;
use cuhost_cudart_sys as rt;
use std::ffi::c_void;

/// Checks that `height` rows of `width` bytes, `pitch` bytes apart, fit in `len` bytes.
fn check_rows(
    operation: &'static str,
    side: &str,
    len: usize,
    pitch: usize,
    width: usize,
    height: usize,
) -> Result<()> {
    if width > pitch {
        return Err(Error::invalid(
            operation,
            format!("{side} pitch {pitch} is smaller than the row width {width}"),
        ));
    }
    let needed = height
        .checked_sub(1)
        .map_or(Some(0), |rows| rows.checked_mul(pitch).and_then(|b| b.checked_add(width)));
    match needed {
        Some(n) if n <= len => Ok(()),
        _ => Err(Error::invalid(
            operation,
            format!(
                "{height} rows of {width} bytes with pitch {pitch} do not fit in the {side}'s {len} bytes"
            ),
        )),
    }
}

/// Copies `height` rows of `width_bytes` bytes; rows are `dpitch` and `spitch` bytes apart in
/// the destination and source
/// ([`cudaMemcpy2D`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
///
/// A pitch smaller than the row width, or rows that do not fit in either side, is an
/// [`Error::InvalidArgument`], checked before the copy.
pub fn memcpy_2d<T: Pod, D: CopyDestination<T> + ?Sized, S: CopySource<T> + ?Sized>(
    dst: &mut D,
    dpitch: usize,
    src: &S,
    spitch: usize,
    width_bytes: usize,
    height: usize,
) -> Result<()> {
    let op = "runtime::memcpy_2d";
    let size = std::mem::size_of::<T>();
    check_rows(op, "destination", dst.destination_len() * size, dpitch, width_bytes, height)?;
    check_rows(op, "source", src.source_len() * size, spitch, width_bytes, height)?;
    let (d, s) = (dst.destination_ptr()?, src.source_ptr()?);
    // SAFETY: both sides hold the rows (checked above).
    finished(check_runtime("cudaMemcpy2D", unsafe {
        rt::cudaMemcpy2D(d, dpitch, s, spitch, width_bytes, height, rt::cudaMemcpyKind::cudaMemcpyDefault)
    }))
}

/// [`memcpy_2d`] queued on `stream`, between device memory and [`PinnedBuffer`]s
/// ([`cudaMemcpy2DAsync`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
///
/// A pitch smaller than the row width, or rows that do not fit in either side, is an
/// [`Error::InvalidArgument`], checked before the copy.
///
/// [`PinnedBuffer`]: crate::memory::PinnedBuffer
pub fn memcpy_2d_async<T, D, S>(
    dst: &mut D,
    dpitch: usize,
    src: &S,
    spitch: usize,
    width_bytes: usize,
    height: usize,
    stream: &crate::stream::Stream,
) -> Result<()>
where
    T: Pod,
    D: AsyncDestination<T> + ?Sized,
    S: AsyncSource<T> + ?Sized,
{
    let op = "runtime::memcpy_2d_async";
    let size = std::mem::size_of::<T>();
    check_rows(op, "destination", dst.destination_len() * size, dpitch, width_bytes, height)?;
    check_rows(op, "source", src.source_len() * size, spitch, width_bytes, height)?;
    stream.context().enter()?;
    src.read_on(stream, |s| {
        dst.write_on(stream, |d| {
            // SAFETY: as for memcpy_2d; both sides stay allocated and untouched by the host
            // until the copy has run (the traits' contracts).
            check_runtime("cudaMemcpy2DAsync", unsafe {
                rt::cudaMemcpy2DAsync(
                    d,
                    dpitch,
                    s,
                    spitch,
                    width_bytes,
                    height,
                    rt::cudaMemcpyKind::cudaMemcpyDefault,
                    stream.as_raw().cast(),
                )
            })
        })
    })
}

/// Checks a 2D window of an array: `width_bytes` from byte `x` and `height` rows from row `y`.
fn check_window(
    operation: &'static str,
    array: &Array,
    x: usize,
    y: usize,
    width_bytes: usize,
    height: usize,
) -> Result<()> {
    let (rows, _) = array.rows_and_slices();
    let fits_x = x.checked_add(width_bytes).is_some_and(|e| e <= array.row_bytes());
    let fits_y = y.checked_add(height).is_some_and(|e| e <= rows);
    let element = array.desc().element_size();
    if !fits_x || !fits_y || x % element != 0 || width_bytes % element != 0 {
        // Out of bounds, unless only the element alignment is wrong.
        let reason =
            if fits_x && fits_y { crate::error::Reason::OTHER } else { crate::error::Reason::OUT_OF_BOUNDS };
        return Err(Error::refused(
            reason,
            operation,
            format!(
                "window of {width_bytes} bytes x {height} rows at byte {x}, row {y} is outside the array's {} bytes x {rows} rows, or not on {element}-byte elements",
                array.row_bytes()
            ),
        ));
    }
    Ok(())
}

/// Copies `height` rows of `width_bytes` from `src` (rows `spitch` bytes apart) into `dst` at
/// byte offset `x`, row `y`
/// ([`cudaMemcpy2DToArray`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
///
/// A window outside the array or not on whole elements, or rows that do not fit in the
/// linear side, is an [`Error::InvalidArgument`], checked before the copy.
#[allow(clippy::too_many_arguments)]
pub fn memcpy_2d_to_array<T: Pod, S: CopySource<T> + ?Sized>(
    dst: &mut Array,
    x: usize,
    y: usize,
    src: &S,
    spitch: usize,
    width_bytes: usize,
    height: usize,
) -> Result<()> {
    let op = "runtime::memcpy_2d_to_array";
    check_window(op, dst, x, y, width_bytes, height)?;
    check_rows(op, "source", src.source_len() * std::mem::size_of::<T>(), spitch, width_bytes, height)?;
    let s = src.source_ptr()?;
    // SAFETY: the window is inside the array and the source holds the rows.
    finished(check_runtime("cudaMemcpy2DToArray", unsafe {
        rt::cudaMemcpy2DToArray(
            dst.as_raw(),
            x,
            y,
            s,
            spitch,
            width_bytes,
            height,
            rt::cudaMemcpyKind::cudaMemcpyDefault,
        )
    }))
}

/// [`memcpy_2d_to_array`] queued on `stream`, from device memory or a [`PinnedBuffer`]
/// ([`cudaMemcpy2DToArrayAsync`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
///
/// A window outside the array or not on whole elements, or rows that do not fit in the
/// linear side, is an [`Error::InvalidArgument`], checked before the copy.
///
/// [`PinnedBuffer`]: crate::memory::PinnedBuffer
#[allow(clippy::too_many_arguments)]
pub fn memcpy_2d_to_array_async<T: Pod, S: AsyncSource<T> + ?Sized>(
    dst: &mut Array,
    x: usize,
    y: usize,
    src: &S,
    spitch: usize,
    width_bytes: usize,
    height: usize,
    stream: &crate::stream::Stream,
) -> Result<()> {
    let op = "runtime::memcpy_2d_to_array_async";
    check_window(op, dst, x, y, width_bytes, height)?;
    check_rows(op, "source", src.source_len() * std::mem::size_of::<T>(), spitch, width_bytes, height)?;
    stream.context().enter()?;
    dst.used_on(stream, crate::track::Access::Write)?;
    let array = dst.as_raw();
    src.read_on(stream, |s| {
        // SAFETY: as above; freeing the array waits for the copy, and the source stays
        // allocated and unwritten until it has run (the trait's contract).
        check_runtime("cudaMemcpy2DToArrayAsync", unsafe {
            rt::cudaMemcpy2DToArrayAsync(
                array,
                x,
                y,
                s,
                spitch,
                width_bytes,
                height,
                rt::cudaMemcpyKind::cudaMemcpyDefault,
                stream.as_raw().cast(),
            )
        })
    })
}

/// Copies `height` rows of `width_bytes` from `src` at byte offset `x`, row `y`, into `dst`
/// (rows `dpitch` bytes apart)
/// ([`cudaMemcpy2DFromArray`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
///
/// A window outside the array or not on whole elements, or rows that do not fit in the
/// linear side, is an [`Error::InvalidArgument`], checked before the copy.
#[allow(clippy::too_many_arguments)]
pub fn memcpy_2d_from_array<T: Pod, D: CopyDestination<T> + ?Sized>(
    dst: &mut D,
    dpitch: usize,
    src: &Array,
    x: usize,
    y: usize,
    width_bytes: usize,
    height: usize,
) -> Result<()> {
    let op = "runtime::memcpy_2d_from_array";
    check_window(op, src, x, y, width_bytes, height)?;
    check_rows(
        op,
        "destination",
        dst.destination_len() * std::mem::size_of::<T>(),
        dpitch,
        width_bytes,
        height,
    )?;
    let d = dst.destination_ptr()?;
    // SAFETY: the window is inside the array and the destination holds the rows.
    finished(check_runtime("cudaMemcpy2DFromArray", unsafe {
        rt::cudaMemcpy2DFromArray(
            d,
            dpitch,
            src.as_raw(),
            x,
            y,
            width_bytes,
            height,
            rt::cudaMemcpyKind::cudaMemcpyDefault,
        )
    }))
}

/// [`memcpy_2d_from_array`] queued on `stream`, into device memory or a [`PinnedBuffer`]
/// ([`cudaMemcpy2DFromArrayAsync`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
///
/// A window outside the array or not on whole elements, or rows that do not fit in the
/// linear side, is an [`Error::InvalidArgument`], checked before the copy.
///
/// [`PinnedBuffer`]: crate::memory::PinnedBuffer
#[allow(clippy::too_many_arguments)]
pub fn memcpy_2d_from_array_async<T: Pod, D: AsyncDestination<T> + ?Sized>(
    dst: &mut D,
    dpitch: usize,
    src: &Array,
    x: usize,
    y: usize,
    width_bytes: usize,
    height: usize,
    stream: &crate::stream::Stream,
) -> Result<()> {
    let op = "runtime::memcpy_2d_from_array_async";
    check_window(op, src, x, y, width_bytes, height)?;
    check_rows(
        op,
        "destination",
        dst.destination_len() * std::mem::size_of::<T>(),
        dpitch,
        width_bytes,
        height,
    )?;
    stream.context().enter()?;
    src.used_on(stream, crate::track::Access::Read)?;
    let array = src.as_raw();
    dst.write_on(stream, |d| {
        // SAFETY: as above; freeing the array waits for the copy, and the destination stays
        // allocated and untouched by the host until it has run (the trait's contract).
        check_runtime("cudaMemcpy2DFromArrayAsync", unsafe {
            rt::cudaMemcpy2DFromArrayAsync(
                d,
                dpitch,
                array,
                x,
                y,
                width_bytes,
                height,
                rt::cudaMemcpyKind::cudaMemcpyDefault,
                stream.as_raw().cast(),
            )
        })
    })
}

/// Which side of a whole-array copy the array is.
#[derive(Clone, Copy, Debug)]
enum ArraySide {
    Destination,
    Source,
}

/// A copy of a whole array to or from `bytes` of tightly packed linear memory (rows, then
/// slices), whose sizes were checked when it was made.
struct WholeArray<'a> {
    operation: &'static str,
    array: &'a Array,
    side: ArraySide,
    bytes: usize,
}

impl<'a> WholeArray<'a> {
    /// The copy, or an [`Error::InvalidArgument`] if the linear side is not exactly the
    /// array's size.
    fn new(operation: &'static str, array: &'a Array, side: ArraySide, bytes: usize) -> Result<Self> {
        let copy = WholeArray { operation, array, side, bytes };
        copy.params(std::ptr::null_mut())?;
        Ok(copy)
    }

    /// The 3D parameters of the copy, with `linear` as its linear side.
    fn params(&self, linear: *mut c_void) -> Result<rt::cudaMemcpy3DParms> {
        let (array, linear_bytes) = (self.array, self.bytes);
        let (rows, slices) = array.rows_and_slices();
        let row = array.row_bytes();
        let total = row.checked_mul(rows).and_then(|b| b.checked_mul(slices));
        if total != Some(linear_bytes) {
            return Err(Error::refused(
                crate::error::Reason::LENGTH_MISMATCH,
                self.operation,
                format!(
                    "the array holds {row} x {rows} x {slices} bytes but the linear side has {linear_bytes}; they must be equal"
                ),
            ));
        }
        // SAFETY: a plain C struct; all zeroes (null pointers, zero sizes) is valid.
        let mut p: rt::cudaMemcpy3DParms = unsafe { std::mem::zeroed() };
        p.extent =
            rt::cudaExtent { width: array.extent().0, height: rows, depth: slices, ..Default::default() };
        p.kind = rt::cudaMemcpyKind::cudaMemcpyDefault;
        let pitched = rt::cudaPitchedPtr {
            ptr: linear,
            pitch: row,
            xsize: array.extent().0,
            ysize: rows,
            ..Default::default()
        };
        match self.side {
            ArraySide::Destination => (p.srcPtr, p.dstArray) = (pitched, array.as_raw()),
            ArraySide::Source => (p.dstPtr, p.srcArray) = (pitched, array.as_raw()),
        }
        Ok(p)
    }
}

/// Fills the whole array from tightly packed `src` (rows, then slices)
/// ([`cudaMemcpy3D`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
///
/// A linear side whose size is not exactly the array's is an [`Error::InvalidArgument`],
/// checked before the copy.
pub fn memcpy_3d_to_array<T: Pod, S: CopySource<T> + ?Sized>(dst: &mut Array, src: &S) -> Result<()> {
    let bytes = src.source_len() * std::mem::size_of::<T>();
    let copy = WholeArray::new("runtime::memcpy_3d_to_array", dst, ArraySide::Destination, bytes)?;
    let p = copy.params(src.source_ptr()?.cast_mut())?;
    // SAFETY: the parameters describe the whole array and a source of exactly its size; the
    // runtime only reads the source.
    finished(check_runtime("cudaMemcpy3D", unsafe { rt::cudaMemcpy3D(&p) }))
}

/// [`memcpy_3d_to_array`] queued on `stream`, from device memory or a [`PinnedBuffer`]
/// ([`cudaMemcpy3DAsync`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
///
/// A linear side whose size is not exactly the array's is an [`Error::InvalidArgument`],
/// checked before the copy.
///
/// [`PinnedBuffer`]: crate::memory::PinnedBuffer
pub fn memcpy_3d_to_array_async<T: Pod, S: AsyncSource<T> + ?Sized>(
    dst: &mut Array,
    src: &S,
    stream: &crate::stream::Stream,
) -> Result<()> {
    let bytes = src.source_len() * std::mem::size_of::<T>();
    let copy = WholeArray::new("runtime::memcpy_3d_to_array_async", dst, ArraySide::Destination, bytes)?;
    stream.context().enter()?;
    dst.used_on(stream, crate::track::Access::Write)?;
    src.read_on(stream, |s| {
        let p = copy.params(s.cast_mut())?;
        // SAFETY: as above; freeing the array waits for the copy, and the source stays
        // allocated and unwritten until it has run (the trait's contract).
        check_runtime("cudaMemcpy3DAsync", unsafe { rt::cudaMemcpy3DAsync(&p, stream.as_raw().cast()) })
    })
}

/// Reads the whole array into tightly packed `dst` (rows, then slices)
/// ([`cudaMemcpy3D`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
///
/// A linear side whose size is not exactly the array's is an [`Error::InvalidArgument`],
/// checked before the copy.
pub fn memcpy_3d_from_array<T: Pod, D: CopyDestination<T> + ?Sized>(dst: &mut D, src: &Array) -> Result<()> {
    let bytes = dst.destination_len() * std::mem::size_of::<T>();
    let copy = WholeArray::new("runtime::memcpy_3d_from_array", src, ArraySide::Source, bytes)?;
    let p = copy.params(dst.destination_ptr()?)?;
    // SAFETY: the parameters describe the whole array and a destination of exactly its size.
    finished(check_runtime("cudaMemcpy3D", unsafe { rt::cudaMemcpy3D(&p) }))
}

/// [`memcpy_3d_from_array`] queued on `stream`, into device memory or a [`PinnedBuffer`]
/// ([`cudaMemcpy3DAsync`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__MEMORY.html)).
///
/// [`PinnedBuffer`]: crate::memory::PinnedBuffer
pub fn memcpy_3d_from_array_async<T: Pod, D: AsyncDestination<T> + ?Sized>(
    dst: &mut D,
    src: &Array,
    stream: &crate::stream::Stream,
) -> Result<()> {
    let bytes = dst.destination_len() * std::mem::size_of::<T>();
    let copy = WholeArray::new("runtime::memcpy_3d_from_array_async", src, ArraySide::Source, bytes)?;
    stream.context().enter()?;
    src.used_on(stream, crate::track::Access::Read)?;
    dst.write_on(stream, |d| {
        let p = copy.params(d)?;
        // SAFETY: as above; freeing the array waits for the copy, and the destination stays
        // allocated and untouched by the host until it has run (the trait's contract).
        check_runtime("cudaMemcpy3DAsync", unsafe { rt::cudaMemcpy3DAsync(&p, stream.as_raw().cast()) })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_must_fit_their_side() {
        assert!(check_rows("t", "src", 100, 10, 10, 10).is_ok());
        assert!(check_rows("t", "src", 95, 10, 5, 10).is_ok(), "the last row needs only its width");
        assert!(check_rows("t", "src", 94, 10, 5, 10).is_err());
        assert!(check_rows("t", "src", 100, 8, 10, 2).is_err(), "width over pitch");
        assert!(check_rows("t", "src", 0, 10, 10, 0).is_ok(), "no rows need no bytes");
        assert!(check_rows("t", "src", 100, usize::MAX, 1, 3).is_err(), "overflow is refused");
    }
}
