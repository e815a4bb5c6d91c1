//! The stream-ordered copies that use a pinned host buffer, tracked with one event, so that the
//! host waits for them before it touches or frees the memory.

use crate::error::{Result, check};
use crate::{Event, EventFlags, Stream};
use cuda_driver_sys as sys;
use std::sync::{Mutex, MutexGuard, PoisonError};

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
struct Uses {
    /// Recorded after the last copy, in the context of the last copy's stream; `None` until
    /// the first copy.
    event: Option<Event>,
    /// The stream of the last copy.
    stream: Option<Stream>,
    pending: Pending,
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
#[derive(Debug)]
pub(crate) struct HostUses {
    uses: Mutex<Uses>,
}

impl HostUses {
    pub(crate) fn new() -> HostUses {
        HostUses { uses: Mutex::new(Uses { event: None, stream: None, pending: Pending::None }) }
    }

    fn lock(&self) -> MutexGuard<'_, Uses> {
        self.uses.lock().unwrap_or_else(PoisonError::into_inner)
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
        let mut u = self.lock();
        let other_stream = u.stream.as_ref().is_some_and(|s| s != stream);
        if u.pending != Pending::None && other_stream {
            if let Some(event) = &u.event {
                // A default-stream handle names the stream of the current context.
                stream.bind_if_default()?;
                // SAFETY: the event is live (held here) and the stream is alive.
                check("cuStreamWaitEvent", unsafe {
                    sys::cuStreamWaitEvent(stream.as_raw(), event.as_raw(), 0)
                })?;
            }
        }
        // The event the copy will be recorded on must be of the stream's context: made before the
        // copy is queued, so that nothing is queued when it cannot be made, and kept aside until
        // the recording succeeded, so that the old event still covers the copies before.
        let ctx = stream.context();
        let fresh = match &u.event {
            Some(e) if e.context() == ctx => None,
            _ => Some(Event::new(ctx, EventFlags::DISABLE_TIMING)?),
        };
        enqueue()?;
        let kind = if writes { Pending::Writes } else { Pending::Reads };
        let recorded = match fresh.as_ref().or(u.event.as_ref()) {
            Some(event) => Self::record(event, stream),
            None => Ok(()),
        };
        if let Err(e) = recorded {
            // The copy is queued but untracked: wait for it rather than leave it unguarded. A
            // release-style wait: a deferred error pending elsewhere must not skip it. Once it
            // returned, this copy and (through the wait above, or stream order) every copy
            // before it are done.
            match stream.synchronize_for_release() {
                Ok(()) => u.pending = Pending::None,
                // The stream failed: its copies cannot be told apart any more; the host still
                // waits for the old event before it touches the memory.
                Err(_) => u.pending = u.pending.max(kind),
            }
            return Err(e);
        }
        if let Some(event) = fresh {
            // The old event (if any) is destroyed once its recorded work is done; the wait on
            // it is already queued.
            u.event = Some(event);
        }
        if other_stream || u.stream.is_none() {
            u.stream = Some(stream.clone());
        }
        u.pending = u.pending.max(kind);
        Ok(())
    }

    /// Records `event` (of `stream`'s context) after the work queued on `stream`.
    fn record(event: &Event, stream: &Stream) -> Result<()> {
        // A default-stream handle names the stream of the current context.
        stream.bind_if_default()?;
        // SAFETY: the event and the stream are alive and of the same context.
        check("cuEventRecord", unsafe { sys::cuEventRecord(event.as_raw(), stream.as_raw()) })
    }

    /// Waits until the host may read (`write == false`) or write the memory.
    pub(crate) fn wait(&self, write: bool) -> Result<()> {
        let mut u = self.lock();
        let needed = if write { Pending::Reads } else { Pending::Writes };
        if u.pending < needed {
            return Ok(());
        }
        if let Some(event) = &u.event {
            // SAFETY: the event is alive while held here.
            check("cuEventSynchronize", unsafe { sys::cuEventSynchronize(event.as_raw()) })?;
        }
        u.pending = Pending::None;
        Ok(())
    }

    /// Whether copies that use the memory may still be in flight.
    pub(crate) fn is_pending(&self) -> bool {
        self.lock().pending != Pending::None
    }

    /// For a buffer being given back: the event recorded after the copies in flight, if any,
    /// handed over (the tracker records nothing more). Every copy that may still use the
    /// memory was queued before its last recording, whatever stream, thread or context it ran
    /// on.
    pub(crate) fn take_in_flight(&mut self) -> Option<Event> {
        let u = self.uses.get_mut().unwrap_or_else(PoisonError::into_inner);
        if u.pending == Pending::None {
            return None;
        }
        u.pending = Pending::None;
        u.event.take()
    }
}
