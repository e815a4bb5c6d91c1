//! CUDA's checkpoint and restore of another process's GPU state (CUDA 12.8): lock its CUDA
//! calls, save its device memory to host memory and release its GPUs, bring the memory back
//! (onto the same GPUs or others of the same kind), let it run again
//! ([CUDA Checkpointing](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CHECKPOINT.html)).
//!
//! The driver moves a process through these states, one call each, in this order:
//!
//! | state ([`ProcessState`]) | what it means | next step |
//! |---|---|---|
//! | `Running` | the process calls CUDA as usual | [`Process::lock`] |
//! | `Locked` | its CUDA calls block, the work it queued is done | [`checkpoint`], or [`unlock`] |
//! | `Checkpointed` | its device memory is in host memory, its GPUs are free | [`restore`] |
//! | `Locked` again | its memory is back on a GPU, at the same addresses | [`unlock`] |
//! | `Failed` | a checkpoint or restore failed beyond repair | none |
//!
//! While the process is checkpointed it holds no GPU resource: other processes can use the
//! GPUs, and a CPU checkpointer (CRIU) can save the whole process to disk.
//!
//! [`checkpoint`]: LockedProcess::checkpoint
//! [`restore`]: LockedProcess::restore
//! [`unlock`]: LockedProcess::unlock
//!
//! These calls act on *another* process: the one whose checkpoint is being made (a controller
//! such as `cuda-checkpoint` or CRIU's CUDA plugin drives it from outside). [`Process::new`]
//! refuses this process and its threads, whose own CUDA calls would block on the lock. Each
//! operation first asks the driver for the process's state
//! ([`cuCheckpointProcessGetState`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CHECKPOINT.html))
//! and refuses one that the state does not allow with an [`Error::InvalidArgument`] that names
//! the state and the step that is missing, where the driver would answer
//! `CUDA_ERROR_ILLEGAL_STATE` whatever is missing; the operations themselves take milliseconds
//! or more (a checkpoint copies every byte of device memory), so the query costs nothing that
//! matters. That query fails as [`process_state`] does for a process that does not use CUDA or
//! does not exist.
//!
//! [`Process::lock`] returns a [`LockedProcess`], which brings the process back to running when
//! it is dropped (restoring it first if it is checkpointed), so that a controller that fails
//! halfway does not leave the process blocked for ever. A controller that hands the process on
//! locked or checkpointed (to CRIU, or to a later run of itself) says so with
//! [`LockedProcess::leave_locked`], and a later controller takes charge of it again with
//! [`Process::adopt_lock`].
//!
//! ```no_run
//! # fn main() -> cuhost::Result<()> {
//! use cuhost::checkpoint::{Process, ProcessState};
//! use std::time::Duration;
//! # let pid = 4242;
//! let process = Process::new(pid)?;
//! let mut locked = process.lock(Some(Duration::from_secs(10)))?;
//! locked.checkpoint()?;
//! assert_eq!(process.state()?, ProcessState::Checkpointed);
//! // The GPUs' memory is free for other work until the restore.
//! locked.restore(&[])?;
//! locked.unlock()?;
//! # Ok(()) }
//! ```

use crate::device::{Uuid, init};
use crate::error::{Error, Result, report_from_drop};
use cuhost_driver_sys as sys;
use std::mem::ManuallyDrop;
use std::time::Duration;

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

    /// What a process in this state can do next, for the errors of refused operations.
    fn next_step(self) -> &'static str {
        match self {
            ProcessState::Running => "lock it first (Process::lock)",
            ProcessState::Locked => "it is locked: checkpoint it or unlock it",
            ProcessState::Checkpointed => "it is checkpointed: restore it first (LockedProcess::restore)",
            ProcessState::Failed => "a checkpoint or restore of it failed beyond repair",
            ProcessState::Checkpointing | ProcessState::Restoring => {
                "another controller is checkpointing or restoring it: wait for that to finish"
            }
            ProcessState::Other(_) => "a state this crate does not know",
        }
    }
}

fn pid_arg(operation: &'static str, pid: u32) -> Result<i32> {
    i32::try_from(pid).map_err(|_| Error::invalid(operation, format!("process id {pid} is out of range")))
}

/// Whether `pid` names this process, or one of its threads (Linux gives each thread an id that
/// the kernel also takes as a process id).
fn is_this_process(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    #[cfg(target_os = "linux")]
    {
        std::path::Path::new(&format!("/proc/self/task/{pid}")).exists()
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// The checkpoint state of process `pid` (this one: [`std::process::id`])
/// ([`cuCheckpointProcessGetState`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CHECKPOINT.html),
/// CUDA 12.8).
///
/// A `pid` beyond `i32` is an [`Error::InvalidArgument`]; otherwise it fails with the driver's
/// status: `CUDA_ERROR_NOT_INITIALIZED` for a process that has not initialised CUDA,
/// `CUDA_ERROR_OPERATING_SYSTEM` for one that does not exist, `CUDA_ERROR_NOT_SUPPORTED` in a
/// process run under a tool such as compute-sanitizer; or with [`Error::Load`] on a driver
/// older than 12.8.
pub fn process_state(pid: u32) -> Result<ProcessState> {
    let pid = pid_arg("checkpoint::process_state", pid)?;
    init()?;
    let mut raw = sys::CUprocessState::CU_PROCESS_STATE_RUNNING;
    // SAFETY: one out-parameter.
    unsafe { driver!(cuCheckpointProcessGetState(pid, &mut raw)) }?;
    Ok(ProcessState::from_raw(raw))
}

/// The id of the thread of process `pid` that a restore runs on
/// ([`cuCheckpointProcessGetRestoreThreadId`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CHECKPOINT.html),
/// CUDA 12.8).
///
/// Fails as [`process_state`] does.
pub fn restore_thread_id(pid: u32) -> Result<i32> {
    let pid = pid_arg("checkpoint::restore_thread_id", pid)?;
    init()?;
    let mut tid = 0;
    // SAFETY: one out-parameter.
    unsafe { driver!(cuCheckpointProcessGetRestoreThreadId(pid, &mut tid)) }?;
    Ok(tid)
}

/// One GPU of a restore's remapping (`CUcheckpointGpuPair`): the process's memory that was on
/// GPU `old` when it was checkpointed goes to GPU `new`, which has the same chip and enough
/// memory ([`Device::uuid`](crate::device::Device::uuid) gives both).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GpuPair {
    /// The GPU the process was checkpointed on.
    pub old: Uuid,
    /// The GPU to restore it onto.
    pub new: Uuid,
}

fn raw_uuid(uuid: Uuid) -> sys::CUuuid {
    // `bytes` is `c_char`, signed on some targets: the cast keeps each byte's bits.
    sys::CUuuid { bytes: uuid.0.map(|b| b as _), ..Default::default() }
}

/// Another process, by its id, as the target of checkpoint and restore.
///
/// Holding one changes nothing in the process; [`lock`](Process::lock) starts a checkpoint.
/// Like any process id, it names whichever process has that id at the time of each call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Process {
    pid: i32,
}

impl Process {
    /// The process whose id is `pid` (a child's: [`std::process::Child::id`]).
    ///
    /// Refused with [`Error::InvalidArgument`]: `pid` 0 or beyond `i32`, and this process or a
    /// thread of it, whose CUDA calls would block on its own lock (run the checkpoint from
    /// another process). Whether `pid` exists and uses CUDA is known at the first call on it.
    pub fn new(pid: u32) -> Result<Process> {
        const OP: &str = "checkpoint::Process::new";
        if pid == 0 {
            return Err(Error::invalid(OP, "0 is not a process id"));
        }
        let raw = pid_arg(OP, pid)?;
        if is_this_process(pid) {
            return Err(Error::invalid(
                OP,
                format!(
                    "process {pid} is this process (or a thread of it): a process cannot lock or \
                     checkpoint itself, its own CUDA calls would block; drive the checkpoint from \
                     another process"
                ),
            ));
        }
        Ok(Process { pid: raw })
    }

    /// The process id.
    pub fn pid(self) -> u32 {
        self.pid.unsigned_abs()
    }

    /// The process's checkpoint state
    /// ([`cuCheckpointProcessGetState`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CHECKPOINT.html)).
    ///
    /// Fails as [`process_state`] does.
    pub fn state(self) -> Result<ProcessState> {
        process_state(self.pid())
    }

    /// The id of the process's thread that a restore runs on
    /// ([`cuCheckpointProcessGetRestoreThreadId`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CHECKPOINT.html)).
    ///
    /// Fails as [`process_state`] does.
    pub fn restore_thread_id(self) -> Result<i32> {
        restore_thread_id(self.pid())
    }

    /// Fails with a message naming the state unless the process is in `wanted`.
    fn expect(self, operation: &'static str, wanted: &[ProcessState]) -> Result<ProcessState> {
        let state = self.state()?;
        if wanted.contains(&state) {
            return Ok(state);
        }
        Err(Error::invalid(
            operation,
            format!("process {} is {state:?}, not {wanted:?}: {}", self.pid, state.next_step()),
        ))
    }

    /// Locks the process's CUDA calls: calls it makes from now on block, and the lock waits for
    /// the ones under way and the work it queued
    /// ([`cuCheckpointProcessLock`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CHECKPOINT.html)).
    /// Running → Locked.
    ///
    /// `timeout` bounds the wait (rounded up to whole milliseconds, at least one); `None` waits
    /// as long as it takes. The process must be running: otherwise [`Error::InvalidArgument`]
    /// names its state (one that another controller holds is taken over with
    /// [`adopt_lock`](Process::adopt_lock)). When the timeout passes the call fails with the
    /// driver's status and the process keeps running; it fails too where the driver refuses
    /// checkpoints (under a tool such as compute-sanitizer: `CUDA_ERROR_NOT_SUPPORTED`).
    pub fn lock(self, timeout: Option<Duration>) -> Result<LockedProcess> {
        const OP: &str = "checkpoint::Process::lock";
        let timeout_ms = match timeout {
            // 0 is the driver's "no timeout": the shortest timeout is 1 ms.
            Some(t) => u32::try_from(t.as_nanos().div_ceil(1_000_000).max(1)).map_err(|_| {
                let why = "is longer than u32::MAX milliseconds: pass None to wait as long as it takes";
                Error::invalid(OP, format!("a timeout of {t:?} {why}"))
            })?,
            None => 0,
        };
        self.expect(OP, &[ProcessState::Running])?;
        let mut args = sys::CUcheckpointLockArgs { timeoutMs: timeout_ms, ..Default::default() };
        // SAFETY: `args` is a whole, zeroed-but-for-the-timeout struct that outlives the call.
        unsafe { driver!(cuCheckpointProcessLock(self.pid, &mut args)) }?;
        Ok(LockedProcess { process: self })
    }

    /// Takes charge of a process that another controller locked or checkpointed (an earlier
    /// run of this program, `cuda-checkpoint`, CRIU's restore): the [`LockedProcess`] restores
    /// and unlocks it as if it had locked it itself.
    ///
    /// Refused with [`Error::InvalidArgument`] unless the process is Locked or Checkpointed.
    pub fn adopt_lock(self) -> Result<LockedProcess> {
        self.expect("checkpoint::Process::adopt_lock", &[ProcessState::Locked, ProcessState::Checkpointed])?;
        Ok(LockedProcess { process: self })
    }
}

/// A process whose CUDA calls this controller has locked ([`Process::lock`]); dropping it
/// brings the process back to running, restoring it first (onto the GPUs it was checkpointed
/// on) if it is checkpointed.
///
/// A failure while dropping is printed to standard error (no context keeps it);
/// [`unlock`](LockedProcess::unlock) does the same and returns it. [`leave_locked`](LockedProcess::leave_locked) leaves the process as it is.
#[derive(Debug)]
#[must_use = "dropping a LockedProcess unlocks the process again"]
pub struct LockedProcess {
    process: Process,
}

impl LockedProcess {
    /// The process.
    pub fn process(&self) -> Process {
        self.process
    }

    /// Saves the process's device memory to host memory and releases its GPUs
    /// ([`cuCheckpointProcessCheckpoint`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CHECKPOINT.html)).
    /// Locked → Checkpointed.
    ///
    /// Refused with [`Error::InvalidArgument`] unless the process is Locked (a second
    /// checkpoint needs a restore first).
    pub fn checkpoint(&mut self) -> Result<()> {
        self.process.expect("checkpoint::LockedProcess::checkpoint", &[ProcessState::Locked])?;
        let mut args = sys::CUcheckpointCheckpointArgs { ..Default::default() };
        // SAFETY: `args` is a whole, zeroed struct (no custom storage) that outlives the call.
        unsafe { driver!(cuCheckpointProcessCheckpoint(self.process.pid, &mut args)) }
    }

    /// Brings the process's device memory back from its checkpoint, at the addresses it had
    /// ([`cuCheckpointProcessRestore`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CHECKPOINT.html)).
    /// Checkpointed → Locked.
    ///
    /// With no `gpu_pairs` each GPU's memory goes back to that GPU; otherwise the pairs must
    /// name every GPU the process was checkpointed on (a CUDA 13.0 driver; older ones refuse
    /// pairs with their status). A process that initialised CUDA is checkpointed on every GPU
    /// it can see, including ones it never allocated on: pairs that leave one out are refused
    /// with `CUDA_ERROR_INVALID_VALUE`, and the process stays Checkpointed.
    ///
    /// Refused with [`Error::InvalidArgument`] unless the process is Checkpointed; the driver
    /// refuses GPUs of another chip or with too little free memory.
    pub fn restore(&mut self, gpu_pairs: &[GpuPair]) -> Result<()> {
        const OP: &str = "checkpoint::LockedProcess::restore";
        let count = u32::try_from(gpu_pairs.len())
            .map_err(|_| Error::invalid(OP, format!("{} GPU pairs are too many", gpu_pairs.len())))?;
        self.process.expect(OP, &[ProcessState::Checkpointed])?;
        restore_raw(self.process, gpu_pairs, count)
    }

    /// Lets the process run again, restoring it first (onto the GPUs it was checkpointed on)
    /// if it is checkpointed
    /// ([`cuCheckpointProcessUnlock`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CHECKPOINT.html)).
    /// Locked → Running.
    ///
    /// To restore onto other GPUs, call [`restore`](LockedProcess::restore) first. Refused
    /// with [`Error::InvalidArgument`] unless the process is Locked or Checkpointed (another
    /// controller unlocked it, or it failed); on failure the process stays where the error says.
    pub fn unlock(self) -> Result<Process> {
        let this = ManuallyDrop::new(self);
        this.finish()?;
        Ok(this.process)
    }

    /// Leaves the process locked or checkpointed, for another controller to restore and unlock
    /// ([`Process::adopt_lock`]); nothing is called.
    pub fn leave_locked(self) -> Process {
        ManuallyDrop::new(self).process
    }

    fn finish(&self) -> Result<()> {
        let process = self.process;
        let state = process.expect(
            "checkpoint::LockedProcess::unlock",
            &[ProcessState::Locked, ProcessState::Checkpointed],
        )?;
        if state == ProcessState::Checkpointed {
            restore_raw(process, &[], 0)?;
        }
        let mut args = sys::CUcheckpointUnlockArgs { ..Default::default() };
        // SAFETY: `args` is a whole, zeroed struct that outlives the call.
        unsafe { driver!(cuCheckpointProcessUnlock(process.pid, &mut args)) }
    }
}

impl Drop for LockedProcess {
    fn drop(&mut self) {
        // No context keeps an error about another process: it is printed (`unlock` returns it).
        if let Err(e) = self.finish() {
            report_from_drop(
                "checkpoint::LockedProcess dropped, the process may stay locked or checkpointed",
                &e,
            );
        }
    }
}

/// `cuCheckpointProcessRestore` with `count` = `gpu_pairs.len()`.
fn restore_raw(process: Process, gpu_pairs: &[GpuPair], count: u32) -> Result<()> {
    // The restore needs the driver initialised in the calling process (or persistence mode).
    init()?;
    let mut pairs: Vec<sys::CUcheckpointGpuPair> = gpu_pairs
        .iter()
        .map(|p| sys::CUcheckpointGpuPair {
            oldUuid: raw_uuid(p.old),
            newUuid: raw_uuid(p.new),
            ..Default::default()
        })
        .collect();
    let mut args = sys::CUcheckpointRestoreArgs {
        gpuPairs: if pairs.is_empty() { std::ptr::null_mut() } else { pairs.as_mut_ptr() },
        gpuPairsCount: count,
        ..Default::default()
    };
    // SAFETY: `args` is otherwise zeroed (no custom storage) and points at `count` pairs in
    // `pairs`, which outlives the call; the driver only reads them.
    unsafe { driver!(cuCheckpointProcessRestore(process.pid, &mut args)) }
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

    #[test]
    fn this_process_and_impossible_ids_are_refused_before_any_call() {
        for pid in [std::process::id(), 0, u32::MAX] {
            assert!(matches!(Process::new(pid), Err(Error::InvalidArgument { .. })), "{pid}");
        }
        // A thread of this process has an id of its own (`/proc/thread-self` links to
        // `<pid>/task/<tid>`); it is asked while the thread is alive.
        #[cfg(target_os = "linux")]
        {
            let (tid_tx, tid_rx) = std::sync::mpsc::channel();
            let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
            let thread = std::thread::spawn(move || {
                let link = std::fs::read_link("/proc/thread-self").ok();
                let tid = link.and_then(|l| l.file_name()?.to_str()?.parse::<u32>().ok());
                let _ = tid_tx.send(tid);
                let _ = done_rx.recv();
            });
            let tid = tid_rx.recv().unwrap().expect("/proc/thread-self names the thread");
            assert_ne!(tid, std::process::id());
            assert!(matches!(Process::new(tid), Err(Error::InvalidArgument { .. })), "thread {tid}");
            drop(done_tx);
            thread.join().unwrap();
        }
        let other = if std::process::id() == 1 { 2 } else { 1 };
        assert_eq!(Process::new(other).unwrap().pid(), other);
    }

    // H7: a failure of the drop's restore and unlock was dropped silently.
    #[test]
    fn h7_a_failed_unlock_in_drop_is_reported() {
        // Beyond any pid_max: the state query fails (or, without a driver, the loading does)
        // before anything is asked of a process.
        let locked = LockedProcess { process: Process { pid: i32::MAX } };
        crate::error::reported::take();
        drop(locked);
        let reported = crate::error::reported::take();
        assert!(
            matches!(&reported[..], [line] if line.starts_with("cuda-core: checkpoint::LockedProcess dropped")),
            "{reported:?}"
        );
    }
}
