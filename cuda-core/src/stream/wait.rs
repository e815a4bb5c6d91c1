//! Waits of a stream on an event ([`Stream::wait_event`]): while a capture of this crate is under
//! way, a wait that makes a stream join it is noted, so that the graph's captured work can wait
//! for what that stream had queued before (see [the rule](crate::track)).

use super::{EventWaitFlags, Stream, capturing};
use crate::error::Result;
use crate::event::{Event, EventFlags, refuse_external_in_capture};

/// Waits of a stream on an event.
impl Stream {
    /// Makes later work on this stream wait until `event` completes (the work it captured)
    /// ([`cuStreamWaitEvent`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)).
    /// The event may belong to another context or device. On a default stream, the stream's
    /// context is made current first.
    ///
    /// Fails with the driver's status, or with an error kept in the stream's context from an
    /// earlier drop.
    #[inline]
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        self.wait_event_with_flags(event, EventWaitFlags::empty())
    }

    /// [`Stream::wait_event`] with flags
    /// ([`cuStreamWaitEvent`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)).
    ///
    /// [`EXTERNAL`](EventWaitFlags::EXTERNAL) on a stream being captured is refused with
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument), as
    /// [`Event::record_with_flags`] refuses it; add an event wait node
    /// ([`Graph::add_event_wait_node`](crate::graph::Graph::add_event_wait_node)) instead.
    #[inline]
    pub fn wait_event_with_flags(&self, event: &Event, flags: EventWaitFlags) -> Result<()> {
        self.context().take_deferred()?;
        self.bind_if_default()?;
        if flags.contains(EventWaitFlags::EXTERNAL) {
            refuse_external_in_capture("Stream::wait_event_with_flags", self)?;
        }
        if capturing::any() {
            return wait_maybe_joining(self, event, flags.bits());
        }
        // SAFETY: both handles are alive while their owners are borrowed.
        unsafe { driver!(cuStreamWaitEvent(self.as_raw(), event.as_raw(), flags.bits())) }
    }
}

/// A wait while some capture of this crate is under way: when it makes `stream` join a capture
/// (the event was recorded in one), an event recorded on `stream` just before marks the work
/// queued there until then, which captured work on memory of `stream` waits for at each of the
/// graph's launches (see [the rule](crate::track)).
#[cold]
fn wait_maybe_joining(stream: &Stream, event: &Event, flags: u32) -> Result<()> {
    let before = match capturing::capture_of(stream)? {
        Some(_) => None,
        None => {
            let before = Event::new(stream.context(), EventFlags::DISABLE_TIMING)?;
            // SAFETY: both handles are alive; `stream` is not being captured by this crate.
            unsafe { driver!(cuEventRecord(before.as_raw(), stream.as_raw())) }?;
            Some(before)
        }
    };
    // SAFETY: both handles are alive while their owners are borrowed.
    unsafe { driver!(cuStreamWaitEvent(stream.as_raw(), event.as_raw(), flags)) }?;
    if let Some(before) = before {
        if let Some(capture) = capturing::capture_of(stream)? {
            capture.note_joined(stream, before);
        }
    }
    Ok(())
}
