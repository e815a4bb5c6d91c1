//! Where a [`DeviceBuffer`](super::DeviceBuffer)'s memory comes from and goes back to.

use crate::alloc::{Allocator, DeviceAllocation, StreamRef, thread_allocator};
use crate::error::Result;
use crate::pool::{MemoryPool, default_pool_of};
use crate::stream::Stream;
use crate::track::HeldStream;
use std::sync::Arc;

/// The allocator a buffer's memory came from.
///
/// The default pools live for the whole process, so a buffer refers to them without a reference
/// count: allocating from the default pool touches no shared counter.
#[derive(Clone)]
pub(crate) enum Source {
    /// The default [`MemoryPool`] of a device (the process-wide one of its primary context).
    DefaultPool(&'static MemoryPool),
    /// Any other allocator.
    Shared(Arc<dyn Allocator>),
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Source {
    /// The allocator `DeviceBuffer::new` uses on `stream`: the thread's (set with
    /// [`set_allocator`](crate::alloc::set_allocator) or
    /// [`using_allocator`](crate::alloc::using_allocator)), else the default pool of the stream's
    /// device when the stream belongs to a primary context, else plain `cuMemAlloc` in the
    /// stream's context.
    #[inline]
    pub(crate) fn current(stream: &Stream) -> Result<Source> {
        if let Some(allocator) = thread_allocator() {
            return Ok(Source::Shared(allocator));
        }
        let ctx = stream.context();
        if ctx.is_primary() {
            return Ok(Source::DefaultPool(default_pool_of(ctx.device())?));
        }
        Ok(Source::Shared(Arc::new(crate::alloc::DeviceAllocator::new(ctx))))
    }

    /// Allocates `bytes` for use on `stream` and hands the source, the allocation and the
    /// buffer's hold on the stream to `make`, which builds the buffer. Each way of allocating
    /// calls `make` itself, so that the buffer is written once, where it is returned.
    ///
    /// An allocator that returns fewer bytes than asked is refused with an
    /// [`Error::InvalidArgument`](crate::error::Error) naming it, and the short allocation is given
    /// back to it (a failure to give it back is kept in `stream`'s context).
    #[inline]
    #[track_caller]
    pub(crate) fn allocate<R>(
        self,
        bytes: usize,
        stream: &Stream,
        make: impl FnOnce(Source, DeviceAllocation, HeldStream) -> R,
    ) -> Result<R> {
        if crate::stream::capturing::any() {
            if let Some(capture) = crate::stream::capture_of(stream)? {
                return Source::allocate_captured(bytes, stream, capture, make);
            }
        }
        match &self {
            &Source::DefaultPool(pool) if bytes > 0 => {
                let (allocation, kept) = pool.allocate_kept(bytes, stream)?;
                Ok(make(self, allocation, HeldStream::Kept(kept)))
            }
            &Source::DefaultPool(pool) => {
                let allocation = pool.allocate_on(bytes, stream.as_raw())?;
                Ok(make(self, allocation, HeldStream::Counted(stream.clone())))
            }
            Source::Shared(a) => {
                if stream.is_default() && a.context().is_some_and(|c| c != stream.context()) {
                    return Err(foreign_default_stream(a.name()));
                }
                let allocation = a.allocate(bytes, StreamRef::from(stream))?;
                if allocation.size < bytes {
                    return Err(short_allocation(a.as_ref(), allocation, bytes, stream));
                }
                Ok(make(self, allocation, HeldStream::Counted(stream.clone())))
            }
        }
    }

    /// [`allocate`](Self::allocate) on a stream being captured, whatever the allocator: a graph
    /// memory node of the capture (`cuMemAllocAsync`, which the driver records during
    /// capture), freed in the capture (see [the rule](crate::track)).
    #[cold]
    #[inline(never)]
    fn allocate_captured<R>(
        bytes: usize,
        stream: &Stream,
        capture: crate::stream::capturing::CaptureRef,
        make: impl FnOnce(Source, DeviceAllocation, HeldStream) -> R,
    ) -> Result<R> {
        let alloc = crate::track::GraphAlloc::allocate(stream, capture, bytes)?;
        let allocation = DeviceAllocation { ptr: alloc.ptr(), size: bytes, token: 0 };
        // Names the memory's origin; the buffer frees graph memory itself, never through it.
        let source = Source::Shared(Arc::new(crate::mempool::AsyncAllocator::new(stream.context())));
        Ok(make(source, allocation, HeldStream::Captured(alloc)))
    }

    /// Keeps `e`, met while giving memory back after the buffer's hold on its stream may have
    /// ended, in the context of the source (a default pool's) or prints it.
    #[cold]
    pub(crate) fn defer(&self, e: crate::error::Error) {
        match self {
            Source::DefaultPool(pool) => pool.defer(e),
            Source::Shared(a) => eprintln!("cuda-core: {}: {e}", a.name()),
        }
    }

    /// Gives `allocation` back after the work queued on `stream` (and on `recorded`).
    ///
    /// # Safety
    ///
    /// `allocation` came from [`Source::allocate`] on this source and is given back once; every
    /// stream that may still use it is `stream` or in `recorded`.
    #[inline(always)]
    #[track_caller]
    pub(crate) unsafe fn deallocate(
        &self,
        allocation: DeviceAllocation,
        stream: &Stream,
        recorded: &[Stream],
    ) -> Result<()> {
        // The common case, memory used on its own stream only, stays small enough to inline
        // into a buffer's drop.
        match (self, recorded) {
            (Source::DefaultPool(pool), []) => pool.free_on(allocation, &[]),
            // SAFETY: forwarded under the caller's contract.
            _ => unsafe { self.deallocate_other(allocation, stream, recorded) },
        }
    }

    /// [`deallocate`](Self::deallocate) from another allocator than a default pool, or after
    /// other streams (the only cases that reach it).
    ///
    /// # Safety
    ///
    /// As for [`deallocate`](Self::deallocate).
    #[inline(never)]
    #[track_caller]
    unsafe fn deallocate_other(
        &self,
        allocation: DeviceAllocation,
        stream: &Stream,
        recorded: &[Stream],
    ) -> Result<()> {
        match (self, recorded) {
            // SAFETY: forwarded under the caller's contract.
            (Source::DefaultPool(pool), _) => unsafe { pool.deallocate_after(allocation, stream, recorded) },
            // SAFETY: as above.
            (Source::Shared(a), []) => unsafe { a.deallocate(allocation, StreamRef::from(stream)) },
            // SAFETY: as above.
            (Source::Shared(a), _) => unsafe { a.deallocate_after(allocation, stream, recorded) },
        }
    }

    /// The allocator's short name (`MemoryPool`, `cuMemAlloc`, ...).
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Source::DefaultPool(_) => "MemoryPool",
            Source::Shared(a) => a.name(),
        }
    }
}

/// The refusal of a default stream of another context than the allocator's.
#[cold]
fn foreign_default_stream(allocator: &str) -> crate::error::Error {
    crate::error::Error::refused(
        crate::error::Reason::WRONG_STREAM,
        "DeviceBuffer::new",
        format!(
            "the allocator {allocator:?} works in another context than this default stream's, and the driver \
             would read the handle as that context's default stream; use a stream of the allocator's \
             context or a created stream"
        ),
    )
}

/// Gives back an allocation shorter than the `bytes` asked (a failure to do so is kept in
/// `stream`'s context) and returns the refusal.
#[cold]
fn short_allocation(
    allocator: &dyn Allocator,
    allocation: DeviceAllocation,
    bytes: usize,
    stream: &Stream,
) -> crate::error::Error {
    // SAFETY: just allocated by this allocator on `stream`, never used, given back once.
    if let Err(e) = unsafe { allocator.deallocate(allocation, StreamRef::from(stream)) } {
        stream.context().defer(e.dropping("DeviceBuffer", None));
    }
    crate::error::Error::invalid(
        "DeviceBuffer::new",
        format!(
            "the allocator {:?} returned {} bytes for a request of {bytes}; fix its `allocate` to return at \
             least the bytes asked",
            allocator.name(),
            allocation.size
        ),
    )
}
