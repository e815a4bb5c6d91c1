//! Many small copies in one call: gather scattered rows of a pinned host table into one device
//! buffer with a `CopyBatch` (one `cuMemcpyBatchAsync`), then with one `cuMemcpyHtoDAsync` per
//! row, checking the device buffer after each and timing both.
//!
//! ```sh
//! cargo run --release --example copy_batch -- 1000 64   # rows gathered, u32s per row
//! ```

use cuhost::copy::CopyRegion;
use cuhost::{Context, Device, DeviceBuffer, Error, PinnedBuffer, Stream, StreamFlags};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Rows in the host table the rows are picked from.
const TABLE_ROWS: usize = 1 << 14;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1).map(|s| s.parse::<usize>().ok());
    let rows = args.next().flatten().unwrap_or(1000).clamp(1, TABLE_ROWS);
    let width = args.next().flatten().unwrap_or(64).clamp(1, 1 << 16);
    // The default pools cache freed blocks for reuse: give them back before exiting, so
    // that a leak checker (compute-sanitizer --leak-check full) sees only real leaks.
    match run(rows, width).and_then(|()| cuhost::pool::release_default_pools()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("copy_batch: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(rows: usize, width: usize) -> cuhost::Result<()> {
    let ctx = Context::primary(&Device::get(0)?)?;
    // Batches need a created stream (or the per-thread default one): the driver refuses the
    // legacy default stream.
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    // Element j of table row r is r * width + j + 1, so a wrong or missing row shows.
    let mut table = PinnedBuffer::from_fn(TABLE_ROWS * width, |i| i as u32 + 1)?;
    // Destination row i takes table row picked[i]: rows spread over the whole table, out of
    // order (7919 is prime, so no row is picked twice).
    let picked: Vec<usize> = (0..rows).map(|i| i * 7919 % TABLE_ROWS).collect();
    let expected: Vec<u32> =
        picked.iter().flat_map(|&r| (0..width).map(move |j| (r * width + j) as u32 + 1)).collect();
    let mut gathered = DeviceBuffer::<u32>::zeroed(&stream, rows * width)?;

    // One batch: one region per row, all queued by one driver call. Each round is timed from
    // the first call to the end of a synchronize; the best of a few rounds is kept (the first
    // loads the driver's functions).
    let mut batched = Duration::MAX;
    for _ in 0..3 {
        gathered.view_mut().memset_d32_async(0, &stream)?;
        stream.synchronize()?;
        let start = Instant::now();
        let mut batch = match stream.copy_batch() {
            Ok(batch) => batch,
            Err(e @ Error::Load { .. }) => {
                println!("this driver has no batched copies (cuMemcpyBatchAsync, CUDA 12.8): {e}");
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let regions =
            picked.iter().enumerate().map(|(i, &r)| CopyRegion::of(width).from(r * width).to(i * width));
        batch.copy_regions(&mut gathered, &table, regions)?;
        batch.submit()?;
        stream.synchronize()?;
        batched = batched.min(start.elapsed());
        check("the batch", &gathered, &expected)?;
    }

    // The same rows, one copy each. A single copy from pinned memory takes a whole pinned
    // buffer or chunk, so the table is split into one chunk per row; each chunk also records an
    // event after its copy, which is what keeps its copy safe.
    let chunks = table.chunks_mut(width)?;
    let mut single = Duration::MAX;
    for _ in 0..3 {
        gathered.view_mut().memset_d32_async(0, &stream)?;
        stream.synchronize()?;
        let start = Instant::now();
        for (i, &r) in picked.iter().enumerate() {
            gathered.slice_mut(i * width..(i + 1) * width)?.copy_from_pinned_async(&chunks[r], &stream)?;
        }
        stream.synchronize()?;
        single = single.min(start.elapsed());
        check("the single copies", &gathered, &expected)?;
    }
    drop(chunks);

    println!(
        "{rows} rows of {} bytes gathered from a {} KiB pinned table, both times checked: one batch {:.3} ms, \
         {rows} single copies {:.3} ms ({:.1} times as long)",
        width * 4,
        TABLE_ROWS * width * 4 / 1024,
        ms(batched),
        ms(single),
        single.as_secs_f64() / batched.as_secs_f64()
    );
    Ok(())
}

/// Fails unless the device buffer holds `expected`.
fn check(what: &str, gathered: &DeviceBuffer<u32>, expected: &[u32]) -> cuhost::Result<()> {
    let got = gathered.to_vec()?;
    match got.iter().zip(expected).position(|(g, e)| g != e) {
        None => Ok(()),
        Some(i) => Err(Error::invalid(
            "copy_batch example",
            format!("{what}: element {i} is {}, not {}", got[i], expected[i]),
        )),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
