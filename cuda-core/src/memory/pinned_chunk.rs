//! [`PinnedChunk`]: a disjoint part of a [`PinnedBuffer`](super::PinnedBuffer) that records
//! its own copies, so that the parts of one buffer copy on different streams at once; and
//! [`PinnedHost`], the pinned memory that stream-ordered copies take.

use crate::error::Result;
use crate::track::HostUses;
use bytemuck::Pod;
use std::marker::PhantomData;

/// `len` elements of a [`PinnedBuffer`](super::PinnedBuffer), from
/// [`PinnedBuffer::chunks_mut`](super::PinnedBuffer::chunks_mut): disjoint from the other
/// chunks, borrowing the buffer exclusively, and recording the stream-ordered copies that use
/// it as the buffer does.
///
/// A chunk's copies on one stream are ordered with its copies on others (a copy waits for the
/// chunk's copies in flight that conflict with it), but not with the other chunks' copies:
/// that is what lets a pipeline stage chunk `i` in on one stream while chunk `i + 1` is copied
/// on another. [`as_slice`](Self::as_slice) and [`as_mut_slice`](Self::as_mut_slice) wait for
/// this chunk's copies only. Copies of a chunk cannot be captured into a graph.
///
/// ```no_run
/// # use cuhost::{Context, Device, DeviceBuffer, PinnedBuffer, Stream, StreamFlags};
/// # fn main() -> cuhost::Result<()> {
/// let ctx = Context::primary(&Device::get(0)?)?;
/// let streams = [Stream::new(&ctx, StreamFlags::NON_BLOCKING)?, Stream::new(&ctx, StreamFlags::NON_BLOCKING)?];
/// let mut device = DeviceBuffer::<f32>::zeroed(&streams[0], 1 << 20)?;
/// let mut host = PinnedBuffer::from_fn(1 << 20, |i| i as f32)?;
/// for (i, chunk) in host.chunks_mut(1 << 16)?.iter().enumerate() {
///     let range = chunk.offset()..chunk.offset() + chunk.len();
///     // 16 copies over two streams, each waited for by its chunk and by the device buffer
///     device.slice_mut(range)?.copy_from_pinned_async(chunk, &streams[i % 2])?;
/// }
/// for s in &streams {
///     s.synchronize()?; // the copies are ordered on their own streams only
/// }
/// let back = device.to_vec()?;
/// assert_eq!(back[12345], 12345.0);
/// # Ok(()) }
/// ```
pub struct PinnedChunk<'a, T: Pod> {
    ptr: *mut T,
    offset: usize,
    len: usize,
    uses: &'a HostUses,
    _marker: PhantomData<&'a mut [T]>,
}

// SAFETY: an exclusive borrow of plain data in the buffer's memory; the tracker is Send + Sync.
unsafe impl<T: Pod> Send for PinnedChunk<'_, T> {}
// SAFETY: shared access reads the memory only after the chunk's pending writes are waited for.
unsafe impl<T: Pod> Sync for PinnedChunk<'_, T> {}

impl<T: Pod> std::fmt::Debug for PinnedChunk<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedChunk")
            .field("ptr", &self.ptr)
            .field("offset", &self.offset)
            .field("len", &self.len)
            .field("copies_in_flight", &self.uses.is_pending())
            .finish()
    }
}

impl<'a, T: Pod> PinnedChunk<'a, T> {
    /// # Safety
    ///
    /// `ptr..ptr + len` lies inside a pinned buffer borrowed exclusively for `'a`, disjoint
    /// from every other chunk, and `uses` is the buffer's tracker for this range.
    pub(crate) unsafe fn new(ptr: *mut T, offset: usize, len: usize, uses: &'a HostUses) -> Self {
        PinnedChunk { ptr, offset, len, uses, _marker: PhantomData }
    }

    super::element_count!();

    /// The index in the buffer of the chunk's first element.
    #[inline]
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The host address of the chunk's first element. Reading through it while a copy writes
    /// the memory is a data race.
    #[inline]
    pub fn as_ptr(&self) -> *const T {
        self.ptr
    }

    /// The elements, once the chunk's copies that write them have completed (waits for them);
    /// fails as [`PinnedBuffer::as_slice`](super::PinnedBuffer::as_slice) does.
    pub fn as_slice(&self) -> Result<&[T]> {
        self.uses.wait(false)?;
        // SAFETY: `len` initialised elements of the borrowed buffer, this chunk's alone; no
        // queued copy writes them, and new ones need `&mut self`.
        let slice = unsafe { std::slice::from_raw_parts(self.ptr, self.len) };
        crate::track::checker::host_access(slice, false);
        Ok(slice)
    }

    /// The elements for writing, once every copy of the chunk has completed (waits for them);
    /// fails as [`PinnedBuffer::as_mut_slice`](super::PinnedBuffer::as_mut_slice) does.
    pub fn as_mut_slice(&mut self) -> Result<&mut [T]> {
        self.uses.wait(true)?;
        // SAFETY: as in `as_slice`, exclusively: no queued copy reads or writes them.
        let slice = unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) };
        crate::track::checker::host_access(slice, true);
        Ok(slice)
    }

    /// Waits for every copy of the chunk in flight; fails as [`PinnedBuffer::synchronize`](super::PinnedBuffer::synchronize)
    /// does.
    pub fn synchronize(&self) -> Result<()> {
        self.uses.wait(true)
    }

    /// Whether copies of the chunk may still be in flight.
    pub fn has_copies_in_flight(&self) -> bool {
        self.uses.is_pending()
    }
}

pub(crate) mod sealed {
    use super::HostUses;
    use crate::error::Result;

    /// What a copy needs of pinned memory: the first element's address, the element count
    /// and the copy tracker.
    pub struct Tracked<'a, T> {
        pub(crate) ptr: *mut T,
        pub(crate) len: usize,
        pub(crate) uses: &'a HostUses,
    }

    /// Pinned memory as copies see it, crate-internal.
    pub trait Sealed<T> {
        /// What a copy about to be queued needs (a buffer first covers the copies of its
        /// chunks).
        fn tracked(&self) -> Result<Tracked<'_, T>>;
    }
}

/// Page-locked host memory that records the stream-ordered copies using it: a whole
/// [`PinnedBuffer`](super::PinnedBuffer) or one of its [`PinnedChunk`]s. The copies between device and pinned memory
/// ([`DeviceViewMut::copy_from_pinned_async`](super::DeviceViewMut::copy_from_pinned_async),
/// [`DeviceView::copy_to_pinned_async`](super::DeviceView::copy_to_pinned_async) and the
/// buffers' forms) take either. Sealed.
pub trait PinnedHost<T: Pod>: sealed::Sealed<T> {}

impl<T: Pod> PinnedHost<T> for PinnedChunk<'_, T> {}

impl<T: Pod> sealed::Sealed<T> for PinnedChunk<'_, T> {
    #[inline]
    fn tracked(&self) -> Result<sealed::Tracked<'_, T>> {
        Ok(sealed::Tracked { ptr: self.ptr, len: self.len, uses: self.uses })
    }
}
