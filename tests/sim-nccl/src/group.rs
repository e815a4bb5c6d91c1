//! Calls and groups: a call outside a group is queued at once; inside one
//! (`ncclGroupStart`, nested or not) it is kept, with the owner epoch of when it was made, and
//! queued when the outermost group ends, as NCCL queues a group's calls at `ncclGroupEnd`.
//!
//! With one rank, every call is a copy on the device: a collective copies its send memory to
//! its receive memory (onto itself in place, so that the checker sees the call write it), and
//! each receive of a group takes the bytes of the group's send of the same rank in the same
//! order. The calls of one communicator run on the first stream they name; the other streams
//! wait for it before and after, as NCCL makes the streams of a group wait for each other.

use crate::driver::{Driver, driver};
use crate::{IN_PROGRESS, INVALID_USAGE, SUCCESS, UNHANDLED_CUDA_ERROR};
use std::cell::RefCell;
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

/// Whether groups end as on non-blocking communicators ([`set_in_progress`]).
static IN_PROGRESS_MODE: AtomicBool = AtomicBool::new(false);
/// Whether the kept calls are never queued: the background work of a peer that is stuck.
static STUCK: AtomicBool = AtomicBool::new(false);
/// The calls of groups that ended in progress, not queued yet.
static PENDING: Mutex<Vec<Call>> = Mutex::new(Vec::new());

/// While `on`, the outermost `ncclGroupEnd` keeps its calls and answers `ncclInProgress`, as
/// NCCL may for non-blocking communicators; [`queue_pending`] queues them later, unless
/// `stuck`: then it never does, and says in progress.
pub(crate) fn set_in_progress(on: bool, stuck: bool) {
    IN_PROGRESS_MODE.store(on, Ordering::SeqCst);
    STUCK.store(stuck, Ordering::SeqCst);
}

/// Queues the kept calls of `comm` (its background work, done when this returns).
pub(crate) fn queue_pending(comm: usize) -> c_int {
    if STUCK.load(Ordering::SeqCst) {
        let pending = PENDING.lock().unwrap_or_else(PoisonError::into_inner);
        return if pending.iter().any(|c| c.comm == comm) { IN_PROGRESS } else { SUCCESS };
    }
    let mine: Vec<Call> = {
        let mut pending = PENDING.lock().unwrap_or_else(PoisonError::into_inner);
        let (mine, others) = pending.drain(..).partition(|c| c.comm == comm);
        *pending = others;
        mine
    };
    if mine.is_empty() { SUCCESS } else { queue(&mine) }
}

/// What a call moves.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Work {
    /// A collective: `bytes` from `src` to `dst`.
    Copy {
        /// The receive memory.
        dst: u64,
        /// The send memory.
        src: u64,
    },
    /// `ncclSend` of the memory at `src`.
    Send {
        /// The send memory.
        src: u64,
    },
    /// `ncclRecv` into the memory at `dst`.
    Recv {
        /// The receive memory.
        dst: u64,
    },
}

/// One call, as made.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Call {
    /// The communicator.
    pub(crate) comm: usize,
    /// The stream (`cudaStream_t`, the driver's `CUstream`).
    pub(crate) stream: usize,
    /// What it moves.
    pub(crate) work: Work,
    /// How many bytes.
    pub(crate) bytes: u64,
    /// The newest owner epoch when the call was made (0: queued as it is made).
    pub(crate) issued: u64,
}

/// One copy to queue, and the epochs of the calls its read and its write belong to.
struct Planned {
    dst: u64,
    src: u64,
    bytes: u64,
    as_of: (u64, u64),
}

#[derive(Default)]
struct Group {
    depth: usize,
    calls: Vec<Call>,
}

thread_local! {
    /// The groups open on this thread (NCCL's group state is per thread) and their calls.
    static GROUP: RefCell<Group> = RefCell::new(Group::default());
}

/// `ncclGroupStart`.
pub(crate) fn start() -> c_int {
    GROUP.with(|g| g.borrow_mut().depth += 1);
    SUCCESS
}

/// `ncclGroupEnd`: the outermost end queues the group's calls.
pub(crate) fn end() -> c_int {
    let calls = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return None;
        }
        g.depth -= 1;
        Some(if g.depth == 0 { std::mem::take(&mut g.calls) } else { Vec::new() })
    });
    match calls {
        None => INVALID_USAGE,
        Some(calls) if !calls.is_empty() && IN_PROGRESS_MODE.load(Ordering::SeqCst) => {
            PENDING.lock().unwrap_or_else(PoisonError::into_inner).extend(calls);
            IN_PROGRESS
        }
        Some(calls) => queue(&calls),
    }
}

/// Makes a checked call: kept inside a group (with the owner epoch of now), queued outside.
pub(crate) fn issue(mut call: Call) -> c_int {
    let in_group = GROUP.with(|g| g.borrow().depth > 0);
    if !in_group {
        return queue(&[call]);
    }
    call.issued = driver().map_or(0, Driver::owner_epoch);
    GROUP.with(|g| g.borrow_mut().calls.push(call));
    SUCCESS
}

/// Queues `calls`, communicator by communicator; nothing when a send or receive has no
/// partner.
fn queue(calls: &[Call]) -> c_int {
    let mut comms: Vec<usize> = Vec::new();
    for c in calls {
        if !comms.contains(&c.comm) {
            comms.push(c.comm);
        }
    }
    let mut plans = Vec::with_capacity(comms.len());
    for &comm in &comms {
        let mine: Vec<Call> = calls.iter().copied().filter(|c| c.comm == comm).collect();
        match plan(&mine) {
            Some(p) => plans.push((streams_of(&mine), p)),
            None => return INVALID_USAGE,
        }
    }
    if plans.is_empty() {
        return SUCCESS;
    }
    let Some(driver) = driver() else { return UNHANDLED_CUDA_ERROR };
    for (streams, copies) in plans {
        if run(driver, &streams, &copies).is_err() {
            return UNHANDLED_CUDA_ERROR;
        }
    }
    SUCCESS
}

/// The streams of `calls`, in the order they first appear.
fn streams_of(calls: &[Call]) -> Vec<usize> {
    let mut streams = Vec::new();
    for c in calls {
        if !streams.contains(&c.stream) {
            streams.push(c.stream);
        }
    }
    streams
}

/// The copies of one communicator's calls: the collectives in order, then each receive with
/// the send of the same place in order; `None` when the sends and receives do not pair up.
fn plan(calls: &[Call]) -> Option<Vec<Planned>> {
    let mut copies = Vec::new();
    let (mut sends, mut recvs) = (Vec::new(), Vec::new());
    for c in calls {
        match c.work {
            Work::Copy { dst, src } => {
                copies.push(Planned { dst, src, bytes: c.bytes, as_of: (c.issued, c.issued) })
            }
            Work::Send { src } => sends.push((src, c.bytes, c.issued)),
            Work::Recv { dst } => recvs.push((dst, c.bytes, c.issued)),
        }
    }
    if sends.len() != recvs.len() {
        return None;
    }
    for ((src, sent, s_issued), (dst, bytes, r_issued)) in sends.into_iter().zip(recvs) {
        if sent != bytes {
            return None;
        }
        copies.push(Planned { dst, src, bytes, as_of: (s_issued, r_issued) });
    }
    Some(copies)
}

/// Queues `copies` on the first of `streams`, the others waiting for it before and after.
fn run(driver: &Driver, streams: &[usize], copies: &[Planned]) -> Result<(), crate::driver::Failed> {
    let Some((&first, others)) = streams.split_first() else { return Ok(()) };
    for &s in others {
        driver.wait(first, s)?;
    }
    for c in copies.iter().filter(|c| c.bytes > 0) {
        driver.copy(c.dst, c.src, c.bytes, first, c.as_of)?;
    }
    for &s in others {
        driver.wait(s, first)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(work: Work, bytes: u64, issued: u64) -> Call {
        Call { comm: 1, stream: 2, work, bytes, issued }
    }

    #[test]
    fn receives_take_the_sends_in_order_with_the_epochs_of_both_calls() {
        let calls = [
            call(Work::Send { src: 0x100 }, 8, 3),
            call(Work::Copy { dst: 0x300, src: 0x400 }, 4, 4),
            call(Work::Recv { dst: 0x200 }, 8, 5),
        ];
        let planned = plan(&calls).unwrap_or_default();
        let got: Vec<_> = planned.iter().map(|p| (p.dst, p.src, p.bytes, p.as_of)).collect();
        assert_eq!(got, [(0x300, 0x400, 4, (4, 4)), (0x200, 0x100, 8, (3, 5))]);
        assert!(plan(&calls[..2]).is_none(), "a send without its receive was planned");
        let other_size = [calls[0], call(Work::Recv { dst: 0x200 }, 4, 5)];
        assert!(plan(&other_size).is_none(), "a receive of another size was planned");
    }

    #[test]
    fn only_the_outermost_end_queues_and_an_unpaired_send_is_refused() {
        // With no simulated driver loaded, queueing anything fails: what shows when it is tried.
        assert_eq!(end(), INVALID_USAGE, "an end without a start");
        assert_eq!(start(), SUCCESS);
        assert_eq!(start(), SUCCESS);
        assert_eq!(issue(call(Work::Copy { dst: 0x300, src: 0x400 }, 4, 0)), SUCCESS);
        assert_eq!(end(), SUCCESS, "the inner end queued the call");
        assert_eq!(end(), UNHANDLED_CUDA_ERROR, "the outer end did not try to queue the call");
        assert_eq!(start(), SUCCESS);
        assert_eq!(issue(call(Work::Send { src: 0x100 }, 8, 0)), SUCCESS);
        assert_eq!(end(), INVALID_USAGE);
    }
}
