//! Batched prefetches and discards of managed memory (CUDA 13.0): [`PrefetchBatch`]
//! ([`cuMemPrefetchBatchAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__UNIFIED.html)),
//! [`DiscardBatch`] (`cuMemDiscardBatchAsync`) and [`DiscardPrefetchBatch`]
//! (`cuMemDiscardAndPrefetchBatchAsync`), made on a stream.
//!
//! They take ranges of [`ManagedBuffer`]s, bounds-checked, and note the batch's stream on each
//! buffer as [`ManagedBuffer::prefetch_async`] does, so a buffer dropped after the batch is
//! submitted is given back only after the stream has passed it. A discard changes what the
//! memory holds (its contents become indeterminate until written or prefetched again), so
//! the discarding batches borrow their buffers exclusively, like a copy into them.

use super::batch::batch_stream;
use crate::abi::AbiVersions;
use crate::error::{Error, Result};
use crate::memory::view::range_of;
use crate::memory::{ManagedBuffer, MemLocation};
use crate::stream::Stream;
use bytemuck::Pod;
use cuhost_driver_sys as sys;
use std::ops::RangeBounds;

static PREFETCH_BATCH: AbiVersions = AbiVersions::new("cuMemPrefetchBatchAsync", &[13000]);
static DISCARD_BATCH: AbiVersions = AbiVersions::new("cuMemDiscardBatchAsync", &[13000]);
static DISCARD_PREFETCH_BATCH: AbiVersions = AbiVersions::new("cuMemDiscardAndPrefetchBatchAsync", &[13000]);

/// The address ranges of a batch, and for those that go somewhere, the locations as the
/// driver takes them: each location applies from the range at the same index of `starts` on.
#[derive(Default)]
struct Ranges {
    ptrs: Vec<sys::CUdeviceptr>,
    sizes: Vec<usize>,
    locations: Vec<sys::CUmemLocation>,
    starts: Vec<usize>,
    last: Option<MemLocation>,
}

impl std::fmt::Debug for Ranges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ranges")
            .field("ranges", &self.ptrs.len())
            .field("bytes", &self.sizes.iter().sum::<usize>())
            .field("location_starts", &self.starts)
            .finish()
    }
}

impl Ranges {
    /// Appends the elements `range` of `buffer` (nothing for an empty range), to be moved to
    /// `to` when given; returns the byte span, or an error for a range past the end.
    fn push<T: Pod>(
        &mut self,
        operation: &'static str,
        buffer: &ManagedBuffer<T>,
        range: impl RangeBounds<usize>,
        to: Option<MemLocation>,
    ) -> Result<Option<(u64, u64)>> {
        let (start, end) = range_of(operation, range, buffer.len())?;
        if start == end {
            return Ok(None);
        }
        let size = std::mem::size_of::<T>();
        let (ptr, bytes) = (buffer.as_raw() + (start * size) as u64, (end - start) * size);
        Ok(Some(self.push_span(ptr, bytes, to)))
    }

    /// Appends `bytes` at `ptr`, to be moved to `to` when given; returns the byte span.
    fn push_span(&mut self, ptr: u64, bytes: usize, to: Option<MemLocation>) -> (u64, u64) {
        if let Some(location) = to {
            if self.last != Some(location) {
                self.locations.push(location.as_raw());
                self.starts.push(self.ptrs.len());
                self.last = Some(location);
            }
        }
        self.ptrs.push(ptr);
        self.sizes.push(bytes);
        (ptr, ptr + bytes as u64)
    }

    /// Takes the ranges from `count` on back out (after a refused call of a builder).
    fn truncate(&mut self, count: usize) {
        self.ptrs.truncate(count);
        self.sizes.truncate(count);
        let kept = self.starts.iter().take_while(|&&s| s < count).count();
        self.starts.truncate(kept);
        self.locations.truncate(kept);
        // The next range with a location starts an entry of its own, even one equal to the
        // last kept: the driver takes repeated locations.
        self.last = None;
    }

    fn len(&self) -> usize {
        self.ptrs.len()
    }

    /// Queues these ranges on `stream` with the one driver call of `kind` (none when empty),
    /// after checking the stream again (a batch of a per-thread default stream may have moved
    /// to another thread) and entering its context.
    fn submit(&mut self, kind: Kind, stream: &Stream) -> Result<()> {
        if self.len() == 0 {
            return Ok(());
        }
        batch_stream(kind.submit_operation(), stream)?;
        stream.context().enter()?;
        let (ptrs, sizes, count) = (self.ptrs.as_mut_ptr(), self.sizes.as_mut_ptr(), self.ptrs.len());
        let (locs, starts, runs) =
            (self.locations.as_mut_ptr(), self.starts.as_mut_ptr(), self.locations.len());
        let stream = stream.as_raw();
        // SAFETY: `count` ranges, each inside a live managed buffer that waits for this stream
        // before it is given back (noted when added) and that a discarding batch has borrowed
        // exclusively until now; for a batch that prefetches, one location per run of ranges
        // starting at the index beside it, the first at 0.
        unsafe {
            match kind {
                Kind::Prefetch => {
                    driver!(cuMemPrefetchBatchAsync(ptrs, sizes, count, locs, starts, runs, 0, stream))
                }
                Kind::Discard => driver!(cuMemDiscardBatchAsync(ptrs, sizes, count, 0, stream)),
                Kind::DiscardPrefetch => {
                    driver!(cuMemDiscardAndPrefetchBatchAsync(
                        ptrs, sizes, count, locs, starts, runs, 0, stream
                    ))
                }
            }
        }
    }
}

/// The three kinds of batch, each made by one driver call.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// [`PrefetchBatch`]: `cuMemPrefetchBatchAsync`.
    Prefetch,
    /// [`DiscardBatch`]: `cuMemDiscardBatchAsync`.
    Discard,
    /// [`DiscardPrefetchBatch`]: `cuMemDiscardAndPrefetchBatchAsync`.
    DiscardPrefetch,
}

impl Kind {
    /// The name of the batch's `submit`, as its errors report it.
    fn submit_operation(self) -> &'static str {
        match self {
            Kind::Prefetch => "PrefetchBatch::submit",
            Kind::Discard => "DiscardBatch::submit",
            Kind::DiscardPrefetch => "DiscardPrefetchBatch::submit",
        }
    }
}

/// Adds `ranges` of `buffer` to `list` (to `to`, if given), noting `stream` on the buffer;
/// with `exclusive`, refuses ranges that overlap. Nothing is added on an error.
fn add<T: Pod, R: RangeBounds<usize>>(
    operation: &'static str,
    list: &mut Ranges,
    stream: &Stream,
    buffer: &ManagedBuffer<T>,
    ranges: impl IntoIterator<Item = R>,
    to: Option<MemLocation>,
    exclusive: bool,
) -> Result<()> {
    let before = list.len();
    let mut spans = Vec::new();
    let mut added = Ok(());
    for range in ranges {
        match list.push(operation, buffer, range, to) {
            Ok(Some(span)) if exclusive => spans.push(span),
            Ok(_) => {}
            Err(e) => {
                added = Err(e);
                break;
            }
        }
    }
    if added.is_ok() && exclusive {
        added = disjoint(operation, &mut spans);
    }
    if added.is_ok() && list.len() > before {
        added = buffer.used_on(stream.context(), stream, crate::track::Access::Write);
    }
    if added.is_err() {
        list.truncate(before);
    }
    added
}

/// An [`Error::InvalidArgument`] if two of the byte ranges overlap.
fn disjoint(operation: &'static str, spans: &mut [(u64, u64)]) -> Result<()> {
    spans.sort_unstable();
    match spans.windows(2).find(|w| w[1].0 < w[0].1) {
        None => Ok(()),
        Some(_) => Err(Error::invalid(
            operation,
            "two ranges of the buffer overlap; the operations of a batch run in no particular order, and a \
             discard running at the same time as another access to the memory is undefined, so give each \
             element once",
        )),
    }
}

/// Refuses, before any call, a driver without `calls` or a stream the batches cannot take.
fn ready(calls: &AbiVersions, operation: &'static str, stream: &Stream) -> Result<()> {
    calls.choose()?;
    batch_stream(operation, stream)
}

/// Prefetches of ranges of managed memory, each to a location of its own, queued on one stream
/// by one [`cuMemPrefetchBatchAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__UNIFIED.html)
/// call (CUDA 13.0), made with [`Stream::prefetch_batch`].
///
/// Each prefetch behaves as [`ManagedBuffer::prefetch_async`]; the batch as a whole runs in
/// stream order, its prefetches in no particular order among themselves. The driver needs
/// every device of the system to have concurrent managed access
/// ([`Device::concurrent_managed_access`](crate::device::Device::concurrent_managed_access)) and
/// refuses the batch otherwise.
///
/// ```no_run
/// use cuhost::alloc::MemAttach;
/// use cuhost::memory::{ManagedBuffer, MemLocation};
/// use cuhost::{Context, Device, Stream, StreamFlags};
/// # fn main() -> cuhost::Result<()> {
/// let device = Device::get(0)?;
/// let ctx = Context::primary(&device)?;
/// let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
/// let a = ManagedBuffer::<f32>::new_managed(&stream, 1 << 20, MemAttach::Global)?;
/// let b = ManagedBuffer::<f32>::new_managed(&stream, 1 << 20, MemAttach::Global)?;
/// let mut batch = stream.prefetch_batch()?;
/// batch.prefetch(&a, .., MemLocation::Device(device))?;
/// batch.prefetch(&b, ..1024, MemLocation::Device(device))?.prefetch(&b, 1024.., MemLocation::Host)?;
/// batch.submit()?;
/// stream.synchronize()?;
/// assert_eq!(a.last_prefetch_location()?, Some(MemLocation::Device(device)));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct PrefetchBatch<'a> {
    stream: &'a Stream,
    ranges: Ranges,
}

/// Discards of ranges of managed memory, queued on one stream by one
/// [`cuMemDiscardBatchAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__UNIFIED.html)
/// call (CUDA 13.0), made with [`Stream::discard_batch`].
///
/// Discarding tells the driver that the contents of the memory are no longer needed: it may
/// drop the pages instead of migrating them. Until written again or prefetched, the memory
/// reads as indeterminate values (any bit pattern, which a [`Pod`] element tolerates). The
/// batch borrows each buffer exclusively, as a copy into it would; the driver needs
/// concurrent managed access on every device, as for [`PrefetchBatch`].
///
/// The ranges of one buffer are given in one call (a discard racing another access to the
/// same memory is undefined, so they must not overlap, which the call checks); a second call
/// with the same buffer does not compile:
///
/// ```compile_fail,E0499
/// # fn f(stream: &cuhost::Stream, m: &mut cuhost::ManagedBuffer<u32>) -> cuhost::Result<()> {
/// let mut batch = stream.discard_batch()?;
/// // SAFETY: nothing touches `m` until the stream has run the discard.
/// unsafe {
///     batch.discard(m, [..16])?;
///     batch.discard(m, [16..])?; // `m` is already borrowed by the batch: give both ranges at once
/// }
/// batch.submit()
/// # }
/// ```
///
/// ```no_run
/// # fn f(stream: &cuhost::Stream, m: &mut cuhost::ManagedBuffer<u32>) -> cuhost::Result<()> {
/// let n = m.len();
/// let mut batch = stream.discard_batch()?;
/// // SAFETY: `m` is next used after `stream.synchronize()`, once the discard has run.
/// unsafe { batch.discard(m, [0..16, 32..n])? }; // the ranges of one call are of one type
/// batch.submit()?;
/// stream.synchronize()
/// # }
/// ```
#[derive(Debug)]
pub struct DiscardBatch<'a> {
    stream: &'a Stream,
    ranges: Ranges,
}

/// Discards of ranges of managed memory each followed by a prefetch to a location, queued on
/// one stream by one
/// [`cuMemDiscardAndPrefetchBatchAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__UNIFIED.html)
/// call (CUDA 13.0), made with [`Stream::discard_and_prefetch_batch`]: what a
/// [`DiscardBatch`] then a [`PrefetchBatch`] of the same ranges do, in one call. The pages are
/// made resident at the location without their old contents being moved there, so the memory
/// reads as indeterminate values until written.
#[derive(Debug)]
pub struct DiscardPrefetchBatch<'a> {
    stream: &'a Stream,
    ranges: Ranges,
}

impl Stream {
    /// A new, empty [`PrefetchBatch`] on this stream.
    ///
    /// # Errors
    ///
    /// [`Error::Load`] naming the version needed (13.0) and the one installed, on an older
    /// driver; [`Error::InvalidArgument`] for the legacy default stream, which the driver
    /// refuses for batches, and for another thread's per-thread default stream.
    pub fn prefetch_batch(&self) -> Result<PrefetchBatch<'_>> {
        ready(&PREFETCH_BATCH, "Stream::prefetch_batch", self)?;
        Ok(PrefetchBatch { stream: self, ranges: Ranges::default() })
    }

    /// A new, empty [`DiscardBatch`] on this stream.
    ///
    /// # Errors
    ///
    /// As [`prefetch_batch`](Self::prefetch_batch).
    pub fn discard_batch(&self) -> Result<DiscardBatch<'_>> {
        ready(&DISCARD_BATCH, "Stream::discard_batch", self)?;
        Ok(DiscardBatch { stream: self, ranges: Ranges::default() })
    }

    /// A new, empty [`DiscardPrefetchBatch`] on this stream.
    ///
    /// # Errors
    ///
    /// As [`prefetch_batch`](Self::prefetch_batch).
    pub fn discard_and_prefetch_batch(&self) -> Result<DiscardPrefetchBatch<'_>> {
        ready(&DISCARD_PREFETCH_BATCH, "Stream::discard_and_prefetch_batch", self)?;
        Ok(DiscardPrefetchBatch { stream: self, ranges: Ranges::default() })
    }
}

impl<'a> PrefetchBatch<'a> {
    /// Adds a prefetch of the elements `range` of `buffer` to `location` (an empty range adds
    /// nothing), and notes the batch's stream on the buffer. Ranges may overlap.
    ///
    /// # Errors
    ///
    /// An [`Error::InvalidArgument`], with nothing added, for a range past the end of the
    /// buffer, or a default stream that would not name the same stream for the buffer (see
    /// [`DeviceBuffer::record_stream`](crate::memory::DeviceBuffer::record_stream)).
    pub fn prefetch<T: Pod>(
        &mut self,
        buffer: &'a ManagedBuffer<T>,
        range: impl RangeBounds<usize>,
        location: MemLocation,
    ) -> Result<&mut Self> {
        add(
            "PrefetchBatch::prefetch",
            &mut self.ranges,
            self.stream,
            buffer,
            [range],
            Some(location),
            false,
        )?;
        Ok(self)
    }

    /// The number of prefetches added.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Whether none was added (submitting then calls nothing).
    pub fn is_empty(&self) -> bool {
        self.ranges.len() == 0
    }

    /// Queues the prefetches on the stream with one
    /// [`cuMemPrefetchBatchAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__UNIFIED.html)
    /// call (none for an empty batch).
    ///
    /// # Errors
    ///
    /// The driver's status: where a device of the system lacks concurrent managed access, for
    /// memory it cannot prefetch, or for a fault of earlier work on the stream.
    pub fn submit(mut self) -> Result<()> {
        self.ranges.submit(Kind::Prefetch, self.stream)
    }
}

impl<'a> DiscardBatch<'a> {
    /// Adds discards of the elements `ranges` of `buffer` (empty ranges add nothing), borrowing
    /// it exclusively, and notes the batch's stream on the buffer. `[..]` discards all of it.
    ///
    /// # Errors
    ///
    /// An [`Error::InvalidArgument`], with nothing added, for a range past the end of the
    /// buffer, for ranges that overlap (the driver leaves a discard that races another access
    /// undefined), or as [`PrefetchBatch::prefetch`] fails.
    ///
    /// # Safety
    ///
    /// A discard racing any other access to the same memory is undefined: until the batch's
    /// stream has run the discard, nothing may read, write or prefetch the discarded elements
    /// (not the buffer's own copies, which run on its stream; not work on other streams; not
    /// the host). Order such work after it: on the batch's stream, after an event recorded
    /// there, or after synchronizing the stream. Safe code cannot discard:
    ///
    /// ```compile_fail,E0133
    /// # fn f(stream: &cuhost::Stream, m: &mut cuhost::ManagedBuffer<u32>) -> cuhost::Result<()> {
    /// let mut batch = stream.discard_batch()?;
    /// batch.discard(m, [..])?;
    /// batch.submit()
    /// # }
    /// ```
    pub unsafe fn discard<T: Pod, R: RangeBounds<usize>>(
        &mut self,
        buffer: &'a mut ManagedBuffer<T>,
        ranges: impl IntoIterator<Item = R>,
    ) -> Result<&mut Self> {
        add("DiscardBatch::discard", &mut self.ranges, self.stream, buffer, ranges, None, true)?;
        Ok(self)
    }

    /// The number of ranges added.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Whether none was added (submitting then calls nothing).
    pub fn is_empty(&self) -> bool {
        self.ranges.len() == 0
    }

    /// Queues the discards on the stream with one
    /// [`cuMemDiscardBatchAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__UNIFIED.html)
    /// call (none for an empty batch).
    ///
    /// # Errors
    ///
    /// As [`PrefetchBatch::submit`].
    pub fn submit(mut self) -> Result<()> {
        self.ranges.submit(Kind::Discard, self.stream)
    }
}

impl<'a> DiscardPrefetchBatch<'a> {
    /// Adds discards of the elements `ranges` of `buffer`, each followed by a prefetch to
    /// `location` (empty ranges add nothing), borrowing the buffer exclusively, and notes the
    /// batch's stream on it. `[..]` takes all of it.
    ///
    /// # Errors
    ///
    /// As [`DiscardBatch::discard`].
    ///
    /// # Safety
    ///
    /// As for [`DiscardBatch::discard`]: nothing touches the discarded elements before the
    /// batch's stream has run the discard.
    pub unsafe fn discard_and_prefetch<T: Pod, R: RangeBounds<usize>>(
        &mut self,
        buffer: &'a mut ManagedBuffer<T>,
        ranges: impl IntoIterator<Item = R>,
        location: MemLocation,
    ) -> Result<&mut Self> {
        let operation = "DiscardPrefetchBatch::discard_and_prefetch";
        add(operation, &mut self.ranges, self.stream, buffer, ranges, Some(location), true)?;
        Ok(self)
    }

    /// The number of ranges added.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Whether none was added (submitting then calls nothing).
    pub fn is_empty(&self) -> bool {
        self.ranges.len() == 0
    }

    /// Queues the discards and prefetches on the stream with one
    /// [`cuMemDiscardAndPrefetchBatchAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__UNIFIED.html)
    /// call (none for an empty batch).
    ///
    /// # Errors
    ///
    /// As [`PrefetchBatch::submit`].
    pub fn submit(mut self) -> Result<()> {
        self.ranges.submit(Kind::DiscardPrefetch, self.stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;

    #[test]
    fn locations_run_over_consecutive_ranges() {
        let (gpu, host) = (Some(MemLocation::Device(Device::from_raw(0))), Some(MemLocation::Host));
        let mut r = Ranges::default();
        for (i, to) in [gpu, gpu, host, host, host, gpu].into_iter().enumerate() {
            r.push_span(0x1000 * i as u64, 16, to);
        }
        assert_eq!(r.starts, [0, 2, 5]);
        assert_eq!(r.locations.len(), 3);
        assert_eq!(r.len(), 6);
        // A refused call takes its ranges, and the location entries starting among them, out.
        r.truncate(4);
        assert_eq!((r.len(), r.starts.as_slice()), (4, &[0, 2][..]));
        assert_eq!(r.locations.len(), 2);
        r.push_span(0x9000, 16, host);
        assert_eq!(r.starts, [0, 2, 4]);
        r.truncate(0);
        assert!(r.starts.is_empty() && r.locations.is_empty() && r.ptrs.is_empty());
    }

    #[test]
    fn discards_without_locations_keep_none() {
        let mut r = Ranges::default();
        r.push_span(0x1000, 8, None);
        r.push_span(0x2000, 8, None);
        assert!(r.starts.is_empty() && r.locations.is_empty());
        assert_eq!(r.sizes, [8, 8]);
    }

    #[test]
    fn overlapping_ranges_are_refused() {
        assert!(disjoint("t", &mut [(16, 32), (0, 16)]).is_ok());
        assert!(matches!(disjoint("t", &mut [(16, 32), (0, 17)]), Err(Error::InvalidArgument { .. })));
    }
}
