//! The [`Allocator`] and [`PinnedAllocator`] traits, and the events a pool defers reuse on.
//!
//! An allocator hands out raw device (or pinned host) memory. A [`MemoryPool`] is one, and is
//! built on top of another (its *upstream*): the plain, managed and stream-ordered allocators of
//! [`upstream`](super::upstream), or any type of the user's.
//!
//! [`MemoryPool`]: super::MemoryPool

use crate::context::Context;
use crate::error::check;
use crate::{Result, Stream};
use cuda_driver_sys as sys;
use std::marker::PhantomData;

/// A stream as allocators see it: a raw `CUstream` known to be alive for `'a`.
///
/// Made from a [`Stream`] (`StreamRef::from(&stream)`), as the legacy default stream
/// ([`StreamRef::legacy`]), or, unsafely, from a raw handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamRef<'a> {
    raw: sys::CUstream,
    _alive: PhantomData<&'a Stream>,
}

impl<'a> StreamRef<'a> {
    /// The legacy default stream (the null handle).
    pub fn legacy() -> StreamRef<'static> {
        StreamRef { raw: std::ptr::null_mut(), _alive: PhantomData }
    }

    /// Wraps a raw stream handle.
    ///
    /// # Safety
    ///
    /// `raw` is null, `CU_STREAM_LEGACY`, `CU_STREAM_PER_THREAD`, or a stream that stays alive
    /// for `'a`.
    pub unsafe fn from_raw(raw: sys::CUstream) -> StreamRef<'a> {
        StreamRef { raw, _alive: PhantomData }
    }

    /// The raw `CUstream`.
    #[inline]
    pub fn as_raw(self) -> sys::CUstream {
        self.raw
    }

    /// Waits for the work that may still use memory given back on this stream, before a
    /// release that is not stream-ordered (unmapping, closing a handle): the stream's work, or
    /// with no stream, all of `context`'s.
    pub(crate) fn wait_for_users(self, context: &Context) -> Result<()> {
        if self.raw.is_null() {
            context.synchronize()
        } else {
            // SAFETY: the stream is alive for `'a` (the contract of `StreamRef`).
            check("cuStreamSynchronize", unsafe { sys::cuStreamSynchronize(self.raw) })
        }
    }
}

impl<'a> From<&'a Stream> for StreamRef<'a> {
    #[inline]
    fn from(stream: &'a Stream) -> Self {
        StreamRef { raw: stream.as_raw(), _alive: PhantomData }
    }
}

/// Device memory handed out by an [`Allocator`]: its address, its size, and a token the
/// allocator wants back when it is freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DeviceAllocation {
    /// The device address; 0 for a zero-byte allocation.
    pub ptr: sys::CUdeviceptr,
    /// The bytes reserved (a pool rounds the request up).
    pub size: usize,
    /// What the allocator needs to find the allocation again; opaque to everyone else.
    pub token: u64,
}

/// A source of device memory.
///
/// Implement it to give a [`MemoryPool`](super::MemoryPool) your own upstream, or to make
/// your type the current allocator ([`set_allocator`](super::set_allocator)). The stream is
/// the one the memory will first be used on; allocators that are not stream-ordered may
/// ignore it.
pub trait Allocator: Send + Sync {
    /// Allocates at least `size` bytes for use on `stream`.
    ///
    /// An allocator that ran out of memory returns [`Error::OutOfMemory`](crate::Error) or the
    /// driver's `CUDA_ERROR_OUT_OF_MEMORY`; a pool on top of it then releases its cache and
    /// retries once.
    #[track_caller]
    fn allocate(&self, size: usize, stream: StreamRef<'_>) -> Result<DeviceAllocation>;

    /// Gives `allocation` back, ordered after the work queued so far on `stream`.
    ///
    /// An error means the memory could not be given back cleanly (for memory the driver frees,
    /// its status, which after a kernel fault is that fault); the allocation is given up
    /// either way and must not be given back again.
    ///
    /// # Safety
    ///
    /// `allocation` came from `allocate` on this allocator and was not given back before, and no
    /// work that uses it is queued on another stream without being ordered before `stream`.
    #[track_caller]
    unsafe fn deallocate(&self, allocation: DeviceAllocation, stream: StreamRef<'_>) -> Result<()>;

    /// Gives `allocation` back once the work queued so far on `stream` and on every stream of
    /// `recorded` has passed it: what a buffer used on several streams does when it is dropped.
    ///
    /// The default makes `stream` wait for an event recorded now on each other stream, then
    /// calls [`deallocate`](Self::deallocate) on `stream`. A pool that keeps blocks per stream
    /// overrides it to keep the block from reuse until those events have completed.
    ///
    /// The default fails when an event cannot be created, recorded or waited on, with the
    /// driver's status, and otherwise as [`deallocate`](Self::deallocate) does.
    ///
    /// # Safety
    ///
    /// As for [`deallocate`](Self::deallocate); every stream that may still use the memory is
    /// `stream` or in `recorded`.
    #[track_caller]
    unsafe fn deallocate_after(
        &self,
        allocation: DeviceAllocation,
        stream: &Stream,
        recorded: &[Stream],
    ) -> Result<()> {
        join_streams(stream, recorded)?;
        // SAFETY: forwarded under the caller's contract; the other streams' uses are ordered
        // before `stream` now.
        unsafe { self.deallocate(allocation, StreamRef::from(stream)) }
    }

    /// A short name for reports and hooks, e.g. `cuMemAlloc` or `MemoryPool`.
    fn name(&self) -> &'static str {
        "allocator"
    }
}

/// Makes `stream` wait for the work queued so far on each of `others` (an event recorded on
/// each, `cuStreamWaitEvent`, the event destroyed once the wait is queued).
pub(crate) fn join_streams(stream: &Stream, others: &[Stream]) -> Result<()> {
    for other in others.iter().filter(|o| *o != stream) {
        let event = crate::Event::new(other.context(), crate::EventFlags::DISABLE_TIMING)?;
        event.record(other)?;
        stream.wait_event(&event)?;
    }
    Ok(())
}

/// Page-locked host memory handed out by a [`PinnedAllocator`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PinnedAllocation {
    /// The host address; null for a zero-byte allocation.
    pub ptr: *mut u8,
    /// The bytes reserved.
    pub size: usize,
}

// SAFETY: a pinned allocation is an address and a size; it owns nothing thread-bound.
unsafe impl Send for PinnedAllocation {}
// SAFETY: as above; shared references only read the two fields.
unsafe impl Sync for PinnedAllocation {}

/// A source of page-locked (pinned) host memory.
pub trait PinnedAllocator: Send + Sync {
    /// Allocates at least `size` bytes of page-locked host memory.
    ///
    /// An allocator that cannot lock that much memory returns [`Error::OutOfMemory`](crate::Error)
    /// or the driver's `CUDA_ERROR_OUT_OF_MEMORY`.
    #[track_caller]
    fn allocate(&self, size: usize) -> Result<PinnedAllocation>;

    /// Gives `allocation` back.
    ///
    /// An error means the memory could not be given back cleanly (for `cuMemFreeHost`, its
    /// status); the allocation is given up either way.
    ///
    /// # Safety
    ///
    /// `allocation` came from `allocate` on this allocator, was not given back before, and no
    /// queued copy still reads or writes it.
    #[track_caller]
    unsafe fn deallocate(&self, allocation: PinnedAllocation) -> Result<()>;

    /// Gives `allocation` back once the copies that use it, all queued on `stream` before
    /// `event` was recorded there, have completed.
    ///
    /// The default waits for `event` on the host
    /// ([`cuEventSynchronize`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html)),
    /// then calls [`deallocate`](Self::deallocate); a pool overrides it to keep the memory from
    /// reuse until then instead of waiting. The default fails with the wait's status when a
    /// copy before `event` failed, and otherwise as `deallocate` does.
    ///
    /// # Safety
    ///
    /// As for [`deallocate`](Self::deallocate), except that queued copies may still use the
    /// memory: all of them are on `stream`, before `event`; `event` is a live event.
    #[track_caller]
    unsafe fn deallocate_after(
        &self,
        allocation: PinnedAllocation,
        stream: &Stream,
        event: sys::CUevent,
    ) -> Result<()> {
        let _ = stream;
        // SAFETY: the caller vouches that the event is live.
        crate::error::check("cuEventSynchronize", unsafe { sys::cuEventSynchronize(event) })?;
        // SAFETY: no copy uses the memory any more; the rest is the caller's contract.
        unsafe { self.deallocate(allocation) }
    }
}

/// Events a pool records to keep a block from reuse until other streams are done with it.
///
/// Events are identified by a raw handle (`CUevent` as an integer); a pool reuses completed
/// events and never creates one on the path of an allocation served from its cache.
pub trait StreamEvents: Send + Sync {
    /// Creates an event (without timing); an error when the driver cannot make one.
    fn create(&self) -> Result<u64>;
    /// Records `event` on `stream`; an error when the driver refuses the recording.
    fn record(&self, event: u64, stream: StreamRef<'_>) -> Result<()>;
    /// Whether the work before the recording of `event` has completed; never blocks. An event
    /// whose query fails (its context is gone) counts as complete.
    fn is_complete(&self, event: u64) -> bool;
    /// Destroys `event`.
    fn destroy(&self, event: u64);
}
