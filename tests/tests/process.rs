//! Process-level features: the checkpoint state of this process, checkpoint and restore of a
//! child process's GPU memory, coredump settings for the process and for a context read back as
//! set, and the atomic operations a device supports on memory shared with the host.
//!
//! The checkpoint tests start this binary again as a child (`CHILD_ENV` names its part) that
//! holds device memory while the parent locks, checkpoints, restores and unlocks it, then reads
//! the memory back when the parent says so.

use cuda_tests::child::Child;
use cuda_tests::{Failed, TestResult, device_zero, ensure, ensure_eq, gpu, gpu_needing, still_usable};
use cuhost::checkpoint::{self, GpuPair, Process, ProcessState};
use cuhost::coredump::{Coredump, CoredumpFlags};
use cuhost::device::{AtomicCaps, AtomicOp};
use cuhost::{Device, DeviceBuffer, Error};
use cuhost_driver_sys::CUresult;
use std::io::{BufRead, Write};
use std::time::Duration;

/// Set in the environment of a child process; its value names the child's part.
const CHILD_ENV: &str = "CUDA_CORE_PROCESS_CHILD";

/// Elements of the child's buffer (4 MiB).
const N: u32 = 1 << 20;

/// What the child writes to device memory before the checkpoint.
fn pattern() -> Vec<u32> {
    (0..N).map(|i| i.wrapping_mul(2_654_435_761) ^ 0x5a5a_5a5a).collect()
}

/// How long the parent lets a lock wait for the child's CUDA calls.
const LOCK_TIMEOUT: Duration = Duration::from_secs(30);

fn this_process_is_running_for_checkpoints() -> TestResult {
    let (_device, _ctx, _stream) = device_zero()?;
    ensure_eq!(checkpoint::process_state(std::process::id())?, ProcessState::Running);
    let tid = checkpoint::restore_thread_id(std::process::id())?;
    ensure!(tid > 0, "a restore thread id is a thread id: {tid}");
    Ok(())
}

fn coredump_settings_read_back_as_set() -> TestResult {
    let (_device, ctx, _stream) = device_zero()?;
    let dir = std::env::temp_dir();
    for (settings, name) in [(Coredump::global(), "global"), (Coredump::of(&ctx), "context")] {
        let file = dir.join(format!("cuda-core-{name}-{}.cudacore", std::process::id()));
        let file = file.to_str().ok_or("a temporary path that is not UTF-8")?;
        settings.set_file(file)?;
        ensure_eq!(settings.file()?, file);
        let pipe = format!("{file}.pipe");
        if name == "global" {
            settings.set_pipe(&pipe)?;
            ensure_eq!(settings.pipe()?, pipe);
            settings.set_user_trigger(false)?;
            ensure!(!settings.user_trigger()?, "the user trigger is off");
        } else {
            ensure!(
                matches!(settings.set_pipe(&pipe), Err(Error::InvalidArgument { .. })),
                "a context's pipe"
            );
            ensure!(
                matches!(settings.set_user_trigger(false), Err(Error::InvalidArgument { .. })),
                "a context's trigger"
            );
        }
        settings.set_flags(CoredumpFlags::SKIP_GLOBAL_MEMORY | CoredumpFlags::SKIP_ABORT)?;
        ensure!(
            settings.flags()?.contains(CoredumpFlags::SKIP_GLOBAL_MEMORY | CoredumpFlags::SKIP_ABORT),
            "{name}: {:?}",
            settings.flags()?
        );
        for on in [true, false] {
            settings.set_enabled_on_exception(on)?;
            ensure_eq!(settings.enabled_on_exception()?, on, "{name}");
        }
    }
    Ok(())
}

fn atomic_capabilities_are_reported_per_operation() -> TestResult {
    let (device, _ctx, _stream) = device_zero()?;
    let host = device.host_atomic_capabilities(&AtomicOp::ALL)?;
    ensure_eq!(host.len(), AtomicOp::ALL.len());
    let one = device.host_atomic_capabilities(&[AtomicOp::CompareAndSwap])?;
    ensure_eq!(one[0], host[9], "the answer does not depend on what else is asked");
    ensure!(
        matches!(device.host_atomic_capabilities(&[]), Err(Error::InvalidArgument { .. })),
        "no operation"
    );
    let known = AtomicCaps::all();
    ensure!(host.iter().all(|c| known.contains(*c)), "only capability bits the header defines: {host:?}");
    // A device paired with itself is refused by the driver (CUDA_ERROR_INVALID_DEVICE).
    ensure!(
        device.p2p_atomic_capabilities(&device, &[AtomicOp::IntegerAdd]).is_err(),
        "p2p atomics with itself"
    );
    Ok(())
}

/// The child's parts: `cuda` holds a device buffer through the checkpoint and checks it after,
/// `idle` uses no CUDA and waits for its stdin to close.
mod child {
    use super::*;

    pub fn run(role: &str) -> TestResult {
        match role {
            "cuda" => holds_memory_through_a_checkpoint(),
            "idle" => {
                println!("ready");
                std::io::stdout().flush()?;
                // Until the parent closes stdin.
                std::io::stdin().lock().lines().for_each(drop);
                Ok(())
            }
            other => Err(format!("no child part {other:?}").into()),
        }
    }

    fn holds_memory_through_a_checkpoint() -> TestResult {
        let (_device, _ctx, stream) = device_zero()?;
        let data = pattern();
        let buffer = DeviceBuffer::from_slice(&stream, &data)?;
        stream.synchronize()?;
        // No CUDA call is under way from here until the parent's next line.
        println!("ready");
        std::io::stdout().flush()?;
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        ensure_eq!(line.trim(), "verify", "what the parent sent");
        ensure!(buffer.to_vec()? == data, "the device memory reads other values after the restore");
        still_usable(&stream)?;
        drop(buffer);
        println!("ok");
        std::io::stdout().flush()?;
        Ok(())
    }
}

/// Starts the child's part `role` and waits for its "ready".
fn start(role: &str) -> Result<Child, Failed> {
    let mut child = Child::spawn(CHILD_ENV, role)?;
    ensure_eq!(child.receive()?, "ready", "the child's first line");
    Ok(child)
}

/// The checkpoint calls need the driver to take them: under a tool such as compute-sanitizer it
/// refuses them (`CUDA_ERROR_NOT_SUPPORTED`), which the query of this process's state shows.
fn checkpoints_are_taken() -> Result<(), String> {
    match checkpoint::process_state(std::process::id()) {
        Err(e) if e.driver_status() == Some(CUresult::CUDA_ERROR_NOT_SUPPORTED) => {
            Err(format!("the driver refuses checkpoint calls in this process, as under a CUDA tool: {e}"))
        }
        _ => Ok(()),
    }
}

/// Fails unless `result` is an [`Error::InvalidArgument`] (a refusal before the operation).
fn refused<T: std::fmt::Debug>(result: cuhost::Result<T>, what: &str) -> TestResult {
    ensure!(matches!(result, Err(Error::InvalidArgument { .. })), "{what}: {result:?}");
    Ok(())
}

fn a_child_keeps_its_device_memory_through_checkpoint_and_restore() -> TestResult {
    let (device, _ctx, _stream) = device_zero()?;
    let mut child = start("cuda")?;
    let process = Process::new(child.pid())?;
    ensure_eq!(process.state()?, ProcessState::Running);
    refused(process.adopt_lock(), "adopting a running process")?;

    // The whole cycle, step by step.
    let mut locked = process.lock(Some(LOCK_TIMEOUT))?;
    ensure_eq!(process.state()?, ProcessState::Locked, "after lock");
    refused(process.lock(Some(LOCK_TIMEOUT)), "locking a locked process")?;
    refused(locked.restore(&[]), "restoring a process that is not checkpointed")?;
    locked.checkpoint()?;
    ensure_eq!(process.state()?, ProcessState::Checkpointed, "after checkpoint");
    refused(locked.checkpoint(), "checkpointing twice")?;
    locked.restore(&[])?;
    ensure_eq!(process.state()?, ProcessState::Locked, "after restore");
    ensure_eq!(locked.unlock()?, process);
    ensure_eq!(process.state()?, ProcessState::Running, "after unlock");

    // Handed on locked, taken over, restored onto the same GPUs named by pairs, checkpointed
    // again and dropped: the drop restores and unlocks.
    let process = process.lock(Some(LOCK_TIMEOUT))?.leave_locked();
    ensure_eq!(process.state()?, ProcessState::Locked, "left locked");
    let mut locked = process.adopt_lock()?;
    locked.checkpoint()?;
    // The child initialised CUDA, so it was checkpointed on every GPU it sees, not only the one
    // that holds its buffer: pairs that leave one out are refused, and the process stays
    // checkpointed.
    let mut pairs = Vec::new();
    for d in Device::all()? {
        let uuid = d.uuid()?;
        pairs.push(GpuPair { old: uuid, new: uuid });
    }
    if pairs.len() > 1 {
        let uuid = device.uuid()?;
        let partial = locked.restore(&[GpuPair { old: uuid, new: uuid }]);
        ensure!(
            matches!(&partial, Err(e) if e.driver_status() == Some(CUresult::CUDA_ERROR_INVALID_VALUE)),
            "a restore naming one of {} GPUs: {partial:?}",
            pairs.len()
        );
        ensure_eq!(process.state()?, ProcessState::Checkpointed, "after a refused restore");
    }
    locked.restore(&pairs)?;
    ensure_eq!(process.state()?, ProcessState::Locked, "after a restore with a pair for each GPU");
    locked.checkpoint()?;
    drop(locked);
    ensure_eq!(process.state()?, ProcessState::Running, "after dropping a checkpointed process's lock");

    child.send("verify")?;
    ensure_eq!(child.receive()?, "ok", "the child's check of its memory");
    child.finish()
}

fn this_process_is_refused_as_a_checkpoint_target() -> TestResult {
    let (_device, _ctx, _stream) = device_zero()?;
    refused(Process::new(std::process::id()), "this process")?;
    refused(Process::new(0), "process id 0")?;
    // The query of this process's own state is allowed, and finds it running.
    if checkpoints_are_taken().is_ok() {
        ensure_eq!(checkpoint::process_state(std::process::id())?, ProcessState::Running);
    }
    Ok(())
}

fn a_process_without_cuda_or_without_existence_is_an_error() -> TestResult {
    let (_device, _ctx, _stream) = device_zero()?;
    let child = start("idle")?;
    // Linux process ids stay below 2^22: this one belongs to no process.
    let nobody = i32::MAX.unsigned_abs();
    for (pid, what) in [(child.pid(), "a process without CUDA"), (nobody, "no process")] {
        let process = Process::new(pid)?;
        let state = process.state();
        ensure!(matches!(state, Err(Error::Driver { .. })), "{what}: state {state:?}");
        // The lock's first step, the state query, is what fails.
        let locked = process.lock(Some(Duration::from_secs(1)));
        ensure!(
            matches!(&locked, Err(e @ Error::Driver { .. }) if e.call() == Some("cuCheckpointProcessGetState")),
            "{what}: lock {locked:?}"
        );
        ensure!(matches!(process.adopt_lock(), Err(Error::Driver { .. })), "{what}: adopt_lock");
    }
    child.finish()
}

fn main() {
    if let Ok(role) = std::env::var(CHILD_ENV) {
        let outcome = child::run(&role);
        cuda_tests::release_default_pools();
        let code = match outcome {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("process child ({role}): {e:?}");
                1
            }
        };
        std::process::exit(code);
    }
    cuda_tests::run(&[
        gpu_needing(
            "this_process_is_running_for_checkpoints",
            checkpoints_are_taken,
            this_process_is_running_for_checkpoints,
        ),
        gpu_needing(
            "a_child_keeps_its_device_memory_through_checkpoint_and_restore",
            checkpoints_are_taken,
            a_child_keeps_its_device_memory_through_checkpoint_and_restore,
        ),
        gpu("this_process_is_refused_as_a_checkpoint_target", this_process_is_refused_as_a_checkpoint_target),
        gpu(
            "a_process_without_cuda_or_without_existence_is_an_error",
            a_process_without_cuda_or_without_existence_is_an_error,
        ),
        gpu("coredump_settings_read_back_as_set", coredump_settings_read_back_as_set),
        gpu("atomic_capabilities_are_reported_per_operation", atomic_capabilities_are_reported_per_operation),
    ]);
}
