//! [`Communicator`]: making, querying, splitting and ending NCCL communicators.

use super::config::Config;
use super::handle::{Backoff, Handle, Progress, deadline_after};
use super::id::UniqueId;
use super::version::{at_least, require, since};
use crate::context::Context;
use crate::device::Device;
use crate::error::{Error, Result, check_nccl, nccl_error};
use cuhost_nccl_sys as nccl;
use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One rank of an NCCL clique, on one device
/// ([`ncclComm_t`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/types.html#ncclcomm-t)).
///
/// Made by [`init_all`](Self::init_all), [`init_rank`](Self::init_rank) or
/// [`split`](Self::split). Its calls take `&self`; it may move to another thread but not be
/// used from two at once (`Send`, not `Sync`), as NCCL requires.
///
/// Dropping it destroys it (`ncclCommDestroy`), after the work queued on it, which blocks the
/// dropping thread until that work is done (while a peer is stuck, for as long as it is); an
/// error there is kept in its context (see [`Context::take_deferred_errors`]). One whose wait failed or ran out
/// of time ([`is_faulted`](Self::is_faulted)) is aborted instead, as its work may never end.
/// [`finalize`](Self::finalize) does the same and returns the error instead, and
/// [`abort`](Self::abort) stops the communicator without waiting for its work.
#[derive(Debug)]
pub struct Communicator {
    raw: nccl::ncclComm_t,
    ctx: Context,
    blocking: bool,
    /// The number of ranks, once known (0 before): collectives check lengths against it.
    ranks: Cell<usize>,
    /// The rank of this communicator, once known.
    rank: Cell<Option<usize>>,
    /// The configuration it was made with, whose names NCCL may keep pointers to.
    config: Arc<Config>,
    /// The handle as the groups that used it reach it, and whether a deadline passed or an
    /// error showed while waiting on it: it is aborted, not destroyed, when dropped
    /// (destroying waits for work that may never end).
    shared: Arc<Handle>,
    _not_sync: PhantomData<Cell<()>>,
}

// SAFETY: an NCCL communicator may be used from any thread, one at a time; `Communicator` is
// not `Sync`, so only one thread holds it at a time.
unsafe impl Send for Communicator {}

fn to_int(operation: &'static str, what: &str, value: usize) -> Result<i32> {
    i32::try_from(value)
        .map_err(|_| Error::invalid(operation, format!("{what} {value} does not fit NCCL's int")))
}

/// An [`Error::InvalidArgument`] inside a [`Group`](super::Group): for calls whose results
/// NCCL hands over only when the group ends.
pub(crate) fn refuse_in_group(operation: &'static str) -> Result<()> {
    if super::group::in_group() {
        Err(Error::invalid(
            operation,
            "NCCL would complete this only when the group ends; call it outside the group",
        ))
    } else {
        Ok(())
    }
}

/// Whether the environment makes communicators non-blocking by default.
fn blocking_by_default() -> bool {
    std::env::var("NCCL_COMM_BLOCKING").map_or(true, |v| v.trim() != "0")
}

impl Communicator {
    pub(super) fn wrap(raw: nccl::ncclComm_t, ctx: Context, blocking: bool) -> Communicator {
        Communicator {
            raw,
            ctx,
            blocking,
            ranks: Cell::new(0),
            rank: Cell::new(None),
            config: Arc::default(),
            shared: Arc::new(Handle::new(raw)),
            _not_sync: PhantomData,
        }
    }

    /// Keeps the configuration a communicator was made with (NCCL may keep pointers to its
    /// names).
    pub(super) fn keep_config(&mut self, config: Arc<Config>) {
        self.config = config;
    }

    /// Notes that a wait on the communicator failed or ran out of time: dropping it then
    /// aborts it rather than destroying it.
    pub(super) fn mark_faulted(&self) {
        self.shared.mark_faulted();
    }

    /// Whether a wait on the communicator failed or ran out of time
    /// ([`synchronize`](Self::synchronize)); such a communicator is aborted when dropped.
    pub fn is_faulted(&self) -> bool {
        self.shared.is_faulted()
    }

    /// Makes one communicator per device of `devices`, all of one clique, in this process
    /// ([`ncclCommInitAll`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/comms.html#ncclcomminitall));
    /// the one at index `i` has rank `i`. Each works in its device's primary context.
    ///
    /// An empty list, or a device named twice, is an [`Error::InvalidArgument`].
    pub fn init_all(devices: &[Device]) -> Result<Vec<Communicator>> {
        const OP: &str = "Communicator::init_all";
        if devices.is_empty() {
            return Err(Error::invalid(OP, "no devices were given; name at least one"));
        }
        let mut ordinals = Vec::with_capacity(devices.len());
        for (i, d) in devices.iter().enumerate() {
            if devices[..i].contains(d) {
                return Err(Error::invalid(
                    OP,
                    format!("device {} is named twice; NCCL needs one rank per device", d.ordinal()),
                ));
            }
            ordinals.push(d.as_raw());
        }
        let contexts = devices.iter().map(Context::primary).collect::<Result<Vec<_>>>()?;
        let n = to_int(OP, "the device count", devices.len())?;
        let mut raw = vec![std::ptr::null_mut(); devices.len()];
        // SAFETY: `raw` has room for one handle per device; `ordinals` lists `n` devices.
        check_nccl("ncclCommInitAll", unsafe {
            nccl::ncclCommInitAll(raw.as_mut_ptr(), n, ordinals.as_ptr())
        })?;
        Ok(raw
            .into_iter()
            .zip(contexts)
            .enumerate()
            .map(|(rank, (raw, ctx))| {
                let c = Communicator::wrap(raw, ctx, blocking_by_default());
                c.ranks.set(devices.len());
                c.rank.set(Some(rank));
                c
            })
            .collect())
    }

    /// Makes rank `rank` of a clique of `ranks`, on the device of `ctx`
    /// ([`ncclCommInitRankConfig`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/comms.html#ncclcomminitrankconfig),
    /// or `ncclCommInitRank` when `config` sets nothing). Every rank passes the same `id`.
    ///
    /// A blocking communicator returns once every rank has joined: call this from one thread
    /// (or process) per rank, or for several ranks inside one [`Group`](super::Group). A
    /// non-blocking one ([`Config::blocking`]`(false)`) returns at once; [`wait`](Self::wait)
    /// for it before use.
    ///
    /// `ranks` of 0, or `rank` not below it, is an [`Error::InvalidArgument`].
    pub fn init_rank(
        ctx: &Context,
        id: &UniqueId,
        ranks: usize,
        rank: usize,
        config: &Config,
    ) -> Result<Communicator> {
        const OP: &str = "Communicator::init_rank";
        if rank >= ranks {
            return Err(Error::invalid(OP, format!("rank {rank} is not below the rank count {ranks}")));
        }
        let (n, r) = (to_int(OP, "the rank count", ranks)?, to_int(OP, "rank", rank)?);
        ctx.enter()?;
        let kept = Arc::new(config.clone());
        let mut raw = std::ptr::null_mut();
        let (call, status) = if config.is_default() && !at_least(since::CONFIG)? {
            // SAFETY: one out-parameter; the id is passed by value.
            ("ncclCommInitRank", unsafe { nccl::ncclCommInitRank(&mut raw, n, id.as_raw(), r) })
        } else {
            require("ncclCommInitRankConfig", since::CONFIG)?;
            let mut c = kept.to_raw();
            // SAFETY: one out-parameter; `c` outlives the call, and the names it points to
            // (in `kept`) live as long as the communicator.
            ("ncclCommInitRankConfig", unsafe {
                nccl::ncclCommInitRankConfig(&mut raw, n, id.as_raw(), r, &mut c)
            })
        };
        let blocking = config.is_blocking().unwrap_or_else(blocking_by_default)
            && status != nccl::ncclResult_t::ncclInProgress;
        if status != nccl::ncclResult_t::ncclInProgress {
            check_nccl(call, status)?;
        }
        let mut c = Communicator::wrap(raw, ctx.clone(), blocking);
        c.config = kept;
        c.ranks.set(ranks);
        c.rank.set(Some(rank));
        Ok(c)
    }

    /// Splits the clique: every rank calls this, and the ranks that pass the same `color` form
    /// a new clique, ordered by `key` (then by their rank here)
    /// ([`ncclCommSplit`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/comms.html#ncclcommsplit),
    /// NCCL 2.18). A rank that passes `None` joins none and gets `None`. Fields `config`
    /// leaves undefined are inherited from this communicator.
    ///
    /// Like initialisation, a split waits for every rank, so one thread that drives several
    /// communicators splits them together with [`split_all`](Self::split_all); inside a
    /// [`Group`](super::Group) this is an [`Error::InvalidArgument`] (NCCL hands the new
    /// communicator over only when the group ends). A colour above `i32::MAX` is one too.
    pub fn split(&self, color: Option<u32>, key: i32, config: &Config) -> Result<Option<Communicator>> {
        let mut split = Communicator::split_all(&[self], &[(color, key)], config)?;
        Ok(split.pop().flatten())
    }

    /// Splits several communicators of one clique driven by this thread at once (one
    /// `ncclCommSplit` each, in one group); `splits[i]` is the colour and key of `parents[i]`
    /// (see [`split`](Self::split)). The result has one entry per parent. Lists of different
    /// lengths, or a call inside a [`Group`](super::Group), are an [`Error::InvalidArgument`].
    pub fn split_all(
        parents: &[&Communicator],
        splits: &[(Option<u32>, i32)],
        config: &Config,
    ) -> Result<Vec<Option<Communicator>>> {
        const OP: &str = "Communicator::split_all";
        require("ncclCommSplit", since::SPLIT)?;
        refuse_in_group(OP)?;
        crate::memory::same_len(OP, splits.len(), parents.len())?;
        let mut colors = Vec::with_capacity(splits.len());
        for (color, key) in splits {
            let c = match color {
                Some(c) => i32::try_from(*c)
                    .map_err(|_| Error::invalid(OP, format!("colour {c} is above i32::MAX")))?,
                None => nccl::NCCL_SPLIT_NOCOLOR,
            };
            colors.push((c, *key));
        }
        for p in parents {
            p.ctx.take_deferred()?;
        }
        let kept = Arc::new(config.clone());
        let mut raw_config = kept.to_raw();
        // NCCL writes each new handle into its slot when the split completes, which may be when
        // the group ends or, for non-blocking parents, later: the slots live until then.
        let mut slots: Vec<nccl::ncclComm_t> = vec![std::ptr::null_mut(); parents.len()];
        let group = super::Group::start()?;
        let mut failed = Ok(());
        for ((parent, (color, key)), slot) in parents.iter().zip(&colors).zip(slots.iter_mut()) {
            // SAFETY: a live communicator; `slot` and `raw_config` outlive the split (it
            // completes before this function returns, or the slots are leaked below), and the
            // names `raw_config` points to (in `kept`) live as long as the new communicators.
            let status = unsafe { nccl::ncclCommSplit(parent.raw, *color, *key, slot, &mut raw_config) };
            failed = parent.status("ncclCommSplit", status);
            if failed.is_err() {
                break;
            }
        }
        let ended = group.end();
        let waited = failed
            .and(ended)
            .and_then(|()| parents.iter().filter(|p| !p.blocking).try_for_each(|p| p.wait_until_done(OP)));
        if let Err(e) = waited {
            if parents.iter().any(|p| !p.blocking) {
                // Splits may still complete in the background and write their slots.
                std::mem::forget(slots);
            }
            return Err(e);
        }
        Ok(parents
            .iter()
            .zip(slots)
            .map(|(parent, raw)| {
                (!raw.is_null()).then(|| {
                    let blocking = config.is_blocking().unwrap_or(parent.blocking);
                    let mut c = Communicator::wrap(raw, parent.ctx.clone(), blocking);
                    c.config = kept.clone();
                    c.set_timeout(parent.timeout());
                    c
                })
            })
            .collect())
    }

    /// Adopts a raw communicator, which is destroyed when the value is dropped.
    ///
    /// # Safety
    ///
    /// `raw` is a live communicator on the device of `ctx`, owned by nothing else; `blocking`
    /// says whether it was made blocking.
    pub unsafe fn from_raw(ctx: &Context, raw: nccl::ncclComm_t, blocking: bool) -> Communicator {
        Communicator::wrap(raw, ctx.clone(), blocking)
    }

    /// The raw handle, for the `-sys` functions.
    #[inline]
    pub fn as_raw(&self) -> nccl::ncclComm_t {
        self.raw
    }

    /// The context the communicator works in.
    #[inline]
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Whether the communicator is blocking (see [`Config::blocking`]).
    pub fn is_blocking(&self) -> bool {
        self.blocking
    }

    /// The number of ranks in the clique
    /// ([`ncclCommCount`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/comms.html#ncclcommcount)).
    pub fn count(&self) -> Result<usize> {
        let known = self.ranks.get();
        if known != 0 {
            return Ok(known);
        }
        let mut n = 0;
        // SAFETY: a live communicator; one out-parameter.
        check_nccl("ncclCommCount", unsafe { nccl::ncclCommCount(self.raw, &mut n) })?;
        let n = usize::try_from(n).unwrap_or(0);
        self.ranks.set(n);
        Ok(n)
    }

    /// This communicator's rank in the clique
    /// ([`ncclCommUserRank`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/comms.html#ncclcommuserrank)).
    pub fn rank(&self) -> Result<usize> {
        if let Some(r) = self.rank.get() {
            return Ok(r);
        }
        let mut r = 0;
        // SAFETY: a live communicator; one out-parameter.
        check_nccl("ncclCommUserRank", unsafe { nccl::ncclCommUserRank(self.raw, &mut r) })?;
        let r = usize::try_from(r).unwrap_or(0);
        self.rank.set(Some(r));
        Ok(r)
    }

    /// The device the communicator works on, as NCCL reports it
    /// ([`ncclCommCuDevice`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/comms.html#ncclcommcudevice)).
    pub fn device(&self) -> Result<Device> {
        let mut d = 0;
        // SAFETY: a live communicator; one out-parameter.
        check_nccl("ncclCommCuDevice", unsafe { nccl::ncclCommCuDevice(self.raw, &mut d) })?;
        Device::get(d)
    }

    /// Where the communicator's background work stands
    /// ([`ncclCommGetAsyncError`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/comms.html#ncclcommgetasyncerror)).
    /// An error of that work (a peer that went away, a network failure) is returned as an
    /// [`Error::Nccl`] naming `ncclCommGetAsyncError`; after one, [`abort`](Self::abort) the
    /// communicator.
    pub fn poll(&self) -> Result<Progress> {
        let mut state = nccl::ncclResult_t::ncclSuccess;
        // SAFETY: a live communicator; one out-parameter.
        check_nccl("ncclCommGetAsyncError", unsafe { nccl::ncclCommGetAsyncError(self.raw, &mut state) })?;
        match state {
            nccl::ncclResult_t::ncclSuccess => Ok(Progress::Done),
            nccl::ncclResult_t::ncclInProgress => Ok(Progress::InProgress),
            failed => Err(nccl_error("ncclCommGetAsyncError", failed)),
        }
    }

    /// The error of the communicator's background work, if there is one: `Ok(None)` while all
    /// is well (finished or in progress), `Ok(Some(error))` after an asynchronous failure, and
    /// `Err` when the query itself failed
    /// ([`ncclCommGetAsyncError`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/comms.html#ncclcommgetasyncerror)).
    pub fn async_error(&self) -> Result<Option<Error>> {
        match self.poll() {
            Ok(_) => Ok(None),
            Err(e @ Error::Nccl { call: "ncclCommGetAsyncError", .. }) => Ok(Some(e)),
            Err(e) => Err(e),
        }
    }

    /// Waits until the background work is done, an error shows, or `timeout` passes; returns
    /// [`Progress::InProgress`] when the time ran out first. It queries at growing intervals
    /// (from a few microseconds to a millisecond) and sleeps in between rather than spinning.
    pub fn wait(&self, timeout: Duration) -> Result<Progress> {
        let deadline = deadline_after(timeout);
        let mut backoff = Backoff::new();
        loop {
            if self.poll()? == Progress::Done {
                return Ok(Progress::Done);
            }
            if Instant::now() >= deadline {
                return Ok(Progress::InProgress);
            }
            backoff.sleep(deadline);
        }
    }

    /// Waits until the background work is done, for at most the communicator's
    /// [time limit](Self::timeout); an error, or the time running out (an [`Error::Timeout`]
    /// of `operation`), marks the communicator [faulted](Self::is_faulted).
    pub(crate) fn wait_until_done(&self, operation: &'static str) -> Result<()> {
        self.shared.wait_until_done(operation)
    }

    /// How long the crate's own waits for the communicator's background work may last, if
    /// they have a limit: those of a call that NCCL answers `ncclInProgress` (waiting until
    /// it has queued the work, see [`Group`](super::Group)), of [`split_all`](Self::split_all),
    /// [`finalize`](Self::finalize), [`finalize_all`](Self::finalize_all) and
    /// [`register_window`](Self::register_window). Past it they fail with an
    /// [`Error::Timeout`] and the communicator is [faulted](Self::is_faulted) (abort it).
    ///
    /// A communicator from [`init_rank_within`](Self::init_rank_within) (and so from
    /// [`Bootstrap`](super::Bootstrap)) has the time limit given there; one split or shrunk
    /// from another has its parent's; others have none (`None`): their waits last until NCCL
    /// is done or reports an error.
    pub fn timeout(&self) -> Option<Duration> {
        self.shared.timeout()
    }

    /// Sets the time limit of [`timeout`](Self::timeout) (`None`: none). A timeout past what
    /// an [`Instant`] holds means none.
    pub fn set_timeout(&self, timeout: Option<Duration>) {
        self.shared.set_timeout(timeout);
    }

    /// Flushes the work queued on the communicator, then destroys it, returning what failed
    /// ([`ncclCommFinalize`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/comms.html#ncclcommfinalize),
    /// NCCL 2.14, then `ncclCommDestroy`). A non-blocking communicator is waited for (see
    /// [`wait`](Self::wait)) between the two. The communicator is destroyed even when the
    /// flush failed.
    ///
    /// A flush may wait for the other ranks to flush too: one thread that drives several
    /// communicators finalizes them with [`finalize_all`](Self::finalize_all). Inside a
    /// [`Group`](super::Group) (where NCCL would flush only when the group ends) this is an
    /// [`Error::InvalidArgument`], and the communicator is destroyed as by `Drop`.
    ///
    /// A [faulted](Self::is_faulted) communicator is aborted instead (its flush could wait
    /// forever), and this returns an [`Error::InvalidArgument`] saying so.
    pub fn finalize(self) -> Result<()> {
        refuse_in_group("Communicator::finalize")?;
        if self.is_faulted() {
            self.abort()?;
            return Err(Error::invalid(
                "Communicator::finalize",
                "a wait on this communicator failed or timed out, so it was aborted rather than finalized; abort faulted communicators",
            ));
        }
        let this = std::mem::ManuallyDrop::new(self);
        let flushed = (|| {
            if !at_least(since::CONFIG)? {
                return Ok(());
            }
            // SAFETY: a live communicator, finalized once.
            this.status("ncclCommFinalize", unsafe { nccl::ncclCommFinalize(this.raw) })?;
            this.wait_until_done("Communicator::finalize")
        })();
        // SAFETY: the communicator is destroyed once and `this` is not used or dropped again.
        let destroyed =
            this.status("ncclCommDestroy", this.shared.end(|raw| unsafe { nccl::ncclCommDestroy(raw) }));
        // SAFETY: the fields that own something are moved out once; `this` is never dropped.
        drop(unsafe { this.take_owned() });
        flushed.and(destroyed)
    }

    /// [`finalize`](Self::finalize) for several communicators driven by this thread (as made
    /// by [`init_all`](Self::init_all)): their flushes start together in one group, so that
    /// none waits on a peer that is not flushing yet; then each is destroyed. Every one is
    /// destroyed; the first error is returned. Inside a [`Group`](super::Group) this is an
    /// [`Error::InvalidArgument`], and the communicators are destroyed as by `Drop`.
    pub fn finalize_all(comms: Vec<Communicator>) -> Result<()> {
        refuse_in_group("Communicator::finalize_all")?;
        let comms: Vec<_> = comms.into_iter().map(std::mem::ManuallyDrop::new).collect();
        let flushed = (|| {
            if !at_least(since::CONFIG)? {
                return Ok(());
            }
            super::group(|| {
                comms.iter().try_for_each(|c| {
                    // SAFETY: a live communicator, finalized once.
                    c.status("ncclCommFinalize", unsafe { nccl::ncclCommFinalize(c.raw) })
                })
            })?;
            comms
                .iter()
                .filter(|c| !c.blocking)
                .try_for_each(|c| c.wait_until_done("Communicator::finalize_all"))
        })();
        let mut result = flushed;
        for c in comms {
            // SAFETY: each communicator is destroyed once and never used or dropped again.
            let destroyed =
                c.status("ncclCommDestroy", c.shared.end(|raw| unsafe { nccl::ncclCommDestroy(raw) }));
            result = result.and(destroyed);
            // SAFETY: the fields that own something are moved out once; `c` is never dropped.
            drop(unsafe { c.take_owned() });
        }
        result
    }

    /// Stops the communicator at once and frees it, also while its work waits on peers that
    /// will never come: kernels that wait on it end, and its streams move on
    /// ([`ncclCommAbort`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/comms.html#ncclcommabort)).
    /// What those kernels wrote is undefined.
    pub fn abort(self) -> Result<()> {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: a live communicator, freed once; `this` is not used or dropped again.
        let r = this.status("ncclCommAbort", this.shared.end(|raw| unsafe { nccl::ncclCommAbort(raw) }));
        // SAFETY: the fields that own something are moved out once; `this` is never dropped.
        drop(unsafe { this.take_owned() });
        r
    }

    /// Moves out the fields that own something, for the ends that do not drop the value.
    ///
    /// # Safety
    ///
    /// Called once, on a value that is never used or dropped afterwards.
    unsafe fn take_owned(&self) -> (Context, Arc<Config>, Arc<Handle>) {
        // SAFETY: the caller's contract: each field is read out once and never dropped in place.
        unsafe { (std::ptr::read(&self.ctx), std::ptr::read(&self.config), std::ptr::read(&self.shared)) }
    }

    /// Turns the status of a call that queues work on a stream into a `Result`, as
    /// [`status`](Self::status) does. A non-blocking communicator that is still queueing the
    /// work in the background (`ncclInProgress`) outside a group is waited for until it has:
    /// memory given back afterwards, in the order of that stream, must come after the work.
    /// (Inside a group the work is queued when the group ends.)
    #[inline]
    pub(crate) fn queued(&self, call: &'static str, status: nccl::ncclResult_t) -> Result<()> {
        self.status(call, status)?;
        if status == nccl::ncclResult_t::ncclInProgress && !super::group::in_group() {
            self.wait_until_done(call)?;
        }
        Ok(())
    }

    /// Turns a status of a call on this communicator into a `Result`: `ncclInProgress` is
    /// success on a non-blocking communicator (the call goes on in the background).
    #[inline]
    pub(crate) fn status(&self, call: &'static str, status: nccl::ncclResult_t) -> Result<()> {
        if !self.blocking {
            // Its part of a group's work may be queued after the group's end returns.
            super::group::note_communicator(&self.shared);
        }
        if status == nccl::ncclResult_t::ncclSuccess
            || (status == nccl::ncclResult_t::ncclInProgress && !self.blocking)
        {
            Ok(())
        } else {
            Err(nccl_error(call, status))
        }
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        // A faulted communicator's work may wait for a peer that is gone, and destroying it
        // would wait for that work: abort it instead.
        let (call, status) = if self.is_faulted() {
            // SAFETY: a live communicator, freed once.
            ("ncclCommAbort", self.shared.end(|raw| unsafe { nccl::ncclCommAbort(raw) }))
        } else {
            // SAFETY: a live communicator, destroyed once.
            ("ncclCommDestroy", self.shared.end(|raw| unsafe { nccl::ncclCommDestroy(raw) }))
        };
        if status != nccl::ncclResult_t::ncclSuccess && status != nccl::ncclResult_t::ncclInProgress {
            self.ctx.defer(nccl_error(call, status).dropping("Communicator", None));
        }
    }
}

/// An [`Error::InvalidArgument`] unless `ctx` is on the communicator's device.
#[inline]
pub(crate) fn same_device(operation: &'static str, comm: &Communicator, ctx: &Context) -> Result<()> {
    let (mine, theirs) = (comm.context().device(), ctx.device());
    if mine == theirs {
        Ok(())
    } else {
        Err(Error::invalid(
            operation,
            format!(
                "the communicator works on device {} but the memory or stream is on device {}; use those of its device",
                mine.ordinal(),
                theirs.ordinal()
            ),
        ))
    }
}
