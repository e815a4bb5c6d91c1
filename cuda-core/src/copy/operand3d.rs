//! The operands of 3D copies ([`CopyBatch3D`](super::CopyBatch3D) and
//! [`Stream::copy_3d_peer`](crate::stream::Stream::copy_3d_peer)) and the boxes copied between them.
//!
//! A 3D operand has an extent `[width, height, depth]`: elements per row, rows per layer,
//! layers. An [`Array`] has its own; a [`PitchedBuffer`] is `width` × `height` × 1; any other
//! memory (a device view or buffer, a pinned buffer or chunk, a pitched buffer of several
//! layers) is given one with [`Volume::new`]. A box of a copy is checked against the extent of
//! each side before anything is queued, so no copy reaches outside its operands.

#![forbid(unsafe_code)]

use super::batch::sealed::Memory;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::memory::DeviceBuffer;
use crate::memory::MemorySpace;
use crate::memory::PinnedBuffer;
use crate::memory::PinnedChunk;
use crate::memory::PitchedBuffer;
use crate::memory::pinned_chunk::sealed::Sealed as _;
use crate::memory::view::{DeviceView, DeviceViewMut, Track};
use crate::memory::{Array, BorrowedArray};
use crate::stream::Stream;
use bytemuck::Pod;

pub(crate) mod sealed {
    use super::{Array, Context, Memory};
    use crate::error::Result;

    /// Where the elements of a 3D operand are.
    #[derive(Clone, Copy)]
    pub(crate) enum Place<'a> {
        /// Linear memory at `address` (unified addressing): rows `pitch` bytes apart, layers
        /// `extent[1]` rows apart. `ctx` is the context of device memory, `None` for pinned
        /// host memory.
        Pointer { address: u64, pitch: usize, ctx: Option<&'a Context>, memory: Memory<'a> },
        /// A CUDA array whose elements have the size of the copy's element type.
        Array(&'a Array),
    }

    /// One side of a 3D copy: where it is, and its extent in elements, rows and layers.
    pub struct Operand3D<'a> {
        pub(crate) place: Place<'a>,
        pub(crate) extent: [usize; 3],
    }

    /// Memory a 3D copy reads, crate-internal.
    pub trait Read3D<'a, T> {
        /// The operand, borrowed for `'a`; `operation` names the call in errors.
        fn operand(self, operation: &'static str) -> Result<Operand3D<'a>>;
    }

    /// Memory a 3D copy writes, crate-internal.
    pub trait Write3D<'a, T> {
        /// The operand, borrowed exclusively for `'a`.
        fn operand(self, operation: &'static str) -> Result<Operand3D<'a>>;
    }

    /// Memory a read [`Volume`](super::Volume) can lie over, crate-internal.
    pub trait Backing<'a, T> {
        /// The memory as a volume of `extent`, checked against its size.
        fn volume(self, operation: &'static str, extent: [usize; 3]) -> Result<Operand3D<'a>>;
    }

    /// Memory a written [`Volume`](super::Volume) can lie over, crate-internal.
    pub trait BackingMut<'a, T> {
        /// The memory as a volume of `extent`, checked against its size.
        fn volume(self, operation: &'static str, extent: [usize; 3]) -> Result<Operand3D<'a>>;
    }
}

use sealed::{Operand3D, Place};

/// Memory a 3D copy ([`CopyBatch3D`](super::CopyBatch3D), [`Stream::copy_3d_peer`]) can read, borrowed for `'a`:
/// an [`Array`] (or a [`BorrowedArray`]) whose elements are `T`, a [`PitchedBuffer`], or a
/// [`Volume`] over a device view or buffer, a pinned buffer or chunk, or a pitched buffer, by
/// shared reference. Sealed.
pub trait Source3D<'a, T: Pod>: sealed::Read3D<'a, T> {}

/// Memory a 3D copy can write, borrowed exclusively for `'a`: the operands of [`Source3D`], by
/// exclusive reference (a [`Volume`] over a [`DeviceViewMut`] for views). Sealed.
pub trait Destination3D<'a, T: Pod>: sealed::Write3D<'a, T> {}

/// Memory seen as a volume of `[width, height, depth]` elements of `T`: `height` rows of
/// `width` elements per layer, `depth` layers, x fastest. Made with [`Volume::new`], it is an
/// operand of the 3D copies.
///
/// Over densely packed memory ([`DeviceView`], [`DeviceViewMut`], [`DeviceBuffer`],
/// [`PinnedBuffer`], [`PinnedChunk`]) the extent must hold exactly the memory's elements: rows
/// are `width` elements apart, layers `width * height`. Over a [`PitchedBuffer`], `width` must
/// be the buffer's and `height * depth` its number of rows: rows keep the buffer's pitch, and a
/// layer is `height` of them. The extent is checked when a copy takes the volume, and a
/// mismatch is an [`Error::InvalidArgument`].
///
/// ```no_run
/// use cuhost::copy::{CopyRegion3D, Volume};
/// use cuhost::memory::PitchedBuffer;
/// use cuhost::{Context, Device, DeviceBuffer, Stream, StreamFlags};
/// # fn main() -> cuhost::Result<()> {
/// let ctx = Context::primary(&Device::get(0)?)?;
/// let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
/// // 64 × 32 × 16 floats: 32 rows per layer, 16 layers, rows padded to the device's pitch.
/// let volume = PitchedBuffer::<f32>::new(&stream, 64, 32 * 16)?;
/// let mut tile = DeviceBuffer::<f32>::zeroed(&stream, 8 * 8 * 8)?;
/// let mut batch = stream.copy_batch_3d()?;
/// batch.copy_regions(
///     Volume::new(&mut tile, [8, 8, 8]),
///     Volume::new(&volume, [64, 32, 16]),
///     [CopyRegion3D::of([8, 8, 8]).from([16, 8, 4]).to([0, 0, 0])],
/// )?;
/// batch.submit()?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Volume<M> {
    memory: M,
    extent: [usize; 3],
}

impl<M> Volume<M> {
    /// `memory` as a volume of `extent`, `[width, height, depth]` in elements, rows and layers;
    /// checked against the memory when a copy takes it.
    #[inline]
    pub const fn new(memory: M, extent: [usize; 3]) -> Volume<M> {
        Volume { memory, extent }
    }

    /// The extent, `[width, height, depth]`.
    #[inline]
    pub fn extent(&self) -> [usize; 3] {
        self.extent
    }
}

/// Densely packed memory of `len` elements as a volume of `extent`.
fn dense<'a, T>(
    operation: &'static str,
    address: u64,
    len: usize,
    ctx: Option<&'a Context>,
    memory: Memory<'a>,
    extent: [usize; 3],
) -> Result<Operand3D<'a>> {
    let [w, h, d] = extent;
    let count = w.checked_mul(h).and_then(|n| n.checked_mul(d));
    let pitch = w.checked_mul(std::mem::size_of::<T>());
    match (count, pitch) {
        (Some(count), Some(pitch)) if count == len => {
            Ok(Operand3D { place: Place::Pointer { address, pitch, ctx, memory }, extent })
        }
        _ => Err(Error::invalid(
            operation,
            format!(
                "a volume of {w} × {h} × {d} elements over memory of {len} elements; the extent must hold exactly \
                 the memory's elements (slice the memory, or give the extent it has)"
            ),
        )),
    }
}

/// The shape of a pitched buffer as the checks of a volume over it see it.
struct Rows {
    address: u64,
    pitch: usize,
    width: usize,
    height: usize,
}

/// A pitched buffer of `rows` as a volume of `extent`.
fn pitched<'a>(
    operation: &'static str,
    rows: &Rows,
    view_ctx: &'a Context,
    track: Option<Track<'a>>,
    extent: [usize; 3],
) -> Result<Operand3D<'a>> {
    let [w, h, d] = extent;
    if w != rows.width || h.checked_mul(d) != Some(rows.height) {
        return Err(Error::invalid(
            operation,
            format!(
                "a volume of {w} × {h} × {d} elements over a pitched buffer of {} × {}; give the buffer's width, \
                 and a height and depth whose product is its number of rows",
                rows.width, rows.height
            ),
        ));
    }
    let place = Place::Pointer {
        address: rows.address,
        pitch: rows.pitch,
        ctx: Some(view_ctx),
        memory: Memory::Device(track),
    };
    Ok(Operand3D { place, extent })
}

fn rows_of<T: Pod>(p: &PitchedBuffer<T>) -> Rows {
    Rows { address: p.as_raw(), pitch: p.pitch(), width: p.width(), height: p.height() }
}

/// An array whose elements are `T` as an operand of its own extent.
fn array<'a, T>(operation: &'static str, array: &'a Array) -> Result<Operand3D<'a>> {
    let d = array.descriptor()?;
    let size = std::mem::size_of::<T>();
    match d.element_bytes() {
        Some(bytes) if bytes == size => {}
        Some(bytes) => {
            return Err(Error::invalid(
                operation,
                format!(
                    "the array's elements are {bytes} bytes ({} channels of its format) but the copy's element \
                     type is {size} bytes; copy it as a type of {bytes} bytes",
                    d.num_channels
                ),
            ));
        }
        None => {
            return Err(Error::invalid(
                operation,
                "3D copies of arrays support the plain integer and float formats only",
            ));
        }
    }
    Ok(Operand3D { place: Place::Array(array), extent: [d.width, d.height.max(1), d.depth.max(1)] })
}

impl<'a, T: Pod> sealed::Backing<'a, T> for DeviceView<'a, T> {
    fn volume(self, operation: &'static str, extent: [usize; 3]) -> Result<Operand3D<'a>> {
        dense::<T>(operation, self.ptr, self.len, Some(self.ctx), Memory::Device(self.track), extent)
    }
}

impl<'a, T: Pod, S: MemorySpace> sealed::Backing<'a, T> for &'a DeviceBuffer<T, S> {
    fn volume(self, operation: &'static str, extent: [usize; 3]) -> Result<Operand3D<'a>> {
        sealed::Backing::<T>::volume(self.view(), operation, extent)
    }
}

impl<'a, T: Pod> sealed::Backing<'a, T> for &'a PinnedBuffer<T> {
    fn volume(self, operation: &'static str, extent: [usize; 3]) -> Result<Operand3D<'a>> {
        let t = self.tracked()?;
        dense::<T>(operation, t.ptr as u64, t.len, None, Memory::Pinned(t.uses), extent)
    }
}

impl<'a, T: Pod> sealed::Backing<'a, T> for &'a PinnedChunk<'_, T> {
    fn volume(self, operation: &'static str, extent: [usize; 3]) -> Result<Operand3D<'a>> {
        let t = self.tracked()?;
        dense::<T>(operation, t.ptr as u64, t.len, None, Memory::Pinned(t.uses), extent)
    }
}

impl<'a, T: Pod> sealed::Backing<'a, T> for &'a PitchedBuffer<T> {
    fn volume(self, operation: &'static str, extent: [usize; 3]) -> Result<Operand3D<'a>> {
        let view = self.storage().view();
        pitched(operation, &rows_of(self), view.ctx, view.track, extent)
    }
}

impl<'a, T: Pod> sealed::BackingMut<'a, T> for DeviceViewMut<'a, T> {
    fn volume(self, operation: &'static str, extent: [usize; 3]) -> Result<Operand3D<'a>> {
        dense::<T>(operation, self.ptr, self.len, Some(self.ctx), Memory::Device(self.track), extent)
    }
}

impl<'a, T: Pod, S: MemorySpace> sealed::BackingMut<'a, T> for &'a mut DeviceBuffer<T, S> {
    fn volume(self, operation: &'static str, extent: [usize; 3]) -> Result<Operand3D<'a>> {
        sealed::BackingMut::<T>::volume(self.view_mut(), operation, extent)
    }
}

impl<'a, T: Pod> sealed::BackingMut<'a, T> for &'a mut PinnedBuffer<T> {
    fn volume(self, operation: &'static str, extent: [usize; 3]) -> Result<Operand3D<'a>> {
        let this: &'a PinnedBuffer<T> = self;
        sealed::Backing::<T>::volume(this, operation, extent)
    }
}

impl<'a, T: Pod> sealed::BackingMut<'a, T> for &'a mut PinnedChunk<'_, T> {
    fn volume(self, operation: &'static str, extent: [usize; 3]) -> Result<Operand3D<'a>> {
        let this: &'a PinnedChunk<'_, T> = self;
        sealed::Backing::<T>::volume(this, operation, extent)
    }
}

impl<'a, T: Pod> sealed::BackingMut<'a, T> for &'a mut PitchedBuffer<T> {
    fn volume(self, operation: &'static str, extent: [usize; 3]) -> Result<Operand3D<'a>> {
        let rows = rows_of(self);
        let view = self.bytes_mut();
        pitched(operation, &rows, view.ctx, view.track, extent)
    }
}

impl<'a, T: Pod, M: sealed::Backing<'a, T>> sealed::Read3D<'a, T> for Volume<M> {
    fn operand(self, operation: &'static str) -> Result<Operand3D<'a>> {
        self.memory.volume(operation, self.extent)
    }
}

impl<'a, T: Pod, M: sealed::BackingMut<'a, T>> sealed::Write3D<'a, T> for Volume<M> {
    fn operand(self, operation: &'static str) -> Result<Operand3D<'a>> {
        self.memory.volume(operation, self.extent)
    }
}

impl<'a, T: Pod> sealed::Read3D<'a, T> for &'a PitchedBuffer<T> {
    fn operand(self, operation: &'static str) -> Result<Operand3D<'a>> {
        let extent = [self.width(), self.height(), 1];
        sealed::Backing::<T>::volume(self, operation, extent)
    }
}

impl<'a, T: Pod> sealed::Write3D<'a, T> for &'a mut PitchedBuffer<T> {
    fn operand(self, operation: &'static str) -> Result<Operand3D<'a>> {
        let extent = [self.width(), self.height(), 1];
        sealed::BackingMut::<T>::volume(self, operation, extent)
    }
}

impl<'a, T: Pod> sealed::Read3D<'a, T> for &'a Array {
    fn operand(self, operation: &'static str) -> Result<Operand3D<'a>> {
        array::<T>(operation, self)
    }
}

impl<'a, T: Pod> sealed::Read3D<'a, T> for &'a BorrowedArray<'_> {
    fn operand(self, operation: &'static str) -> Result<Operand3D<'a>> {
        array::<T>(operation, self)
    }
}

impl<'a, T: Pod> sealed::Write3D<'a, T> for &'a mut Array {
    fn operand(self, operation: &'static str) -> Result<Operand3D<'a>> {
        array::<T>(operation, self)
    }
}

impl<'a, T: Pod> sealed::Write3D<'a, T> for &'a mut BorrowedArray<'_> {
    fn operand(self, operation: &'static str) -> Result<Operand3D<'a>> {
        let this: &'a BorrowedArray<'_> = self;
        array::<T>(operation, this)
    }
}

impl<'a, T: Pod, M: sealed::Backing<'a, T>> Source3D<'a, T> for Volume<M> {}
impl<'a, T: Pod> Source3D<'a, T> for &'a PitchedBuffer<T> {}
impl<'a, T: Pod> Source3D<'a, T> for &'a Array {}
impl<'a, T: Pod> Source3D<'a, T> for &'a BorrowedArray<'_> {}
impl<'a, T: Pod, M: sealed::BackingMut<'a, T>> Destination3D<'a, T> for Volume<M> {}
impl<'a, T: Pod> Destination3D<'a, T> for &'a mut PitchedBuffer<T> {}
impl<'a, T: Pod> Destination3D<'a, T> for &'a mut Array {}
impl<'a, T: Pod> Destination3D<'a, T> for &'a mut BorrowedArray<'_> {}

/// One box of a 3D copy: `extent` elements, rows and layers from `src_offset` in the source to
/// `dst_offset` in the destination. Offsets are `[x, y, z]` (element in the row, row in the
/// layer, layer), the extent `[width, height, depth]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct CopyRegion3D {
    /// The first element written in the destination, `[x, y, z]`.
    pub dst_offset: [usize; 3],
    /// The first element read in the source, `[x, y, z]`.
    pub src_offset: [usize; 3],
    /// The size of the box, `[width, height, depth]`.
    pub extent: [usize; 3],
}

impl CopyRegion3D {
    /// The box of `extent` (`[width, height, depth]`), from the origin of the source to the
    /// origin of the destination; name the corners with [`from`](Self::from) and
    /// [`to`](Self::to), so that they cannot be swapped silently:
    /// `CopyRegion3D::of([8, 8, 4]).from([4, 4, 4]).to([0; 3])`.
    #[inline]
    pub const fn of(extent: [usize; 3]) -> CopyRegion3D {
        CopyRegion3D { dst_offset: [0; 3], src_offset: [0; 3], extent }
    }

    /// The box read from `src_offset` (`[x, y, z]`) of the source on.
    #[inline]
    #[must_use]
    pub const fn from(self, src_offset: [usize; 3]) -> CopyRegion3D {
        CopyRegion3D { src_offset, ..self }
    }

    /// The box written from `dst_offset` (`[x, y, z]`) of the destination on.
    #[inline]
    #[must_use]
    pub const fn to(self, dst_offset: [usize; 3]) -> CopyRegion3D {
        CopyRegion3D { dst_offset, ..self }
    }
}

/// An [`Error::InvalidArgument`] unless the box of `extent` at `offset` lies within `shape`.
pub(crate) fn box_in(
    operation: &'static str,
    side: &str,
    offset: [usize; 3],
    extent: [usize; 3],
    shape: [usize; 3],
) -> Result<()> {
    for (axis, name) in ["width", "height", "depth"].into_iter().enumerate() {
        match offset[axis].checked_add(extent[axis]) {
            Some(end) if end <= shape[axis] => {}
            _ => {
                return Err(Error::refused(
                    crate::error::Reason::OUT_OF_BOUNDS,
                    operation,
                    format!(
                        "a box of {} × {} × {} at {offset:?} reaches past the {name} of the {side}, whose extent is \
                         {} × {} × {}",
                        extent[0], extent[1], extent[2], shape[0], shape[1], shape[2]
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// An [`Error::InvalidArgument`] for an array of another context than `stream`'s: its release
/// waits for its own context's work only.
pub(crate) fn array_on(operation: &'static str, side: &Operand3D<'_>, stream: &Stream) -> Result<()> {
    match side.place {
        Place::Array(array) if array.context() != stream.context() => Err(Error::refused(
            crate::error::Reason::WRONG_CONTEXT,
            operation,
            "the array belongs to another context than the stream, and is destroyed after its own context's \
             work only; queue its copies on a stream of the array's context",
        )),
        _ => Ok(()),
    }
}

/// An [`Error::InvalidArgument`] if two of the boxes (first corner, end corner) overlap; sorts
/// them.
pub(crate) fn disjoint(operation: &'static str, boxes: &mut [([usize; 3], [usize; 3])]) -> Result<()> {
    boxes.sort_unstable_by_key(|b| b.0[0]);
    for (i, a) in boxes.iter().enumerate() {
        // Sorted by x: the boxes after the first that starts past `a`'s end do not meet it.
        for b in boxes[i + 1..].iter().take_while(|b| b.0[0] < a.1[0]) {
            if (1..3).all(|k| b.0[k] < a.1[k] && a.0[k] < b.1[k]) {
                return Err(Error::invalid(
                    operation,
                    format!(
                        "two boxes write overlapping parts of the destination (from {:?} and from {:?}); the copies \
                         of a batch run in no particular order, so give each destination element one box",
                        a.0, b.0
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boxes_must_lie_inside_their_operands() {
        let shape = [8, 6, 4];
        assert!(box_in("t", "side", [0, 0, 0], [8, 6, 4], shape).is_ok());
        assert!(box_in("t", "side", [5, 4, 3], [3, 2, 1], shape).is_ok());
        assert!(box_in("t", "side", [8, 6, 4], [0, 0, 0], shape).is_ok());
        for (offset, extent) in [([6, 0, 0], [3, 1, 1]), ([0, 5, 0], [1, 2, 1]), ([0, 0, 4], [1, 1, 1])] {
            assert!(matches!(box_in("t", "side", offset, extent, shape), Err(Error::InvalidArgument { .. })));
        }
        let e = box_in("t", "source", [usize::MAX, 0, 0], [2, 1, 1], shape).err().map(|e| e.to_string());
        assert!(e.as_deref().is_some_and(|e| e.contains("width of the source")), "{e:?}");
    }

    #[test]
    fn overlapping_boxes_are_found_in_any_order() {
        assert!(disjoint("t", &mut []).is_ok());
        // Side by side along each axis, and apart.
        let mut apart =
            [([4, 0, 0], [8, 4, 4]), ([0, 0, 0], [4, 4, 4]), ([0, 4, 0], [4, 8, 4]), ([0, 0, 4], [8, 8, 5])];
        assert!(disjoint("t", &mut apart).is_ok());
        let mut meeting = [([0, 0, 0], [4, 4, 4]), ([9, 9, 9], [10, 10, 10]), ([3, 3, 3], [5, 5, 5])];
        let e = disjoint("t", &mut meeting).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("overlapping") && e.contains("[3, 3, 3]"), "{e}");
        // Overlapping in x and y but not z.
        assert!(disjoint("t", &mut [([0, 0, 0], [4, 4, 2]), ([1, 1, 2], [3, 3, 4])]).is_ok());
        assert!(disjoint("t", &mut [([0, 0, 0], [4, 4, 2]), ([1, 1, 1], [3, 3, 4])]).is_err());
    }

    #[test]
    fn dense_volumes_hold_exactly_their_memory() {
        let shape =
            |len, extent| dense::<u32>("t", 0x1000, len, None, Memory::Host, extent).map(|o| o.extent);
        assert_eq!(shape(24, [2, 3, 4]).ok(), Some([2, 3, 4]));
        assert!(shape(25, [2, 3, 4]).is_err());
        assert!(shape(0, [usize::MAX, 2, 0]).is_err(), "a row too long for memory is refused");
        let o = dense::<u32>("t", 0x1000, 24, None, Memory::Host, [2, 3, 4]);
        assert!(matches!(o.map(|o| o.place), Ok(Place::Pointer { pitch: 8, .. })));
    }

    #[test]
    fn regions_are_plain_values() {
        let r = CopyRegion3D::of([7, 8, 9]).from([4, 5, 6]).to([1, 2, 3]);
        assert_eq!((r.dst_offset, r.src_offset, r.extent), ([1, 2, 3], [4, 5, 6], [7, 8, 9]));
        assert_eq!(CopyRegion3D::default().extent, [0; 3]);
    }
}
