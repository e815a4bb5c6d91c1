//! The handle of a green context that its clones, its streams and its context share: the green
//! context is destroyed when the last of them goes. It lives here, below streams and
//! contexts, which hold it; [`crate::green`] builds the public type on it.

use super::Context;
use crate::device::Device;
use cuhost_driver_sys as sys;
use std::sync::{Mutex, MutexGuard, PoisonError, Weak};

/// The green context behind the clones of a [`GreenContext`](crate::green::GreenContext), and behind the streams and the
/// context made on it.
#[derive(Debug)]
pub(crate) struct GreenHandle {
    pub(crate) raw: sys::CUgreenCtx,
    /// The handle `cuCtxFromGreenCtx` gives, valid while `raw` is.
    pub(crate) ctx_raw: sys::CUcontext,
    pub(crate) device: Device,
    /// The device's primary context, retained: the context of the green context's streams,
    /// and where errors of its `Drop` are kept.
    pub(crate) primary: Context,
    pub(crate) owned: bool,
    /// Serializes the calls that take `raw` (see the module documentation).
    pub(crate) calls: Mutex<()>,
}

// SAFETY: the handles may be used from any thread; the calls that take the green context's
// handle hold `calls`, and nothing is mutated after creation.
unsafe impl Send for GreenHandle {}
// SAFETY: as above.
unsafe impl Sync for GreenHandle {}

impl GreenHandle {
    pub(crate) fn lock(&self) -> MutexGuard<'_, ()> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The handle `cuCtxFromGreenCtx` gave.
    pub(crate) fn context_raw(&self) -> sys::CUcontext {
        self.ctx_raw
    }

    /// The green context's device.
    pub(crate) fn device(&self) -> Device {
        self.device
    }
}

impl Drop for GreenHandle {
    fn drop(&mut self) {
        // No longer one `Stream::green_context` may hand out (before the handle can be reused).
        let me: *const GreenHandle = self;
        lock_green_registry().retain(|(_, weak)| !std::ptr::eq(weak.as_ptr(), me) && weak.strong_count() > 0);
        if !self.owned {
            return;
        }
        // Its context may still be current here (made current by a call through it, and left
        // so); the driver would keep a destroyed context current, so unbind it first.
        let mut current = std::ptr::null_mut();
        // SAFETY: one out-parameter; binding no context is always valid.
        unsafe {
            if !self.ctx_raw.is_null()
                && sys::cuCtxGetCurrent(&mut current) == sys::CUresult::CUDA_SUCCESS
                && current == self.ctx_raw
            {
                let _ = sys::cuCtxSetCurrent(std::ptr::null_mut());
            }
        }
        // SAFETY: this value owns the green context, and nothing made on it is left: each stream
        // and context made on it holds this handle.
        if let Err(e) = unsafe { driver!(cuGreenCtxDestroy(self.raw)) } {
            self.primary.defer(e.dropping("GreenContext", None));
        }
    }
}

/// The green contexts this crate owns, by raw handle, so that [`Stream::green_context`](crate::stream::Stream::green_context) can
/// hand out the value that owns one rather than a second owner.
static REGISTRY: Mutex<Vec<(usize, Weak<GreenHandle>)>> = Mutex::new(Vec::new());

pub(crate) fn lock_green_registry() -> MutexGuard<'static, Vec<(usize, Weak<GreenHandle>)>> {
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}
