//! Two processes with one rank each: this binary re-runs itself as rank 1 (with `CHILD_ENV`
//! set) and reads the unique id from its standard input.

use super::common::{LEN, input, reduced, serial};
use cuda_tests::{TestResult, ensure, ensure_eq};
use cuhost::nccl::{Communicator, Config, Progress, ReduceOp, UniqueId};
use cuhost::{Context, Device, DeviceBuffer, Stream, StreamFlags};
use std::io::{BufRead, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Set in the environment of the child process, which then runs rank 1.
pub const CHILD_ENV: &str = "CUDA_CORE_NCCL_RANK1_CHILD";

/// How long either side waits for the other before it gives up.
const LIMIT: Duration = Duration::from_secs(120);

fn expected() -> Vec<f32> {
    (0..LEN).map(|i| reduced(ReduceOp::Sum, 2, i, false) as f32).collect()
}

/// The child's `main`: rank 1 on device 1. Exits with 0 when its all-reduce matched.
pub fn child_main() -> ! {
    let code = match child() {
        Ok(()) => {
            println!("rank 1: all-reduce matched");
            0
        }
        Err(e) => {
            eprintln!("rank 1 failed: {e}");
            1
        }
    };
    cuda_tests::release_default_pools();
    std::process::exit(code);
}

fn child() -> Result<(), String> {
    let text = |e: cuhost::Error| e.to_string();
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).map_err(|e| format!("reading the id: {e}"))?;
    let id = UniqueId::from_hex(&line).map_err(text)?;
    let ctx = Context::primary(&Device::get(1).map_err(text)?).map_err(text)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING).map_err(text)?;
    let comm = Communicator::init_rank(&ctx, &id, 2, 1, &Config::new()).map_err(text)?;
    let send = DeviceBuffer::from_slice(&stream, &input::<f32>(1, LEN)).map_err(text)?;
    let mut recv = DeviceBuffer::<f32>::zeroed(&stream, LEN).map_err(text)?;
    comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &stream).map_err(text)?;
    stream.synchronize().map_err(text)?;
    let got = recv.to_vec().map_err(text)?;
    if got != expected() {
        return Err(format!("all-reduce gave {got:?}"));
    }
    comm.finalize().map_err(text)
}

/// Kills the child if the test ends before it did.
struct ChildGuard(Option<Child>);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Polls rank 0's non-blocking communicator until `what` is done, failing if the child died
/// or the time ran out.
fn progress(comm: &Communicator, child: &mut ChildGuard, what: &str) -> TestResult {
    let start = Instant::now();
    loop {
        if comm.wait(Duration::from_millis(100))? == Progress::Done {
            return Ok(());
        }
        if let Some(c) = child.0.as_mut() {
            if let Some(status) = c.try_wait()? {
                return Err(format!("the child exited with {status} during {what}").into());
            }
        }
        ensure!(start.elapsed() < LIMIT, "{what} still in progress after {LIMIT:?}");
    }
}

pub fn two_processes_one_rank_each() -> TestResult {
    let _serial = serial();
    let id = UniqueId::new()?;
    let mut child = ChildGuard(Some(
        Command::new(std::env::current_exe()?)
            .env(CHILD_ENV, "1")
            .env("NCCL_NVLS_ENABLE", "0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?,
    ));
    // The id goes through the child's standard input; closing it ends the line.
    let mut pipe = child.0.as_mut().and_then(|c| c.stdin.take()).ok_or("the child has no standard input")?;
    writeln!(pipe, "{}", id.to_hex())?;
    drop(pipe);

    // Rank 0 is non-blocking, so that a child that never joins fails the test instead of
    // hanging it.
    let ctx = Context::primary(&Device::get(0)?)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let comm = Communicator::init_rank(&ctx, &id, 2, 0, &Config::new().blocking(false))?;
    progress(&comm, &mut child, "initialisation")?;
    ensure_eq!((comm.count()?, comm.rank()?), (2, 0));
    let send = DeviceBuffer::from_slice(&stream, &input::<f32>(0, LEN))?;
    let mut recv = DeviceBuffer::<f32>::zeroed(&stream, LEN)?;
    comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &stream)?;
    progress(&comm, &mut child, "the all-reduce")?;
    let start = Instant::now();
    while !stream.query()? {
        ensure!(start.elapsed() < LIMIT, "the all-reduce still runs after {LIMIT:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
    ensure_eq!(recv.to_vec()?, expected(), "rank 0's all-reduce");
    comm.finalize()?;

    let start = Instant::now();
    while child.0.as_mut().ok_or("the child is gone")?.try_wait()?.is_none() {
        ensure!(start.elapsed() < LIMIT, "rank 1 has not exited {LIMIT:?} after rank 0 finished");
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.0.take().ok_or("the child is gone")?.wait_with_output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.success(),
        "rank 1 failed with {}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    ensure!(stdout.contains("all-reduce matched"), "rank 1 reported nothing:\n{stdout}\n{stderr}");
    Ok(())
}
