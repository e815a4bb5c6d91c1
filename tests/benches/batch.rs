//! 1,000 device-to-device copies of 256 bytes each, timed with the stream synchronize that
//! waits for them: through a safe `CopyBatch` (one `cuMemcpyBatchAsync`), through 1,000 safe
//! single `copy_from_device_async` calls, and through 1,000 raw `cuMemcpyDtoDAsync` calls,
//! each against the raw `cuMemcpyBatchAsync` call on the same buffers in the same run.

use cuda_tests::bench::{Row, compare, print_table};
use cuhost::copy::CopyRegion;
use cuhost::{Context, Device, DeviceBuffer, Result, Stream, StreamFlags};
use cuhost_driver_sys as sys;
use std::hint::black_box;

/// Copies per batch.
const COPIES: usize = 1000;
/// Bytes per copy.
const BYTES: usize = 256;

fn main() {
    match run() {
        Ok(rows) => print_table(
            "1,000 device-to-device copies of 256 B + stream synchronize, against the raw cuMemcpyBatchAsync (same run)",
            &rows,
        ),
        Err(e) => eprintln!("benchmark skipped: {e}"),
    }
}

/// The raw batch: the address arrays made once, one call and a synchronize per round.
struct RawBatch {
    dsts: Vec<sys::CUdeviceptr>,
    srcs: Vec<sys::CUdeviceptr>,
    sizes: Vec<usize>,
    stream: sys::CUstream,
    newest_abi: bool,
}

impl RawBatch {
    fn run(&mut self) {
        let mut attributes = [sys::CUmemcpyAttributes {
            srcAccessOrder: sys::CUmemcpySrcAccessOrder::CU_MEMCPY_SRC_ACCESS_ORDER_STREAM,
            ..Default::default()
        }];
        let mut first = [0usize];
        let (d, s, z) = (self.dsts.as_mut_ptr(), self.srcs.as_mut_ptr(), self.sizes.as_mut_ptr());
        // SAFETY: COPIES live, disjoint ranges of BYTES bytes in each array's buffers; one
        // attribute set from the first copy.
        unsafe {
            if self.newest_abi {
                black_box(sys::cuMemcpyBatchAsync(
                    d,
                    s,
                    z,
                    COPIES,
                    attributes.as_mut_ptr(),
                    first.as_mut_ptr(),
                    1,
                    self.stream,
                ));
            } else {
                let mut failed = 0usize;
                black_box(sys::cuMemcpyBatchAsync_v12080(
                    d,
                    s,
                    z,
                    COPIES,
                    attributes.as_mut_ptr(),
                    first.as_mut_ptr(),
                    1,
                    &mut failed,
                    self.stream,
                ));
            }
            black_box(sys::cuStreamSynchronize(self.stream));
        }
    }
}

fn run() -> Result<Vec<Row>> {
    let ctx = Context::primary(&Device::get(0)?)?;
    ctx.bind_to_thread()?;
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    // Made first, so that a driver without the call skips the benchmark with the load error.
    drop(s.copy_batch()?);
    let src = DeviceBuffer::<u8>::zeroed(&s, COPIES * BYTES)?;
    let mut dst = DeviceBuffer::<u8>::zeroed(&s, COPIES * BYTES)?;
    s.synchronize()?;
    // Copy i writes block i from block (i * 7) % COPIES: a gather, as real batches are.
    let from = |i: usize| (i * 7) % COPIES * BYTES;
    let mut raw = RawBatch {
        dsts: (0..COPIES).map(|i| dst.as_raw() + (i * BYTES) as u64).collect(),
        srcs: (0..COPIES).map(|i| src.as_raw() + from(i) as u64).collect(),
        sizes: vec![BYTES; COPIES],
        stream: s.as_raw(),
        newest_abi: sys::check_abi_version("cuMemcpyBatchAsync", 13000).is_ok(),
    };
    let (dp, sp, sr) = (dst.as_raw(), src.as_raw(), s.as_raw());
    let mut rows = Vec::new();

    rows.push(compare(
        "CopyBatch (copy_regions, submit) vs raw batch",
        31,
        200,
        || {
            let batch = (|| -> Result<()> {
                let mut batch = s.copy_batch()?;
                batch.copy_regions(
                    &mut dst,
                    &src,
                    (0..COPIES).map(|i| CopyRegion::of(BYTES).from(from(i)).to(i * BYTES)),
                )?;
                batch.submit()?;
                s.synchronize()
            })();
            black_box(batch).ok();
        },
        || raw.run(),
    ));
    rows.push(compare(
        "1,000 safe copy_from_device_async vs raw batch",
        31,
        50,
        || {
            for i in 0..COPIES {
                let copied = dst.slice_mut(i * BYTES..(i + 1) * BYTES).and_then(|mut d| {
                    let from = from(i);
                    d.copy_from_device_async(&src.slice(from..from + BYTES)?, &s)
                });
                black_box(copied).ok();
            }
            black_box(s.synchronize()).ok();
        },
        || raw.run(),
    ));
    rows.push(compare(
        "1,000 raw cuMemcpyDtoDAsync vs raw batch",
        31,
        50,
        // SAFETY: COPIES live, disjoint ranges of BYTES bytes in each buffer.
        || unsafe {
            for i in 0..COPIES {
                black_box(sys::cuMemcpyDtoDAsync(dp + (i * BYTES) as u64, sp + from(i) as u64, BYTES, sr));
            }
            black_box(sys::cuStreamSynchronize(sr));
        },
        || raw.run(),
    ));
    Ok(rows)
}
