//! [`DeviceBuffer`]: the one owning, typed buffer of device (or managed) memory, over any
//! allocator, freed in stream order.

use super::checked_bytes;
use super::source::Source;
use super::space::{DeviceOnly, MemorySpace};
use crate::alloc::{Allocator, DeviceAllocation};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::stream::Stream;
use crate::stream::capturing;
use crate::track::{Access, HeldStream, OwnStream, Retained, StreamUses, scopes};
use bytemuck::Pod;
use cuhost_driver_sys as sys;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::panic::Location;
use std::sync::Arc;

/// `len` elements of `T` in memory space `S` ([`DeviceOnly`] by default, or
/// [`Managed`](super::Managed)), from an allocator, given back in stream order when dropped.
///
/// * **Where the memory comes from.** [`DeviceBuffer::new`] asks the thread's current
///   allocator ([`alloc::set_allocator`](crate::alloc::set_allocator),
///   [`alloc::using_allocator`](crate::alloc::using_allocator)); with none set, the
///   [`MemoryPool`](crate::pool::MemoryPool) of the stream's device. [`DeviceBuffer::new_in`]
///   names the allocator: plain `cuMemAlloc` ([`DeviceAllocator`](crate::alloc::DeviceAllocator)),
///   the stream-ordered allocator of the driver
///   ([`AsyncAllocator`](crate::mempool::AsyncAllocator), on the default or a created
///   [`MemPool`](crate::mempool::MemPool)), a `MemoryPool`, or an [`Allocator`] of yours.
///   Managed memory is [`ManagedBuffer::new_managed`](super::ManagedBuffer::new_managed).
/// * **Stream order.** A buffer belongs to the stream it was allocated on; it is given back in
///   that stream's order, so work queued there before the drop may still use it. Every safe
///   operation that queues work touching the buffer, or a view of it, on another stream
///   (`_async` copies and memsets, prefetches, kernel launches, NCCL calls) notes that stream
///   on the buffer, and the memory is not reused until those streams have passed the point of
///   the drop: nothing to declare by hand. This holds whatever the allocator. On the buffer's
///   own stream this costs nothing; on another stream, one comparison and a short lock per
///   operation and one event per noted stream when the buffer is dropped (see the guide's
///   memory chapter). [`set_stream`](Self::set_stream) moves the buffer to another stream.
/// * **Synchronous copies** (`copy_from`, `copy_to`, `to_vec`, and the views' synchronous
///   copies and memsets) run in the buffer's stream's order and return when they are done. On
///   a buffer whose stream is the per-thread default stream of another thread they are an
///   [`Error::InvalidArgument`] (the handle would name this thread's stream instead): move the
///   buffer with [`set_stream`](Self::set_stream) first.
/// * **Kernels** take the buffer, or a view of it, as an argument directly (its device address
///   is passed).
///
/// Errors while giving memory back in `Drop` are kept in the context (see
/// [`Context::take_deferred_errors`]); [`free`](Self::free) reports them instead.
pub struct DeviceBuffer<T: Pod, S: MemorySpace = DeviceOnly> {
    /// The device address of the first element; a kernel argument points at this field.
    pub(crate) ptr: sys::CUdeviceptr,
    len: usize,
    /// The bytes of the allocation (`DeviceAllocation::size`), at `ptr`.
    size: usize,
    /// The allocator's token for the allocation (`DeviceAllocation::token`). The allocation is
    /// kept as its fields, each read on its own: a buffer made and dropped at once then reads
    /// back what it just wrote word by word, which the processor forwards from its stores.
    token: u64,
    source: Source,
    stream: HeldStream,
    /// Dropped by hand at the end of the buffer's drop, and only when it holds a list: the
    /// buffer used on its own stream only, the common one, then makes no call for it.
    uses: ManuallyDrop<StreamUses>,
    /// Where the buffer's one release stands, and how much it must look at.
    release: Release,
    /// Where the program made the buffer, named by an error its drop keeps.
    made_at: &'static Location<'static>,
    _marker: PhantomData<(T, S)>,
}

/// Where a [`DeviceBuffer`]'s one release stands: not yet made, and how much it must look at
/// then, or made.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Release {
    /// On its own created stream: the release looks only at the noted streams.
    Plain,
    /// On a per-thread default stream, which another thread cannot name, or graph memory: the
    /// release looks beyond the noted streams.
    Careful,
    /// Moved off the stream it was allocated on ([`DeviceBuffer::set_stream`]): as `Careful`,
    /// and the release is ordered after the current stream explicitly (the allocator files the
    /// memory under the first one).
    Moved,
    /// Given back by [`DeviceBuffer::free`]: the drop does nothing more.
    Done,
}

// SAFETY: the buffer owns its memory, its allocator is Send + Sync, and T is plain data.
unsafe impl<T: Pod, S: MemorySpace> Send for DeviceBuffer<T, S> {}
// SAFETY: shared access only reads the handle; the driver orders access to the memory.
unsafe impl<T: Pod, S: MemorySpace> Sync for DeviceBuffer<T, S> {}

impl<T: Pod, S: MemorySpace> std::fmt::Debug for DeviceBuffer<T, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .field("space", &S::NAME)
            .field("allocator", &self.source.name())
            .field("stream", &self.stream.as_raw())
            .finish()
    }
}

impl<T: Pod> DeviceBuffer<T> {
    /// Allocates `len` elements for use on `stream` from the thread's current allocator (by
    /// default the [`MemoryPool`](crate::pool::MemoryPool) of the stream's device). The
    /// contents are whatever the memory held.
    ///
    /// On a stream being captured into a graph, whatever the allocator, the buffer is graph
    /// memory: an allocation node of the capture, usable by that capture's work only, freed in
    /// the graph (by a free node when dropped inside the capture, at the end otherwise), and
    /// refused everywhere else (see the rule's capture section in `track`, and the guide's
    /// graphs chapter).
    ///
    /// A length of 0, or one whose byte size overflows, is an [`Error::InvalidArgument`].
    #[inline]
    #[track_caller]
    pub fn new(stream: &Stream, len: usize) -> Result<DeviceBuffer<T>> {
        let bytes = checked_bytes::<T>("DeviceBuffer::new", len)?;
        let source = Source::current(stream)?;
        // SAFETY: device memory from any allocator is device memory.
        unsafe { DeviceBuffer::allocate(source, stream, len, bytes) }
    }

    /// Allocates `len` elements for use on `stream` from `allocator`.
    ///
    /// A length of 0, or one whose byte size overflows, is an [`Error::InvalidArgument`];
    /// otherwise it fails when `allocator` does ([`Error::OutOfMemory`] from a pool, or the
    /// driver's status from a plain allocator).
    #[track_caller]
    pub fn new_in(stream: &Stream, len: usize, allocator: Arc<dyn Allocator>) -> Result<DeviceBuffer<T>> {
        let bytes = checked_bytes::<T>("DeviceBuffer::new_in", len)?;
        // SAFETY: as in `new`.
        unsafe { DeviceBuffer::allocate(Source::Shared(allocator), stream, len, bytes) }
    }

    /// Allocates `len` elements set to zero bytes, in `stream`'s order
    /// ([`cuMemsetD8Async`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// Fails as [`DeviceBuffer::new`] does, or with the memset's status.
    #[track_caller]
    pub fn zeroed(stream: &Stream, len: usize) -> Result<DeviceBuffer<T>> {
        let mut b = DeviceBuffer::new(stream, len)?;
        b.view_mut().memset_d8_async(0, stream)?;
        Ok(b)
    }

    /// Allocates a buffer on `stream` holding a copy of `src`; returns once the copy is done.
    ///
    /// On a stream being captured, the buffer is graph memory (see [`DeviceBuffer::new`]) and
    /// the copy is captured: `src` is staged in a pinned buffer that the graph holds, and every
    /// launch fills the buffer with `src` as it was at the call.
    ///
    /// An empty `src` is an [`Error::InvalidArgument`], as for [`DeviceBuffer::new`]; the
    /// allocation's and the copy's failures are returned.
    #[track_caller]
    pub fn from_slice(stream: &Stream, src: &[T]) -> Result<DeviceBuffer<T>> {
        let mut b = DeviceBuffer::new(stream, src.len())?;
        if let HeldStream::Captured(_) = b.stream {
            b.fill_in_capture(src, stream)?;
            return Ok(b);
        }
        b.copy_from(src)?;
        Ok(b)
    }

    /// Captures a copy of `src` into this graph memory on `stream`, through a pinned buffer the
    /// graph holds (a synchronous copy would break the capture). The staging buffer is
    /// allocated with the calling thread in relaxed capture mode: a pinned allocation may be
    /// refused during a capture otherwise, and it does not wait for captured work.
    #[cold]
    fn fill_in_capture(&mut self, src: &[T], stream: &Stream) -> Result<()> {
        use crate::graph::{CaptureMode, exchange_capture_mode};
        let previous = exchange_capture_mode(CaptureMode::Relaxed)?;
        let staged = super::PinnedBuffer::from_slice(src);
        exchange_capture_mode(previous)?;
        // Captured: the graph holds the pinned buffer's state, and its release once dropped.
        self.copy_from_pinned_async(&staged?, stream)
    }
}

impl<T: Pod, S: MemorySpace> DeviceBuffer<T, S> {
    /// Allocates `bytes` from `source` and wraps them.
    ///
    /// # Safety
    ///
    /// `source` hands out memory of space `S`.
    #[inline]
    #[track_caller]
    pub(crate) unsafe fn allocate(
        source: Source,
        stream: &Stream,
        len: usize,
        bytes: usize,
    ) -> Result<DeviceBuffer<T, S>> {
        let made_at = Location::caller();
        source.allocate(bytes, stream, |source, allocation, held| DeviceBuffer {
            ptr: allocation.ptr,
            len,
            size: allocation.size,
            token: allocation.token,
            source,
            release: if held.is_careful() { Release::Careful } else { Release::Plain },
            uses: ManuallyDrop::new(held.uses()),
            stream: held,
            made_at,
            _marker: PhantomData,
        })
    }

    /// Adopts memory that `allocator` handed out: the buffer gives it back to `allocator` in
    /// `stream`'s order when dropped. This is how memory of other origins (imported, mapped,
    /// made by another library) becomes a buffer: implement [`Allocator`] for its owner.
    ///
    /// A length of 0, or more elements than `allocation.size` bytes hold, is an
    /// [`Error::InvalidArgument`].
    ///
    /// # Safety
    ///
    /// `allocation` came from `allocator.allocate` (or is memory `allocator.deallocate` gives
    /// back correctly), is owned by nothing else, is memory of space `S` usable in `stream`'s
    /// context, and its address is aligned for `T`.
    #[track_caller]
    pub unsafe fn from_allocation(
        stream: &Stream,
        allocator: Arc<dyn Allocator>,
        allocation: DeviceAllocation,
        len: usize,
    ) -> Result<DeviceBuffer<T, S>> {
        let bytes = checked_bytes::<T>("DeviceBuffer::from_allocation", len)?;
        if bytes > allocation.size {
            return Err(Error::invalid(
                "DeviceBuffer::from_allocation",
                format!("{len} elements need {bytes} bytes but the allocation has {}", allocation.size),
            ));
        }
        Ok(DeviceBuffer {
            ptr: allocation.ptr,
            len,
            size: allocation.size,
            token: allocation.token,
            source: Source::Shared(allocator),
            stream: HeldStream::Counted(stream.clone()),
            uses: ManuallyDrop::new(StreamUses::new()),
            release: if stream.is_per_thread() { Release::Careful } else { Release::Plain },
            made_at: Location::caller(),
            _marker: PhantomData,
        })
    }

    /// The device address of the first element.
    #[inline]
    pub fn as_raw(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    super::element_count!();

    /// The allocation behind the buffer: its address, the bytes reserved (an allocator may
    /// round the request up) and the allocator's token.
    #[inline]
    pub fn allocation(&self) -> DeviceAllocation {
        DeviceAllocation { ptr: self.ptr, size: self.size, token: self.token }
    }

    /// Whether the memory was allocated on a stream being captured: graph memory, which
    /// exists only inside that capture's graph (see the rule's capture section in `track`).
    #[inline]
    pub(crate) fn is_graph_memory(&self) -> bool {
        matches!(self.stream, HeldStream::Captured(_))
    }

    /// The short name of the allocator the memory came from (`MemoryPool`, `cuMemAlloc`, ...).
    pub fn allocator_name(&self) -> &'static str {
        self.source.name()
    }

    /// The context the memory belongs to (the stream's).
    #[inline]
    pub fn context(&self) -> &Context {
        self.stream.context()
    }

    /// The stream the buffer is ordered on: the one it was allocated on, or last given with
    /// [`set_stream`](Self::set_stream).
    #[inline]
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Orders the buffer on `stream` from now on: synchronous copies run there, and the memory
    /// is given back after the work queued there (and on the streams it was on before). Work
    /// queued on `stream` from now on runs after the work queued so far on the old stream (one
    /// event recorded there and waited for on `stream`).
    ///
    /// While the old or the new stream is being captured into a graph, the new one cannot be
    /// ordered after the old one: that is an [`Error::InvalidArgument`], and the buffer stays.
    ///
    /// A default stream that would not name the same stream where the buffer is used (a
    /// per-thread default stream of another thread, the default stream of another context) is
    /// an [`Error::InvalidArgument`], and the buffer stays where it was. Leaving another
    /// thread's per-thread default stream waits for it (through its context): it cannot be
    /// named from here.
    pub fn set_stream(&mut self, stream: &Stream) -> Result<()> {
        if *stream == *self.stream {
            return Ok(());
        }
        if let HeldStream::Captured(_) = self.stream {
            return Err(Error::refused(
                crate::error::Reason::DURING_CAPTURE,
                "DeviceBuffer::set_stream",
                "the buffer was allocated in a stream capture: its memory node's free is captured on the \
                 stream it was allocated on, so it stays there; use it on other streams of the capture directly",
            ));
        }
        crate::track::nameable(self.stream.context(), stream)?;
        // Work queued on the new stream from now on runs after what is queued on the old one
        // (the buffer's own work, and that of the block's earlier owners). A stream being
        // captured cannot wait for it: refused, and the buffer stays.
        if crate::track::wait_for(stream, &self.stream)? == crate::track::Ordered::Captured {
            return Err(Error::refused(
                crate::error::Reason::DURING_CAPTURE,
                "DeviceBuffer::set_stream",
                "the new stream is being captured into a graph, so it cannot wait for the work queued on the \
                 buffer's stream; move the buffer before the capture begins or after it ends",
            ));
        }
        if !self.stream.is_other_threads() {
            self.uses.note_queued(&self.stream);
        }
        self.stream = HeldStream::Counted(stream.clone());
        self.release = Release::Moved;
        Ok(())
    }

    /// Declares that work queued on `stream` uses the buffer: when it is dropped, the memory is
    /// not reused until `stream` has passed that point (PyTorch's `record_stream`), whatever the
    /// allocator. The crate's own operations do this by themselves; this is for work queued
    /// outside it (raw calls, other libraries) on a stream other than the buffer's. Recording
    /// the buffer's own stream does nothing.
    ///
    /// The first time a stream is noted (by this call or by an operation), it is made to wait
    /// for the work queued so far on the buffer's own stream; later uses there wait for nothing
    /// more. So kernels that signal each other through the buffer from two streams (one spins
    /// until the other writes a flag) record the second stream before the spinning kernel is
    /// queued: noted afterwards, the signalling stream would wait for the spinner.
    ///
    /// A default stream that would not name the same stream here (a per-thread default stream
    /// of another thread, the default stream of another context) is an
    /// [`Error::InvalidArgument`].
    pub fn record_stream(&self, stream: &Stream) -> Result<()> {
        self.used_on(self.stream.context(), stream, Access::Write)
    }

    /// Notes that work touching the buffer is about to be queued on `stream` with `current`
    /// made current (see [`DeviceView::used_on`](super::DeviceView)); nothing to do on the
    /// buffer's own stream.
    #[inline]
    pub(crate) fn used_on(&self, current: &Context, stream: &Stream, access: Access) -> Result<()> {
        self.uses.note(current, self.stream.own(), stream, access)
    }

    #[cfg(feature = "nccl")]
    /// Notes that a call inside the open NCCL group `group` uses the buffer: dropped before the
    /// group ends, it is given back only after the group has queued its calls.
    #[inline]
    pub(crate) fn taken_by_group(&self, group: u64) {
        self.uses.note_group(group)
    }

    /// The other streams the buffer was used on, noted by its operations or with
    /// [`record_stream`](Self::record_stream).
    pub fn recorded_streams(&self) -> Vec<Stream> {
        self.uses.snapshot()
    }

    crate::memory::device_views!("DeviceBuffer");

    /// Copies `src` from the host into the buffer, in the buffer's stream's order, and returns
    /// when it is done; the lengths must match
    /// ([`cuMemcpyHtoDAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// Lengths that differ are an [`Error::InvalidArgument`], checked before any call.
    pub fn copy_from(&mut self, src: &[T]) -> Result<()> {
        self.view_mut().copy_from_host(src)
    }

    /// Copies the buffer into `dst` on the host, in the buffer's stream's order, and returns
    /// when it is done; the lengths must match
    /// ([`cuMemcpyDtoHAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// Lengths that differ are an [`Error::InvalidArgument`], checked before any call; an
    /// earlier kernel's fault on the stream is reported here by the driver's status.
    pub fn copy_to(&self, dst: &mut [T]) -> Result<()> {
        self.view().copy_to_host(dst)
    }

    /// Copies the buffer into a new `Vec`, as [`copy_to`](Self::copy_to), and fails as it does.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.view().to_vec()
    }

    /// Copies another buffer (of any memory space, context or device) into this one and returns
    /// when it is done, as [`DeviceViewMut::copy_from_device`](super::DeviceViewMut::copy_from_device); the lengths must match.
    ///
    /// Lengths that differ are an [`Error::InvalidArgument`]; a peer copy between devices that
    /// cannot reach each other fails with the driver's status.
    pub fn copy_from_device<S2: MemorySpace>(&mut self, src: &DeviceBuffer<T, S2>) -> Result<()> {
        self.view_mut().copy_from_device(&src.view())
    }

    /// Queues a copy of pinned host memory (a [`PinnedBuffer`](super::PinnedBuffer) or a
    /// [`PinnedChunk`](super::PinnedChunk)) into the buffer on `stream`; safe, because `src`
    /// stays readable but cannot be written or freed until the copy is done
    /// ([`cuMemcpyHtoDAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// Fails as [`DeviceViewMut::copy_from_pinned_async`](super::DeviceViewMut::copy_from_pinned_async)
    /// does: lengths that differ are an [`Error::InvalidArgument`].
    #[inline]
    pub fn copy_from_pinned_async(&mut self, src: &impl super::PinnedHost<T>, stream: &Stream) -> Result<()> {
        self.view_mut().copy_from_pinned_async(src, stream)
    }

    /// Queues a copy of the buffer into pinned host memory (a [`PinnedBuffer`](super::PinnedBuffer)
    /// or a [`PinnedChunk`](super::PinnedChunk)) on `stream`; safe, because `dst` cannot be
    /// read, written or freed until the copy is done
    /// ([`cuMemcpyDtoHAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// Fails as [`DeviceView::copy_to_pinned_async`](super::DeviceView::copy_to_pinned_async)
    /// does: lengths that differ are an [`Error::InvalidArgument`].
    #[inline]
    pub fn copy_to_pinned_async(&self, dst: &mut impl super::PinnedHost<T>, stream: &Stream) -> Result<()> {
        self.view().copy_to_pinned_async(dst, stream)
    }

    /// Gives the memory back now, returning what `Drop` would have kept in the context.
    ///
    /// The error is the allocator's: for memory freed by the driver, its status, which after a
    /// kernel faulted is that fault (`CUDA_ERROR_ILLEGAL_ADDRESS`, for instance). The memory is
    /// given up either way.
    #[track_caller]
    pub fn free(mut self) -> Result<()> {
        let listed = self.uses.holds_list();
        let r = self.give_back(listed);
        self.release = Release::Done;
        r
    }

    /// Gives the memory back once: in the buffer's stream's order, after the other streams it
    /// was used on; after the NCCL groups that use it have queued their calls, when some are
    /// open; never when the work that may use the memory could not be waited for (then it is
    /// kept: a leak, not a reuse under running work).
    ///
    /// This is the one release of a buffer: `Drop` and [`free`](Self::free) call it, saying
    /// whether `uses` holds a list (`listed`). The common buffer (on its own created stream,
    /// nothing noted, no capture anywhere) goes straight back to its source; every other case
    /// is [`give_back_noted`](Self::give_back_noted).
    #[inline]
    #[track_caller]
    fn give_back(&mut self, listed: bool) -> Result<()> {
        if self.release == Release::Plain && (!listed || self.uses.is_untouched()) && !capturing::any() {
            // SAFETY: the allocation came from `source` and is given back once (`Release::Done`
            // is set, or the buffer dropped, by the callers); nothing but the buffer's own stream
            // may use it.
            return unsafe { self.source.deallocate(self.allocation(), &self.stream, &[]) };
        }
        self.give_back_noted()
    }

    /// [`give_back`](Self::give_back) for a buffer used on other streams, moved, on a
    /// per-thread default stream, or inside NCCL groups.
    #[cold]
    #[track_caller]
    fn give_back_noted(&mut self) -> Result<()> {
        if let HeldStream::Captured(alloc) = &self.stream {
            return alloc.free_on_drop();
        }
        // Captured work used the memory: the graphs that hold it release it once they are gone.
        if let Some(cell) = self.uses.take_retained() {
            cell.deposit(self.late_release());
            return Ok(());
        }
        // Its stream is being captured: the release cannot be queued there now. The capture's
        // graph holds it, and it runs once the graph is gone (at once if the capture is
        // discarded).
        if capturing::any() {
            if let Some(capture) = capturing::capture_of(&self.stream)? {
                let cell = Retained::default();
                cell.deposit(self.late_release());
                capture.note(std::sync::Arc::new(cell));
                return Ok(());
            }
        }
        if self.uses.pending_group().is_none() {
            // SAFETY: the allocation came from `source` and is given back once (`Release::Done` is
            // set by the callers); `uses` holds every other stream that may use it.
            return unsafe {
                release(
                    &self.source,
                    self.allocation(),
                    &self.stream,
                    &mut self.uses,
                    self.release == Release::Moved,
                )
            };
        }
        self.late_release()();
        Ok(())
    }

    /// The buffer's release, handed over to run later (once NCCL groups or graphs that use
    /// the memory are done with it).
    fn late_release(&mut self) -> Box<dyn FnOnce() + Send> {
        let late = LateRelease {
            source: self.source.clone(),
            allocation: self.allocation(),
            stream: Stream::clone(&self.stream),
            uses: std::mem::take(&mut *self.uses),
            moved: self.release == Release::Moved,
            made_at: self.made_at,
        };
        Box::new(move || late.run(true))
    }
}

/// Gives `allocation` back to `source` in `stream`'s order, after the streams in `uses` (and
/// after `stream` explicitly when the buffer `moved` there from the stream it was allocated
/// on); streams that cannot be ordered after from here are waited for on the host. Nothing is
/// given back when a wait fails.
///
/// # Safety
///
/// `allocation` came from `source`, is given back once, and every stream other than `stream`
/// that may use it is in `uses`.
#[inline]
#[track_caller]
unsafe fn release(
    source: &Source,
    allocation: DeviceAllocation,
    stream: &Stream,
    uses: &mut StreamUses,
    moved: bool,
) -> Result<()> {
    if stream.is_other_threads() {
        stream.synchronize_for_release()?;
    }
    let mut recorded = uses.take_for_release(stream.context())?;
    if moved {
        recorded.push(stream.clone());
    }
    // SAFETY: the caller's contract; the recorded streams are every other user.
    unsafe { source.deallocate(allocation, stream, &recorded) }
}

/// The release of a buffer dropped while open NCCL groups use it: run once the last of them has
/// queued its calls, so that the release order is worked out then, with those calls queued.
struct LateRelease {
    source: Source,
    allocation: DeviceAllocation,
    stream: Stream,
    uses: StreamUses,
    moved: bool,
    made_at: &'static Location<'static>,
}

impl LateRelease {
    fn run(mut self, queued: bool) {
        if !queued {
            self.stream.context().defer(Error::invalid(
                "DeviceBuffer",
                "a buffer used by an NCCL group of non-blocking communicators is kept (leaked): waiting for \
                 NCCL to queue the group's calls failed or ran out of time, so they may still be queued \
                 later; abort the faulted communicator",
            ).dropping("DeviceBuffer", Some(self.made_at)));
            return;
        }
        if let Some(group) = self.uses.pending_group() {
            if let Err(again) = scopes::defer_to(group, Box::new(move |queued| self.run(queued))) {
                // The group ended meanwhile: look again.
                again(true);
            }
            return;
        }
        // SAFETY: the buffer handed its one release over; `uses` holds its other streams.
        let r = unsafe { release(&self.source, self.allocation, &self.stream, &mut self.uses, self.moved) };
        if let Err(e) = r {
            self.stream.context().defer(e.dropping("DeviceBuffer", Some(self.made_at)));
        }
    }
}

impl<T: Pod, S: MemorySpace> Drop for DeviceBuffer<T, S> {
    #[inline]
    #[track_caller]
    fn drop(&mut self) {
        // Only a buffer whose uses were noted has a list, to look at and to free.
        let listed = self.uses.holds_list();
        if self.release != Release::Done {
            if let Err(e) = self.give_back(listed) {
                self.keep_drop_error(e);
            }
        }
        if listed {
            // SAFETY: dropped once, here, and not used again.
            unsafe { ManuallyDrop::drop(&mut self.uses) };
        }
    }
}

impl<T: Pod, S: MemorySpace> DeviceBuffer<T, S> {
    /// Keeps an error met while the drop gave the memory back, where the next call will report
    /// it.
    #[cold]
    #[inline(never)]
    fn keep_drop_error(&self, e: Error) {
        let e = e.dropping("DeviceBuffer", Some(self.made_at));
        match &self.stream {
            HeldStream::Counted(stream) => stream.context().defer(e),
            HeldStream::Captured(alloc) => alloc.stream().context().defer(e),
            // The allocation is back: the borrowed handle may be gone.
            HeldStream::Kept(_) => self.source.defer(e),
        }
    }
}
