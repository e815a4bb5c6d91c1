//! Bus bandwidth of all-reduce, all-gather and reduce-scatter at 1 MiB, 64 MiB and 1 GiB on
//! four GPUs: `Communicator`'s calls against the raw `ncclAllReduce`, `ncclAllGather` and
//! `ncclReduceScatter` on the same communicators, buffers and streams, in the same run. One
//! process drives the four ranks (one group per call); batches of ours and raw alternate.
//!
//! Sizes and bandwidth follow nccl-tests: the size is the larger buffer of a rank (the whole
//! buffer of an all-reduce, the gathered one of an all-gather, the scattered input of a
//! reduce-scatter); the bus bandwidth is size / time times 2(n-1)/n for all-reduce and (n-1)/n
//! for the other two.
//!
//! The first table uses the transports NCCL picks (NVLink or PCIe on one host). The second is
//! the same run in a child process with NCCL's socket transport forced (`NCCL_P2P_DISABLE=1
//! NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_NET=Socket`), as ranks on different hosts
//! without InfiniBand would talk. It needs four GPUs, and says so and stops with fewer. NVLink
//! SHARP stays off.

use cuda_tests::bench::{Row, compare, print_table};
use cuhost::nccl::{Communicator, ReduceOp, group};
use cuhost::{Device, DeviceBuffer, Error, Result, Stream, StreamFlags};
use cuhost_driver_sys as sys;
use cuhost_nccl_sys as nccl;
use std::cell::RefCell;
use std::ffi::c_void;
use std::time::{Duration, Instant};

/// Set in the child that measures over sockets.
const SOCKET_CHILD: &str = "CUDA_CORE_NCCL_BUSBW_SOCKETS";
const RANKS: usize = 4;

fn main() {
    // SAFETY: nothing else runs yet in this process, so nothing reads the environment meanwhile.
    unsafe { std::env::set_var("NCCL_NVLS_ENABLE", "0") };
    let sockets = std::env::var_os(SOCKET_CHILD).is_some();
    match Device::count() {
        Ok(n) if n >= RANKS => {}
        Ok(n) => {
            println!("nccl_busbw benchmark skipped: it needs {RANKS} GPUs, this host has {n}");
            return;
        }
        Err(e) => {
            println!("nccl_busbw benchmark skipped: {e}");
            return;
        }
    }
    let transport = if sockets { "the socket transport" } else { "NCCL's choice of transport" };
    match run(sockets) {
        Ok(rows) => print_table(
            &format!(
                "NCCL bus bandwidth on {RANKS} GPUs over {transport}: cuda-core against raw NCCL (same communicators, same run)"
            ),
            &rows,
        ),
        Err(e) => {
            eprintln!("nccl_busbw benchmark over {transport} failed: {e}");
            std::process::exit(1);
        }
    }
    if !sockets {
        if let Err(e) = over_sockets() {
            eprintln!("nccl_busbw benchmark over the socket transport failed: {e}");
            std::process::exit(1);
        }
    }
}

/// Runs this benchmark again with the socket transport forced (NCCL reads its transports once
/// per process), its table printed by the child, for at most 15 minutes.
fn over_sockets() -> std::result::Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = std::process::Command::new(exe)
        .args(std::env::args().skip(1))
        .env(SOCKET_CHILD, "1")
        .env("NCCL_NVLS_ENABLE", "0")
        .env("NCCL_P2P_DISABLE", "1")
        .env("NCCL_SHM_DISABLE", "1")
        .env("NCCL_IB_DISABLE", "1")
        .env("NCCL_NET", "Socket")
        .spawn()
        .map_err(|e| format!("cannot start the child: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return if status.success() { Ok(()) } else { Err(format!("the child failed: {status}")) };
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err("the child still ran after 15 minutes; it was killed".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[derive(Clone, Copy, Debug)]
enum Collective {
    AllReduce,
    AllGather,
    ReduceScatter,
}

impl Collective {
    fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all-reduce",
            Collective::AllGather => "all-gather",
            Collective::ReduceScatter => "reduce-scatter",
        }
    }

    /// Elements of a rank's send and receive buffers for a size of `bytes`.
    fn lengths(self, bytes: usize) -> (usize, usize) {
        let whole = bytes / 4;
        match self {
            Collective::AllReduce => (whole, whole),
            Collective::AllGather => (whole / RANKS, whole),
            Collective::ReduceScatter => (whole, whole / RANKS),
        }
    }

    /// The bus bandwidth factor of nccl-tests.
    fn factor(self) -> f64 {
        let n = RANKS as f64;
        match self {
            Collective::AllReduce => 2.0 * (n - 1.0) / n,
            Collective::AllGather | Collective::ReduceScatter => (n - 1.0) / n,
        }
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
    send: *const c_void,
    recv: *mut c_void,
}

fn synchronize(raw: &[RawRank]) {
    for r in raw {
        // SAFETY: a live stream.
        unsafe { sys::cuStreamSynchronize(r.stream) };
    }
}

fn ours(ranks: &mut [Rank], op: Collective) -> Result<()> {
    group(|| {
        ranks.iter_mut().try_for_each(|r| match op {
            Collective::AllReduce => r.comm.all_reduce(&r.send, &mut r.recv, ReduceOp::Sum, &r.stream),
            Collective::AllGather => r.comm.all_gather(&r.send, &mut r.recv, &r.stream),
            Collective::ReduceScatter => {
                r.comm.reduce_scatter(&r.send, &mut r.recv, ReduceOp::Sum, &r.stream)
            }
        })
    })
}

fn raw(ranks: &[RawRank], op: Collective, recv_len: usize) {
    let (f32_, sum) = (nccl::ncclDataType_t::ncclFloat32, nccl::ncclRedOp_t::ncclSum);
    // SAFETY: live communicators, streams and buffers of the lengths `Collective::lengths`
    // gives on each rank's device; one group per call, as one thread drives every rank.
    unsafe {
        nccl::ncclGroupStart();
        for r in ranks {
            let s = r.stream.cast();
            match op {
                Collective::AllReduce => nccl::ncclAllReduce(r.send, r.recv, recv_len, f32_, sum, r.comm, s),
                Collective::AllGather => {
                    nccl::ncclAllGather(r.send, r.recv, recv_len / RANKS, f32_, r.comm, s)
                }
                Collective::ReduceScatter => {
                    nccl::ncclReduceScatter(r.send, r.recv, recv_len, f32_, sum, r.comm, s)
                }
            };
        }
        nccl::ncclGroupEnd();
    }
}

/// The bus bandwidth row of `op` at `bytes`, each side timed over `rounds` rounds of `batch`
/// calls.
fn measure(
    comms: &mut Vec<Communicator>,
    op: Collective,
    bytes: usize,
    label: &str,
    batch: usize,
    rounds: usize,
) -> Result<Row> {
    let (send_len, recv_len) = op.lengths(bytes);
    let mut ranks = Vec::new();
    for comm in comms.drain(..) {
        let stream = Stream::new(comm.context(), StreamFlags::NON_BLOCKING)?;
        let send = DeviceBuffer::<f32>::zeroed(&stream, send_len)?;
        let recv = DeviceBuffer::<f32>::zeroed(&stream, recv_len)?;
        ranks.push(Rank { comm, stream, send, recv });
    }
    let raws: Vec<RawRank> = ranks
        .iter()
        .map(|r| RawRank {
            comm: r.comm.as_raw(),
            stream: r.stream.as_raw(),
            send: r.send.as_raw() as usize as *const c_void,
            recv: r.recv.as_raw() as usize as *mut c_void,
        })
        .collect();
    for r in &ranks {
        r.stream.synchronize()?;
    }
    // One call of each side first: connections are made on first use.
    ours(&mut ranks, op)?;
    raw(&raws, op, recv_len);
    synchronize(&raws);
    let failed: RefCell<Option<Error>> = RefCell::new(None);
    let name = format!("{} {label}, bus bandwidth", op.name());
    let t = {
        let ranks = &mut ranks;
        let (raws, failed) = (&raws, &failed);
        compare(
            &name,
            rounds,
            1,
            || {
                for _ in 0..batch {
                    if let Err(e) = ours(ranks, op) {
                        failed.borrow_mut().get_or_insert(e);
                    }
                }
                synchronize(raws);
            },
            || {
                for _ in 0..batch {
                    raw(raws, op, recv_len);
                }
                synchronize(raws);
            },
        )
    };
    if let Some(e) = failed.take() {
        return Err(e);
    }
    comms.extend(ranks.into_iter().map(|r| r.comm));
    let busbw = |ns_per_batch: f64| bytes as f64 * op.factor() / (ns_per_batch / batch as f64);
    Ok(Row { unit: "GB/s", ours: busbw(t.ours), raw: busbw(t.raw), paired: 1.0 / t.paired, ..t })
}

fn run(sockets: bool) -> Result<Vec<Row>> {
    let devices = (0..RANKS).map(Device::get).collect::<Result<Vec<_>>>()?;
    let mut comms = Communicator::init_all(&devices)?;
    let mut rows = Vec::new();
    // (size, label, batch and rounds over NVLink/PCIe, batch and rounds over sockets)
    let sizes = [
        (1usize << 20, "1 MiB", (50, 11), (10, 5)),
        (64 << 20, "64 MiB", (10, 7), (2, 3)),
        (1 << 30, "1 GiB", (2, 5), (1, 3)),
    ];
    for op in [Collective::AllReduce, Collective::AllGather, Collective::ReduceScatter] {
        for (bytes, label, fast, slow) in sizes {
            let (batch, rounds) = if sockets { slow } else { fast };
            rows.push(measure(&mut comms, op, bytes, label, batch, rounds)?);
        }
    }
    Communicator::finalize_all(comms)?;
    Ok(rows)
}
