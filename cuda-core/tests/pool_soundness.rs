//! CPU regression tests of the soundness review's pool findings that need only the public API
//! (F15, device pool). The others (F2, F15's pinned sibling, F17) need crate-private parts (a
//! context that touches no driver, the pinned pool's raw allocation) and are unit tests in
//! `src/pool/tests/soundness.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// Each test file uses part of the shared fakes.
#[allow(dead_code)]
mod support;

use cuhost::alloc;
use cuhost::alloc::{Allocator, StreamRef};
use cuhost::pool::{self, ALLOCATION_UNIT as UNIT, MemoryPool};
use cuhost::{Error, Result};
use std::sync::Arc;
use support::{CountingUpstream, ManualEvents};

// F15: `MemoryPool::free_all_blocks` took a block off its books and out of `total_bytes` even
// when the upstream failed to give it back, so the memory was lost without a trace. Now it
// stays counted (and the books still add up); it is not given back twice. On fa5afb9
// `total_bytes()` was 0 after the failed release.
#[test]
fn a_failed_upstream_release_stays_counted_in_the_device_pool() {
    let up = Arc::new(CountingUpstream::default());
    let pool = MemoryPool::with_parts(up.clone(), Arc::new(ManualEvents::default()));
    let a = pool.allocate(3 * UNIT, StreamRef::legacy()).unwrap();
    let b = pool.allocate(UNIT, StreamRef::legacy()).unwrap();
    // SAFETY: allocated above, freed once.
    unsafe { pool.deallocate(a, StreamRef::legacy()) }.unwrap();
    // SAFETY: as above.
    unsafe { pool.deallocate(b, StreamRef::legacy()) }.unwrap();
    assert_eq!(pool.total_bytes(), 4 * UNIT);
    up.get().fail_releases = true;
    let e = pool.free_all_blocks(None).unwrap_err();
    assert!(e.to_string().contains("cuMemFree"), "{e}");
    assert_eq!(pool.n_free_blocks(), 0, "the blocks left the free lists");
    assert_eq!(pool.total_bytes(), 4 * UNIT, "but are still counted: the upstream may hold them");
    pool.check_invariants().unwrap();
    // Given up: a later release does not try them again.
    up.get().fail_releases = false;
    pool.free_all_blocks(None).unwrap();
    assert_eq!(up.get().deallocations, 0);
    assert_eq!(pool.total_bytes(), 4 * UNIT);
}
