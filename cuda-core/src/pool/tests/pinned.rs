//! The pinned pool's crate-private paths on a CPU: the thread's pinned allocator as buffers
//! find it, and memory given back after a copy (`give_back` with the copy's stream), which
//! waits for the copy's event. The pools' public layer is tested in `tests/pool_counting.rs`
//! and `tests/pool_pinned_hooks.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::fake::{CountingPinned, HeapPinned, ManualEvents, Tape};
use crate::alloc::*;
use crate::memory::PinnedBuffer;
use crate::pool::*;
use std::rc::Rc;
use std::sync::Arc;

/// A pinned pool on the heap, with events that complete when the test says so.
fn heap_pinned_pool() -> (Arc<PinnedMemoryPool>, Arc<HeapPinned>, Arc<ManualEvents>) {
    let up = Arc::new(HeapPinned::default());
    let ev = Arc::new(ManualEvents::default());
    (Arc::new(PinnedMemoryPool::with_parts(up.clone(), ev.clone())), up, ev)
}

#[test]
fn pinned_buffers_come_from_the_threads_pinned_allocator() {
    let (pool, _up, ev) = heap_pinned_pool();
    set_pinned_memory_allocator(Some(pool.clone()));
    let b = PinnedBuffer::from_slice(&[1u32, 2, 3]).unwrap();
    assert_eq!(b.as_slice().unwrap(), [1, 2, 3]);
    assert_eq!(pool.used_bytes(), 512);
    // Another thread has its own pinned allocator (here none is set: the default pool, which
    // needs a GPU, so only the setting is checked).
    std::thread::scope(|s| {
        s.spawn(|| assert!(current_pinned_allocator().is_none()));
    });
    set_pinned_memory_allocator(None);
    // No copy ever used the buffer: dropping it gives it back at once, with no event.
    assert!(!b.has_copies_in_flight());
    drop(b);
    assert_eq!((pool.used_bytes(), pool.n_free_blocks()), (0, 1));
    assert_eq!(ev.get().created, 0);
}

#[test]
fn pinned_buffers_wait_for_their_copies_event() {
    // What a dropped buffer with a copy in flight does: `PinnedAllocator::deallocate_after` on
    // the pool gives it back through `give_back` with the copy's stream, and the pool records
    // its own event there. (A `Stream` needs a GPU, so the stream here is a fake handle.)
    let (pool, _up, ev) = heap_pinned_pool();
    let copy_stream = 0x4400 as cuhost_driver_sys::CUstream;
    let a = pool.allocate_raw(512).unwrap();
    pool.give_back(a, &[copy_stream]).unwrap();
    assert_eq!(pool.used_bytes(), 512, "the copy may still read it");
    assert_eq!(pool.n_free_blocks(), 0);
    {
        let e = ev.get();
        assert_eq!((e.created, e.records), (1, 1));
        assert!(e.events.values().all(|&(s, done)| s == copy_stream as usize && !done));
    }
    let b = pool.allocate_raw(512).unwrap();
    assert_ne!(b.ptr, a.ptr);
    // Releasing the cache leaves it alone too.
    pool.free_all_blocks().unwrap();
    assert_eq!(pool.total_bytes(), 1024);
    ev.complete(copy_stream);
    let c = pool.allocate_raw(512).unwrap();
    assert_eq!(c.ptr, a.ptr, "reused once the copy's event completed");
    // The next deferral reuses the completed event instead of creating one.
    pool.give_back(c, &[copy_stream]).unwrap();
    let (created, records) = {
        let e = ev.get();
        (e.created, e.records)
    };
    assert_eq!((created, records), (1, 2));
    ev.complete(copy_stream);
    // SAFETY: allocated above, given back once, no copy uses it.
    unsafe { pool.deallocate(b) }.unwrap();
    pool.free_all_blocks().unwrap();
    assert_eq!((pool.used_bytes(), pool.total_bytes()), (0, 0));
}

#[test]
fn a_pinned_buffer_used_on_two_streams_waits_for_both() {
    let (pool, _up, ev) = heap_pinned_pool();
    let (s1, s2) = (0x4400 as cuhost_driver_sys::CUstream, 0x4800 as cuhost_driver_sys::CUstream);
    let a = pool.allocate_raw(4096).unwrap();
    pool.give_back(a, &[s1, s2]).unwrap();
    ev.complete(s1);
    pool.free_all_blocks().unwrap();
    assert_eq!((pool.used_bytes(), pool.total_bytes()), (4096, 4096), "stream 2 has not passed yet");
    ev.complete(s2);
    pool.free_all_blocks().unwrap();
    assert_eq!((pool.used_bytes(), pool.total_bytes()), (0, 0));
}

#[test]
fn a_pinned_buffer_given_back_after_a_copy_fires_its_free_hooks_at_once() {
    // What a buffer dropped with a copy in flight does (through `deallocate_after`, which
    // needs a `Stream`, so `give_back` with a fake stream here): the free is seen at the
    // drop, although the memory waits for the copy's event.
    let up = Arc::new(CountingPinned::default());
    let ev = Arc::new(ManualEvents::default());
    let pool = PinnedMemoryPool::with_parts(up, ev.clone());
    let a = pool.allocate_raw(512).unwrap();
    let tape = Rc::new(Tape::default());
    let guard = hooks::install(tape.clone()).unwrap();
    pool.give_back(a, &[0x4400 as cuhost_driver_sys::CUstream]).unwrap();
    drop(guard);
    let (p, id) = (a.ptr as u64, &pool as *const PinnedMemoryPool as usize);
    assert_eq!(tape.brief(), [("free_pre", 0, 512, p, id), ("free_post", 0, 512, p, id)]);
    assert_eq!(pool.used_bytes(), 512, "still waiting for the copy");
}
