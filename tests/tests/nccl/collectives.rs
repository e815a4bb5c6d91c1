//! Collectives and point-to-point calls on the two-rank clique, checked against the host.

use super::common::{Elem, LEN, Rank, clique, download, each, input, reduced, serial, upload, value, zeros};
use cuda_tests::{TestResult, ensure_eq};
use cuhost::nccl::{DataType, Float8E4M3, Float8E5M2, PreMulSum, ReduceOp, bf16, version};
use cuhost::{DeviceBuffer, DeviceView, Error};

const OPS: [ReduceOp; 5] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg];

fn expected_reduction<T: Elem>(op: ReduceOp, n: usize, len: usize) -> Vec<T> {
    (0..len).map(|i| T::of(reduced(op, n, i, T::INTEGER))).collect()
}

fn all_reduce_every_op<T: Elem>(ranks: &[Rank]) -> TestResult {
    let n = ranks.len();
    for op in OPS {
        let send = upload(ranks, |r| input::<T>(r, LEN))?;
        let mut recv = zeros::<T>(ranks, LEN)?;
        each(ranks, |i, r| r.comm.all_reduce(&send[i], &mut recv[i], op, &r.stream))?;
        let want = expected_reduction::<T>(op, n, LEN);
        for (rank, got) in download(ranks, &recv)?.into_iter().enumerate() {
            ensure_eq!(got, want, "{op:?} over {}, rank {rank}", std::any::type_name::<T>());
        }
    }
    Ok(())
}

pub fn all_reduce_matches_the_host_for_every_op() -> TestResult {
    let _serial = serial();
    let ranks = clique()?;
    all_reduce_every_op::<f32>(&ranks)?;
    all_reduce_every_op::<i32>(&ranks)?;
    all_reduce_every_op::<bf16>(&ranks)
}

/// Broadcast, reduce, all-gather, reduce-scatter and all-to-all for one type.
fn every_collective<T: Elem>(ranks: &[Rank]) -> TestResult {
    let n = ranks.len();
    let name = std::any::type_name::<T>();

    // Broadcast from rank 1.
    let send = upload(ranks, |r| input::<T>(r, LEN))?;
    let mut recv = zeros::<T>(ranks, LEN)?;
    each(ranks, |i, r| r.comm.broadcast(&send[i], &mut recv[i], 1, &r.stream))?;
    for (rank, got) in download(ranks, &recv)?.into_iter().enumerate() {
        ensure_eq!(got, input::<T>(1, LEN), "broadcast of {name} from rank 1, rank {rank}");
    }

    // Reduce (sum) to rank 0, the only rank whose receive memory NCCL writes.
    let mut recv = zeros::<T>(ranks, LEN)?;
    each(ranks, |i, r| r.comm.reduce(&send[i], &mut recv[i], ReduceOp::Sum, 0, &r.stream))?;
    let got = download(ranks, &recv)?;
    ensure_eq!(got[0], expected_reduction::<T>(ReduceOp::Sum, n, LEN), "reduce of {name} to rank 0");

    // All-gather: blocks in rank order.
    let half = LEN / n;
    let send = upload(ranks, |r| input::<T>(r, half))?;
    let mut recv = zeros::<T>(ranks, LEN)?;
    each(ranks, |i, r| r.comm.all_gather(&send[i], &mut recv[i], &r.stream))?;
    let want: Vec<T> = (0..n).flat_map(|r| input::<T>(r, half)).collect();
    for (rank, got) in download(ranks, &recv)?.into_iter().enumerate() {
        ensure_eq!(got, want, "all-gather of {name}, rank {rank}");
    }

    // Reduce-scatter (sum): rank r gets the sum of block r.
    let send = upload(ranks, |r| input::<T>(r, LEN))?;
    let mut recv = zeros::<T>(ranks, half)?;
    each(ranks, |i, r| r.comm.reduce_scatter(&send[i], &mut recv[i], ReduceOp::Sum, &r.stream))?;
    for (rank, got) in download(ranks, &recv)?.into_iter().enumerate() {
        let want: Vec<T> = (rank * half..(rank + 1) * half)
            .map(|i| T::of(reduced(ReduceOp::Sum, n, i, T::INTEGER)))
            .collect();
        ensure_eq!(got, want, "reduce-scatter of {name}, rank {rank}");
    }

    // All-to-all: block j of rank i's send lands in block i of rank j's receive.
    let send = upload(ranks, |r| input::<T>(r, LEN))?;
    let mut recv = zeros::<T>(ranks, LEN)?;
    each(ranks, |i, r| r.comm.all_to_all(&send[i], &mut recv[i], &r.stream))?;
    for (rank, got) in download(ranks, &recv)?.into_iter().enumerate() {
        let want: Vec<T> =
            (0..n).flat_map(|from| input::<T>(from, LEN)[rank * half..(rank + 1) * half].to_vec()).collect();
        ensure_eq!(got, want, "all-to-all of {name}, rank {rank}");
    }
    Ok(())
}

pub fn every_collective_matches_the_host() -> TestResult {
    let _serial = serial();
    let ranks = clique()?;
    every_collective::<f32>(&ranks)?;
    every_collective::<i32>(&ranks)?;
    every_collective::<bf16>(&ranks)
}

pub fn in_place_forms_match_the_host() -> TestResult {
    let _serial = serial();
    let ranks = clique()?;
    let n = ranks.len();
    let half = LEN / n;

    let mut bufs = upload(&ranks, |r| input::<bf16>(r, LEN))?;
    each(&ranks, |i, r| r.comm.all_reduce_in_place(&mut bufs[i], ReduceOp::Max, &r.stream))?;
    for got in download(&ranks, &bufs)? {
        ensure_eq!(got, expected_reduction::<bf16>(ReduceOp::Max, n, LEN), "in-place all-reduce");
    }

    // Each rank's own block holds its input; the others are gathered around it.
    let mut bufs = upload(&ranks, |r| {
        let mut v = vec![-1.0f32; LEN];
        v[r * half..(r + 1) * half].copy_from_slice(&input::<f32>(r, half));
        v
    })?;
    each(&ranks, |i, r| r.comm.all_gather_in_place(&mut bufs[i], &r.stream))?;
    let want: Vec<f32> = (0..n).flat_map(|r| input::<f32>(r, half)).collect();
    for got in download(&ranks, &bufs)? {
        ensure_eq!(got, want, "in-place all-gather");
    }

    let mut bufs = upload(&ranks, |r| input::<i32>(r, LEN))?;
    each(&ranks, |i, r| r.comm.reduce_scatter_in_place(&mut bufs[i], ReduceOp::Sum, &r.stream))?;
    for (rank, got) in download(&ranks, &bufs)?.into_iter().enumerate() {
        let want: Vec<i32> =
            (rank * half..(rank + 1) * half).map(|i| reduced(ReduceOp::Sum, n, i, true) as i32).collect();
        ensure_eq!(
            got[rank * half..(rank + 1) * half].to_vec(),
            want,
            "in-place reduce-scatter, rank {rank}"
        );
    }

    let mut bufs = upload(&ranks, |r| if r == 0 { input::<i32>(0, LEN) } else { vec![0; LEN] })?;
    each(&ranks, |i, r| r.comm.broadcast_in_place(&mut bufs[i], 0, &r.stream))?;
    for got in download(&ranks, &bufs)? {
        ensure_eq!(got, input::<i32>(0, LEN), "in-place broadcast");
    }

    let mut bufs = upload(&ranks, |r| input::<f32>(r, LEN))?;
    each(&ranks, |i, r| r.comm.reduce_in_place(&mut bufs[i], ReduceOp::Min, 1, &r.stream))?;
    let got = download(&ranks, &bufs)?;
    ensure_eq!(got[1], expected_reduction::<f32>(ReduceOp::Min, n, LEN), "in-place reduce to rank 1");
    Ok(())
}

fn refused(what: &str, r: cuhost::Result<()>) -> TestResult {
    match r {
        Err(Error::InvalidArgument { .. }) => Ok(()),
        other => Err(format!("{what}: expected an InvalidArgument, got {other:?}").into()),
    }
}

pub fn bad_arguments_are_refused_before_the_call() -> TestResult {
    let _serial = serial();
    let ranks = clique()?;
    let (r0, r1) = (&ranks[0], &ranks[1]);
    let send = DeviceBuffer::<f32>::zeroed(&r0.stream, LEN)?;
    let mut short = DeviceBuffer::<f32>::zeroed(&r0.stream, LEN - 1)?;
    let mut other_device = DeviceBuffer::<f32>::zeroed(&r1.stream, LEN)?;
    let mut odd = DeviceBuffer::<f32>::zeroed(&r0.stream, LEN + 1)?;
    let odd_send = DeviceBuffer::<f32>::zeroed(&r0.stream, LEN + 1)?;
    let mut recv = DeviceBuffer::<f32>::zeroed(&r0.stream, LEN)?;
    let c = &r0.comm;
    refused("lengths differ", c.all_reduce(&send, &mut short, ReduceOp::Sum, &r0.stream))?;
    refused("all-gather output not ranks × input", c.all_gather(&send, &mut short, &r0.stream))?;
    refused(
        "reduce-scatter input not ranks × output",
        c.reduce_scatter(&send, &mut short, ReduceOp::Sum, &r0.stream),
    )?;
    refused("in-place all-gather of an odd length", c.all_gather_in_place(&mut odd, &r0.stream))?;
    refused("all-to-all of an odd length", c.all_to_all(&odd_send, &mut odd, &r0.stream))?;
    refused("root out of range", c.broadcast(&send, &mut recv, 2, &r0.stream))?;
    refused("peer out of range", c.send(&send, 5, &r0.stream))?;
    refused("memory of another device", c.all_reduce(&send, &mut other_device, ReduceOp::Sum, &r0.stream))?;
    refused("stream of another device", c.all_reduce_in_place(&mut odd, ReduceOp::Sum, &r1.stream))?;
    // Overlapping send and receive memory that is not the in-place form.
    let mut whole = DeviceBuffer::<f32>::zeroed(&r0.stream, 2 * LEN)?;
    let start = whole.as_raw();
    // SAFETY: the view reads the first LEN elements of `whole`; the call is refused before
    // anything reads or writes them.
    let overlapping = unsafe { DeviceView::<f32>::from_raw(r0.comm.context(), start, LEN) };
    refused("overlap", c.all_reduce(overlapping, whole.slice_mut(1..=LEN)?, ReduceOp::Sum, &r0.stream))?;
    // A pre-multiplied sum belongs to the communicator it was made for.
    let op = PreMulSum::new(&r1.comm, 2.0f32)?;
    refused("another communicator's operation", c.all_reduce_in_place(&mut odd, &op, &r0.stream))?;
    Ok(())
}

pub fn pre_mul_sum_scales_before_summing() -> TestResult {
    let _serial = serial();
    let ranks = clique()?;
    let n = ranks.len();
    // Host scalars: rank r multiplies by r + 2.
    let ops = ranks
        .iter()
        .enumerate()
        .map(|(i, r)| PreMulSum::new(&r.comm, (i + 2) as f32))
        .collect::<Result<Vec<_>, _>>()?;
    let send = upload(&ranks, |r| input::<f32>(r, LEN))?;
    let mut recv = zeros::<f32>(&ranks, LEN)?;
    each(&ranks, |i, r| r.comm.all_reduce(&send[i], &mut recv[i], &ops[i], &r.stream))?;
    let want: Vec<f32> =
        (0..LEN).map(|i| (0..n).map(|r| (r + 2) as f64 * value(r, i)).sum::<f64>() as f32).collect();
    for got in download(&ranks, &recv)? {
        ensure_eq!(got, want, "pre-multiplied sum with host scalars");
    }
    drop(ops);

    // Device scalars, read when the collective runs: rank r multiplies by 0.5 * (r + 1).
    let scalars = upload(&ranks, |r| vec![bf16::from_f64(0.5 * (r + 1) as f64)])?;
    let ops = ranks
        .iter()
        .zip(&scalars)
        .map(|(r, s)| PreMulSum::with_device_scalar(&r.comm, s.view()))
        .collect::<Result<Vec<_>, _>>()?;
    let send = upload(&ranks, |r| input::<bf16>(r, LEN))?;
    let mut recv = zeros::<bf16>(&ranks, LEN)?;
    each(&ranks, |i, r| r.comm.all_reduce(&send[i], &mut recv[i], &ops[i], &r.stream))?;
    let want: Vec<bf16> =
        (0..LEN).map(|i| bf16::from_f64((0..n).map(|r| 0.5 * (r + 1) as f64 * value(r, i)).sum())).collect();
    for got in download(&ranks, &recv)? {
        ensure_eq!(got, want, "pre-multiplied sum with device scalars");
    }
    Ok(())
}

fn fp8_sum<T: DataType + PartialEq + std::fmt::Debug>(ranks: &[Rank], one: T, two: T) -> TestResult {
    let send = upload8(ranks, one)?;
    let mut recv: Vec<DeviceBuffer<T>> =
        ranks.iter().map(|r| DeviceBuffer::zeroed(&r.stream, LEN)).collect::<Result<_, _>>()?;
    each(ranks, |i, r| r.comm.all_reduce(&send[i], &mut recv[i], ReduceOp::Sum, &r.stream))?;
    for r in ranks {
        r.stream.synchronize()?;
    }
    for b in &recv {
        ensure_eq!(b.to_vec()?, vec![two; LEN], "{} sum", std::any::type_name::<T>());
    }
    Ok(())
}

fn upload8<T: DataType>(ranks: &[Rank], value: T) -> Result<Vec<DeviceBuffer<T>>, Error> {
    ranks.iter().map(|r| DeviceBuffer::from_slice(&r.stream, &[value; LEN])).collect()
}

/// 1 + 1 = 2 in both 8-bit formats, where NCCL (2.24+) and the devices (9.0+) have them.
pub fn fp8_sums() -> TestResult {
    let _serial = serial();
    let ranks = clique()?;
    let v = version()?;
    for r in &ranks {
        let (major, _) = r.comm.context().device().compute_capability()?;
        if major < 9 || (v.major, v.minor) < (2, 24) {
            println!("NCCL {v} on compute capability {major}.x reduces no 8-bit floats; nothing to check");
            return Ok(());
        }
    }
    // E4M3: 1.0 is 0x38, 2.0 is 0x40. E5M2: 1.0 is 0x3c, 2.0 is 0x40.
    fp8_sum(&ranks, Float8E4M3(0x38), Float8E4M3(0x40))?;
    fp8_sum(&ranks, Float8E5M2(0x3c), Float8E5M2(0x40))
}

pub fn send_recv_ring_in_a_group() -> TestResult {
    let _serial = serial();
    let ranks = clique()?;
    let n = ranks.len();
    let send = upload(&ranks, |r| input::<i32>(r, LEN))?;
    let mut recv = zeros::<i32>(&ranks, LEN)?;
    // Rank r sends to r + 1 and receives from r - 1, all in one group.
    each(&ranks, |i, r| {
        r.comm.send(&send[i], (i + 1) % n, &r.stream)?;
        r.comm.recv(&mut recv[i], (i + n - 1) % n, &r.stream)
    })?;
    for (rank, got) in download(&ranks, &recv)?.into_iter().enumerate() {
        ensure_eq!(got, input::<i32>((rank + n - 1) % n, LEN), "ring, rank {rank}");
    }
    Ok(())
}

pub fn all_to_all_gather_and_scatter_move_blocks() -> TestResult {
    let _serial = serial();
    let ranks = clique()?;
    let n = ranks.len();
    let block = LEN / n;

    // All-to-all: block j of rank i's send lands in block i of rank j's recv.
    let send = upload(&ranks, |r| input::<f32>(r, LEN))?;
    let mut recv = zeros::<f32>(&ranks, LEN)?;
    each(&ranks, |i, r| r.comm.all_to_all(&send[i], &mut recv[i], &r.stream))?;
    for (rank, got) in download(&ranks, &recv)?.into_iter().enumerate() {
        let want: Vec<f32> = (0..n)
            .flat_map(|from| input::<f32>(from, LEN)[rank * block..(rank + 1) * block].to_vec())
            .collect();
        ensure_eq!(got, want, "all-to-all, rank {rank}");
    }

    // Gather to rank 1: block i of its recv is rank i's send; rank 0 passes no recv.
    let send = upload(&ranks, |r| input::<i32>(r, block))?;
    let mut gathered = zeros::<i32>(&ranks, LEN)?;
    let (_, root_side) = gathered.split_at_mut(1);
    let mut outs = [None, Some(&mut root_side[0])];
    each(&ranks, |i, r| r.comm.gather(&send[i], outs[i].as_deref_mut(), 1, &r.stream))?;
    let got = download(&ranks, &gathered)?;
    let want: Vec<i32> = (0..n).flat_map(|from| input::<i32>(from, block)).collect();
    ensure_eq!(got[1], want, "gather to rank 1");
    ensure_eq!(got[0], vec![0; LEN], "gather wrote a rank that is not the root");

    // Scatter from rank 0: rank i's recv is block i of the root's send.
    let whole = upload(&ranks, |r| input::<i32>(r, LEN))?;
    let mut parts = zeros::<i32>(&ranks, block)?;
    each(&ranks, |i, r| {
        let root_send = if i == 0 { Some(&whole[0]) } else { None };
        r.comm.scatter(root_send, &mut parts[i], 0, &r.stream)
    })?;
    for (rank, got) in download(&ranks, &parts)?.into_iter().enumerate() {
        ensure_eq!(
            got,
            input::<i32>(0, LEN)[rank * block..(rank + 1) * block].to_vec(),
            "scatter, rank {rank}"
        );
    }

    // The root's buffer must be there and hold every block; nothing is queued otherwise.
    let r0 = &ranks[0];
    let mut short = DeviceBuffer::<i32>::zeroed(&r0.stream, LEN - 1)?;
    refused("gather into a short root buffer", r0.comm.gather(&send[0], Some(&mut short), 0, &r0.stream))?;
    refused(
        "gather with no root buffer",
        r0.comm.gather(&send[0], None::<&mut DeviceBuffer<i32>>, 0, &r0.stream),
    )?;
    refused(
        "scatter from no root buffer",
        r0.comm.scatter(None::<&DeviceBuffer<i32>>, &mut parts[0], 0, &r0.stream),
    )?;
    refused("gather to rank 2 of 2", r0.comm.gather(&send[0], Some(&mut short), 2, &r0.stream))?;
    let mut odd = DeviceBuffer::<f32>::zeroed(&r0.stream, LEN - 1)?;
    let odd_send = DeviceBuffer::<f32>::zeroed(&r0.stream, LEN - 1)?;
    refused(
        "all-to-all of a length not a multiple of the ranks",
        r0.comm.all_to_all(&odd_send, &mut odd, &r0.stream),
    )
}
