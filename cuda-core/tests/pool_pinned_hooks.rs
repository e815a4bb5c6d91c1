//! Memory hooks around the pinned pool, on a CPU against a counting upstream.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// Each test file uses part of the shared fakes.
#[allow(dead_code)]
mod support;

use cuhost::alloc;
use cuhost::alloc::{Allocator, PinnedAllocator, StreamRef};
use cuhost::pool::hooks::{self, MemoryKind};
use cuhost::pool::{self, DebugPrintHook, LineProfileHook, LineUsage, MemoryPool, PinnedMemoryPool};
use cuhost::{Error, PinnedBuffer, Result};
use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;
use std::sync::Arc;
use support::{CountingPinned, CountingUpstream, HeapPinned, ManualEvents, Tape};

fn pinned_pool(up: CountingPinned) -> (PinnedMemoryPool, Arc<CountingPinned>) {
    let up = Arc::new(up);
    (PinnedMemoryPool::with_parts(up.clone(), Arc::new(ManualEvents::default())), up)
}

#[test]
fn pinned_pool_fires_upstream_malloc_and_free_hooks_in_order() {
    // Buffers write their memory (they are zeroed): the pool sits on real heap memory.
    let up = Arc::new(HeapPinned::default());
    let pool = Arc::new(PinnedMemoryPool::with_parts(up.clone(), Arc::new(ManualEvents::default())));
    let tape = Rc::new(Tape::default());
    let guard = hooks::install(tape.clone()).unwrap();
    let line = line!() + 1;
    let a = PinnedBuffer::<u8>::new_in(700, pool.clone()).unwrap();
    let p = a.as_ptr() as u64;
    drop(a);
    // The same 1024-byte class: from the cache.
    let b = PinnedBuffer::<u8>::new_in(600, pool.clone()).unwrap();
    assert_eq!(b.as_ptr() as u64, p);
    drop(b);
    drop(guard);
    // No hook installed any more: not seen.
    let after = PinnedBuffer::<u8>::new_in(700, pool.clone()).unwrap();
    drop(after);

    let id = Arc::as_ptr(&pool) as usize;
    let want = vec![
        ("malloc_pre", 700, 1024, 0, id),
        ("alloc_pre", 0, 1024, 0, 0),
        ("alloc_post", 0, 1024, p, 0),
        ("malloc_post", 700, 1024, p, id),
        ("free_pre", 0, 1024, p, id),
        ("free_post", 0, 1024, p, id),
        ("malloc_pre", 600, 1024, 0, id),
        ("malloc_post", 600, 1024, p, id),
        ("free_pre", 0, 1024, p, id),
        ("free_post", 0, 1024, p, id),
    ];
    assert_eq!(tape.brief(), want);
    let events = tape.0.borrow();
    assert!(events.iter().all(|(_, e)| e.kind == MemoryKind::PinnedHost && e.device_id == -1));
    // The call site is the caller's of `PinnedBuffer::new_in`, through `#[track_caller]` (and
    // the `PinnedAllocator` trait object).
    let (_, first) = events[0];
    assert!(first.location.file().ends_with("pool_pinned_hooks.rs"), "{:?}", first.location);
    assert_eq!(first.location.line(), line);
    assert_eq!(events[2].1.location.line(), line, "the upstream allocation is attributed to the same site");
    assert_eq!(*up.allocations.lock().unwrap(), 1);
}

#[test]
fn pinned_hooks_see_the_caller_through_the_pinned_allocator_trait() {
    let (pool, _up) = pinned_pool(CountingPinned::default());
    let pool: Arc<dyn PinnedAllocator> = Arc::new(pool);
    let tape = Rc::new(Tape::default());
    let guard = hooks::install(tape.clone()).unwrap();
    let line = line!() + 1;
    let a = pool.allocate(5000).unwrap();
    // SAFETY: allocated just above, given back once, no copy uses it.
    unsafe { pool.deallocate(a) }.unwrap();
    drop(guard);
    let events = tape.0.borrow();
    let names: Vec<&str> = events.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["malloc_pre", "alloc_pre", "alloc_post", "malloc_post", "free_pre", "free_post"]);
    assert_eq!(events[3].1.mem_size, 8192, "5000 bytes are served from the 8 KiB class");
    assert_eq!(events[0].1.location.line(), line);
    assert_eq!(events[4].1.location.line(), line + 2, "the free is attributed to its own site");
    assert!(events.iter().all(|(_, e)| e.location.file().ends_with("pool_pinned_hooks.rs")));
}

#[test]
fn pinned_out_of_memory_retry_shows_both_upstream_attempts() {
    // Room for 2 KiB: a cached 1 KiB buffer must go before a 2 KiB one fits.
    let (pool, up) = pinned_pool(CountingPinned::with_capacity(2048));
    let a = pool.allocate(1000).unwrap();
    // SAFETY: allocated just above, given back once, no copy uses it.
    unsafe { pool.deallocate(a) }.unwrap();
    assert_eq!(pool.n_free_blocks(), 1);
    let tape = Rc::new(Tape::default());
    let guard = hooks::install(tape.clone()).unwrap();
    let b = pool.allocate(2000).unwrap();
    drop(guard);
    let names: Vec<&str> = tape.0.borrow().iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["malloc_pre", "alloc_pre", "alloc_pre", "alloc_post", "malloc_post"]);
    assert_eq!(pool.total_bytes(), 2048);
    assert_eq!(up.get().deallocations, 1, "the cached buffer was released for the retry");
    // SAFETY: allocated above, given back once, no copy uses it.
    unsafe { pool.deallocate(b) }.unwrap();
}

#[test]
fn a_failed_pinned_allocation_fires_no_post_hooks() {
    let (pool, _up) = pinned_pool(CountingPinned::with_capacity(1024));
    let tape = Rc::new(Tape::default());
    let guard = hooks::install(tape.clone()).unwrap();
    let e = pool.allocate(4096).unwrap_err();
    drop(guard);
    assert!(matches!(e, Error::OutOfMemory { requested: 4096, held: 0, limit: None }), "{e}");
    let names: Vec<&str> = tape.0.borrow().iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["malloc_pre", "alloc_pre", "alloc_pre"]);
}

/// A writer the test can read back.
#[derive(Clone, Default)]
struct Shared(Rc<RefCell<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn debug_print_hook_names_the_kind_of_memory() {
    let (pinned, _) = pinned_pool(CountingPinned::default());
    let device =
        MemoryPool::with_parts(Arc::new(CountingUpstream::default()), Arc::new(ManualEvents::default()));
    let out = Shared::default();
    let guard = hooks::install(Rc::new(DebugPrintHook::new(Box::new(out.clone())))).unwrap();
    let h = pinned.allocate(100).unwrap();
    // SAFETY: allocated just above, given back once, no copy uses it.
    unsafe { pinned.deallocate(h) }.unwrap();
    let d = device.allocate(100, StreamRef::legacy()).unwrap();
    // SAFETY: allocated just above, freed once.
    unsafe { device.deallocate(d, StreamRef::legacy()) }.unwrap();
    drop(guard);
    let text = String::from_utf8(out.0.borrow().clone()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 6, "{text}");
    for l in &lines[..3] {
        assert!(l.contains("\"kind\":\"pinned_host\",\"device_id\":-1,"), "{text}");
    }
    for l in &lines[3..] {
        assert!(l.contains("\"kind\":\"device\","), "{text}");
    }
    assert!(lines[1].starts_with("{\"hook\":\"malloc\",") && lines[1].contains("\"mem_size\":512"), "{text}");
}

#[test]
fn line_profile_hook_counts_device_memory_only() {
    let (pinned, _) = pinned_pool(CountingPinned::default());
    let device =
        MemoryPool::with_parts(Arc::new(CountingUpstream::default()), Arc::new(ManualEvents::default()));
    let profile = Rc::new(LineProfileHook::new());
    let guard = hooks::install(profile.clone()).unwrap();
    let host = pinned.allocate(100_000).unwrap();
    let d = device.allocate(1000, StreamRef::legacy()).unwrap();
    drop(guard);
    // SAFETY: allocated above, given back once, no copy uses it.
    unsafe { pinned.deallocate(host) }.unwrap();
    // SAFETY: allocated just above, freed once.
    unsafe { device.deallocate(d, StreamRef::legacy()) }.unwrap();
    let usage = profile.usage();
    assert_eq!(usage.len(), 1, "{usage:?}");
    assert_eq!(usage[0].1, LineUsage { used_bytes: 1024, acquired_bytes: 1024 });
}
