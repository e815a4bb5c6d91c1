//! Batched copies: many linear copies between device, pinned and (unsafely) pageable host
//! memory queued on one stream with one
//! [`cuMemcpyBatchAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)
//! call ([`CopyBatch`], from [`Stream::copy_batch`]).
//!
//! A batch keeps every guarantee of the single `_async` copies: lengths and bounds are checked
//! before any call, the buffers behind device views note the batch's stream (their memory is
//! given back only after it has run the batch), and pinned memory records the batch as one of
//! its copies (the host waits for it before touching the memory, and the pool keeps the block
//! until it is done). Two things are new: the copies of one batch run in no particular order,
//! so the destinations of a batch must not overlap one another or a source (the borrows of the
//! operands make that so across calls, and [`CopyBatch::copy_regions`] checks it within one
//! call); and the driver refuses the legacy default stream.

use crate::abi::AbiVersions;
use crate::error::{Error, Result, check};
use crate::memory::DeviceBuffer;
use crate::memory::MemorySpace;
use crate::memory::PinnedBuffer;
use crate::memory::PinnedChunk;
use crate::memory::pinned_chunk::sealed::Sealed as _;
use crate::memory::view::{DeviceView, DeviceViewMut, Track};
use crate::stream::Stream;
use crate::track::{Access, HostUses};
use bytemuck::Pod;
use cuhost_driver_sys as sys;

/// The ABIs of `cuMemcpyBatchAsync`: CUDA 13.0 dropped the failure index of 12.8.
static MEMCPY_BATCH: AbiVersions = AbiVersions::new("cuMemcpyBatchAsync", &[13000, 12080]);

pub(crate) mod sealed {
    use super::{HostUses, Track};
    use crate::error::Result;

    /// What memory an operand of a batched copy is, for the bookkeeping around the call.
    #[derive(Clone, Copy)]
    pub(crate) enum Memory<'a> {
        /// Device (or managed) memory behind a view: the owner notes the batch's stream
        /// (nothing to note for a view made from a raw address).
        Device(Option<Track<'a>>),
        /// Pinned memory: its tracker records the batch.
        Pinned(&'a HostUses),
        /// Host memory the crate does not track (an `unsafe` form's slice).
        Host,
    }

    /// One side of a copy: its address (unified addressing), its length in elements and what
    /// memory it is.
    pub struct Operand<'a> {
        pub(crate) address: u64,
        pub(crate) len: usize,
        pub(crate) memory: Memory<'a>,
    }

    /// Memory a batched copy reads, crate-internal.
    pub trait Source<'a, T> {
        /// The operand, borrowed for `'a`.
        fn operand(self) -> Result<Operand<'a>>;
    }

    /// Memory a batched copy writes, crate-internal.
    pub trait Destination<'a, T> {
        /// The operand, borrowed exclusively for `'a`.
        fn operand(self) -> Result<Operand<'a>>;
    }
}

use sealed::{Memory, Operand};

/// Memory a [`CopyBatch`] can read, borrowed for `'a`: a [`DeviceView`], a [`DeviceBuffer`]
/// (any memory space), a [`PinnedBuffer`] or a [`PinnedChunk`], by shared reference. The same
/// memory the single `_async` copies read safely. Sealed.
pub trait BatchSource<'a, T: Pod>: sealed::Source<'a, T> {}

/// Memory a [`CopyBatch`] can write, borrowed exclusively for `'a`: a [`DeviceViewMut`], a
/// [`DeviceBuffer`] (any memory space), a [`PinnedBuffer`] or a [`PinnedChunk`], by exclusive
/// reference. The same memory the single `_async` copies write safely. Sealed.
pub trait BatchDestination<'a, T: Pod>: sealed::Destination<'a, T> {}

fn device<T>(view: DeviceView<'_, T>) -> Operand<'_> {
    Operand { address: view.ptr, len: view.len, memory: Memory::Device(view.track) }
}

fn pinned<T>(ptr: *mut T, len: usize, uses: &HostUses) -> Operand<'_> {
    Operand { address: ptr as u64, len, memory: Memory::Pinned(uses) }
}

impl<'a, T: Pod> sealed::Source<'a, T> for DeviceView<'a, T> {
    #[inline]
    fn operand(self) -> Result<Operand<'a>> {
        Ok(device(self))
    }
}

impl<'a, T: Pod, S: MemorySpace> sealed::Source<'a, T> for &'a DeviceBuffer<T, S> {
    #[inline]
    fn operand(self) -> Result<Operand<'a>> {
        Ok(device(self.view()))
    }
}

impl<'a, T: Pod> sealed::Source<'a, T> for &'a PinnedBuffer<T> {
    #[inline]
    fn operand(self) -> Result<Operand<'a>> {
        let t = self.tracked()?;
        Ok(pinned(t.ptr, t.len, t.uses))
    }
}

impl<'a, T: Pod> sealed::Source<'a, T> for &'a PinnedChunk<'_, T> {
    #[inline]
    fn operand(self) -> Result<Operand<'a>> {
        let t = self.tracked()?;
        Ok(pinned(t.ptr, t.len, t.uses))
    }
}

impl<'a, T: Pod> sealed::Destination<'a, T> for DeviceViewMut<'a, T> {
    #[inline]
    fn operand(self) -> Result<Operand<'a>> {
        Ok(Operand { address: self.ptr, len: self.len, memory: Memory::Device(self.track) })
    }
}

impl<'a, T: Pod, S: MemorySpace> sealed::Destination<'a, T> for &'a mut DeviceBuffer<T, S> {
    #[inline]
    fn operand(self) -> Result<Operand<'a>> {
        sealed::Destination::<T>::operand(self.view_mut())
    }
}

impl<'a, T: Pod> sealed::Destination<'a, T> for &'a mut PinnedBuffer<T> {
    #[inline]
    fn operand(self) -> Result<Operand<'a>> {
        let this: &'a PinnedBuffer<T> = self;
        let t = this.tracked()?;
        Ok(pinned(t.ptr, t.len, t.uses))
    }
}

impl<'a, T: Pod> sealed::Destination<'a, T> for &'a mut PinnedChunk<'_, T> {
    #[inline]
    fn operand(self) -> Result<Operand<'a>> {
        let this: &'a PinnedChunk<'_, T> = self;
        let t = this.tracked()?;
        Ok(pinned(t.ptr, t.len, t.uses))
    }
}

impl<'a, T: Pod> BatchSource<'a, T> for DeviceView<'a, T> {}
impl<'a, T: Pod, S: MemorySpace> BatchSource<'a, T> for &'a DeviceBuffer<T, S> {}
impl<'a, T: Pod> BatchSource<'a, T> for &'a PinnedBuffer<T> {}
impl<'a, T: Pod> BatchSource<'a, T> for &'a PinnedChunk<'_, T> {}
impl<'a, T: Pod> BatchDestination<'a, T> for DeviceViewMut<'a, T> {}
impl<'a, T: Pod, S: MemorySpace> BatchDestination<'a, T> for &'a mut DeviceBuffer<T, S> {}
impl<'a, T: Pod> BatchDestination<'a, T> for &'a mut PinnedBuffer<T> {}
impl<'a, T: Pod> BatchDestination<'a, T> for &'a mut PinnedChunk<'_, T> {}

/// One copy of [`CopyBatch::copy_regions`]: `len` elements from element `src_offset` of the
/// source to element `dst_offset` of the destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct CopyRegion {
    /// The first element written in the destination.
    pub dst_offset: usize,
    /// The first element read in the source.
    pub src_offset: usize,
    /// How many elements are copied.
    pub len: usize,
}

impl CopyRegion {
    /// `len` elements, from the start of the source to the start of the destination; name the
    /// offsets with [`from`](Self::from) and [`to`](Self::to), so that they cannot be swapped
    /// silently: `CopyRegion::of(16).from(32).to(0)`.
    #[inline]
    pub const fn of(len: usize) -> CopyRegion {
        CopyRegion { dst_offset: 0, src_offset: 0, len }
    }

    /// The region read from element `src_offset` of the source on.
    #[inline]
    #[must_use]
    pub const fn from(self, src_offset: usize) -> CopyRegion {
        CopyRegion { src_offset, ..self }
    }

    /// The region written from element `dst_offset` of the destination on.
    #[inline]
    #[must_use]
    pub const fn to(self, dst_offset: usize) -> CopyRegion {
        CopyRegion { dst_offset, ..self }
    }
}

/// Many linear copies queued on one stream by one
/// [`cuMemcpyBatchAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)
/// call (CUDA 12.8 and later), made with [`Stream::copy_batch`].
///
/// Add copies with [`copy`](Self::copy) (a whole source into a destination of the same
/// length) and [`copy_regions`](Self::copy_regions) (many regions between one destination and
/// one source), then queue them all with [`submit`](Self::submit). Device views and buffers,
/// pinned buffers and pinned chunks may be mixed freely in one batch, with elements of any
/// [`Pod`] type per copy; pageable host slices only through the `unsafe` forms, as for the
/// single copies.
///
/// The batch as a whole runs in stream order: after the work queued on the stream before
/// [`submit`](Self::submit), before the work queued after it. Its copies run in no particular
/// order among themselves, which is why no destination may overlap another copy's
/// destination or source: the batch borrows each destination exclusively and each source
/// shared until it is submitted (so the borrow checker refuses two operands of the same
/// memory where one is written), and [`copy_regions`](Self::copy_regions) refuses regions of
/// its destination that overlap. Sources are read in stream order
/// (`CU_MEMCPY_SRC_ACCESS_ORDER_STREAM`).
///
/// What makes it safe is what makes the single copies safe:
///
/// * **Bounds and lengths** are checked as copies are added: a length mismatch or a region
///   past the end of its operand is an [`Error::InvalidArgument`], and nothing is added.
/// * **Device memory** behind views and buffers notes the batch's stream, when it is not the
///   memory's own, as it is added: its owner gives it back only after that stream has passed
///   the batch, however soon it is dropped after [`submit`](Self::submit).
/// * **Pinned memory** records the batch as one copy: reading a destination
///   ([`as_slice`](PinnedBuffer::as_slice)) waits for the batch, writing a source
///   ([`as_mut_slice`](PinnedBuffer::as_mut_slice)) too, and a buffer dropped after
///   [`submit`](Self::submit) is kept from reuse until the batch is done. Pinned memory with
///   copies in flight on other streams is ordered before the batch, as for a single copy.
///
/// The batch is ordered only on its stream: order other work on the same memory after it with
/// events or the same stream, as for the single `_async` copies.
///
/// ```no_run
/// use cuhost::copy::CopyRegion;
/// use cuhost::{Context, Device, DeviceBuffer, PinnedBuffer, Stream, StreamFlags};
/// # fn main() -> cuhost::Result<()> {
/// let ctx = Context::primary(&Device::get(0)?)?;
/// let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
/// let input = PinnedBuffer::from_fn(1024, |i| i as u32)?;
/// let mut packed = DeviceBuffer::<u32>::zeroed(&stream, 512)?;
/// let mut other = DeviceBuffer::<u32>::zeroed(&stream, 1024)?;
/// let mut output = PinnedBuffer::<u32>::new(1024)?;
///
/// let mut batch = stream.copy_batch()?;
/// // Every other block of 16 elements of `input`, packed into `packed`: 32 copies.
/// batch.copy_regions(&mut packed, &input, (0..32).map(|i| CopyRegion::of(16).from(32 * i).to(16 * i)))?;
/// batch.copy(&mut other, &input)?; // one more, whole
/// batch.submit()?; // one driver call
///
/// let mut back = stream.copy_batch()?;
/// back.copy(&mut output, &other)?;
/// back.submit()?;
/// assert_eq!(output.as_slice()?[1000], 1000); // waits for the batch that writes `output`
/// # Ok(()) }
/// ```
///
/// A batch cannot write memory it also reads, since its copies run in no order; the borrow
/// checker refuses it:
///
/// ```compile_fail,E0502
/// # fn f(stream: &cuhost::Stream, buffer: &mut cuhost::DeviceBuffer<u32>) -> cuhost::Result<()> {
/// let mut batch = stream.copy_batch()?;
/// batch.copy(buffer.slice_mut(4..8)?, buffer.slice(..4)?)?; // `buffer` both written and read
/// batch.submit()
/// # }
/// ```
///
/// Nor can an operand go before the batch is submitted (after that, dropping it is fine):
///
/// ```compile_fail,E0505
/// # use cuhost::{DeviceBuffer, Stream};
/// # fn f(stream: &Stream, src: DeviceBuffer<u32>, mut dst: DeviceBuffer<u32>) -> cuhost::Result<()> {
/// let mut batch = stream.copy_batch()?;
/// batch.copy(&mut dst, &src)?;
/// drop(src); // still borrowed by the batch
/// batch.submit()
/// # }
/// ```
#[derive(Debug)]
pub struct CopyBatch<'a> {
    stream: &'a Stream,
    dsts: Vec<sys::CUdeviceptr>,
    srcs: Vec<sys::CUdeviceptr>,
    sizes: Vec<usize>,
    /// The pinned trackers the copies use, with whether a copy writes the memory; sorted and
    /// merged at submission.
    pinned: Vec<(&'a HostUses, bool)>,
    /// Scratch for the overlap check of `copy_regions`: destination byte ranges.
    spans: Vec<(u64, u64)>,
    flags: u32,
}

/// Refuses, before any call, a stream the batched calls cannot take: the legacy default stream
/// (the driver refuses it) and another thread's per-thread default stream (its handle would
/// name this thread's).
pub(crate) fn batch_stream(operation: &'static str, stream: &Stream) -> Result<()> {
    if stream.is_default() && !stream.is_per_thread() {
        return Err(Error::invalid(
            operation,
            "the legacy default stream cannot take batched operations (the driver refuses it); use a created \
             stream or the per-thread default stream",
        ));
    }
    crate::track::nameable(stream.context(), stream)
}

impl Stream {
    /// A new, empty [`CopyBatch`] on this stream: copies added to it are queued here by one
    /// [`cuMemcpyBatchAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)
    /// call when it is submitted.
    ///
    /// # Errors
    ///
    /// * [`Error::Load`] naming the version needed (12.8) and the one installed, on an older
    ///   driver;
    /// * [`Error::InvalidArgument`] for the legacy default stream, which the driver refuses
    ///   for batches, and for another thread's per-thread default stream.
    pub fn copy_batch(&self) -> Result<CopyBatch<'_>> {
        MEMCPY_BATCH.choose()?;
        batch_stream("Stream::copy_batch", self)?;
        Ok(CopyBatch {
            stream: self,
            dsts: Vec::new(),
            srcs: Vec::new(),
            sizes: Vec::new(),
            pinned: Vec::new(),
            spans: Vec::new(),
            flags: sys::CUmemcpyFlags::CU_MEMCPY_FLAG_DEFAULT.0,
        })
    }
}

impl<'a> CopyBatch<'a> {
    /// The stream the batch is queued on.
    #[inline]
    pub fn stream(&self) -> &'a Stream {
        self.stream
    }

    /// The number of copies added so far (empty ones are not counted: they are left out).
    #[inline]
    pub fn len(&self) -> usize {
        self.sizes.len()
    }

    /// Whether no copy was added (submitting then calls nothing).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.sizes.is_empty()
    }

    /// Makes room for `additional` more copies, so that adding them allocates nothing. A
    /// count too large to allocate reserves nothing (adding then allocates as it goes).
    pub fn reserve(&mut self, additional: usize) -> &mut Self {
        let _ = self.dsts.try_reserve(additional);
        let _ = self.srcs.try_reserve(additional);
        let _ = self.sizes.try_reserve(additional);
        self
    }

    /// Asks the driver to overlap the batch's copies with compute work where it can
    /// (`CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE`, a hint; off by default).
    pub fn prefer_overlap_with_compute(&mut self, prefer: bool) -> &mut Self {
        self.flags = overlap_flags(prefer);
        self
    }

    /// Adds a copy of the whole of `src` into `dst`; the lengths must match. Nothing is queued
    /// before [`submit`](Self::submit).
    ///
    /// # Errors
    ///
    /// Lengths that differ are an [`Error::InvalidArgument`], and so is a stream that would not
    /// name the same stream for the memory (see [`DeviceBuffer::record_stream`]); a
    /// [`PinnedBuffer`] whose chunks' copies can be neither ordered nor waited for fails with
    /// that error. Nothing is added then.
    pub fn copy<T: Pod>(
        &mut self,
        dst: impl BatchDestination<'a, T>,
        src: impl BatchSource<'a, T>,
    ) -> Result<&mut Self> {
        let (dst, src) = (sealed::Destination::operand(dst)?, sealed::Source::operand(src)?);
        self.copy_operands::<T>("CopyBatch::copy", dst, src)
    }

    /// Adds one copy per region, each `region.len` elements from `src` at `region.src_offset`
    /// to `dst` at `region.dst_offset`: the way to many small copies between two buffers.
    /// Regions of no elements are left out. Nothing is queued before [`submit`](Self::submit).
    ///
    /// # Errors
    ///
    /// An [`Error::InvalidArgument`], with nothing added, for a region that reaches past the
    /// end of `dst` or `src`, for two regions whose destinations overlap (the copies of a
    /// batch run in no particular order, so the result would be undefined), and as
    /// [`copy`](Self::copy) fails.
    pub fn copy_regions<T: Pod>(
        &mut self,
        dst: impl BatchDestination<'a, T>,
        src: impl BatchSource<'a, T>,
        regions: impl IntoIterator<Item = CopyRegion>,
    ) -> Result<&mut Self> {
        let (dst, src) = (sealed::Destination::operand(dst)?, sealed::Source::operand(src)?);
        let before = self.sizes.len();
        let added = self
            .add_regions::<T>(&dst, &src, regions)
            .and_then(|()| if self.sizes.len() > before { self.track(&dst, &src) } else { Ok(()) });
        if let Err(e) = added {
            self.dsts.truncate(before);
            self.srcs.truncate(before);
            self.sizes.truncate(before);
            return Err(e);
        }
        Ok(self)
    }

    /// Pushes the regions' copies after checking their bounds, then checks that their
    /// destinations do not overlap; the caller takes them back out on an error.
    fn add_regions<T: Pod>(
        &mut self,
        dst: &Operand<'_>,
        src: &Operand<'_>,
        regions: impl IntoIterator<Item = CopyRegion>,
    ) -> Result<()> {
        let size = std::mem::size_of::<T>();
        self.spans.clear();
        for r in regions {
            if r.len == 0 || size == 0 {
                continue;
            }
            region_in("CopyRegion::dst_offset", r.dst_offset, r.len, dst.len)?;
            region_in("CopyRegion::src_offset", r.src_offset, r.len, src.len)?;
            let (to, bytes) = (dst.address + (r.dst_offset * size) as u64, r.len * size);
            self.dsts.push(to);
            self.srcs.push(src.address + (r.src_offset * size) as u64);
            self.sizes.push(bytes);
            self.spans.push((to, to + bytes as u64));
        }
        disjoint(&mut self.spans)
    }

    /// Adds a copy of the host slice `src` into `dst`; the lengths must match. Nothing is
    /// queued before [`submit`](Self::submit).
    ///
    /// # Safety
    ///
    /// As for [`DeviceViewMut::copy_from_host_async`]: the copy may read `src` after
    /// [`submit`](Self::submit) returns, so `src` must stay alive and unmodified until the
    /// stream has passed the batch (for example, until [`Stream::synchronize`] returns).
    ///
    /// # Errors
    ///
    /// As [`copy`](Self::copy).
    pub unsafe fn copy_from_host<T: Pod>(
        &mut self,
        dst: impl BatchDestination<'a, T>,
        src: &'a [T],
    ) -> Result<&mut Self> {
        let host = Operand { address: src.as_ptr() as u64, len: src.len(), memory: Memory::Host };
        self.copy_operands::<T>("CopyBatch::copy_from_host", sealed::Destination::operand(dst)?, host)
    }

    /// Adds a copy of `src` into the host slice `dst`; the lengths must match. Nothing is
    /// queued before [`submit`](Self::submit).
    ///
    /// # Safety
    ///
    /// As for [`DeviceView::copy_to_host_async`]: the copy may write `dst` after
    /// [`submit`](Self::submit) returns, so `dst` must stay alive, and be neither read nor
    /// written, until the stream has passed the batch.
    ///
    /// # Errors
    ///
    /// As [`copy`](Self::copy).
    pub unsafe fn copy_to_host<T: Pod>(
        &mut self,
        dst: &'a mut [T],
        src: impl BatchSource<'a, T>,
    ) -> Result<&mut Self> {
        let host = Operand { address: dst.as_mut_ptr() as u64, len: dst.len(), memory: Memory::Host };
        self.copy_operands::<T>("CopyBatch::copy_to_host", host, sealed::Source::operand(src)?)
    }

    fn copy_operands<T>(
        &mut self,
        operation: &'static str,
        dst: Operand<'a>,
        src: Operand<'a>,
    ) -> Result<&mut Self> {
        crate::memory::same_len(operation, dst.len, src.len)?;
        if dst.len == 0 || std::mem::size_of::<T>() == 0 {
            return Ok(self);
        }
        self.track(&dst, &src)?;
        self.dsts.push(dst.address);
        self.srcs.push(src.address);
        self.sizes.push(dst.len * std::mem::size_of::<T>());
        Ok(self)
    }

    /// Notes the batch's stream on the owners of the device operands, and keeps the pinned
    /// ones for the recording around the call.
    #[inline]
    fn track(&mut self, dst: &Operand<'a>, src: &Operand<'a>) -> Result<()> {
        self.note(dst.memory, true)?;
        self.note(src.memory, false)
    }

    #[inline]
    fn note(&mut self, memory: Memory<'a>, writes: bool) -> Result<()> {
        match memory {
            Memory::Device(Some(t)) => {
                t.uses.note(self.stream.context(), t.own, self.stream, Access::of(writes))
            }
            Memory::Device(None) | Memory::Host => Ok(()),
            Memory::Pinned(uses) => {
                // Consecutive copies of the same pinned memory (the regions of one call) keep
                // one entry.
                match self.pinned.last_mut() {
                    Some((last, w)) if std::ptr::eq(*last, uses) => *w |= writes,
                    _ => self.pinned.push((uses, writes)),
                }
                Ok(())
            }
        }
    }

    /// Queues every copy added on the stream with one
    /// [`cuMemcpyBatchAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)
    /// call (none for an empty batch), and records it on the pinned memory it uses.
    ///
    /// Pinned memory with copies in flight on other streams is waited for on the stream first
    /// (a copy reading a pinned buffer waits for the copies writing it, one writing it for
    /// every copy using it), so that a batch never races an earlier copy of the same host
    /// memory.
    ///
    /// # Errors
    ///
    /// The driver's status: a fault of earlier work on the stream, memory it cannot copy
    /// (`CUDA_ERROR_INVALID_VALUE`), or a batch captured where the driver does not support it.
    /// When the call fails, the pinned memory still records the batch, in case some of its
    /// copies were queued. A [`PinnedChunk`](crate::memory::PinnedChunk) in a batch submitted on a
    /// capturing stream is an [`Error::InvalidArgument`](crate::error::Error::InvalidArgument), with
    /// nothing queued or handed to the capture.
    pub fn submit(mut self) -> Result<()> {
        if self.sizes.is_empty() {
            return Ok(());
        }
        let version = MEMCPY_BATCH.choose()?;
        let stream = self.stream;
        // Again here: a batch of a per-thread default stream may have moved to another thread.
        batch_stream("CopyBatch::submit", stream)?;
        stream.context().enter()?;
        let mut pinned = std::mem::take(&mut self.pinned);
        around_pinned("CopyBatch::submit", stream, &mut pinned, || self.queue(version))
    }

    /// The driver call, with the stream's context current.
    fn queue(&mut self, version: i32) -> Result<()> {
        let mut attributes = [sys::CUmemcpyAttributes {
            srcAccessOrder: sys::CUmemcpySrcAccessOrder::CU_MEMCPY_SRC_ACCESS_ORDER_STREAM,
            flags: self.flags,
            ..Default::default()
        }];
        let mut first_copy = [0usize];
        let count = self.sizes.len();
        let (dsts, srcs, sizes) = (self.dsts.as_mut_ptr(), self.srcs.as_mut_ptr(), self.sizes.as_mut_ptr());
        let stream = self.stream.as_raw();
        let status = if version == 13000 {
            // SAFETY: `count` addresses and sizes in each array, one attribute set applying
            // from the first copy; every range was checked to lie in memory borrowed by the
            // batch, whose owners wait for this stream before giving it back (device memory)
            // or record the batch right after this call (pinned memory); destinations do not
            // overlap one another or a source.
            unsafe {
                sys::cuMemcpyBatchAsync(
                    dsts,
                    srcs,
                    sizes,
                    count,
                    attributes.as_mut_ptr(),
                    first_copy.as_mut_ptr(),
                    1,
                    stream,
                )
            }
        } else {
            let mut failed_at = usize::MAX;
            // SAFETY: as above; one out-parameter for the index of a copy the driver refused.
            unsafe {
                sys::cuMemcpyBatchAsync_v12080(
                    dsts,
                    srcs,
                    sizes,
                    count,
                    attributes.as_mut_ptr(),
                    first_copy.as_mut_ptr(),
                    1,
                    &mut failed_at,
                    stream,
                )
            }
        };
        check("cuMemcpyBatchAsync", status)
    }
}

/// An [`Error::InvalidArgument`] unless `offset..offset + len` lies in `0..available`.
fn region_in(what: &'static str, offset: usize, len: usize, available: usize) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= available => Ok(()),
        _ => Err(Error::refused(
            crate::error::Reason::OUT_OF_BOUNDS,
            "CopyBatch::copy_regions",
            format!(
                "a region of {len} elements at {what} {offset} reaches past the end of an operand of {available} \
                 elements"
            ),
        )),
    }
}

/// An [`Error::InvalidArgument`] if two of the byte ranges overlap (sorts them).
fn disjoint(spans: &mut [(u64, u64)]) -> Result<()> {
    spans.sort_unstable();
    match spans.windows(2).find(|w| w[1].0 < w[0].1) {
        None => Ok(()),
        Some(w) => Err(Error::invalid(
            "CopyBatch::copy_regions",
            format!(
                "two regions write overlapping destination memory ({:#x}..{:#x} and {:#x}..{:#x}); the copies of a \
                 batch run in no particular order, so give each destination element one region",
                w[0].0, w[0].1, w[1].0, w[1].1
            ),
        )),
    }
}

/// Orders `stream` after the copies in flight of the pinned memory in `pinned` (its tracker,
/// and whether the work writes it), queues the work with `queue`, and records it on each: the
/// bookkeeping of a stream-ordered copy of pinned memory, shared by the batch and the single
/// copy. Refuses, before anything is queued, a chunk of a pinned buffer on a capturing stream.
pub(crate) fn around_pinned(
    operation: &'static str,
    stream: &Stream,
    pinned: &mut [(&HostUses, bool)],
    queue: impl FnOnce() -> Result<()>,
) -> Result<()> {
    // One entry per tracker, writing when any use writes.
    pinned.sort_unstable_by_key(|(uses, _)| std::ptr::from_ref::<HostUses>(uses) as usize);
    let mut kept = 0;
    for i in 0..pinned.len() {
        if kept > 0 && std::ptr::eq(pinned[kept - 1].0, pinned[i].0) {
            pinned[kept - 1].1 |= pinned[i].1;
        } else {
            pinned[kept] = pinned[i];
            kept += 1;
        }
    }
    let pinned = &pinned[..kept];
    let capturing = !pinned.is_empty() && crate::stream::capture_of(stream)?.is_some();
    if capturing && pinned.iter().any(|(uses, _)| !uses.is_capturable()) {
        return Err(Error::refused(
            crate::error::Reason::DURING_CAPTURE,
            operation,
            "a chunk of a pinned buffer cannot be copied in a stream capture (the graph would outlive it); \
             capture copies of whole PinnedBuffers, or queue them outside the capture",
        ));
    }
    for &(uses, writes) in pinned {
        // Orders the stream after the memory's copies in flight elsewhere before anything is
        // queued; memory with nothing in flight needs no wait, since the copy holds its borrow.
        if capturing || uses.is_pending() {
            uses.around(stream, writes, || Ok(()))?;
        }
    }
    let mut result = queue();
    for &(uses, writes) in pinned {
        // Records the work, even when the call failed, in case part of it was queued.
        let recorded = uses.around(stream, writes, || Ok(()));
        if result.is_ok() {
            result = recorded;
        }
    }
    result
}

/// The flags of a batch that prefers (or not) to overlap its copies with compute work.
pub(super) fn overlap_flags(prefer: bool) -> u32 {
    if prefer {
        sys::CUmemcpyFlags::CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE.0
    } else {
        sys::CUmemcpyFlags::CU_MEMCPY_FLAG_DEFAULT.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_must_lie_inside_their_operands() {
        assert!(region_in("t", 0, 4, 4).is_ok());
        assert!(region_in("t", 3, 1, 4).is_ok());
        assert!(region_in("t", 4, 0, 4).is_ok());
        assert!(matches!(region_in("t", 3, 2, 4), Err(Error::InvalidArgument { .. })));
        assert!(matches!(region_in("t", usize::MAX, 2, 4), Err(Error::InvalidArgument { .. })));
    }

    #[test]
    fn overlapping_destinations_are_found_in_any_order() {
        assert!(disjoint(&mut []).is_ok());
        assert!(disjoint(&mut [(8, 16), (0, 8), (16, 20)]).is_ok());
        let e = disjoint(&mut [(16, 24), (0, 8), (4, 12)]).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("overlapping") && e.contains("0x4"), "{e}");
        assert!(disjoint(&mut [(0, 8), (0, 8)]).is_err());
    }

    #[test]
    fn regions_are_plain_values() {
        let r = CopyRegion::of(3).from(2).to(1);
        assert_eq!((r.dst_offset, r.src_offset, r.len), (1, 2, 3));
        assert_eq!(CopyRegion::default().len, 0);
    }
}
