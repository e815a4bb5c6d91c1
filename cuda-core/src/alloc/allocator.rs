//! The [`Allocator`] and [`PinnedAllocator`] traits, and the events a pool defers reuse on.
//!
//! An allocator hands out raw device (or pinned host) memory. The caching pool
//! (`pool::MemoryPool`) is one, and is built on top of another (its *upstream*): the plain and
//! managed allocators of this module, the stream-ordered `mempool::AsyncAllocator`, or any type
//! of the user's.

use crate::context::Context;
use crate::error::Result;
use crate::event::Event;
use crate::stream::Stream;
use cuhost_driver_sys as sys;
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
    ///
    /// A release path: it neither reports nor consumes `context`'s deferred errors, so a pending
    /// error from elsewhere never makes the release skip its wait; it fails only with the
    /// status of making `context` current or of the wait itself.
    pub(crate) fn wait_for_users(self, context: &Context) -> Result<()> {
        if self.raw.is_null() {
            context.make_current()?;
            // SAFETY: no arguments; `context` is current.
            unsafe { driver!(cuCtxSynchronize()) }
        } else {
            if self.is_default() {
                // The handle names the default stream of the current context.
                context.make_current()?;
            }
            // SAFETY: the stream is alive for `'a` (the contract of `StreamRef`).
            unsafe { driver!(cuStreamSynchronize(self.raw)) }
        }
    }

    /// Whether this is one of the default-stream handles (null, `CU_STREAM_LEGACY`,
    /// `CU_STREAM_PER_THREAD`), which the driver resolves through the current context.
    #[inline]
    pub(crate) fn is_default(self) -> bool {
        self.raw.is_null() || self.raw == sys::CU_STREAM_LEGACY || self.raw == sys::CU_STREAM_PER_THREAD
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
/// Implement it to give a `pool::MemoryPool` your own upstream, or to make your type the
/// current allocator ([`set_allocator`](super::set_allocator)). The stream is
/// the one the memory will first be used on; allocators that are not stream-ordered may
/// ignore it.
///
/// # Safety
///
/// Buffers trust what [`allocate`](Self::allocate) returns: safe code copies to and from the
/// memory, launches kernels on it and hands it to other libraries. An implementation promises
/// that every `Ok(allocation)` it returns for a request of `size` bytes on `stream`
///
/// * is memory exclusively owned by the caller from the moment it is returned until it is
///   given back with [`deallocate`](Self::deallocate) or
///   [`deallocate_after`](Self::deallocate_after): nothing else (no other allocation, no host
///   object, no other process) reads or writes it meanwhile, and it is not handed out again
///   before then;
/// * spans at least `size` bytes from `allocation.ptr`, and `allocation.size` is no more than
///   what it really spans (a zero-byte request may return address 0);
/// * is of the kind the buffer expects: device memory usable in the context of `stream`
///   (where the allocator is behind a `DeviceBuffer`), and managed
///   memory (`cuMemAllocManaged`) where the buffer is a
///   `ManagedBuffer` that the host reads;
/// * is aligned at least as `cuMemAlloc` aligns (256 bytes), so that every element type and
///   vectorised kernel access is aligned;
///
/// and that `deallocate` and `deallocate_after` keep the memory from reuse until the work they
/// are told about (queued on `stream`, and on `recorded`) has passed.
///
/// ```compile_fail,E0200
/// use cuhost::alloc::{Allocator, DeviceAllocation, StreamRef};
///
/// // Without `unsafe impl`, the promises above are not made, and the compiler refuses it.
/// struct Liar;
/// impl Allocator for Liar {
///     fn allocate(&self, _: usize, _: StreamRef<'_>) -> cuhost::Result<DeviceAllocation> {
///         Ok(DeviceAllocation { ptr: 0x1000, size: 1, token: 0 })
///     }
///     unsafe fn deallocate(&self, _: DeviceAllocation, _: StreamRef<'_>) -> cuhost::Result<()> {
///         Ok(())
///     }
/// }
/// ```
pub unsafe trait Allocator: Send + Sync {
    /// Allocates at least `size` bytes for use on `stream`.
    ///
    /// An allocator that ran out of memory returns [`Error::OutOfMemory`](crate::error::Error::OutOfMemory) or the
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
        crate::track::order_after(stream, recorded)?;
        // SAFETY: forwarded under the caller's contract; the other streams' uses are ordered
        // before `stream` now.
        unsafe { self.deallocate(allocation, StreamRef::from(stream)) }
    }

    /// A short name for reports and hooks, e.g. `cuMemAlloc` or `MemoryPool`.
    fn name(&self) -> &'static str {
        "allocator"
    }

    /// The context the allocator makes current to allocate and free, if it has one of its
    /// own: a buffer on a default stream of another context is refused (the driver would read
    /// that handle as this context's default stream). The default, `None`, checks nothing.
    fn context(&self) -> Option<&Context> {
        None
    }
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
///
/// # Safety
///
/// `PinnedBuffer` writes through what [`allocate`](Self::allocate)
/// returns and lends it out as `&[T]` and `&mut [T]`. An implementation promises that every
/// `Ok(allocation)` it returns for a request of `size` bytes
///
/// * is exclusively owned by the caller until it is given back with
///   [`deallocate`](Self::deallocate) or [`deallocate_after`](Self::deallocate_after): no Rust
///   value, other allocation or other thread reads or writes it meanwhile;
/// * is page-locked host memory (so that the driver may copy to and from it asynchronously),
///   valid for reads and writes of at least `size` bytes from `allocation.ptr` until it is
///   given back, with `allocation.size` no more than what it spans (a zero-byte request may
///   return a null pointer);
///
/// and that `deallocate_after` keeps the memory from reuse until the copies it is told about
/// have completed.
///
/// ```compile_fail,E0200
/// use cuhost::alloc::{PinnedAllocation, PinnedAllocator};
///
/// // Without `unsafe impl`, the promises above are not made, and the compiler refuses it.
/// struct Evil(usize);
/// impl PinnedAllocator for Evil {
///     fn allocate(&self, size: usize) -> cuhost::Result<PinnedAllocation> {
///         Ok(PinnedAllocation { ptr: self.0 as *mut u8, size })
///     }
///     unsafe fn deallocate(&self, _: PinnedAllocation) -> cuhost::Result<()> {
///         Ok(())
///     }
/// }
/// ```
pub unsafe trait PinnedAllocator: Send + Sync {
    /// Allocates at least `size` bytes of page-locked host memory.
    ///
    /// An allocator that cannot lock that much memory returns [`Error::OutOfMemory`](crate::error::Error::OutOfMemory)
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

    /// Gives `allocation` back once the copies that use it have completed: every copy still in
    /// flight was queued, on whatever stream, before `copies` was recorded. This is what a
    /// `PinnedBuffer` dropped with copies in flight calls, with the event
    /// its copy tracker recorded after them (in the context of the last copy's stream).
    ///
    /// The default waits for `copies` on the host
    /// ([`cuEventSynchronize`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html)),
    /// destroys it, then calls [`deallocate`](Self::deallocate); a pool overrides it to keep the
    /// memory (and the event) from reuse until the event has completed instead of waiting. The
    /// wait does not report or consume deferred errors of the event's context. The default
    /// fails with the wait's status when a copy before `copies` failed (the memory then stays
    /// allocated: the copy's end is unknown), and otherwise as `deallocate` does.
    ///
    /// # Safety
    ///
    /// As for [`deallocate`](Self::deallocate), except that queued copies may still use the
    /// memory: all of them were queued before `copies` was recorded, and `copies` is not
    /// recorded again by anyone else.
    #[track_caller]
    unsafe fn deallocate_after(&self, allocation: PinnedAllocation, copies: Event) -> Result<()> {
        // SAFETY: the event is alive while `copies` is.
        unsafe { driver!(cuEventSynchronize(copies.as_raw())) }?;
        drop(copies);
        // SAFETY: no copy uses the memory any more; the rest is the caller's contract.
        unsafe { self.deallocate(allocation) }
    }

    /// The context whose deferred errors keep a failure to give memory back in a `Drop`
    /// (a `PinnedBuffer` dropped with no copy in flight), where
    /// [`Context::take_deferred_errors`] shows it. The default, `None`, prints such errors
    /// to standard error instead; the crate's allocators name the context they allocate in.
    fn context(&self) -> Option<&Context> {
        None
    }
}

/// Events a pool records to keep a block from reuse until other streams are done with it.
///
/// Events are identified by a raw handle (`CUevent` as an integer, or any number the
/// implementation chooses); a pool reuses completed events and never creates one on the path of
/// an allocation served from its cache. The pools of this crate make their own (driver events
/// in the pool's context) with `MemoryPool::new` and `MemoryPool::with_allocator`; implement
/// this trait only to run a pool on events of your own (`MemoryPool::with_parts`).
///
/// # Safety
///
/// A pool hands a block to the next request, which writes it, as soon as
/// [`is_complete`](Self::is_complete) says so. An implementation promises that
///
/// * `is_complete(event)` returns `true` only when every piece of work queued on the stream
///   before the last [`record`](Self::record) of `event` has really completed (on the device,
///   as `cuEventQuery` would report), or when that work can no longer run at all (its context
///   is gone);
/// * `record` either records (returns `Ok`) or leaves the event as it was;
/// * the methods, being safe, never cause undefined behaviour for a handle that code able to
///   name the implementing type may pass: one [`create`](Self::create) did not make, or one
///   already destroyed, may be refused or answered with anything. The pools only pass handles
///   that `create` made and that were not destroyed, so a type that only the pools reach (kept
///   private) may rely on that.
///
/// ```compile_fail,E0200
/// use cuhost::alloc::{StreamEvents, StreamRef};
///
/// // Without `unsafe impl`, the promises above are not made, and the compiler refuses it.
/// struct Liar;
/// impl StreamEvents for Liar {
///     fn create(&self) -> cuhost::Result<u64> { Ok(1) }
///     fn record(&self, _: u64, _: StreamRef<'_>) -> cuhost::Result<()> { Ok(()) }
///     fn is_complete(&self, _: u64) -> bool { true }
///     fn destroy(&self, _: u64) {}
/// }
/// ```
///
/// The driver's events that the pools use are private to the crate: their methods take raw
/// handles, which safe code could forge or destroy twice.
///
/// ```compile_fail,E0603
/// use cuhost::alloc::DriverEvents;
/// ```
pub unsafe trait StreamEvents: Send + Sync {
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
