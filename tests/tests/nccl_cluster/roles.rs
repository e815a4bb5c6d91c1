//! What each child rank does: this binary started with `ROLE_ENV` set runs one of these
//! instead of the tests, prints its results as lines on standard output, and exits with 0 when
//! everything it checked held.

use super::check::{LEN, LIMIT, Local, every_collective, input, split_into_pairs, value};
use cuda_tests::{Failed, TestResult, ensure, ensure_eq};
use cuhost::nccl::{Bootstrap, Config, ReduceOp, ShrinkMode, rank_after_shrink};
use cuhost::{Context, DeviceBuffer, Error, Stream, StreamFlags};
use std::io::BufRead;
use std::time::{Duration, Instant};

/// How long a rank's wait on a collective lasts before it counts as a fault.
pub const WATCH: Duration = Duration::from_secs(5);
/// The time limit of the bootstraps of the fault tests.
pub const INIT_LIMIT: Duration = Duration::from_secs(10);

/// The child's `main`: runs `role`, exits with 0 when it held.
pub fn child_main(role: &str) -> ! {
    let result = match role.split_whitespace().next() {
        Some("collectives") => collectives(role.contains("bandwidth")),
        Some("idle") => idle(),
        Some("expect-timeout") => expect_timeout(),
        Some("loop") => loop_until_fault(),
        _ => Err(format!("unknown role {role:?}").into()),
    };
    let code = match result {
        Ok(()) => 0,
        Err(e) => {
            println!("failed: {}", e.message().unwrap_or("(no message)"));
            1
        }
    };
    cuda_tests::release_default_pools();
    std::process::exit(code);
}

fn bootstrap(limit: Duration) -> Result<(Bootstrap, Context), Failed> {
    let boot = Bootstrap::from_env()?.timeout(limit);
    let ctx = Context::primary(&boot.device()?)?;
    Ok((boot, ctx))
}

/// Every collective, the ring and the split, then (with `bandwidth`) the bus bandwidth of a
/// 64 MiB all-reduce.
fn collectives(bandwidth: bool) -> TestResult {
    let (boot, ctx) = bootstrap(Duration::from_secs(60))?;
    let comm = boot.communicator(&ctx, &Config::new())?;
    ensure_eq!((comm.rank()?, comm.count()?), (boot.rank(), boot.ranks()));
    let local = [Local::new(comm)?];
    every_collective(&local, boot.ranks())?;
    println!("collectives ok");
    split_into_pairs(&local)?;
    println!("split ok");
    if bandwidth {
        let gbps = all_reduce_bus_bandwidth(&local[0], boot.ranks(), 64 << 20)?;
        println!("busbw {gbps:.2}");
    }
    let [local] = local;
    local.comm.finalize()?;
    Ok(())
}

/// The bus bandwidth (GB/s) of an all-reduce of `bytes`, the median of five, checked.
fn all_reduce_bus_bandwidth(l: &Local, n: usize, bytes: usize) -> Result<f64, Failed> {
    let elements = bytes / 4;
    let send = DeviceBuffer::from_slice(&l.stream, &vec![(l.rank + 1) as f32; elements])?;
    let mut recv = DeviceBuffer::<f32>::zeroed(&l.stream, elements)?;
    let mut times = Vec::new();
    for _ in 0..6 {
        let start = Instant::now();
        l.comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &l.stream)?;
        l.comm.synchronize(&l.stream, LIMIT)?;
        times.push(start.elapsed().as_secs_f64());
    }
    let want = (n * (n + 1) / 2) as f32;
    let got = recv.to_vec()?;
    ensure!(got.iter().all(|&v| v == want), "the 64 MiB all-reduce gave {:?}...", &got[..4]);
    times.remove(0); // the first connects
    times.sort_by(f64::total_cmp);
    let t = times[times.len() / 2];
    Ok(bytes as f64 * 2.0 * (n as f64 - 1.0) / n as f64 / t / 1e9)
}

/// Takes part in the id exchange, then never joins NCCL: waits until its stdin closes.
fn idle() -> TestResult {
    let boot = Bootstrap::from_env()?.timeout(INIT_LIMIT);
    boot.unique_id()?;
    println!("has the id");
    let mut line = String::new();
    while std::io::stdin().lock().read_line(&mut line).map_err(|e| e.to_string())? > 0 {
        line.clear();
    }
    Ok(())
}

/// Forms the communicator, which must end in a typed time-out within the limit (and a little).
fn expect_timeout() -> TestResult {
    let (boot, ctx) = bootstrap(INIT_LIMIT)?;
    let start = Instant::now();
    match boot.communicator(&ctx, &Config::new()) {
        Err(Error::Timeout { operation, waited, message }) => {
            let took = start.elapsed();
            ensure!(
                took < 2 * INIT_LIMIT + Duration::from_secs(5),
                "the time-out came after {took:?}, limit {waited:?}"
            );
            println!("timeout {operation} {:.1}", took.as_secs_f64());
            eprintln!("rank {}: {message}", boot.rank());
            cuda_tests::no_deferred(&ctx)
        }
        Err(e) => Err(format!("expected a time-out, got: {e}").into()),
        Ok(_) => Err("the communicator formed without every rank".into()),
    }
}

/// All-reduces in a loop until a wait fails (a rank was killed), then recovers with the
/// remaining ranks as the test says on stdin: `recover DEAD PORT shrink|rebuild`.
fn loop_until_fault() -> TestResult {
    let (boot, ctx) = bootstrap(Duration::from_secs(30))?;
    let comm = boot.communicator(&ctx, &Config::new())?;
    let (rank, n) = (boot.rank(), boot.ranks());
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let elements = 1 << 16;
    let send = DeviceBuffer::from_slice(&stream, &vec![(rank + 1) as f32; elements])?;
    let mut recv = DeviceBuffer::<f32>::zeroed(&stream, elements)?;
    let want = (n * (n + 1) / 2) as f32;
    let start = Instant::now();
    let mut iteration = 0usize;
    let fault = loop {
        ensure!(start.elapsed() < Duration::from_secs(60), "no fault after 60 s of all-reduces");
        let step = Instant::now();
        let result = comm
            .all_reduce(&send, &mut recv, ReduceOp::Sum, &stream)
            .and_then(|()| comm.synchronize(&stream, WATCH));
        if let Err(e) = result {
            break (e, step.elapsed());
        }
        if iteration % 16 == 0 {
            let got = recv.to_vec()?;
            ensure!(got.iter().all(|&v| v == want), "iteration {iteration} summed to {:?}...", &got[..4]);
        }
        iteration += 1;
        if iteration == 20 {
            println!("looping");
        }
    };
    let (error, took) = fault;
    ensure!(comm.is_faulted(), "the failed wait did not mark the communicator faulted");
    println!("fault {:.2} {}", took.as_secs_f64(), kind(&error));
    eprintln!("rank {rank}: iteration {iteration}: {error}");

    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).map_err(|e| e.to_string())?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let [_, dead, port, how] = words.as_slice() else {
        return Err(format!("expected `recover DEAD PORT HOW`, got {line:?}").into());
    };
    let dead: usize = dead.parse().map_err(|_| format!("bad rank {dead:?}"))?;

    // 1. Shrink to the remaining ranks, where asked and NCCL has it.
    let shrunk = if *how == "shrink" {
        comm.shrink(&[dead], &Config::new(), ShrinkMode::Abort, Duration::from_secs(15))
    } else {
        Err(Error::invalid("test", "asked to rebuild"))
    };
    // 2. Abort the failed communicator: its kernels end and the stream moves on.
    comm.abort()?;
    let moved = Instant::now();
    while !stream.query()? {
        ensure!(moved.elapsed() < Duration::from_secs(10), "the aborted work still runs after 10 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    // 3. Give back the memory and the stream the failed work used.
    drop((send, recv, stream));
    cuda_tests::no_deferred(&ctx)?;
    // 4. A communicator of the remaining ranks: the shrunk one, or a new one.
    let new_rank = rank_after_shrink(rank, &[dead]).ok_or("this rank was excluded")?;
    let (survivors, via) = match shrunk {
        Ok(c) => (c, "shrink"),
        Err(e) => {
            eprintln!("rank {rank}: no shrink ({e}); making a new communicator");
            let boot = Bootstrap::new(new_rank, n - 1, boot.local_rank(), &format!("127.0.0.1:{port}"))?
                .timeout(Duration::from_secs(25));
            (boot.communicator(&ctx, &Config::new())?, "rebuild")
        }
    };
    ensure_eq!((survivors.rank()?, survivors.count()?), (new_rank, n - 1), "rank {rank} after recovery");
    // 5. A collective among the remaining ranks, checked.
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let send = DeviceBuffer::from_slice(&stream, &input(rank, LEN))?;
    let mut recv = DeviceBuffer::<f32>::zeroed(&stream, LEN)?;
    survivors.all_reduce(&send, &mut recv, ReduceOp::Sum, &stream)?;
    survivors.synchronize(&stream, LIMIT)?;
    let remaining: Vec<usize> = (0..n).filter(|&r| r != dead).collect();
    let want: Vec<f32> = (0..LEN).map(|i| remaining.iter().map(|&r| value(r, i)).sum()).collect();
    ensure_eq!(recv.to_vec()?, want, "the all-reduce of the remaining ranks on rank {rank}");
    drop((send, recv, stream));
    survivors.finalize()?;
    println!("recovered {via}");
    Ok(())
}

/// What kind of error ended the wait, for the test's report.
fn kind(e: &Error) -> &'static str {
    match e {
        Error::Timeout { .. } => "timeout",
        Error::Nccl { .. } => "nccl-error",
        _ => "other",
    }
}
