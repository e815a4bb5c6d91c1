//! The tests: four GPUs in one process, four processes started as launchers start them (over
//! NVLink or PCIe, and over the socket transport alone), and the faults: a rank that never
//! starts, one that never joins NCCL, one killed in the middle of a loop of collectives.

use super::check::{Local, every_collective, split_into_pairs};
use super::roles::{INIT_LIMIT, WATCH};
use super::spawn::{Launch, Ranks, free_port};
use cuda_tests::{Failed, TestResult, ensure};
use cuhost::Device;
use cuhost::nccl::Communicator;
use std::time::{Duration, Instant};

/// NCCL forced onto its socket transport: no peer-to-peer, no shared memory, no InfiniBand.
pub const SOCKETS: [(&str, &str); 4] =
    [("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1"), ("NCCL_IB_DISABLE", "1"), ("NCCL_NET", "Socket")];

const ALL: [usize; 4] = [0, 1, 2, 3];

fn four_locals() -> Result<Vec<Local>, Failed> {
    let devices = (0..4usize).map(Device::get).collect::<Result<Vec<_>, _>>()?;
    Ok(Communicator::init_all(&devices)?.into_iter().map(Local::new).collect::<Result<Vec<_>, _>>()?)
}

pub fn one_process_four_gpus_every_collective() -> TestResult {
    let locals = four_locals()?;
    every_collective(&locals, 4)?;
    Communicator::finalize_all(locals.into_iter().map(|l| l.comm).collect())?;
    Ok(())
}

pub fn one_process_four_gpus_split_into_pairs() -> TestResult {
    let locals = four_locals()?;
    split_into_pairs(&locals)?;
    Communicator::finalize_all(locals.into_iter().map(|l| l.comm).collect())?;
    Ok(())
}

/// Four ranks in `role`, started with `launch`'s variables and `env`; every one must report
/// its collectives and split and exit with 0 within two minutes. Returns the ranks' log.
fn four_processes(launch: Launch, role: &str, env: &[(&str, &str)]) -> Result<Ranks, Failed> {
    let port = free_port()?;
    let mut ranks = Ranks::start(launch, 4, &ALL, port, |_| role.to_string(), env)?;
    ranks.expect(&ALL, "collectives ok", Duration::from_secs(90))?;
    ranks.expect(&ALL, "split ok", Duration::from_secs(30))?;
    Ok(ranks)
}

pub fn four_processes_every_collective_and_split() -> TestResult {
    let mut ranks = four_processes(Launch::Torchrun, "collectives", &[])?;
    ranks.finish(&ALL, Duration::from_secs(30))
}

pub fn four_processes_from_slurm_variables() -> TestResult {
    let mut ranks = four_processes(Launch::Slurm, "collectives", &[])?;
    ranks.finish(&ALL, Duration::from_secs(30))
}

pub fn four_processes_over_sockets() -> TestResult {
    let mut env = SOCKETS.to_vec();
    // NCCL's log goes to stderr, so that its lines, written from its own threads, cannot run
    // into the ranks' reports on stdout.
    env.extend([
        ("NCCL_DEBUG", "INFO"),
        ("NCCL_DEBUG_SUBSYS", "INIT,NET,P2P,SHM"),
        ("NCCL_DEBUG_FILE", "/dev/stderr"),
    ]);
    let mut ranks = four_processes(Launch::Torchrun, "collectives bandwidth", &env)?;
    let busbw = ranks.expect(&ALL, "busbw", Duration::from_secs(60))?;
    ranks.finish(&ALL, Duration::from_secs(30))?;
    println!("all-reduce of 64 MiB over the socket transport, bus bandwidth per rank (GB/s): {busbw:?}");
    let channels: Vec<&str> =
        ranks.log.iter().map(|l| l.text.as_str()).filter(|t| t.contains(" via ")).collect();
    ensure!(
        channels.iter().any(|t| t.contains("via NET/Socket")),
        "no channel went through NET/Socket; NCCL's channel lines:\n{}",
        channels.join("\n")
    );
    let other: Vec<&&str> =
        channels.iter().filter(|t| t.contains("via P2P") || t.contains("via SHM")).collect();
    ensure!(other.is_empty(), "channels outside the socket transport: {other:?}");
    Ok(())
}

/// Ranks 0 to 2 of four start; rank 3 never does: every one of them ends in a time-out of the
/// id exchange within the limit.
pub fn a_rank_that_never_starts_times_out_the_others() -> TestResult {
    let started = [0, 1, 2];
    let mut ranks =
        Ranks::start(Launch::Torchrun, 4, &started, free_port()?, |_| "expect-timeout".into(), &[])?;
    let start = Instant::now();
    let seen = ranks.expect(&started, "timeout", INIT_LIMIT * 2 + Duration::from_secs(20))?;
    for s in &seen {
        ensure!(s.starts_with("Bootstrap::unique_id"), "a time-out of another step: {s}\n{}", ranks.dump());
    }
    println!("every started rank timed out, the last {:?} after the start: {seen:?}", start.elapsed());
    ranks.finish(&started, Duration::from_secs(20))
}

/// All four exchange the id, but rank 3 never joins NCCL: ranks 0 to 2 end in a time-out of
/// the (non-blocking, polled) initialisation, their communicators aborted.
pub fn a_rank_that_never_joins_nccl_times_out_the_others() -> TestResult {
    let others = [0, 1, 2];
    let role = |r: usize| if r == 3 { "idle".to_string() } else { "expect-timeout".to_string() };
    let mut ranks = Ranks::start(Launch::Torchrun, 4, &ALL, free_port()?, role, &[])?;
    ranks.expect(&[3], "has the id", Duration::from_secs(30))?;
    let seen = ranks.expect(&others, "timeout", INIT_LIMIT * 2 + Duration::from_secs(20))?;
    for s in &seen {
        ensure!(
            s.starts_with("Communicator::init_rank_within"),
            "a time-out of another step: {s}\n{}",
            ranks.dump()
        );
    }
    println!("ranks 0 to 2 timed out in NCCL's initialisation: {seen:?}");
    ranks.finish(&others, Duration::from_secs(20))?;
    ranks.finish(&[3], Duration::from_secs(10))
}

/// Four ranks all-reduce in a loop; rank 3 is killed (SIGKILL). The others must see an error
/// within the watch limit, free what the failed work used, and finish a checked all-reduce
/// among themselves, by `how` (`shrink`, falling back to a new communicator, or `rebuild`).
fn killed_rank(how: &str, env: &[(&str, &str)]) -> TestResult {
    let survivors = [0, 1, 2];
    let mut ranks = Ranks::start(Launch::Torchrun, 4, &ALL, free_port()?, |_| "loop".into(), env)?;
    ranks.expect(&ALL, "looping", Duration::from_secs(40))?;
    std::thread::sleep(Duration::from_millis(200));
    ranks.kill(3)?;
    let killed = Instant::now();
    let faults = ranks.expect(&survivors, "fault", WATCH + Duration::from_secs(10))?;
    let seen = killed.elapsed();
    println!("the others saw the fault {seen:?} after the kill: {faults:?}");
    ensure!(seen < WATCH + Duration::from_secs(5), "the fault took {seen:?} to show\n{}", ranks.dump());
    let port = free_port()?;
    for r in survivors {
        ranks.send(r, &format!("recover 3 {port} {how}"))?;
    }
    let via = ranks.expect(&survivors, "recovered", Duration::from_secs(45))?;
    println!("recovered by {via:?}");
    ranks.finish(&survivors, Duration::from_secs(10))?;
    if how == "rebuild" {
        ensure!(via.iter().all(|v| v == "rebuild"), "asked to rebuild, got {via:?}");
    }
    Ok(())
}

pub fn a_killed_rank_is_shrunk_away() -> TestResult {
    killed_rank("shrink", &[])
}

pub fn a_killed_rank_is_shrunk_away_over_sockets() -> TestResult {
    killed_rank("shrink", &SOCKETS)
}

pub fn a_killed_rank_is_replaced_by_a_new_communicator() -> TestResult {
    killed_rank("rebuild", &[])
}
