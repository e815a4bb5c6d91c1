//! Runtime streams and events.

use super::defer;
use crate::error::{Error, Result, check_runtime, runtime_error};
use crate::event::EventFlags;
use crate::stream::StreamFlags;
use cuhost_cudart_sys as rt;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// A stream of the current device's primary context, the stream
/// [`cudaStreamCreateWithFlags`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)
/// makes; destroyed when dropped (work already queued still runs).
///
/// It is made through the driver (`cuStreamCreate` in the primary context the runtime uses), so
/// it is also a driver [`crate::stream::Stream`] and dereferences to one: the crate's buffers are
/// allocated on it ([`malloc`](super::malloc)`(&stream, n)`, `DeviceBuffer::new(&stream, n)`),
/// and every call that takes a `&cuhost::Stream` takes `&stream`. Buffers allocated on it
/// keep it alive. `as_raw` gives the handle both APIs use.
#[derive(Debug)]
pub struct Stream {
    inner: crate::stream::Stream,
}

impl Stream {
    /// A blocking stream on the current device, the stream
    /// [`cudaStreamCreate`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)
    /// makes; fails as [`with_flags`](Self::with_flags) does.
    pub fn create() -> Result<Stream> {
        Stream::with_flags(StreamFlags::empty())
    }

    /// A stream with flags, e.g. [`StreamFlags::NON_BLOCKING`], on the current device, the stream
    /// [`cudaStreamCreateWithFlags`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)
    /// makes. It is created through the driver
    /// ([`cuStreamCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)) in the
    /// current device's primary context.
    ///
    /// Fails when the runtime cannot say which device is current, when that device's primary
    /// context cannot be retained, or with the driver's status when the stream cannot be made.
    pub fn with_flags(flags: StreamFlags) -> Result<Stream> {
        let ctx = super::current_context()?;
        Ok(Stream { inner: crate::stream::Stream::new(&ctx, flags)? })
    }

    /// The raw `cudaStream_t` (also the driver's `CUstream`).
    pub fn as_raw(&self) -> rt::cudaStream_t {
        self.inner.as_raw().cast()
    }

    /// The stream as a driver [`crate::stream::Stream`] (what `Deref` gives too).
    pub fn as_stream(&self) -> &crate::stream::Stream {
        &self.inner
    }

    /// Waits for all work queued on the stream
    /// ([`cudaStreamSynchronize`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)).
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: a live stream.
        check_runtime("cudaStreamSynchronize", unsafe { rt::cudaStreamSynchronize(self.as_raw()) })
    }

    /// Whether all work queued on the stream is done
    /// ([`cudaStreamQuery`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)).
    pub fn query(&self) -> Result<bool> {
        // SAFETY: a live stream.
        match unsafe { rt::cudaStreamQuery(self.as_raw()) } {
            rt::cudaError_t::cudaSuccess => Ok(true),
            rt::cudaError_t::cudaErrorNotReady => Ok(false),
            status => Err(runtime_error("cudaStreamQuery", status)),
        }
    }

    /// Makes later work on the stream wait for `event`
    /// ([`cudaStreamWaitEvent`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)).
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        // SAFETY: a live stream and event; flags 0.
        check_runtime("cudaStreamWaitEvent", unsafe { rt::cudaStreamWaitEvent(self.as_raw(), event.raw, 0) })
    }

    /// Runs `callback` on a runtime thread once the work queued so far is done, with the
    /// stream's status
    /// ([`cudaStreamAddCallback`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__STREAM.html)).
    /// The callback must not call CUDA. A panic in it is caught and kept (see
    /// [`take_deferred_errors`](super::take_deferred_errors)).
    pub fn add_callback<F: FnOnce(Result<()>) + Send + 'static>(&self, callback: F) -> Result<()> {
        let boxed: Box<Box<dyn FnOnce(Result<()>) + Send>> = Box::new(Box::new(callback));
        let data = Box::into_raw(boxed);
        // SAFETY: the trampoline takes back the box exactly once when the runtime calls it.
        let status = unsafe { rt::cudaStreamAddCallback(self.as_raw(), Some(trampoline), data.cast(), 0) };
        if let Err(e) = check_runtime("cudaStreamAddCallback", status) {
            // SAFETY: the runtime refused the callback, so it will never call it; the box is ours again.
            drop(unsafe { Box::from_raw(data) });
            return Err(e);
        }
        Ok(())
    }
}

impl std::ops::Deref for Stream {
    type Target = crate::stream::Stream;

    fn deref(&self) -> &crate::stream::Stream {
        &self.inner
    }
}

impl AsRef<crate::stream::Stream> for Stream {
    fn as_ref(&self) -> &crate::stream::Stream {
        &self.inner
    }
}

unsafe extern "C" fn trampoline(_stream: rt::cudaStream_t, status: rt::cudaError_t, data: *mut c_void) {
    // SAFETY: `data` is the box leaked by `add_callback`, passed to this function once.
    let callback = unsafe { Box::from_raw(data.cast::<Box<dyn FnOnce(Result<()>) + Send>>()) };
    let result = check_runtime("cudaStreamAddCallback (stream status)", status);
    if let Err(payload) = catch_unwind(AssertUnwindSafe(move || callback(result))) {
        defer(Error::CallbackPanicked { message: crate::error::panic_message(payload) });
    }
}

/// An event made by the runtime (`cudaEventCreateWithFlags`); destroyed on drop.
#[derive(Debug)]
pub struct Event {
    raw: rt::cudaEvent_t,
}

// SAFETY: an event may be used from any thread.
unsafe impl Send for Event {}
// SAFETY: as above.
unsafe impl Sync for Event {}

impl Event {
    /// An event with timing
    /// ([`cudaEventCreate`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__EVENT.html)).
    pub fn create() -> Result<Event> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: one out-parameter.
        check_runtime("cudaEventCreate", unsafe { rt::cudaEventCreate(&mut raw) })?;
        Ok(Event { raw })
    }

    /// An event with flags
    /// ([`cudaEventCreateWithFlags`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__EVENT.html)).
    pub fn with_flags(flags: EventFlags) -> Result<Event> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: one out-parameter; the flag bits are the runtime's.
        check_runtime("cudaEventCreateWithFlags", unsafe {
            rt::cudaEventCreateWithFlags(&mut raw, flags.bits())
        })?;
        Ok(Event { raw })
    }

    /// The raw `cudaEvent_t` (also a `CUevent`).
    pub fn as_raw(&self) -> rt::cudaEvent_t {
        self.raw
    }

    /// Records the event at the current end of `stream`
    /// ([`cudaEventRecord`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__EVENT.html)).
    pub fn record(&self, stream: &Stream) -> Result<()> {
        // SAFETY: a live event and stream.
        check_runtime("cudaEventRecord", unsafe { rt::cudaEventRecord(self.raw, stream.as_raw()) })
    }

    /// Whether the recorded work is done
    /// ([`cudaEventQuery`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__EVENT.html)).
    pub fn query(&self) -> Result<bool> {
        // SAFETY: a live event.
        match unsafe { rt::cudaEventQuery(self.raw) } {
            rt::cudaError_t::cudaSuccess => Ok(true),
            rt::cudaError_t::cudaErrorNotReady => Ok(false),
            status => Err(runtime_error("cudaEventQuery", status)),
        }
    }

    /// Waits until the recorded work is done
    /// ([`cudaEventSynchronize`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__EVENT.html)).
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: a live event.
        check_runtime("cudaEventSynchronize", unsafe { rt::cudaEventSynchronize(self.raw) })
    }

    /// Milliseconds between two recorded, completed events with timing
    /// ([`cudaEventElapsedTime`](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__EVENT.html)).
    pub fn elapsed_time(start: &Event, end: &Event) -> Result<f32> {
        let mut ms = 0.0;
        // SAFETY: live events and one out-parameter.
        check_runtime("cudaEventElapsedTime", unsafe {
            rt::cudaEventElapsedTime(&mut ms, start.raw, end.raw)
        })?;
        Ok(ms)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: this value owns the event.
        if let Err(e) = check_runtime("cudaEventDestroy", unsafe { rt::cudaEventDestroy(self.raw) }) {
            defer(e);
        }
    }
}
