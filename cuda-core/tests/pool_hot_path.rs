//! The pools' hot paths allocate nothing on the heap while no memory hook is installed: a
//! counting global allocator watches steady-state malloc and free of both pools, on a CPU,
//! through an upstream allocator and event source of the test's own.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use cuda_core::Result;
use cuda_core::pool::{
    Allocator, DeviceAllocation, MemoryPool, PinnedAllocation, PinnedAllocator, PinnedMemoryPool,
    StreamEvents, StreamRef, hooks,
};
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

/// Addresses from a counter, for either pool; nothing is ever dereferenced.
#[derive(Default)]
struct Addresses(AtomicU64);

impl Addresses {
    fn next(&self, size: usize) -> u64 {
        0x5000_0000_0000 + self.0.fetch_add(size as u64 + 4096, Ordering::Relaxed)
    }
}

impl Allocator for Addresses {
    fn allocate(&self, size: usize, _stream: StreamRef<'_>) -> Result<DeviceAllocation> {
        Ok(DeviceAllocation { ptr: self.next(size), size, token: 0 })
    }
    unsafe fn deallocate(&self, _a: DeviceAllocation, _stream: StreamRef<'_>) -> Result<()> {
        Ok(())
    }
}

impl PinnedAllocator for Addresses {
    fn allocate(&self, size: usize) -> Result<PinnedAllocation> {
        Ok(PinnedAllocation { ptr: self.next(size) as *mut u8, size })
    }
    unsafe fn deallocate(&self, _a: PinnedAllocation) -> Result<()> {
        Ok(())
    }
}

/// Events that are always complete.
struct Done;

impl StreamEvents for Done {
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
fn steady_state(device: &MemoryPool, pinned: &PinnedMemoryPool, rounds: usize) {
    let pinned_dyn: &dyn PinnedAllocator = pinned;
    for _ in 0..rounds {
        let d = device.allocate(1 << 20, StreamRef::legacy()).unwrap();
        // SAFETY: allocated just above, freed once.
        unsafe { device.deallocate(d, StreamRef::legacy()) }.unwrap();
        drop(pinned.malloc(1 << 20).unwrap());
        let p = pinned_dyn.allocate(3000).unwrap();
        // SAFETY: allocated just above, given back once, no copy uses it.
        unsafe { pinned_dyn.deallocate(p) }.unwrap();
    }
}

#[test]
fn steady_state_malloc_and_free_allocate_nothing_without_hooks() {
    let device = MemoryPool::with_parts(Arc::new(Addresses::default()), Arc::new(Done));
    let pinned = PinnedMemoryPool::with_parts(Arc::new(Addresses::default()), Arc::new(Done));
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
}
