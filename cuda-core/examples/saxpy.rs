//! `y = a*x + y` on the GPU: load a PTX kernel, copy the inputs, launch, copy the result back
//! and check it.
//!
//! ```sh
//! cargo run --example saxpy -- 1000000
//! ```

use cuhost::module::Module;
use cuhost::{Context, Device, DeviceBuffer, LaunchConfig, Stream, StreamFlags};
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
            eprintln!("saxpy: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(n: u32) -> cuhost::Result<()> {
    let ctx = Context::primary(&Device::get(0)?)?;
    let module = Module::from_ptx(&ctx, PTX)?;
    let saxpy = module.function("saxpy")?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;

    let a = 2.5f32;
    let x: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let y: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let dx = DeviceBuffer::from_slice(&stream, &x)?;
    let mut dy = DeviceBuffer::from_slice(&stream, &y)?;

    // The block size that gives the best occupancy for this kernel on this device.
    let best = saxpy.max_potential_block_size(0, 0, Default::default())?;
    let config = LaunchConfig::for_elements(n, best.block_size);
    // Buffers pass as their device addresses; `&mut dy` because the kernel writes to it.
    // SAFETY: saxpy takes (u32, f32, const f32*, f32*), and both buffers hold n floats.
    unsafe { saxpy.launch(&stream, &config, (&n, &a, &dx, &mut dy))? };
    stream.synchronize()?;

    let result = dy.to_vec()?;
    let wrong = result.iter().zip(x.iter().zip(&y)).filter(|(r, (x, y))| **r != a.mul_add(**x, **y)).count();
    println!("saxpy of {n} elements: grid {} x block {}, {} wrong", config.grid.x, config.block.x, wrong);
    if wrong == 0 {
        Ok(())
    } else {
        Err(cuhost::Error::invalid("saxpy", format!("{wrong} of {n} results differ from the host")))
    }
}
