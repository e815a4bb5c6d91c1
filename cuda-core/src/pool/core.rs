//! The pool's engine: shards keyed by stream, the limit, going upstream, retry on exhaustion.
//!
//! Streams hash to one of [`SHARDS`] shards, each behind its own lock, so threads that allocate
//! on different streams rarely meet; an allocation served from the cache takes exactly one
//! lock and makes no driver call. Going upstream happens outside any lock.

use super::hooks::{self, HookEvent, Point};
use super::shard::{GENERATION_MASK, Shard};
use super::spin::{SpinGuard, SpinLock};
use crate::alloc::{Allocator, DeviceAllocation, StreamEvents, StreamRef};
use crate::error::{Error, Result};
use crate::stream::Stream;
use cuhost_driver_sys as sys;
use std::mem::ManuallyDrop;
use std::panic::Location;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The pool's allocation unit: every request is rounded up to a multiple of it.
pub const ALLOCATION_UNIT: usize = 512;

/// Number of shards; a power of two.
pub(crate) const SHARDS: usize = 64;

/// The token of a zero-byte allocation, which touches no shard.
const ZERO_TOKEN: u64 = u64::MAX;

#[repr(align(128))]
struct Padded(SpinLock<Shard>);

/// Rounds `size` up to the allocation unit, or `None` on overflow.
pub(crate) fn round_size(size: usize) -> Option<usize> {
    size.checked_add(ALLOCATION_UNIT - 1).map(|s| s & !(ALLOCATION_UNIT - 1))
}

/// The next per-thread arena key: odd numbers, never reused, so that a new thread never takes
/// over the arena of one that ended with work still queued on its per-thread stream.
static NEXT_THREAD_KEY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(3);

thread_local! {
    static THREAD_KEY: u64 = next_thread_key();
}

#[cold]
fn next_thread_key() -> u64 {
    NEXT_THREAD_KEY.fetch_add(2, std::sync::atomic::Ordering::Relaxed)
}

/// The arena key of a stream: its handle, except that the per-thread default stream is keyed
/// per thread and the legacy default stream is 0.
#[inline]
pub(crate) fn stream_key(stream: sys::CUstream) -> u64 {
    let raw = stream as usize;
    let per_thread =
        raw == sys::CU_STREAM_PER_THREAD as usize || (raw == 0 && sys::per_thread_default_stream());
    if per_thread {
        // Unique among all threads ever; the low bit marks it (stream handles are even). While
        // the thread's locals are being destroyed its key is gone: each call then takes a new
        // key, an arena no other thread's stream shares (a block given back there is not
        // reused; one taken there is new).
        THREAD_KEY.try_with(|k| *k).unwrap_or_else(|_| next_thread_key())
    } else if raw == sys::CU_STREAM_LEGACY as usize {
        0
    } else {
        raw as u64
    }
}

#[inline]
fn shard_of(key: u64) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SHARDS.trailing_zeros())) as usize
}

fn pack(shard: usize, generation: u32, index: u32) -> u64 {
    ((shard as u64) << 56) | (u64::from(generation & GENERATION_MASK) << 32) | u64::from(index)
}

fn unpack(token: u64) -> (usize, u32, u32) {
    ((token >> 56) as usize, ((token >> 32) as u32) & GENERATION_MASK, token as u32)
}

/// The error of a free of `ptr`, which is no allocation of the pool in use.
#[cold]
#[inline(never)]
fn stale(ptr: sys::CUdeviceptr) -> Error {
    Error::invalid(
        "MemoryPool::free",
        format!("{ptr:#x} is not an allocation of this pool that is in use (double free?)"),
    )
}

/// Whether an upstream error means "no memory", which a release of the cache may cure.
pub(crate) fn is_out_of_memory(e: &Error) -> bool {
    match e {
        Error::OutOfMemory { .. } => true,
        Error::Driver { status, .. } => *status == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY,
        #[cfg(feature = "runtime")]
        Error::Runtime { status, .. } => *status == cuhost_cudart_sys::cudaError_t::cudaErrorMemoryAllocation,
        _ => false,
    }
}

/// The bookkeeping shared by [`MemoryPool`](super::MemoryPool) and its tests.
pub(crate) struct PoolCore {
    shards: Box<[Padded]>,
    total: AtomicUsize,
    /// Bytes of blocks whose upstream release failed: out of the shards, still in `total`.
    unreleased: AtomicUsize,
    /// 0: no limit.
    limit: AtomicUsize,
    pub(crate) upstream: Arc<dyn Allocator>,
    events: Arc<dyn StreamEvents>,
    /// The device ordinal hooks are told, or -1.
    pub(crate) device_id: i32,
}

impl PoolCore {
    pub(crate) fn new(upstream: Arc<dyn Allocator>, events: Arc<dyn StreamEvents>) -> Self {
        PoolCore {
            shards: (0..SHARDS).map(|_| Padded(SpinLock::new(Shard::default()))).collect(),
            total: AtomicUsize::new(0),
            unreleased: AtomicUsize::new(0),
            limit: AtomicUsize::new(0),
            upstream,
            events,
            device_id: -1,
        }
    }

    #[inline]
    fn lock(&self, shard: usize) -> SpinGuard<'_, Shard> {
        self.shards[shard].0.lock()
    }

    fn event(
        &self,
        size: usize,
        mem_size: usize,
        mem_ptr: u64,
        location: &'static Location<'static>,
    ) -> HookEvent {
        HookEvent {
            kind: hooks::MemoryKind::Device,
            device_id: self.device_id,
            size,
            mem_size,
            mem_ptr,
            pmem_id: self as *const Self as usize,
            location,
        }
    }

    /// Allocates `size` bytes (rounded up to 512) for `stream`.
    #[inline]
    #[track_caller]
    pub(crate) fn malloc(&self, size: usize, stream: sys::CUstream) -> Result<DeviceAllocation> {
        let location = Location::caller();
        if hooks::any() {
            return self.malloc_hooked(size, stream, None, location).map(|(a, _)| a);
        }
        self.malloc_inner(size, stream, None, location).map(|(a, _)| a)
    }

    /// Like [`malloc`](Self::malloc), for a buffer on `stream` (`size` > 0): the stream's arena
    /// holds a handle of the stream for as long as it exists, and an uncounted copy of that
    /// handle comes back, valid while the allocation is in use.
    #[inline]
    #[track_caller]
    pub(crate) fn malloc_kept(
        &self,
        size: usize,
        stream: &Stream,
    ) -> Result<(DeviceAllocation, ManuallyDrop<Stream>)> {
        let location = Location::caller();
        let (a, kept) = if hooks::any() {
            self.malloc_hooked(size, stream.as_raw(), Some(stream), location)?
        } else {
            self.malloc_inner(size, stream.as_raw(), Some(stream), location)?
        };
        match kept {
            Some(kept) => Ok((a, kept)),
            None => {
                // Only a zero-byte request has no arena.
                self.free(a, &[])?;
                Err(Error::invalid("MemoryPool::malloc", "a buffer needs at least one byte"))
            }
        }
    }

    #[cold]
    fn malloc_hooked(
        &self,
        size: usize,
        stream: sys::CUstream,
        keep: Option<&Stream>,
        location: &'static Location<'static>,
    ) -> Result<(DeviceAllocation, Option<ManuallyDrop<Stream>>)> {
        let mem_size = round_size(size).unwrap_or(size);
        hooks::call(Point::MallocPre, &self.event(size, mem_size, 0, location));
        let (a, kept) = self.malloc_inner(size, stream, keep, location)?;
        hooks::call(Point::MallocPost, &self.event(size, a.size, a.ptr, location));
        Ok((a, kept))
    }

    #[inline(always)]
    fn malloc_inner(
        &self,
        size: usize,
        stream: sys::CUstream,
        keep: Option<&Stream>,
        location: &'static Location<'static>,
    ) -> Result<(DeviceAllocation, Option<ManuallyDrop<Stream>>)> {
        if size == 0 {
            return Ok((DeviceAllocation { ptr: 0, size: 0, token: ZERO_TOKEN }, None));
        }
        let Some(rounded) = round_size(size) else {
            return Err(Error::invalid("MemoryPool::malloc", format!("{size} bytes cannot be rounded up")));
        };
        let key = stream_key(stream);
        let s = shard_of(key);
        // The block taken is returned once the shard is unlocked: written before the unlock,
        // the result would be stored to memory and copied again.
        let taken = {
            let mut shard = self.lock(s);
            let mut taken = Self::take(&mut shard, s, key, rounded, keep);
            if taken.is_none() && shard.has_pending() {
                shard.poll_pending(|e| self.events.is_complete(e));
                taken = Self::take(&mut shard, s, key, rounded, keep);
            }
            taken
        };
        match taken {
            Some(a) => Ok(a),
            None => self.grow(key, size, rounded, stream, keep, location),
        }
    }

    /// Best fit from the arena of `key`; with `keep`, the arena holds that stream's handle.
    #[inline(always)]
    fn take(
        shard: &mut Shard,
        s: usize,
        key: u64,
        rounded: usize,
        keep: Option<&Stream>,
    ) -> Option<(DeviceAllocation, Option<ManuallyDrop<Stream>>)> {
        let (i, ptr, generation, kept) = shard.take(key, rounded, keep)?;
        Some((DeviceAllocation { ptr, size: rounded, token: pack(s, generation, i) }, kept))
    }

    #[cold]
    fn grow(
        &self,
        key: u64,
        size: usize,
        rounded: usize,
        stream: sys::CUstream,
        keep: Option<&Stream>,
        location: &'static Location<'static>,
    ) -> Result<(DeviceAllocation, Option<ManuallyDrop<Stream>>)> {
        let s = shard_of(key);
        let upstream = match self.upstream_alloc(rounded, stream, location) {
            Ok(a) => a,
            Err(e) if is_out_of_memory(&e) => {
                self.free_all_blocks(None)?;
                // Another stream's cache may have come free meanwhile in this shard too.
                {
                    let mut shard = self.lock(s);
                    if let Some(a) = Self::take(&mut shard, s, key, rounded, keep) {
                        return Ok(a);
                    }
                }
                self.upstream_alloc(rounded, stream, location)
                    .map_err(|e| if is_out_of_memory(&e) { self.out_of_memory(size) } else { e })?
            }
            Err(e) => return Err(e),
        };
        let mut retired = Vec::new();
        let (allocation, kept) = {
            let mut shard = self.lock(s);
            let i = shard.insert_used(key, upstream.ptr, rounded, upstream.token);
            let generation = shard.chunk(i).map_or(0, |c| c.generation);
            let kept = keep.and_then(|stream| shard.keep(key, stream));
            // Going upstream is the moment to let go of streams that only this pool still holds.
            shard.retire_idle_keepers(&mut retired);
            (DeviceAllocation { ptr: upstream.ptr, size: rounded, token: pack(s, generation, i) }, kept)
        };
        drop(retired);
        Ok((allocation, kept))
    }

    fn out_of_memory(&self, requested: usize) -> Error {
        let limit = self.limit.load(Ordering::Relaxed);
        Error::OutOfMemory {
            requested,
            held: self.total.load(Ordering::Relaxed),
            limit: (limit != 0).then_some(limit),
        }
    }

    /// Reserves `size` under the limit, then asks the upstream allocator.
    fn upstream_alloc(
        &self,
        size: usize,
        stream: sys::CUstream,
        location: &'static Location<'static>,
    ) -> Result<DeviceAllocation> {
        let limit = self.limit.load(Ordering::Relaxed);
        let reserved = self.total.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |t| {
            let next = t.checked_add(size)?;
            (limit == 0 || next <= limit).then_some(next)
        });
        if reserved.is_err() {
            return Err(self.out_of_memory(size));
        }
        hooks::arm_checker();
        let hooked = hooks::any();
        if hooked {
            hooks::call(Point::AllocPre, &HookEvent { pmem_id: 0, ..self.event(0, size, 0, location) });
        }
        // SAFETY: the stream came from the caller's `StreamRef` or `Stream`, alive during this call.
        let a = self.upstream.allocate(size, unsafe { StreamRef::from_raw(stream) });
        match &a {
            Err(_) => {
                self.total.fetch_sub(size, Ordering::AcqRel);
            }
            Ok(a) if hooked => {
                hooks::call(
                    Point::AllocPost,
                    &HookEvent { pmem_id: 0, ..self.event(0, a.size, a.ptr, location) },
                );
            }
            Ok(_) => {}
        }
        a
    }

    /// Gives an allocation back to its arena; with `recorded` streams, keeps it from reuse
    /// until an event recorded now on each of them has completed.
    #[inline(always)]
    #[track_caller]
    pub(crate) fn free(&self, allocation: DeviceAllocation, recorded: &[sys::CUstream]) -> Result<()> {
        if hooks::any() {
            return self.free_hooked(
                allocation.ptr,
                allocation.size,
                allocation.token,
                recorded,
                Location::caller(),
            );
        }
        self.free_inner(allocation.ptr, allocation.token, recorded)
    }

    /// [`free`](Self::free) between the hooks' calls. It takes the allocation's fields apart,
    /// as [`free_inner`](Self::free_inner) does: passed whole, the allocation was built on the
    /// stack on every free, for this call that the common one never makes (and read back
    /// across two stores, a stall: 15 instructions and about a fifth of the time of a
    /// `DeviceBuffer::new` and drop, measured on the simulated driver).
    #[cold]
    #[inline(never)]
    fn free_hooked(
        &self,
        ptr: sys::CUdeviceptr,
        size: usize,
        token: u64,
        recorded: &[sys::CUstream],
        location: &'static Location<'static>,
    ) -> Result<()> {
        let e = self.event(0, size, ptr, location);
        hooks::call(Point::FreePre, &e);
        let r = self.free_inner(ptr, token, recorded);
        hooks::call(Point::FreePost, &e);
        r
    }

    /// [`free`](Self::free) of the allocation at `ptr` with `token`, passed apart so that they
    /// travel in registers.
    #[inline]
    fn free_inner(&self, ptr: sys::CUdeviceptr, token: u64, recorded: &[sys::CUstream]) -> Result<()> {
        if token == ZERO_TOKEN {
            return Ok(());
        }
        let (s, generation, i) = unpack(token);
        let stale = || stale(ptr);
        if s >= SHARDS {
            return Err(stale());
        }
        let mut shard = self.lock(s);
        if shard.chunk(i).is_none_or(|c| c.addr != ptr) {
            return Err(stale());
        }
        if recorded.is_empty() {
            return shard.release(i, generation).map_err(|_| stale());
        }
        shard.check_in_use(i, generation).map_err(|_| stale())?;
        self.defer_behind(&mut shard, i, generation, recorded).map_err(|e| e.unwrap_or_else(stale))
    }

    /// Keeps the in-use chunk `i` of `shard` from reuse until an event recorded now on each of
    /// `recorded` has completed. Every event is recorded before the block is deferred on any:
    /// if one cannot be, the block stays in use (kept, not reused) rather than be freed after
    /// only some streams, and the error is returned; `Err(None)` is a stale chunk.
    #[inline(never)]
    fn defer_behind(
        &self,
        shard: &mut Shard,
        i: u32,
        generation: u32,
        recorded: &[sys::CUstream],
    ) -> Result<(), Option<Error>> {
        let mut events = Vec::with_capacity(recorded.len());
        for &stream in recorded {
            let made = match shard.idle_events.pop() {
                Some(e) => Ok(e),
                None => self.events.create(),
            };
            let recorded = made.and_then(|event| {
                // SAFETY: the recorded streams are held alive by the caller during this call.
                match self.events.record(event, unsafe { StreamRef::from_raw(stream) }) {
                    Ok(()) => Ok(event),
                    Err(e) => {
                        shard.idle_events.push(event);
                        Err(e)
                    }
                }
            });
            match recorded {
                Ok(event) => events.push(event),
                Err(e) => {
                    shard.idle_events.extend(events);
                    return Err(Some(e));
                }
            }
        }
        for event in events {
            shard.defer(i, generation, event).map_err(|_| None)?;
        }
        Ok(())
    }

    /// Releases upstream every free block that is a whole upstream allocation, of one stream's
    /// arena or of all; also frees pending blocks whose events have completed.
    pub(crate) fn free_all_blocks(&self, stream: Option<sys::CUstream>) -> Result<()> {
        let key = stream.map(stream_key);
        let mut released = Vec::new();
        let mut keepers = Vec::new();
        for s in 0..SHARDS {
            if key.is_some_and(|k| shard_of(k) != s) {
                continue;
            }
            let mut shard = self.lock(s);
            if shard.has_pending() {
                shard.poll_pending(|e| self.events.is_complete(e));
            }
            shard.drain_whole_free(key, &mut released, &mut keepers);
        }
        // The streams of the arenas dropped go only now, outside the locks.
        drop(keepers);
        let mut first_error = Ok(());
        for (ptr, size, token) in released {
            let allocation = DeviceAllocation { ptr, size, token };
            // SAFETY: the block came from this upstream, is wholly free and left the pool's
            // books above, so nothing refers to it; stream-ordered upstreams free it on the
            // legacy default stream, after everything queued so far.
            let r = unsafe { self.upstream.deallocate(allocation, StreamRef::legacy()) };
            if r.is_ok() {
                self.total.fetch_sub(size, Ordering::AcqRel);
            } else {
                // The upstream gave it up, but may still hold it: it stays counted, honestly, and
                // is never given back again (the contract of `Allocator::deallocate`).
                self.unreleased.fetch_add(size, Ordering::AcqRel);
            }
            if first_error.is_ok() {
                first_error = r;
            }
        }
        first_error
    }

    /// Sums something over all shards.
    fn sum(&self, f: impl Fn(&Shard) -> usize) -> usize {
        (0..SHARDS).map(|s| f(&self.lock(s))).sum()
    }

    pub(crate) fn used_bytes(&self) -> usize {
        self.sum(|s| s.used)
    }

    pub(crate) fn total_bytes(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }

    pub(crate) fn n_free_blocks(&self) -> usize {
        self.sum(|s| s.free_chunks)
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    pub(crate) fn set_limit(&self, bytes: usize) {
        self.limit.store(bytes, Ordering::Relaxed);
    }

    /// Bytes of blocks whose upstream release failed (still counted in the total).
    pub(crate) fn unreleased_bytes(&self) -> usize {
        self.unreleased.load(Ordering::Acquire)
    }

    /// Checks every shard's invariants and that the shards' held bytes, with the bytes whose
    /// release failed, add up to the total.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        let mut held = self.unreleased_bytes();
        for s in 0..SHARDS {
            let shard = self.lock(s);
            shard.check_invariants().map_err(|e| format!("shard {s}: {e}"))?;
            held += shard.held;
        }
        let total = self.total_bytes();
        if held != total {
            return Err(format!("shards hold {held} bytes (with unreleased ones), the pool counts {total}"));
        }
        Ok(())
    }
}

impl Drop for PoolCore {
    fn drop(&mut self) {
        // Blocks still in use or waiting for events stay allocated: a stream may still use them.
        let _ = self.free_all_blocks(None);
        for s in 0..SHARDS {
            let events = std::mem::take(&mut self.lock(s).idle_events);
            for e in events {
                self.events.destroy(e);
            }
        }
    }
}
