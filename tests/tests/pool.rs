//! `cuhost::pool` on a GPU: data written and read back through pooled memory (`DeviceBuffer`s
//! from a `MemoryPool`), across streams and threads; record_stream; limits; the pinned pool under
//! `PinnedBuffer`s and their asynchronous copies; upstream allocators; the default pool, the
//! current allocator and the C interface; memory hooks around both pools.

use cuda_tests::{TestResult, drv, ensure, ensure_eq, gpu, hold};
use cuhost::alloc;
use cuhost::alloc::{Allocator, DeviceAllocator, ManagedAllocator, StreamRef};
use cuhost::mempool::AsyncAllocator;
use cuhost::pool::hooks::{self, HookEvent, MemoryHook, MemoryKind};
use cuhost::pool::{self, MemoryPool, PinnedMemoryPool, PoolLimit};
use cuhost::{Context, Device, DeviceBuffer, Error, PinnedBuffer, Stream, StreamFlags};
use cuhost_driver_sys as sys;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::mpsc;

fn main() {
    cuda_tests::run(&[
        gpu("pooled_memory_round_trips_data", pooled_memory_round_trips_data),
        gpu("split_blocks_do_not_overlap", split_blocks_do_not_overlap),
        gpu("record_stream_holds_a_block_until_the_other_stream_passes", record_stream_holds_block),
        gpu("threads_on_their_own_streams_share_one_pool", threads_share_one_pool),
        gpu("limits_and_out_of_memory", limits_and_out_of_memory),
        gpu("pinned_pool_feeds_async_copies", pinned_pool_feeds_async_copies),
        gpu("upstream_allocators_give_usable_memory", upstream_allocators_give_usable_memory),
        gpu("default_allocator_and_c_interface", default_allocator_and_c_interface),
        gpu("the_default_pool_defers_a_release_the_same_way_through_get_allocator", default_pool_one_door),
        gpu("typed_views_of_pooled_memory", typed_views_of_pooled_memory),
        gpu("hooks_see_device_and_pinned_pools", hooks_see_device_and_pinned_pools),
        gpu("hooks_report_where_buffers_are_made_and_freed", hooks_report_where_buffers_are_made_and_freed),
    ]);
}

fn ctx() -> Result<Context, Error> {
    let ctx = Context::primary(&Device::get(0)?)?;
    ctx.bind_to_thread()?;
    Ok(ctx)
}

fn pattern(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32).map(|i| i.wrapping_mul(2_654_435_761) ^ seed).collect()
}

/// Writes `data` to `dst` on `stream` (through the stream, so it is ordered).
fn upload(dst: sys::CUdeviceptr, data: &[u32], stream: &Stream) -> TestResult {
    // SAFETY: `dst` holds at least `data.len() * 4` bytes; the stream is synchronized before
    // `data` goes away.
    drv("cuMemcpyHtoDAsync", unsafe {
        sys::cuMemcpyHtoDAsync(dst, data.as_ptr().cast(), data.len() * 4, stream.as_raw())
    })?;
    stream.synchronize()?;
    Ok(())
}

fn download(src: sys::CUdeviceptr, n: usize, stream: &Stream) -> Result<Vec<u32>, cuda_tests::Failed> {
    let mut out = vec![0u32; n];
    // SAFETY: `src` holds at least `n * 4` bytes; synchronized before `out` is read.
    drv("cuMemcpyDtoHAsync", unsafe {
        sys::cuMemcpyDtoHAsync(out.as_mut_ptr().cast(), src, n * 4, stream.as_raw())
    })?;
    stream.synchronize()?;
    Ok(out)
}

fn pooled_memory_round_trips_data() -> TestResult {
    let ctx = ctx()?;
    let pool = Arc::new(MemoryPool::new(&ctx)?);
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let data = pattern(1 << 18, 7);
    let b = DeviceBuffer::<u8>::new_in(&s, data.len() * 4, pool.clone())?;
    ensure_eq!(b.allocation().size, 1 << 20);
    ensure_eq!(b.allocator_name(), "MemoryPool");
    upload(b.as_raw(), &data, &s)?;
    ensure!(download(b.as_raw(), data.len(), &s)? == data, "data read back differs");
    let ptr = b.as_raw();
    drop(b);
    ensure_eq!(pool.used_bytes(), 0);
    ensure_eq!(pool.total_bytes(), 1 << 20);
    // Reused at once on the same stream.
    let again = DeviceBuffer::<u8>::new_in(&s, 1 << 20, pool.clone())?;
    ensure_eq!(again.as_raw(), ptr);
    // `free` gives the memory back now and reports what `Drop` would keep.
    again.free()?;
    ensure_eq!(pool.used_bytes(), 0);
    pool.free_all_blocks(None)?;
    ensure_eq!(pool.total_bytes(), 0);
    Ok(())
}

fn split_blocks_do_not_overlap() -> TestResult {
    let ctx = ctx()?;
    let pool = Arc::new(MemoryPool::new(&ctx)?);
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    drop(DeviceBuffer::<u8>::new_in(&s, 8 << 20, pool.clone())?);
    let sizes = [3000usize, 1 << 20, 512, 70_000, 4];
    let parts: Vec<DeviceBuffer<u8>> =
        sizes.iter().map(|&n| DeviceBuffer::new_in(&s, n * 4, pool.clone())).collect::<Result<_, _>>()?;
    ensure_eq!(pool.total_bytes(), 8 << 20);
    for (i, (p, &n)) in parts.iter().zip(&sizes).enumerate() {
        upload(p.as_raw(), &pattern(n, i as u32), &s)?;
    }
    for (i, (p, &n)) in parts.iter().zip(&sizes).enumerate() {
        ensure!(
            download(p.as_raw(), n, &s)? == pattern(n, i as u32),
            "block {i} was overwritten by a neighbour"
        );
    }
    drop(parts);
    ensure_eq!(pool.n_free_blocks(), 1);
    pool.check_invariants()?;
    Ok(())
}

fn record_stream_holds_block() -> TestResult {
    let ctx = ctx()?;
    let pool = Arc::new(MemoryPool::new(&ctx)?);
    let s1 = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let s2 = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    // Stall s2 until the test lets it go.
    let (go, wait) = mpsc::channel::<()>();
    s2.launch_host_func(move || {
        let _ = wait.recv();
    })?;
    let b = DeviceBuffer::<u8>::new_in(&s1, 1 << 20, pool.clone())?;
    let first = b.as_raw();
    b.record_stream(&s2)?;
    ensure_eq!(b.recorded_streams().len(), 1);
    drop(b);
    ensure_eq!(pool.used_bytes(), 1 << 20);
    let held = DeviceBuffer::<u8>::new_in(&s1, 1 << 20, pool.clone())?;
    ensure!(held.as_raw() != first, "a block still used by a stalled stream was reused");
    let _ = go.send(());
    s2.synchronize()?;
    s1.synchronize()?;
    // Now the events have completed: the next miss finds the block again.
    let reused = DeviceBuffer::<u8>::new_in(&s1, 1 << 20, pool.clone())?;
    ensure_eq!(reused.as_raw(), first);
    ensure_eq!(pool.total_bytes(), 2 << 20);
    Ok(())
}

fn threads_share_one_pool() -> TestResult {
    let ctx = ctx()?;
    let pool = Arc::new(MemoryPool::new(&ctx)?);
    let results: Vec<Result<(), String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8u32)
            .map(|t| {
                let (pool, ctx) = (&pool, ctx.clone());
                scope.spawn(move || -> Result<(), String> {
                    ctx.bind_to_thread().map_err(|e| e.to_string())?;
                    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING).map_err(|e| e.to_string())?;
                    for round in 0..20u32 {
                        let n = 1000 + (t as usize * 997 + round as usize * 131) % 50_000;
                        let b =
                            DeviceBuffer::<u8>::new_in(&s, n * 4, pool.clone()).map_err(|e| e.to_string())?;
                        let data = pattern(n, t * 1000 + round);
                        upload(b.as_raw(), &data, &s).map_err(|e| format!("{e:?}"))?;
                        if download(b.as_raw(), n, &s).map_err(|e| format!("{e:?}"))? != data {
                            return Err(format!("thread {t} round {round}: data differs"));
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("thread panicked".into()))).collect()
    });
    for r in results {
        r?;
    }
    ensure_eq!(pool.used_bytes(), 0);
    pool.check_invariants()?;
    Ok(())
}

fn limits_and_out_of_memory() -> TestResult {
    let ctx = ctx()?;
    let pool = Arc::new(MemoryPool::new(&ctx)?);
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let total = ctx.device().total_memory()?;
    pool.set_limit(PoolLimit::Fraction(0.5))?;
    ensure_eq!(pool.limit(), Some(total / 2));
    ensure!(pool.set_limit(PoolLimit::Fraction(1.5)).is_err(), "a fraction above 1 was accepted");
    pool.set_limit(PoolLimit::Bytes(4 << 20))?;
    let a = DeviceBuffer::<u8>::new_in(&s, 3 << 20, pool.clone())?;
    match DeviceBuffer::<u8>::new_in(&s, 2 << 20, pool.clone()) {
        Err(Error::OutOfMemory { requested, held, limit }) => {
            ensure_eq!((requested, held, limit), (2 << 20, 3 << 20, Some(4 << 20)));
        }
        other => return Err(format!("expected OutOfMemory, got {other:?}").into()),
    }
    drop(a);
    // At the limit the free block goes back and the larger request fits.
    let b = DeviceBuffer::<u8>::new_in(&s, 4 << 20, pool.clone())?;
    ensure_eq!(pool.total_bytes(), 4 << 20);
    drop(b);
    pool.set_limit(PoolLimit::None)?;
    // More than the device has: the device refuses, the pool retries once, then says so.
    match DeviceBuffer::<u8>::new_in(&s, total * 2, pool.clone()) {
        Err(Error::OutOfMemory { requested, limit: None, .. }) => ensure_eq!(requested, total * 2),
        other => return Err(format!("expected OutOfMemory, got {other:?}").into()),
    }
    ensure_eq!(pool.total_bytes(), 0);
    // Buffers hold at least one element; a zero-byte request to the pool itself touches
    // nothing.
    match DeviceBuffer::<u8>::new_in(&s, 0, pool.clone()) {
        Err(Error::InvalidArgument { .. }) => {}
        other => return Err(format!("expected InvalidArgument, got {other:?}").into()),
    }
    let z = pool.allocate(0, StreamRef::from(&s))?;
    ensure_eq!((z.ptr, z.size), (0, 0));
    // SAFETY: allocated just above, freed once.
    unsafe { pool.deallocate(z, StreamRef::from(&s)) }?;
    ensure_eq!((pool.used_bytes(), pool.total_bytes()), (0, 0));
    Ok(())
}

fn pinned_pool_feeds_async_copies() -> TestResult {
    let ctx = ctx()?;
    let pinned = Arc::new(PinnedMemoryPool::new(&ctx));
    let pool = Arc::new(MemoryPool::new(&ctx)?);
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let n = 1 << 18;
    let data = pattern(n, 99);
    let mut h = PinnedBuffer::<u32>::new_in(n, pinned.clone())?;
    h.copy_from_slice(&data)?;
    let mut d = DeviceBuffer::<u32>::new_in(&s, n, pool.clone())?;
    // The copy records itself on `h`: dropped now, `h` is kept from reuse until the copy's
    // event has completed.
    d.copy_from_pinned_async(&h, &s)?;
    ensure!(h.has_copies_in_flight(), "the copy was not recorded");
    let hp = h.as_ptr();
    drop(h);
    ensure_eq!((pinned.used_bytes(), pinned.n_free_blocks()), (1 << 20, 0));
    s.synchronize()?;
    ensure!(download(d.as_raw(), n, &s)? == data, "copy from pinned memory differs");
    let mut again = PinnedBuffer::<u32>::new_in(n, pinned.clone())?;
    ensure_eq!(again.as_ptr(), hp);
    ensure_eq!(pinned.total_bytes(), 1 << 20);
    // And back: reading the buffer waits for the copy that writes it.
    d.copy_to_pinned_async(&mut again, &s)?;
    ensure!(again.as_slice()? == data.as_slice(), "copy to pinned memory differs");
    drop(again);
    ensure_eq!(pinned.used_bytes(), 0);
    pinned.free_all_blocks()?;
    ensure_eq!(pinned.total_bytes(), 0);
    Ok(())
}

fn upstream_allocators_give_usable_memory() -> TestResult {
    let ctx = ctx()?;
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let n = 4096;
    let data = pattern(n, 5);
    let uppers: Vec<Arc<dyn Allocator>> = vec![
        Arc::new(DeviceAllocator::new(&ctx)),
        Arc::new(ManagedAllocator::new(&ctx)),
        Arc::new(AsyncAllocator::new(&ctx)),
        Arc::new(MemoryPool::with_allocator(&ctx, Arc::new(AsyncAllocator::new(&ctx)))?),
    ];
    for a in uppers {
        let m = a.allocate(n * 4, StreamRef::from(&s))?;
        upload(m.ptr, &data, &s)?;
        ensure!(download(m.ptr, n, &s)? == data, "{}: data differs", a.name());
        // SAFETY: allocated above, freed once, after the stream was synchronized.
        unsafe { a.deallocate(m, StreamRef::from(&s)) }?;
    }
    s.synchronize()?;
    // Managed memory is readable from the host.
    let managed = ManagedAllocator::new(&ctx);
    let m = managed.allocate(n * 4, StreamRef::from(&s))?;
    upload(m.ptr, &data, &s)?;
    // SAFETY: managed memory is host-accessible after synchronization; n u32 were written.
    let host = unsafe { std::slice::from_raw_parts(m.ptr as usize as *const u32, n) };
    ensure!(host == data.as_slice(), "managed memory read on the host differs");
    // SAFETY: as above.
    unsafe { managed.deallocate(m, StreamRef::from(&s)) }?;
    Ok(())
}

fn default_allocator_and_c_interface() -> TestResult {
    let ctx = ctx()?;
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let default = pool::default_memory_pool(&ctx.device())?;
    // With no allocator set, `DeviceBuffer::new` allocates from the default pool.
    alloc::set_allocator(None);
    let before = default.used_bytes();
    let m = DeviceBuffer::<u8>::new(&s, 1000)?;
    ensure_eq!(default.used_bytes(), before + 1024);
    ensure_eq!(m.allocator_name(), "MemoryPool");
    drop(m);
    ensure_eq!(default.used_bytes(), before);
    // Within `using_allocator`, from the allocator given.
    let mine = Arc::new(MemoryPool::new(&ctx)?);
    {
        let _scope = alloc::using_allocator(mine.clone());
        let m = DeviceBuffer::<u8>::new(&s, 1000)?;
        ensure_eq!((mine.used_bytes(), default.used_bytes()), (1024, before));
        drop(m);
    }
    ensure_eq!((mine.used_bytes(), mine.total_bytes()), (0, 1024));
    drop(DeviceBuffer::<u8>::new(&s, 1000)?);
    ensure_eq!(mine.total_bytes(), 1024, "the scope ended: back to the default pool");
    let h = pool::capi::cuda_core_get_allocator_handle();
    ensure!(!h.is_null(), "no handle: {:?}", pool::capi::last_error());
    // SAFETY: the handle is live until destroyed; the pointer is freed before that.
    unsafe {
        let p = pool::capi::cuda_core_malloc(h, 4096);
        ensure!(!p.is_null(), "C malloc failed: {:?}", pool::capi::last_error());
        let data = pattern(1024, 3);
        upload(p as sys::CUdeviceptr, &data, &s)?;
        ensure!(download(p as sys::CUdeviceptr, 1024, &s)? == data, "data through the C interface differs");
        ensure_eq!(default.used_bytes(), before + 4096);
        pool::capi::cuda_core_free(h, p);
        pool::capi::cuda_core_destroy_allocator_handle(h);
    }
    ensure_eq!(default.used_bytes(), before);
    // The process-wide pool keeps freed blocks cached; releasing them returns every wholly free
    // upstream allocation to the driver.
    // Both blocks above came from upstream allocations of their own, so both go back.
    s.synchronize()?;
    let cached = default.free_bytes();
    ensure!(cached >= 1024 + 4096, "the freed blocks are not cached: {cached} bytes free");
    default.free_all_blocks(None)?;
    ensure!(
        default.free_bytes() + 1024 + 4096 <= cached,
        "free_all_blocks kept {} bytes",
        default.free_bytes()
    );
    Ok(())
}

fn typed_views_of_pooled_memory() -> TestResult {
    let ctx = ctx()?;
    let pool = Arc::new(MemoryPool::new(&ctx)?);
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let data = pattern(3000, 11);
    let mut a = DeviceBuffer::<u8>::new_in(&s, data.len() * 4, pool.clone())?;
    a.view_mut().cast_mut::<u32>()?.copy_from_host(&data)?;
    let b = DeviceBuffer::<u8>::new_in(&s, data.len() * 4, pool.clone())?;
    {
        let mut b = b;
        b.view_mut().cast_mut::<u32>()?.copy_from_device(&a.view().cast::<u32>()?)?;
        ensure!(b.view().cast::<u32>()?.to_vec()? == data, "device-to-device copy through views differs");
    }
    ensure_eq!(a.view().cast::<u64>()?.len(), data.len() / 2);
    let odd = DeviceBuffer::<u8>::new_in(&s, 6, pool.clone())?;
    ensure!(odd.view().cast::<u32>().is_err(), "6 bytes are not whole u32 elements");
    Ok(())
}

/// Keeps the post-events a hook sees: (callback, event).
#[derive(Default)]
struct Seen(RefCell<Vec<(&'static str, HookEvent)>>);

impl MemoryHook for Seen {
    fn name(&self) -> &str {
        "seen"
    }
    fn alloc_postprocess(&self, e: &HookEvent) {
        self.0.borrow_mut().push(("alloc", *e));
    }
    fn malloc_postprocess(&self, e: &HookEvent) {
        self.0.borrow_mut().push(("malloc", *e));
    }
    fn free_postprocess(&self, e: &HookEvent) {
        self.0.borrow_mut().push(("free", *e));
    }
}

fn hooks_see_device_and_pinned_pools() -> TestResult {
    let ctx = ctx()?;
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let pinned = Arc::new(PinnedMemoryPool::new(&ctx));
    let pool = Arc::new(MemoryPool::new(&ctx)?);
    let seen = Rc::new(Seen::default());
    let guard = hooks::install(seen.clone())?;
    let data = pattern(750, 11);
    let mut h = PinnedBuffer::<u32>::new_in(data.len(), pinned.clone())?;
    h.copy_from_slice(&data)?;
    let mut d = DeviceBuffer::<u32>::new_in(&s, data.len(), pool.clone())?;
    d.copy_from_pinned_async(&h, &s)?;
    s.synchronize()?;
    ensure!(download(d.as_raw(), data.len(), &s)? == data, "data through hooked pools differs");
    let (hp, dp) = (h.as_ptr() as u64, d.as_raw());
    drop((h, d));
    drop(guard);

    let seen = seen.0.borrow();
    let brief: Vec<(&str, MemoryKind, usize, u64)> =
        seen.iter().map(|(n, e)| (*n, e.kind, e.mem_size, e.mem_ptr)).collect();
    let want = vec![
        ("alloc", MemoryKind::PinnedHost, 4096, hp),
        ("malloc", MemoryKind::PinnedHost, 4096, hp),
        ("alloc", MemoryKind::Device, 3072, dp),
        ("malloc", MemoryKind::Device, 3072, dp),
        ("free", MemoryKind::PinnedHost, 4096, hp),
        ("free", MemoryKind::Device, 3072, dp),
    ];
    ensure_eq!(brief, want);
    let device_id = i32::try_from(ctx.device().ordinal()).unwrap_or(-1);
    for (_, e) in seen.iter() {
        let want_id = if e.kind == MemoryKind::Device { device_id } else { -1 };
        ensure_eq!(e.device_id, want_id);
    }
    Ok(())
}

/// The places, as (file, line), that the hook events of callback `kind` name.
fn places(seen: &Seen, kind: &str) -> Vec<(&'static str, u32)> {
    seen.0
        .borrow()
        .iter()
        .filter(|(n, _)| *n == kind)
        .map(|(_, e)| (e.location.file(), e.location.line()))
        .collect()
}

/// From the default pool: `new` and `free` report their callers; a drop reports one place
/// whichever way the buffer is given back (on its own stream only, or after another stream).
fn hooks_report_where_buffers_are_made_and_freed() -> TestResult {
    let ctx = ctx()?;
    let (s, other) =
        (Stream::new(&ctx, StreamFlags::NON_BLOCKING)?, Stream::new(&ctx, StreamFlags::NON_BLOCKING)?);
    alloc::set_allocator(None);
    // The default pool's first buffer may grow it; only steady-state events are looked at.
    drop(DeviceBuffer::<u32>::new(&s, 256)?);
    let seen = Rc::new(Seen::default());
    let guard = hooks::install(seen.clone())?;
    let first = line!() + 1;
    let freed = DeviceBuffer::<u32>::new(&s, 256)?;
    freed.free()?;
    let own = DeviceBuffer::<u32>::new(&s, 256)?;
    drop(own);
    let shared = DeviceBuffer::<u32>::new(&s, 256)?;
    shared.record_stream(&other)?;
    drop(shared);
    drop(guard);
    let this = file!();
    let mallocs = places(&seen, "malloc");
    ensure_eq!(
        mallocs,
        vec![(this, first), (this, first + 2), (this, first + 4)],
        "where the buffers were made"
    );
    let frees = places(&seen, "free");
    ensure_eq!(frees.len(), 3, "frees seen: {frees:?}");
    ensure_eq!(frees[0], (this, first + 1), "`free` reports its caller");
    ensure_eq!(frees[1], frees[2], "the two drops report one place");
    other.synchronize()?;
    Ok(())
}

/// The default pool reached through `pool::get_allocator` (an `Arc<dyn Allocator>`) gives a
/// block back after other streams the way the pool itself does: it keeps the block from reuse
/// with its own events, and the owner's stream goes on. Before, that door left out
/// `deallocate_after`, whose default makes the owner's stream wait for the other streams: the
/// owner's stream stalled behind a held-back one.
fn default_pool_one_door() -> TestResult {
    let (_device, ctx, owner) = cuda_tests::device_zero()?;
    let other = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let allocator = pool::get_allocator()?;
    ensure_eq!(allocator.name(), "MemoryPool");
    let allocation = allocator.allocate(1 << 20, StreamRef::from(&owner))?;
    hold(&other, 1000)?;
    // SAFETY: allocated above on `owner` and never used; `other` is the only other stream
    // named, and nothing of it uses the memory.
    unsafe { allocator.deallocate_after(allocation, &owner, std::slice::from_ref(&other))? };
    owner.synchronize()?;
    ensure!(other.query().map(|done| !done).unwrap_or(false), "the held-back stream finished first");
    other.synchronize()?;
    Ok(())
}
