//! Communicators beyond the collectives: ids and versions, splitting, registered NCCL memory,
//! simulated groups, non-blocking initialisation, and abort.

use super::common::{LEN, clique, download, each, input, reduced, serial, upload, zeros};
use cuda_tests::{TestResult, ensure, ensure_eq};
use cuhost::alloc::Allocator;
use cuhost::nccl::{
    Communicator, Config, Group, NcclAllocator, Progress, ReduceOp, UniqueId, Version, group, version,
};
use cuhost::{Context, Device, DeviceBuffer, Error, Stream, StreamFlags};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub fn unique_id_and_version() -> TestResult {
    let v = version()?;
    ensure!(v.major == 2 && v >= Version::from_code(21800), "NCCL {v} is older than these tests need (2.18)");
    println!("NCCL {v} (bindings from {})", Version::BINDINGS);
    let id = UniqueId::new()?;
    ensure_eq!(UniqueId::from_bytes(id.as_bytes())?, id);
    ensure_eq!(UniqueId::from_hex(&id.to_hex())?, id);
    ensure!(id != UniqueId::new()?, "two ids were equal");
    Ok(())
}

pub fn split_reorders_and_drops_ranks() -> TestResult {
    let _serial = serial();
    let ranks = clique()?;
    let n = ranks.len();
    let parents: Vec<&Communicator> = ranks.iter().map(|r| &r.comm).collect();

    // One colour, keys in reverse: the ranks swap places.
    let splits: Vec<(Option<u32>, i32)> = (0..n).map(|r| (Some(0), (n - 1 - r) as i32)).collect();
    let children = Communicator::split_all(&parents, &splits, &Config::new())?;
    let mut swapped = Vec::new();
    for (r, child) in children.into_iter().enumerate() {
        let child = child.ok_or("a rank with a colour got no communicator")?;
        ensure_eq!(child.count()?, n, "ranks of the split clique");
        ensure_eq!(child.rank()?, n - 1 - r, "rank of parent rank {r} in the split clique");
        ensure_eq!(child.device()?, ranks[r].comm.context().device(), "device of split rank {r}");
        swapped.push(child);
    }
    // An all-gather on the split clique orders the blocks by the new ranks.
    let half = LEN / n;
    let send = upload(&ranks, |r| input::<f32>(r, half))?;
    let mut recv = zeros::<f32>(&ranks, LEN)?;
    group(|| {
        for (i, r) in ranks.iter().enumerate() {
            swapped[i].all_gather(&send[i], &mut recv[i], &r.stream)?;
        }
        Ok(())
    })?;
    let want: Vec<f32> = (0..n).flat_map(|new_rank| input::<f32>(n - 1 - new_rank, half)).collect();
    for got in download(&ranks, &recv)? {
        ensure_eq!(got, want, "all-gather on the split clique");
    }
    drop(swapped);

    // Rank 0 alone in colour 7; rank 1 in none.
    let children = Communicator::split_all(&parents, &[(Some(7), 0), (None, 0)], &Config::new())?;
    ensure!(children[1].is_none(), "a rank without a colour got a communicator");
    let alone = children[0].as_ref().ok_or("rank 0 got no communicator")?;
    ensure_eq!((alone.count()?, alone.rank()?), (1, 0), "the one-rank clique");
    let mut out = DeviceBuffer::<i32>::zeroed(&ranks[0].stream, LEN)?;
    let src = DeviceBuffer::from_slice(&ranks[0].stream, &input::<i32>(0, LEN))?;
    alone.all_reduce(&src, &mut out, ReduceOp::Sum, &ranks[0].stream)?;
    ranks[0].stream.synchronize()?;
    ensure_eq!(out.to_vec()?, input::<i32>(0, LEN), "a one-rank all-reduce copies");
    // Splitting inside a group cannot hand the communicator back: refused.
    let g = Group::start()?;
    let inside = ranks[0].comm.split(Some(0), 0, &Config::new());
    g.end()?;
    ensure!(
        matches!(inside, Err(Error::InvalidArgument { .. })),
        "a split inside a group was not refused: {inside:?}"
    );
    Ok(())
}

pub fn registered_nccl_memory_reduces() -> TestResult {
    let _serial = serial();
    let ranks = clique()?;
    let n = ranks.len();
    let mut send = Vec::new();
    let mut recv = Vec::new();
    for (i, r) in ranks.iter().enumerate() {
        let nccl_memory: Arc<dyn Allocator> = Arc::new(NcclAllocator::new(r.comm.context()));
        let mut s = DeviceBuffer::<f32>::new_in(&r.stream, LEN, nccl_memory.clone())?;
        s.copy_from(&input::<f32>(i, LEN))?;
        ensure_eq!(s.allocator_name(), "ncclMemAlloc");
        send.push(s);
        let mut d = DeviceBuffer::<f32>::new_in(&r.stream, LEN, nccl_memory)?;
        d.copy_from(&[0.0; LEN])?;
        recv.push(d);
    }
    {
        let mut registered = Vec::new();
        for ((r, s), d) in ranks.iter().zip(&mut send).zip(&mut recv) {
            registered.push((r.comm.register(s)?, r.comm.register(d)?));
        }
        each(&ranks, |i, r| {
            let (s, d) = &mut registered[i];
            r.comm.all_reduce(s.view(), d.view_mut(), ReduceOp::Sum, &r.stream)
        })?;
        for r in &ranks {
            r.stream.synchronize()?;
        }
    } // Deregistered here, before the memory is freed.
    let want: Vec<f32> = (0..LEN).map(|i| reduced(ReduceOp::Sum, n, i, false) as f32).collect();
    for got in download(&ranks, &recv)? {
        ensure_eq!(got, want, "all-reduce of registered ncclMemAlloc memory");
    }
    for r in &ranks {
        ensure!(r.comm.context().take_deferred_errors().is_empty(), "deregistration failed");
    }
    Ok(())
}

pub fn simulated_group_estimates_and_runs_nothing() -> TestResult {
    let _serial = serial();
    let ranks = clique()?;
    let send = upload(&ranks, |r| input::<f32>(r, LEN))?;
    let mut recv = zeros::<f32>(&ranks, LEN)?;
    let g = Group::start()?;
    for (i, r) in ranks.iter().enumerate() {
        r.comm.all_reduce(&send[i], &mut recv[i], ReduceOp::Sum, &r.stream)?;
    }
    let micros = g.simulate_end()?;
    ensure!(micros.is_finite() && micros > 0.0, "estimated time {micros} µs");
    for got in download(&ranks, &recv)? {
        ensure_eq!(got, vec![0.0f32; LEN], "a simulated group wrote memory");
    }
    println!("a two-rank all-reduce of {LEN} floats: about {micros} µs");
    Ok(())
}

/// Polls `comm` until its background work is done, failing after `limit`.
fn wait_for(comm: &Communicator, what: &str, limit: Duration) -> TestResult {
    match comm.wait(limit)? {
        Progress::Done => Ok(()),
        Progress::InProgress => Err(format!("{what} still in progress after {limit:?}").into()),
    }
}

pub fn non_blocking_init_completes_by_polling() -> TestResult {
    let _serial = serial();
    let id = UniqueId::new()?;
    let contexts = [Context::primary(&Device::get(0)?)?, Context::primary(&Device::get(1)?)?];
    let config = Config::new().blocking(false);
    // Both ranks from this thread, in one group; nothing waits for the other rank here.
    let g = Group::start()?;
    let comms = contexts
        .iter()
        .enumerate()
        .map(|(rank, ctx)| Communicator::init_rank(ctx, &id, 2, rank, &config))
        .collect::<Result<Vec<_>, Error>>();
    g.end()?;
    let comms = comms?;
    let limit = Duration::from_secs(120);
    let start = Instant::now();
    for (rank, comm) in comms.iter().enumerate() {
        ensure!(!comm.is_blocking(), "rank {rank} is blocking");
        wait_for(comm, "initialisation", limit)?;
    }
    println!("non-blocking initialisation done after {:?}", start.elapsed());
    for (rank, comm) in comms.iter().enumerate() {
        ensure_eq!((comm.count()?, comm.rank()?), (2, rank), "rank {rank}");
        ensure!(comm.async_error()?.is_none(), "rank {rank} has an asynchronous error");
    }
    let streams = contexts
        .iter()
        .map(|c| Stream::new(c, StreamFlags::NON_BLOCKING))
        .collect::<Result<Vec<_>, Error>>()?;
    let send = contexts
        .iter()
        .zip(&streams)
        .enumerate()
        .map(|(r, (_, s))| DeviceBuffer::from_slice(s, &input::<f32>(r, LEN)))
        .collect::<Result<Vec<_>, Error>>()?;
    let mut recv =
        streams.iter().map(|s| DeviceBuffer::<f32>::zeroed(s, LEN)).collect::<Result<Vec<_>, Error>>()?;
    group(|| {
        for (i, comm) in comms.iter().enumerate() {
            comm.all_reduce(&send[i], &mut recv[i], ReduceOp::Sum, &streams[i])?;
        }
        Ok(())
    })?;
    for comm in &comms {
        wait_for(comm, "the all-reduce", limit)?;
    }
    let want: Vec<f32> = (0..LEN).map(|i| reduced(ReduceOp::Sum, 2, i, false) as f32).collect();
    for (s, d) in streams.iter().zip(&recv) {
        s.synchronize()?;
        ensure_eq!(d.to_vec()?, want, "all-reduce on non-blocking communicators");
    }
    // One thread finalizes both: their flushes start together.
    Communicator::finalize_all(comms)?;
    Ok(())
}

pub fn abort_ends_a_collective_that_cannot_complete() -> TestResult {
    let _serial = serial();
    let mut ranks = clique()?;
    // Connect the ranks first, so that the lone call below only queues its kernel.
    let send = upload(&ranks, |r| input::<f32>(r, LEN))?;
    let mut recv = zeros::<f32>(&ranks, LEN)?;
    each(&ranks, |i, r| r.comm.all_reduce(&send[i], &mut recv[i], ReduceOp::Sum, &r.stream))?;
    download(&ranks, &recv)?;

    // Rank 0 alone: its kernel waits for rank 1, which never comes.
    let lone = ranks.remove(0);
    lone.comm.all_reduce(&send[0], &mut recv[0], ReduceOp::Sum, &lone.stream)?;
    std::thread::sleep(Duration::from_millis(300));
    ensure!(!lone.stream.query()?, "an all-reduce without its peer finished");
    let seen = lone.comm.async_error()?;
    println!("asynchronous state of the waiting rank before the abort: {seen:?}");

    // Abort it from another thread, and give that a time limit rather than hang.
    let (done, aborted) = std::sync::mpsc::channel();
    let comm = lone.comm;
    std::thread::spawn(move || {
        let _ = done.send(comm.abort());
    });
    let limit = Duration::from_secs(60);
    aborted.recv_timeout(limit).map_err(|_| format!("ncclCommAbort did not return within {limit:?}"))??;
    let start = Instant::now();
    while !lone.stream.query()? {
        ensure!(start.elapsed() < limit, "the aborted all-reduce still runs after {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    println!("the stream moved on {:?} after the abort", start.elapsed());

    // The peer that never joined: its state is readable, and it aborts without waiting.
    let peer = ranks.remove(0);
    println!("asynchronous state of the peer: {:?}", peer.comm.async_error()?);
    peer.comm.abort()?;
    Ok(())
}
