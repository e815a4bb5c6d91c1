//! The pool's bookkeeping against a counting upstream, mirroring CuPy's memory-pool tests.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::fake::{CountingUpstream, ManualEvents};
use crate::alloc::DeviceAllocation;
use crate::error::Error;
use crate::pool::core::{ALLOCATION_UNIT as UNIT, PoolCore, round_size};
use cuhost_driver_sys as sys;
use std::sync::Arc;

struct Pool {
    core: PoolCore,
    up: Arc<CountingUpstream>,
    ev: Arc<ManualEvents>,
}

fn pool() -> Pool {
    pool_with(CountingUpstream::default())
}

fn pool_with(up: CountingUpstream) -> Pool {
    let up = Arc::new(up);
    let ev = Arc::new(ManualEvents::default());
    Pool { core: PoolCore::new(up.clone(), ev.clone()), up, ev }
}

fn stream(n: usize) -> sys::CUstream {
    (0x10_0000 + n * 0x100) as sys::CUstream
}

const S1: usize = 1;
const S2: usize = 2;

impl Pool {
    fn alloc(&self, size: usize) -> DeviceAllocation {
        self.alloc_on(size, S1)
    }
    fn alloc_on(&self, size: usize, s: usize) -> DeviceAllocation {
        self.core.malloc(size, stream(s)).unwrap()
    }
    fn free(&self, a: DeviceAllocation) {
        self.core.free(a, &[]).unwrap();
    }
    fn ups(&self) -> (usize, usize) {
        let u = self.up.get();
        (u.allocations, u.deallocations)
    }
    fn check(&self) {
        self.core.check_invariants().unwrap();
    }
}

#[test]
fn round_size_goes_up_to_multiples_of_512() {
    assert_eq!(round_size(1), Some(UNIT));
    assert_eq!(round_size(UNIT), Some(UNIT));
    assert_eq!(round_size(UNIT + 1), Some(2 * UNIT));
    assert_eq!(round_size(usize::MAX), None);
}

#[test]
fn alloc_rounds_and_counts() {
    let p = pool();
    let a = p.alloc(1000);
    assert_eq!(a.size, 2 * UNIT);
    assert_eq!(p.core.used_bytes(), 2 * UNIT);
    assert_eq!(p.core.total_bytes(), 2 * UNIT);
    assert_eq!(p.ups(), (1, 0));
    p.free(a);
    assert_eq!(p.core.used_bytes(), 0);
    assert_eq!(p.core.n_free_blocks(), 1);
    // Reused at once on the same stream.
    let b = p.alloc(UNIT + 1);
    assert_eq!(b.ptr, a.ptr);
    assert_eq!(p.ups(), (1, 0));
    p.check();
}

#[test]
fn split_serves_a_smaller_request_from_a_larger_block() {
    let p = pool();
    let big = p.alloc(4 * UNIT);
    p.free(big);
    let a = p.alloc(UNIT);
    let b = p.alloc(UNIT);
    assert_eq!(a.ptr, big.ptr);
    assert_eq!(b.ptr, big.ptr + UNIT as u64);
    assert_eq!(p.ups(), (1, 0));
    assert_eq!(p.core.n_free_blocks(), 1, "the remaining 2 units stay one free block");
    p.check();
}

#[test]
fn best_fit_takes_the_smallest_block_that_fits() {
    let p = pool();
    let x = p.alloc(4 * UNIT);
    let y = p.alloc(2 * UNIT);
    let z = p.alloc(3 * UNIT);
    p.free(x);
    p.free(y);
    p.free(z);
    assert_eq!(p.alloc(2 * UNIT).ptr, y.ptr);
    assert_eq!(p.alloc(3 * UNIT).ptr, z.ptr);
    assert_eq!(p.alloc(UNIT).ptr, x.ptr);
    p.check();
}

#[test]
fn free_merges_with_free_neighbours() {
    let p = pool();
    let big = p.alloc(3 * UNIT);
    p.free(big);
    let a = p.alloc(UNIT);
    let b = p.alloc(UNIT);
    let c = p.alloc(UNIT);
    assert_eq!(p.core.n_free_blocks(), 0);
    p.free(a);
    p.free(c);
    assert_eq!(p.core.n_free_blocks(), 2);
    p.free(b);
    assert_eq!(p.core.n_free_blocks(), 1, "a, b and c merged back into one block");
    assert_eq!(p.alloc(3 * UNIT).ptr, big.ptr);
    assert_eq!(p.ups(), (1, 0));
    p.check();
}

#[test]
fn free_of_different_sizes_keeps_each_reusable() {
    let p = pool();
    let sizes = [UNIT, 3 * UNIT, 2 * UNIT, 7 * UNIT];
    let blocks: Vec<_> = sizes.iter().map(|&s| p.alloc(s)).collect();
    for b in &blocks {
        p.free(*b);
    }
    assert_eq!(p.core.n_free_blocks(), 4);
    for (s, b) in sizes.iter().zip(&blocks) {
        assert_eq!(p.alloc(*s).ptr, b.ptr);
    }
    assert_eq!(p.ups(), (4, 0));
    p.check();
}

#[test]
fn blocks_stay_with_the_stream_they_were_allocated_on() {
    let p = pool();
    let a = p.alloc_on(UNIT, S1);
    p.free(a);
    let b = p.alloc_on(UNIT, S2);
    assert_ne!(b.ptr, a.ptr, "stream 2 must not reuse stream 1's block");
    assert_eq!(p.ups(), (2, 0));
    // Freed on its own, stream 2's block goes back to stream 2's arena.
    p.free(b);
    assert_eq!(p.alloc_on(UNIT, S2).ptr, b.ptr);
    assert_eq!(p.alloc_on(UNIT, S1).ptr, a.ptr);
    p.check();
}

#[test]
fn free_all_blocks_releases_only_wholly_free_upstream_blocks() {
    let p = pool();
    let whole = p.alloc(2 * UNIT);
    let split = p.alloc(2 * UNIT);
    p.free(whole);
    p.free(split);
    let part = p.alloc(UNIT); // best fit reuses one of the two; split it
    let kept = if part.ptr == whole.ptr { split } else { whole };
    assert_eq!(p.core.total_bytes(), 4 * UNIT);
    p.core.free_all_blocks(None).unwrap();
    assert_eq!(p.ups(), (2, 1), "the split block stays");
    assert_eq!(p.core.total_bytes(), 2 * UNIT);
    assert!(!p.up.get().live.contains_key(&kept.ptr));
    p.free(part);
    p.core.free_all_blocks(None).unwrap();
    assert_eq!(p.core.total_bytes(), 0);
    assert_eq!(p.core.n_free_blocks(), 0);
    assert!(p.up.get().live.is_empty());
    p.check();
}

#[test]
fn free_all_blocks_of_one_stream_leaves_the_others() {
    let p = pool();
    let a = p.alloc_on(UNIT, S1);
    let b = p.alloc_on(UNIT, S2);
    p.free(a);
    p.free(b);
    p.core.free_all_blocks(Some(stream(S1))).unwrap();
    assert_eq!(p.core.total_bytes(), UNIT);
    assert!(p.up.get().live.contains_key(&b.ptr));
    assert_eq!(p.alloc_on(UNIT, S2).ptr, b.ptr);
    p.check();
}

#[test]
fn used_plus_free_is_total() {
    let p = pool();
    let a = p.alloc(3 * UNIT);
    let b = p.alloc(UNIT);
    p.free(a);
    let c = p.alloc(UNIT);
    let used = p.core.used_bytes();
    assert_eq!(used, 2 * UNIT);
    assert_eq!(p.core.total_bytes(), 4 * UNIT);
    p.free(b);
    p.free(c);
    assert_eq!(p.core.used_bytes(), 0);
    p.core.free_all_blocks(None).unwrap();
    assert_eq!(p.core.total_bytes(), 0);
    p.check();
}

#[test]
fn zero_size_touches_nothing() {
    let p = pool();
    let a = p.alloc(0);
    assert_eq!((a.ptr, a.size), (0, 0));
    assert_eq!(p.ups(), (0, 0));
    p.free(a);
    assert_eq!(p.core.used_bytes(), 0);
}

#[test]
fn double_free_is_an_error() {
    let p = pool();
    let a = p.alloc(UNIT);
    p.free(a);
    let e = p.core.free(a, &[]).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    // After reuse the stale token still does not free the new owner's block.
    let b = p.alloc(UNIT);
    assert_eq!(b.ptr, a.ptr);
    assert!(p.core.free(a, &[]).is_err());
    assert_eq!(p.core.used_bytes(), UNIT);
    p.check();
}

#[test]
fn limit_is_enforced_with_a_clear_error() {
    let p = pool();
    p.core.set_limit(4 * UNIT);
    assert_eq!(p.core.limit(), 4 * UNIT);
    let a = p.alloc(3 * UNIT);
    let e = p.core.malloc(2 * UNIT, stream(S1)).unwrap_err();
    assert_eq!(e, Error::OutOfMemory { requested: 2 * UNIT, held: 3 * UNIT, limit: Some(4 * UNIT) });
    let b = p.alloc(UNIT);
    assert_eq!(p.core.total_bytes(), 4 * UNIT);
    p.free(a);
    p.free(b);
    p.check();
}

#[test]
fn at_the_limit_free_blocks_are_released_and_the_request_retried() {
    let p = pool();
    p.core.set_limit(4 * UNIT);
    let blocks: Vec<_> = (0..4).map(|_| p.alloc(UNIT)).collect();
    // Fragmented: two separate free blocks of one unit cannot serve two units.
    p.free(blocks[0]);
    p.free(blocks[2]);
    let big = p.alloc(2 * UNIT);
    assert_eq!(p.ups(), (5, 2), "both free blocks went back upstream, then one new block");
    assert_eq!(p.core.total_bytes(), 4 * UNIT);
    for b in [blocks[1], blocks[3], big] {
        p.free(b);
    }
    p.check();
}

#[test]
fn device_out_of_memory_releases_the_cache_and_retries_once() {
    let p = pool_with(CountingUpstream::with_capacity(4 * UNIT));
    let a = p.alloc(UNIT);
    let b = p.alloc(2 * UNIT);
    p.free(a);
    // One unit is left on the device and the cached block is too small: it must go back for
    // this request to fit.
    let c = p.alloc(2 * UNIT);
    assert_ne!(c.ptr, a.ptr);
    assert_eq!(p.ups(), (3, 1));
    let e = p.core.malloc(8 * UNIT, stream(S1)).unwrap_err();
    assert_eq!(e, Error::OutOfMemory { requested: 8 * UNIT, held: 4 * UNIT, limit: None });
    p.free(b);
    p.free(c);
    p.check();
}

#[test]
fn record_stream_keeps_a_block_from_reuse_until_its_event_completes() {
    let p = pool();
    let a = p.alloc_on(UNIT, S1);
    p.core.free(a, &[stream(S2)]).unwrap();
    assert_eq!(p.core.used_bytes(), UNIT, "still in use by stream 2");
    let b = p.alloc_on(UNIT, S1);
    assert_ne!(b.ptr, a.ptr, "stream 2 may still read the block");
    p.ev.complete(stream(S2));
    p.free(b);
    // b is free and fits; the completed block is found at the next miss.
    let c = p.alloc_on(UNIT, S1);
    let d = p.alloc_on(UNIT, S1);
    assert_eq!([c.ptr, d.ptr].iter().filter(|&&x| x == a.ptr).count(), 1);
    assert_eq!(p.ups(), (2, 0));
    // The event is reused, not created again.
    p.core.free(c, &[stream(S2)]).unwrap();
    p.ev.complete(stream(S2));
    p.free(d);
    p.core.free_all_blocks(None).unwrap();
    assert_eq!(p.ev.get().created, 1);
    assert_eq!(p.ev.get().records, 2);
    assert_eq!(p.core.total_bytes(), 0);
    p.check();
}

#[test]
fn record_stream_on_two_streams_waits_for_both() {
    let p = pool();
    let a = p.alloc_on(UNIT, S1);
    p.core.free(a, &[stream(S2), stream(3)]).unwrap();
    p.ev.complete(stream(S2));
    p.core.free_all_blocks(None).unwrap();
    assert_eq!(p.core.total_bytes(), UNIT, "stream 3 has not passed yet");
    p.ev.complete(stream(3));
    p.core.free_all_blocks(None).unwrap();
    assert_eq!(p.core.total_bytes(), 0);
    p.check();
}

/// What the guide's pool chapter says of the counters: a held-back block is used until the
/// pool looks at its events, whether or not they have completed meanwhile.
#[test]
fn a_held_back_block_counts_as_used_until_the_pool_looks() {
    let p = pool();
    let spare = p.alloc_on(UNIT, S1);
    let a = p.alloc_on(2 * UNIT, S1);
    p.free(spare);
    // As `MemoryPool::deallocate_after` does: the buffer's own stream and the other one.
    p.core.free(a, &[stream(S1), stream(S2)]).unwrap();
    assert_eq!((p.core.used_bytes(), p.core.total_bytes(), p.core.n_free_blocks()), (2 * UNIT, 3 * UNIT, 1));
    p.ev.complete(stream(S1));
    p.ev.complete(stream(S2));
    assert_eq!(p.core.used_bytes(), 2 * UNIT, "the pool has not looked yet");
    // A request that finds a free block does not look either.
    let small = p.alloc_on(UNIT, S1);
    assert_eq!(small.ptr, spare.ptr);
    p.free(small);
    assert_eq!(p.core.used_bytes(), 2 * UNIT);
    // A request of the block's stream that finds nothing that fits looks, and takes it.
    let b = p.alloc_on(2 * UNIT, S1);
    assert_eq!(b.ptr, a.ptr);
    p.free(b);
    assert_eq!(p.core.used_bytes(), 0);
    // `free_all_blocks` looks too, and returns what is wholly free.
    let c = p.alloc_on(2 * UNIT, S1);
    p.core.free(c, &[stream(S1), stream(S2)]).unwrap();
    p.ev.complete(stream(S1));
    p.ev.complete(stream(S2));
    p.core.free_all_blocks(None).unwrap();
    assert_eq!((p.core.used_bytes(), p.core.total_bytes()), (0, 0));
    p.check();
}

fn hammer(p: &Pool, s: usize) {
    let mut live = Vec::new();
    for i in 0..2000usize {
        if i % 3 != 2 {
            live.push(p.alloc_on((i % 7 + 1) * 300, s));
        } else if let Some(a) = live.pop() {
            p.free(a);
        }
    }
    for a in live {
        p.free(a);
    }
}

#[test]
fn threads_share_a_pool_on_one_stream_and_on_their_own() {
    let p = pool();
    std::thread::scope(|scope| {
        for t in 0..8 {
            let p = &p;
            scope.spawn(move || hammer(p, if t % 2 == 0 { S1 } else { 10 + t }));
        }
    });
    assert_eq!(p.core.used_bytes(), 0);
    p.check();
    p.core.free_all_blocks(None).unwrap();
    assert!(p.up.get().live.is_empty());
}

#[test]
fn a_pool_frees_its_cache_when_dropped() {
    let p = pool();
    let a = p.alloc(UNIT);
    p.free(a);
    let up = p.up.clone();
    drop(p);
    assert!(up.get().live.is_empty());
}
