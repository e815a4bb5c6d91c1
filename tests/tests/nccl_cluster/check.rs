//! Every collective and a ring of sends and receives over ranks driven by this process (all
//! four in one process, or one per process), each result checked against the host.

use cuda_tests::{TestResult, ensure, ensure_eq};
use cuhost::nccl::{Communicator, Config, ReduceOp, group, version};
use cuhost::{DeviceBuffer, Error, Stream, StreamFlags};
use std::time::Duration;

/// Elements of a whole buffer: four blocks of `BLOCK`.
pub const LEN: usize = 64;
/// Elements of one rank's block.
pub const BLOCK: usize = LEN / 4;
/// How long one collective may take before the check fails.
pub const LIMIT: Duration = Duration::from_secs(30);

/// A rank this process drives: its communicator, a stream on its device and its rank.
pub struct Local {
    pub comm: Communicator,
    pub stream: Stream,
    pub rank: usize,
}

impl Local {
    /// A local rank over `comm`, with a new stream on its device.
    pub fn new(comm: Communicator) -> Result<Local, Error> {
        let stream = Stream::new(comm.context(), StreamFlags::NON_BLOCKING)?;
        let rank = comm.rank()?;
        Ok(Local { comm, stream, rank })
    }
}

/// The value rank `rank` holds at index `i`: 1 to 4, exact in every type.
pub fn value(rank: usize, i: usize) -> f32 {
    (1 + (i + 3 * rank) % 4) as f32
}

/// Rank `rank`'s input of `len` elements.
pub fn input(rank: usize, len: usize) -> Vec<f32> {
    (0..len).map(|i| value(rank, i)).collect()
}

fn upload(
    locals: &[Local],
    len: usize,
    data: impl Fn(usize) -> Vec<f32>,
) -> Result<Vec<DeviceBuffer<f32>>, Error> {
    locals
        .iter()
        .map(|l| {
            let v = data(l.rank);
            debug_assert_eq!(v.len(), len);
            DeviceBuffer::from_slice(&l.stream, &v)
        })
        .collect()
}

fn zeros(locals: &[Local], len: usize) -> Result<Vec<DeviceBuffer<f32>>, Error> {
    locals.iter().map(|l| DeviceBuffer::zeroed(&l.stream, len)).collect()
}

/// Waits for every local rank's stream, watching its communicator, and reads `buffers` back.
fn download(locals: &[Local], buffers: &[DeviceBuffer<f32>]) -> Result<Vec<Vec<f32>>, Error> {
    for l in locals {
        l.comm.synchronize(&l.stream, LIMIT)?;
    }
    buffers.iter().map(DeviceBuffer::to_vec).collect()
}

/// Runs `f` for every local rank inside one group (one thread driving several ranks must).
fn each(locals: &[Local], mut f: impl FnMut(usize, &Local) -> Result<(), Error>) -> Result<(), Error> {
    group(|| locals.iter().enumerate().try_for_each(|(i, l)| f(i, l)))
}

/// Every collective, the in-order ring of sends and receives, checked on every local rank of a
/// clique of `n`.
pub fn every_collective(locals: &[Local], n: usize) -> TestResult {
    ensure!(LEN % n == 0 && n == 4, "these checks are written for four ranks, not {n}");
    let full = upload(locals, LEN, |r| input(r, LEN))?;
    let block = upload(locals, BLOCK, |r| input(r, BLOCK))?;

    let mut recv = zeros(locals, LEN)?;
    each(locals, |i, l| l.comm.all_reduce(&full[i], &mut recv[i], ReduceOp::Sum, &l.stream))?;
    let want: Vec<f32> = (0..LEN).map(|i| (0..n).map(|r| value(r, i)).sum()).collect();
    for (l, got) in locals.iter().zip(download(locals, &recv)?) {
        ensure_eq!(got, want, "all-reduce (sum), rank {}", l.rank);
    }

    let mut recv = zeros(locals, LEN)?;
    each(locals, |i, l| l.comm.broadcast(&full[i], &mut recv[i], 2, &l.stream))?;
    for (l, got) in locals.iter().zip(download(locals, &recv)?) {
        ensure_eq!(got, input(2, LEN), "broadcast from rank 2, rank {}", l.rank);
    }

    let mut recv = zeros(locals, LEN)?;
    each(locals, |i, l| l.comm.reduce(&full[i], &mut recv[i], ReduceOp::Max, 3, &l.stream))?;
    let max: Vec<f32> = (0..LEN).map(|i| (0..n).map(|r| value(r, i)).fold(0.0, f32::max)).collect();
    for (l, got) in locals.iter().zip(download(locals, &recv)?) {
        let want = if l.rank == 3 { max.clone() } else { vec![0.0; LEN] };
        ensure_eq!(got, want, "reduce (max) to rank 3, rank {}", l.rank);
    }

    let mut recv = zeros(locals, LEN)?;
    each(locals, |i, l| l.comm.all_gather(&block[i], &mut recv[i], &l.stream))?;
    let gathered: Vec<f32> = (0..n).flat_map(|r| input(r, BLOCK)).collect();
    for (l, got) in locals.iter().zip(download(locals, &recv)?) {
        ensure_eq!(got, gathered, "all-gather, rank {}", l.rank);
    }

    let mut recv = zeros(locals, BLOCK)?;
    each(locals, |i, l| l.comm.reduce_scatter(&full[i], &mut recv[i], ReduceOp::Sum, &l.stream))?;
    for (l, got) in locals.iter().zip(download(locals, &recv)?) {
        let want: Vec<f32> = (0..BLOCK).map(|i| (0..n).map(|r| value(r, l.rank * BLOCK + i)).sum()).collect();
        ensure_eq!(got, want, "reduce-scatter (sum), rank {}", l.rank);
    }

    let mut recv = zeros(locals, LEN)?;
    each(locals, |i, l| l.comm.all_to_all(&full[i], &mut recv[i], &l.stream))?;
    for (l, got) in locals.iter().zip(download(locals, &recv)?) {
        let want: Vec<f32> =
            (0..n).flat_map(|j| (0..BLOCK).map(move |i| value(j, l.rank * BLOCK + i))).collect();
        ensure_eq!(got, want, "all-to-all, rank {}", l.rank);
    }

    if version()?.minor >= 28 || version()?.major > 2 {
        let mut recv = zeros(locals, LEN)?;
        each(locals, |i, l| {
            let mine = (l.rank == 1).then_some(&mut recv[i]);
            l.comm.gather(&block[i], mine, 1, &l.stream)
        })?;
        for (l, got) in locals.iter().zip(download(locals, &recv)?) {
            let want = if l.rank == 1 { gathered.clone() } else { vec![0.0; LEN] };
            ensure_eq!(got, want, "gather to rank 1, rank {}", l.rank);
        }
        let mut recv = zeros(locals, BLOCK)?;
        each(locals, |i, l| {
            let root = (l.rank == 1).then_some(&full[i]);
            l.comm.scatter(root, &mut recv[i], 1, &l.stream)
        })?;
        for (l, got) in locals.iter().zip(download(locals, &recv)?) {
            let want: Vec<f32> = (0..BLOCK).map(|i| value(1, l.rank * BLOCK + i)).collect();
            ensure_eq!(got, want, "scatter from rank 1, rank {}", l.rank);
        }
    } else {
        println!("gather and scatter skipped: NCCL {} has them from 2.28", version()?);
    }

    // A ring: each rank sends to the next and receives from the previous, in one group.
    let mut recv = zeros(locals, LEN)?;
    each(locals, |i, l| {
        l.comm.send(&full[i], (l.rank + 1) % n, &l.stream)?;
        l.comm.recv(&mut recv[i], (l.rank + n - 1) % n, &l.stream)
    })?;
    for (l, got) in locals.iter().zip(download(locals, &recv)?) {
        ensure_eq!(got, input((l.rank + n - 1) % n, LEN), "ring of sends, rank {}", l.rank);
    }
    Ok(())
}

/// Splits the clique into the pairs {0, 1} and {2, 3}, each ordered backwards by its key, and
/// checks the pairs' sizes, new ranks and an all-reduce in each.
pub fn split_into_pairs(locals: &[Local]) -> TestResult {
    let parents: Vec<&Communicator> = locals.iter().map(|l| &l.comm).collect();
    let splits: Vec<(Option<u32>, i32)> =
        locals.iter().map(|l| (Some((l.rank / 2) as u32), -(l.rank as i32))).collect();
    let pairs = Communicator::split_all(&parents, &splits, &Config::new())?;
    let mut halves = Vec::new();
    for (l, pair) in locals.iter().zip(pairs) {
        let pair = pair.ok_or_else(|| format!("rank {} got no pair", l.rank))?;
        let half = Local::new(pair)?;
        ensure_eq!(half.comm.count()?, 2, "the pair of rank {}", l.rank);
        ensure_eq!(half.rank, 1 - l.rank % 2, "rank {}'s rank in its pair (ordered backwards)", l.rank);
        halves.push((l.rank, half));
    }
    let send = halves
        .iter()
        .map(|(r, h)| DeviceBuffer::from_slice(&h.stream, &input(*r, LEN)))
        .collect::<Result<Vec<_>, _>>()?;
    let mut recv = halves
        .iter()
        .map(|(_, h)| DeviceBuffer::<f32>::zeroed(&h.stream, LEN))
        .collect::<Result<Vec<_>, _>>()?;
    group(|| {
        for (i, (_, h)) in halves.iter().enumerate() {
            h.comm.all_reduce(&send[i], &mut recv[i], ReduceOp::Sum, &h.stream)?;
        }
        Ok(())
    })?;
    for (i, (r, h)) in halves.iter().enumerate() {
        h.comm.synchronize(&h.stream, LIMIT)?;
        let first = r - r % 2;
        let want: Vec<f32> = (0..LEN).map(|j| value(first, j) + value(first + 1, j)).collect();
        ensure_eq!(recv[i].to_vec()?, want, "all-reduce in the pair of rank {r}");
    }
    drop((send, recv));
    let comms: Vec<Communicator> = halves.into_iter().map(|(_, h)| h.comm).collect();
    Communicator::finalize_all(comms)?;
    Ok(())
}
