//! Batched 3D copies: boxes copied between CUDA arrays, pitched buffers, and device or pinned
//! memory seen as volumes, queued on one stream with one
//! [`cuMemcpy3DBatchAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)
//! call ([`CopyBatch3D`], from [`Stream::copy_batch_3d`]). The operands here are also those of
//! the single 3D copy between contexts, [`Stream::copy_3d_peer`].
//!
//! A 3D operand has an extent `[width, height, depth]`: elements per row, rows per layer,
//! layers. An [`Array`] has its own; a [`PitchedBuffer`] is `width` × `height` × 1; any other
//! memory (a device view or buffer, a pinned buffer or chunk, a pitched buffer of several
//! layers) is given one with [`Volume::new`]. A box of a copy is checked against the extent of
//! each side before anything is queued, so no copy reaches outside its operands.
//!
//! The batch keeps the guarantees of [`CopyBatch`](super::CopyBatch): the memory behind device
//! operands notes the batch's stream, pinned memory records the batch as one of its copies, and
//! an array is destroyed only after its context has finished its work. Its copies run in no
//! particular order, so destinations must not overlap: the batch borrows each destination
//! exclusively until it is submitted, and [`CopyBatch3D::copy_regions`] refuses boxes of its
//! destination that overlap.

use super::batch::sealed::Memory;
use super::batch::{around_pinned, batch_stream};
use super::operand3d::sealed::{self, Operand3D, Place};
use super::operand3d::{CopyRegion3D, Destination3D, Source3D, array_on, box_in, disjoint};
use crate::abi::AbiVersions;
use crate::error::{Error, Result, check};
use crate::stream::Stream;
use crate::track::HostUses;
use bytemuck::Pod;
use cuhost_driver_sys as sys;

/// The ABIs of `cuMemcpy3DBatchAsync`: CUDA 13.0 dropped the failure index of 12.8.
static MEMCPY_3D_BATCH: AbiVersions = AbiVersions::new("cuMemcpy3DBatchAsync", &[13000, 12080]);

/// The driver's operand for `side` at `at` (checked to lie inside it). `unit` is the size of an
/// element for the driver: the array's element size when an array takes part in the copy, 1
/// (bytes) between two pointers.
fn raw_operand<T>(
    operation: &'static str,
    side: &Operand3D<'_>,
    at: [usize; 3],
    unit: usize,
) -> Result<sys::CUmemcpy3DOperand> {
    use sys::CUmemcpy3DOperandType as Type;
    match side.place {
        Place::Pointer { address, pitch, .. } => {
            if pitch % unit != 0 {
                return Err(Error::invalid(
                    operation,
                    format!(
                        "rows {pitch} bytes apart are not a whole number of the array's {unit}-byte elements"
                    ),
                ));
            }
            let rows = side.extent[1];
            // Inside the memory: the box was checked against the extent, which the memory holds.
            let offset = (at[2] * rows + at[1]) * pitch + at[0] * std::mem::size_of::<T>();
            let ptr = sys::CUmemcpy3DOperand_st__bindgen_ty_1__bindgen_ty_1 {
                ptr: address + offset as u64,
                rowLength: pitch / unit,
                layerHeight: rows,
                locHint: sys::CUmemLocation::default(),
                ..Default::default()
            };
            Ok(sys::CUmemcpy3DOperand {
                type_: Type::CU_MEMCPY_OPERAND_TYPE_POINTER,
                op: sys::CUmemcpy3DOperand_st__bindgen_ty_1 { ptr },
                ..Default::default()
            })
        }
        Place::Array(array) => {
            let array = sys::CUmemcpy3DOperand_st__bindgen_ty_1__bindgen_ty_2 {
                array: array.as_raw(),
                offset: sys::CUoffset3D { x: at[0], y: at[1], z: at[2], ..Default::default() },
                ..Default::default()
            };
            Ok(sys::CUmemcpy3DOperand {
                type_: Type::CU_MEMCPY_OPERAND_TYPE_ARRAY,
                op: sys::CUmemcpy3DOperand_st__bindgen_ty_1 { array },
                ..Default::default()
            })
        }
    }
}

/// Many 3D copies queued on one stream by one
/// [`cuMemcpy3DBatchAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)
/// call (CUDA 12.8 and later), made with [`Stream::copy_batch_3d`].
///
/// Add copies with [`copy`](Self::copy) (a whole source into a destination of the same
/// extent) and [`copy_regions`](Self::copy_regions) (boxes between one destination and one
/// source), then queue them all with [`submit`](Self::submit). Arrays, pitched buffers and
/// [`Volume`](super::Volume)s over device or pinned memory mix freely in one batch, with elements of any
/// [`Pod`] type per copy (an array's must have the size of its elements).
///
/// What makes it safe is what makes [`CopyBatch`](super::CopyBatch) safe:
///
/// * **Extents and boxes** are checked as copies are added: a box reaching past either side, a
///   volume whose extent does not match its memory, an element type of another size than an
///   array's, or an array of another context than the stream is an [`Error::InvalidArgument`],
///   and nothing is added.
/// * **Device memory** (views, buffers, pitched buffers) notes the batch's stream, when it is
///   not the memory's own, as it is added: its owner gives it back only after that stream has
///   passed the batch.
/// * **Arrays** are destroyed only after their context, the stream's, has finished its work.
/// * **Pinned memory** records the batch as one copy, as for [`CopyBatch`](super::CopyBatch):
///   its slices wait for the batch, and a buffer dropped after [`submit`](Self::submit) is kept
///   from reuse until the batch is done.
///
/// The copies of a batch run in no particular order among themselves: the batch borrows each
/// destination exclusively and each source shared until it is submitted, and
/// [`copy_regions`](Self::copy_regions) refuses boxes of its destination that overlap. Sources
/// are read in stream order (`CU_MEMCPY_SRC_ACCESS_ORDER_STREAM`).
///
/// ```no_run
/// use cuhost::copy::{CopyRegion3D, Volume};
/// use cuhost::memory::{Array, ArrayDescriptor, ArrayFlags, PitchedBuffer};
/// use cuhost::{Context, Device, PinnedBuffer, Stream, StreamFlags};
/// use cuhost::driver_sys::CUarray_format;
/// # fn main() -> cuhost::Result<()> {
/// let ctx = Context::primary(&Device::get(0)?)?;
/// let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
/// let (x, y, z) = (32, 32, 8);
/// let volume = PitchedBuffer::<u32>::new(&stream, x, y * z)?; // 8 layers of 32 rows
/// let format = CUarray_format::CU_AD_FORMAT_UNSIGNED_INT32;
/// let desc = ArrayDescriptor { width: 16, height: 16, depth: 4, format, num_channels: 1, flags: ArrayFlags::empty() };
/// let mut array = Array::new(&ctx, &desc)?;
/// let mut host = PinnedBuffer::<u32>::new(4 * 4 * 2)?;
///
/// let mut batch = stream.copy_batch_3d()?;
/// let source = Volume::new(&volume, [x, y, z]);
/// batch.copy_regions(&mut array, source, [CopyRegion3D::of([16, 16, 4]).from([8, 8, 2]).to([0, 0, 0])])?;
/// let source = Volume::new(&volume, [x, y, z]);
/// batch.copy_regions(Volume::new(&mut host, [4, 4, 2]), source, [CopyRegion3D::of([4, 4, 2]).from([0; 3]).to([0; 3])])?;
/// batch.submit()?; // one driver call
/// let _corner = host.as_slice()?; // waits for the batch
/// # Ok(()) }
/// ```
///
/// A batch cannot write memory it also reads; the borrow checker refuses it:
///
/// ```compile_fail,E0502
/// # use cuhost::copy::Volume;
/// # use cuhost::memory::PitchedBuffer;
/// # fn f(stream: &cuhost::Stream, volume: &mut PitchedBuffer<u32>) -> cuhost::Result<()> {
/// let mut batch = stream.copy_batch_3d()?;
/// batch.copy(Volume::new(&mut *volume, [64, 8, 8]), Volume::new(&*volume, [64, 8, 8]))?;
/// batch.submit()
/// # }
/// ```
pub struct CopyBatch3D<'a> {
    stream: &'a Stream,
    ops: Vec<sys::CUDA_MEMCPY3D_BATCH_OP>,
    /// The pinned trackers the copies use, with whether a copy writes the memory; merged at
    /// submission.
    pinned: Vec<(&'a HostUses, bool)>,
    /// Scratch for the overlap check of `copy_regions`: destination boxes, first and end
    /// corners.
    boxes: Vec<([usize; 3], [usize; 3])>,
    flags: u32,
}

impl std::fmt::Debug for CopyBatch3D<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CopyBatch3D")
            .field("stream", &self.stream)
            .field("len", &self.ops.len())
            .field("flags", &self.flags)
            .finish_non_exhaustive()
    }
}

impl Stream {
    /// A new, empty [`CopyBatch3D`] on this stream: copies added to it are queued here by one
    /// [`cuMemcpy3DBatchAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)
    /// call when it is submitted.
    ///
    /// # Errors
    ///
    /// * [`Error::Load`] naming the version needed (12.8) and the one installed, on an older
    ///   driver;
    /// * [`Error::InvalidArgument`] for the legacy default stream, which the driver refuses
    ///   for batches, and for another thread's per-thread default stream.
    pub fn copy_batch_3d(&self) -> Result<CopyBatch3D<'_>> {
        MEMCPY_3D_BATCH.choose()?;
        batch_stream("Stream::copy_batch_3d", self)?;
        Ok(CopyBatch3D {
            stream: self,
            ops: Vec::new(),
            pinned: Vec::new(),
            boxes: Vec::new(),
            flags: sys::CUmemcpyFlags::CU_MEMCPY_FLAG_DEFAULT.0,
        })
    }
}

impl<'a> CopyBatch3D<'a> {
    /// The stream the batch is queued on.
    #[inline]
    pub fn stream(&self) -> &'a Stream {
        self.stream
    }

    /// The number of copies added so far (boxes with a zero in their extent are left out).
    #[inline]
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether no copy was added (submitting then calls nothing).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Makes room for `additional` more copies, so that adding them allocates nothing. A
    /// count too large to allocate reserves nothing (adding then allocates as it goes).
    pub fn reserve(&mut self, additional: usize) -> &mut Self {
        let _ = self.ops.try_reserve(additional);
        self
    }

    /// Asks the driver to overlap the batch's copies with compute work where it can
    /// (`CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE`, a hint; off by default).
    pub fn prefer_overlap_with_compute(&mut self, prefer: bool) -> &mut Self {
        self.flags = super::batch::overlap_flags(prefer);
        self
    }

    /// Adds a copy of the whole of `src` into `dst`; their extents must be the same. Nothing is
    /// queued before [`submit`](Self::submit).
    ///
    /// # Errors
    ///
    /// An [`Error::InvalidArgument`], with nothing added, for extents that differ, and for the
    /// operands [`copy_regions`](Self::copy_regions) refuses.
    pub fn copy<T: Pod>(
        &mut self,
        dst: impl Destination3D<'a, T>,
        src: impl Source3D<'a, T>,
    ) -> Result<&mut Self> {
        const OPERATION: &str = "CopyBatch3D::copy";
        let dst = sealed::Write3D::operand(dst, OPERATION)?;
        let src = sealed::Read3D::operand(src, OPERATION)?;
        if dst.extent != src.extent {
            let ([a, b, c], [d, e, f]) = (dst.extent, src.extent);
            return Err(Error::refused(
                crate::error::Reason::LENGTH_MISMATCH,
                OPERATION,
                format!(
                    "the destination is {a} × {b} × {c} elements but the source {d} × {e} × {f}; copy boxes of them \
                     with copy_regions"
                ),
            ));
        }
        let whole = CopyRegion3D::of(dst.extent).from([0; 3]).to([0; 3]);
        self.add::<T>(OPERATION, &dst, &src, [whole])
    }

    /// Adds one copy per box of `regions`, each `region.extent` from `src` at
    /// `region.src_offset` to `dst` at `region.dst_offset`. Boxes with a zero in their extent
    /// are left out. Nothing is queued before [`submit`](Self::submit).
    ///
    /// # Errors
    ///
    /// An [`Error::InvalidArgument`], with nothing added, for a box that reaches past `dst` or
    /// `src`, two boxes whose destinations overlap (the copies of a batch run in no particular
    /// order), a [`Volume`](super::Volume) whose extent does not match its memory, an element type whose size
    /// is not an array operand's element size (or an array of a format other than the plain
    /// integer and float ones), an array of another context than the stream, and a stream that
    /// would not name the same stream for the memory (see [`DeviceBuffer::record_stream`](crate::memory::DeviceBuffer::record_stream)). A
    /// [`PinnedBuffer`](crate::memory::PinnedBuffer) whose chunks' copies can be neither ordered nor waited for fails with
    /// that error; an array's descriptor that cannot be read, with the driver's status.
    pub fn copy_regions<T: Pod>(
        &mut self,
        dst: impl Destination3D<'a, T>,
        src: impl Source3D<'a, T>,
        regions: impl IntoIterator<Item = CopyRegion3D>,
    ) -> Result<&mut Self> {
        const OPERATION: &str = "CopyBatch3D::copy_regions";
        let dst = sealed::Write3D::operand(dst, OPERATION)?;
        let src = sealed::Read3D::operand(src, OPERATION)?;
        self.add::<T>(OPERATION, &dst, &src, regions)
    }

    fn add<T: Pod>(
        &mut self,
        operation: &'static str,
        dst: &Operand3D<'a>,
        src: &Operand3D<'a>,
        regions: impl IntoIterator<Item = CopyRegion3D>,
    ) -> Result<&mut Self> {
        array_on(operation, dst, self.stream)?;
        array_on(operation, src, self.stream)?;
        let before = self.ops.len();
        let added = self
            .push_regions::<T>(operation, dst, src, regions)
            .and_then(|()| if self.ops.len() > before { self.track(dst, src) } else { Ok(()) });
        if let Err(e) = added {
            self.ops.truncate(before);
            return Err(e);
        }
        Ok(self)
    }

    /// Pushes the boxes' copies after checking them, then checks that their destinations do
    /// not overlap; the caller takes them back out on an error.
    fn push_regions<T: Pod>(
        &mut self,
        operation: &'static str,
        dst: &Operand3D<'_>,
        src: &Operand3D<'_>,
        regions: impl IntoIterator<Item = CopyRegion3D>,
    ) -> Result<()> {
        let size = std::mem::size_of::<T>();
        let arrays = matches!(dst.place, Place::Array(_)) || matches!(src.place, Place::Array(_));
        // With an array, the driver counts rows and widths in its elements (checked to be `T`'s
        // size); between pointers, in bytes.
        let unit = if arrays { size } else { 1 };
        self.boxes.clear();
        for r in regions {
            box_in(operation, "destination", r.dst_offset, r.extent, dst.extent)?;
            box_in(operation, "source", r.src_offset, r.extent, src.extent)?;
            if size == 0 || r.extent.contains(&0) {
                continue;
            }
            let [w, h, d] = r.extent;
            // `w * size` fits: the box lies in a row of at least `w` elements of memory.
            let width = if arrays { w } else { w * size };
            self.ops.push(sys::CUDA_MEMCPY3D_BATCH_OP {
                src: raw_operand::<T>(operation, src, r.src_offset, unit)?,
                dst: raw_operand::<T>(operation, dst, r.dst_offset, unit)?,
                extent: sys::CUextent3D { width, height: h, depth: d, ..Default::default() },
                srcAccessOrder: sys::CUmemcpySrcAccessOrder::CU_MEMCPY_SRC_ACCESS_ORDER_STREAM,
                flags: self.flags,
                ..Default::default()
            });
            let [x, y, z] = r.dst_offset;
            self.boxes.push((r.dst_offset, [x + w, y + h, z + d]));
        }
        disjoint(operation, &mut self.boxes)
    }

    /// Notes the batch's stream on the owners of the device operands, marks arrays as used by
    /// queued work, and keeps the pinned operands for the recording around the call.
    fn track(&mut self, dst: &Operand3D<'a>, src: &Operand3D<'a>) -> Result<()> {
        self.note(dst, true)?;
        self.note(src, false)
    }

    fn note(&mut self, side: &Operand3D<'a>, writes: bool) -> Result<()> {
        match side.place {
            Place::Pointer { memory: Memory::Device(Some(t)), .. } => {
                t.uses.note(self.stream.context(), t.own, self.stream, crate::track::Access::of(writes))
            }
            Place::Pointer { memory: Memory::Pinned(uses), .. } => {
                match self.pinned.last_mut() {
                    Some((last, w)) if std::ptr::eq(*last, uses) => *w |= writes,
                    _ => self.pinned.push((uses, writes)),
                }
                Ok(())
            }
            Place::Pointer { .. } => Ok(()),
            Place::Array(array) => {
                array.queued_async();
                Ok(())
            }
        }
    }

    /// Queues every copy added on the stream with one
    /// [`cuMemcpy3DBatchAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)
    /// call (none for an empty batch), and records it on the pinned memory it uses.
    ///
    /// Pinned memory with copies in flight on other streams is waited for on the stream first,
    /// as [`CopyBatch::submit`](super::CopyBatch::submit) does.
    ///
    /// # Errors
    ///
    /// The driver's status: a fault of earlier work on the stream, or copies it cannot make
    /// (`CUDA_ERROR_INVALID_VALUE`). When the call fails, the pinned memory still records the
    /// batch, in case some of its copies were queued. A [`PinnedChunk`](crate::memory::PinnedChunk) in a batch submitted
    /// on a capturing stream is an [`Error::InvalidArgument`], with nothing queued.
    pub fn submit(mut self) -> Result<()> {
        if self.ops.is_empty() {
            return Ok(());
        }
        let version = MEMCPY_3D_BATCH.choose()?;
        let stream = self.stream;
        // Again here: a batch of a per-thread default stream may have moved to another thread.
        batch_stream("CopyBatch3D::submit", stream)?;
        stream.context().enter()?;
        let flags = self.flags;
        self.ops.iter_mut().for_each(|op| op.flags = flags);
        let ops = &mut self.ops;
        around_pinned("CopyBatch3D::submit", stream, &mut self.pinned, || queue(version, ops, stream))
    }
}

/// The driver call, with the stream's context current.
fn queue(version: i32, ops: &mut [sys::CUDA_MEMCPY3D_BATCH_OP], stream: &Stream) -> Result<()> {
    let (count, list, raw) = (ops.len(), ops.as_mut_ptr(), stream.as_raw());
    let status = if version == 13000 {
        // SAFETY: `count` operations, each naming boxes checked to lie in memory the batch
        // borrows, whose owners wait for this stream before giving it back (device memory and
        // arrays) or record the batch right after this call (pinned memory); destinations do
        // not overlap one another or a source. The flags must be 0.
        unsafe { sys::cuMemcpy3DBatchAsync(count, list, 0, raw) }
    } else {
        let mut failed_at = usize::MAX;
        // SAFETY: as above; one out-parameter for the index of an operation the driver refused.
        unsafe { sys::cuMemcpy3DBatchAsync_v12080(count, list, &mut failed_at, 0, raw) }
    };
    check("cuMemcpy3DBatchAsync", status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer_operands_start_at_their_box() {
        let o = Operand3D {
            place: Place::Pointer { address: 0x1000, pitch: 512, ctx: None, memory: Memory::Host },
            extent: [100, 6, 4],
        };
        let raw = match raw_operand::<u32>("t", &o, [3, 2, 1], 1) {
            Ok(raw) => raw,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(raw.type_, sys::CUmemcpy3DOperandType::CU_MEMCPY_OPERAND_TYPE_POINTER);
        // SAFETY: the pointer member was the one written.
        let ptr = unsafe { raw.op.ptr };
        assert_eq!((ptr.ptr, ptr.rowLength, ptr.layerHeight), (0x1000 + (6 + 2) * 512 + 3 * 4, 512, 6));
        // Against an array of 4-byte elements, rows are counted in elements.
        let raw = raw_operand::<u32>("t", &o, [0; 3], 4).map_err(|e| e.to_string());
        // SAFETY: as above.
        assert!(matches!(raw.map(|r| unsafe { r.op.ptr.rowLength }), Ok(128)));
        assert!(raw_operand::<u32>("t", &o, [0; 3], 3).is_err(), "a pitch not a multiple of the element");
    }
}
