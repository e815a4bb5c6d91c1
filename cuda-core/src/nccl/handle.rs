//! [`Handle`]: a communicator's NCCL handle as a [`Group`](super::Group)'s end reaches it.
//!
//! On non-blocking communicators `ncclGroupEnd` may answer `ncclInProgress`: NCCL then queues
//! the group's calls in the background, and the end must wait, communicator by communicator,
//! until it has (`ncclCommGetAsyncError` says done) before memory the calls use may be given
//! back in stream order. By then the calls that used a communicator have returned, and the
//! communicator may have moved to another thread or been destroyed: the group keeps this
//! shared part, whose lock orders its queries before the destroy, and which says when the
//! handle is gone.
//!
//! The waits' shared words live here too: [`Progress`], what a poll of the handle answers,
//! [`deadline_after`], the deadline of a wait with a time limit, and [`Backoff`], the pause
//! between two polls.

use crate::error::{Error, Result, check_nccl, nccl_error};
use cuhost_nccl_sys as nccl;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// No time limit, in [`Handle`]'s `timeout_ns`.
const NO_LIMIT: u64 = u64::MAX;

/// Where a non-blocking communicator's background work stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Progress {
    /// Nothing is in progress: the last call has finished (for a collective: it is queued on
    /// its stream).
    Done,
    /// NCCL is still working on the last call in the background (`ncclInProgress`).
    InProgress,
}

/// The deadline `timeout` from now. A timeout past what an [`Instant`] can hold (as
/// `Duration::MAX`) means no deadline: the furthest instant it can hold, centuries away.
pub(crate) fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout).unwrap_or_else(|| {
        // Halve the step until it fits; a step of zero always does.
        let mut step = Duration::from_secs(1 << 40);
        loop {
            match now.checked_add(step) {
                Some(far) => return far,
                None => step /= 2,
            }
        }
    })
}

/// The pause between two polls of a wait: growing from a few microseconds to a millisecond,
/// so that a wait sleeps rather than spins, and never past the wait's deadline.
pub(crate) struct Backoff {
    pause: Duration,
}

impl Backoff {
    pub(crate) fn new() -> Backoff {
        Backoff { pause: Duration::from_micros(5) }
    }

    /// Sleeps for the next pause, or until `deadline` if that comes first.
    pub(crate) fn sleep(&mut self, deadline: Instant) {
        let left = deadline.saturating_duration_since(Instant::now());
        std::thread::sleep(self.pause.min(left));
        self.pause = (self.pause * 2).min(Duration::from_millis(1));
    }
}

/// The shared part of a communicator: the raw handle (null once destroyed or aborted), whether
/// a wait on it failed, and how long its waits for NCCL's background work may last.
#[derive(Debug)]
pub(crate) struct Handle {
    raw: Mutex<Raw>,
    faulted: AtomicBool,
    /// The time limit of the waits for background work, in nanoseconds ([`NO_LIMIT`]: none).
    timeout_ns: AtomicU64,
}

#[derive(Debug)]
struct Raw(nccl::ncclComm_t);

// SAFETY: an NCCL communicator may be used from any thread, one call at a time; the handle is
// only used under the mutex.
unsafe impl Send for Raw {}

impl Handle {
    /// The shared part of the live communicator `raw`.
    pub(crate) fn new(raw: nccl::ncclComm_t) -> Handle {
        Handle {
            raw: Mutex::new(Raw(raw)),
            faulted: AtomicBool::new(false),
            timeout_ns: AtomicU64::new(NO_LIMIT),
        }
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

    /// The time limit of the waits for background work; `None`: none.
    pub(crate) fn timeout(&self) -> Option<Duration> {
        let ns = self.timeout_ns.load(Ordering::Relaxed);
        (ns != NO_LIMIT).then(|| Duration::from_nanos(ns))
    }

    /// Sets the time limit of the waits for background work (`None`: none).
    pub(crate) fn set_timeout(&self, timeout: Option<Duration>) {
        let ns =
            timeout.map_or(NO_LIMIT, |t| u64::try_from(t.as_nanos()).unwrap_or(NO_LIMIT).min(NO_LIMIT - 1));
        self.timeout_ns.store(ns, Ordering::Relaxed);
    }

    /// Polls until the background work is done, sleeping in between (from a few microseconds
    /// up to a millisecond), for at most the [time limit](Self::timeout). An error, or the
    /// time running out (an [`Error::Timeout`] of `operation`), marks the communicator faulted
    /// and is returned.
    pub(crate) fn wait_until_done(&self, operation: &'static str) -> Result<()> {
        let limit = self.timeout();
        let deadline = deadline_after(limit.unwrap_or(Duration::MAX));
        let mut backoff = Backoff::new();
        loop {
            match self.poll() {
                Ok(Progress::Done) => return Ok(()),
                Ok(Progress::InProgress) => {}
                Err(e) => {
                    self.mark_faulted();
                    return Err(e);
                }
            }
            if let Some(waited) = limit
                && Instant::now() >= deadline
            {
                self.mark_faulted();
                return Err(timed_out(operation, waited));
            }
            backoff.sleep(deadline);
        }
    }
}

#[cold]
fn timed_out(operation: &'static str, waited: Duration) -> Error {
    Error::Timeout {
        operation,
        waited,
        message: "NCCL did not finish the communicator's background work (queueing the call, or a split or \
                  flush that waits for the other ranks) in time; a peer may have died or stopped making the \
                  same calls. The communicator is faulted: abort it (dropping it does), then continue with \
                  the ranks that remain"
            .into(),
    }
}
