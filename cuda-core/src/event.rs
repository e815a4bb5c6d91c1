//! Events: markers in a stream to wait on, query, and time.
//!
//! See the [Event Management](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html)
//! section of the driver API.

use crate::abi::AbiVersions;
use crate::context::Context;
use crate::error::{Error, Result, check};
use crate::flags::flags;
use crate::stream::Stream;
use cuhost_driver_sys as sys;

flags! {
    /// Event creation flags (`CUevent_flags`).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct EventFlags: u32 {
        /// `CU_EVENT_BLOCKING_SYNC`: [`Event::synchronize`] blocks the thread instead of spinning.
        const BLOCKING_SYNC = 0x1;
        /// `CU_EVENT_DISABLE_TIMING`: no timestamps; cheaper to record and wait on.
        const DISABLE_TIMING = 0x2;
        /// `CU_EVENT_INTERPROCESS`: may be shared with other processes (needs `DISABLE_TIMING`).
        const INTERPROCESS = 0x4;
    }
}

flags! {
    /// Flags of [`Event::record_with_flags`] (`CUevent_record_flags`).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct EventRecordFlags: u32 {
        /// `CU_EVENT_RECORD_EXTERNAL`: in stream capture, record as an external-event node.
        const EXTERNAL = 0x1;
    }
}

/// A CUDA event, destroyed on drop.
#[derive(Debug)]
pub struct Event {
    raw: sys::CUevent,
    ctx: Context,
    flags: EventFlags,
    /// The futures of [`synchronize_async`](Self::synchronize_async) that watch the event: the
    /// poller queries it for them, so they are cancelled before it is destroyed or given up
    /// (a future forgotten with `mem::forget` never cancels itself).
    #[cfg(feature = "async")]
    watchers: crate::future::Watchers,
}

// SAFETY: a CUevent may be used from any thread; the driver synchronizes access to it.
unsafe impl Send for Event {}
// SAFETY: as above; `&Event` only records, queries and waits, which the driver allows concurrently.
unsafe impl Sync for Event {}

impl Event {
    /// Creates an event in `ctx`
    /// ([`cuEventCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html)).
    ///
    /// `INTERPROCESS` without `DISABLE_TIMING` is an [`Error::InvalidArgument`].
    pub fn new(ctx: &Context, flags: EventFlags) -> Result<Event> {
        if flags.contains(EventFlags::INTERPROCESS) && !flags.contains(EventFlags::DISABLE_TIMING) {
            return Err(Error::invalid(
                "Event::new",
                "an INTERPROCESS event must also have DISABLE_TIMING; add EventFlags::DISABLE_TIMING",
            ));
        }
        ctx.enter()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: one out-parameter; the context is current.
        unsafe { driver!(cuEventCreate(&mut raw, flags.bits())) }?;
        // SAFETY: just created, owned by nothing else.
        Ok(unsafe { Event::from_raw(ctx, raw, flags) })
    }

    /// Wraps a raw event and takes ownership: it is destroyed on drop.
    ///
    /// # Safety
    ///
    /// `raw` must be a live event of `ctx`, created with `flags`, that nothing else destroys.
    pub unsafe fn from_raw(ctx: &Context, raw: sys::CUevent, flags: EventFlags) -> Event {
        Event {
            raw,
            ctx: ctx.clone(),
            flags,
            #[cfg(feature = "async")]
            watchers: crate::future::Watchers::default(),
        }
    }

    /// The raw `CUevent`.
    #[inline]
    pub fn as_raw(&self) -> sys::CUevent {
        self.raw
    }

    /// Gives up ownership and returns the raw event, which the caller must destroy.
    pub fn into_raw(self) -> sys::CUevent {
        // The caller may destroy the event: nothing of this crate queries it afterwards.
        #[cfg(feature = "async")]
        self.watchers.cancel_all();
        let raw = self.raw;
        std::mem::forget(self);
        raw
    }

    /// The event's context.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The futures watching the event.
    #[cfg(feature = "async")]
    pub(crate) fn watchers(&self) -> &crate::future::Watchers {
        &self.watchers
    }

    /// The flags the event was created with.
    pub fn flags(&self) -> EventFlags {
        self.flags
    }

    /// Captures the work queued so far on `stream`; the event completes when that work does
    /// ([`cuEventRecord`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html)).
    ///
    /// The event and the stream must belong to the same context. On a default stream, the
    /// stream's context is made current first, so the event captures that context's default
    /// stream whatever context the thread had current.
    #[inline]
    pub fn record(&self, stream: &Stream) -> Result<()> {
        self.ctx.take_deferred()?;
        stream.bind_if_default()?;
        // SAFETY: both handles are alive while their owners are borrowed.
        unsafe { driver!(cuEventRecord(self.raw, stream.as_raw())) }
    }

    /// [`Event::record`] with flags
    /// ([`cuEventRecordWithFlags`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html)).
    #[inline]
    ///
    /// [`EXTERNAL`](EventRecordFlags::EXTERNAL) on a stream being captured is refused with
    /// [`Error::InvalidArgument`]: the graph would record this event at every launch, and the
    /// event is not the graph's to keep alive; add an event record node
    /// ([`Graph::add_event_record_node`](crate::graph::Graph::add_event_record_node)), which
    /// holds the event, instead.
    pub fn record_with_flags(&self, stream: &Stream, flags: EventRecordFlags) -> Result<()> {
        self.ctx.take_deferred()?;
        stream.bind_if_default()?;
        if flags.contains(EventRecordFlags::EXTERNAL) {
            refuse_external_in_capture("Event::record_with_flags", stream)?;
        }
        // SAFETY: both handles are alive while their owners are borrowed.
        unsafe { driver!(cuEventRecordWithFlags(self.raw, stream.as_raw(), flags.bits())) }
    }

    /// Whether the captured work is done (an event never recorded is done)
    /// ([`cuEventQuery`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html)).
    pub fn query(&self) -> Result<bool> {
        self.ctx.take_deferred()?;
        // SAFETY: the event is alive.
        let status = unsafe { driver!(status: cuEventQuery(self.raw)) };
        if status.is(sys::CUresult::CUDA_ERROR_NOT_READY) {
            return Ok(false);
        }
        status.check().map(|()| true)
    }

    /// Blocks until the captured work is done
    /// ([`cuEventSynchronize`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html)).
    pub fn synchronize(&self) -> Result<()> {
        self.ctx.take_deferred()?;
        // SAFETY: the event is alive.
        unsafe { driver!(cuEventSynchronize(self.raw)) }?;
        self.ctx.take_deferred()
    }

    /// Milliseconds between `start` and `end`, both recorded and complete, both with timing
    /// ([`cuEventElapsedTime`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EVENT.html)).
    ///
    /// An event made with `DISABLE_TIMING` is an [`Error::InvalidArgument`].
    pub fn elapsed_time(start: &Event, end: &Event) -> Result<f32> {
        if start.flags.contains(EventFlags::DISABLE_TIMING) || end.flags.contains(EventFlags::DISABLE_TIMING)
        {
            return Err(Error::invalid(
                "Event::elapsed_time",
                "an event was created with DISABLE_TIMING; create both without it to time them",
            ));
        }
        // Drivers before 12.8 have the first version only, which reads the same arguments.
        static ELAPSED: AbiVersions = AbiVersions::new("cuEventElapsedTime", &[12080, 2000]);
        let mut ms = 0.0f32;
        let status = if ELAPSED.choose()? == 12080 {
            // SAFETY: both events are alive; one out-parameter.
            unsafe { sys::cuEventElapsedTime(&mut ms, start.raw, end.raw) }
        } else {
            // SAFETY: as above.
            unsafe { sys::cuEventElapsedTime_v2000(&mut ms, start.raw, end.raw) }
        };
        check("cuEventElapsedTime", status)?;
        Ok(ms)
    }
}

/// Refuses an external event node on a stream being captured: the graph would name the event
/// at every launch, and nothing would keep the event alive for it.
#[cold]
pub(crate) fn refuse_external_in_capture(operation: &'static str, stream: &Stream) -> Result<()> {
    if stream.capture_status()? != crate::stream::CaptureStatus::None {
        return Err(Error::refused(
            crate::error::Reason::DURING_CAPTURE,
            operation,
            "EXTERNAL on a stream being captured makes an event node of the graph that names this event at every \
             launch, which the graph cannot keep alive; add an event record or wait node to the graph \
             (Graph::add_event_record_node, Graph::add_event_wait_node), which holds an Arc<Event>",
        ));
    }
    Ok(())
}

impl Drop for Event {
    fn drop(&mut self) {
        // No future's poller queries the event from here on.
        #[cfg(feature = "async")]
        self.watchers.cancel_all();
        // SAFETY: this value owns the event; the driver defers destruction until pending work is done.
        if let Err(e) = unsafe { driver!(cuEventDestroy(self.raw)) } {
            self.ctx.defer(e.dropping("Event", None));
        }
    }
}

/// Events of a whole context (CUDA 12.5), beside the stream ones above.
impl Context {
    /// Captures in `event` all the work queued in this context so far, on any of its streams;
    /// the event completes when that work does
    /// ([`cuCtxRecordEvent`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html),
    /// CUDA 12.5). For a primary context that includes the work of its green contexts; for the
    /// context of a green context ([`GreenContext::context`](crate::green::GreenContext::context)), only that green context's.
    ///
    /// The event must belong to this context: the driver refuses another
    /// (`CUDA_ERROR_INVALID_HANDLE`), and refuses the call while a stream of the context is
    /// being captured (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`, which also ends those
    /// captures). On an older driver this is an [`Error::Load`] naming the version needed.
    pub fn record_event(&self, event: &Event) -> Result<()> {
        self.take_deferred()?;
        // SAFETY: both handles are alive while their owners are borrowed.
        unsafe { driver!(cuCtxRecordEvent(self.as_raw(), event.as_raw())) }
    }

    /// Makes all work queued in this context from now on wait until `event` completes, without
    /// blocking the host
    /// ([`cuCtxWaitEvent`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html),
    /// CUDA 12.5). For a primary context its green contexts wait too. The event may belong to
    /// any context or device; the driver refuses the call for an event or a stream of the
    /// context being captured (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`).
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        self.take_deferred()?;
        // SAFETY: both handles are alive while their owners are borrowed.
        unsafe { driver!(cuCtxWaitEvent(self.as_raw(), event.as_raw())) }
    }
}
