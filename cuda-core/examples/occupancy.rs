//! Occupancy: how many blocks of the saxpy kernel fit on one multiprocessor for a few block
//! sizes, which block size the driver suggests (with no dynamic shared memory, and with some
//! that grows with the block), how much dynamic shared memory eight blocks may each have; every
//! answer is checked against the device's limits and against the others, then the kernel is
//! launched with the suggested block size and its result compared with the host.
//!
//! ```sh
//! cargo run --example occupancy -- 1000000
//! ```

use cuhost::module::{FunctionAttribute, Module};
use cuhost::occupancy::OccupancyFlags;
use cuhost::{Context, Device, DeviceBuffer, Error, LaunchConfig, Stream, StreamFlags};
use std::process::ExitCode;

/// `saxpy(u32 n, f32 a, const f32* x, f32* y)`, shared by the examples that launch it.
const PTX: &str = include_str!("kernels/saxpy.ptx");

fn main() -> ExitCode {
    let n = std::env::args().nth(1).and_then(|s| s.parse::<u32>().ok()).unwrap_or(1 << 20);
    // The default pools cache freed blocks for reuse: give them back before exiting, so
    // that a leak checker (compute-sanitizer --leak-check full) sees only real leaks.
    match run(n).and_then(|r| cuhost::pool::release_default_pools().map(|()| r)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("occupancy: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Fails the example with `message` unless `ok`.
fn check(ok: bool, message: impl Into<String>) -> cuhost::Result<()> {
    if ok { Ok(()) } else { Err(Error::invalid("occupancy example", message)) }
}

/// A device attribute that is a count, as a `u32` (0 for a negative answer).
fn count(value: i32) -> u32 {
    u32::try_from(value).unwrap_or(0)
}

fn run(n: u32) -> cuhost::Result<()> {
    let device = Device::get(0)?;
    let ctx = Context::primary(&device)?;
    let module = Module::from_ptx(&ctx, PTX)?;
    let saxpy = module.function("saxpy")?;
    let sms = count(device.multiprocessor_count()?);
    let threads_per_sm = count(device.max_threads_per_multiprocessor()?);
    let blocks_per_sm = count(device.max_blocks_per_multiprocessor()?);
    let largest = u32::try_from(saxpy.attribute(FunctionAttribute::MaxThreadsPerBlock)?).unwrap_or(0);
    println!(
        "{}: {sms} SMs of at most {threads_per_sm} threads and {blocks_per_sm} blocks; saxpy: {} registers \
         per thread, blocks of at most {largest} threads",
        device.name()?,
        saxpy.num_regs()?
    );

    // Resident blocks per SM for a few block sizes; none may pass the device's limits.
    let flags = OccupancyFlags::empty();
    let mut most_threads = 0;
    for block in [32, 64, 128, 256, 512, 1024].into_iter().filter(|&b| b <= largest) {
        let blocks = saxpy.max_active_blocks_per_multiprocessor(block, 0, flags)?;
        check(blocks >= 1, format!("no block of {block} threads fits"))?;
        check(
            blocks <= blocks_per_sm && blocks * block <= threads_per_sm,
            format!("{blocks} blocks of {block} threads pass the SM's limits"),
        )?;
        let occupancy = 100.0 * f64::from(blocks * block) / f64::from(threads_per_sm);
        println!("  block {block:>4}: {blocks:>2} blocks per SM, occupancy {occupancy:>5.1}%");
        most_threads = most_threads.max(blocks * block);
    }

    // The suggestion reaches at least the occupancy of every size tried, on a grid that fills
    // every SM.
    let best = saxpy.max_potential_block_size(0, 0, flags)?;
    let best_blocks = saxpy.max_active_blocks_per_multiprocessor(best.block_size, 0, flags)?;
    check(best.block_size >= 1 && best.block_size <= largest, format!("suggested {best:?}"))?;
    check(best_blocks * best.block_size >= most_threads, "a block size tried above fits more threads")?;
    check(best.min_grid_size == best_blocks * sms, format!("minimum grid {}", best.min_grid_size))?;
    println!(
        "suggested block size {}: {best_blocks} blocks per SM, minimum grid {} ({best_blocks} x {sms} SMs)",
        best.block_size, best.min_grid_size
    );

    // Dynamic shared memory that grows with the block: 40 bytes a thread, so that even a block of
    // 1024 stays under the 48 KiB a launch may have without opting in.
    let per_thread = 40;
    let mut asked = 0;
    let shared = saxpy.max_potential_block_size_with(
        |block| {
            asked += 1;
            block as usize * per_thread
        },
        0,
        flags,
    )?;
    let shared_blocks = saxpy.max_active_blocks_per_multiprocessor(
        shared.block_size,
        shared.block_size as usize * per_thread,
        flags,
    )?;
    check(asked > 0 && shared_blocks >= 1, format!("{shared:?} after {asked} questions"))?;
    check(shared.min_grid_size == shared_blocks * sms, format!("minimum grid {}", shared.min_grid_size))?;
    println!(
        "with {per_thread} bytes of shared memory per thread: block size {}, {shared_blocks} blocks per SM \
         (the closure was asked about {asked} sizes)",
        shared.block_size
    );

    // The dynamic shared memory the driver offers each of 8 blocks of 128 threads on an SM. The
    // SM also reserves some shared memory per block (1 KiB on sm_90), which the occupancy
    // calculation counts, so as many or slightly fewer blocks fit; twice as much fits fewer.
    let bytes = saxpy.available_dynamic_shared_memory_per_block(8, 128)?;
    let fit = saxpy.max_active_blocks_per_multiprocessor(128, bytes, flags)?;
    let fit_double = saxpy.max_active_blocks_per_multiprocessor(128, 2 * bytes, flags)?;
    check((1..=8).contains(&fit), format!("with {bytes} bytes each, {fit} blocks of 128 fit, not 1 to 8"))?;
    check(
        fit_double < fit,
        format!("with twice the shared memory {fit_double} blocks fit, not fewer than {fit}"),
    )?;
    println!(
        "8 blocks of 128 threads per SM leave {} KiB of dynamic shared memory each: {fit} fit, {fit_double} with twice as much",
        bytes >> 10
    );

    // Launch with the suggestion and check every element.
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let a = 2.5f32;
    let x: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let y: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let dx = DeviceBuffer::from_slice(&stream, &x)?;
    let mut dy = DeviceBuffer::from_slice(&stream, &y)?;
    let config = LaunchConfig::for_elements(n, best.block_size);
    // SAFETY: saxpy takes (u32, f32, const f32*, f32*), and both buffers hold n floats.
    unsafe { saxpy.launch(&stream, &config, (&n, &a, &dx, &mut dy))? };
    stream.synchronize()?;
    let result = dy.to_vec()?;
    let wrong = result.iter().zip(x.iter().zip(&y)).filter(|(r, (x, y))| **r != a.mul_add(**x, **y)).count();
    check(wrong == 0, format!("{wrong} of {n} results differ from the host"))?;
    println!(
        "saxpy of {n} elements on {} blocks of {}: all equal to the host",
        config.grid.x, config.block.x
    );
    Ok(())
}
