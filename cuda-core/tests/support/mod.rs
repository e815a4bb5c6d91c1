//! Fakes for testing the pools on a CPU: counting upstream allocators (device and pinned),
//! pinned memory on the heap, events that complete when the test says so, and a hook that
//! records every event.
//!
//! One file serves both sides. The unit tests in `src/pool/` include it as `crate::pool::fake`
//! (they test crate-private parts of the pools against it); each integration test here includes
//! it as `mod support;` and brings `cuhost::{alloc, pool, Error, Result}` into its crate root, so that
//! the `crate::` paths below name the same items in both.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::alloc::{Allocator, DeviceAllocation, PinnedAllocation, PinnedAllocator, StreamEvents, StreamRef};
use crate::pool::hooks::{HookEvent, MemoryHook};
use crate::{Error, Result};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Mutex;

/// Hands out addresses from a counter, never reusing one, under an optional capacity.
#[derive(Debug, Default)]
pub(crate) struct CountingUpstream {
    pub(crate) state: Mutex<Upstream>,
}

#[derive(Debug, Default)]
pub(crate) struct Upstream {
    next: u64,
    /// Live allocations: address → size.
    pub(crate) live: HashMap<u64, usize>,
    pub(crate) allocations: usize,
    pub(crate) deallocations: usize,
    /// Refuse (as the device would) when live bytes would pass this; 0 = never.
    pub(crate) capacity: usize,
    /// Fail every release (as `cuMemFree` after a fault would), giving the memory up.
    pub(crate) fail_releases: bool,
}

impl CountingUpstream {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        let s = CountingUpstream::default();
        s.state.lock().unwrap_or_else(|p| p.into_inner()).capacity = capacity;
        s
    }

    pub(crate) fn get(&self) -> std::sync::MutexGuard<'_, Upstream> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

// SAFETY: test-only; the addresses are never dereferenced (the pools' bookkeeping is what is
// tested), each is handed out once, and each range is as large as asked.
unsafe impl Allocator for CountingUpstream {
    fn allocate(&self, size: usize, _stream: StreamRef<'_>) -> Result<DeviceAllocation> {
        let mut s = self.get();
        let live: usize = s.live.values().sum();
        if s.capacity != 0 && live + size > s.capacity {
            return Err(Error::Driver {
                call: "cuMemAlloc",
                status: cuhost_driver_sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY,
            });
        }
        // Leave a gap so that blocks of different upstream allocations are never adjacent.
        let ptr = 0x1_0000_0000 + s.next;
        s.next += size as u64 + 4096;
        s.live.insert(ptr, size);
        s.allocations += 1;
        Ok(DeviceAllocation { ptr, size, token: ptr ^ 0xABCD })
    }

    unsafe fn deallocate(&self, a: DeviceAllocation, _stream: StreamRef<'_>) -> Result<()> {
        let mut s = self.get();
        if s.fail_releases {
            return Err(Error::Driver {
                call: "cuMemFree",
                status: cuhost_driver_sys::CUresult::CUDA_ERROR_LAUNCH_FAILED,
            });
        }
        if a.token != a.ptr ^ 0xABCD || s.live.remove(&a.ptr) != Some(a.size) {
            return Err(Error::invalid("CountingUpstream::deallocate", format!("{a:?} is not live")));
        }
        s.deallocations += 1;
        Ok(())
    }

    fn name(&self) -> &'static str {
        "counting"
    }
}

/// Pinned memory as addresses from a counter (never dereferenced), counted, under an optional
/// capacity: the pinned pool's bookkeeping never touches the bytes.
#[derive(Debug, Default)]
pub(crate) struct CountingPinned {
    pub(crate) state: Mutex<Upstream>,
}

impl CountingPinned {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        let s = CountingPinned::default();
        s.get().capacity = capacity;
        s
    }

    pub(crate) fn get(&self) -> std::sync::MutexGuard<'_, Upstream> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

// SAFETY: test-only; the addresses are never dereferenced (no `PinnedBuffer` is made over this
// allocator), each is handed out once, and each range is as large as asked.
unsafe impl PinnedAllocator for CountingPinned {
    fn allocate(&self, size: usize) -> Result<PinnedAllocation> {
        let mut s = self.get();
        let live: usize = s.live.values().sum();
        if s.capacity != 0 && live + size > s.capacity {
            return Err(Error::Driver {
                call: "cuMemHostAlloc",
                status: cuhost_driver_sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY,
            });
        }
        let ptr = 0x7f00_0000_0000 + s.next;
        s.next += size as u64 + 4096;
        s.live.insert(ptr, size);
        s.allocations += 1;
        Ok(PinnedAllocation { ptr: ptr as *mut u8, size })
    }

    unsafe fn deallocate(&self, a: PinnedAllocation) -> Result<()> {
        let mut s = self.get();
        if s.fail_releases {
            return Err(Error::Driver {
                call: "cuMemFreeHost",
                status: cuhost_driver_sys::CUresult::CUDA_ERROR_LAUNCH_FAILED,
            });
        }
        if s.live.remove(&(a.ptr as u64)) != Some(a.size) {
            return Err(Error::invalid("CountingPinned::deallocate", format!("{a:?} is not live")));
        }
        s.deallocations += 1;
        Ok(())
    }
}

/// Events that complete only when the test says so.
#[derive(Debug, Default)]
pub(crate) struct ManualEvents {
    pub(crate) state: Mutex<Events>,
}

#[derive(Debug, Default)]
pub(crate) struct Events {
    next: u64,
    /// Event → (stream it was last recorded on, complete).
    pub(crate) events: HashMap<u64, (usize, bool)>,
    pub(crate) created: usize,
    pub(crate) records: usize,
}

impl ManualEvents {
    pub(crate) fn get(&self) -> std::sync::MutexGuard<'_, Events> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Completes every event recorded on `stream`.
    pub(crate) fn complete(&self, stream: cuhost_driver_sys::CUstream) {
        for (s, done) in self.get().events.values_mut() {
            if *s == stream as usize {
                *done = true;
            }
        }
    }
}

// SAFETY: test-only; no stream runs anything, so "complete" is what the test says, and the
// handles are numbers in a map, sound for any value.
unsafe impl StreamEvents for ManualEvents {
    fn create(&self) -> Result<u64> {
        let mut s = self.get();
        s.next += 1;
        let e = s.next;
        s.events.insert(e, (0, true));
        s.created += 1;
        Ok(e)
    }

    fn record(&self, event: u64, stream: StreamRef<'_>) -> Result<()> {
        let mut s = self.get();
        s.records += 1;
        match s.events.get_mut(&event) {
            Some(e) => {
                *e = (stream.as_raw() as usize, false);
                Ok(())
            }
            None => Err(Error::invalid("ManualEvents::record", "no such event")),
        }
    }

    fn is_complete(&self, event: u64) -> bool {
        self.get().events.get(&event).is_none_or(|e| e.1)
    }

    fn destroy(&self, event: u64) {
        self.get().events.remove(&event);
    }
}

/// Pinned memory from the heap (real memory, 8-byte aligned, so buffers can be written and
/// read), counted.
#[derive(Default)]
pub(crate) struct HeapPinned {
    live: Mutex<HashMap<usize, Vec<u64>>>,
    pub(crate) allocations: Mutex<usize>,
}

impl HeapPinned {
    pub(crate) fn n_live(&self) -> usize {
        self.live.lock().unwrap().len()
    }
}

// SAFETY: test-only; each allocation is a fresh heap vector (owned here, untouched until it is
// given back), as large as asked, 8-byte aligned. It is not page-locked: no copy runs on it.
unsafe impl PinnedAllocator for HeapPinned {
    fn allocate(&self, size: usize) -> Result<PinnedAllocation> {
        let mut v = vec![0u64; size.div_ceil(8)];
        let ptr = v.as_mut_ptr().cast::<u8>();
        self.live.lock().unwrap().insert(ptr as usize, v);
        *self.allocations.lock().unwrap() += 1;
        Ok(PinnedAllocation { ptr, size })
    }
    unsafe fn deallocate(&self, a: PinnedAllocation) -> Result<()> {
        match self.live.lock().unwrap().remove(&(a.ptr as usize)) {
            Some(v) if v.len() == a.size.div_ceil(8) => Ok(()),
            _ => Err(Error::invalid("HeapPinned", "not live")),
        }
    }
}

/// Every event a hook sees, whole, with the callback's name.
#[derive(Default)]
pub(crate) struct Tape(pub(crate) RefCell<Vec<(&'static str, HookEvent)>>);

impl MemoryHook for Tape {
    fn name(&self) -> &str {
        "tape"
    }
    fn alloc_preprocess(&self, e: &HookEvent) {
        self.0.borrow_mut().push(("alloc_pre", *e));
    }
    fn alloc_postprocess(&self, e: &HookEvent) {
        self.0.borrow_mut().push(("alloc_post", *e));
    }
    fn malloc_preprocess(&self, e: &HookEvent) {
        self.0.borrow_mut().push(("malloc_pre", *e));
    }
    fn malloc_postprocess(&self, e: &HookEvent) {
        self.0.borrow_mut().push(("malloc_post", *e));
    }
    fn free_preprocess(&self, e: &HookEvent) {
        self.0.borrow_mut().push(("free_pre", *e));
    }
    fn free_postprocess(&self, e: &HookEvent) {
        self.0.borrow_mut().push(("free_post", *e));
    }
}

impl Tape {
    /// (callback, size, mem_size, mem_ptr, pmem_id) of each event.
    pub(crate) fn brief(&self) -> Vec<(&'static str, usize, usize, u64, usize)> {
        self.0.borrow().iter().map(|(n, e)| (*n, e.size, e.mem_size, e.mem_ptr, e.pmem_id)).collect()
    }
}
