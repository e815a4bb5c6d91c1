//! The occupancy calculator: blocks per multiprocessor, block size (fixed and per-block-size
//! shared memory), available shared memory, cluster size and active clusters.

#[path = "kernels/mod.rs"]
mod kernels;

use cuda_tests::{TestResult, ensure, ensure_eq, gpu};
use cuhost::driver_sys::CUdevice_attribute as A;
use cuhost::module::Module;
use cuhost::occupancy::OccupancyFlags;
use cuhost::{Context, Device, Error, LaunchConfig};

fn main() {
    cuda_tests::run(&[
        gpu(
            "active_blocks_per_multiprocessor_respect_shared_memory",
            active_blocks_per_multiprocessor_respect_shared_memory,
        ),
        gpu("block_size_calculator_with_fixed_shared_memory", block_size_calculator_with_fixed_shared_memory),
        gpu("block_size_calculator_calls_the_closure", block_size_calculator_calls_the_closure),
        gpu(
            "available_dynamic_shared_memory_shrinks_with_more_blocks",
            available_dynamic_shared_memory_shrinks_with_more_blocks,
        ),
        gpu("cluster_occupancy_on_compute_9_and_later", cluster_occupancy_on_compute_9_and_later),
    ]);
}

fn context() -> Result<Context, Error> {
    Context::primary(&Device::get(0)?)
}

fn active_blocks_per_multiprocessor_respect_shared_memory() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let reverse = module.function("reverse")?;
    let max_blocks = ctx.device().attribute(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR)? as u32;
    let free = reverse.max_active_blocks_per_multiprocessor(64, 0, OccupancyFlags::empty())?;
    ensure!(free > 0 && free <= max_blocks, "{free} blocks of 64 threads, device limit {max_blocks}");
    // With 40 KiB of shared memory per block, the SM's shared memory is the limit.
    let per_sm = ctx.device().attribute(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)? as u32;
    let heavy = reverse.max_active_blocks_per_multiprocessor(
        64,
        40 * 1024,
        OccupancyFlags::DISABLE_CACHING_OVERRIDE,
    )?;
    ensure!(
        heavy >= 1 && heavy <= per_sm / (40 * 1024),
        "{heavy} blocks with 40 KiB each, SM has {per_sm} bytes"
    );
    ensure!(heavy < free, "shared memory lowers occupancy: {heavy} vs {free}");
    Ok(())
}

fn block_size_calculator_with_fixed_shared_memory() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let saxpy = module.function("saxpy")?;
    let best = saxpy.max_potential_block_size(0, 0, OccupancyFlags::empty())?;
    let sms = ctx.device().attribute(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
    ensure!(best.block_size > 0 && best.block_size <= saxpy.max_threads_per_block()?, "{best:?}");
    ensure!(best.min_grid_size >= sms, "{best:?} on {sms} SMs");
    let limited = saxpy.max_potential_block_size(0, 96, OccupancyFlags::empty())?;
    ensure!(limited.block_size <= 96 && limited.block_size > 0, "{limited:?}");
    Ok(())
}

fn block_size_calculator_calls_the_closure() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let reverse = module.function("reverse")?;
    let mut asked = Vec::new();
    let best = reverse.max_potential_block_size_with(
        |block| {
            asked.push(block);
            block as usize * 4
        },
        0,
        OccupancyFlags::empty(),
    )?;
    ensure!(!asked.is_empty(), "the closure was called");
    ensure!(asked.contains(&best.block_size), "{best:?} was among the sizes tried: {asked:?}");
    // Blocks over 128 threads would need more shared memory than any device has: the
    // calculator must pick 128 or fewer.
    let small = reverse.max_potential_block_size_with(
        |block| if block > 128 { 1 << 30 } else { 1024 },
        0,
        OccupancyFlags::empty(),
    )?;
    ensure!(small.block_size > 0 && small.block_size <= 128, "{small:?}");
    // A panic in the closure comes back as an error, and the calculator still works after.
    #[allow(clippy::panic)]
    let panicked = reverse.max_potential_block_size_with(
        |_| -> usize { std::panic::panic_any("no shared memory for you") },
        0,
        OccupancyFlags::empty(),
    );
    match panicked {
        Err(Error::CallbackPanicked { message }) => ensure_eq!(message, "no shared memory for you"),
        other => return Err(format!("expected CallbackPanicked, got {other:?}").into()),
    }
    ensure_eq!(reverse.max_potential_block_size_with(|b| b as usize * 4, 0, OccupancyFlags::empty())?, best);
    Ok(())
}

fn available_dynamic_shared_memory_shrinks_with_more_blocks() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let reverse = module.function("reverse")?;
    let one = reverse.available_dynamic_shared_memory_per_block(1, 128)?;
    let sixteen = reverse.available_dynamic_shared_memory_per_block(16, 128)?;
    ensure!(one >= 48 * 1024, "one block gets at least 48 KiB, got {one}");
    ensure!(sixteen < one && sixteen > 0, "sixteen blocks share the SM's memory: {sixteen} vs {one}");
    Ok(())
}

fn cluster_occupancy_on_compute_9_and_later() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let saxpy = module.function("saxpy")?;
    let config = LaunchConfig::new(64, 128);
    ensure!(saxpy.max_active_clusters(&config).is_err(), "no cluster dimensions is refused before the call");
    if ctx.device().compute_capability()?.0 < 9 {
        return Ok(());
    }
    let size = saxpy.max_potential_cluster_size(&config)?;
    ensure!(size >= 8, "portable cluster size 8 is supported, got {size}");
    let clusters = saxpy.max_active_clusters(&config.cluster(2))?;
    let sms = ctx.device().attribute(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
    ensure!(clusters >= 1 && clusters <= sms * 32, "{clusters} clusters of 2 on {sms} SMs");
    Ok(())
}
