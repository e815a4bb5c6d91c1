//! The loops that `cargo xtask budget` counts: `budget-probe <side> [iterations]` runs one side
//! of a measured pair `iterations` times (20,000 by default) inside [`budget_counted_loop`],
//! the only function callgrind collects in (`--toggle-collect`), after an uncounted warm-up.
//!
//! It runs against whatever `libcuda` the loader finds; `cargo xtask budget` points
//! `CUDA_DRIVER_LIBRARY_PATH` at the simulated driver (`tests/sim-cuda-driver`). After the
//! warm-up every side is in its steady state, where the pools serve each request from their
//! cache and make no driver call: the probe checks that the pool held the same bytes before and
//! after the counted loop (it took nothing from the driver), and `cargo xtask budget` that no
//! counted instruction ran in the driver's library, so what is counted is the crate's own work.
//!
//! Sides (each pair is 1 MiB, allocated and given back at once):
//!
//! * `buffer`: `DeviceBuffer::<u8>::new` + drop, from the default pool, on one stream;
//! * `pool`: the same default pool's own `Allocator::allocate` + `deallocate`, the reference
//!   of `buffer` (as in `tests/benches/pool.rs`);
//! * `pinned-buffer`: `PinnedBuffer::<u8>::new_uninit` + drop, from the default pinned pool;
//! * `pinned-pool`: that pool's own `allocate` + `deallocate`, the reference of
//!   `pinned-buffer` (as in `tests/benches/pinned.rs`);
//! * `memory-pool`: a `MemoryPool` of the probe's own, `allocate` + `deallocate` through the
//!   `Allocator` trait.

use cuhost::alloc;
use cuhost::alloc::{Allocator, PinnedAllocator, StreamRef};
use cuhost::pool::{self, MemoryPool};
use cuhost::{Context, Device, DeviceBuffer, PinnedBuffer, Result, Stream, StreamFlags};
use std::hint::black_box;
use std::process::ExitCode;

const MIB: usize = 1 << 20;
/// Pairs run before counting: the driver's functions are resolved and the pools hold the block.
const WARM_UP: u64 = 1_000;
const DEFAULT_ITERATIONS: u64 = 20_000;
/// The sides, as named on the command line.
const SIDES: [&str; 5] = ["buffer", "pool", "pinned-buffer", "pinned-pool", "memory-pool"];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match parse(&args).and_then(|(side, n)| run(side, n).map_err(|e| format!("{side}: {e}"))) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("budget-probe: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage() -> String {
    format!("usage: budget-probe <{}> [iterations]", SIDES.join("|"))
}

/// The side and the number of iterations from the command line.
fn parse(args: &[String]) -> std::result::Result<(&str, u64), String> {
    let side = match args.first() {
        Some(s) if SIDES.contains(&s.as_str()) => s.as_str(),
        _ => return Err(usage()),
    };
    let iterations = match args.get(1) {
        None => DEFAULT_ITERATIONS,
        Some(n) => n.parse().map_err(|_| format!("{n} is not a number of iterations; {}", usage()))?,
    };
    if args.len() > 2 {
        return Err(usage());
    }
    Ok((side, iterations))
}

fn run(side: &str, iterations: u64) -> Result<(), String> {
    let ctx = Context::primary(&Device::get(0).map_err(words)?).map_err(words)?;
    ctx.bind_to_thread().map_err(words)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING).map_err(words)?;
    // No allocator set on this thread: `DeviceBuffer::new` and `PinnedBuffer::new_uninit` take
    // the default pools, whose own calls are the references.
    alloc::set_allocator(None);
    alloc::set_pinned_memory_allocator(None);
    match side {
        "buffer" => {
            let default = pool::default_memory_pool(&ctx.device()).map_err(words)?;
            measure(iterations, || default.total_bytes(), || buffer_pair(&stream))
        }
        "pool" => {
            let default = pool::default_memory_pool(&ctx.device()).map_err(words)?;
            measure(iterations, || default.total_bytes(), || pool_pair(default, &stream))
        }
        "pinned-buffer" => {
            let pinned = pool::default_pinned_memory_pool().map_err(words)?;
            measure(iterations, || pinned.total_bytes(), pinned_buffer_pair)
        }
        "pinned-pool" => {
            let pinned = pool::default_pinned_memory_pool().map_err(words)?;
            measure(iterations, || pinned.total_bytes(), || pinned_pool_pair(pinned))
        }
        _ => {
            let own = MemoryPool::new(&ctx).map_err(words)?;
            measure(iterations, || own.total_bytes(), || pool_pair(&own, &stream))
        }
    }?;
    stream.synchronize().map_err(words)
}

fn words(e: cuhost::Error) -> String {
    e.to_string()
}

/// Warms `pair` up, then runs it `iterations` times in the counted loop, and checks that the
/// pool behind it (`cached`: its bytes, held and free) served every counted pair from its cache.
fn measure(
    iterations: u64,
    cached: impl Fn() -> usize,
    mut pair: impl FnMut() -> Result<()>,
) -> Result<(), String> {
    for _ in 0..WARM_UP {
        pair().map_err(words)?;
    }
    let before = cached();
    budget_counted_loop(iterations, &mut pair).map_err(words)?;
    let after = cached();
    if before != after {
        return Err(format!(
            "the pool held {before} bytes before the counted loop and {after} after: \
             it was not in its steady state, so driver calls were counted"
        ));
    }
    println!("{iterations} pairs counted; the pool held {after} bytes throughout");
    Ok(())
}

/// The loop callgrind counts: `cargo xtask budget` runs the probe with
/// `--toggle-collect=*budget_counted_loop*`, so collection is on from this function's entry to
/// its return, and nowhere else. One instance per side (it is generic over the pair), never
/// inlined, so that it stays a function of its own for callgrind to find.
#[inline(never)]
fn budget_counted_loop(iterations: u64, pair: &mut impl FnMut() -> Result<()>) -> Result<()> {
    for _ in 0..iterations {
        pair()?;
    }
    Ok(())
}

/// One `DeviceBuffer::new` of 1 MiB from the thread's current allocator (the default pool),
/// dropped at once.
#[inline]
fn buffer_pair(stream: &Stream) -> Result<()> {
    drop(black_box(DeviceBuffer::<u8>::new(stream, black_box(MIB))?));
    Ok(())
}

/// Allocates and deallocates 1 MiB through `a`'s `Allocator` methods.
#[inline]
fn pool_pair<A: Allocator + ?Sized>(a: &A, stream: &Stream) -> Result<()> {
    let m = a.allocate(black_box(MIB), StreamRef::from(stream))?;
    // SAFETY: allocated just above, freed once, on the same stream; nothing used it.
    black_box(unsafe { a.deallocate(black_box(m), StreamRef::from(stream)) })
}

/// One `PinnedBuffer::new_uninit` of 1 MiB from the default pinned pool, dropped at once.
#[inline]
fn pinned_buffer_pair() -> Result<()> {
    // SAFETY: nothing reads the buffer.
    drop(black_box(unsafe { PinnedBuffer::<u8>::new_uninit(black_box(MIB)) }?));
    Ok(())
}

/// The pinned pool's own allocate + deallocate of 1 MiB.
#[inline]
fn pinned_pool_pair<A: PinnedAllocator + ?Sized>(a: &A) -> Result<()> {
    let m = a.allocate(black_box(MIB))?;
    // SAFETY: allocated just above and given back once; no copy uses it.
    black_box(unsafe { a.deallocate(black_box(m)) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_command_line_names_a_side_and_a_count() {
        assert_eq!(parse(&args(&["pool"])), Ok(("pool", DEFAULT_ITERATIONS)));
        assert_eq!(parse(&args(&["pinned-buffer", "300"])), Ok(("pinned-buffer", 300)));
        assert!(parse(&args(&[])).is_err());
        assert!(parse(&args(&["pools"])).is_err());
        assert!(parse(&args(&["pool", "many"])).is_err());
        assert!(parse(&args(&["pool", "3", "4"])).is_err());
    }
}
