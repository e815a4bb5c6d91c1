//! Event record, stream wait, and pinned/device copy bandwidth through `cuda-core`, against the
//! raw `cuda-driver-sys` calls on the same handles in the same run.

use cuda_tests::bench::{Row, compare, compare_bandwidth, print_table};
use cuhost::memory::HostAllocFlags;
use cuhost::{Context, Device, DeviceBuffer, Event, EventFlags, PinnedBuffer, Result, Stream, StreamFlags};
use cuhost_driver_sys as sys;
use std::hint::black_box;

fn main() {
    match run() {
        Ok(rows) => print_table("cuda-core against the raw driver call (same handles, same run)", &rows),
        Err(e) => eprintln!("benchmark skipped: {e}"),
    }
}

fn run() -> Result<Vec<Row>> {
    let ctx = Context::primary(&Device::get(0)?)?;
    ctx.bind_to_thread()?;
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let (sr, e) = (s.as_raw(), Event::new(&ctx, EventFlags::DISABLE_TIMING)?);
    let er = e.as_raw();
    let mut rows = Vec::new();

    rows.push(compare(
        "event record",
        31,
        20_000,
        || {
            black_box(e.record(black_box(&s))).ok();
        },
        // SAFETY: live handles.
        || unsafe {
            black_box(sys::cuEventRecord(black_box(er), black_box(sr)));
        },
    ));
    s.synchronize()?;
    let other = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let or = other.as_raw();
    e.record(&s)?;
    rows.push(compare(
        "stream wait event",
        31,
        20_000,
        || {
            black_box(other.wait_event(black_box(&e))).ok();
        },
        // SAFETY: live handles.
        || unsafe {
            black_box(sys::cuStreamWaitEvent(black_box(or), black_box(er), 0));
        },
    ));
    other.synchronize()?;

    let n = 64 << 20;
    // Plain `cuMemHostAlloc` memory (no flags) on the host, as the raw side would allocate it;
    // device memory from the default pool, on the stream of the copies.
    let host = PinnedBuffer::<u8>::with_flags(&ctx, n, HostAllocFlags::empty())?;
    let mut back = PinnedBuffer::<u8>::with_flags(&ctx, n, HostAllocFlags::empty())?;
    let mut dev = DeviceBuffer::<u8>::new(&s, n)?;
    let mut dev2 = DeviceBuffer::<u8>::new(&s, n)?;
    let (hp, bp, dp, dp2) = (host.as_ptr(), back.as_mut_slice()?.as_mut_ptr(), dev.as_raw(), dev2.as_raw());

    rows.push(compare_bandwidth(
        "pinned H2D 64 MiB",
        11,
        10,
        n,
        || {
            // Safe: `host` records the copy (one event) and stays unwritten until it is done.
            dev.copy_from_pinned_async(&host, &s).ok();
            s.synchronize().ok();
        },
        // SAFETY: live allocations of `n` bytes.
        || unsafe {
            sys::cuMemcpyHtoDAsync(dp, hp.cast(), n, sr);
            sys::cuStreamSynchronize(sr);
        },
    ));
    rows.push(compare_bandwidth(
        "pinned D2H 64 MiB",
        11,
        10,
        n,
        || {
            // Safe: `back` records the copy (one event) and is not read until it is done.
            dev2.copy_to_pinned_async(&mut back, &s).ok();
            s.synchronize().ok();
        },
        // SAFETY: live allocations of `n` bytes.
        || unsafe {
            sys::cuMemcpyDtoHAsync(bp.cast(), dp2, n, sr);
            sys::cuStreamSynchronize(sr);
        },
    ));
    // Small copies, for the host cost of the cross-stream rule: on the buffers' own stream
    // nothing is noted; on another stream the copy notes it on both buffers (a lock, no event),
    // where raw code that frees safely records an event there and makes the owner's stream wait.
    let small_src = DeviceBuffer::<u32>::zeroed(&s, 1)?;
    let mut small_dst = DeviceBuffer::<u32>::zeroed(&s, 1)?;
    let (ssp, sdp) = (small_src.as_raw(), small_dst.as_raw());
    s.synchronize()?;
    rows.push(compare(
        "D2D copy of 4 bytes, same stream",
        31,
        20_000,
        || {
            black_box(small_dst.view_mut().copy_from_device_async(&small_src.view(), black_box(&s))).ok();
        },
        // SAFETY: live allocations of 4 bytes.
        || unsafe {
            black_box(sys::cuMemcpyDtoDAsync(sdp, ssp, 4, black_box(sr)));
        },
    ));
    s.synchronize()?;
    rows.push(compare(
        "D2D copy of 4 bytes, other stream vs raw copy+record+wait",
        31,
        20_000,
        || {
            black_box(small_dst.view_mut().copy_from_device_async(&small_src.view(), black_box(&other))).ok();
        },
        // SAFETY: live allocations of 4 bytes; live event and streams.
        || unsafe {
            black_box(sys::cuMemcpyDtoDAsync(sdp, ssp, 4, black_box(or)));
            black_box(sys::cuEventRecord(er, or));
            black_box(sys::cuStreamWaitEvent(sr, er, 0));
        },
    ));
    other.synchronize()?;
    s.synchronize()?;
    rows.push(first_use_on_another_stream(&s, &other, er)?);
    other.synchronize()?;
    s.synchronize()?;

    let src = DeviceBuffer::<u8>::zeroed(&s, n)?;
    let sp = src.as_raw();
    rows.push(compare_bandwidth(
        "D2D 64 MiB",
        11,
        20,
        n,
        || {
            dev2.view_mut().copy_from_device_async(&src.view(), &s).ok();
            s.synchronize().ok();
        },
        // SAFETY: live allocations of `n` bytes.
        || unsafe {
            sys::cuMemcpyDtoDAsync(dp, sp, n, sr);
            sys::cuStreamSynchronize(sr);
        },
    ));
    Ok(rows)
}

/// The first use of a buffer on a stream other than its own: the stream is made to wait for the
/// buffer's own stream (one event recorded there, one wait), then the memset is queued; against
/// the raw record, wait and memset. Each call takes a buffer never used on `other` (made
/// beforehand, given back after the timing).
fn first_use_on_another_stream(s: &Stream, other: &Stream, er: sys::CUevent) -> Result<Row> {
    const ROUNDS: usize = 11;
    const ITERS: u64 = 2_000;
    let count = ROUNDS * ITERS as usize + 1_000;
    let mut fresh = (0..count).map(|_| DeviceBuffer::<u32>::zeroed(s, 1)).collect::<Result<Vec<_>>>()?;
    let mut used = Vec::with_capacity(count);
    s.synchronize()?;
    let target = DeviceBuffer::<u32>::zeroed(s, 1)?;
    let (sr, or, tp) = (s.as_raw(), other.as_raw(), target.as_raw());
    let row = compare(
        "first use on another stream: memset of 4 bytes vs raw record+wait+memset",
        ROUNDS,
        ITERS,
        || {
            if let Some(mut b) = fresh.pop() {
                black_box(b.view_mut().memset_d32_async(1, black_box(other))).ok();
                used.push(b);
            }
        },
        // SAFETY: a live allocation of 4 bytes; live event and streams.
        || unsafe {
            black_box(sys::cuEventRecord(er, sr));
            black_box(sys::cuStreamWaitEvent(or, er, 0));
            black_box(sys::cuMemsetD32Async(tp, 1, 1, black_box(or)));
        },
    );
    other.synchronize()?;
    drop((used, fresh));
    Ok(row)
}
