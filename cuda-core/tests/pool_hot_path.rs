//! The pools' hot paths allocate nothing on the heap while no memory hook is installed: a
//! counting global allocator watches steady-state allocation and free of both pools, on a CPU,
//! through an upstream allocator and event source of the test's own: the pools' `Allocator` and
//! `PinnedAllocator` methods, and a `PinnedBuffer` from the pinned pool, made and dropped.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use cuhost::alloc::{
    Allocator, DeviceAllocation, PinnedAllocation, PinnedAllocator, StreamEvents, StreamRef,
    set_pinned_memory_allocator,
};
use cuhost::pool::{MemoryPool, PinnedMemoryPool, hooks};
use cuhost::{PinnedBuffer, Result};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The system allocator, counting the allocations made by each thread.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn count() {
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: every call is passed on to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract is passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Heap allocations made by this thread while `f` runs.
fn allocations_in(f: impl FnOnce()) -> usize {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

/// Device addresses from a counter; nothing is ever dereferenced.
#[derive(Default)]
struct Addresses(AtomicU64);

// SAFETY: test-only; the addresses come from a counter, each range handed out once and as large
// as asked, and nothing ever reads or writes them (no buffer is made over them).
unsafe impl Allocator for Addresses {
    fn allocate(&self, size: usize, _stream: StreamRef<'_>) -> Result<DeviceAllocation> {
        let ptr = 0x5000_0000_0000 + self.0.fetch_add(size as u64 + 4096, Ordering::Relaxed);
        Ok(DeviceAllocation { ptr, size, token: 0 })
    }
    unsafe fn deallocate(&self, _a: DeviceAllocation, _stream: StreamRef<'_>) -> Result<()> {
        Ok(())
    }
}

/// Host memory from the system allocator, page-aligned: a `PinnedBuffer` writes its memory (it
/// is zeroed), so the pinned pool needs real memory under it.
struct HostMemory;

const PAGE: usize = 4096;

// SAFETY: test-only; each allocation is fresh, page-aligned system memory of the size asked,
// owned by the caller until given back. It is not page-locked: no copy runs on it here.
unsafe impl PinnedAllocator for HostMemory {
    fn allocate(&self, size: usize) -> Result<PinnedAllocation> {
        let layout = Layout::from_size_align(size.max(1), PAGE).expect("a valid layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { System.alloc(layout) };
        assert!(!ptr.is_null(), "out of host memory");
        Ok(PinnedAllocation { ptr, size })
    }
    unsafe fn deallocate(&self, a: PinnedAllocation) -> Result<()> {
        let layout = Layout::from_size_align(a.size.max(1), PAGE).expect("a valid layout");
        // SAFETY: allocated by `allocate` above with this layout, given back once.
        unsafe { System.dealloc(a.ptr, layout) };
        Ok(())
    }
}

/// Events that are always complete.
struct Done;

// SAFETY: test-only; no work ever runs on the streams given, so every recording is complete at
// once, and the methods touch no handle.
unsafe impl StreamEvents for Done {
    fn create(&self) -> Result<u64> {
        Ok(1)
    }
    fn record(&self, _event: u64, _stream: StreamRef<'_>) -> Result<()> {
        Ok(())
    }
    fn is_complete(&self, _event: u64) -> bool {
        true
    }
    fn destroy(&self, _event: u64) {}
}

/// A hook that does nothing: installing it is what costs.
struct Quiet;

impl hooks::MemoryHook for Quiet {
    fn name(&self) -> &str {
        "quiet"
    }
}

/// Steady-state work on both pools: every request is served from their caches.
fn steady_state(device: &MemoryPool, pinned: &Arc<PinnedMemoryPool>, rounds: usize) {
    let pinned_dyn: &dyn PinnedAllocator = &**pinned;
    for _ in 0..rounds {
        let d = device.allocate(1 << 20, StreamRef::legacy()).unwrap();
        // SAFETY: allocated just above, freed once.
        unsafe { device.deallocate(d, StreamRef::legacy()) }.unwrap();
        let p = pinned.allocate(1 << 20).unwrap();
        // SAFETY: allocated just above, given back once, no copy uses it.
        unsafe { pinned.deallocate(p) }.unwrap();
        let p = pinned_dyn.allocate(3000).unwrap();
        // SAFETY: as above.
        unsafe { pinned_dyn.deallocate(p) }.unwrap();
        // A buffer from a given pool (the `Arc` is cloned, not allocated), and one from the
        // thread's pinned allocator (set by the caller); both zeroed, dropped with no copy.
        let b = PinnedBuffer::<u32>::new_in(1000, pinned.clone()).unwrap();
        assert_eq!(b.as_slice().unwrap()[999], 0);
        drop(b);
        drop(PinnedBuffer::<u8>::new(64 << 10).unwrap());
    }
}

#[test]
fn steady_state_malloc_and_free_allocate_nothing_without_hooks() {
    let device = MemoryPool::with_parts(Arc::new(Addresses::default()), Arc::new(Done));
    let pinned = Arc::new(PinnedMemoryPool::with_parts(Arc::new(HostMemory), Arc::new(Done)));
    set_pinned_memory_allocator(Some(pinned.clone()));
    steady_state(&device, &pinned, 1); // warm: the upstream blocks and the pools' lists

    assert_eq!(allocations_in(|| steady_state(&device, &pinned, 1000)), 0, "the hot paths allocated");

    // The counter does see allocations: with a hook installed, each event copies the thread's
    // list of hooks.
    let guard = hooks::install(Rc::new(Quiet)).unwrap();
    let hooked = allocations_in(|| steady_state(&device, &pinned, 10));
    drop(guard);
    assert!(hooked >= 10, "only {hooked} allocations with a hook installed");
    assert_eq!(
        allocations_in(|| steady_state(&device, &pinned, 100)),
        0,
        "the hook's removal restores the fast path"
    );
    set_pinned_memory_allocator(None);
    assert_eq!(pinned.used_bytes(), 0);
    pinned.free_all_blocks().unwrap();
    assert_eq!(pinned.total_bytes(), 0);
}
