//! [`Handle`]: a communicator's NCCL handle as a [`Group`](super::Group)'s end reaches it.
//!
//! On non-blocking communicators `ncclGroupEnd` may answer `ncclInProgress`: NCCL then queues
//! the group's calls in the background, and the end must wait, communicator by communicator,
//! until it has (`ncclCommGetAsyncError` says done) before memory the calls use may be given
//! back in stream order. By then the calls that used a communicator have returned, and the
//! communicator may have moved to another thread or been destroyed: the group keeps this
//! shared part, whose lock orders its queries before the destroy, and which says when the
//! handle is gone.

use super::comm::Progress;
use crate::error::{Result, check_nccl, nccl_error};
use nccl_sys as nccl;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// The shared part of a communicator: the raw handle (null once destroyed or aborted), and
/// whether a wait on it failed.
#[derive(Debug)]
pub(crate) struct Handle {
    raw: Mutex<Raw>,
    faulted: AtomicBool,
}

#[derive(Debug)]
struct Raw(nccl::ncclComm_t);

// SAFETY: an NCCL communicator may be used from any thread, one call at a time; the handle is
// only used under the mutex.
unsafe impl Send for Raw {}

impl Handle {
    /// The shared part of the live communicator `raw`.
    pub(crate) fn new(raw: nccl::ncclComm_t) -> Handle {
        Handle { raw: Mutex::new(Raw(raw)), faulted: AtomicBool::new(false) }
    }

    fn lock(&self) -> MutexGuard<'_, Raw> {
        // Nothing panics under the lock (NCCL calls and a store).
        self.raw.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Destroys or aborts the communicator with `end`, under the lock: no query of a group's
    /// end runs during or after it. Returns `end`'s status; the handle is gone afterwards.
    pub(crate) fn end(&self, end: impl FnOnce(nccl::ncclComm_t) -> nccl::ncclResult_t) -> nccl::ncclResult_t {
        let mut raw = self.lock();
        let status = end(raw.0);
        raw.0 = std::ptr::null_mut();
        status
    }

    /// Where the background work stands (`ncclCommGetAsyncError`); `Done` once the handle is
    /// gone (a destroyed communicator queues nothing more).
    pub(crate) fn poll(&self) -> Result<Progress> {
        let raw = self.lock();
        if raw.0.is_null() {
            return Ok(Progress::Done);
        }
        let mut state = nccl::ncclResult_t::ncclSuccess;
        // SAFETY: a live communicator (not ended: checked under the lock, which `end` takes);
        // one out-parameter.
        check_nccl("ncclCommGetAsyncError", unsafe { nccl::ncclCommGetAsyncError(raw.0, &mut state) })?;
        match state {
            nccl::ncclResult_t::ncclSuccess => Ok(Progress::Done),
            nccl::ncclResult_t::ncclInProgress => Ok(Progress::InProgress),
            failed => Err(nccl_error("ncclCommGetAsyncError", failed)),
        }
    }

    /// Notes that a wait on the communicator failed or ran out of time.
    pub(crate) fn mark_faulted(&self) {
        self.faulted.store(true, Ordering::Relaxed);
    }

    /// Whether a wait on the communicator failed or ran out of time.
    pub(crate) fn is_faulted(&self) -> bool {
        self.faulted.load(Ordering::Relaxed)
    }

    /// Polls until the background work is done, sleeping in between; an error marks the
    /// communicator faulted and is returned.
    pub(crate) fn wait_until_done(&self) -> Result<()> {
        let mut pause = Duration::from_micros(5);
        loop {
            match self.poll() {
                Ok(Progress::Done) => return Ok(()),
                Ok(Progress::InProgress) => {}
                Err(e) => {
                    self.mark_faulted();
                    return Err(e);
                }
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
        }
    }
}
