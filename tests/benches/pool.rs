//! Pool allocation against the driver's own allocators, in the same run: steady-state
//! alloc+free of 1 MiB from `MemoryPool` (its `Allocator::allocate`/`deallocate`) against
//! `cuMemAllocAsync`+`cuMemFreeAsync`, from `PinnedMemoryPool` against
//! `cuMemHostAlloc`+`cuMemFreeHost`, and 16 threads at once; and what a `DeviceBuffer` costs on
//! top: `DeviceBuffer::new`+drop of 1 MiB from the default pool against that pool's
//! allocate+deallocate, and against `cuMemAllocAsync`+`cuMemFreeAsync`, on one stream; and the
//! pool's pair against itself, the spread of two identical sides.

use cuda_tests::bench::{Row, compare, print_table};
use cuhost::alloc;
use cuhost::alloc::{Allocator, PinnedAllocator, StreamRef};
use cuhost::pool::{self, MemoryPool, PinnedMemoryPool};
use cuhost::{Context, Device, DeviceBuffer, Result, Stream, StreamFlags};
use cuhost_driver_sys as sys;
use std::hint::black_box;
use std::sync::Barrier;
use std::time::Instant;

const MIB: usize = 1 << 20;
const THREADS: usize = 16;

fn main() {
    match run() {
        Ok((rows, buffer)) => {
            print_table(
                "pools against the driver's allocators (same run; ours/raw < 0.1 is 10x faster)",
                &rows,
            );
            print_table(
                "DeviceBuffer::new+drop, 1 MiB, default pool, one stream (ours = DeviceBuffer)",
                &buffer,
            );
            // The two ratios of a buffer, in the table's ratio column: its cost over the pool's
            // own calls, and how many times as much the driver's stream-ordered pair costs.
            if let [over_pool, _spread, over_driver] = buffer.as_slice() {
                let inverse =
                    if over_driver.ours == 0.0 { f64::NAN } else { over_driver.raw / over_driver.ours };
                for (name, ratio) in [
                    ("DeviceBuffer::new+drop / pool allocate+deallocate", over_pool.ratio()),
                    ("cuMemAllocAsync pair / DeviceBuffer::new+drop", inverse),
                ] {
                    println!("{name:<48} {:>12} {:>12} {ratio:>8.4}", "", "");
                }
            }
        }
        Err(e) => eprintln!("benchmark skipped: {e}"),
    }
}

fn raw_async_pair(stream: sys::CUstream) {
    let mut p = 0;
    // SAFETY: a live stream; the allocation is freed right away on the same stream.
    unsafe {
        black_box(sys::cuMemAllocAsync(&mut p, black_box(MIB), stream));
        black_box(sys::cuMemFreeAsync(p, stream));
    }
}

/// One `DeviceBuffer::new` of 1 MiB from the thread's current allocator, dropped at once.
#[inline]
fn buffer_pair(stream: &Stream) {
    drop(black_box(DeviceBuffer::<u8>::new(stream, black_box(MIB))));
}

/// Allocate and deallocate 1 MiB through `a`'s `Allocator` methods.
#[inline]
fn pool_pair<A: Allocator + ?Sized>(a: &A, stream: &Stream) {
    if let Ok(m) = a.allocate(black_box(MIB), StreamRef::from(stream)) {
        // SAFETY: allocated just above, freed once, on the same stream.
        black_box(unsafe { a.deallocate(black_box(m), StreamRef::from(stream)) }).ok();
    }
}

fn run() -> Result<(Vec<Row>, Vec<Row>)> {
    let ctx = Context::primary(&Device::get(0)?)?;
    ctx.bind_to_thread()?;
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let sr = s.as_raw();
    let pool = MemoryPool::new(&ctx)?;
    let pinned = PinnedMemoryPool::new(&ctx);
    let mut rows = Vec::new();

    rows.push(compare(
        "1 MiB alloc+free: MemoryPool vs cuMemAllocAsync+FreeAsync",
        31,
        20_000,
        || pool_pair(&pool, &s),
        || raw_async_pair(sr),
    ));
    rows.push(compare(
        "1 MiB alloc+free: MemoryPool as dyn Allocator vs the same",
        31,
        20_000,
        || pool_pair(black_box(&pool as &dyn Allocator), &s),
        || raw_async_pair(sr),
    ));
    s.synchronize()?;
    rows.push(compare(
        "1 MiB alloc+free: PinnedMemoryPool vs cuMemHostAlloc+FreeHost",
        11,
        200,
        || {
            if let Ok(p) = pinned.allocate(black_box(MIB)) {
                // SAFETY: allocated just above, given back once; no copy uses it.
                black_box(unsafe { pinned.deallocate(black_box(p)) }).ok();
            }
        },
        || {
            let mut p = std::ptr::null_mut();
            // SAFETY: the host allocation is freed right away.
            unsafe {
                black_box(sys::cuMemHostAlloc(&mut p, black_box(MIB), sys::CU_MEMHOSTALLOC_PORTABLE));
                black_box(sys::cuMemFreeHost(p));
            }
        },
    ));
    rows.push(threaded(&ctx, &pool)?);
    s.synchronize()?;

    // A buffer from the default pool: no allocator set on this thread, so `DeviceBuffer::new`
    // takes the default pool of the stream's device; the reference is that pool's own calls.
    alloc::set_allocator(None);
    let default = pool::default_memory_pool(&ctx.device())?;
    let buffer = vec![
        compare(
            "1 MiB: DeviceBuffer::new+drop vs pool allocate+deallocate",
            31,
            20_000,
            || buffer_pair(&s),
            || pool_pair(default, &s),
        ),
        // The pool's own pair against itself: how far apart two identical sides come out.
        compare(
            "1 MiB: pool allocate+deallocate against itself (the bench's spread)",
            31,
            20_000,
            || pool_pair(default, &s),
            || pool_pair(default, &s),
        ),
        compare(
            "1 MiB: DeviceBuffer::new+drop vs cuMemAllocAsync+FreeAsync",
            31,
            20_000,
            || buffer_pair(&s),
            || raw_async_pair(sr),
        ),
    ];
    s.synchronize()?;
    Ok((rows, buffer))
}

/// Mean ns per alloc+free pair and thread, with `THREADS` threads on their own streams.
fn per_thread(ctx: &Context, iters: u64, pool: Option<&MemoryPool>) -> Result<f64> {
    let barrier = Barrier::new(THREADS);
    let times: Vec<Result<f64>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                let barrier = &barrier;
                scope.spawn(move || -> Result<f64> {
                    ctx.bind_to_thread()?;
                    let s = Stream::new(ctx, StreamFlags::NON_BLOCKING)?;
                    let sr = s.as_raw();
                    // Warm the arena (or the driver's pool) of this stream.
                    for _ in 0..100 {
                        match pool {
                            Some(p) => pool_pair(p, &s),
                            None => raw_async_pair(sr),
                        }
                    }
                    barrier.wait();
                    let t = Instant::now();
                    for _ in 0..iters {
                        match pool {
                            Some(p) => pool_pair(p, &s),
                            None => raw_async_pair(sr),
                        }
                    }
                    let ns = t.elapsed().as_nanos() as f64 / iters as f64;
                    s.synchronize()?;
                    Ok(ns)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(Ok(f64::NAN))).collect()
    });
    let mut sum = 0.0;
    for t in times {
        sum += t?;
    }
    Ok(sum / THREADS as f64)
}

fn threaded(ctx: &Context, pool: &MemoryPool) -> Result<Row> {
    let name = format!("1 MiB alloc+free, {THREADS} threads, per thread");
    if !cuda_tests::bench::selected(&name) {
        return Ok(Row::skipped(name));
    }
    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    for round in 0..5 {
        if round % 2 == 0 {
            ours.push(per_thread(ctx, 20_000, Some(pool))?);
            raw.push(per_thread(ctx, 20_000, None)?);
        } else {
            raw.push(per_thread(ctx, 20_000, None)?);
            ours.push(per_thread(ctx, 20_000, Some(pool))?);
        }
    }
    Ok(Row::from_rounds(name, ours, raw))
}
