//! [`Group`]: NCCL calls issued together (`ncclGroupStart` / `ncclGroupEnd`).

use super::handle::Handle;
use super::version::{require, since};
use crate::error::{Error, Result, check_nccl};
use crate::track::scopes;
use cuhost_nccl_sys as nccl;
use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::sync::Arc;

thread_local! {
    /// An error of a `ncclGroupEnd` run by a dropped guard, for the next `Group::start`.
    static DEFERRED: RefCell<Option<Error>> = const { RefCell::new(None) };
    /// How many guards are open on this thread.
    static DEPTH: Cell<usize> = const { Cell::new(0) };
    /// The id of the outermost group open on this thread, 0 for none.
    static CURRENT: Cell<u64> = const { Cell::new(0) };
    /// The non-blocking communicators the open group's calls used: its end waits until NCCL
    /// has queued their calls.
    static USED: RefCell<Vec<Arc<Handle>>> = const { RefCell::new(Vec::new()) };
}

/// Notes that a call of the group open on this thread, if any, used the non-blocking
/// communicator of `handle`.
pub(crate) fn note_communicator(handle: &Arc<Handle>) {
    if !in_group() {
        return;
    }
    let _ = USED.try_with(|used| {
        let mut used = used.borrow_mut();
        if !used.iter().any(|h| Arc::ptr_eq(h, handle)) {
            used.push(Arc::clone(handle));
        }
    });
}

/// Whether a [`Group`] is open on this thread.
pub(crate) fn in_group() -> bool {
    DEPTH.try_with(Cell::get).unwrap_or(0) > 0
}

/// The id of the group open on this thread (the outermost one, whose end queues the calls).
#[inline]
pub(crate) fn current_group() -> Option<u64> {
    CURRENT.try_with(Cell::get).ok().filter(|&id| id != 0)
}

fn enter() {
    let _ = DEPTH.try_with(|d| {
        if d.get() == 0 {
            let id = scopes::open_scope();
            let _ = CURRENT.try_with(|c| c.set(id));
        }
        d.set(d.get() + 1);
    });
}

/// Leaves one group level; when it was the outermost, returns the group's scope and the
/// non-blocking communicators its calls used.
fn leave() -> Option<(u64, Vec<Arc<Handle>>)> {
    let outermost = DEPTH
        .try_with(|d| {
            d.set(d.get().saturating_sub(1));
            d.get() == 0
        })
        .unwrap_or(false);
    if !outermost {
        return None;
    }
    let id = CURRENT.try_with(|c| c.replace(0)).unwrap_or(0);
    let used = USED.try_with(|u| std::mem::take(&mut *u.borrow_mut())).unwrap_or_default();
    Some((id, used))
}

/// Closes the group's scope: the releases of memory dropped inside it run, in the order of
/// the streams it was used on when the calls are `queued`, and keep the memory otherwise;
/// when not queued, memory the group used and dropped later is kept too.
fn close(id: u64, queued: bool) {
    let releases = if queued { scopes::close_scope(id) } else { scopes::abandon_scope(id) };
    for release in releases {
        release(queued);
    }
}

/// Ends the group level: `ncclGroupEnd` and, at the outermost level, the group's scope.
///
/// Memory a call of the group uses may be given back in stream order only once NCCL has
/// queued the call. On non-blocking communicators NCCL may still be queueing the calls in the
/// background when `ncclGroupEnd` returns (`ncclInProgress`): this waits, communicator by
/// communicator, until it has (as a call outside a group does), so that memory the group used
/// and dropped afterwards, and later uses on other streams, come after the calls. When the
/// wait fails, the memory is kept (a leak, reported) and the wait's error returned.
fn end_level() -> Result<()> {
    // SAFETY: a guard's `ncclGroupStart` is still open.
    let status = unsafe { nccl::ncclGroupEnd() };
    let ended = end_status(status);
    let Some((id, used)) = leave() else { return ended };
    let waited = if status == nccl::ncclResult_t::ncclInProgress {
        used.iter().try_for_each(|h| h.wait_until_done("Group::end"))
    } else {
        Ok(())
    };
    // The calls are queued now (or failed).
    close(id, waited.is_ok());
    ended.and(waited)
}

/// NCCL calls made on this thread while the guard lives are issued together when it ends
/// ([`ncclGroupStart`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/group.html#ncclgroupstart)
/// / `ncclGroupEnd`): one thread driving several communicators, a set of sends and receives
/// that would block each other, or several collectives fused into one launch.
///
/// End it with [`end`](Self::end) to see errors. Dropped without `end` (on an early return or
/// a panic), it ends the group anyway; an error there is returned by the next
/// [`Group::start`] on this thread or read with [`take_deferred_group_error`]. Groups nest;
/// the calls are issued when the outermost ends. The guard stays on its thread, as NCCL's
/// group state is per thread; several threads may each hold a group at once.
///
/// On non-blocking communicators `ncclGroupEnd` may answer while NCCL still queues the calls
/// in the background (`ncclInProgress`): the end then waits, communicator by communicator,
/// until NCCL has queued them (as each call outside a group does), so that when it returns the
/// calls are on their streams and memory they use follows the stream rule as after any other
/// call. The calls may still be running: wait for their streams as usual.
///
/// Memory a call in the group uses may be dropped before the group ends: NCCL queues the call
/// only at the end, so a [`DeviceBuffer`](crate::memory::DeviceBuffer) is then given back after the
/// group has queued its calls, in the order of the streams they run on; other owners of device
/// memory (a VMM [`Mapping`](crate::vmm::Mapping), a
/// [`GrowableBuffer`](crate::vmm::GrowableBuffer)) keep (leak) it and report why in their
/// context's deferred errors, and so does a `DeviceBuffer` the group used when the wait for
/// its non-blocking communicators failed (then it cannot be known when NCCL queues the calls).
/// The memory is never reused under the group's calls.
#[derive(Debug)]
#[must_use = "the group ends as soon as the guard is dropped"]
pub struct Group {
    ended: bool,
    _not_send: PhantomData<*const ()>,
}

impl Group {
    /// Starts a group on this thread. An error kept from a guard dropped earlier on this thread
    /// is returned first (and the group is not started).
    pub fn start() -> Result<Group> {
        if let Some(e) = take_deferred_group_error() {
            return Err(e);
        }
        // SAFETY: no arguments; group state is per thread.
        check_nccl("ncclGroupStart", unsafe { nccl::ncclGroupStart() })?;
        enter();
        Ok(Group { ended: false, _not_send: PhantomData })
    }

    /// Ends the group: the calls made in it are issued
    /// ([`ncclGroupEnd`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/group.html#ncclgroupend)).
    /// `ncclInProgress` (non-blocking communicators still working) counts as success, once
    /// NCCL has queued the calls (see above).
    ///
    /// Fails with NCCL's status when a call of the group could not be issued; memory dropped
    /// inside the group is given back either way. Fails with the error of a non-blocking
    /// communicator met while waiting for it to queue the calls (the communicator is then
    /// [faulted](super::Communicator::is_faulted)); memory the group used is then kept.
    pub fn end(mut self) -> Result<()> {
        self.ended = true;
        end_level()
    }

    /// Ends the group without running it and returns NCCL's estimate of how long its calls
    /// would take, in microseconds
    /// ([`ncclGroupSimulateEnd`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/group.html#ncclgroupsimulateend),
    /// NCCL 2.22).
    ///
    /// An NCCL older than 2.22 is an [`Error::Load`](crate::error::Error::Load) naming both versions;
    /// the guard then drops, and its `ncclGroupEnd` issues the group's calls.
    pub fn simulate_end(mut self) -> Result<f32> {
        require("ncclGroupSimulateEnd", since::SIMULATE)?;
        let mut info = nccl::NCCL_SIM_INFO_INITIALIZER;
        self.ended = true;
        // SAFETY: this guard's `ncclGroupStart` is still open; one out-parameter, initialised
        // as `NCCL_SIM_INFO_INITIALIZER` does.
        let status = unsafe { nccl::ncclGroupSimulateEnd(&mut info) };
        // Nothing was queued: memory dropped inside the group can go back.
        if let Some((id, _)) = leave() {
            close(id, true);
        }
        end_status(status)?;
        Ok(info.estimatedTime)
    }
}

fn end_status(status: nccl::ncclResult_t) -> Result<()> {
    if status == nccl::ncclResult_t::ncclInProgress { Ok(()) } else { check_nccl("ncclGroupEnd", status) }
}

impl Drop for Group {
    fn drop(&mut self) {
        if !self.ended {
            if let Err(e) = end_level() {
                // The thread-local may already be gone while the thread exits.
                let _ = DEFERRED.try_with(|d| d.borrow_mut().get_or_insert(e).clone());
            }
        }
    }
}

/// Runs `f` inside a [`Group`] and ends it: `f`'s error wins; otherwise `ncclGroupEnd`'s.
///
/// The calls `f` made before its error are still issued when the group ends, and a collective
/// issued on some ranks only waits on the GPU for the others: after an error, abort the
/// communicators whose calls did not all go out (or issue the missing ones).
///
/// ```no_run
/// # use cuhost::nccl::{Communicator, ReduceOp, group};
/// # use cuhost::{DeviceBuffer, Stream};
/// # fn f(comms: &[Communicator], bufs: &mut [DeviceBuffer<f32>], streams: &[Stream]) -> cuhost::Result<()> {
/// group(|| {
///     for ((comm, buf), stream) in comms.iter().zip(bufs.iter_mut()).zip(streams) {
///         comm.all_reduce_in_place(buf, ReduceOp::Sum, stream)?;
///     }
///     Ok(())
/// })
/// # }
/// ```
pub fn group<R>(f: impl FnOnce() -> Result<R>) -> Result<R> {
    let g = Group::start()?;
    match f() {
        Ok(r) => g.end().map(|()| r),
        Err(e) => {
            // The calls made so far are issued; the first error is what the caller sees.
            let _ = g.end();
            Err(e)
        }
    }
}

/// The error of a `ncclGroupEnd` that a dropped [`Group`] ran on this thread, if any; reading
/// it clears it.
pub fn take_deferred_group_error() -> Option<Error> {
    DEFERRED.try_with(|d| d.borrow_mut().take()).ok().flatten()
}
