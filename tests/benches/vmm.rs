//! Virtual memory management against the calls it replaces, in the same run:
//!
//! * growing a buffer from 1 GiB to 2 GiB in 64 MiB steps: `GrowableBuffer::resize` (one
//!   physical chunk mapped behind the others, no copy) against `cuMemAlloc` of the new size,
//!   a device-to-device copy and `cuMemFree` of the old at each step — the last step, and all
//!   sixteen — and against the raw `cuMemCreate`+`cuMemMap`+`cuMemSetAccess` of the chunk;
//! * mapping a 2 MiB chunk, granting access and unmapping it: `AddressRange::map` +
//!   `Mapping::set_access` + drop against `cuMemMap`+`cuMemSetAccess`+`cuMemUnmap`.

use cuda_tests::bench::{Row, compare, print_table};
use cuhost::mempool::Access;
use cuhost::vmm::{
    AccessGrant, AddressRange, AllocationProperties, Granularity, GrowableBuffer, PhysicalMemory,
};
use cuhost::{Context, Device, Result, Stream, StreamFlags};
use cuhost_driver_sys as sys;
use std::hint::black_box;
use std::time::Instant;

const MIB: usize = 1 << 20;
const START: usize = 1024 * MIB;
const END: usize = 2048 * MIB;
const STEP: usize = 64 * MIB;
/// Repetitions of the whole growth; the median is reported.
const REPEATS: usize = 7;

fn main() {
    match run() {
        Ok(rows) => {
            print_table("VMM against the raw driver calls (same run; ours/raw < 0.05 is 20x faster)", &rows);
            if let Some(last) = rows.first() {
                let speedup = if last.ours == 0.0 { f64::NAN } else { last.raw / last.ours };
                println!(
                    "{:<48} {:>12} {:>12} {speedup:>8.1}",
                    "last grow step: realloc+copy / GrowableBuffer", "", ""
                );
            }
        }
        Err(e) => eprintln!("benchmark skipped: {e}"),
    }
}

fn check(status: sys::CUresult) -> Result<()> {
    if status == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(cuhost::Error::Driver { call: "raw VMM benchmark call", status })
    }
}

fn elapsed_ns(t: Instant) -> f64 {
    t.elapsed().as_nanos() as f64
}

/// Grows a `GrowableBuffer` from START to END; returns (last step, all steps) in ns.
fn grow_ours(stream: &Stream) -> Result<(f64, f64)> {
    let mut buffer = GrowableBuffer::<u8>::new(stream, END)?;
    buffer.resize(START)?;
    stream.synchronize()?;
    let (mut last, mut total) = (0.0, 0.0);
    for size in (START + STEP..=END).step_by(STEP) {
        let t = Instant::now();
        buffer.resize(black_box(size))?;
        stream.synchronize()?;
        last = elapsed_ns(t);
        total += last;
    }
    Ok((last, total))
}

/// Grows plain `cuMemAlloc` memory by reallocating and copying at each step.
fn grow_by_copy(stream: sys::CUstream) -> Result<(f64, f64)> {
    let (mut old, mut size_now) = (0, START);
    // SAFETY: one out-parameter; the context is current.
    check(unsafe { sys::cuMemAlloc(&mut old, START) })?;
    let (mut last, mut total) = (0.0, 0.0);
    for size in (START + STEP..=END).step_by(STEP) {
        let t = Instant::now();
        let mut new = 0;
        // SAFETY: the new allocation is as large as the copy; the old one is freed once, after
        // the copy is done.
        unsafe {
            check(sys::cuMemAlloc(&mut new, size))?;
            check(sys::cuMemcpyDtoDAsync(new, old, size_now, stream))?;
            check(sys::cuStreamSynchronize(stream))?;
            check(sys::cuMemFree(old))?;
        }
        last = elapsed_ns(t);
        total += last;
        (old, size_now) = (new, size);
    }
    // SAFETY: the last allocation, freed once.
    check(unsafe { sys::cuMemFree(old) })?;
    Ok((last, total))
}

/// The raw calls behind one growth step: a physical chunk of STEP bytes, mapped after the
/// others and made accessible; returns the last step's ns.
fn grow_raw_vmm(device: Device, stream: sys::CUstream) -> Result<f64> {
    let props = AllocationProperties::device(device).to_raw();
    let desc = AccessGrant::device(device, Access::ReadWrite).as_raw();
    let mut base = 0;
    let mut handles = Vec::new();
    let mut mapped = 0;
    let mut last = 0.0;
    // SAFETY: every handle is mapped inside the reservation at a distinct offset, and all are
    // unmapped and released before the reservation is freed.
    unsafe {
        check(sys::cuMemAddressReserve(&mut base, END, 0, 0, 0))?;
        for size in std::iter::once(START).chain(std::iter::repeat_n(STEP, (END - START) / STEP)) {
            let t = Instant::now();
            let mut handle = 0;
            check(sys::cuMemCreate(&mut handle, size, &props, 0))?;
            check(sys::cuMemMap(base + mapped as u64, size, 0, handle, 0))?;
            check(sys::cuMemSetAccess(base + mapped as u64, size, &desc, 1))?;
            check(sys::cuStreamSynchronize(stream))?;
            last = elapsed_ns(t);
            handles.push(handle);
            mapped += size;
        }
        check(sys::cuMemUnmap(base, mapped))?;
        for handle in handles {
            check(sys::cuMemRelease(handle))?;
        }
        check(sys::cuMemAddressFree(base, END))?;
    }
    Ok(last)
}

fn run() -> Result<Vec<Row>> {
    let device = Device::get(0)?;
    let ctx = Context::primary(&device)?;
    ctx.bind_to_thread()?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let raw_stream = stream.as_raw();

    let (mut ours_last, mut ours_total, mut copy_last, mut copy_total, mut vmm_last) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..REPEATS {
        let (last, total) = grow_ours(&stream)?;
        ours_last.push(last);
        ours_total.push(total);
        let (last, total) = grow_by_copy(raw_stream)?;
        copy_last.push(last);
        copy_total.push(total);
        vmm_last.push(grow_raw_vmm(device, raw_stream)?);
    }
    let mut rows = vec![
        Row::from_rounds("grow 1984->2048 MiB: resize vs alloc+copy+free", ours_last.clone(), copy_last),
        Row::from_rounds("grow 1->2 GiB, 16 steps: resize vs alloc+copy+free", ours_total, copy_total),
        Row::from_rounds("grow 1984->2048 MiB: resize vs cuMemCreate+Map+SetAccess", ours_last, vmm_last),
    ];

    // Map + access + unmap of one 2 MiB chunk.
    let props = AllocationProperties::device(device);
    let chunk = props.granularity(Granularity::Minimum)?.max(2 * MIB);
    let physical = PhysicalMemory::new(&ctx, chunk, &props)?;
    let range = AddressRange::reserve(&ctx, chunk, 0)?;
    let grants = [AccessGrant::device(device, Access::ReadWrite)];
    let (address, handle, desc) = (range.as_raw(), physical.as_raw(), grants[0].as_raw());
    rows.push(compare(
        "2 MiB map+set_access+unmap vs cuMemMap+SetAccess+Unmap",
        31,
        200,
        || {
            if let Ok(mapping) = range.map(0, black_box(&physical)) {
                black_box(mapping.set_access(&grants)).ok();
            }
        },
        || {
            // SAFETY: the chunk is mapped into the free reservation and unmapped at once.
            unsafe {
                black_box(sys::cuMemMap(address, black_box(chunk), 0, handle, 0));
                black_box(sys::cuMemSetAccess(address, chunk, &desc, 1));
                black_box(sys::cuMemUnmap(address, chunk));
            }
        },
    ));
    Ok(rows)
}
