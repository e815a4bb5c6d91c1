//! Copy bandwidth: host to device and device to host from pinned and from pageable memory,
//! and device to device, printed as a table.
//!
//! ```sh
//! cargo run --release --example bandwidth -- 256   # MiB per copy (default 64)
//! ```

use cuhost::memory::{HostAllocFlags, PinnedBuffer};
use cuhost::{Context, Device, DeviceBuffer, Stream, StreamFlags};
use std::process::ExitCode;
use std::time::Instant;

const REPEATS: usize = 20;

fn main() -> ExitCode {
    let mib = std::env::args().nth(1).and_then(|s| s.parse::<usize>().ok()).unwrap_or(64).max(1);
    // The default pools cache freed blocks for reuse: give them back before exiting, so
    // that a leak checker (compute-sanitizer --leak-check full) sees only real leaks.
    match run(mib).and_then(|r| cuhost::pool::release_default_pools().map(|()| r)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bandwidth: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `copy` REPEATS times after one warm-up and returns GB/s for `bytes` per copy (the
/// best of the runs, as bandwidth tools report).
fn measure(bytes: usize, mut copy: impl FnMut() -> cuhost::Result<()>) -> cuhost::Result<f64> {
    copy()?;
    let mut best = f64::MAX;
    for _ in 0..REPEATS {
        let t = Instant::now();
        copy()?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(bytes as f64 / best / 1e9)
}

fn run(mib: usize) -> cuhost::Result<()> {
    let device = Device::get(0)?;
    let ctx = Context::primary(&device)?;
    let len = mib << 18; // u32 elements
    let bytes = len * 4;
    // The synchronous copies below run on the buffers' stream and return when done.
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let mut device_a = DeviceBuffer::<u32>::zeroed(&stream, len)?;
    let mut device_b = DeviceBuffer::<u32>::zeroed(&stream, len)?;
    let mut pinned = PinnedBuffer::<u32>::with_flags(&ctx, len, HostAllocFlags::empty())?;
    let mut pageable = vec![0u32; len];
    for (i, (p, q)) in pinned.as_mut_slice()?.iter_mut().zip(pageable.iter_mut()).enumerate() {
        *p = i as u32;
        *q = i as u32;
    }

    let rows = [
        ("host to device, pinned", measure(bytes, || device_a.copy_from(&pinned.as_slice()?))?),
        ("host to device, pageable", measure(bytes, || device_a.copy_from(&pageable))?),
        ("device to host, pinned", measure(bytes, || device_a.copy_to(&mut pinned.as_mut_slice()?))?),
        ("device to host, pageable", measure(bytes, || device_a.copy_to(&mut pageable))?),
        // A device-to-device copy reads and writes each byte: count both, as bandwidth tools do.
        ("device to device (read + write)", 2.0 * measure(bytes, || device_b.copy_from_device(&device_a))?),
    ];
    if pageable.iter().enumerate().any(|(i, v)| *v != i as u32) {
        return Err(cuhost::Error::invalid("bandwidth", "data read back differs from what was written"));
    }
    println!("{} ({} MiB per copy, best of {REPEATS})", device.name()?, mib);
    println!("{:<34} {:>10}", "copy", "GB/s");
    for (name, gbps) in rows {
        println!("{name:<34} {gbps:>10.1}");
    }
    Ok(())
}
