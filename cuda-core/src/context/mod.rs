//! Contexts: the device's primary context (the default), created contexts, making a context
//! current, and the errors that `Drop` could not return.
//!
//! See the [Context Management](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html)
//! and [Primary Context Management](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PRIMARY__CTX.html)
//! sections of the driver API.
//!
//! # Which context is current
//!
//! Driver calls act on the calling thread's current context. Every call in this crate that needs
//! one makes its own context current first when another one is (one `cuCtxGetCurrent`; a
//! `cuCtxSetCurrent` only when they differ) and leaves it current. [`Context::push`] gives a
//! guard that restores the previous context instead.
//!
//! # Errors in `Drop`
//!
//! Freeing memory or destroying a stream can fail (for instance after a kernel faulted), and
//! `Drop` cannot return an error. Such errors are kept in the context they belong to: the next
//! call made through that context returns the oldest one (once), and
//! [`Context::take_deferred_errors`] reads them all.
//!
//! ```no_run
//! use cuhost::{Context, ContextFlags, Device};
//! # fn main() -> cuhost::Result<()> {
//! let device = Device::get(0)?;
//! let primary = Context::primary(&device)?;
//! primary.bind_to_thread()?;
//! let other = Context::create(&device, ContextFlags::SCHED_BLOCKING_SYNC)?;
//! {
//!     let _guard = other.push()?; // `other` is current until the guard drops
//! }
//! for e in primary.take_deferred_errors() {
//!     eprintln!("kept from a drop: {e}");
//! }
//! # Ok(()) }
//! ```

mod config;

pub use config::{CacheConfig, ExecAffinity, Limit, PrimaryContextState};

#[cfg(feature = "green")]
mod green_handle;
#[cfg(feature = "green")]
pub(crate) use green_handle::{GreenHandle, lock_green_registry};

use crate::abi::AbiVersions;
use crate::device::{self, Device};
use crate::error::{Error, Result, check};
use crate::flags::flags;
use cuhost_driver_sys as sys;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

flags! {
    /// Context creation flags (`CU_CTX_*`): scheduling policy, host mapping, local memory.
    #[derive(Clone, Copy, PartialEq, Eq, Hash)]
    pub struct ContextFlags: u32 {
        /// `CU_CTX_SCHED_SPIN`: spin while waiting for the GPU.
        const SCHED_SPIN = 0x01;
        /// `CU_CTX_SCHED_YIELD`: yield the thread while waiting for the GPU.
        const SCHED_YIELD = 0x02;
        /// `CU_CTX_SCHED_BLOCKING_SYNC`: block on a synchronization primitive while waiting.
        const SCHED_BLOCKING_SYNC = 0x04;
        /// `CU_CTX_MAP_HOST`: allow mapped pinned host memory (always on in current drivers).
        const MAP_HOST = 0x08;
        /// `CU_CTX_LMEM_RESIZE_TO_MAX`: keep local memory at its high-water mark.
        const LMEM_RESIZE_TO_MAX = 0x10;
        /// `CU_CTX_COREDUMP_ENABLE`: write a GPU core dump on an exception.
        const COREDUMP_ENABLE = 0x20;
        /// `CU_CTX_USER_COREDUMP_ENABLE`: allow user-triggered core dumps.
        const USER_COREDUMP_ENABLE = 0x40;
        /// `CU_CTX_SYNC_MEMOPS`: make synchronous memory operations synchronize all work.
        const SYNC_MEMOPS = 0x80;
    }
}

#[derive(Debug)]
enum Ownership {
    /// A retained primary context: released on drop.
    Primary,
    /// A context made by `cuCtxCreate`: destroyed on drop.
    Created,
    /// The context of a green context (`cuCtxFromGreenCtx`): it is valid while the green
    /// context is, which this handle keeps alive; never destroyed itself.
    #[cfg(feature = "green")]
    Green(Arc<GreenHandle>),
    /// Someone else's: nothing to do on drop.
    Borrowed,
    /// Another library's value that keeps the context alive (a cudarc `CudaContext`): held
    /// while this context is, released by that library when it drops it.
    #[cfg(feature = "cudarc")]
    Kept(
        #[allow(dead_code, reason = "held, never read: it keeps the context alive")]
        Arc<dyn std::any::Any + Send + Sync>,
    ),
}

#[derive(Debug)]
pub(crate) struct ContextInner {
    raw: sys::CUcontext,
    device: Device,
    ownership: Ownership,
    has_deferred: AtomicBool,
    deferred: Mutex<Vec<Error>>,
}

// SAFETY: a CUcontext may be used from any thread; the driver synchronizes access to it.
unsafe impl Send for ContextInner {}
// SAFETY: as above; the only interior mutability is behind an atomic and a mutex.
unsafe impl Sync for ContextInner {}

/// A CUDA context: the device's primary context (retained, released on drop), a created
/// context (destroyed on drop), the context of a green context (which it keeps alive, see
/// [`GreenContext::context`](crate::green::GreenContext::context)), or a borrowed one.
///
/// Cloning is cheap and shares the same context; it stays alive while any clone, or anything
/// made in it (streams, events, memory), does.
#[derive(Clone, Debug)]
pub struct Context {
    inner: Arc<ContextInner>,
}

impl Context {
    /// Retains the device's primary context, the one the CUDA runtime also uses
    /// ([`cuDevicePrimaryCtxRetain`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PRIMARY__CTX.html)).
    /// It is released when the last clone is dropped.
    pub fn primary(device: &Device) -> Result<Context> {
        device::init()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: one out-parameter; the device handle came from the driver.
        unsafe { driver!(cuDevicePrimaryCtxRetain(&mut raw, device.as_raw())) }?;
        Ok(Context::wrap(raw, *device, Ownership::Primary))
    }

    /// Creates a new context on the device
    /// ([`cuCtxCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html)).
    /// The thread's current context is left as it was; the new one is destroyed on drop.
    /// Drivers before 12.5 lack the form with creation parameters; this passes none, so the
    /// older form (C's `cuCtxCreate_v2`) does the same there.
    ///
    /// # Errors
    ///
    /// [`Error::Driver`] naming `cuCtxCreate` when the driver refuses the context: flags it
    /// does not accept, too little memory left on the device, or a compute mode that allows no
    /// further context. [`Error::Load`] on a driver with neither form.
    pub fn create(device: &Device, flags: ContextFlags) -> Result<Context> {
        static CREATE: AbiVersions = AbiVersions::new("cuCtxCreate", &[12050, 3020]);
        device::init()?;
        let mut raw = std::ptr::null_mut();
        let status = if CREATE.choose()? == 12050 {
            // SAFETY: one out-parameter; null creation parameters are allowed.
            unsafe { sys::cuCtxCreate(&mut raw, std::ptr::null_mut(), flags.bits(), device.as_raw()) }
        } else {
            // SAFETY: one out-parameter.
            unsafe { sys::cuCtxCreate_v3020(&mut raw, flags.bits(), device.as_raw()) }
        };
        check("cuCtxCreate", status)?;
        let ctx = Context::wrap(raw, *device, Ownership::Created);
        // cuCtxCreate pushed the new context; pop it so creation changes nothing on this thread.
        let mut popped = std::ptr::null_mut();
        // SAFETY: the context pushed just above is on top of this thread's stack.
        unsafe { driver!(cuCtxPopCurrent(&mut popped)) }?;
        Ok(ctx)
    }

    /// Creates a new context on the device that may use only part of it: with
    /// [`ExecAffinity::SmCount`], at most that many SMs
    /// ([`cuCtxCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html)
    /// with execution-affinity parameters, driver 12.5 or later). The thread's current context
    /// is left as it was; the new one is destroyed on drop.
    ///
    /// The driver grants affinities only where
    /// [`Device::exec_affinity_supported`] says so (under MPS, for instance); elsewhere it
    /// fails with `CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY`. The count the driver grants (it may
    /// round up) is [`Context::exec_affinity`]. A driver before 12.5 is an [`Error::Load`].
    pub fn create_with_affinity(
        device: &Device,
        flags: ContextFlags,
        affinity: ExecAffinity,
    ) -> Result<Context> {
        device::init()?;
        let ExecAffinity::SmCount(sms) = affinity;
        // SAFETY: C structs of integers, unions and pointers, for which all zeroes is valid.
        let mut param: sys::CUexecAffinityParam = unsafe { std::mem::zeroed() };
        param.type_ = sys::CUexecAffinityType::CU_EXEC_AFFINITY_TYPE_SM_COUNT;
        param.param.smCount.val = sms;
        // SAFETY: as above.
        let mut params: sys::CUctxCreateParams = unsafe { std::mem::zeroed() };
        params.execAffinityParams = &mut param;
        params.numExecAffinityParams = 1;
        let mut raw = std::ptr::null_mut();
        // SAFETY: one out-parameter; `params` names one initialised affinity, alive for the call.
        unsafe { driver!(cuCtxCreate(&mut raw, &mut params, flags.bits(), device.as_raw())) }?;
        let ctx = Context::wrap(raw, *device, Ownership::Created);
        let mut popped = std::ptr::null_mut();
        // SAFETY: the context pushed by cuCtxCreate is on top of this thread's stack.
        unsafe { driver!(cuCtxPopCurrent(&mut popped)) }?;
        Ok(ctx)
    }

    /// The calling thread's current context, or `None`
    /// ([`cuCtxGetCurrent`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html)),
    /// as a value that keeps it alive:
    ///
    /// * a context this crate made or retained ([`Context::create`], [`Context::primary`]) that
    ///   is still held comes back as a clone of that value: the same context, sharing its
    ///   deferred errors and keeping it alive;
    /// * a device's primary context made current by someone else (the CUDA runtime, another
    ///   library) is retained, as [`Context::primary`] does, and released when the last clone
    ///   drops.
    ///
    /// No context being current is not an error. Another context current (one created outside
    /// this crate, whose lifetime no value here can hold) is an [`Error::InvalidArgument`]: wrap
    /// it with the `unsafe` [`Context::from_raw`], whose contract says how long it must live.
    /// It also fails when the driver cannot be initialised or refuses one of the calls.
    ///
    /// ```no_run
    /// # fn main() -> cuhost::Result<()> {
    /// use cuhost::{Context, ContextFlags, Device, Stream, StreamFlags};
    /// let dev = Device::get(0)?;
    /// let owned = Context::create(&dev, ContextFlags::empty())?;
    /// owned.bind_to_thread()?;
    /// let current = Context::current()?.expect("bound above");
    /// drop(owned); // `current` keeps the context alive (G4 of the soundness review)
    /// let stream = Stream::new(&current, StreamFlags::NON_BLOCKING)?;
    /// stream.synchronize()?;
    /// # Ok(()) }
    /// ```
    pub fn current() -> Result<Option<Context>> {
        device::init()?;
        let raw = current_raw()?;
        if raw.is_null() {
            return Ok(None);
        }
        if let Some(inner) = registered(raw) {
            return Ok(Some(Context { inner }));
        }
        // Someone else's context: hold it only if it is a primary context, by retaining it.
        let mut dev = 0;
        // SAFETY: one out-parameter; asks about the current context, which is alive now.
        unsafe { driver!(cuCtxGetDevice(&mut dev)) }?;
        let mut primary = std::ptr::null_mut();
        // SAFETY: one out-parameter; the device handle came from the driver.
        unsafe { driver!(cuDevicePrimaryCtxRetain(&mut primary, dev)) }?;
        if primary == raw {
            return Ok(Some(Context::wrap(raw, Device::from_raw(dev), Ownership::Primary)));
        }
        // SAFETY: gives back the retain taken just above.
        unsafe { driver!(cuDevicePrimaryCtxRelease(dev)) }?;
        Err(Error::invalid(
            "Context::current",
            format!(
                "the current context {raw:p} was created outside this crate and is not a primary \
                 context, so no value can keep it alive; wrap it with the unsafe Context::from_raw \
                 and keep it alive yourself, or make a context of this crate current"
            ),
        ))
    }

    /// Wraps a raw context without owning it; it is not released or destroyed on drop.
    ///
    /// # Safety
    ///
    /// `raw` must be a live context and stay alive as long as the returned value, its clones,
    /// and everything made through them.
    ///
    /// # Errors
    ///
    /// The device is read with
    /// [`cuCtxGetDevice`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html):
    /// a context the driver does not know fails with its status
    /// (`CUDA_ERROR_INVALID_CONTEXT`). Drivers before 13.0 can only ask about the current
    /// context, so there `raw` is pushed and popped around the question, and those two calls'
    /// failures are returned too.
    pub unsafe fn from_raw(raw: sys::CUcontext) -> Result<Context> {
        static GET_DEVICE: AbiVersions = AbiVersions::new("cuCtxGetDevice", &[13000, 2000]);
        let mut dev = 0;
        if GET_DEVICE.choose()? == 13000 {
            // SAFETY: the caller guarantees the context is live.
            unsafe { driver!(cuCtxGetDevice_v2(&mut dev, raw)) }?;
        } else {
            // Drivers before 13.0 lack the form that names the context: ask with it pushed.
            // SAFETY: the context is live; the pop below undoes the push.
            unsafe { driver!(cuCtxPushCurrent(raw)) }?;
            // SAFETY: one out-parameter.
            let got = unsafe { driver!(cuCtxGetDevice(&mut dev)) };
            let mut popped = std::ptr::null_mut();
            // SAFETY: the push above is on top of this thread's stack.
            unsafe { driver!(cuCtxPopCurrent(&mut popped)) }?;
            got?;
        }
        Ok(Context::wrap(raw, Device::from_raw(dev), Ownership::Borrowed))
    }

    /// A context whose handle `raw` (of `device`) stays valid while `keeper` lives, which the
    /// value holds: another library's context object.
    #[cfg(feature = "cudarc")]
    pub(crate) fn kept_by(
        raw: sys::CUcontext,
        device: Device,
        keeper: Arc<dyn std::any::Any + Send + Sync>,
    ) -> Context {
        Context::wrap(raw, device, Ownership::Kept(keeper))
    }

    /// A context value around a made-up handle, owning nothing and touching no driver, for
    /// unit tests of code that only carries a context along.
    #[cfg(test)]
    pub(crate) fn detached_for_tests() -> Context {
        Context::wrap(std::ptr::NonNull::dangling().as_ptr(), Device::from_raw(0), Ownership::Borrowed)
    }

    fn wrap(raw: sys::CUcontext, device: Device, ownership: Ownership) -> Context {
        let register = !matches!(ownership, Ownership::Borrowed);
        let inner = Arc::new(ContextInner {
            raw,
            device,
            ownership,
            has_deferred: AtomicBool::new(false),
            deferred: Mutex::new(Vec::new()),
        });
        if register {
            let mut list = lock_registry();
            list.retain(|(_, weak)| weak.strong_count() > 0);
            list.push((raw as usize, Arc::downgrade(&inner)));
        }
        Context { inner }
    }

    /// The raw `CUcontext`.
    #[inline]
    pub fn as_raw(&self) -> sys::CUcontext {
        self.inner.raw
    }

    /// The context's device.
    #[inline]
    pub fn device(&self) -> Device {
        self.inner.device
    }

    /// Whether this is the device's primary context (retained by this value).
    pub fn is_primary(&self) -> bool {
        matches!(self.inner.ownership, Ownership::Primary)
    }

    /// The context of a green context, which it keeps alive; the same value while one is held
    /// (see [`GreenContext::context`](crate::green::GreenContext::context)).
    #[cfg(feature = "green")]
    pub(crate) fn of_green(handle: &Arc<GreenHandle>) -> Context {
        let raw = handle.context_raw();
        if let Some(inner) = registered(raw) {
            if matches!(&inner.ownership, Ownership::Green(held) if Arc::ptr_eq(held, handle)) {
                return Context { inner };
            }
        }
        Context::wrap(raw, handle.device(), Ownership::Green(handle.clone()))
    }

    #[cfg(feature = "green")]
    pub(crate) fn green_handle(&self) -> Option<&Arc<GreenHandle>> {
        match &self.inner.ownership {
            Ownership::Green(handle) => Some(handle),
            _ => None,
        }
    }

    /// Makes this context current on the calling thread
    /// ([`cuCtxSetCurrent`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html)),
    /// for raw `-sys` calls or other libraries that use the current context.
    pub fn bind_to_thread(&self) -> Result<()> {
        // SAFETY: the context is alive while `self` is.
        unsafe { driver!(cuCtxSetCurrent(self.inner.raw)) }
    }

    /// Pushes this context onto the thread's context stack and returns a guard that pops it
    /// when dropped, also on early return or panic
    /// ([`cuCtxPushCurrent`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html)).
    pub fn push(&self) -> Result<CurrentGuard> {
        self.take_deferred()?;
        // SAFETY: the context is alive while the guard (which holds a clone) is.
        unsafe { driver!(cuCtxPushCurrent(self.inner.raw)) }?;
        Ok(CurrentGuard { ctx: self.clone(), _not_send: std::marker::PhantomData })
    }

    /// Blocks until all work in the context is done
    /// ([`cuCtxSynchronize`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html)).
    /// A kernel that faulted earlier is reported here.
    pub fn synchronize(&self) -> Result<()> {
        self.enter()?;
        // SAFETY: no arguments; this context is current.
        unsafe { driver!(cuCtxSynchronize()) }?;
        self.take_deferred()
    }

    /// Free and total device memory in bytes, as seen from this context
    /// ([`cuMemGetInfo`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn memory_info(&self) -> Result<(usize, usize)> {
        self.enter()?;
        let (mut free, mut total) = (0, 0);
        // SAFETY: two out-parameters; this context is current.
        unsafe { driver!(cuMemGetInfo(&mut free, &mut total)) }?;
        Ok((free, total))
    }

    /// The oldest error kept from a `Drop` in this context, without removing it.
    pub fn deferred_error(&self) -> Option<Error> {
        self.lock_deferred().first().cloned()
    }

    /// Removes and returns every error kept from a `Drop` in this context, oldest first.
    pub fn take_deferred_errors(&self) -> Vec<Error> {
        let mut list = self.lock_deferred();
        self.inner.has_deferred.store(false, Ordering::Release);
        std::mem::take(&mut *list)
    }

    /// Keeps an error that could not be returned (from `Drop` or a host callback).
    #[cold]
    pub(crate) fn defer(&self, error: Error) {
        self.inner.defer(error);
    }

    pub(crate) fn inner(&self) -> &Arc<ContextInner> {
        &self.inner
    }

    fn lock_deferred(&self) -> std::sync::MutexGuard<'_, Vec<Error>> {
        self.inner.deferred.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Returns the oldest deferred error, if any: the check every call through the context makes.
    #[inline]
    pub(crate) fn take_deferred(&self) -> Result<()> {
        if self.inner.has_deferred.load(Ordering::Acquire) { Err(self.pop_deferred()) } else { Ok(()) }
    }

    #[cold]
    fn pop_deferred(&self) -> Error {
        let mut list = self.lock_deferred();
        let e = if list.is_empty() { None } else { Some(list.remove(0)) };
        self.inner.has_deferred.store(!list.is_empty(), Ordering::Release);
        // Another thread may have taken it between the flag check and the lock.
        e.unwrap_or_else(|| Error::invalid("Context", "a deferred error was reported by another call"))
    }

    /// Reports a deferred error, then makes this context current if it is not.
    #[inline]
    pub(crate) fn enter(&self) -> Result<()> {
        self.take_deferred()?;
        self.make_current()
    }

    /// Makes this context current if another one is. Release paths (`Drop`s, deallocations,
    /// unmaps) use this rather than [`enter`](Self::enter): a pending deferred error must not make
    /// them return before they free or wait.
    #[inline]
    pub(crate) fn make_current(&self) -> Result<()> {
        if current_raw()? != self.inner.raw { self.bind_to_thread() } else { Ok(()) }
    }

    /// Runs `f` with this context current and restores the previous one: for work in this
    /// context from a call made with another one current. Its error, or else the restore's.
    pub(crate) fn with_current<R>(&self, f: impl FnOnce() -> Result<R>) -> Result<R> {
        if current_raw()? == self.inner.raw {
            return f();
        }
        // SAFETY: the context is alive while `self` is.
        unsafe { driver!(cuCtxPushCurrent(self.inner.raw)) }?;
        let result = f();
        let mut popped = std::ptr::null_mut();
        // SAFETY: the push above is on top of this thread's stack.
        let restored = unsafe { driver!(cuCtxPopCurrent(&mut popped)) };
        result.and_then(|r| restored.map(|()| r))
    }

    /// Runs `f` (driver calls, each named by `driver!`) with this context current and restores
    /// the previous one; for the `Drop` of a `what`, which must not change the thread's state.
    /// Errors are kept, naming `what`.
    pub(crate) fn with_current_for_drop(&self, what: &'static str, f: impl FnOnce() -> Result<()>) {
        let keep = |e: Error| self.defer(e.dropping(what, None));
        let previous = match current_raw() {
            Ok(p) => p,
            Err(e) => return keep(e),
        };
        let switch = previous != self.inner.raw;
        if switch {
            // SAFETY: the context is alive while `self` is.
            if let Err(e) = unsafe { driver!(cuCtxPushCurrent(self.inner.raw)) } {
                return keep(e);
            }
        }
        if let Err(e) = f() {
            keep(e);
        }
        if switch {
            let mut popped = std::ptr::null_mut();
            // SAFETY: the push above is on top of this thread's stack.
            if let Err(e) = unsafe { driver!(cuCtxPopCurrent(&mut popped)) } {
                keep(e);
            }
        }
    }
}

impl PartialEq for Context {
    fn eq(&self, other: &Context) -> bool {
        self.inner.raw == other.inner.raw
    }
}

impl Eq for Context {}

impl ContextInner {
    #[cold]
    pub(crate) fn defer(&self, error: Error) {
        let mut list = self.deferred.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        list.push(error);
        self.has_deferred.store(true, Ordering::Release);
    }
}

/// The contexts this crate made or retained and still holds, by raw handle, so that
/// [`Context::current`] can hand out a value that keeps the current context alive.
static REGISTRY: Mutex<Vec<(usize, Weak<ContextInner>)>> = Mutex::new(Vec::new());

fn lock_registry() -> std::sync::MutexGuard<'static, Vec<(usize, Weak<ContextInner>)>> {
    REGISTRY.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A held context whose handle is `raw`, if this crate holds one.
fn registered(raw: sys::CUcontext) -> Option<Arc<ContextInner>> {
    lock_registry().iter().filter(|(r, _)| *r == raw as usize).find_map(|(_, weak)| weak.upgrade())
}

/// Keeps `error`, which belongs to no context (a library's unload), in the calling thread's
/// current context when this crate holds it; otherwise there is nowhere to keep it.
pub(crate) fn defer_to_current(error: Error) {
    if let Some(inner) = current_raw().ok().and_then(registered) {
        inner.defer(error);
    }
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // No longer a context `Context::current` may hand out (before the handle can be reused).
        let me: *const ContextInner = self;
        lock_registry().retain(|(_, weak)| !std::ptr::eq(weak.as_ptr(), me) && weak.strong_count() > 0);
        // Errors here have no context left to be kept in; the driver's state is what it is.
        match self.ownership {
            Ownership::Primary => {
                let device = self.device.as_raw();
                // SAFETY: this value holds one retain of the primary context.
                let _ = unsafe { sys::cuDevicePrimaryCtxRelease(device) };
                // When that was the last retain, the driver destroyed the context, but it stays
                // current on this thread (cuCtxDestroy would unbind it; a release does not), and
                // later calls fail with CUDA_ERROR_CONTEXT_IS_DESTROYED. Unbind it.
                let (mut flags, mut active, mut current) = (0u32, 0i32, std::ptr::null_mut());
                // SAFETY: out-parameters are live locals; binding no context is always valid.
                unsafe {
                    if sys::cuDevicePrimaryCtxGetState(device, &mut flags, &mut active)
                        == sys::CUresult::CUDA_SUCCESS
                        && active == 0
                        && sys::cuCtxGetCurrent(&mut current) == sys::CUresult::CUDA_SUCCESS
                        && current == self.raw
                    {
                        let _ = sys::cuCtxSetCurrent(std::ptr::null_mut());
                    }
                }
            }
            Ownership::Created => {
                // SAFETY: this value created the context and nothing made in it outlives it.
                let _ = unsafe { sys::cuCtxDestroy(self.raw) };
            }
            // The green context goes with its handle, after this (when this was its last holder).
            #[cfg(feature = "green")]
            Ownership::Green(_) => {}
            Ownership::Borrowed => {}
            // The other library releases the context when its last value goes, after this.
            #[cfg(feature = "cudarc")]
            Ownership::Kept(_) => {}
        }
    }
}

#[inline]
fn current_raw() -> Result<sys::CUcontext> {
    let mut raw = std::ptr::null_mut();
    // SAFETY: one out-parameter.
    unsafe { driver!(cuCtxGetCurrent(&mut raw)) }?;
    Ok(raw)
}

/// Keeps a context pushed on the calling thread; pops it when dropped
/// ([`cuCtxPopCurrent`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html)).
///
/// It cannot be sent to another thread: the context stack is per thread.
#[derive(Debug)]
#[must_use = "the context is popped as soon as the guard is dropped"]
pub struct CurrentGuard {
    ctx: Context,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl CurrentGuard {
    /// The pushed context.
    pub fn context(&self) -> &Context {
        &self.ctx
    }
}

impl Drop for CurrentGuard {
    fn drop(&mut self) {
        let mut popped = std::ptr::null_mut();
        // SAFETY: the push that made this guard is on this thread's stack (the guard is !Send).
        let status = unsafe { driver!(status: cuCtxPopCurrent(&mut popped)) };
        if let Err(e) = status.check() {
            self.ctx.defer(e.dropping("CurrentGuard", None));
        } else if popped != self.ctx.as_raw() {
            self.ctx.defer(
                Error::invalid(
                    "CurrentGuard::drop",
                    "the context popped was not the one this guard pushed; pushes and pops were not nested",
                )
                .dropping("CurrentGuard", None),
            );
        }
    }
}
