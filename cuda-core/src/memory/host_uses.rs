//! The stream-ordered copies that use a pinned host buffer, tracked with one event, so that the
//! host waits for them before it touches or frees the memory.

use crate::error::{Result, check};
use crate::{Context, Stream};
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
    /// Recorded after the last copy; null until the first copy.
    event: sys::CUevent,
    /// The context the event was made in.
    ctx: Option<Context>,
    /// The stream of the last copy.
    stream: Option<Stream>,
    pending: Pending,
}

/// The copies in flight on a pinned buffer: one event, recorded after each copy on the copy's
/// stream. A copy on another stream first waits for that event on its own stream, so the event
/// always covers every copy queued so far.
#[derive(Debug)]
pub(crate) struct HostUses {
    uses: Mutex<Uses>,
}

// SAFETY: the event handle is only used under the mutex; the driver accepts it from any thread.
unsafe impl Send for HostUses {}
// SAFETY: as above.
unsafe impl Sync for HostUses {}

impl HostUses {
    pub(crate) fn new() -> HostUses {
        HostUses {
            uses: Mutex::new(Uses {
                event: std::ptr::null_mut(),
                ctx: None,
                stream: None,
                pending: Pending::None,
            }),
        }
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
            // SAFETY: the event is live (pending implies recorded) and the stream is alive.
            check("cuStreamWaitEvent", unsafe { sys::cuStreamWaitEvent(stream.as_raw(), u.event, 0) })?;
        }
        enqueue()?;
        if let Err(e) = Self::record(&mut u, stream) {
            // The copy is queued but untracked: wait for it rather than leave it unguarded.
            let _ = stream.synchronize();
            return Err(e);
        }
        if other_stream || u.stream.is_none() {
            u.stream = Some(stream.clone());
        }
        let kind = if writes { Pending::Writes } else { Pending::Reads };
        u.pending = u.pending.max(kind);
        Ok(())
    }

    fn record(u: &mut Uses, stream: &Stream) -> Result<()> {
        let ctx = stream.context();
        if u.event.is_null() || u.ctx.as_ref() != Some(ctx) {
            let mut event = std::ptr::null_mut();
            ctx.enter()?;
            let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING.0;
            // SAFETY: one out-parameter; the stream's context is current.
            check("cuEventCreate", unsafe { sys::cuEventCreate(&mut event, flags) })?;
            Self::destroy(u);
            u.event = event;
            u.ctx = Some(ctx.clone());
        }
        // SAFETY: the event and the stream are alive and of the same context.
        check("cuEventRecord", unsafe { sys::cuEventRecord(u.event, stream.as_raw()) })
    }

    /// Waits until the host may read (`write == false`) or write the memory.
    pub(crate) fn wait(&self, write: bool) -> Result<()> {
        let mut u = self.lock();
        let needed = if write { Pending::Reads } else { Pending::Writes };
        if u.pending < needed {
            return Ok(());
        }
        // SAFETY: pending implies the event was recorded and is alive.
        check("cuEventSynchronize", unsafe { sys::cuEventSynchronize(u.event) })?;
        u.pending = Pending::None;
        Ok(())
    }

    /// Whether copies that use the memory may still be in flight.
    pub(crate) fn is_pending(&self) -> bool {
        self.lock().pending != Pending::None
    }

    /// For a buffer being given back: the stream and event of the copies in flight, if any.
    pub(crate) fn in_flight(&mut self) -> Option<(Stream, sys::CUevent)> {
        let u = self.uses.get_mut().unwrap_or_else(PoisonError::into_inner);
        if u.pending == Pending::None {
            return None;
        }
        u.stream.clone().map(|s| (s, u.event))
    }

    fn destroy(u: &mut Uses) {
        if let (false, Some(ctx)) = (u.event.is_null(), &u.ctx) {
            let event = u.event;
            // SAFETY: destroyed once; the driver defers it until recorded work is done.
            ctx.with_current_for_drop("cuEventDestroy", || unsafe { sys::cuEventDestroy(event) });
        }
        u.event = std::ptr::null_mut();
    }
}

impl Drop for HostUses {
    fn drop(&mut self) {
        Self::destroy(self.uses.get_mut().unwrap_or_else(PoisonError::into_inner));
    }
}
