//! The state of a process in CUDA's checkpoint and restore (CUDA 12.8): whether its GPU state
//! is live, locked, checkpointed, or being moved
//! ([`cuCheckpointProcessGetState`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CHECKPOINT.html)).
//!
//! Only the queries are here: locking, checkpointing and restoring act on every CUDA call of the
//! process being moved, which is the checkpointing tool's business (CRIU's CUDA plugin,
//! `cuda-checkpoint`), through the raw calls.

use crate::error::{Error, Result, check};
use cuda_driver_sys as sys;

/// A process's checkpoint state (`CUprocessState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProcessState {
    /// `CU_PROCESS_STATE_RUNNING`: the usual state.
    Running,
    /// `CU_PROCESS_STATE_LOCKED`: CUDA calls block.
    Locked,
    /// `CU_PROCESS_STATE_CHECKPOINTED`: device memory saved to the host, device handles released.
    Checkpointed,
    /// `CU_PROCESS_STATE_FAILED`: checkpoint or restore failed beyond repair.
    Failed,
    /// `CU_PROCESS_STATE_CHECKPOINTING`: being saved.
    Checkpointing,
    /// `CU_PROCESS_STATE_RESTORING`: being restored.
    Restoring,
    /// A state this crate does not know, by its raw value.
    Other(u32),
}

impl ProcessState {
    fn from_raw(raw: sys::CUprocessState) -> ProcessState {
        use sys::CUprocessState as S;
        match raw {
            S::CU_PROCESS_STATE_RUNNING => ProcessState::Running,
            S::CU_PROCESS_STATE_LOCKED => ProcessState::Locked,
            S::CU_PROCESS_STATE_CHECKPOINTED => ProcessState::Checkpointed,
            S::CU_PROCESS_STATE_FAILED => ProcessState::Failed,
            // CU_PROCESS_STATE_CHECKPOINTING and _RESTORING: named only by headers newer than 13.0,
            // matched by value so that the crate builds against those headers too.
            S(4) => ProcessState::Checkpointing,
            S(5) => ProcessState::Restoring,
            other => ProcessState::Other(other.0),
        }
    }
}

fn pid_arg(operation: &'static str, pid: u32) -> Result<i32> {
    i32::try_from(pid).map_err(|_| Error::invalid(operation, format!("process id {pid} is out of range")))
}

/// The checkpoint state of process `pid` (this one: [`std::process::id`])
/// ([`cuCheckpointProcessGetState`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CHECKPOINT.html),
/// CUDA 12.8).
///
/// A `pid` beyond `i32` is an [`Error::InvalidArgument`]; otherwise it fails with the driver's
/// status (a process that does not use CUDA; `CUDA_ERROR_NOT_SUPPORTED` in a process run under
/// a tool such as compute-sanitizer), or [`Error::Load`] on a driver older than 12.8.
pub fn process_state(pid: u32) -> Result<ProcessState> {
    let pid = pid_arg("checkpoint::process_state", pid)?;
    let mut raw = sys::CUprocessState::CU_PROCESS_STATE_RUNNING;
    // SAFETY: one out-parameter.
    check("cuCheckpointProcessGetState", unsafe { sys::cuCheckpointProcessGetState(pid, &mut raw) })?;
    Ok(ProcessState::from_raw(raw))
}

/// The id of the thread of process `pid` that a restore runs on
/// ([`cuCheckpointProcessGetRestoreThreadId`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CHECKPOINT.html),
/// CUDA 12.8).
///
/// Fails as [`process_state`] does.
pub fn restore_thread_id(pid: u32) -> Result<i32> {
    let pid = pid_arg("checkpoint::restore_thread_id", pid)?;
    let mut tid = 0;
    // SAFETY: one out-parameter.
    check("cuCheckpointProcessGetRestoreThreadId", unsafe {
        sys::cuCheckpointProcessGetRestoreThreadId(pid, &mut tid)
    })?;
    Ok(tid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_convert_and_unknown_ones_keep_their_value() {
        assert_eq!(
            ProcessState::from_raw(sys::CUprocessState::CU_PROCESS_STATE_LOCKED),
            ProcessState::Locked
        );
        assert_eq!(ProcessState::from_raw(sys::CUprocessState(5)), ProcessState::Restoring);
        assert_eq!(ProcessState::from_raw(sys::CUprocessState(42)), ProcessState::Other(42));
        assert!(matches!(process_state(u32::MAX), Err(Error::InvalidArgument { .. })));
    }
}
