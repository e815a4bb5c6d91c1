//! The pool through its public interface only, on a CPU: an upstream allocator and an event
//! source of the user's own, the Allocator trait, hooks and the current allocator.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use cuhost::alloc;
use cuhost::alloc::{Allocator, DeviceAllocation, StreamEvents, StreamRef};
use cuhost::pool::{self, LineProfileHook, MemoryPool, PoolLimit, hooks};
use cuhost::{Error, Result};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

/// An upstream that hands out addresses from a counter and remembers what is live.
#[derive(Default)]
struct Arena {
    state: Mutex<(u64, HashMap<u64, usize>)>,
}

// SAFETY: test-only; each address range is handed out once and as large as asked, and nothing
// ever reads or writes it (only the pool's bookkeeping is tested; no buffer is made over it).
unsafe impl Allocator for Arena {
    fn allocate(&self, size: usize, _stream: StreamRef<'_>) -> Result<DeviceAllocation> {
        let mut s = self.state.lock().unwrap();
        let ptr = 0x7000_0000 + s.0;
        s.0 += size as u64 + 4096;
        s.1.insert(ptr, size);
        Ok(DeviceAllocation { ptr, size, token: 0 })
    }

    unsafe fn deallocate(&self, a: DeviceAllocation, _stream: StreamRef<'_>) -> Result<()> {
        match self.state.lock().unwrap().1.remove(&a.ptr) {
            Some(size) if size == a.size => Ok(()),
            _ => Err(Error::invalid("Arena::deallocate", "not live")),
        }
    }

    fn name(&self) -> &'static str {
        "arena"
    }
}

/// Events that are always complete: nothing runs on these streams.
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

fn live(up: &Arena) -> usize {
    up.state.lock().unwrap().1.len()
}

#[test]
fn a_pool_on_a_user_upstream_caches_and_releases() {
    let up = Arc::new(Arena::default());
    let pool = MemoryPool::with_parts(up.clone(), Arc::new(Done));
    let s = StreamRef::legacy();
    let a = pool.allocate(3000, s).unwrap();
    assert_eq!(a.size, 3072);
    // SAFETY: each allocation is given back once.
    unsafe { pool.deallocate(a, s) }.unwrap();
    let b = pool.allocate(1024, s).unwrap();
    assert_eq!(b.ptr, a.ptr, "split from the cached block");
    assert_eq!((pool.used_bytes(), pool.free_bytes(), pool.total_bytes()), (1024, 2048, 3072));
    assert_eq!(live(&up), 1);
    // SAFETY: as above.
    unsafe { pool.deallocate(b, s) }.unwrap();
    pool.free_all_blocks(None).unwrap();
    assert_eq!(live(&up), 0);
    assert_eq!(pool.total_bytes(), 0);
}

#[test]
fn limits_refuse_with_the_numbers() {
    let pool = MemoryPool::with_parts(Arc::new(Arena::default()), Arc::new(Done));
    pool.set_limit(PoolLimit::Bytes(1 << 20)).unwrap();
    let e = pool.allocate((1 << 20) + 1, StreamRef::legacy()).unwrap_err();
    assert_eq!(e, Error::OutOfMemory { requested: (1 << 20) + 1, held: 0, limit: Some(1 << 20) });
    assert!(e.to_string().contains("1048577"), "{e}");
}

#[test]
fn the_current_allocator_and_a_line_profile() {
    let up = Arc::new(Arena::default());
    let pool: Arc<dyn Allocator> = Arc::new(MemoryPool::with_parts(up.clone(), Arc::new(Done)));
    let _current = alloc::using_allocator(pool.clone());
    let profile = Rc::new(LineProfileHook::new());
    let hook = hooks::install(profile.clone()).unwrap();
    let a = pool::get_allocator().unwrap().allocate(5000, StreamRef::legacy()).unwrap();
    drop(hook);
    // SAFETY: given back once.
    unsafe { pool.deallocate(a, StreamRef::legacy()) }.unwrap();
    let usage = profile.usage();
    assert_eq!(usage.len(), 1);
    assert!(usage[0].0.0.ends_with("pool_public_api.rs"), "{usage:?}");
    assert_eq!((usage[0].1.used_bytes, usage[0].1.acquired_bytes), (5120, 5120));
}
