//! Futures that resolve when GPU work completes, for async executors (feature `async`).
//!
//! A task that calls [`Stream::synchronize`] blocks its executor's worker thread, and every
//! task queued behind it. The futures here wait without blocking: a task `.await`s the
//! completion of a stream's work ([`Stream::synchronize_async`]), of an event
//! ([`Event::synchronize_async`]), of a graph launch ([`GraphExec::launch_completion`]), or a
//! copy to the host that resolves to the data ([`DeviceView::to_vec_async`]) or fills a
//! pinned buffer ([`DeviceView::to_pinned_async`]). They use `std`'s [`Future`] and
//! [`Waker`](std::task::Waker) only: any executor runs them (tokio, smol, async-std,
//! `futures::executor`).
//!
//! ```no_run
//! # use cuhost::{Context, Device, DeviceBuffer, Stream, StreamFlags};
//! # async fn serve() -> cuhost::Result<()> {
//! let ctx = Context::primary(&Device::get(0)?)?;
//! let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
//! let input = DeviceBuffer::from_slice(&stream, &[1u32, 2, 3])?;
//! // ... launch kernels on `stream` ...
//! let answer: Vec<u32> = input.to_vec_async(&stream)?.await?; // the worker thread is free meanwhile
//! stream.synchronize_async()?.await?;
//! # Ok(()) }
//! ```
//!
//! # What a future waits for
//!
//! Each future is made by a call that queues nothing but a *marker* after the work it covers
//! (one event recorded on the stream, or a host function and an event, see *Waking*), so the
//! work is running before the first poll, as with any other `_async` call of this crate. The
//! future resolves to `Ok` once the GPU is past the marker, or to the [`Error`] the driver
//! reports for it: a failed or faulting operation before the marker, or the context's sticky
//! error (every pending future of a context that faults resolves with it; none hangs). Like
//! [`Stream::synchronize`], a future that resolves also reports an error kept in the context
//! (a `Drop`'s, or a panic of a host function of [`Stream::launch_host_func`]).
//!
//! # Waking
//!
//! Two ways to learn that the GPU is done, chosen per process with [`set_waking`]:
//!
//! * [`Waking::Poller`] (the default): the future's marker is an event, and one thread of the
//!   process (`cuda-core-poller`) queries the events of all pending futures in turns
//!   (`cuEventQuery`, one call per pending future per turn) and wakes the task of each one
//!   done. Between turns it yields its core while anything happened in the last
//!   [`PollerConfig::spin`] (default 5 ms), then pauses for 10 µs doubling up to
//!   [`PollerConfig::max_sleep`] (default 200 µs); with no future pending it sleeps until one
//!   is made. *Latency:* a few microseconds after the GPU finishes while spinning (one turn:
//!   the queries of the futures pending, about 0.1–0.5 µs each), up to `max_sleep` after a long
//!   quiet spell. *CPU:* up to one core while futures are pending and the GPU is busy, none
//!   when idle. *Stream:* one `cuEventRecord`, nothing that holds the stream back. Marker
//!   events of primary contexts are kept for reuse (up to 4,096, for the life of the
//!   process, which keeps those contexts retained); those of created contexts are destroyed
//!   once their future is done, so that the context goes when its user drops it.
//! * [`Waking::HostFunc`]: the marker is a host function (`cuLaunchHostFunc`) that wakes the
//!   task from the driver's thread, followed by an event that the poller queries once a
//!   millisecond only to see errors (the driver never calls a host function after its context
//!   failed, so without it such a future would hang). *Latency:* the driver's host-function
//!   thread is woken by the GPU, typically tens of microseconds. *CPU:* none of ours while
//!   waiting. *Stream:* the host function holds the stream: work queued after the future's
//!   marker starts only once the task was woken, which costs a pipeline of kernels that much
//!   per future. The waker runs on the driver's thread, which must not call CUDA: executors'
//!   wakers only schedule the task.
//!
//! The poller is the default because it meets a wake-up latency of a few microseconds and
//! never stalls a stream; `cargo xtask bench` (`tests/benches/async_wake.rs`) measures both
//! against `cuStreamSynchronize` on the machine at hand. A waker that panics (in either mode)
//! resolves its future with [`Error::CallbackPanicked`]; the poller and the driver's thread go
//! on.
//!
//! # Cancellation
//!
//! Every future here is *cancel-safe* in the sense that matters on a GPU: dropping one while
//! it is pending never frees, reuses or hands back memory that queued work still uses. Only
//! the wait is cancelled, never the work: the queued work runs to the end either way. What
//! the future held follows the stream rule (see [`DeviceBuffer`]'s *Stream order*) as if the future
//! had never existed:
//!
//! * the pinned staging buffer of [`to_vec_async`](crate::DeviceView::to_vec_async) is a
//!   [`PinnedBuffer`]; its copy is recorded on it, and dropping it gives the memory back to
//!   the pinned pool only after that copy (the pool keeps the block until the copy's event
//!   has completed);
//! * the pinned buffer that [`to_pinned_async`](crate::DeviceView::to_pinned_async) fills is
//!   borrowed mutably until the future resolves or is dropped; after a drop the copy is still
//!   recorded on it, so [`PinnedBuffer::as_slice`] waits for it, and dropping the buffer
//!   defers its release as above;
//! * the device memory read by a copy is borrowed until the future resolves or is dropped;
//!   the copy's stream is noted on its buffer, whose release waits for it;
//! * a future over a user's event ([`Event::synchronize_async`]) borrows the event; dropped,
//!   its event is never queried again, and neither is it once the event is dropped (a
//!   future forgotten with `mem::forget` is cancelled by the event's drop).
//!
//! What is lost by a drop is the result: an error that only the dropped future would have
//! reported is not reported elsewhere (a sticky error is, by every later call). A future
//! resolves once; polling it again is an [`Error::InvalidArgument`].
//!
//! # Who waits for whom
//!
//! A future's marker is queued on the stream the call names and covers the work queued there
//! before it. A copy future's copy runs on that stream: it first waits for the work queued so
//! far on the device buffer's own stream (the stream rule's first use), and the pinned buffer
//! orders it after copies on other streams that use the same host memory. Work on other
//! streams is not covered: await their own futures. On a stream being captured into a graph
//! there is nothing to wait for yet: the calls are refused with an [`Error::InvalidArgument`].
//!
//! [`Stream::synchronize`]: crate::Stream::synchronize
//! [`Stream::synchronize_async`]: crate::Stream::synchronize_async
//! [`Stream::launch_host_func`]: crate::Stream::launch_host_func
//! [`Event::synchronize_async`]: crate::Event::synchronize_async
//! [`GraphExec::launch_completion`]: crate::graph::GraphExec::launch_completion
//! [`DeviceView::to_vec_async`]: crate::DeviceView::to_vec_async
//! [`DeviceView::to_pinned_async`]: crate::DeviceView::to_pinned_async
//! [`DeviceView`]: crate::DeviceView
//! [`DeviceBuffer`]: crate::DeviceBuffer
//! [`PinnedBuffer`]: crate::PinnedBuffer
//! [`PinnedBuffer::as_slice`]: crate::PinnedBuffer::as_slice
//! [`Error`]: crate::Error
//! [`Error::CallbackPanicked`]: crate::Error::CallbackPanicked
//! [`Error::InvalidArgument`]: crate::Error::InvalidArgument

mod completion;
mod copy;
mod poller;
mod slot;

pub use completion::{Completion, EventCompletion};
pub use copy::{ToPinned, ToVec};
pub use poller::{PollerConfig, poller_config, set_poller_config};
pub(crate) use slot::Watchers;

use std::sync::atomic::{AtomicU8, Ordering};

/// How pending futures learn that their GPU work is done (see the module documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Waking {
    /// One thread of the process queries the futures' events in turns (the default).
    #[default]
    Poller,
    /// A host function per future (`cuLaunchHostFunc`) wakes the task from the driver's
    /// thread.
    HostFunc,
}

static WAKING: AtomicU8 = AtomicU8::new(0);

/// Chooses how the futures made from now on are woken, for the whole process.
pub fn set_waking(waking: Waking) {
    WAKING.store(waking as u8, Ordering::Relaxed);
}

/// How the futures made now are woken.
pub fn waking() -> Waking {
    if WAKING.load(Ordering::Relaxed) == Waking::HostFunc as u8 { Waking::HostFunc } else { Waking::Poller }
}
