//! [`PinnedBuffer`]: the one owning, typed buffer of page-locked host memory, over any pinned
//! allocator, safe to copy from and to asynchronously.

use super::checked_bytes;
use super::host::HostAllocFlags;
use super::pinned_chunk::{PinnedChunk, PinnedHost, sealed};
use super::pinned_slice::{PinnedSlice, PinnedSliceMut};
use crate::alloc::{HostAllocator, PinnedAllocation, PinnedAllocator, current_pinned_allocator};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::pool::{PinnedMemoryPool, default_pinned_memory_pool};
use crate::track::HostUses;
use bytemuck::Pod;
use cuhost_driver_sys as sys;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Where a pinned buffer's memory came from.
#[derive(Clone)]
enum PinnedSource {
    /// The process-wide default [`PinnedMemoryPool`].
    DefaultPool(&'static PinnedMemoryPool),
    /// Any other pinned allocator.
    Shared(Arc<dyn PinnedAllocator>),
}

impl PinnedSource {
    fn allocator(&self) -> &dyn PinnedAllocator {
        match self {
            PinnedSource::DefaultPool(p) => *p,
            PinnedSource::Shared(a) => &**a,
        }
    }

    /// Allocates `bytes`; the default pool is called directly, not through the trait object.
    /// The memory hooks see the caller of the buffer's constructor.
    #[inline]
    #[track_caller]
    fn allocate(&self, bytes: usize) -> Result<PinnedAllocation> {
        match self {
            PinnedSource::DefaultPool(p) => p.allocate(bytes),
            PinnedSource::Shared(a) => a.allocate(bytes),
        }
    }

    /// Gives `allocation` back, as [`allocate`](Self::allocate) took it.
    ///
    /// # Safety
    ///
    /// As [`PinnedAllocator::deallocate`]: it came from this source and is given back once,
    /// with no copy in flight.
    #[inline]
    #[track_caller]
    unsafe fn deallocate(&self, allocation: PinnedAllocation) -> Result<()> {
        match self {
            // SAFETY: forwarded under the caller's contract.
            PinnedSource::DefaultPool(p) => unsafe { p.deallocate(allocation) },
            // SAFETY: as above.
            PinnedSource::Shared(a) => unsafe { a.deallocate(allocation) },
        }
    }
}

/// `len` elements of `T` in page-locked (pinned) host memory, from a pinned allocator, given
/// back when dropped.
///
/// Copies to and from it run at full bus speed and truly asynchronously, and they are safe:
/// the buffer records each stream-ordered copy that uses it
/// ([`DeviceBuffer::copy_from_pinned_async`](super::DeviceBuffer::copy_from_pinned_async),
/// [`DeviceBuffer::copy_to_pinned_async`](super::DeviceBuffer::copy_to_pinned_async) and the
/// views' forms), and
///
/// * [`as_slice`](Self::as_slice) waits for copies that write it (device to host),
/// * [`as_mut_slice`](Self::as_mut_slice) waits for every copy that uses it,
/// * dropping it keeps the memory from reuse until those copies are done (the pinned pool
///   defers reuse with an event; other allocators wait).
///
/// The memory comes from the thread's pinned allocator
/// ([`alloc::set_pinned_memory_allocator`](crate::alloc::set_pinned_memory_allocator); by default
/// the process-wide [`PinnedMemoryPool`]) with [`new`](Self::new), from a given one with
/// [`new_in`](Self::new_in), or straight from `cuMemHostAlloc` with flags of your choice with
/// [`with_flags`](Self::with_flags). Those buffers are zeroed; [`from_slice`](Self::from_slice)
/// and [`from_fn`](Self::from_fn) write each element once instead, and
/// [`new_uninit`](Self::new_uninit) (unsafe) writes nothing, for staging buffers that a copy from
/// the device fills: the zeroing costs about as much as a 1 MiB `memset` per buffer.
///
/// [`chunks_mut`](Self::chunks_mut) splits it into disjoint [`PinnedChunk`]s that copy on
/// different streams at once, each recording its own copies.
pub struct PinnedBuffer<T: Pod> {
    /// The memory, at least `len` elements of `T`, aligned for them.
    allocation: PinnedAllocation,
    len: usize,
    source: PinnedSource,
    uses: HostUses,
    /// The trackers of the chunks, from the first split on (a buffer never split has none).
    parts: Option<Box<Parts>>,
    _marker: PhantomData<T>,
}

/// The trackers of the chunks of a buffer's last split, folded into the buffer's own before it
/// is used whole again (the chunks only borrow them, so a forgotten chunk loses nothing).
#[derive(Default)]
struct Parts {
    trackers: Mutex<Vec<HostUses>>,
    /// Whether `trackers` may hold trackers: set by a split, cleared once they are all folded;
    /// spares the lock on every whole use after.
    unfolded: AtomicBool,
}

impl Parts {
    /// Whether copies of the chunks that are not folded yet may still be in flight.
    fn have_copies_in_flight(&self) -> bool {
        self.unfolded.load(Ordering::Acquire)
            && self.trackers.lock().unwrap_or_else(PoisonError::into_inner).iter().any(HostUses::is_pending)
    }
}

// SAFETY: the buffer owns its host memory; T is plain data; the copy tracker is Send + Sync.
unsafe impl<T: Pod> Send for PinnedBuffer<T> {}
// SAFETY: shared access reads the memory only after pending writes are waited for.
unsafe impl<T: Pod> Sync for PinnedBuffer<T> {}

impl<T: Pod> std::fmt::Debug for PinnedBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedBuffer")
            .field("ptr", &self.ptr())
            .field("len", &self.len)
            .field("copies_in_flight", &self.uses.is_pending())
            .finish()
    }
}

impl<T: Pod> PinnedBuffer<T> {
    /// Allocates `len` zeroed elements from the thread's pinned allocator (by default the
    /// process-wide [`PinnedMemoryPool`]).
    ///
    /// A length of 0, or one whose byte size overflows, is an [`Error::InvalidArgument`].
    #[track_caller]
    pub fn new(len: usize) -> Result<PinnedBuffer<T>> {
        let source = match current_pinned_allocator() {
            Some(a) => PinnedSource::Shared(a),
            None => PinnedSource::DefaultPool(default_pinned_memory_pool()?),
        };
        PinnedBuffer::allocate(source, len)
    }

    /// Allocates `len` zeroed elements from `allocator`.
    ///
    /// A length of 0, or one whose byte size overflows, is an [`Error::InvalidArgument`];
    /// otherwise it fails when `allocator` does.
    #[track_caller]
    pub fn new_in(len: usize, allocator: Arc<dyn PinnedAllocator>) -> Result<PinnedBuffer<T>> {
        PinnedBuffer::allocate(PinnedSource::Shared(allocator), len)
    }

    /// Allocates `len` zeroed elements with `cuMemHostAlloc` and `flags`, through `ctx`
    /// ([`cuMemHostAlloc`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// Fails as [`new_in`](Self::new_in) does; the driver's status names what it refused
    /// (flags the device does not support, or too little memory it can lock).
    #[track_caller]
    pub fn with_flags(ctx: &Context, len: usize, flags: HostAllocFlags) -> Result<PinnedBuffer<T>> {
        PinnedBuffer::new_in(len, Arc::new(HostAllocator::with_flags(ctx, flags.bits())))
    }

    /// Allocates a pinned copy of `src` from the thread's pinned allocator.
    ///
    /// An empty `src` is an [`Error::InvalidArgument`]; otherwise it fails when the allocator
    /// does.
    #[track_caller]
    pub fn from_slice(src: &[T]) -> Result<PinnedBuffer<T>> {
        // SAFETY: every element is written below, before the buffer is handed out.
        let b = unsafe { PinnedBuffer::new_uninit(src.len())? };
        // SAFETY: `len` elements of fresh memory that nothing else uses; `src` is another
        // allocation of the same length.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), b.ptr(), src.len()) };
        Ok(b)
    }

    /// Allocates `len` elements from the thread's pinned allocator, element `i` being `f(i)`,
    /// each written once.
    ///
    /// Fails as [`new`](Self::new) does.
    #[track_caller]
    pub fn from_fn(len: usize, mut f: impl FnMut(usize) -> T) -> Result<PinnedBuffer<T>> {
        // SAFETY: every element is written below, before the buffer is handed out; a panic in
        // `f` drops the buffer, which reads nothing.
        let b = unsafe { PinnedBuffer::<T>::new_uninit(len)? };
        for i in 0..len {
            // SAFETY: `i < len`, inside the allocation, which nothing else uses yet.
            unsafe { b.ptr().add(i).write(f(i)) };
        }
        Ok(b)
    }

    /// Allocates `len` elements from the thread's pinned allocator without writing them: a
    /// pool's memory holds what it last held. The way to a staging buffer at the pool's speed.
    ///
    /// A length of 0, or one whose byte size overflows, is an [`Error::InvalidArgument`].
    ///
    /// # Safety
    ///
    /// Every element must be written before any is read: through [`as_mut_ptr`](Self::as_mut_ptr),
    /// or by copies from the device that together cover the buffer, queued outside a stream
    /// capture (reads wait for those; a copy captured into a graph writes only when a launch of
    /// the graph runs it) and completed without error (a failed copy writes nothing). Until
    /// then no method that hands out or copies the elements may be used:
    /// [`as_slice`](Self::as_slice), [`as_mut_slice`](Self::as_mut_slice),
    /// [`copy_from_slice`](Self::copy_from_slice) (it goes through `as_mut_slice`),
    /// [`to_vec`](Self::to_vec), a copy to the device, or the runtime copies that take the
    /// buffer; each would read or expose uninitialised memory.
    #[inline]
    #[track_caller]
    pub unsafe fn new_uninit(len: usize) -> Result<PinnedBuffer<T>> {
        let source = match current_pinned_allocator() {
            Some(a) => PinnedSource::Shared(a),
            None => PinnedSource::DefaultPool(default_pinned_memory_pool()?),
        };
        PinnedBuffer::allocate_uninit(source, len)
    }

    /// The host address of the first element, for writing (also its device address, under
    /// unified addressing). Writing through it while a copy reads or writes the memory is a
    /// data race: wait for the copies first ([`synchronize`](Self::synchronize)).
    #[inline]
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.ptr()
    }

    #[track_caller]
    fn allocate(source: PinnedSource, len: usize) -> Result<PinnedBuffer<T>> {
        let b = PinnedBuffer::allocate_uninit(source, len)?;
        // SAFETY: `len` elements owned by this buffer; zero bytes are a valid `T` (Pod).
        unsafe { std::ptr::write_bytes(b.ptr(), 0, len) };
        Ok(b)
    }

    /// A buffer over fresh memory whose elements are not written.
    #[inline]
    #[track_caller]
    fn allocate_uninit(source: PinnedSource, len: usize) -> Result<PinnedBuffer<T>> {
        let bytes = checked_bytes::<T>("PinnedBuffer::new", len)?;
        let allocation = source.allocate(bytes)?;
        if allocation.size < bytes || (allocation.ptr as usize) % std::mem::align_of::<T>() != 0 {
            // SAFETY: just allocated by this allocator and never used.
            return Err(unsafe { misfit(&source, allocation, bytes, std::mem::align_of::<T>()) });
        }
        Ok(PinnedBuffer { len, allocation, source, uses: HostUses::new(), parts: None, _marker: PhantomData })
    }

    super::element_count!();

    /// The first element.
    #[inline]
    fn ptr(&self) -> *mut T {
        self.allocation.ptr.cast()
    }

    /// The host address of the first element (also its device address, under unified
    /// addressing). Reading through it while a copy writes the memory is a data race.
    #[inline]
    pub fn as_ptr(&self) -> *const T {
        self.ptr()
    }

    #[cfg(feature = "runtime")]
    /// The host address for a copy that this buffer records.
    #[inline]
    pub(crate) fn as_mut_ptr_unchecked(&mut self) -> *mut T {
        self.ptr()
    }

    /// The copy tracker of the whole buffer, for the copies that record themselves, covering
    /// the copies of its chunks.
    #[inline]
    pub(crate) fn uses(&self) -> Result<&HostUses> {
        self.fold_parts()?;
        Ok(&self.uses)
    }

    /// Folds the trackers of the chunks into the buffer's own; one that cannot be folded (its
    /// copies could neither be ordered nor waited for) stays, with the error returned.
    #[inline]
    fn fold_parts(&self) -> Result<()> {
        match &self.parts {
            Some(parts) if parts.unfolded.load(Ordering::Acquire) => self.fold(parts),
            _ => Ok(()),
        }
    }

    #[cold]
    fn fold(&self, parts: &Parts) -> Result<()> {
        let mut trackers = parts.trackers.lock().unwrap_or_else(PoisonError::into_inner);
        let mut result = Ok(());
        trackers.retain(|part| match self.uses.absorb(part) {
            Ok(()) => false,
            Err(e) => {
                if result.is_ok() {
                    result = Err(e);
                }
                true
            }
        });
        if trackers.is_empty() {
            parts.unfolded.store(false, Ordering::Release);
        }
        result
    }

    /// Splits the buffer into disjoint chunks of `chunk_len` elements (the last one shorter
    /// when `chunk_len` does not divide the length), in order. Each chunk copies to and from
    /// the device on any stream and records its own copies, so copies of different chunks on
    /// different streams run at the same time; what its methods wait for are its own copies.
    ///
    /// Splitting first waits for the copies of the whole buffer in flight. Once the chunks are
    /// gone, the buffer covers their copies: the first whole-buffer use (a copy, a slice,
    /// dropping it) orders itself after them without blocking, by queueing on the stream of
    /// each chunk's last copy a wait for the buffer's other copies and an event after them.
    ///
    /// A `chunk_len` of 0 is an [`Error::InvalidArgument`], and so is a buffer whose copies
    /// were captured into a graph (the graph's launches would not be ordered with the chunks'
    /// copies: capture copies of another buffer). A copy in flight that failed is reported as
    /// by [`synchronize`](Self::synchronize).
    pub fn chunks_mut(&mut self, chunk_len: usize) -> Result<Vec<PinnedChunk<'_, T>>> {
        if chunk_len == 0 {
            return Err(Error::invalid("PinnedBuffer::chunks_mut", "a chunk length of 0; give at least 1"));
        }
        if self.uses.is_shared() {
            return Err(Error::invalid(
                "PinnedBuffer::chunks_mut",
                "copies of this buffer were captured into a graph, whose launches would not be ordered with \
                 the chunks' copies; split another buffer",
            ));
        }
        self.synchronize()?;
        let (ptr, len) = (self.ptr(), self.len);
        let parts = self.parts.get_or_insert_default();
        *parts.unfolded.get_mut() = true;
        let trackers = parts.trackers.get_mut().unwrap_or_else(PoisonError::into_inner);
        trackers.clear();
        let count = len.div_ceil(chunk_len);
        trackers.extend((0..count).map(|_| HostUses::part()));
        Ok(trackers
            .iter()
            .enumerate()
            .map(|(i, uses)| {
                let offset = i * chunk_len;
                // SAFETY: `offset < len` for every chunk index, inside the allocation; the chunks
                // cover disjoint ranges and borrow the buffer exclusively.
                unsafe { PinnedChunk::new(ptr.add(offset), offset, chunk_len.min(len - offset), uses) }
            })
            .collect())
    }

    /// The elements, once the copies that write them have completed (waits for them), as a
    /// guard that dereferences to `&[T]`.
    ///
    /// While the guard lives, nothing writes the elements: a stream-ordered copy into the
    /// buffer needs it borrowed mutably, and a launch of a graph whose captured copies write
    /// it is refused with an [`Error::InvalidArgument`] (see [`PinnedSlice`]).
    ///
    /// Fails when waiting fails (a fault in earlier work of the stream, reported by the
    /// driver), or while the host writes the buffer through a guard of a graph's (see
    /// [`SharedPinnedBuffer`](crate::graph::SharedPinnedBuffer)).
    pub fn as_slice(&self) -> Result<PinnedSlice<'_, T>> {
        let borrow = self.uses()?.borrow(false)?;
        // SAFETY: `len` initialised elements owned by the buffer; no queued copy or launch
        // writes them (waited for above), new stream-ordered copies that write them need
        // `&mut self`, and launches that write them are refused while the borrow is held
        // (memory no capture took has no launches: a capture that takes it from now on only
        // reads it, since one that writes it needs `&mut self`).
        let slice = unsafe { std::slice::from_raw_parts(self.ptr(), self.len) };
        Ok(PinnedSlice::new(slice, borrow))
    }

    /// The elements for writing, once every copy that uses them has completed (waits for
    /// them), as a guard that dereferences to `&mut [T]`.
    ///
    /// While the guard lives, nothing reads or writes the elements but the host: stream-ordered
    /// copies need the buffer borrowed, and a launch of a graph whose captured copies use it
    /// is refused with an [`Error::InvalidArgument`] (see [`PinnedSliceMut`]).
    ///
    /// When a copy in flight failed, this fails with the status of the wait
    /// (`cuEventSynchronize`).
    pub fn as_mut_slice(&mut self) -> Result<PinnedSliceMut<'_, T>> {
        let borrow = self.uses()?.borrow(true)?;
        // SAFETY: as in `as_slice`, exclusively: no queued copy or launch reads or writes
        // them, `&mut self` keeps new copies and captures out, and launches are refused while
        // the borrow is held.
        let slice = unsafe { std::slice::from_raw_parts_mut(self.ptr(), self.len) };
        Ok(PinnedSliceMut::new(slice, borrow))
    }

    /// Copies `src` into the buffer (after the copies in flight); the lengths must match.
    ///
    /// Lengths that differ are an [`Error::InvalidArgument`]; a failed copy in flight is
    /// reported as by [`as_mut_slice`](Self::as_mut_slice).
    pub fn copy_from_slice(&mut self, src: &[T]) -> Result<()> {
        super::same_len("PinnedBuffer::copy_from_slice", self.len, src.len())?;
        self.as_mut_slice()?.copy_from_slice(src);
        Ok(())
    }

    /// The elements in a new `Vec` (after the copies that write them); fails as
    /// [`as_slice`](Self::as_slice) does.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        Ok(self.as_slice()?.to_vec())
    }

    /// Waits for every copy in flight that uses the buffer; when one of them failed, this fails
    /// with the status of the wait (`cuEventSynchronize`).
    pub fn synchronize(&self) -> Result<()> {
        self.uses()?.wait(true)
    }

    /// The `cuMemHostAlloc` flags the driver reports for the memory
    /// ([`cuMemHostGetFlags`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn driver_flags(&self) -> Result<HostAllocFlags> {
        let mut f = 0;
        // SAFETY: the pointer is a live pinned allocation; one out-parameter.
        unsafe { driver!(cuMemHostGetFlags(&mut f, self.ptr().cast())) }?;
        Ok(HostAllocFlags::from_bits_retain(f))
    }

    /// The device address of the memory in `ctx`, for kernels that read or write it over the
    /// bus ([`cuMemHostGetDevicePointer`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// Memory not mapped into `ctx` (allocated without `DEVICEMAP` on a device without unified
    /// addressing) is refused by the driver with its status.
    pub fn device_ptr(&self, ctx: &Context) -> Result<sys::CUdeviceptr> {
        super::host::host_device_ptr(ctx, self.ptr().cast())
    }

    /// Whether copies that use the buffer (or its chunks) may still be in flight.
    pub fn has_copies_in_flight(&self) -> bool {
        self.uses.is_pending() || self.parts.as_ref().is_some_and(|parts| parts.have_copies_in_flight())
    }
}

/// The error of an allocation too small or misaligned for the buffer asked for, given back.
///
/// # Safety
///
/// `allocation` was just allocated by `source` and never used.
#[cold]
#[inline(never)]
unsafe fn misfit(source: &PinnedSource, allocation: PinnedAllocation, bytes: usize, align: usize) -> Error {
    // SAFETY: the caller's contract.
    let _ = unsafe { source.deallocate(allocation) };
    Error::invalid(
        "PinnedBuffer::new",
        format!(
            "the pinned allocator returned {} bytes at {:p} for {bytes} bytes aligned to {align}",
            allocation.size, allocation.ptr
        ),
    )
}

/// Keeps the error of a drop in `allocator`'s context, or prints it (after `what`, what
/// became of the memory) when the allocator names none.
#[cold]
#[inline(never)]
fn keep_drop_error(allocator: &dyn PinnedAllocator, what: &str, e: Error) {
    match allocator.context() {
        Some(ctx) => ctx.defer(e.dropping("PinnedBuffer", None)),
        None => eprintln!("cuda-core: PinnedBuffer drop: {what}{e}"),
    }
}

impl<T: Pod> Drop for PinnedBuffer<T> {
    /// Gives the memory back to its allocator: with copies in flight, through
    /// [`PinnedAllocator::deallocate_after`] with the event recorded after them (a pool keeps
    /// the memory until that event has completed; other allocators wait for it).
    ///
    /// An error is kept in a context, for [`Context::take_deferred_errors`] (and reported by the
    /// next call through it): with copies in flight, in the context of the last copy's stream;
    /// otherwise in the allocator's context ([`PinnedAllocator::context`]; the default pool's is
    /// the primary context of device 0), or printed to standard error when the allocator names
    /// none.
    ///
    /// When copies of a chunk can neither be ordered before the release nor waited for, the
    /// memory is kept (leaked) rather than given back under them, and the error is reported.
    #[inline]
    #[track_caller]
    fn drop(&mut self) {
        if let Err(e) = self.fold_parts() {
            // Kept, not given back: copies of a chunk may still use it.
            return keep_drop_error(self.source.allocator(), "the memory is kept: ", e);
        }
        if self.uses.is_shared() && self.hand_over_release() {
            return;
        }
        let copies = self.uses.take_in_flight();
        // SAFETY: the allocation came from this source and is given back once; the copies still
        // in flight were all queued before `copies` was recorded, and the tracker records it no
        // more (it handed it over).
        unsafe { give_back(&self.source, self.allocation, copies) }
    }
}

impl<T: Pod> PinnedBuffer<T> {
    /// For a buffer whose copies a capture took: hands the release to the state the buffer
    /// shares with the graphs, which may launch those copies later; it runs once the last of
    /// them lets go (see the rule's capture section in `track`). False when nothing was handed
    /// over.
    #[cold]
    #[inline(never)]
    fn hand_over_release(&mut self) -> bool {
        let (source, allocation) = (self.source.clone(), self.allocation);
        // SAFETY: the release runs once, when the last holder lets go: the allocation is given
        // back there only (handed over, not given back by the drop), and the event it gets
        // covers every copy and launch recorded on the buffer.
        let release = move |copies| unsafe { give_back(&source, allocation, copies) };
        self.uses.hand_over(release)
    }
}

/// Gives `allocation` back to `source` after `copies` (the event recorded after the copies in
/// flight, if any); an error is kept in a context, or printed when the allocator names none.
///
/// # Safety
///
/// `allocation` came from `source` and is given back once; every copy that may still use it
/// was queued before `copies` was recorded.
#[inline(always)]
unsafe fn give_back(
    source: &PinnedSource,
    allocation: PinnedAllocation,
    copies: Option<crate::event::Event>,
) {
    match copies {
        Some(copies) => {
            let ctx = copies.context().clone();
            // SAFETY: the caller's contract.
            if let Err(e) = unsafe { source.allocator().deallocate_after(allocation, copies) } {
                ctx.defer(e.dropping("PinnedBuffer", None));
            }
        }
        None => {
            // SAFETY: as above, with no copy in flight.
            if let Err(e) = unsafe { source.deallocate(allocation) } {
                keep_drop_error(source.allocator(), "", e);
            }
        }
    }
}

impl<T: Pod> PinnedHost<T> for PinnedBuffer<T> {}

impl<T: Pod> sealed::Sealed<T> for PinnedBuffer<T> {
    #[inline]
    fn tracked(&self) -> Result<sealed::Tracked<'_, T>> {
        Ok(sealed::Tracked { ptr: self.as_ptr().cast_mut(), len: self.len(), uses: self.uses()? })
    }
}
