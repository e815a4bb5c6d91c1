//! [`Completion`] (the work queued on a stream so far, or a graph launch) and
//! [`EventCompletion`] (a user's event).

use super::poller::Poller;
use super::slot::{Completer, Slot};
use super::{Waking, waking};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::graph::GraphExec;
use crate::stream::Stream;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

/// Resolves when the work that was queued on a stream when it was made is done
/// ([`Stream::synchronize_async`], [`GraphExec::launch_completion`]).
///
/// It owns its marker (an event, see the [module documentation](super)) and borrows nothing:
/// it may be sent to another task or thread, kept, or dropped at any time, and dropping it
/// cancels the wait only, never the work.
#[must_use = "a future does nothing unless awaited; dropping it cancels the wait, not the work"]
#[derive(Debug)]
pub struct Completion {
    slot: Arc<Slot>,
    ctx: Context,
}

impl Completion {
    /// Queues a marker at the tail of `stream` and hands it to the poller (and, in
    /// [`Waking::HostFunc`], queues the host function that wakes the task).
    pub(crate) fn after(stream: &Stream) -> Result<Completion> {
        let ctx = stream.context();
        ctx.take_deferred()?;
        stream.bind_if_default()?;
        refuse_capture(stream, "Stream::synchronize_async")?;
        let poller = Poller::get()?;
        let slot = match waking() {
            Waking::Poller => marked(poller, stream)?,
            Waking::HostFunc => host_func(poller, stream)?,
        };
        Ok(Completion { slot, ctx: ctx.clone() })
    }

    /// Whether the GPU is known to be past the marker (or failed): polling now resolves.
    pub fn is_done(&self) -> bool {
        self.slot.is_resolved()
    }
}

/// [`Waking::Poller`]: an event recorded at the tail of `stream`, queried by the poller.
fn marked(poller: &'static Poller, stream: &Stream) -> Result<Arc<Slot>> {
    let event = poller.event(stream.context())?;
    // SAFETY: the event (of the stream's context) and the stream are alive; a default stream
    // was bound above.
    if let Err(e) = unsafe { driver!(cuEventRecord(event.as_raw(), stream.as_raw())) } {
        poller.recycle(event);
        return Err(e);
    }
    let slot = Arc::new(Slot::owned(event, Completer::Poller));
    poller.register(Arc::clone(&slot));
    Ok(slot)
}

/// [`Waking::HostFunc`]: a host function that resolves the slot, then an event after it that
/// the poller watches for the context's errors (the driver skips host functions once its
/// context failed).
fn host_func(poller: &'static Poller, stream: &Stream) -> Result<Arc<Slot>> {
    let event = poller.event(stream.context())?;
    let slot = Arc::new(Slot::owned(event, Completer::HostFunc));
    let woken = Arc::clone(&slot);
    // The closure calls no CUDA and its reference is never the one that holds the event: the
    // event is taken out of the slot before the poller or this function lets go of it.
    if let Err(e) = stream.launch_host_func(move || woken.complete(Ok(()))) {
        give_back(poller, &slot);
        return Err(e);
    }
    let recorded = match slot.event_raw() {
        // SAFETY: the event (of the stream's context) and the stream are alive.
        Some(raw) => unsafe { driver!(cuEventRecord(raw, stream.as_raw())) },
        None => Ok(()),
    };
    if let Err(e) = recorded {
        // The host function may still run: it finds a cancelled slot without an event.
        give_back(poller, &slot);
        return Err(e);
    }
    poller.register(Arc::clone(&slot));
    Ok(slot)
}

/// Cancels a slot the poller never got and keeps its event for reuse.
fn give_back(poller: &Poller, slot: &Slot) {
    slot.cancel();
    if let Some(event) = slot.take_event() {
        poller.recycle(event);
    }
}

/// Refuses a stream being captured: a marker recorded now would become a graph node.
fn refuse_capture(stream: &Stream, operation: &'static str) -> Result<()> {
    if crate::stream::capture_of(stream)?.is_some() {
        return Err(Error::refused(
            crate::error::Reason::DURING_CAPTURE,
            operation,
            "the stream is being captured into a graph, whose work runs at its launches; await the \
             completion of a launch instead (GraphExec::launch_completion)",
        ));
    }
    Ok(())
}

impl Future for Completion {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Result<()>> {
        match self.slot.poll(cx) {
            // As `Stream::synchronize`: an error kept in the context is reported here.
            Poll::Ready(Ok(())) => Poll::Ready(self.ctx.take_deferred()),
            other => other,
        }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        self.slot.cancel();
    }
}

/// Resolves when a user's event completes ([`Event::synchronize_async`]): when the work it
/// captured at its last recording before each query is done. It borrows the event; dropped,
/// the event is never queried again.
#[must_use = "a future does nothing unless awaited; dropping it cancels the wait, not the work"]
#[derive(Debug)]
pub struct EventCompletion<'a> {
    slot: Arc<Slot>,
    ctx: &'a Context,
    _event: PhantomData<&'a Event>,
}

impl Future for EventCompletion<'_> {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Result<()>> {
        match self.slot.poll(cx) {
            Poll::Ready(Ok(())) => Poll::Ready(self.ctx.take_deferred()),
            other => other,
        }
    }
}

impl Drop for EventCompletion<'_> {
    fn drop(&mut self) {
        // Under the slot's lock: once this returns the poller never queries the event again.
        self.slot.cancel();
    }
}

impl Stream {
    /// A future that resolves when the work queued on this stream so far is done, without
    /// blocking the thread: the async form of [`synchronize`](Self::synchronize). Feature
    /// `async`; see [`future`](crate::future) for how it is woken and what a drop does.
    ///
    /// Queues one marker at the stream's tail now (an event, or with
    /// [`Waking::HostFunc`](crate::future::Waking) a host function and an event); the
    /// future resolves with the driver's error when the work before it failed or the context
    /// did, and reports an error kept in the context as `synchronize` does. Work queued on the
    /// stream after this call is not waited for.
    ///
    /// On a stream being captured into a graph this is an [`Error::InvalidArgument`], and so
    /// is another thread's per-thread default stream.
    pub fn synchronize_async(&self) -> Result<Completion> {
        Completion::after(self)
    }
}

impl Event {
    /// A future that resolves when the event completes, without blocking the thread: the async
    /// form of [`synchronize`](Self::synchronize). Feature `async`; see
    /// [`future`](crate::future).
    ///
    /// The event is queried as it is at each query: recorded again meanwhile, the future waits
    /// for the new recording; never recorded, it resolves at once. An event recorded in a
    /// stream capture cannot be waited for: the driver's error is the result.
    pub fn synchronize_async(&self) -> Result<EventCompletion<'_>> {
        self.context().take_deferred()?;
        let poller = Poller::get()?;
        let slot = Arc::new(Slot::borrowed(self));
        // The event cancels the slot before it goes, should the future be forgotten.
        self.watchers().add(&slot);
        poller.register(Arc::clone(&slot));
        Ok(EventCompletion { slot, ctx: self.context(), _event: PhantomData })
    }
}

impl GraphExec {
    /// Launches the graph on `stream` as [`launch`](Self::launch) does, and returns a future
    /// that resolves when this launch (and the work queued on `stream` before it) is done.
    /// Feature `async`; see [`future`](crate::future).
    ///
    /// Fails as `launch` does, and with an [`Error::InvalidArgument`] on a stream being
    /// captured (the launch is then not queued).
    pub fn launch_completion(&self, stream: &Stream) -> Result<Completion> {
        refuse_capture(stream, "GraphExec::launch_completion")?;
        self.launch(stream)?;
        Completion::after(stream)
    }
}
