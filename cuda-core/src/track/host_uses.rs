//! The stream-ordered copies that use a pinned host buffer, tracked with one event, so that the
//! host waits for them before it touches or frees the memory; and the launches of executable
//! graphs that copies captured on it went into, tracked the same way.

use crate::error::{Error, Result};
use crate::event::{Event, EventFlags};
use crate::stream::Stream;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

/// What the copies still in flight do to the host memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Pending {
    None,
    /// Copies read it (host to device): the host may read too, but not write.
    Reads,
    /// Copies write it (device to host): the host may neither read nor write.
    Writes,
}

#[derive(Debug)]
pub(crate) struct Uses {
    /// Recorded after the last copy, in the context of the last copy's stream; `None` until
    /// the first copy.
    event: Option<Event>,
    /// The stream of the last copy.
    stream: Option<Stream>,
    pending: Pending,
    /// Whether a capture took the memory, so that launches of graphs may use it from now on
    /// (see `HostUses::share`).
    captured: bool,
    /// Slices the host holds through a guard ([`begin_borrow`]): launches
    /// that write the memory are refused while any is held.
    host_readers: usize,
    /// Whether the host holds the memory for writing through a guard: every launch that uses
    /// it is refused meanwhile.
    host_writer: bool,
    /// The buffer's release, handed over when it was dropped while graphs hold this state: run
    /// with the event after the copies in flight once the last holder lets go.
    release: LateRelease,
}

/// A release of pinned memory, run with the event recorded after the copies still in flight.
type Release = Box<dyn FnOnce(Option<Event>) + Send>;

/// The release a shared state holds until the last graph lets go of it.
#[derive(Default)]
struct LateRelease(Option<Release>);

impl std::fmt::Debug for LateRelease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "LateRelease(held)" } else { "LateRelease(none)" })
    }
}

impl Drop for Uses {
    /// The last holder of a buffer's shared state (the buffer, a graph or an executable graph
    /// that captured copies of it) is gone: the buffer's release, if it was handed over, runs.
    fn drop(&mut self) {
        if let Some(release) = self.release.0.take() {
            release(HostUses::take_pending(self));
        }
    }
}

impl Uses {
    const fn new() -> Uses {
        Uses {
            event: None,
            stream: None,
            pending: Pending::None,
            captured: false,
            host_readers: 0,
            host_writer: false,
            release: LateRelease(None),
        }
    }

    /// Makes work about to be queued on `stream` wait for the uses in flight on another stream,
    /// and returns the event to record after it when the current one is of another context
    /// (made now, so that nothing is queued when it cannot be made).
    fn prepare(&mut self, stream: &Stream) -> Result<Option<Event>> {
        let other_stream = self.stream.as_ref().is_some_and(|s| s != stream);
        if self.pending != Pending::None && other_stream {
            if let Some(event) = &self.event {
                // A default-stream handle names the stream of the current context.
                stream.bind_if_default()?;
                // SAFETY: the event is live (held here) and the stream is alive.
                unsafe { driver!(cuStreamWaitEvent(stream.as_raw(), event.as_raw(), 0)) }?;
            }
        }
        // The event the work will be recorded on must be of the stream's context, and is kept
        // aside until the recording succeeded, so that the old event still covers the work
        // before.
        let ctx = stream.context();
        Ok(match &self.event {
            Some(e) if e.context() == ctx => None,
            _ => Some(Event::new(ctx, EventFlags::DISABLE_TIMING)?),
        })
    }

    /// Waits until the host may read (`write == false`) or write the memory.
    fn wait(&mut self, write: bool) -> Result<()> {
        let needed = if write { Pending::Reads } else { Pending::Writes };
        if self.pending < needed {
            return Ok(());
        }
        if let Some(event) = &self.event {
            // SAFETY: the event is alive while held here.
            unsafe { driver!(cuEventSynchronize(event.as_raw())) }?;
        }
        self.pending = Pending::None;
        Ok(())
    }

    /// Records the work just queued on `stream` (`writes` when it writes the host memory),
    /// with `fresh` from [`prepare`](Self::prepare). If it cannot be recorded, waits for
    /// `stream` so that nothing is left untracked, and returns the error.
    fn record_after(&mut self, stream: &Stream, writes: bool, fresh: Option<Event>) -> Result<()> {
        let kind = if writes { Pending::Writes } else { Pending::Reads };
        let recorded = match fresh.as_ref().or(self.event.as_ref()) {
            Some(event) => record(event, stream),
            None => Ok(()),
        };
        if let Err(e) = recorded {
            // The work is queued but untracked: wait for it rather than leave it unguarded. A
            // release-style wait: a deferred error pending elsewhere must not skip it. Once it
            // returned, this work and (through the wait in `prepare`, or stream order) every
            // use before it are done.
            match stream.synchronize_for_release() {
                Ok(()) => self.pending = Pending::None,
                // The stream failed: its work cannot be told apart any more; the host still
                // waits for the old event before it touches the memory.
                Err(_) => self.pending = self.pending.max(kind),
            }
            return Err(e);
        }
        if let Some(event) = fresh {
            // The old event (if any) is destroyed once its recorded work is done; the wait on
            // it is already queued.
            self.event = Some(event);
        }
        if self.stream.as_ref() != Some(stream) {
            self.stream = Some(stream.clone());
        }
        self.pending = self.pending.max(kind);
        Ok(())
    }
}

/// Records `event` (of `stream`'s context) after the work queued on `stream`.
fn record(event: &Event, stream: &Stream) -> Result<()> {
    // A default-stream handle names the stream of the current context.
    stream.bind_if_default()?;
    // SAFETY: the event and the stream are alive and of the same context.
    unsafe { driver!(cuEventRecord(event.as_raw(), stream.as_raw())) }
}

/// Waits until the host may read (`write == false`) or write the memory tracked by `uses`,
/// then marks it held by the host: until [`end_borrow`], [`launch_tracked`] refuses the
/// launches that would race with the host (any, for a write; those that write the memory, for
/// a read). A write while the host holds anything, or a read while it writes, is an
/// [`Error::InvalidArgument`](crate::error::Error::InvalidArgument).
pub(crate) fn begin_borrow(uses: &Mutex<Uses>, write: bool) -> Result<()> {
    let mut u = lock(uses);
    if u.host_writer || (write && u.host_readers > 0) {
        return Err(Error::invalid(
            "pinned buffer borrow",
            "the host already holds the memory through a slice guard; drop it first",
        ));
    }
    u.wait(write)?;
    if write {
        u.host_writer = true;
    } else {
        u.host_readers += 1;
    }
    Ok(())
}

/// Ends a borrow begun by [`begin_borrow`].
pub(crate) fn end_borrow(uses: &Mutex<Uses>, write: bool) {
    let mut u = lock(uses);
    if write {
        u.host_writer = false;
    } else {
        u.host_readers = u.host_readers.saturating_sub(1);
    }
}

/// A pinned buffer as a graph sees it: the buffer's shared tracker, and whether the graph's
/// captured copies write the host memory. Each launch of an executable graph that holds it
/// first waits for the buffer's uses in flight on other streams, then is recorded as one use
/// (see [`launch_tracked`]).
#[derive(Clone, Debug)]
pub(crate) struct HostAccess {
    pub(crate) uses: Arc<Mutex<Uses>>,
    pub(crate) writes: bool,
}

impl HostAccess {
    /// A tracker of its own, for memory whose uses are launches and the stream-ordered work
    /// queued through [`queue`](Self::queue) (graph-allocated memory).
    pub(crate) fn fresh(writes: bool) -> HostAccess {
        HostAccess { uses: Arc::new(Mutex::new(Uses::new())), writes }
    }

    fn lock(&self) -> MutexGuard<'_, Uses> {
        lock(&self.uses)
    }

    /// Queues `enqueue` on `stream` after the uses in flight on other streams, and records it
    /// as a use (a write). If it was queued but cannot be recorded, waits for `stream` and
    /// returns the error.
    pub(crate) fn queue(&self, stream: &Stream, enqueue: impl FnOnce() -> Result<()>) -> Result<()> {
        let mut u = self.lock();
        let fresh = u.prepare(stream)?;
        enqueue()?;
        u.record_after(stream, true, fresh)
    }
}

/// Queues `launch` on `stream`, ordered after the uses in flight of every buffer in `accesses`
/// (sorted by tracker, one entry per tracker) and recorded on each as a use, under all their
/// locks at once: the host cannot slip a read or write between the launch and its recording.
pub(crate) fn launch_tracked(
    accesses: &[HostAccess],
    stream: &Stream,
    launch: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let mut guards: Vec<MutexGuard<'_, Uses>> = accesses.iter().map(|a| lock(&a.uses)).collect();
    for (u, access) in guards.iter().zip(accesses) {
        if u.host_writer || (access.writes && u.host_readers > 0) {
            return Err(Error::invalid(
                "GraphExec::launch",
                "the host holds a slice of a pinned buffer that the graph copies to or from (a guard of \
                 SharedPinnedBuffer::as_slice or as_mut_slice is alive); drop it before launching",
            ));
        }
    }
    let mut fresh = Vec::with_capacity(guards.len());
    for u in &mut guards {
        fresh.push(u.prepare(stream)?);
    }
    launch()?;
    let mut result = Ok(());
    for ((u, access), fresh) in guards.iter_mut().zip(accesses).zip(fresh) {
        let recorded = u.record_after(stream, access.writes, fresh);
        if result.is_ok() {
            result = recorded;
        }
    }
    result
}

/// The copies in flight on a pinned buffer: one event, recorded after each copy on the copy's
/// stream. A copy on another stream first waits for that event on its own stream, so the event
/// always covers every copy queued so far.
///
/// "Another stream" is [`Stream`]'s equality: default-stream handles of different contexts (or,
/// per-thread, of different threads) are different streams, so a copy on one of them waits for
/// the copies before it. When the stream's context differs from the event's, the copy waits
/// for the old event, and a new event is made in the new context and recorded after it: it
/// still covers every copy, since the new stream runs nothing after the wait before the old
/// event has completed.
///
/// A copy queued on a stream that is being captured into a graph records nothing: it runs at
/// every launch of the graph, not now. The buffer's state is then marked as captured and
/// shared with the graph ([`HostAccess`]), and each launch of an executable graph made from it waits for the
/// uses in flight and is recorded as a use, so that the host reads after a launch, and writes
/// between launches, safely.
///
/// The tracker of a chunk of a buffer ([`part`](Self::part)) refuses captured copies: a graph
/// that kept it would be launched after the chunk is gone, unordered with the buffer's own
/// copies. The buffer folds its chunks' trackers into its own ([`absorb`](Self::absorb)).
#[derive(Debug)]
pub(crate) struct HostUses {
    /// The state, made by the first copy (memory never copied allocates none, and gives its
    /// memory back without a lock); the graphs whose captured copies use the memory hold it too.
    state: OnceLock<Arc<Mutex<Uses>>>,
    /// Whether copies on a capturing stream are allowed (not for chunks).
    capturable: bool,
}

/// Locks a tracker's state; a panic while it was held leaves it consistent (each change is one
/// assignment).
fn lock(uses: &Mutex<Uses>) -> MutexGuard<'_, Uses> {
    uses.lock().unwrap_or_else(PoisonError::into_inner)
}

impl HostUses {
    #[inline]
    pub(crate) const fn new() -> HostUses {
        HostUses { state: OnceLock::new(), capturable: true }
    }

    /// The tracker of one chunk of a buffer: it refuses copies on capturing streams.
    pub(crate) const fn part() -> HostUses {
        HostUses { state: OnceLock::new(), capturable: false }
    }

    /// Whether copies of the memory may be captured into a graph (not for chunks).
    #[inline]
    pub(crate) fn is_capturable(&self) -> bool {
        self.capturable
    }

    /// The state, made on first use.
    fn state(&self) -> &Arc<Mutex<Uses>> {
        self.state.get_or_init(|| Arc::new(Mutex::new(Uses::new())))
    }

    /// The state locked, made on first use.
    fn lock(&self) -> MutexGuard<'_, Uses> {
        lock(self.state())
    }

    /// Whether a capture took the memory, so that launches of graphs may use it from now on.
    pub(crate) fn is_shared(&self) -> bool {
        self.shared().is_some()
    }

    /// Makes this tracker cover the copies in flight of `part` (a chunk's tracker, which then
    /// has none): the event of this one is recorded on the stream of the part's last copy,
    /// after a wait there for this one's copies on other streams, so the host never blocks.
    /// When that cannot be queued, waits for the part's copies instead; when that fails too,
    /// returns the error and leaves `part` pending (the memory must then be kept).
    pub(crate) fn absorb(&self, part: &HostUses) -> Result<()> {
        let Some(part) = part.state.get() else {
            // The chunk was never copied.
            return Ok(());
        };
        let mut p = lock(part);
        if p.pending == Pending::None {
            return Ok(());
        }
        let (Some(stream), Some(event)) = (p.stream.clone(), p.event.as_ref().map(Event::as_raw)) else {
            // Pending without a recorded copy does not happen; nothing is in flight to cover.
            p.pending = Pending::None;
            return Ok(());
        };
        let writes = p.pending == Pending::Writes;
        // On a stream being captured, a wait or an event recorded now would go into the
        // graph, not run: wait for the part's own event instead (recorded outside a capture).
        let capturing = !matches!(crate::stream::capture_of(&stream), Ok(None));
        let queued = !capturing && {
            let mut u = self.lock();
            u.prepare(&stream).and_then(|fresh| u.record_after(&stream, writes, fresh)).is_ok()
        };
        if !queued {
            // SAFETY: the event is alive while `p` holds it.
            unsafe { driver!(cuEventSynchronize(event)) }?;
        }
        p.pending = Pending::None;
        Ok(())
    }

    /// The state shared with graphs, once a capture took the memory.
    fn shared(&self) -> Option<&Mutex<Uses>> {
        let state = self.state.get()?;
        lock(state).captured.then_some(&**state)
    }

    /// The buffer as a graph node that copies to it (`writes`) or from it sees it.
    pub(crate) fn graph_access(&self, writes: bool) -> HostAccess {
        HostAccess { uses: self.share(), writes }
    }

    /// The state, marked as taken by a capture and shared with its graph.
    fn share(&self) -> Arc<Mutex<Uses>> {
        let state = self.state();
        lock(state).captured = true;
        Arc::clone(state)
    }

    /// Queues a copy with `enqueue` on `stream` and records it: `writes` when the copy writes
    /// the host memory. If the copy was queued but cannot be recorded, waits for `stream` so that
    /// nothing is left untracked, and returns the error.
    #[inline]
    pub(crate) fn around(
        &self,
        stream: &Stream,
        writes: bool,
        enqueue: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        if let Some(capture) = crate::stream::capture_of(stream)? {
            if !self.capturable {
                return Err(Error::refused(
                    crate::error::Reason::DURING_CAPTURE,
                    "PinnedChunk copy",
                    "a copy of a chunk of a pinned buffer cannot be captured into a graph (the graph \
                     would outlive the chunk); capture a copy of a whole PinnedBuffer instead",
                ));
            }
            // Captured, not queued: the graph's launches are what use the memory.
            enqueue()?;
            capture.note(Arc::new(HostAccess { uses: self.share(), writes }));
            return Ok(());
        }
        let mut u = self.lock();
        let fresh = u.prepare(stream)?;
        enqueue()?;
        u.record_after(stream, writes, fresh)
    }

    /// Waits until the host may read (`write == false`) or write the memory.
    pub(crate) fn wait(&self, write: bool) -> Result<()> {
        match self.state.get() {
            Some(state) => lock(state).wait(write),
            None => Ok(()),
        }
    }

    /// Waits as [`wait`](Self::wait) does and, once a capture took the memory (so that
    /// launches of graphs may use it whenever they are queued), marks it held by the host
    /// until [`end_borrow`] is called with the state returned: launches that would race with
    /// the host are refused meanwhile. Memory no capture took is only waited for: its uses are
    /// all queued through borrows of the buffer, which the caller's borrow excludes.
    pub(crate) fn borrow(&self, write: bool) -> Result<Option<&Mutex<Uses>>> {
        if let Some(shared) = self.shared() {
            begin_borrow(shared, write)?;
            return Ok(Some(shared));
        }
        self.wait(write)?;
        Ok(None)
    }

    /// Whether copies that use the memory may still be in flight.
    pub(crate) fn is_pending(&self) -> bool {
        self.state.get().is_some_and(|state| lock(state).pending != Pending::None)
    }

    /// For a buffer being given back while graphs that captured copies of it may still hold its
    /// state: hands `release` to that state, to run (with the event after the copies in flight
    /// then) once the last of them lets go, and returns `true`. Returns `false`, running
    /// nothing, when no capture took the memory.
    #[cold]
    pub(crate) fn hand_over(&mut self, release: impl FnOnce(Option<Event>) + Send + 'static) -> bool {
        match self.shared() {
            Some(shared) => {
                lock(shared).release = LateRelease(Some(Box::new(release)));
                true
            }
            None => false,
        }
    }

    /// For a buffer being given back: the event recorded after the copies in flight, if any,
    /// handed over (the tracker records nothing more). Every copy that may still use the
    /// memory was queued before its last recording, whatever stream, thread or context it ran
    /// on.
    ///
    /// The buffer being dropped owns its tracker: when no copy made its state, nothing is
    /// locked.
    #[inline]
    pub(crate) fn take_in_flight(&mut self) -> Option<Event> {
        let state = self.state.get_mut()?;
        Self::take_pending(&mut lock(state))
    }

    /// The event after the copies in flight in `u`, taken; `None` when none is in flight.
    #[inline]
    fn take_pending(u: &mut Uses) -> Option<Event> {
        if u.pending == Pending::None {
            return None;
        }
        u.pending = Pending::None;
        u.event.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_borrows_exclude_each_other_as_references_do() {
        let access = HostAccess::fresh(false);
        assert!(begin_borrow(&access.uses, false).is_ok());
        assert!(begin_borrow(&access.uses, false).is_ok(), "readers share");
        assert!(begin_borrow(&access.uses, true).is_err(), "no writer while reading");
        end_borrow(&access.uses, false);
        assert!(begin_borrow(&access.uses, true).is_err(), "one reader is left");
        end_borrow(&access.uses, false);
        assert!(begin_borrow(&access.uses, true).is_ok());
        assert!(begin_borrow(&access.uses, false).is_err(), "no reader while writing");
        assert!(begin_borrow(&access.uses, true).is_err(), "one writer");
        end_borrow(&access.uses, true);
        assert!(begin_borrow(&access.uses, false).is_ok());
    }
}
