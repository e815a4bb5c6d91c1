//! Host functions recorded by stream capture: a closure that the captured graph owns and runs
//! at every launch, where [`Stream::launch_host_func`]'s `FnOnce` can run only once.

use super::host::HostFunction;
use crate::error::{Error, Result};
use crate::stream::{Stream, capture_of};
use std::sync::{Mutex, PoisonError};

impl Stream {
    /// Records `f` into the graph this stream is being captured into, as a host node that runs
    /// `f` on a driver thread at every launch of the graph's executable graphs, after the work
    /// captured before it ([`cuLaunchHostFunc`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html)
    /// during capture).
    ///
    /// The graph owns `f`: it is kept alive by the graph that [`Capture::end`](super::Capture::end)
    /// returns (or the graph given to [`begin_capture_to_graph`](Self::begin_capture_to_graph)),
    /// its clones and the graphs that take it as a child, and every executable graph made from
    /// them, and dropped once all of them are gone (an executable graph that was launched waits
    /// for its context's work first); dropped with the capture if the capture is discarded.
    /// Launches of several executable graphs may run it at the same time: the calls take turns
    /// (it is behind a lock), so `f` needs to be `Send` only. A panic in `f` is caught and
    /// reported as [`Error::CallbackPanicked`] by the next call through the stream's context,
    /// as for [`launch_host_func`](Self::launch_host_func); later launches run `f` again.
    ///
    /// `f` must not call CUDA (the driver forbids it in host functions), nor wait for work
    /// queued after it (a [`PinnedBuffer`](crate::memory::PinnedBuffer)'s `as_slice`, for instance).
    ///
    /// On a stream that is not being captured by a capture begun through this crate
    /// ([`begin_capture`](Self::begin_capture), or a stream that joined one) this is refused
    /// with an [`Error::InvalidArgument`]: use [`launch_host_func`](Self::launch_host_func),
    /// which runs its closure once.
    ///
    /// ```no_run
    /// use cuhost::graph::{CaptureMode, InstantiateFlags};
    /// use cuhost::{Context, Device, Stream, StreamFlags};
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// # fn main() -> cuhost::Result<()> {
    /// let ctx = Context::primary(&Device::get(0)?)?;
    /// let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    /// let runs = Arc::new(AtomicU32::new(0));
    /// let counter = runs.clone();
    /// let capture = stream.begin_capture(CaptureMode::ThreadLocal)?;
    /// stream.launch_replayable_host_func(move || {
    ///     counter.fetch_add(1, Ordering::Relaxed);
    /// })?;
    /// let exec = capture.end()?.instantiate(InstantiateFlags::empty())?;
    /// for _ in 0..3 {
    ///     exec.launch(&stream)?;
    /// }
    /// stream.synchronize()?;
    /// assert_eq!(runs.load(Ordering::Relaxed), 3);
    /// # Ok(()) }
    /// ```
    pub fn launch_replayable_host_func<F: FnMut() + Send + 'static>(&self, f: F) -> Result<()> {
        let ctx = self.context();
        ctx.take_deferred()?;
        self.bind_if_default()?;
        let Some(capture) = capture_of(self)? else {
            return Err(Error::invalid(
                "Stream::launch_replayable_host_func",
                "the stream is not being captured by a capture begun through this crate; use \
                 Stream::launch_host_func to run a closure once",
            ));
        };
        let f = Mutex::new(f);
        let (host, params) = HostFunction::params(ctx, move || {
            let mut f = f.lock().unwrap_or_else(PoisonError::into_inner);
            (*f)()
        });
        // SAFETY: the stream is live; the trampoline matches `CUhostFn` and only borrows the
        // user data, which the capture hands to its graph below (and which stays alive for
        // good if the capture ended meanwhile and the call ran once instead).
        unsafe { driver!(cuLaunchHostFunc(self.as_raw(), params.fn_, params.userData)) }?;
        capture.note(host);
        Ok(())
    }
}
