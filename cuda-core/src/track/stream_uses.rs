//! [`StreamUses`]: the streams other than its own on which work touching a piece of memory was
//! queued, so that giving the memory back waits for them.
//!
//! The second part of [the rule](super): noting costs nothing on the owner's own stream (one
//! comparison of raw handles), and on another stream a lock and, the first time, one handle
//! clone and the wait for the own stream ([`wait_for`]); no event is recorded per operation.
//! The release takes the noted streams ([`StreamUses::take_for_release`]) and orders itself
//! after them ([`order_after`]), or waits for them on the host
//! ([`StreamUses::synchronize_for_release`]).

use super::captured::{GraphAlloc, Retained, order_captured_use};
use super::ordering::{self, Access, LastUses};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::stream::capturing::{self, CaptureRef};
use crate::stream::{Stream, capture_of, other_threads_stream};
use cuhost_driver_sys as sys;
use std::sync::{Arc, Mutex, PoisonError};

/// The foreign streams that work touching one piece of memory was queued on.
///
/// Memory used on its own stream only never allocates the list: one word, checked once when
/// the memory is given back.
#[derive(Debug, Default)]
pub(crate) struct StreamUses {
    inner: Mutex<Option<Box<Noted>>>,
}

#[derive(Debug, Default)]
struct Noted {
    streams: Vec<Stream>,
    /// The scopes (NCCL groups, see [`scopes`](super::scopes)) whose work uses the memory
    /// and is queued only when they end; closed ones are dropped as new ones come.
    groups: Vec<u64>,
    /// For memory allocated in a capture (a graph memory node): its allocation, which says
    /// where the memory may be used.
    graph: Option<Arc<GraphAlloc>>,
    /// For memory allocated outside: the cell that the graphs of the captures that used it
    /// hold, to which the release is handed (see [`captured`](super::captured)).
    retained: Option<Arc<Retained>>,
    /// The (capture, stream, generation) of each first captured use that was ordered: while
    /// the count of ended captures ([`capturing::generation`]) still reads the same, the
    /// stream is still in that capture, and a use there needs nothing more. Entries of captures
    /// that ended are dropped as new ones come.
    captured: Vec<(u64, usize, u64)>,
    /// Set for owners whose release cannot be handed to a graph (mappings, globals, imported
    /// tensors, graphics resources, arrays): captured work on their memory is refused.
    unretained: bool,
    /// The last write and the reads since, for [`StreamOrdering::Implicit`](ordering::StreamOrdering).
    last: LastUses,
}

impl StreamUses {
    /// No stream noted.
    pub(crate) const fn new() -> StreamUses {
        StreamUses { inner: Mutex::new(None) }
    }

    /// No stream noted, for an owner whose release waits for its noted streams itself and
    /// cannot be handed to a graph: captured work on its memory is refused (an
    /// [`Error::InvalidArgument`]). Allocates the list at once (these owners are not made on
    /// hot paths).
    pub(crate) fn unretained() -> StreamUses {
        let noted = Noted { unretained: true, ..Noted::default() };
        StreamUses { inner: Mutex::new(Some(Box::new(noted))) }
    }

    /// The uses of memory allocated in a capture: `alloc` says where it may be used.
    pub(crate) fn graph(alloc: Arc<GraphAlloc>) -> StreamUses {
        let noted = Noted { graph: Some(alloc), ..Noted::default() };
        StreamUses { inner: Mutex::new(Some(Box::new(noted))) }
    }

    #[inline]
    fn noted(&mut self) -> Option<&mut Noted> {
        self.inner.get_mut().unwrap_or_else(PoisonError::into_inner).as_deref_mut()
    }

    /// Whether a list was ever made: only then does dropping `self` free anything.
    #[inline]
    pub(crate) fn holds_list(&mut self) -> bool {
        self.inner.get_mut().unwrap_or_else(PoisonError::into_inner).is_some()
    }

    /// The list, made on first use, under the lock.
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Box<Noted>>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether nothing is noted: no other stream, no open scope. The release of memory used on
    /// its own stream only checks this and nothing more.
    #[inline]
    pub(crate) fn is_untouched(&mut self) -> bool {
        self.noted().is_none_or(|n| {
            n.streams.is_empty() && n.groups.is_empty() && n.retained.is_none() && n.graph.is_none()
        })
    }

    /// Takes the cell that graphs which captured work on the memory hold, if any: the release
    /// is handed to it.
    pub(crate) fn take_retained(&mut self) -> Option<Arc<Retained>> {
        self.noted()?.retained.take()
    }

    /// Refuses a synchronous copy or memset of memory allocated in a capture: outside it the
    /// memory does not exist, and inside it a synchronous call would break the capture.
    #[cold]
    pub(crate) fn check_sync(&self) -> Result<()> {
        match self.lock().as_ref().is_some_and(|n| n.graph.is_some()) {
            true => Err(super::captured::outside_capture()),
            false => Ok(()),
        }
    }

    #[cfg(feature = "nccl")]
    /// Notes that work of the open scope `group` (an NCCL group, not yet queued) uses the
    /// memory.
    pub(crate) fn note_group(&self, group: u64) {
        let mut guard = self.lock();
        let noted = guard.get_or_insert_with(Box::default);
        if !noted.groups.contains(&group) {
            noted.groups.retain(|&g| super::scopes::is_open(g));
            noted.groups.push(group);
        }
    }

    /// A scope whose work, not queued yet, uses the memory: one that took it and is still
    /// open (the memory may be given back only once none is).
    pub(crate) fn pending_group(&mut self) -> Option<u64> {
        let groups = &mut self.noted()?.groups;
        if groups.is_empty() {
            return None;
        }
        groups.retain(|&g| super::scopes::is_open(g));
        groups.first().copied()
    }

    /// Notes `stream`, whose queued work touches the memory, whatever it is (the stream a
    /// buffer leaves for another): unlike [`note`](Self::note), even while it is captured,
    /// since work queued on it before the capture is real.
    pub(crate) fn note_queued(&self, stream: &Stream) {
        let mut guard = self.lock();
        let noted = guard.get_or_insert_with(Box::default);
        if !noted.streams.contains(stream) {
            noted.streams.push(stream.clone());
        }
    }

    /// Notes that work touching the memory (reading it only, or writing it: `access`) is about
    /// to be queued on `stream`, with `ctx` current; `own` is the stream the memory is ordered
    /// on (none for memory without one).
    ///
    /// Refuses a stream whose handle would not name the stream it stands for here: a
    /// per-thread default stream made on another thread, or a default stream of a context
    /// other than `ctx` (the driver reads such handles through the current context).
    ///
    /// While a capture is under way anywhere in the process, every use is looked at (see
    /// [`note_captured`](Self::note_captured)), and so it is while the process orders uses
    /// itself ([`StreamOrdering::Implicit`](ordering::StreamOrdering)); otherwise the own stream
    /// costs one comparison.
    #[inline]
    pub(crate) fn note(
        &self,
        ctx: &Context,
        own: Option<&Stream>,
        stream: &Stream,
        access: Access,
    ) -> Result<()> {
        match own {
            Some(own)
                if own.as_raw() == stream.as_raw()
                    && !stream.is_default()
                    && !capturing::any()
                    && !ordering::implicit() =>
            {
                Ok(())
            }
            _ => self.note_foreign(ctx, own, stream, access),
        }
    }

    #[cold]
    fn note_foreign(
        &self,
        ctx: &Context,
        own: Option<&Stream>,
        stream: &Stream,
        access: Access,
    ) -> Result<()> {
        nameable(ctx, stream)?;
        if capturing::any() && self.seen_in_capture(stream) {
            return Ok(());
        }
        // Work captured into a graph is not queued: it runs at the graph's launches. The
        // graph keeps the memory, and its launches wait for the memory's earlier work.
        if let Some(capture) = capture_of(stream)? {
            return self.note_captured(own, stream, capture);
        }
        if self.lock().as_ref().is_some_and(|n| n.graph.is_some()) {
            return Err(super::captured::outside_capture());
        }
        let waited_for_own = ordering::implicit() && {
            #[cfg(feature = "nccl")]
            self.refuse_use_before_group_end()?;
            self.order_use(own, stream, access)?
        };
        if own == Some(stream) {
            return Ok(());
        }
        // The first use on `stream` waits for what is queued on the memory's own stream: the
        // work of its earlier owners, given back there, included. Later uses on `stream` are
        // ordered after that by `stream`'s own order.
        if self.lock().as_ref().is_some_and(|n| n.streams.contains(stream)) {
            return Ok(());
        }
        // The wait is made without the lock, since it may be a host wait (for another thread's
        // per-thread stream) for a host function that notes a stream on this same memory. The
        // stream is noted only once the wait is queued, so no use on `stream` passes it: two
        // threads noting it at once both wait. A stream in a capture the crate did not begin
        // waits for nothing, and is noted all the same: the release must see that it is being
        // captured, and keep the memory.
        if let Some(own) = own.filter(|_| !waited_for_own) {
            wait_for(stream, own)?;
        }
        let mut guard = self.lock();
        let noted = guard.get_or_insert_with(Box::default);
        if !noted.streams.contains(stream) {
            noted.streams.push(stream.clone());
        }
        Ok(())
    }

    /// Orders a use of `access` on `stream` after the last write on another stream, and a write
    /// after the reads since ([`StreamOrdering::Implicit`](ordering::StreamOrdering)): the
    /// waits are made without the lock (one may be a host wait, see `note_foreign`), then the
    /// use is noted, unless another use was noted meanwhile (another thread's, through another
    /// view of the memory): then it plans again, and waits for what that use changed. Whether
    /// `stream` was made to wait for `own`.
    #[cold]
    fn order_use(&self, own: Option<&Stream>, stream: &Stream, access: Access) -> Result<bool> {
        let mut waited_for_own = false;
        loop {
            let plan = match self.lock().as_mut() {
                Some(n) => n.last.plan(own, stream, access),
                // Memory used on its own stream only keeps no list, in this mode too.
                None if own == Some(stream) => return Ok(false),
                None => LastUses::default().plan(own, stream, access),
            };
            if !wait_all(stream, &plan.waits)? {
                // `stream` is being captured: its work runs at the graph's launches, and is
                // not noted as ordered.
                return Ok(false);
            }
            waited_for_own |= own.is_some_and(|o| plan.waits.contains(o));
            let mut guard = self.lock();
            if guard.get_or_insert_with(Box::default).last.commit(&plan, own, stream, access) {
                return Ok(waited_for_own);
            }
        }
    }

    /// Refuses, in [`StreamOrdering::Implicit`](ordering::StreamOrdering), a use of memory that
    /// an NCCL group open on another thread (or, on this thread, one this use is not part of)
    /// uses: the group's calls are queued only when it ends, so an event recorded now would
    /// not cover them.
    #[cfg(feature = "nccl")]
    #[cold]
    fn refuse_use_before_group_end(&self) -> Result<()> {
        let open =
            self.lock().as_ref().and_then(|n| n.groups.iter().copied().find(|&g| super::scopes::is_open(g)));
        match open {
            Some(group) if crate::nccl::current_group() != Some(group) => Err(Error::invalid(
                "implicit stream ordering",
                "the memory is used by an NCCL group that has not ended, whose calls are queued only \
                 when it ends, so this use cannot be ordered after them; end the group first",
            )),
            _ => Ok(()),
        }
    }

    /// Notes that work using the memory is about to be captured on `stream` by `capture`.
    ///
    /// Memory allocated in a capture may be used there only (see
    /// [`GraphAlloc::use_on`](super::captured::GraphAlloc)). Other memory is held by the
    /// capture's graph: the first captured use hands the graph the memory's [`Retained`] cell
    /// (made then), so that the release waits for the graph and its executable graphs, and
    /// the first use on each captured stream waits, at each launch, for the work queued on the
    /// memory's own stream before ([`order_captured_use`]).
    #[cold]
    fn note_captured(&self, own: Option<&Stream>, stream: &Stream, capture: CaptureRef) -> Result<()> {
        let mut guard = self.lock();
        let noted = guard.get_or_insert_with(Box::default);
        if let Some(alloc) = &noted.graph {
            return alloc.use_on(stream, Some(capture));
        }
        if noted.unretained {
            return Err(Error::refused(
                crate::error::Reason::DURING_CAPTURE,
                "captured use",
                "this memory (a VMM mapping, a module global, an imported tensor, a graphics resource or an \
                 array) cannot be held by a graph: its owner gives it back by waiting for streams, which \
                 does not cover the graph's launches; use a DeviceBuffer in captured work, or add the work \
                 to a graph as nodes and keep the owner alive with Graph::keep",
            ));
        }
        let raw = stream.as_raw() as usize;
        if noted.captured.iter().any(|&(id, s, _)| id == capture.id() && s == raw) {
            return Ok(());
        }
        if let Some(own) = own {
            order_captured_use(stream, own, capture)?;
        }
        let held = noted.captured.iter().any(|&(id, _, _)| id == capture.id());
        let cell = noted.retained.get_or_insert_with(Arc::default);
        if !held {
            capture.note(cell.clone());
        }
        noted.captured.retain(|&(id, _, _)| capturing::is_active(id));
        noted.captured.push((capture.id(), raw, capturing::generation()));
        Ok(())
    }

    /// Whether captured work on `stream` was already noted here, in a capture that has not
    /// ended since (the stream is in it still): the common case of a captured step, which then
    /// asks the driver nothing.
    fn seen_in_capture(&self, stream: &Stream) -> bool {
        let guard = self.lock();
        let Some(noted) = guard.as_ref() else { return false };
        if let Some(alloc) = &noted.graph {
            return alloc.known_on(stream);
        }
        let (raw, now) = (stream.as_raw() as usize, capturing::generation());
        noted.captured.iter().any(|&(_, s, g)| s == raw && g == now)
    }

    /// Notes on `other` every stream and open scope noted here, for memory that changes
    /// owner (the new owner's release must wait for them as this one's would).
    ///
    /// The order of the uses ([`StreamOrdering::Implicit`](ordering::StreamOrdering)) is merged
    /// too: both pieces of memory have no own stream (mappings and the spans made of them).
    pub(crate) fn copy_into(&self, other: &StreamUses) {
        let mut guard = self.lock();
        let Some(noted) = guard.as_mut() else { return };
        noted.streams.iter().for_each(|s| other.note_queued(s));
        #[cfg(feature = "nccl")]
        noted.groups.iter().for_each(|&g| other.note_group(g));
        if ordering::implicit() {
            other.lock().get_or_insert_with(Box::default).last.merge(&mut noted.last);
        }
    }

    /// The streams noted so far.
    pub(crate) fn snapshot(&self) -> Vec<Stream> {
        self.lock().as_ref().map_or_else(Vec::new, |n| n.streams.clone())
    }

    /// Takes the noted streams for a stream-ordered release of the memory in `ctx` (whose
    /// events, made in `ctx`, will be recorded on them): streams that cannot be ordered from
    /// there are waited for on the host and left out (per-thread default streams of other
    /// threads, through their context; streams of other contexts, on which an event of `ctx`
    /// cannot be recorded); the rest are returned, for the release to be ordered after them.
    /// Fails with the wait's status.
    ///
    /// A noted stream that is being captured now cannot be ordered after (an event recorded
    /// there would be captured, and a host wait would break the capture): that is an error,
    /// and the caller keeps the memory.
    pub(crate) fn take_for_release(&mut self, ctx: &Context) -> Result<Vec<Stream>> {
        let mut list = self.noted().map(|n| std::mem::take(&mut n.streams)).unwrap_or_default();
        if let Some(e) = list.iter().find_map(|s| capturing_now(s).err()) {
            return Err(e);
        }
        let unnamed = |s: &Stream| s.is_other_threads() || s.context() != ctx;
        if list.iter().any(unnamed) {
            let (theirs, ours): (Vec<Stream>, Vec<Stream>) = list.into_iter().partition(unnamed);
            list = ours;
            synchronize_each(&theirs)?;
        }
        Ok(list)
    }

    /// Waits on the host for the work queued so far on every noted stream, for a release that
    /// is not stream-ordered (an unmap, a foreign deleter). Waits for all of them even when
    /// one fails, and returns the first failure. Memory taken by an NCCL group that has not
    /// ended cannot be waited for (its calls are not queued yet): that is an error, and the
    /// caller keeps the memory.
    pub(crate) fn synchronize_for_release(&mut self) -> Result<()> {
        if self.pending_group().is_some() {
            return Err(Error::invalid(
                "release",
                "the memory was dropped inside an NCCL group that uses it, before the group ended; it is \
                 kept (leaked) so that the group's calls cannot write it once reused; end the group first",
            ));
        }
        let list = self.noted().map(|n| std::mem::take(&mut n.streams)).unwrap_or_default();
        if let Some(e) = list.iter().find_map(|s| capturing_now(s).err()) {
            return Err(e);
        }
        synchronize_each(&list)
    }
}

/// Refuses a stream whose handle would not name the stream it stands for with `ctx` current: a
/// per-thread default stream made on another thread, or a default stream of a context other
/// than `ctx` (the driver reads such handles through the current context).
pub(crate) fn nameable(ctx: &Context, stream: &Stream) -> Result<()> {
    if stream.is_default() {
        if stream.is_other_threads() {
            return Err(other_threads_stream());
        }
        if stream.context() != ctx {
            return Err(Error::refused(
                crate::error::Reason::WRONG_STREAM,
                "stream",
                "a default stream names the stream of the current context, and this one belongs to \
                 another context than the memory's; use a stream of the memory's context or a created \
                 stream",
            ));
        }
    }
    Ok(())
}

/// An error when `stream` is being captured (through this crate) now: work on the memory queued
/// there before the capture cannot be waited for without breaking the capture.
fn capturing_now(stream: &Stream) -> Result<()> {
    if capture_of(stream)?.is_some() {
        return Err(captured_release());
    }
    Ok(())
}

/// The error of a release that a capture under way on a stream that used the memory prevents.
#[cold]
fn captured_release() -> Error {
    Error::refused(
        crate::error::Reason::DURING_CAPTURE,
        "release",
        "the memory is given back while a stream that used it is being captured into a graph: its work \
         cannot be waited for now, so the memory is kept (leaked); give it back before the capture \
         begins or after it ends",
    )
}

/// Waits for each stream (for a release), all of them even when one fails; the first failure.
fn synchronize_each(streams: &[Stream]) -> Result<()> {
    streams.iter().map(Stream::synchronize_for_release).fold(Ok(()), Result::and)
}

/// Makes `later` wait, on the device, for the work queued so far on `earlier` (the memory's
/// own stream, before its first use on `later`): one event recorded on `earlier` and waited
/// for on `later`. A per-thread default stream of another thread is waited for on the host,
/// through its context. `earlier` being captured now is an error: its work queued before the
/// capture cannot be waited for (an event recorded there would be captured), so the use is
/// refused and nothing is queued. Nothing is waited for when `later` is being captured
/// ([`Ordered::Captured`]).
pub(crate) fn wait_for(later: &Stream, earlier: &Stream) -> Result<Ordered> {
    // Work queued on a stream being captured runs at the graph's launches, not now, and a
    // capture cannot wait for work outside it (the driver refuses): the capture's contract
    // covers what its launches touch.
    if capture_of(later)?.is_some() || later.context().with_current(|| raw_capturing(later))? {
        return Ok(Ordered::Captured);
    }
    if earlier.is_other_threads() {
        return earlier.synchronize_for_release().map(|()| Ordered::Waited);
    }
    if capture_of(earlier)?.is_some() {
        return Err(captured_first_use());
    }
    let mark = earlier.context().with_current(|| {
        if raw_capturing(earlier)? {
            return Err(captured_first_use());
        }
        // SAFETY: `earlier`'s context is current, and it is no other thread's per-thread
        // stream (looked at above).
        unsafe { earlier.mark() }
    })?;
    wait_on_mark(later, mark).map(|()| Ordered::Waited)
}

/// Makes `later` wait for a stream's `mark`, just recorded, and lets the mark go.
fn wait_on_mark(later: &Stream, mark: std::sync::MutexGuard<'_, sys::CUevent>) -> Result<()> {
    later.bind_if_default()?;
    // SAFETY: both are alive (a stream's mark lives as long as the stream does); a stream may
    // wait for an event of another context.
    unsafe { driver!(cuStreamWaitEvent(later.as_raw(), *mark, 0)) }
}

/// What [`wait_for`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ordered {
    /// The later stream waits for the work queued so far on the earlier one.
    Waited,
    /// Nothing: the later stream is being captured, and its work runs at the graph's launches.
    Captured,
}

/// The error of a first use on another stream while the memory's own stream is being captured.
#[cold]
fn captured_first_use() -> Error {
    Error::refused(
        crate::error::Reason::DURING_CAPTURE,
        "first use on another stream",
        "the memory's own stream is being captured into a graph, so the work queued on it before the \
         capture cannot be waited for on another stream; use the memory on the other stream before the \
         capture begins or after it ends",
    )
}

/// Whether `stream` is being captured, by a capture the crate did not begin too (another
/// library's on the same stream, say); its context is current.
fn raw_capturing(stream: &Stream) -> Result<bool> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: the stream is alive while `stream` is, and its context is current; one
    // out-parameter.
    unsafe { driver!(cuStreamIsCapturing(stream.as_raw(), &mut status)) }?;
    Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}

/// Makes `own` wait, on the device, for the work queued so far on each of `others`: one event
/// recorded on each and waited for on `own`; a per-thread default stream of another thread is
/// waited for on the host, through its context. A stream that is being captured cannot be
/// waited for (an event recorded there would be captured): that is an error, and the caller
/// keeps the memory. Release paths use it, so it does not report the context's deferred
/// errors; it fails with the first driver status it meets.
pub(crate) fn order_after(own: &Stream, others: &[Stream]) -> Result<()> {
    for other in others.iter().filter(|o| *o != own) {
        if other.is_other_threads() {
            other.synchronize_for_release()?;
            continue;
        }
        other.context().make_current()?;
        if raw_capturing(other)? {
            return Err(captured_release());
        }
        // SAFETY: `other`'s context is current, and it is no other thread's per-thread stream
        // (looked at above).
        wait_on_mark(own, unsafe { other.mark() }?)?;
    }
    Ok(())
}

/// Makes `stream` wait for the work queued so far on each of `earlier` (see [`wait_for`]), for
/// [`StreamOrdering::Implicit`](ordering::StreamOrdering). Whether it did: `false` where
/// `stream` is being captured (by a capture the crate did not begin), whose work runs at the
/// graph's launches and cannot wait for work outside.
fn wait_all(stream: &Stream, earlier: &[Stream]) -> Result<bool> {
    let mut waited = true;
    for e in earlier {
        waited &= wait_for(stream, e)? == Ordered::Waited;
    }
    Ok(waited)
}
