//! All-reduce on two GPUs through `Communicator::all_reduce` against raw `ncclAllReduce`, on
//! the same communicators, buffers and streams, in the same run: bus bandwidth at 1 GiB and
//! time per call at 1 MiB. Each timed batch issues its all-reduces (one group over both ranks
//! per call) and then waits for both streams; batches of ours and raw alternate.
//!
//! It needs two GPUs, and says so and stops with fewer. NVLink SHARP stays off.

use cuda_tests::bench::{Row, compare, print_table};
use cuhost::nccl::{Communicator, ReduceOp, group};
use cuhost::{Device, DeviceBuffer, Error, Result, Stream, StreamFlags};
use cuhost_driver_sys as sys;
use cuhost_nccl_sys as nccl;
use std::cell::RefCell;

fn main() {
    // SAFETY: nothing else runs yet in this process, so nothing reads the environment meanwhile.
    unsafe { std::env::set_var("NCCL_NVLS_ENABLE", "0") };
    match Device::count() {
        Ok(n) if n >= 2 => {}
        Ok(n) => {
            println!("nccl benchmark skipped: it needs 2 GPUs, this host has {n}");
            return;
        }
        Err(e) => {
            println!("nccl benchmark skipped: {e}");
            return;
        }
    }
    match run() {
        Ok(rows) => print_table(
            "NCCL all-reduce: cuda-core against raw ncclAllReduce (same communicators, same run)",
            &rows,
        ),
        Err(e) => eprintln!("nccl benchmark failed: {e}"),
    }
}

/// One rank: its communicator, stream and buffers.
struct Rank {
    comm: Communicator,
    stream: Stream,
    send: DeviceBuffer<f32>,
    recv: DeviceBuffer<f32>,
}

/// The raw handles of one rank, for the raw side.
#[derive(Clone, Copy)]
struct RawRank {
    comm: nccl::ncclComm_t,
    stream: sys::CUstream,
    send: sys::CUdeviceptr,
    recv: sys::CUdeviceptr,
}

fn synchronize(raw: &[RawRank]) {
    for r in raw {
        // SAFETY: a live stream.
        unsafe { sys::cuStreamSynchronize(r.stream) };
    }
}

/// Median nanoseconds per all-reduce of `elements` floats, ours and raw, each over batches of
/// `batch` calls.
fn measure(
    name: &str,
    comms: &mut Vec<Communicator>,
    elements: usize,
    batch: usize,
    rounds: usize,
) -> Result<Row> {
    let mut ranks = Vec::new();
    for comm in comms.drain(..) {
        let stream = Stream::new(comm.context(), StreamFlags::NON_BLOCKING)?;
        let send = DeviceBuffer::<f32>::zeroed(&stream, elements)?;
        let recv = DeviceBuffer::<f32>::zeroed(&stream, elements)?;
        ranks.push(Rank { comm, stream, send, recv });
    }
    let raw: Vec<RawRank> = ranks
        .iter()
        .map(|r| RawRank {
            comm: r.comm.as_raw(),
            stream: r.stream.as_raw(),
            send: r.send.as_raw(),
            recv: r.recv.as_raw(),
        })
        .collect();
    for r in &ranks {
        r.stream.synchronize()?;
    }
    let failed: RefCell<Option<Error>> = RefCell::new(None);
    let row = {
        let ranks = &mut ranks;
        let raw = &raw;
        let failed = &failed;
        compare(
            name,
            rounds,
            1,
            || {
                for _ in 0..batch {
                    let r = group(|| {
                        ranks.iter_mut().try_for_each(|r| {
                            r.comm.all_reduce(&r.send, &mut r.recv, ReduceOp::Sum, &r.stream)
                        })
                    });
                    if let Err(e) = r {
                        failed.borrow_mut().get_or_insert(e);
                    }
                }
                synchronize(raw);
            },
            || {
                for _ in 0..batch {
                    // SAFETY: live communicators, streams and buffers of `elements` floats on
                    // each rank's device; one group per call, as one thread drives both ranks.
                    unsafe {
                        nccl::ncclGroupStart();
                        for r in raw {
                            nccl::ncclAllReduce(
                                r.send as usize as *const std::ffi::c_void,
                                r.recv as usize as *mut std::ffi::c_void,
                                elements,
                                nccl::ncclDataType_t::ncclFloat32,
                                nccl::ncclRedOp_t::ncclSum,
                                r.comm,
                                r.stream.cast(),
                            );
                        }
                        nccl::ncclGroupEnd();
                    }
                }
                synchronize(raw);
            },
        )
    };
    if let Some(e) = failed.take() {
        return Err(e);
    }
    comms.extend(ranks.into_iter().map(|r| r.comm));
    Ok(Row { ours: row.ours / batch as f64, raw: row.raw / batch as f64, ..row })
}

fn run() -> Result<Vec<Row>> {
    let devices = [Device::get(0)?, Device::get(1)?];
    let mut comms = Communicator::init_all(&devices)?;
    let n = comms.len() as f64;
    let mut rows = Vec::new();

    // Bus bandwidth: bytes × 2(n−1)/n per unit of time, NCCL's measure for all-reduce.
    let bytes = 1usize << 30;
    let t = measure("all-reduce 1 GiB f32, bus bandwidth", &mut comms, bytes / 4, 4, 11)?;
    let busbw = |ns: f64| bytes as f64 * 2.0 * (n - 1.0) / n / ns;
    rows.push(Row { unit: "GB/s", ours: busbw(t.ours), raw: busbw(t.raw), paired: 1.0 / t.paired, ..t });

    rows.push(measure("all-reduce 1 MiB f32, time per call", &mut comms, (1 << 20) / 4, 200, 31)?);
    Ok(rows)
}
