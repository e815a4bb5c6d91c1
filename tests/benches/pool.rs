//! Pool allocation against the driver's own allocators, in the same run: steady-state
//! alloc+free of 1 MiB from `MemoryPool` against `cuMemAllocAsync`+`cuMemFreeAsync`, from
//! `PinnedMemoryPool` against `cuMemHostAlloc`+`cuMemFreeHost`, and 16 threads at once.

use cuda_core::pool::{Allocator, MemoryPool, PinnedMemoryPool, StreamRef};
use cuda_core::{Context, Device, Result, Stream, StreamFlags};
use cuda_driver_sys as sys;
use cuda_tests::bench::{Row, compare, print_table};
use std::hint::black_box;
use std::sync::Barrier;
use std::time::Instant;

const MIB: usize = 1 << 20;
const THREADS: usize = 16;

fn main() {
    match run() {
        Ok(rows) => print_table(
            "pools against the driver's allocators (same run; ours/raw < 0.1 is 10x faster)",
            &rows,
        ),
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

fn run() -> Result<Vec<Row>> {
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
        || drop(black_box(pool.malloc(black_box(MIB), &s))),
        || raw_async_pair(sr),
    ));
    rows.push(compare(
        "1 MiB alloc+free: MemoryPool as dyn Allocator vs the same",
        31,
        20_000,
        || {
            let a: &dyn Allocator = &pool;
            if let Ok(m) = a.allocate(black_box(MIB), StreamRef::from(&s)) {
                // SAFETY: allocated just above, freed once.
                black_box(unsafe { a.deallocate(m, StreamRef::from(&s)) }).ok();
            }
        },
        || raw_async_pair(sr),
    ));
    s.synchronize()?;
    rows.push(compare(
        "1 MiB alloc+free: PinnedMemoryPool vs cuMemHostAlloc+FreeHost",
        11,
        200,
        || drop(black_box(pinned.malloc(black_box(MIB)))),
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
    Ok(rows)
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
                            Some(p) => drop(p.malloc(MIB, &s)),
                            None => raw_async_pair(sr),
                        }
                    }
                    barrier.wait();
                    let t = Instant::now();
                    for _ in 0..iters {
                        match pool {
                            Some(p) => drop(black_box(p.malloc(black_box(MIB), &s))),
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
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok(Row {
        name: format!("1 MiB alloc+free, {THREADS} threads, per thread"),
        unit: "ns",
        ours: median(ours),
        raw: median(raw),
    })
}
