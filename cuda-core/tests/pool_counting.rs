//! The pools' public layer on a CPU, against counting fakes: limits, the pinned pool, the
//! current allocator, hooks, the C interface.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// Each test file uses part of the shared fakes.
#[allow(dead_code)]
mod support;

use cuhost::alloc;
use cuhost::alloc::{Allocator, PinnedAllocator, StreamRef, set_allocator, using_allocator};
use cuhost::pool::{
    self, ALLOCATION_UNIT as UNIT, DebugPrintHook, LineProfileHook, LineUsage, MemoryPool, PinnedMemoryPool,
    PoolLimit, capi, get_allocator, hooks,
};
use cuhost::{Error, PinnedBuffer, Result};
use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;
use std::sync::Arc;
use support::{CountingUpstream, HeapPinned, ManualEvents};

fn fake_pool() -> (MemoryPool, Arc<CountingUpstream>) {
    let up = Arc::new(CountingUpstream::default());
    (MemoryPool::with_parts(up.clone(), Arc::new(ManualEvents::default())), up)
}

#[test]
fn limits_parse_bytes_and_percentages() {
    assert_eq!(PoolLimit::parse("1048576").unwrap(), PoolLimit::Bytes(1 << 20));
    assert_eq!(PoolLimit::parse(" 50% ").unwrap(), PoolLimit::Fraction(0.5));
    assert!(PoolLimit::parse("lots").is_err());
    assert!(PoolLimit::parse("-3").is_err());
    assert_eq!(PoolLimit::Fraction(0.25).resolve(|| Ok(1000)).unwrap(), 250);
    assert_eq!(PoolLimit::None.resolve(|| Ok(1000)).unwrap(), 0);
    for bad in [-0.1, 1.5, f64::NAN] {
        let e = PoolLimit::Fraction(bad).resolve(|| Ok(1000)).unwrap_err();
        assert!(e.to_string().contains("between 0 and 1"), "{e}");
    }
}

#[test]
fn memory_pool_limits_and_counters() {
    let (pool, _up) = fake_pool();
    assert_eq!(pool.limit(), None);
    pool.set_limit(PoolLimit::Bytes(4 * UNIT)).unwrap();
    assert_eq!(pool.limit(), Some(4 * UNIT));
    // A device-less pool cannot take a fraction.
    assert!(pool.set_limit(PoolLimit::Fraction(0.5)).is_err());
    let a = pool.allocate(3 * UNIT, StreamRef::legacy()).unwrap();
    assert_eq!((pool.used_bytes(), pool.free_bytes(), pool.total_bytes()), (3 * UNIT, 0, 3 * UNIT));
    let e = pool.allocate(2 * UNIT, StreamRef::legacy()).unwrap_err();
    assert!(
        matches!(e, Error::OutOfMemory { requested, limit: Some(l), .. } if requested == 2 * UNIT && l == 4 * UNIT)
    );
    // SAFETY: allocated above, freed once.
    unsafe { pool.deallocate(a, StreamRef::legacy()) }.unwrap();
    assert_eq!((pool.used_bytes(), pool.free_bytes(), pool.n_free_blocks()), (0, 3 * UNIT, 1));
    pool.free_all_blocks(None).unwrap();
    assert_eq!(pool.total_bytes(), 0);
    pool.check_invariants().unwrap();
}

/// A pinned pool on the heap, with events that complete when the test says so.
fn heap_pinned_pool() -> (Arc<PinnedMemoryPool>, Arc<HeapPinned>, Arc<ManualEvents>) {
    let up = Arc::new(HeapPinned::default());
    let ev = Arc::new(ManualEvents::default());
    (Arc::new(PinnedMemoryPool::with_parts(up.clone(), ev.clone())), up, ev)
}

#[test]
fn pinned_pool_uses_power_of_two_classes_and_exact_reuse() {
    let (pool, up, _ev) = heap_pinned_pool();
    let mut a = PinnedBuffer::<u8>::new_in(1000, pool.clone()).unwrap();
    assert_eq!(a.len(), 1000);
    assert!(a.as_slice().unwrap().iter().all(|&x| x == 0), "new buffers are zeroed");
    a.copy_from_slice(&[7; 1000]).unwrap();
    assert!(a.copy_from_slice(&[0; 1001]).is_err());
    assert_eq!(a.as_slice().unwrap()[999], 7);
    let pa = a.as_ptr();
    assert_eq!(pool.used_bytes(), 1024);
    drop(a);
    assert_eq!((pool.used_bytes(), pool.n_free_blocks()), (0, 1));
    // 600 rounds to 1024 as well: the same buffer comes back, zeroed again.
    let b = PinnedBuffer::<u8>::new_in(600, pool.clone()).unwrap();
    assert_eq!(b.as_ptr(), pa);
    assert!(b.as_slice().unwrap().iter().all(|&x| x == 0), "a reused buffer is zeroed");
    // 375 u32 are 1500 bytes, another class (2048): a new buffer.
    let c = PinnedBuffer::<u32>::new_in(375, pool.clone()).unwrap();
    assert_ne!(c.as_ptr().cast::<u8>(), pa);
    assert_eq!(*up.allocations.lock().unwrap(), 2);
    assert_eq!(pool.total_bytes(), 1024 + 2048);
    drop((b, c));
    // No buffer of 0 elements; a zero-byte request to the pool itself touches nothing.
    let e = PinnedBuffer::<u8>::new_in(0, pool.clone()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let z = pool.allocate(0).unwrap();
    assert!(z.ptr.is_null() && z.size == 0);
    // SAFETY: allocated just above, given back once.
    unsafe { pool.deallocate(z) }.unwrap();
    assert_eq!(pool.total_bytes(), 1024 + 2048);
    pool.free_all_blocks().unwrap();
    assert_eq!(pool.total_bytes(), 0);
    assert_eq!(up.n_live(), 0);
}

#[test]
fn the_current_allocator_is_per_thread_and_scoped() {
    let (pool, up) = fake_pool();
    let pool: Arc<dyn Allocator> = Arc::new(pool);
    let (other, _) = fake_pool();
    let other: Arc<dyn Allocator> = Arc::new(other);
    set_allocator(Some(pool.clone()));
    assert!(Arc::ptr_eq(&get_allocator().unwrap(), &pool));
    {
        let _g = using_allocator(other.clone());
        assert!(Arc::ptr_eq(&get_allocator().unwrap(), &other));
        // Another thread does not see this thread's allocator.
        std::thread::scope(|s| {
            s.spawn(|| {
                set_allocator(Some(pool.clone()));
                assert!(Arc::ptr_eq(&get_allocator().unwrap(), &pool));
            });
        });
    }
    assert!(Arc::ptr_eq(&get_allocator().unwrap(), &pool));
    let a = get_allocator().unwrap().allocate(100, StreamRef::legacy()).unwrap();
    assert_eq!(up.get().allocations, 1);
    // SAFETY: allocated above, freed once.
    unsafe { pool.deallocate(a, StreamRef::legacy()) }.unwrap();
    set_allocator(None);
}

#[test]
fn the_c_interface_allocates_from_the_current_allocator() {
    let (pool, up) = fake_pool();
    let _g = using_allocator(Arc::new(pool));
    let h = capi::cuda_core_get_allocator_handle();
    assert!(!h.is_null());
    // SAFETY: the handle is live until destroyed below.
    unsafe {
        let p = capi::cuda_core_malloc(h, 1000);
        assert!(!p.is_null());
        let q = capi::cuda_core_malloc(h, 1000);
        assert_ne!(p, q);
        assert_eq!(up.get().allocations, 2);
        capi::cuda_core_free(h, p);
        // Freed memory is reused through the pool, not allocated again.
        let r = capi::cuda_core_malloc(h, 1000);
        assert_eq!(r, p);
        capi::cuda_core_free(h, 0x1234 as *mut std::ffi::c_void);
        assert!(
            capi::last_error().is_some_and(|e| e.to_string().contains("not allocated through this handle"))
        );
        assert!(capi::cuda_core_malloc(std::ptr::null_mut(), 8).is_null());
        capi::cuda_core_destroy_allocator_handle(h);
    }
    assert_eq!(up.get().deallocations, 0, "the pool keeps the blocks cached");
}

/// Records the events a hook sees.
struct Recorder {
    name: &'static str,
    seen: RefCell<Vec<(&'static str, usize, u64)>>,
}

impl hooks::MemoryHook for Recorder {
    fn name(&self) -> &str {
        self.name
    }
    fn alloc_preprocess(&self, e: &hooks::HookEvent) {
        self.seen.borrow_mut().push(("alloc_pre", e.mem_size, e.mem_ptr));
    }
    fn alloc_postprocess(&self, e: &hooks::HookEvent) {
        self.seen.borrow_mut().push(("alloc_post", e.mem_size, e.mem_ptr));
    }
    fn malloc_preprocess(&self, e: &hooks::HookEvent) {
        self.seen.borrow_mut().push(("malloc_pre", e.size, e.mem_ptr));
    }
    fn malloc_postprocess(&self, e: &hooks::HookEvent) {
        self.seen.borrow_mut().push(("malloc_post", e.mem_size, e.mem_ptr));
    }
    fn free_preprocess(&self, e: &hooks::HookEvent) {
        self.seen.borrow_mut().push(("free_pre", e.mem_size, e.mem_ptr));
    }
    fn free_postprocess(&self, e: &hooks::HookEvent) {
        self.seen.borrow_mut().push(("free_post", e.mem_size, e.mem_ptr));
    }
}

#[test]
fn hooks_see_upstream_malloc_and_free_in_order() {
    let (pool, _up) = fake_pool();
    let rec = Rc::new(Recorder { name: "recorder", seen: RefCell::new(Vec::new()) });
    let guard = hooks::install(rec.clone()).unwrap();
    assert!(hooks::install(rec.clone()).is_err(), "one hook per name");
    assert_eq!(hooks::installed(), vec!["recorder".to_string()]);
    let a = pool.allocate(700, StreamRef::legacy()).unwrap();
    // SAFETY: allocated above, freed once.
    unsafe { pool.deallocate(a, StreamRef::legacy()) }.unwrap();
    let b = pool.allocate(700, StreamRef::legacy()).unwrap();
    drop(guard);
    // SAFETY: as above.
    unsafe { pool.deallocate(b, StreamRef::legacy()) }.unwrap();
    let seen = rec.seen.borrow().clone();
    let p = a.ptr;
    let want: Vec<(&str, usize, u64)> = vec![
        ("malloc_pre", 700, 0),
        ("alloc_pre", 1024, 0),
        ("alloc_post", 1024, p),
        ("malloc_post", 1024, p),
        ("free_pre", 1024, p),
        ("free_post", 1024, p),
        // The second allocation is served from the cache: no upstream events.
        ("malloc_pre", 700, 0),
        ("malloc_post", 1024, p),
    ];
    assert_eq!(seen, want);
    assert!(hooks::installed().is_empty());
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
fn debug_print_hook_writes_one_json_line_per_event() {
    let (pool, _up) = fake_pool();
    let out = Shared::default();
    let guard = hooks::install(Rc::new(DebugPrintHook::new(Box::new(out.clone())))).unwrap();
    let a = pool.allocate(100, StreamRef::legacy()).unwrap();
    // SAFETY: allocated above, freed once.
    unsafe { pool.deallocate(a, StreamRef::legacy()) }.unwrap();
    drop(guard);
    let text = String::from_utf8(out.0.borrow().clone()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("{\"hook\":\"alloc\",") && lines[0].contains("\"mem_size\":512"), "{text}");
    assert!(lines[1].starts_with("{\"hook\":\"malloc\",") && lines[1].contains("\"size\":100"), "{text}");
    assert!(
        lines[2].starts_with("{\"hook\":\"free\",") && lines[2].contains(&format!("\"mem_ptr\":{}", a.ptr)),
        "{text}"
    );
    assert!(lines.iter().all(|l| l.ends_with('}') && l.contains("pool_counting.rs")), "{text}");
}

#[test]
fn line_profile_hook_attributes_bytes_to_call_sites() {
    let (pool, _up) = fake_pool();
    let profile = Rc::new(LineProfileHook::new());
    let guard = hooks::install(profile.clone()).unwrap();
    let mut keep = Vec::new();
    for _ in 0..3 {
        keep.push(pool.allocate(1000, StreamRef::legacy()).unwrap()); // site A
    }
    for a in keep.drain(..) {
        // SAFETY: allocated above, freed once.
        unsafe { pool.deallocate(a, StreamRef::legacy()) }.unwrap();
    }
    let line_b = line!() + 1;
    let b = pool.allocate(1000, StreamRef::legacy()).unwrap(); // site B: from the cache
    drop(guard);
    // SAFETY: as above.
    unsafe { pool.deallocate(b, StreamRef::legacy()) }.unwrap();
    let usage = profile.usage();
    assert_eq!(usage.len(), 2, "{usage:?}");
    let (site_a, a) = usage[0];
    let (site_b, bu) = usage[1];
    assert!(site_a.0.ends_with("pool_counting.rs"));
    assert_eq!(a, LineUsage { used_bytes: 3 * 1024, acquired_bytes: 3 * 1024 });
    assert_eq!(site_b.1, line_b);
    assert_eq!(bu, LineUsage { used_bytes: 1024, acquired_bytes: 0 });
    let mut report = Vec::new();
    profile.print_report(&mut report).unwrap();
    let report = String::from_utf8(report).unwrap();
    assert!(report.lines().last().unwrap().contains("4096"), "{report}");
}

#[test]
fn without_an_allocator_or_a_context_get_allocator_says_why() {
    // A fresh thread has neither an allocator set nor a current context.
    let e = std::thread::spawn(|| get_allocator().map(|_| ()).unwrap_err()).join().unwrap();
    let text = e.to_string();
    assert!(
        text.contains("no context is current") || matches!(e, Error::Load { .. }),
        "unexpected error: {text}"
    );
}
