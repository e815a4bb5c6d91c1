//! Streams: creation with flags and priority, the legacy and per-thread default streams,
//! adopted external streams, synchronization, event waits and host callbacks.
//!
//! See the [Stream Management](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)
//! section of the driver API.

mod attributes;
mod callback;
#[cfg(cuda_headers_13_1)]
mod resource;
#[cfg(cuda_headers_13_1)]
pub use callback::HostFuncSync;
pub(crate) use callback::report_panic;
#[cfg(cuda_headers_13_1)]
pub use resource::SmResource;
pub(crate) mod capturing;
mod memops;
mod wait;
pub(crate) use capturing::capture_of;

pub use crate::track::ordering::{StreamOrdering, set_stream_ordering, stream_ordering};
pub use attributes::{AccessPolicyWindow, AccessProperty, CaptureStatus, SyncPolicy};
pub use memops::{MAX_BATCH_MEM_OPS, StreamMemOp, StreamWaitValueFlags, StreamWriteValueFlags};

use crate::context::Context;
#[cfg(feature = "green")]
use crate::context::GreenHandle;
use crate::device::Device;
use crate::error::Result;
use crate::flags::flags;
use cuhost_driver_sys as sys;
use std::mem::ManuallyDrop;
use std::sync::Arc;

flags! {
    /// Stream creation flags (`CUstream_flags`).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct StreamFlags: u32 {
        /// `CU_STREAM_NON_BLOCKING`: the stream does not synchronize with the legacy default
        /// stream.
        const NON_BLOCKING = 0x1;
    }
}

flags! {
    /// Flags of [`Stream::wait_event_with_flags`] (`CUevent_wait_flags`).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct EventWaitFlags: u32 {
        /// `CU_EVENT_WAIT_EXTERNAL`: in stream capture, wait as an external-event node.
        const EXTERNAL = 0x1;
    }
}

#[derive(Debug)]
struct StreamInner {
    raw: sys::CUstream,
    ctx: Context,
    owned: bool,
    /// Whether `raw` is one of the default-stream handles, which name the stream of whatever
    /// context is current rather than one stream of `ctx`.
    default: bool,
    /// For a per-thread default stream, the thread whose stream it names: the one that made
    /// the handle.
    thread: Option<std::thread::ThreadId>,
    /// For a stream made on a green context, that green context, which must outlive the stream
    /// (`ctx` is then the device's primary context, which the green context shares).
    #[cfg(feature = "green")]
    green: Option<Arc<GreenHandle>>,
    /// Another library's value that keeps the stream alive (a cudarc `CudaStream`), held
    /// while this stream is.
    #[cfg(feature = "cudarc")]
    keeper: Option<Arc<dyn std::any::Any + Send + Sync>>,
    /// An event of `ctx`, made on first need, recorded on this stream whenever another stream
    /// must wait for the work queued on it so far ([`Stream::mark`]); null until then. Locked
    /// from a record to the wait on it, so that each wait waits for its own record (one made
    /// by another thread after this stream began to be captured would be a captured record,
    /// and a wait on it would join the capture).
    mark: std::sync::Mutex<sys::CUevent>,
}

impl StreamInner {
    /// The stream `raw` of `ctx`, destroyed on drop if `owned`; a default-stream handle is
    /// recognised, and a per-thread one remembers the calling thread.
    fn new(ctx: &Context, raw: sys::CUstream, owned: bool) -> StreamInner {
        let per_thread =
            raw == sys::CU_STREAM_PER_THREAD || (raw.is_null() && sys::per_thread_default_stream());
        StreamInner {
            raw,
            ctx: ctx.clone(),
            owned,
            default: is_default_handle(raw),
            thread: per_thread.then(|| std::thread::current().id()),
            #[cfg(feature = "green")]
            green: None,
            #[cfg(feature = "cudarc")]
            keeper: None,
            mark: std::sync::Mutex::new(std::ptr::null_mut()),
        }
    }
}

// SAFETY: a CUstream may be used from any thread; the driver synchronizes access to it.
unsafe impl Send for StreamInner {}
// SAFETY: as above; the fields are never mutated after creation but for `mark`, under its
// lock.
unsafe impl Sync for StreamInner {}

/// A CUDA stream: a queue of work that runs in order on the device.
///
/// A default stream ([`Stream::legacy`], [`Stream::per_thread`], or a default-stream handle
/// given to [`Stream::from_raw`]) is the default stream *of its context*: the driver reads
/// such a handle as the stream of the thread's current context, so calls on it make its
/// context current first (one `cuCtxGetCurrent`). A created stream names its context itself
/// and costs no such call.
///
/// Cloning shares the same stream; an owned stream is destroyed when the last clone is dropped
/// (work already queued still runs).
#[derive(Clone, Debug)]
pub struct Stream {
    inner: Arc<StreamInner>,
}

impl Stream {
    /// Creates a stream in `ctx`
    /// ([`cuStreamCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)).
    pub fn new(ctx: &Context, flags: StreamFlags) -> Result<Stream> {
        ctx.enter()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: one out-parameter; the context is current.
        unsafe { driver!(cuStreamCreate(&mut raw, flags.bits())) }?;
        Ok(Stream::wrap(ctx, raw, true))
    }

    /// Creates a stream with a priority; lower numbers are higher priorities, within
    /// [`Context::stream_priority_range`], and values outside it are clamped by the driver
    /// ([`cuStreamCreateWithPriority`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)).
    pub fn with_priority(ctx: &Context, flags: StreamFlags, priority: i32) -> Result<Stream> {
        ctx.enter()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: one out-parameter; the context is current.
        unsafe { driver!(cuStreamCreateWithPriority(&mut raw, flags.bits(), priority)) }?;
        Ok(Stream::wrap(ctx, raw, true))
    }

    /// The legacy default stream (`CU_STREAM_LEGACY`), which synchronizes with every blocking
    /// stream of the context.
    pub fn legacy(ctx: &Context) -> Stream {
        Stream::wrap(ctx, sys::CU_STREAM_LEGACY, false)
    }

    /// The calling thread's per-thread default stream (`CU_STREAM_PER_THREAD`).
    ///
    /// The value names *this* thread's stream: it may be moved to and dropped on another
    /// thread, but work queued through it from another thread is refused with an
    /// [`Error::InvalidArgument`](crate::error::Error::InvalidArgument) (there the handle would name
    /// that thread's stream, not this one), and it compares equal only to per-thread streams
    /// of the same context made on the same thread.
    pub fn per_thread(ctx: &Context) -> Stream {
        Stream::wrap(ctx, sys::CU_STREAM_PER_THREAD, false)
    }

    /// The default stream that synchronous copies and memsets run on in `ctx`: the calling
    /// thread's per-thread stream where the program was built for per-thread default streams,
    /// the legacy one otherwise.
    pub(crate) fn synchronous(ctx: &Context) -> Stream {
        Stream::wrap(ctx, synchronous_handle(), false)
    }

    /// Wraps a stream made elsewhere (another library, raw calls) without owning it: it is
    /// not destroyed on drop.
    ///
    /// # Safety
    ///
    /// `raw` must be a stream of `ctx` (or one of the special default-stream handles) and stay
    /// alive as long as the returned value and its clones.
    pub unsafe fn from_raw(ctx: &Context, raw: sys::CUstream) -> Stream {
        Stream::wrap(ctx, raw, false)
    }

    /// A copy of this handle that is not counted: it must not be dropped (hence
    /// `ManuallyDrop`), and clones made from it are counted as usual.
    ///
    /// # Safety
    ///
    /// `self`, or a clone of it, stays alive for as long as the copy is used.
    #[inline]
    pub(crate) unsafe fn uncounted(&self) -> ManuallyDrop<Stream> {
        // SAFETY: the pointer comes from a live `Arc`; the copy never decrements the count
        // (it is never dropped) and the caller keeps a counted handle alive meanwhile.
        ManuallyDrop::new(Stream { inner: unsafe { Arc::from_raw(Arc::as_ptr(&self.inner)) } })
    }

    /// Whether this is the only handle of the stream (no other clone exists).
    pub(crate) fn is_sole_handle(&self) -> bool {
        Arc::strong_count(&self.inner) == 1
    }

    fn wrap(ctx: &Context, raw: sys::CUstream, owned: bool) -> Stream {
        Stream { inner: Arc::new(StreamInner::new(ctx, raw, owned)) }
    }

    /// A stream of `ctx` whose handle `raw` stays valid while `keeper` lives, which the value
    /// holds: another library's stream object. Not owned: never destroyed here.
    #[cfg(feature = "cudarc")]
    pub(crate) fn kept_by(
        ctx: &Context,
        raw: sys::CUstream,
        keeper: Arc<dyn std::any::Any + Send + Sync>,
    ) -> Stream {
        let mut inner = StreamInner::new(ctx, raw, false);
        inner.keeper = Some(keeper);
        Stream { inner: Arc::new(inner) }
    }

    /// Takes a stream `cuGreenCtxStreamCreate` made on `green`, owned, with `ctx` the primary
    /// context the green context shares; the stream holds `green`.
    #[cfg(feature = "green")]
    pub(crate) fn wrap_green(ctx: &Context, raw: sys::CUstream, green: Arc<GreenHandle>) -> Stream {
        Stream {
            inner: Arc::new(StreamInner {
                raw,
                ctx: ctx.clone(),
                owned: true,
                default: false,
                thread: None,
                green: Some(green),
                #[cfg(feature = "cudarc")]
                keeper: None,
                mark: std::sync::Mutex::new(std::ptr::null_mut()),
            }),
        }
    }

    /// The green context a stream made by [`GreenContext::stream`](crate::green::GreenContext::stream)
    /// holds.
    #[cfg(feature = "green")]
    pub(crate) fn green_handle(&self) -> Option<&Arc<GreenHandle>> {
        self.inner.green.as_ref()
    }

    /// Whether this is a per-thread default stream: its handle names the stream of whichever
    /// thread uses it, so on a thread other than the one that made it no work may be queued
    /// through it and waits on it must wait for its whole context.
    #[inline]
    pub(crate) fn is_per_thread(&self) -> bool {
        self.inner.thread.is_some()
    }

    /// Whether this is a per-thread default stream made on a thread other than the calling
    /// one (see [`is_per_thread`](Self::is_per_thread)).
    #[inline]
    pub(crate) fn is_other_threads(&self) -> bool {
        self.inner.thread.is_some_and(|t| t != std::thread::current().id())
    }

    /// The raw `CUstream`.
    #[inline]
    pub fn as_raw(&self) -> sys::CUstream {
        self.inner.raw
    }

    /// The stream's context: the one it was made in, or for a stream made on a green context
    /// ([`GreenContext::stream`](crate::green::GreenContext::stream)) the device's primary
    /// context, which the green context shares ([`Stream::green_context`] gives the green
    /// context).
    #[inline]
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// Whether this value destroys the stream when its last clone is dropped.
    pub fn is_owned(&self) -> bool {
        self.inner.owned
    }

    /// Whether this is a default stream (legacy, per-thread, or the null handle), which the
    /// driver resolves through the current context.
    #[inline]
    pub fn is_default(&self) -> bool {
        self.inner.default
    }

    /// For a default stream, makes its context current (the handle names the current
    /// context's default stream); for any other stream, does nothing. Keeps the call sites'
    /// hot path to one branch for created streams.
    #[inline]
    pub(crate) fn bind_if_default(&self) -> Result<()> {
        if self.inner.default { self.bind_default() } else { Ok(()) }
    }

    #[cold]
    fn bind_default(&self) -> Result<()> {
        if self.is_other_threads() {
            return Err(other_threads_stream());
        }
        self.inner.ctx.make_current()
    }

    /// Blocks until all work queued on the stream is done
    /// ([`cuStreamSynchronize`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)).
    ///
    /// A kernel that faulted, a host callback that panicked, or an error kept from a `Drop` in
    /// this context is reported here.
    pub fn synchronize(&self) -> Result<()> {
        let ctx = &self.inner.ctx;
        ctx.take_deferred()?;
        self.bind_if_default()?;
        // SAFETY: the stream is alive while `self` is.
        unsafe { driver!(cuStreamSynchronize(self.inner.raw)) }?;
        ctx.take_deferred()
    }

    /// Blocks until all work queued on the stream is done, for release paths (`Drop`s,
    /// deallocations, unmaps): unlike [`synchronize`](Self::synchronize) it neither reports nor
    /// consumes the context's deferred errors, so a pending error from elsewhere never makes a
    /// release skip its wait. Fails only with the wait's own status.
    /// A per-thread default stream of another thread cannot be named from here: the whole
    /// context is waited for instead.
    pub(crate) fn synchronize_for_release(&self) -> Result<()> {
        if self.is_other_threads() {
            self.inner.ctx.make_current()?;
            // SAFETY: the context is current.
            return unsafe { driver!(cuCtxSynchronize()) };
        }
        self.bind_if_default()?;
        // SAFETY: the stream is alive while `self` is.
        unsafe { driver!(cuStreamSynchronize(self.inner.raw)) }
    }

    /// Whether all work queued on the stream is done, without blocking
    /// ([`cuStreamQuery`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)).
    pub fn query(&self) -> Result<bool> {
        self.inner.ctx.take_deferred()?;
        self.bind_if_default()?;
        // SAFETY: the stream is alive while `self` is.
        let status = unsafe { driver!(status: cuStreamQuery(self.inner.raw)) };
        if status.is(sys::CUresult::CUDA_ERROR_NOT_READY) {
            return Ok(false);
        }
        status.check().map(|()| true)
    }

    /// The flags the stream was created with
    /// ([`cuStreamGetFlags`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)).
    pub fn flags(&self) -> Result<StreamFlags> {
        let mut f = 0;
        // SAFETY: the stream is alive; one out-parameter.
        unsafe { driver!(cuStreamGetFlags(self.inner.raw, &mut f)) }?;
        Ok(StreamFlags::from_bits_retain(f))
    }

    /// The stream's priority
    /// ([`cuStreamGetPriority`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)).
    pub fn priority(&self) -> Result<i32> {
        let mut p = 0;
        // SAFETY: the stream is alive; one out-parameter.
        unsafe { driver!(cuStreamGetPriority(self.inner.raw, &mut p)) }?;
        Ok(p)
    }

    /// The stream's unique id
    /// ([`cuStreamGetId`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)).
    pub fn id(&self) -> Result<u64> {
        let mut id = 0;
        // SAFETY: the stream is alive; one out-parameter.
        unsafe { driver!(cuStreamGetId(self.inner.raw, &mut id)) }?;
        Ok(id)
    }

    /// The device the stream belongs to, as the driver reports it
    /// ([`cuStreamGetDevice`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html),
    /// CUDA 12.8). On an older driver this is an [`Error::Load`](crate::error::Error::Load) naming
    /// the version needed; [`context`](Self::context)`().device()` is the same device without
    /// a call.
    pub fn device(&self) -> Result<Device> {
        self.bind_if_default()?;
        let mut raw = 0;
        // SAFETY: the stream is alive; one out-parameter.
        unsafe { driver!(cuStreamGetDevice(self.inner.raw, &mut raw)) }?;
        Ok(Device::from_raw(raw))
    }

    /// The context the driver associates with the stream, raw
    /// ([`cuStreamGetCtx`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)).
    ///
    /// It is [`context`](Self::context)`().as_raw()` for a stream made in a context, and for a
    /// stream made on a green context the handle of the green context's own context (the one
    /// [`GreenContext::context`](crate::green::GreenContext::context) wraps), which this stream
    /// keeps valid. A raw handle, owning nothing: valid while the stream is.
    pub fn context_raw(&self) -> Result<sys::CUcontext> {
        self.bind_if_default()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: the stream is alive; one out-parameter.
        unsafe { driver!(cuStreamGetCtx(self.inner.raw, &mut raw)) }?;
        Ok(raw)
    }
}

/// The refusal of work through a per-thread default stream on a thread other than the one
/// that made it.
#[cold]
pub(crate) fn other_threads_stream() -> crate::error::Error {
    crate::error::Error::refused(
        crate::error::Reason::WRONG_STREAM,
        "stream",
        "this per-thread default stream was made on another thread, where its handle names that thread's \
         stream; make one with Stream::per_thread on this thread",
    )
}

/// The handle of the default stream that synchronous copies and memsets run on (see
/// [`Stream::synchronous`]).
pub(crate) fn synchronous_handle() -> sys::CUstream {
    if sys::per_thread_default_stream() { sys::CU_STREAM_PER_THREAD } else { sys::CU_STREAM_LEGACY }
}

/// Whether `raw` is a handle the driver resolves through the current context: the null
/// stream, `CU_STREAM_LEGACY` or `CU_STREAM_PER_THREAD`.
#[inline]
fn is_default_handle(raw: sys::CUstream) -> bool {
    raw.is_null() || raw == sys::CU_STREAM_LEGACY || raw == sys::CU_STREAM_PER_THREAD
}

/// Two values are equal when they name the same stream: the same created stream, or the same
/// default stream, which is one per context (legacy) or one per context and thread (per-thread).
impl PartialEq for Stream {
    #[inline]
    fn eq(&self, other: &Stream) -> bool {
        self.inner.raw == other.inner.raw
            && (!self.inner.default
                || (self.inner.ctx == other.inner.ctx && self.inner.thread == other.inner.thread))
    }
}

impl Eq for Stream {}

impl Stream {
    /// Records the stream's mark (an event of its context, made on first use and kept until
    /// the stream goes) here and returns its lock, which holds the event, for another stream
    /// to wait for the work queued on this one so far (`cuStreamWaitEvent`) before the lock is
    /// let go: a later record does not change what an earlier wait waits for, so one event
    /// serves every such wait, made one at a time.
    ///
    /// # Safety
    ///
    /// The stream's context is current, and the stream is not another thread's per-thread
    /// default stream: the event is made in the current context, and a default-stream handle
    /// is recorded on through it.
    pub(crate) unsafe fn mark(&self) -> Result<std::sync::MutexGuard<'_, sys::CUevent>> {
        let mut event = self.inner.mark.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if event.is_null() {
            let mut made = std::ptr::null_mut();
            // SAFETY: one out-parameter; the stream's context is current (the caller's contract).
            unsafe { driver!(cuEventCreate(&mut made, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING.0)) }?;
            *event = made;
        }
        // SAFETY: the event (of this stream's context) and the stream are alive; the handle
        // names this stream in the current context (the caller's contract).
        unsafe { driver!(cuEventRecord(*event, self.as_raw())) }?;
        Ok(event)
    }
}

impl Drop for StreamInner {
    fn drop(&mut self) {
        let mark = *self.mark.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !mark.is_null() {
            // SAFETY: made by `mark` in `ctx` and destroyed once, here; waits queued on it keep
            // what they need.
            self.ctx.with_current_for_drop("Stream", || unsafe { driver!(cuEventDestroy(mark)) });
        }
        if self.owned {
            // SAFETY: this value created the stream and it is the last user.
            let status = unsafe { driver!(status: cuStreamDestroy(self.raw)) };
            if let Err(e) = status.check() {
                self.ctx.defer(e.dropping("Stream", None));
            }
        }
    }
}
