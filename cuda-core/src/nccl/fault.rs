//! Waits with deadlines, and what to do when a rank is gone: initialisation that gives up,
//! a stream wait that watches the communicator's errors, and shrinking a clique to the ranks
//! that remain.
//!
//! A rank that dies, or never comes, leaves NCCL's work on the other ranks waiting without end:
//! kernels spin for data that will not arrive and the host calls that wait for them block. The
//! calls here never wait past their deadline; each ends in an [`Error::Timeout`] (or NCCL's
//! asynchronous error) and leaves the communicator [faulted](Communicator::is_faulted), to be
//! aborted ([`Communicator::abort`], or by dropping it), which makes its kernels end.

use super::comm::{Communicator, refuse_in_group, same_device};
use super::config::Config;
use super::handle::{Backoff, deadline_after};
use super::id::UniqueId;
use super::version::{require, since};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::stream::Stream;
use cuhost_nccl_sys as nccl;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How [`Communicator::shrink`] treats the parent's work in flight (`shrinkFlags`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShrinkMode {
    /// The parent is healthy: its queued work completes first, and the new communicator may
    /// share its resources ([`Config::shrink_share`]) (`NCCL_SHRINK_DEFAULT`).
    Default,
    /// The parent failed (a rank died): its work in flight is aborted first, and nothing is
    /// shared (`NCCL_SHRINK_ABORT`). The memory that work used holds undefined data.
    Abort,
}

impl ShrinkMode {
    fn raw(self) -> i32 {
        match self {
            ShrinkMode::Default => nccl::NCCL_SHRINK_DEFAULT as i32,
            ShrinkMode::Abort => nccl::NCCL_SHRINK_ABORT as i32,
        }
    }
}

impl Communicator {
    /// Makes rank `rank` of a clique of `ranks` as [`init_rank`](Self::init_rank) does, but
    /// gives up after `timeout`: the communicator is made non-blocking
    /// ([`Config::blocking`]`(false)`, whatever `config` says), its initialisation is polled
    /// (`ncclCommGetAsyncError`) until it is done or the time is out, and one that is not done
    /// by then is aborted (`ncclCommAbort`).
    ///
    /// A rank that never joins is an [`Error::Timeout`] on every rank that did, each within
    /// `timeout` of its call. An error NCCL reports meanwhile (a peer of another clique, a
    /// network failure) is returned as an [`Error::Nccl`] naming `ncclCommGetAsyncError`, the
    /// communicator aborted too; arguments are checked as by `init_rank`.
    ///
    /// The communicator keeps `timeout` as the [time limit](Self::timeout) of the crate's
    /// later waits for its background work.
    pub fn init_rank_within(
        ctx: &Context,
        id: &UniqueId,
        ranks: usize,
        rank: usize,
        config: &Config,
        timeout: Duration,
    ) -> Result<Communicator> {
        const OP: &str = "Communicator::init_rank_within";
        let comm = Communicator::init_rank(ctx, id, ranks, rank, &config.clone().blocking(false))?;
        // The crate's later waits for its background work have the same limit.
        comm.set_timeout(Some(timeout));
        let deadline = deadline_after(timeout);
        let mut backoff = Backoff::new();
        loop {
            match comm.poll() {
                Ok(super::Progress::Done) => return Ok(comm),
                Ok(super::Progress::InProgress) => {}
                Err(e) => {
                    let _ = comm.abort();
                    return Err(e);
                }
            }
            if Instant::now() >= deadline {
                let aborted = comm.abort();
                let message = format!(
                    "rank {rank} of {ranks}: not every rank joined the clique; the communicator was aborted{}. \
                     Check that all {ranks} ranks run, reach each other's network (NCCL_SOCKET_IFNAME), and \
                     were given the same unique id",
                    aborted.err().map(|e| format!(" (the abort reported: {e})")).unwrap_or_default()
                );
                return Err(Error::Timeout { operation: OP, waited: timeout, message });
            }
            backoff.sleep(deadline);
        }
    }

    /// Waits until the work queued on `stream` has finished, watching this communicator: an
    /// error of its background work (a peer that went away, a network failure) ends the wait
    /// at once, and so does `timeout`. NCCL's kernels wait for their peers on the GPU without
    /// a limit, so over NVLink or shared memory a peer that died shows only as work that does
    /// not end: the deadline is what catches it.
    ///
    /// Returns `Ok` when the stream's work is done and the communicator reports no error.
    /// Otherwise the communicator is [faulted](Self::is_faulted) and this fails with an
    /// [`Error::Timeout`] (the work did not end in time), the [`Error::Nccl`] of
    /// `ncclCommGetAsyncError`, or the stream's own error; a stream of another device is an
    /// [`Error::InvalidArgument`]. After a failure, [`abort`](Self::abort) the communicator
    /// (its kernels then end and the stream moves on) before dropping the memory and streams
    /// its work used; see [the recovery recipe](crate::nccl#when-a-rank-fails).
    pub fn synchronize(&self, stream: &Stream, timeout: Duration) -> Result<()> {
        const OP: &str = "Communicator::synchronize";
        same_device(OP, self, stream.context())?;
        let deadline = deadline_after(timeout);
        let mut backoff = Backoff::new();
        loop {
            // First the communicator: a non-blocking one may still be queueing the work (a
            // group's calls after its end), and until it has, an idle stream means nothing.
            let queued = self.poll().inspect_err(|_| self.mark_faulted())? == super::Progress::Done;
            if queued && stream.query().inspect_err(|_| self.mark_faulted())? {
                return Ok(());
            }
            if Instant::now() >= deadline {
                self.mark_faulted();
                let rank = self.rank().map_or_else(|_| "?".to_string(), |r| r.to_string());
                let ranks = self.count().map_or_else(|_| "?".to_string(), |r| r.to_string());
                return Err(Error::Timeout {
                    operation: OP,
                    waited: timeout,
                    message: format!(
                        "rank {rank} of {ranks}: the stream's work did not finish and NCCL reported no error; a \
                         peer may have died or stopped calling the same collectives. Abort the communicator, \
                         then drop its buffers and streams, and continue with the ranks that remain"
                    ),
                });
            }
            backoff.sleep(deadline);
        }
    }

    /// Makes a communicator of the ranks of this clique but those in `exclude`, renumbered in
    /// order (rank `r` becomes `r` minus the excluded ranks below it)
    /// ([`ncclCommShrink`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/comms.html#ncclcommshrink),
    /// NCCL 2.27). Every remaining rank calls it with the same list; the excluded ranks do not
    /// call it. After a rank died, pass [`ShrinkMode::Abort`]: the work in flight is stopped
    /// first. Fields `config` leaves undefined are inherited from this communicator.
    ///
    /// This communicator stays; [`abort`](Self::abort) it afterwards when it had failed. On a
    /// non-blocking communicator (as [`Bootstrap`](super::Bootstrap) makes) the wait for the
    /// other ranks lasts at most `timeout`, and running past it is an [`Error::Timeout`] that
    /// leaves this communicator [faulted](Self::is_faulted) (NCCL's unfinished shrink is given
    /// up when it is aborted); a blocking one waits inside NCCL without a limit.
    ///
    /// An NCCL older than 2.27 is an [`Error::Load`] naming both versions (make a new
    /// communicator of the remaining ranks instead). An empty list, a rank past the last,
    /// this rank itself, or a call inside a [`Group`](super::Group) is an
    /// [`Error::InvalidArgument`]. NCCL refuses to shrink a communicator that reported an
    /// asynchronous error (a network transport that saw the peer go): that is its
    /// [`Error::Nccl`]; make a new communicator then.
    pub fn shrink(
        &self,
        exclude: &[usize],
        config: &Config,
        mode: ShrinkMode,
        timeout: Duration,
    ) -> Result<Communicator> {
        const OP: &str = "Communicator::shrink";
        require("ncclCommShrink", since::SHRINK)?;
        refuse_in_group(OP)?;
        let mut list = excluded_ranks(OP, exclude, self.count()?, self.rank()?)?;
        let count = i32::try_from(list.len()).map_err(|_| Error::invalid(OP, "too many ranks to exclude"))?;
        let kept = Arc::new(config.clone());
        let mut raw_config = kept.to_raw();
        // NCCL writes the new handle when the shrink completes, which for a non-blocking
        // parent is in the background: the slot is on the heap, and leaked if it is given up.
        let mut slot: Box<nccl::ncclComm_t> = Box::new(std::ptr::null_mut());
        // SAFETY: a live communicator; `list` holds `count` ranks (NCCL copies and sorts it);
        // `slot` lives until the shrink is done or is leaked; `raw_config` is read during the
        // call, and the names it points to (in `kept`) live as long as the new communicator.
        let status = unsafe {
            nccl::ncclCommShrink(
                self.as_raw(),
                list.as_mut_ptr(),
                count,
                &mut *slot,
                &mut raw_config,
                mode.raw(),
            )
        };
        self.status("ncclCommShrink", status)?;
        let deadline = deadline_after(timeout);
        if let Err(e) = self.wait_until(deadline, timeout, OP) {
            self.mark_faulted();
            // The shrink may still write the slot until this communicator is aborted.
            std::mem::forget(slot);
            return Err(e);
        }
        let raw = *slot;
        if raw.is_null() {
            return Err(Error::invalid(
                OP,
                "NCCL made no communicator; check that every remaining rank excluded the same ranks",
            ));
        }
        let blocking = config.is_blocking().unwrap_or(self.is_blocking());
        let mut child = Communicator::wrap(raw, self.context().clone(), blocking);
        child.keep_config(kept);
        child.set_timeout(self.timeout());
        if let Err(e) = child.wait_until(deadline, timeout, OP) {
            child.mark_faulted();
            return Err(e);
        }
        Ok(child)
    }

    /// Polls the background work until it is done, an error shows, or `deadline` passes (an
    /// [`Error::Timeout`] of `operation`).
    fn wait_until(&self, deadline: Instant, timeout: Duration, operation: &'static str) -> Result<()> {
        let mut backoff = Backoff::new();
        while self.poll()? == super::Progress::InProgress {
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    operation,
                    waited: timeout,
                    message:
                        "the other ranks did not complete the call in time; check that every remaining rank \
                              makes it with the same arguments"
                            .into(),
                });
            }
            backoff.sleep(deadline);
        }
        Ok(())
    }
}

/// The ranks to exclude as NCCL takes them, checked: not empty, each below `ranks`, not `me`,
/// without repeats.
pub(crate) fn excluded_ranks(
    operation: &'static str,
    exclude: &[usize],
    ranks: usize,
    me: usize,
) -> Result<Vec<i32>> {
    if exclude.is_empty() {
        return Err(Error::invalid(operation, "no rank to exclude; name the ranks that are gone"));
    }
    let mut list = Vec::with_capacity(exclude.len());
    for &r in exclude {
        if r >= ranks {
            return Err(Error::invalid(
                operation,
                format!("rank {r} is not a rank of this clique of {ranks}"),
            ));
        }
        if r == me {
            return Err(Error::invalid(
                operation,
                format!(
                    "rank {r} is this rank; an excluded rank does not call shrink (abort its communicator)"
                ),
            ));
        }
        let r = i32::try_from(r)
            .map_err(|_| Error::invalid(operation, format!("rank {r} does not fit NCCL's int")))?;
        if list.contains(&r) {
            return Err(Error::invalid(operation, format!("rank {r} is named twice")));
        }
        list.push(r);
    }
    Ok(list)
}

/// The rank that `rank` has in a clique shrunk by `exclude`, or `None` when it is excluded.
///
/// ```
/// use cuhost::nccl::rank_after_shrink;
/// assert_eq!(rank_after_shrink(3, &[1]), Some(2));
/// assert_eq!(rank_after_shrink(0, &[1]), Some(0));
/// assert_eq!(rank_after_shrink(1, &[1]), None);
/// ```
pub fn rank_after_shrink(rank: usize, exclude: &[usize]) -> Option<usize> {
    if exclude.contains(&rank) {
        return None;
    }
    let mut below: Vec<usize> = exclude.iter().copied().filter(|&r| r < rank).collect();
    below.sort_unstable();
    below.dedup();
    Some(rank - below.len())
}
