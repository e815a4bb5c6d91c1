//! CPU regression tests for the soundness review's pool findings (F2, F15, F17): what the pools
//! and buffers do with an allocator that returns too little, or fails to give memory back.
//! These need crate-private parts (a context that touches no driver, the pinned pool's raw
//! allocation); F15's device-pool test needs only the public API and is in
//! `tests/pool_soundness.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::fake::{CountingPinned, ManualEvents};
use crate::alloc::*;
use crate::alloc::{DeviceAllocation, PinnedAllocation, PinnedAllocator, StreamRef};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::memory::{DeviceBuffer, PinnedBuffer};
use crate::pool::core::ALLOCATION_UNIT as UNIT;
use crate::pool::*;
use crate::stream::Stream;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Returns one byte fewer than asked (the F2 probe's allocator, honest about its size), and
/// counts what is outstanding.
#[derive(Default)]
struct Short {
    outstanding: AtomicUsize,
}

// SAFETY: test-only; the addresses are never read or written (the buffer is refused before any
// use), and the size reported is what the range spans.
unsafe impl Allocator for Short {
    fn allocate(&self, size: usize, _stream: StreamRef<'_>) -> Result<DeviceAllocation> {
        self.outstanding.fetch_add(1, Ordering::SeqCst);
        Ok(DeviceAllocation { ptr: 0x7700_0000, size: size.saturating_sub(1), token: 7 })
    }

    unsafe fn deallocate(&self, a: DeviceAllocation, _stream: StreamRef<'_>) -> Result<()> {
        assert_eq!((a.ptr, a.token), (0x7700_0000, 7), "given back what it handed out");
        self.outstanding.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }

    fn name(&self) -> &'static str {
        "short"
    }
}

// F2: `Source::allocate` trusted the size an allocator returned, so every safe op of the buffer
// ran past a short allocation. Now the buffer is refused with an error naming the allocator,
// and the short allocation goes back to it (no leak). On fa5afb9 `new_in` returned `Ok`.
#[test]
fn a_short_allocation_is_refused_and_given_back() {
    let ctx = Context::detached_for_tests();
    let stream = Stream::legacy(&ctx);
    let short = Arc::new(Short::default());
    let e = DeviceBuffer::<u32>::new_in(&stream, 4, short.clone()).map(|_| ()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
    let text = e.to_string();
    assert!(text.contains("short") && text.contains("15 bytes") && text.contains("16"), "{text}");
    assert_eq!(short.outstanding.load(Ordering::SeqCst), 0, "the short allocation was given back");
}

// F15's sibling in the pinned pool: the same honest count. On fa5afb9 `total_bytes()` was 0.
#[test]
fn a_failed_upstream_release_stays_counted_in_the_pinned_pool() {
    let up = Arc::new(CountingPinned::default());
    let pool = PinnedMemoryPool::with_parts(up.clone(), Arc::new(ManualEvents::default()));
    let a = pool.allocate_raw(UNIT).unwrap();
    // SAFETY: allocated above, freed once, no copy uses it.
    unsafe { pool.deallocate(a) }.unwrap();
    up.get().fail_releases = true;
    assert!(pool.free_all_blocks().is_err());
    assert_eq!((pool.n_free_blocks(), pool.used_bytes(), pool.total_bytes()), (0, 0, UNIT));
    up.get().fail_releases = false;
    pool.free_all_blocks().unwrap();
    assert_eq!((up.get().deallocations, pool.total_bytes()), (0, UNIT));
}

/// Heap memory (real, so a `PinnedBuffer` may zero it) whose release always fails, with a
/// context to keep that failure in.
struct FailingRelease {
    context: Context,
    live: Mutex<Vec<Vec<u64>>>,
}

// SAFETY: test-only; each allocation is a fresh heap vector as large as asked (kept alive here,
// never given out twice), 8-byte aligned. Not page-locked: no copy runs on it.
unsafe impl PinnedAllocator for FailingRelease {
    fn allocate(&self, size: usize) -> Result<PinnedAllocation> {
        let mut v = vec![0u64; size.div_ceil(8)];
        let ptr = v.as_mut_ptr().cast::<u8>();
        self.live.lock().unwrap().push(v);
        Ok(PinnedAllocation { ptr, size })
    }

    unsafe fn deallocate(&self, _a: PinnedAllocation) -> Result<()> {
        Err(Error::Driver {
            call: "cuMemFreeHost",
            status: cuhost_driver_sys::CUresult::CUDA_ERROR_INVALID_VALUE,
        })
    }

    fn context(&self) -> Option<&Context> {
        Some(&self.context)
    }
}

// F17 (first bullet): a `PinnedBuffer` dropped with no copy in flight discarded its allocator's
// failure to free. Now the error is kept in the allocator's context, where
// `take_deferred_errors` shows it. (On fa5afb9 the error was dropped; `context()` did not exist.)
#[test]
fn a_failed_pinned_release_is_kept_in_the_allocators_context() {
    let ctx = Context::detached_for_tests();
    let allocator = Arc::new(FailingRelease { context: ctx.clone(), live: Mutex::new(Vec::new()) });
    let b = PinnedBuffer::<u32>::new_in(16, allocator).unwrap();
    assert_eq!(b.as_slice().unwrap(), &[0; 16][..]);
    drop(b);
    let errors = ctx.take_deferred_errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].to_string().contains("cuMemFreeHost"), "{}", errors[0]);
}

// The pinned pool passes its upstream's context on, so a default-pool buffer's failed release
// lands in the pool's context too.
#[test]
fn the_pinned_pool_names_its_upstreams_context() {
    let ctx = Context::detached_for_tests();
    let up = Arc::new(FailingRelease { context: ctx.clone(), live: Mutex::new(Vec::new()) });
    let pool = PinnedMemoryPool::with_parts(up, Arc::new(ManualEvents::default()));
    assert!(pool.context().is_some_and(|c| *c == ctx));
    let counting =
        PinnedMemoryPool::with_parts(Arc::new(CountingPinned::default()), Arc::new(ManualEvents::default()));
    assert!(counting.context().is_none());
}
