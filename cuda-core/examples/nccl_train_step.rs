//! The skeleton of a data-parallel training step: every rank makes a gradient-like buffer and
//! a second tensor (its sample count and loss), averages the gradients and sums the second
//! tensor across the ranks in one NCCL group, and checks every element.
//!
//! The ranks are formed from the launcher's variables by `Bootstrap::from_env` (torchrun's
//! `RANK`/`WORLD_SIZE`/`LOCAL_RANK`/`MASTER_ADDR`/`MASTER_PORT`, or Slurm's, or Open MPI's), so
//! any of these starts it:
//!
//! ```text
//! torchrun --nproc-per-node 4 --no-python target/release/examples/nccl_train_step
//! srun --ntasks 4 --gpus-per-task 1 target/release/examples/nccl_train_step
//! ```
//!
//! On one host it can start its own ranks, with the variables set as torchrun would:
//!
//! ```text
//! cargo run --release --example nccl_train_step -- --spawn 4
//! ```
//!
//! Every wait has a deadline (`--timeout SECONDS`, 120 by default): a rank that never comes or
//! dies makes the others fail with a time-out instead of hanging. NVLink SHARP stays off
//! (`NCCL_NVLS_ENABLE=0`) in the ranks it starts; set it in the launcher's environment otherwise.

use cuhost::nccl::{Bootstrap, Config, ReduceOp, group};
use cuhost::{Context, DeviceBuffer, Stream, StreamFlags};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

type Failure = Box<dyn std::error::Error>;

/// Elements of the gradient buffer.
const ELEMENTS: usize = 1 << 22;
/// Training steps.
const STEPS: usize = 5;

fn main() {
    let result = match parse(std::env::args().skip(1)) {
        Ok(Mode::Spawn { ranks, timeout }) => spawn(ranks, timeout),
        Ok(Mode::Rank { timeout }) => {
            // As in the other examples: the default pools' cache goes back before exiting.
            rank(timeout).and_then(|()| Ok(cuhost::pool::release_default_pools()?))
        }
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        eprintln!("nccl_train_step: {e}");
        std::process::exit(1);
    }
}

enum Mode {
    /// Start this many local ranks of this program, and wait for them.
    Spawn { ranks: usize, timeout: Duration },
    /// Be one rank, as the launcher's variables say.
    Rank { timeout: Duration },
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Mode, Failure> {
    let (mut spawn, mut timeout) = (None, Duration::from_secs(120));
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--spawn" => spawn = Some(value("--spawn")?.parse::<usize>()?),
            "--timeout" => timeout = Duration::from_secs(value("--timeout")?.parse()?),
            other => {
                return Err(format!(
                    "unknown argument {other:?}; usage: nccl_train_step [--spawn N] [--timeout SECONDS]"
                )
                .into());
            }
        }
    }
    Ok(match spawn {
        Some(0) => return Err("--spawn needs at least one rank".into()),
        Some(ranks) => Mode::Spawn { ranks, timeout },
        None => Mode::Rank { timeout },
    })
}

/// The gradient rank `rank` computes at step `step`: small whole numbers, exact in f32.
fn gradient(rank: usize, step: usize, i: usize) -> f32 {
    ((rank + 1) * (step + 1) * (1 + i % 7)) as f32
}

/// One rank: form the communicator, run the steps, check each.
fn rank(timeout: Duration) -> Result<(), Failure> {
    let boot = Bootstrap::from_env()?.timeout(timeout);
    let (me, ranks) = (boot.rank(), boot.ranks());
    let device = boot.device()?;
    let ctx = Context::primary(&device)?;
    let comm = boot.communicator(&ctx, &Config::new().comm_name("train")?)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    println!(
        "rank {me}/{ranks}: {} (GPU {}), launched by {:?}",
        device.name()?,
        device.ordinal(),
        boot.launcher()
    );

    let mut grads = DeviceBuffer::<f32>::zeroed(&stream, ELEMENTS)?;
    // The second tensor: [samples seen, summed loss], summed across the ranks.
    let mut stats = DeviceBuffer::<f64>::zeroed(&stream, 2)?;
    for step in 0..STEPS {
        let start = Instant::now();
        let local: Vec<f32> = (0..ELEMENTS).map(|i| gradient(me, step, i)).collect();
        grads.copy_from(&local)?;
        stats.copy_from(&[(32 * (me + 1)) as f64, 0.5 * (me + 1) as f64])?;
        // Both reductions in one group: NCCL issues them together.
        group(|| {
            comm.all_reduce_in_place(&mut grads, ReduceOp::Avg, &stream)?;
            comm.all_reduce_in_place(&mut stats, ReduceOp::Sum, &stream)
        })?;
        comm.synchronize(&stream, timeout)?;
        let elapsed = start.elapsed();
        check(&grads.to_vec()?, &stats.to_vec()?, ranks, step)?;
        println!("rank {me}: step {step}: {ELEMENTS} gradients averaged and checked in {elapsed:?}");
    }
    drop((grads, stats, stream));
    comm.finalize()?;
    println!("rank {me}: done");
    Ok(())
}

/// Every gradient is the mean over the ranks (exact where 1/ranks is, as for 2 or 4 ranks;
/// within a few rounding steps otherwise), and the statistics the sums.
fn check(grads: &[f32], stats: &[f64], ranks: usize, step: usize) -> Result<(), Failure> {
    let mean_factor = (ranks + 1) as f32 / 2.0; // the mean of 1..=ranks
    for (i, &g) in grads.iter().enumerate() {
        let want = mean_factor * ((step + 1) * (1 + i % 7)) as f32;
        if (g - want).abs() > 4.0 * f32::EPSILON * want {
            return Err(format!("step {step}: gradient {i} is {g}, expected {want}").into());
        }
    }
    let triangle = (ranks * (ranks + 1) / 2) as f64;
    let want = [32.0 * triangle, 0.5 * triangle];
    if stats != want {
        return Err(format!("step {step}: statistics are {stats:?}, expected {want:?}").into());
    }
    Ok(())
}

/// Starts `ranks` ranks of this program on this host with torchrun's variables, and waits for
/// all of them; one that fails (or the time running out) stops the others.
fn spawn(ranks: usize, timeout: Duration) -> Result<(), Failure> {
    let exe = std::env::current_exe()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut children: Vec<(usize, Child)> = Vec::new();
    for r in 0..ranks {
        let child = Command::new(&exe)
            .args(["--timeout", &timeout.as_secs().to_string()])
            .env("RANK", r.to_string())
            .env("WORLD_SIZE", ranks.to_string())
            .env("LOCAL_RANK", r.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string())
            .env("NCCL_NVLS_ENABLE", "0")
            .spawn()?;
        children.push((r, child));
    }
    // Each rank's own waits are bounded by `timeout`; give the whole run three of them.
    let deadline = Instant::now() + timeout * 3;
    let mut failed = None;
    while !children.is_empty() && failed.is_none() {
        let mut i = 0;
        while i < children.len() {
            if let Some(status) = children[i].1.try_wait()? {
                let (r, _) = children.remove(i);
                if !status.success() {
                    failed = Some(format!("rank {r} failed ({status})"));
                }
            } else {
                i += 1;
            }
        }
        if Instant::now() >= deadline {
            failed = Some(format!(
                "ranks {:?} still run after {:?}",
                children.iter().map(|c| c.0).collect::<Vec<_>>(),
                timeout * 3
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    for (_, mut c) in children {
        let _ = c.kill();
        let _ = c.wait();
    }
    match failed {
        Some(why) => Err(why.into()),
        None => {
            println!("all {ranks} ranks finished their {STEPS} steps");
            Ok(())
        }
    }
}
