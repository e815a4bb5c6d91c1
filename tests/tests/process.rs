//! Process-level features: the checkpoint state of this process, coredump settings for the
//! process and for a context read back as set, and the atomic operations a device supports on
//! memory shared with the host.

use cuda_core::Error;
use cuda_core::checkpoint::{self, ProcessState};
use cuda_core::coredump::{Coredump, CoredumpFlags};
use cuda_core::device::{AtomicCaps, AtomicOp};
use cuda_tests::{TestResult, device_zero, ensure, ensure_eq, gpu};

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

fn main() {
    cuda_tests::run(&[
        gpu("this_process_is_running_for_checkpoints", this_process_is_running_for_checkpoints),
        gpu("coredump_settings_read_back_as_set", coredump_settings_read_back_as_set),
        gpu("atomic_capabilities_are_reported_per_operation", atomic_capabilities_are_reported_per_operation),
    ]);
}
