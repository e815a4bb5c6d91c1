//! Green contexts: work confined to a part of a device's SMs (CUDA 12.4).
//!
//! See the [Green Contexts](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GREEN__CONTEXTS.html)
//! section of the driver API, and the guide's chapter on green contexts.
//!
//! The steps are the driver's: read the SMs of a device ([`SmResource::of_device`]), split
//! them into groups ([`SmResource::split_by_count`]), make a [`GreenContext`] of a group, and
//! queue work on its streams ([`GreenContext::stream`]): kernels launched there run on that
//! group's SMs only.
//!
//! ```no_run
//! use cuhost::green::{GreenContext, SmResource, SplitFlags};
//! use cuhost::{Context, Device};
//! # fn main() -> cuhost::Result<()> {
//! let device = Device::get(0)?;
//! let split = SmResource::of_device(&device)?.split_by_count(8, SplitFlags::empty())?;
//! let mut partitions = Vec::new();
//! for group in &split.groups {
//!     let green = GreenContext::from_sms(group)?;
//!     let stream = green.stream()?; // work on `stream` runs on `group`'s SMs
//!     partitions.push((green, stream));
//! }
//! # Ok(()) }
//! ```
//!
//! # Lifetimes
//!
//! A [`GreenContext`] owns its handle; clones share it, and it is destroyed
//! ([`cuGreenCtxDestroy`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GREEN__CONTEXTS.html))
//! when the last clone *and everything made on it* is dropped: its streams and the context
//! [`GreenContext::context`] gives (with what was made in that) each hold it, as streams hold
//! their context. Drivers before 13.1 leak a stream whose green context was destroyed first, and
//! the context `cuCtxFromGreenCtx` gives is valid only while the green context lives, so holding
//! it is what makes those orders impossible.
//!
//! # Threads
//!
//! The driver documentation up to at least CUDA 13.0 says that a green context may be current
//! on one thread at a time and that the driver does not synchronize calls that reach it from
//! several. Streams made with [`GreenContext::stream`] never need it current: their
//! [`Stream::context`] is the device's primary context, and they may be used from any thread.
//! The green context's own [`Context`] is for code that needs the green context current; it is
//! `unsafe` to get ([`GreenContext::context`]) because this crate makes contexts current on the
//! calling thread whenever a call needs it. The calls that take the green context's handle
//! (stream creation, event record and wait, queries) are serialized by the value.

mod resource;
#[cfg(cuda_headers_13_1)]
mod workqueue;

#[cfg(cuda_headers_13_1)]
pub use resource::{SmGroupFlags, SmGroupParams};
pub use resource::{SmResource, SmSplit, SplitFlags};
#[cfg(cuda_headers_13_1)]
pub use workqueue::{WorkqueueConfig, WorkqueueScope};

use crate::context::{Context, GreenHandle, lock_green_registry};
use crate::device::{self, Device};
use crate::error::{Error, Result};
use crate::event::Event;
use crate::stream::Stream;
use cuhost_driver_sys as sys;
use std::sync::{Arc, Mutex};

/// `CU_GREEN_CTX_DEFAULT_STREAM`: drivers before 13.1 require it, and it gives the green
/// context the default stream that [`Stream::legacy`] names while its context is current.
const DEFAULT_STREAM: u32 = 0x1;

/// `CU_STREAM_NON_BLOCKING`, which `cuGreenCtxStreamCreate` requires.
const NON_BLOCKING: u32 = 0x1;

/// One resource a green context is made of, for [`GreenContext::create`].
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum Resource {
    /// SMs: a group of a split (or a remainder), or all the SMs of a device or context.
    Sm(SmResource),
    /// A workqueue configuration (CUDA 13.1).
    #[cfg(cuda_headers_13_1)]
    WorkqueueConfig(WorkqueueConfig),
}

impl Resource {
    fn device(&self) -> Device {
        match self {
            Resource::Sm(sm) => sm.device(),
            #[cfg(cuda_headers_13_1)]
            Resource::WorkqueueConfig(wq) => wq.device,
        }
    }

    fn as_raw(&self) -> sys::CUdevResource {
        match self {
            Resource::Sm(sm) => sm.as_raw(),
            #[cfg(cuda_headers_13_1)]
            Resource::WorkqueueConfig(wq) => wq.as_raw(),
        }
    }
}

impl From<SmResource> for Resource {
    fn from(sm: SmResource) -> Resource {
        Resource::Sm(sm)
    }
}

impl From<&SmResource> for Resource {
    fn from(sm: &SmResource) -> Resource {
        Resource::Sm(*sm)
    }
}

#[cfg(cuda_headers_13_1)]
impl From<WorkqueueConfig> for Resource {
    fn from(wq: WorkqueueConfig) -> Resource {
        Resource::WorkqueueConfig(wq)
    }
}

/// The green context of a context made by [`GreenContext::context`], beside the context's
/// other accessors.
impl Context {
    /// The green context this is the context of ([`GreenContext::context`]), or `None` for an
    /// ordinary context. The value shares the green context with its other owners.
    pub fn green_context(&self) -> Option<GreenContext> {
        self.green_handle().map(GreenContext::from_handle)
    }
}

/// A green context: a context whose work runs on a part of the device's SMs (`CUgreenCtx`).
///
/// Made by [`GreenContext::create`] from resources (a group of SMs, and with CUDA 13.1 a
/// workqueue configuration); work reaches it through its streams ([`GreenContext::stream`]).
/// Cloning is cheap and shares the green context, which is destroyed when the last clone and
/// everything made on it (streams, its [`context`](GreenContext::context)) are dropped.
///
/// It shares the device's primary context (memory, modules, events): buffers and modules of
/// [`primary_context`](GreenContext::primary_context) are used on its streams as they are.
#[derive(Clone, Debug)]
pub struct GreenContext {
    handle: Arc<GreenHandle>,
}

impl PartialEq for GreenContext {
    fn eq(&self, other: &GreenContext) -> bool {
        self.handle.raw == other.handle.raw
    }
}

impl Eq for GreenContext {}

impl GreenContext {
    /// Makes a green context of `resources`
    /// ([`cuDevResourceGenerateDesc`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GREEN__CONTEXTS.html)
    /// then [`cuGreenCtxCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GREEN__CONTEXTS.html),
    /// CUDA 12.4), on their device, with a default stream. The device's primary context is
    /// retained first (as NVIDIA advises) and held as long as the green context.
    ///
    /// # Errors
    ///
    /// No resource, or resources of different devices, are an [`Error::InvalidArgument`]
    /// before any call. The driver refuses SM groups that do not come from one split
    /// (`CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION`). On a driver older than 12.4 this is an
    /// [`Error::Load`] naming the version needed.
    pub fn create(resources: &[Resource]) -> Result<GreenContext> {
        const OP: &str = "GreenContext::create";
        let Some(first) = resources.first() else {
            return Err(Error::invalid(
                OP,
                "no resource given; pass a group of SMs, e.g. from SmResource::split_by_count",
            ));
        };
        let device = first.device();
        if let Some(other) = resources.iter().find(|r| r.device() != device) {
            return Err(Error::invalid(
                OP,
                format!(
                    "the resources belong to devices {} and {}; a green context is made of one device's",
                    device.ordinal(),
                    other.device().ordinal()
                ),
            ));
        }
        let count = u32::try_from(resources.len())
            .map_err(|_| Error::invalid(OP, format!("{} resources are too many", resources.len())))?;
        let mut raw: Vec<sys::CUdevResource> = resources.iter().map(Resource::as_raw).collect();
        device::init()?;
        let primary = Context::primary(&device)?;
        let mut desc = std::ptr::null_mut();
        // SAFETY: `raw` holds `count` resources the driver wrote (or a configuration built from
        // its defaults); one out-parameter. The descriptor lives as long as the process.
        unsafe { driver!(cuDevResourceGenerateDesc(&mut desc, raw.as_mut_ptr(), count)) }?;
        let mut green = std::ptr::null_mut();
        // SAFETY: a descriptor the driver made just above; one out-parameter.
        unsafe { driver!(cuGreenCtxCreate(&mut green, desc, device.as_raw(), DEFAULT_STREAM)) }?;
        // SAFETY: the driver made `green` just above, and nothing else owns it.
        unsafe { GreenContext::adopt(green, device, primary, true) }
    }

    /// Makes a green context of one group of SMs: [`create`](Self::create) with that group
    /// only. It fails as `create` does: with the driver's status, or an [`Error::Load`] on a
    /// driver older than 12.4.
    pub fn from_sms(sms: &SmResource) -> Result<GreenContext> {
        GreenContext::create(&[Resource::Sm(*sms)])
    }

    /// Wraps a raw green context; an `owned` one is destroyed when the last clone, and
    /// everything made on it, is dropped.
    ///
    /// # Safety
    ///
    /// `raw` is a live green context. If `owned`, nothing else destroys it; if not, it stays
    /// alive as long as the returned value, its clones and everything made on them (streams,
    /// its [`context`](Self::context)).
    ///
    /// # Errors
    ///
    /// The calls that find its device fail with the driver's status
    /// ([`cuCtxFromGreenCtx`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GREEN__CONTEXTS.html),
    /// then as [`Context::from_raw`]), as does retaining the device's primary context; an owned
    /// green context is then destroyed.
    pub unsafe fn from_raw(raw: sys::CUgreenCtx, owned: bool) -> Result<GreenContext> {
        let mut ctx_raw = std::ptr::null_mut();
        // SAFETY: the caller vouches for the handle; one out-parameter.
        let found = unsafe { driver!(cuCtxFromGreenCtx(&mut ctx_raw, raw)) }
            // SAFETY: the driver's handle of a live green context, used for this question only.
            .and_then(|()| unsafe { Context::from_raw(ctx_raw) })
            .map(|ctx| ctx.device())
            .and_then(|device| Ok((device, Context::primary(&device)?)));
        match found {
            // SAFETY: the caller's contract is the one `adopt` needs.
            Ok((device, primary)) => unsafe { GreenContext::adopt(raw, device, primary, owned) },
            Err(e) => {
                if owned {
                    // SAFETY: the caller gave this value the green context to own.
                    let _ = unsafe { sys::cuGreenCtxDestroy(raw) };
                }
                Err(e)
            }
        }
    }

    /// Takes `raw` into a handle (destroyed on drop when `owned`, also when this fails), and
    /// registers an owned one.
    ///
    /// # Safety
    ///
    /// As for [`from_raw`](Self::from_raw), with `device` its device and `primary` that
    /// device's primary context.
    unsafe fn adopt(
        raw: sys::CUgreenCtx,
        device: Device,
        primary: Context,
        owned: bool,
    ) -> Result<GreenContext> {
        let mut handle =
            GreenHandle { raw, ctx_raw: std::ptr::null_mut(), device, primary, owned, calls: Mutex::new(()) };
        // On failure `handle` drops here and destroys an owned green context.
        // SAFETY: a live green context; one out-parameter.
        unsafe { driver!(cuCtxFromGreenCtx(&mut handle.ctx_raw, raw)) }?;
        let handle = Arc::new(handle);
        if owned {
            let mut list = lock_green_registry();
            list.retain(|(_, weak)| weak.strong_count() > 0);
            list.push((raw as usize, Arc::downgrade(&handle)));
        }
        Ok(GreenContext { handle })
    }

    /// The value of a handle that something made on a green context holds.
    pub(crate) fn from_handle(handle: &Arc<GreenHandle>) -> GreenContext {
        GreenContext { handle: handle.clone() }
    }

    /// The raw `CUgreenCtx`.
    pub fn as_raw(&self) -> sys::CUgreenCtx {
        self.handle.raw
    }

    /// The green context's device.
    pub fn device(&self) -> Device {
        self.handle.device
    }

    /// The device's primary context, which the green context shares: memory allocated and
    /// modules loaded there are used on the green context's streams as they are. It is the
    /// [`Stream::context`] of those streams.
    pub fn primary_context(&self) -> &Context {
        &self.handle.primary
    }

    /// Whether this value destroys the green context when the last clone, and everything made
    /// on it, is dropped.
    pub fn is_owned(&self) -> bool {
        self.handle.owned
    }

    /// The green context's unique id for the life of the process
    /// ([`cuGreenCtxGetId`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GREEN__CONTEXTS.html),
    /// CUDA 12.9). On an older driver this is an [`Error::Load`] naming the version needed.
    pub fn id(&self) -> Result<u64> {
        let mut id = 0;
        let _calls = self.handle.lock();
        // SAFETY: the green context is alive while `self` is; one out-parameter.
        unsafe { driver!(cuGreenCtxGetId(self.handle.raw, &mut id)) }?;
        Ok(id)
    }

    /// The SMs the green context's work runs on
    /// ([`cuGreenCtxGetDevResource`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GREEN__CONTEXTS.html)).
    /// Unlike a group of a split, they can be split again.
    ///
    /// Fails with the driver's status (`cuGreenCtxGetDevResource`).
    pub fn sm_resource(&self) -> Result<SmResource> {
        let raw = self.resource(sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM)?;
        Ok(SmResource::wrap(raw, self.handle.device))
    }

    /// The green context's resource of `kind`
    /// ([`cuGreenCtxGetDevResource`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GREEN__CONTEXTS.html)).
    fn resource(&self, kind: sys::CUdevResourceType) -> Result<sys::CUdevResource> {
        let mut raw = sys::CUdevResource::default();
        let _calls = self.handle.lock();
        // SAFETY: the green context is alive while `self` is; one out-parameter of the type the
        // call fills.
        unsafe { driver!(cuGreenCtxGetDevResource(self.handle.raw, &mut raw, kind)) }?;
        Ok(raw)
    }

    /// The green context's workqueue configuration
    /// ([`cuGreenCtxGetDevResource`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GREEN__CONTEXTS.html),
    /// CUDA 13.1).
    ///
    /// Fails with the driver's status; a driver older than 13.1 refuses the resource type.
    #[cfg(cuda_headers_13_1)]
    pub fn workqueue_config(&self) -> Result<WorkqueueConfig> {
        WorkqueueConfig::from_resource(
            &self.resource(sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_WORKQUEUE_CONFIG)?,
        )
    }

    /// Creates a stream whose work runs on the green context's SMs
    /// ([`cuGreenCtxStreamCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GREEN__CONTEXTS.html),
    /// CUDA 12.5), non-blocking (the driver requires it), of the default priority.
    ///
    /// The stream holds the green context: it is not destroyed before the stream is. Its
    /// [`Stream::context`] is the device's primary context, which the green context shares,
    /// so buffers of that context are used on it with no cross-context wait, and nothing
    /// about it needs the green context current.
    ///
    /// # Errors
    ///
    /// On a 12.4 driver this is an [`Error::Load`] naming the version needed; otherwise the
    /// driver's status (`CUDA_ERROR_OUT_OF_MEMORY`, say).
    pub fn stream(&self) -> Result<Stream> {
        self.stream_with_priority(0)
    }

    /// [`stream`](Self::stream) with a priority: lower numbers are higher priorities, within
    /// [`Context::stream_priority_range`]; the driver clamps values outside it. Fails as
    /// [`stream`](Self::stream) does, with an error kept from a `Drop` in the primary context
    /// first.
    pub fn stream_with_priority(&self, priority: i32) -> Result<Stream> {
        self.handle.primary.take_deferred()?;
        let mut raw = std::ptr::null_mut();
        let calls = self.handle.lock();
        // SAFETY: the green context is alive while `self` is; one out-parameter; the flags are
        // the one the call requires.
        unsafe { driver!(cuGreenCtxStreamCreate(&mut raw, self.handle.raw, NON_BLOCKING, priority)) }?;
        drop(calls);
        Ok(Stream::wrap_green(&self.handle.primary, raw, self.handle.clone()))
    }

    /// Captures in `event` all the work queued on the green context so far, whichever of its
    /// streams it is on; the event completes when that work does
    /// ([`cuGreenCtxRecordEvent`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GREEN__CONTEXTS.html)).
    ///
    /// The event must belong to the device's primary context (or a context of this green
    /// context's); the driver refuses another (`CUDA_ERROR_INVALID_HANDLE`), and refuses the
    /// call while one of its streams is being captured (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`,
    /// which also ends those captures).
    pub fn record_event(&self, event: &Event) -> Result<()> {
        event.context().take_deferred()?;
        let _calls = self.handle.lock();
        // SAFETY: both handles are alive while their owners are borrowed.
        unsafe { driver!(cuGreenCtxRecordEvent(self.handle.raw, event.as_raw())) }
    }

    /// Makes all work queued on the green context from now on wait until `event` completes,
    /// without blocking the host
    /// ([`cuGreenCtxWaitEvent`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GREEN__CONTEXTS.html)).
    /// The event may belong to any context or device. The driver refuses the call for an event
    /// or a stream of the green context being captured (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`).
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        self.handle.primary.take_deferred()?;
        let _calls = self.handle.lock();
        // SAFETY: both handles are alive while their owners are borrowed.
        unsafe { driver!(cuGreenCtxWaitEvent(self.handle.raw, event.as_raw())) }
    }

    /// The green context as a [`Context`]
    /// ([`cuCtxFromGreenCtx`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GREEN__CONTEXTS.html)),
    /// for calls that need it current: made current, driver calls act on the green context's
    /// SMs (a stream made with [`Stream::new`] in it belongs to the green context, kernels
    /// launched on its default stream run on its SMs).
    ///
    /// The context holds the green context: the driver's handle is valid only while the green
    /// context lives, so the green context is destroyed only after this context, its clones,
    /// and everything made in it are dropped. The same value comes back from every call while
    /// one is held. It is never destroyed with `cuCtxDestroy` (undefined behaviour for this
    /// handle): dropping it only lets the green context go.
    ///
    /// # Safety
    ///
    /// Drivers up to at least CUDA 13.0 document that a green context may be current on only
    /// one thread at a time, with no synchronization in the driver for calls that reach it from
    /// several; this crate makes a context current on the calling thread whenever a call through
    /// it needs that, and leaves it current. So, on such a driver, the returned context must be
    /// current on at most one thread at a time: before it, a clone of it, or anything made in
    /// it (streams, events, buffers, modules, including their drops) is used on another thread,
    /// the thread that used it last must have made another context current or popped it (keep
    /// it current with [`Context::push`], whose guard pops it). Streams from
    /// [`stream`](Self::stream) need none of this.
    ///
    /// Safe code cannot get it:
    ///
    /// ```compile_fail,E0133
    /// fn current_anywhere(green: &cuhost::green::GreenContext) -> cuhost::Context {
    ///     green.context()
    /// }
    /// ```
    pub unsafe fn context(&self) -> Context {
        Context::of_green(&self.handle)
    }
}

/// The green context of a stream (they live with green contexts, which streams need not know).
impl Stream {
    /// The green context the stream belongs to, or `None` for a stream of an ordinary context
    /// ([`cuStreamGetGreenCtx`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GREEN__CONTEXTS.html)).
    ///
    /// A stream made by [`GreenContext::stream`], or in the context of
    /// [`GreenContext::context`], belongs to that green context; a default stream belongs to
    /// its context's. What comes back is a clone of the [`GreenContext`] that owns the green
    /// context, never a second owner of the handle.
    ///
    /// # Errors
    ///
    /// A green context this crate does not own (made outside it, or wrapped with
    /// [`GreenContext::from_raw`] without ownership) is an [`Error::InvalidArgument`]: no value
    /// here can keep it alive, so wrap it yourself with the `unsafe` [`GreenContext::from_raw`].
    /// Otherwise it fails with the driver's status.
    pub fn green_context(&self) -> Result<Option<GreenContext>> {
        self.context().take_deferred()?;
        self.bind_if_default()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: the stream is alive while `self` is; one out-parameter.
        unsafe { driver!(cuStreamGetGreenCtx(self.as_raw(), &mut raw)) }?;
        if raw.is_null() {
            return Ok(None);
        }
        // The green context the stream or its context holds, then any this crate owns.
        let mut held = self.green_handle().into_iter().chain(self.context().green_handle());
        if let Some(handle) = held.find(|h| h.raw == raw) {
            return Ok(Some(GreenContext::from_handle(handle)));
        }
        let owned = lock_green_registry()
            .iter()
            .filter(|(r, _)| *r == raw as usize)
            .find_map(|(_, weak)| weak.upgrade());
        match owned {
            Some(handle) => Ok(Some(GreenContext { handle })),
            None => Err(Error::invalid(
                "Stream::green_context",
                format!(
                    "the stream's green context {raw:p} is not owned by this crate, so no value here can keep it \
                     alive; wrap it with the unsafe GreenContext::from_raw and keep it alive yourself"
                ),
            )),
        }
    }
}
