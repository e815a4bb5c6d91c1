//! [`ExternalSemaphore`]: a semaphore or fence of another API, signalled and waited on in a
//! stream's order.

use super::{Raw, Refused, Win32Handle, fd_raw, settle, unsupported_win32};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::stream::Stream;
use cuhost_driver_sys as sys;
use std::ffi::c_void;
use std::os::fd::OwnedFd;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What an external semaphore is imported from (`CUexternalSemaphoreHandleType` and its
/// handle).
#[derive(Debug)]
pub enum SemaphoreHandle {
    /// An opaque POSIX file descriptor of a binary semaphore (Vulkan's
    /// `VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT` on a binary `VkSemaphore`).
    OpaqueFd(OwnedFd),
    /// An opaque POSIX file descriptor of a Vulkan timeline semaphore.
    TimelineFd(OwnedFd),
    /// A Windows NT handle or name of a binary semaphore.
    OpaqueWin32(Win32Handle),
    /// A global share (KMT) handle of a binary semaphore.
    OpaqueWin32Kmt(*mut c_void),
    /// A Windows NT handle or name of a Vulkan timeline semaphore.
    TimelineWin32(Win32Handle),
    /// A shared Direct3D 12 fence.
    D3D12Fence(Win32Handle),
    /// A shared Direct3D 11 fence.
    D3D11Fence(Win32Handle),
    /// A Direct3D 11 keyed mutex.
    D3D11KeyedMutex(Win32Handle),
    /// A global share (KMT) handle of a Direct3D 11 keyed mutex.
    D3D11KeyedMutexKmt(*mut c_void),
    /// An `NvSciSyncObj`, which only `unsafe` code can name ([`NvSciSyncObject::from_raw`]).
    NvSciSync(NvSciSyncObject),
}

/// An `NvSciSyncObj` to import as a semaphore ([`SemaphoreHandle::NvSciSync`]). The driver
/// dereferences it, so it is made only by [`from_raw`](Self::from_raw), whose caller vouches
/// for it; safe code cannot forge one from an integer:
///
/// ```compile_fail,E0133
/// use cuhost::interop::external::NvSciSyncObject;
/// let forged = NvSciSyncObject::from_raw(0x1000 as *mut std::ffi::c_void);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NvSciSyncObject(*mut c_void);

impl NvSciSyncObject {
    /// Wraps an `NvSciSyncObj`.
    ///
    /// # Safety
    ///
    /// `object` is a live `NvSciSyncObj` (from `NvSciSyncObjAlloc` and the like) that stays
    /// alive until the import made from it returns.
    pub unsafe fn from_raw(object: *mut c_void) -> NvSciSyncObject {
        NvSciSyncObject(object)
    }

    /// The raw `NvSciSyncObj`.
    pub fn as_raw(self) -> *mut c_void {
        self.0
    }
}

/// The kind of an imported semaphore, which decides the parameters its signals and waits take.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SemaphoreKind {
    /// A binary semaphore: signalled or not, no value.
    Binary,
    /// A timeline semaphore or fence: signals set a 64-bit value, waits wait for one.
    Timeline,
    /// A Direct3D 11 keyed mutex: signals release and waits acquire a key.
    KeyedMutex,
    /// An NvSciSync object: signals and waits take an `NvSciSyncFence`.
    NvSciSync,
}

impl SemaphoreHandle {
    fn raw_kind(&self) -> sys::CUexternalSemaphoreHandleType {
        use sys::CUexternalSemaphoreHandleType as K;
        match self {
            SemaphoreHandle::OpaqueFd(_) => K::CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD,
            SemaphoreHandle::TimelineFd(_) => K::CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_FD,
            SemaphoreHandle::OpaqueWin32(_) => K::CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_WIN32,
            SemaphoreHandle::OpaqueWin32Kmt(_) => K::CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_WIN32_KMT,
            SemaphoreHandle::TimelineWin32(_) => {
                K::CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_WIN32
            }
            SemaphoreHandle::D3D12Fence(_) => K::CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_D3D12_FENCE,
            SemaphoreHandle::D3D11Fence(_) => K::CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_D3D11_FENCE,
            SemaphoreHandle::D3D11KeyedMutex(_) => K::CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_D3D11_KEYED_MUTEX,
            SemaphoreHandle::D3D11KeyedMutexKmt(_) => {
                K::CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_D3D11_KEYED_MUTEX_KMT
            }
            SemaphoreHandle::NvSciSync(_) => K::CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_NVSCISYNC,
        }
    }

    fn kind(&self) -> SemaphoreKind {
        match self {
            SemaphoreHandle::OpaqueFd(_)
            | SemaphoreHandle::OpaqueWin32(_)
            | SemaphoreHandle::OpaqueWin32Kmt(_) => SemaphoreKind::Binary,
            SemaphoreHandle::TimelineFd(_)
            | SemaphoreHandle::TimelineWin32(_)
            | SemaphoreHandle::D3D12Fence(_)
            | SemaphoreHandle::D3D11Fence(_) => SemaphoreKind::Timeline,
            SemaphoreHandle::D3D11KeyedMutex(_) | SemaphoreHandle::D3D11KeyedMutexKmt(_) => {
                SemaphoreKind::KeyedMutex
            }
            SemaphoreHandle::NvSciSync(_) => SemaphoreKind::NvSciSync,
        }
    }

    fn raw(&self) -> Result<Raw> {
        const OP: &str = "ExternalSemaphore::import";
        match self {
            SemaphoreHandle::OpaqueFd(fd) | SemaphoreHandle::TimelineFd(fd) => fd_raw(OP, fd),
            SemaphoreHandle::NvSciSync(object) => Ok(Raw::Object(object.0.cast_const())),
            _ => Err(unsupported_win32(OP)),
        }
    }
}

/// What a signal does (`CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS`): nothing more for a binary
/// semaphore, the value to set for a timeline, the key to release for a keyed mutex.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SignalParams {
    value: Option<u64>,
    key: Option<u64>,
    fence: Option<*mut c_void>,
    skip_memsync: bool,
}

impl SignalParams {
    /// A signal of a binary semaphore.
    pub fn new() -> SignalParams {
        SignalParams::default()
    }

    /// A signal that sets a timeline semaphore or fence to `value`.
    pub fn value(value: u64) -> SignalParams {
        SignalParams { value: Some(value), ..SignalParams::default() }
    }

    /// A signal that releases a keyed mutex with `key`.
    pub fn keyed_mutex(key: u64) -> SignalParams {
        SignalParams { key: Some(key), ..SignalParams::default() }
    }

    /// A signal of an NvSciSync object that fills the `NvSciSyncFence` at `fence`.
    ///
    /// # Safety
    ///
    /// `fence` points to an `NvSciSyncFence` that stays valid until the signal is enqueued.
    pub unsafe fn nvsci_fence(fence: *mut c_void) -> SignalParams {
        SignalParams { fence: Some(fence), ..SignalParams::default() }
    }

    /// Skips the memory synchronisation of NvSciBuf memory objects that the signal otherwise
    /// performs (`CUDA_EXTERNAL_SEMAPHORE_SIGNAL_SKIP_NVSCIBUF_MEMSYNC`).
    pub fn skip_nvscibuf_memsync(self) -> SignalParams {
        SignalParams { skip_memsync: true, ..self }
    }

    pub(crate) fn to_raw(self, kind: SemaphoreKind) -> Result<sys::CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS> {
        // SAFETY: a plain C struct; all zeroes is a valid value.
        let mut raw: sys::CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS = unsafe { std::mem::zeroed() };
        self.write_raw(kind, &mut raw)?;
        Ok(raw)
    }

    /// Checks the parameters against `kind` and writes them into `raw` (all zeroes before), in
    /// place: the driver then reads what was stored there, with no copy between.
    #[inline]
    fn write_raw(
        self,
        kind: SemaphoreKind,
        raw: &mut sys::CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS,
    ) -> Result<()> {
        check_params("ExternalSemaphore::signal", kind, self.value, self.key, self.fence)?;
        raw.params.fence.value = self.value.unwrap_or(0);
        raw.params.keyedMutex.key = self.key.unwrap_or(0);
        raw.params.nvSciSync.fence = self.fence.unwrap_or(std::ptr::null_mut());
        if self.skip_memsync {
            raw.flags = sys::CUDA_EXTERNAL_SEMAPHORE_SIGNAL_SKIP_NVSCIBUF_MEMSYNC;
        }
        Ok(())
    }
}

/// What a wait waits for (`CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS`): a signal of a binary
/// semaphore, a value of a timeline, a key of a keyed mutex.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitParams {
    value: Option<u64>,
    key: Option<(u64, u32)>,
    fence: Option<*mut c_void>,
    skip_memsync: bool,
}

impl WaitParams {
    /// A wait for a signal of a binary semaphore.
    pub fn new() -> WaitParams {
        WaitParams::default()
    }

    /// A wait until a timeline semaphore or fence reaches `value` or more.
    pub fn value(value: u64) -> WaitParams {
        WaitParams { value: Some(value), ..WaitParams::default() }
    }

    /// A wait that acquires a keyed mutex with `key`, giving up after `timeout_ms`
    /// milliseconds (`u32::MAX` waits for ever).
    pub fn keyed_mutex(key: u64, timeout_ms: u32) -> WaitParams {
        WaitParams { key: Some((key, timeout_ms)), ..WaitParams::default() }
    }

    /// A wait on the `NvSciSyncFence` at `fence`.
    ///
    /// # Safety
    ///
    /// `fence` points to an `NvSciSyncFence` that stays valid until the wait is enqueued.
    pub unsafe fn nvsci_fence(fence: *mut c_void) -> WaitParams {
        WaitParams { fence: Some(fence), ..WaitParams::default() }
    }

    /// Skips the memory synchronisation of NvSciBuf memory objects that the wait otherwise
    /// performs (`CUDA_EXTERNAL_SEMAPHORE_WAIT_SKIP_NVSCIBUF_MEMSYNC`).
    pub fn skip_nvscibuf_memsync(self) -> WaitParams {
        WaitParams { skip_memsync: true, ..self }
    }

    pub(crate) fn to_raw(self, kind: SemaphoreKind) -> Result<sys::CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS> {
        // SAFETY: a plain C struct; all zeroes is a valid value.
        let mut raw: sys::CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS = unsafe { std::mem::zeroed() };
        self.write_raw(kind, &mut raw)?;
        Ok(raw)
    }

    /// Checks the parameters against `kind` and writes them into `raw` (all zeroes before), in
    /// place, as [`SignalParams`] does.
    #[inline]
    fn write_raw(
        self,
        kind: SemaphoreKind,
        raw: &mut sys::CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS,
    ) -> Result<()> {
        check_params("ExternalSemaphore::wait", kind, self.value, self.key.map(|k| k.0), self.fence)?;
        raw.params.fence.value = self.value.unwrap_or(0);
        if let Some((key, timeout_ms)) = self.key {
            raw.params.keyedMutex.key = key;
            raw.params.keyedMutex.timeoutMs = timeout_ms;
        }
        raw.params.nvSciSync.fence = self.fence.unwrap_or(std::ptr::null_mut());
        if self.skip_memsync {
            raw.flags = sys::CUDA_EXTERNAL_SEMAPHORE_WAIT_SKIP_NVSCIBUF_MEMSYNC;
        }
        Ok(())
    }
}

/// Refuses parameters that do not fit the semaphore's kind, saying which to use. The check is
/// inline (a signal or wait is a hot path); the refusal is built out of line.
#[inline]
fn check_params(
    operation: &'static str,
    kind: SemaphoreKind,
    value: Option<u64>,
    key: Option<u64>,
    fence: Option<*mut c_void>,
) -> Result<()> {
    let fits = match (value.is_some(), key.is_some(), fence.is_some()) {
        // A timeline may also be used without a value: it then means value 0.
        (false, false, false) => matches!(kind, SemaphoreKind::Binary | SemaphoreKind::Timeline),
        (true, false, false) => kind == SemaphoreKind::Timeline,
        (false, true, false) => kind == SemaphoreKind::KeyedMutex,
        (false, false, true) => kind == SemaphoreKind::NvSciSync,
        _ => false,
    };
    if fits { Ok(()) } else { Err(params_refused(operation, kind, value, key, fence)) }
}

/// The refusal of parameters that do not fit `kind`: what was given and what to use.
#[cold]
#[inline(never)]
fn params_refused(
    operation: &'static str,
    kind: SemaphoreKind,
    value: Option<u64>,
    key: Option<u64>,
    fence: Option<*mut c_void>,
) -> Error {
    let given = match (value.is_some(), key.is_some(), fence.is_some()) {
        (false, false, false) => "no value",
        (true, false, false) => "a value",
        (false, true, false) => "a keyed-mutex key",
        (false, false, true) => "an NvSciSync fence",
        _ => return Error::invalid(operation, "give one of a value, a key or a fence"),
    };
    let fix = match kind {
        SemaphoreKind::Binary => "new()",
        SemaphoreKind::Timeline => "value(v)",
        SemaphoreKind::KeyedMutex => "keyed_mutex(key, ..)",
        SemaphoreKind::NvSciSync => "nvsci_fence(fence)",
    };
    Error::invalid(operation, format!("{given} for a {kind:?} semaphore; use {fix}"))
}

/// An imported semaphore, destroyed on drop once the signals and waits enqueued on it are done
/// ([`cuImportExternalSemaphore`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXTRES__INTEROP.html)).
///
/// Dropping it synchronizes the streams its signals and waits were enqueued on (a wait that is
/// never signalled therefore blocks the drop), even while the context holds a deferred error;
/// if that wait fails, the semaphore is left imported (leaked) rather than destroyed under
/// outstanding work, and the error is kept by the context. Graphs that signal or wait on it
/// hold it.
#[derive(Debug)]
pub struct ExternalSemaphore {
    raw: sys::CUexternalSemaphore,
    context: Context,
    kind: SemaphoreKind,
    /// The streams its signals and waits were enqueued on, each once.
    streams: Mutex<Vec<Stream>>,
    /// The raw handle of the created (not default) stream noted last, which `streams` holds
    /// (so the handle stays that stream's): noting it again needs no lock.
    last_noted: AtomicUsize,
}

// SAFETY: a CUexternalSemaphore may be used from any thread; `streams` is behind a lock.
unsafe impl Send for ExternalSemaphore {}
// SAFETY: as above.
unsafe impl Sync for ExternalSemaphore {}

impl ExternalSemaphore {
    /// Imports the semaphore `handle` names into `context`
    /// ([`cuImportExternalSemaphore`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXTRES__INTEROP.html)).
    ///
    /// On success a file descriptor belongs to the driver; on failure it comes back in the
    /// [`Refused`]: a Windows handle off Windows is [`Error::Unsupported`], a descriptor that
    /// is not such a semaphore the driver's error.
    pub fn import(
        context: &Context,
        handle: SemaphoreHandle,
    ) -> Result<ExternalSemaphore, Box<Refused<SemaphoreHandle>>> {
        let imported = Self::import_raw(context, &handle);
        let kind = handle.kind();
        settle(imported, handle).map(|raw| ExternalSemaphore {
            raw,
            context: context.clone(),
            kind,
            streams: Mutex::new(Vec::new()),
            last_noted: AtomicUsize::new(0),
        })
    }

    fn import_raw(context: &Context, handle: &SemaphoreHandle) -> Result<sys::CUexternalSemaphore> {
        // SAFETY: a plain C struct; all zeroes is a valid value.
        let mut desc: sys::CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC = unsafe { std::mem::zeroed() };
        desc.type_ = handle.raw_kind();
        let source = handle.raw()?;
        match &source {
            Raw::Fd(fd) => desc.handle.fd = fd.raw(),
            Raw::Object(object) => desc.handle.nvSciSyncObj = *object,
        }
        context.enter()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: one out-parameter and a filled descriptor.
        let status = unsafe { driver!(status: cuImportExternalSemaphore(&mut raw, &desc)) };
        // Once the driver has seen the descriptor it is never closed here, even when the
        // import is refused (see `Duplicate`).
        if let Raw::Fd(duplicate) = source {
            duplicate.given();
        }
        status.check()?;
        Ok(raw)
    }

    /// The raw `CUexternalSemaphore`.
    pub fn as_raw(&self) -> sys::CUexternalSemaphore {
        self.raw
    }

    /// The context it was imported into.
    pub fn context(&self) -> &Context {
        &self.context
    }

    /// Its kind, which decides the parameters of its signals and waits.
    pub fn kind(&self) -> SemaphoreKind {
        self.kind
    }

    /// Signals the semaphore once the work enqueued on `stream` so far is done
    /// ([`cuSignalExternalSemaphoresAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXTRES__INTEROP.html)).
    ///
    /// Parameters that do not fit the [`kind`](Self::kind) (a value for a binary semaphore, a
    /// key for a timeline) are an [`Error::InvalidArgument`].
    pub fn signal(&self, stream: &Stream, params: SignalParams) -> Result<()> {
        self.check_context("signal", stream.context())?;
        // Written in place, in the array the driver reads.
        // SAFETY: a plain C struct; all zeroes is a valid value.
        let mut raw: [sys::CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS; 1] = unsafe { std::mem::zeroed() };
        params.write_raw(self.kind, &mut raw[0])?;
        enqueue_signals(stream, &[self.raw], &raw)?;
        self.note(stream);
        Ok(())
    }

    /// Makes the work enqueued on `stream` from now on wait until the semaphore is signalled
    /// (a timeline: reaches the value)
    /// ([`cuWaitExternalSemaphoresAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXTRES__INTEROP.html)).
    ///
    /// Parameters that do not fit the [`kind`](Self::kind) are an [`Error::InvalidArgument`].
    pub fn wait(&self, stream: &Stream, params: WaitParams) -> Result<()> {
        self.check_context("wait", stream.context())?;
        // SAFETY: as in `signal`.
        let mut raw: [sys::CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS; 1] = unsafe { std::mem::zeroed() };
        params.write_raw(self.kind, &mut raw[0])?;
        enqueue_waits(stream, &[self.raw], &raw)?;
        self.note(stream);
        Ok(())
    }

    /// Refuses a stream of another context than the semaphore's.
    #[inline]
    fn check_context(&self, operation: &'static str, context: &Context) -> Result<()> {
        if self.context != *context {
            return Err(Error::refused(
                crate::error::Reason::WRONG_CONTEXT,
                operation,
                format!("semaphore {:p} belongs to another context", self.raw),
            ));
        }
        Ok(())
    }

    /// Notes that work on `stream` uses the semaphore, for the drop to wait for. Noting the
    /// created stream noted last again is the inline check; the rest is out of line.
    #[inline]
    fn note(&self, stream: &Stream) {
        // A created stream's handle is its own while `streams` holds it; default-stream
        // handles are shared by contexts and threads, so they are compared as streams.
        if !stream.is_default() && self.last_noted.load(Ordering::Relaxed) == stream.as_raw() as usize {
            return;
        }
        self.note_slow(stream);
    }

    #[cold]
    #[inline(never)]
    fn note_slow(&self, stream: &Stream) {
        let mut streams = self.streams.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !streams.iter().any(|s| s == stream) {
            streams.push(stream.clone());
        }
        if !stream.is_default() {
            self.last_noted.store(stream.as_raw() as usize, Ordering::Relaxed);
        }
    }
}

impl Drop for ExternalSemaphore {
    fn drop(&mut self) {
        let streams =
            std::mem::take(self.streams.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner));
        // The driver requires every signal and wait to be done before the destroy. The wait
        // does not consume the context's deferred errors, so one kept from elsewhere does not
        // skip it.
        let mut waited = true;
        for stream in streams {
            if let Err(e) = stream.synchronize_for_release() {
                self.context.defer(e.dropping("ExternalSemaphore", None));
                waited = false;
            }
        }
        if !waited {
            // A signal or wait may still be outstanding: leak the semaphore rather than
            // destroy it under them.
            return;
        }
        let raw = self.raw;
        // SAFETY: imported once here and destroyed once, after its signals and waits.
        self.context.with_current_for_drop("ExternalSemaphore", || unsafe {
            driver!(cuDestroyExternalSemaphore(raw))
        });
    }
}

/// Signals every semaphore of `signals` with its parameters, in one call, once the work
/// enqueued on `stream` so far is done
/// ([`cuSignalExternalSemaphoresAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXTRES__INTEROP.html)).
///
/// None, parameters that do not fit a semaphore's kind, semaphores of another context than
/// the stream's, or a per-thread default stream of another thread, are an
/// [`Error::InvalidArgument`] before any call.
pub fn signal_all(stream: &Stream, signals: &[(&ExternalSemaphore, SignalParams)]) -> Result<()> {
    let batch = Batch::new("signal_all", stream.context(), signals.iter().copied(), SignalParams::to_raw)?;
    enqueue_signals(stream, &batch.handles, &batch.params)?;
    signals.iter().for_each(|(s, _)| s.note(stream));
    Ok(())
}

/// The one `cuSignalExternalSemaphoresAsync` call of checked arrays of the same length.
#[inline]
fn enqueue_signals(
    stream: &Stream,
    handles: &[sys::CUexternalSemaphore],
    params: &[sys::CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS],
) -> Result<()> {
    // The stream names its context: only a default stream needs it current (as launches do).
    // Binding it refuses another thread's per-thread stream, which the drop (waiting for the
    // streams noted) could not name.
    stream.context().take_deferred()?;
    stream.bind_if_default()?;
    refuse_capture(stream)?;
    let count = params.len().min(handles.len()) as u32;
    // SAFETY: two arrays of at least `count` elements (checked batches hold fewer than 2^32);
    // the semaphores and the stream are alive.
    unsafe {
        driver!(cuSignalExternalSemaphoresAsync(handles.as_ptr(), params.as_ptr(), count, stream.as_raw()))
    }
}

/// Makes the work enqueued on `stream` from now on wait for every semaphore of `waits`, in one
/// call ([`cuWaitExternalSemaphoresAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXTRES__INTEROP.html)).
///
/// Errors as for [`signal_all`].
pub fn wait_all(stream: &Stream, waits: &[(&ExternalSemaphore, WaitParams)]) -> Result<()> {
    let batch = Batch::new("wait_all", stream.context(), waits.iter().copied(), WaitParams::to_raw)?;
    enqueue_waits(stream, &batch.handles, &batch.params)?;
    waits.iter().for_each(|(s, _)| s.note(stream));
    Ok(())
}

/// The one `cuWaitExternalSemaphoresAsync` call of checked arrays of the same length.
#[inline]
fn enqueue_waits(
    stream: &Stream,
    handles: &[sys::CUexternalSemaphore],
    params: &[sys::CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS],
) -> Result<()> {
    // The stream names its context: only a default stream needs it current (as launches do).
    // Binding it refuses another thread's per-thread stream, which the drop (waiting for the
    // streams noted) could not name.
    stream.context().take_deferred()?;
    stream.bind_if_default()?;
    refuse_capture(stream)?;
    let count = params.len().min(handles.len()) as u32;
    // SAFETY: as in `enqueue_signals`.
    unsafe {
        driver!(cuWaitExternalSemaphoresAsync(handles.as_ptr(), params.as_ptr(), count, stream.as_raw()))
    }
}

/// Refuses a stream being captured: the signal or wait would become a node of the graph that
/// names the semaphore, and a semaphore's drop waits for the streams it was used on, not for
/// the graph's launches. A graph node holds the semaphore instead.
fn refuse_capture(stream: &Stream) -> Result<()> {
    if stream.capture_status()? != crate::stream::CaptureStatus::None {
        return Err(Error::refused(
            crate::error::Reason::DURING_CAPTURE,
            "external semaphore signal or wait",
            "the stream is being captured into a graph, which would refer to the semaphore at every launch; \
             add the signal or wait to the graph as a node (Graph::add_external_signal_node or \
             Graph::add_external_wait_node), which keeps the semaphore alive",
        ));
    }
    Ok(())
}

/// The arrays a batched signal or wait (on a stream or in a graph node) passes to the driver.
pub(crate) struct Batch<R> {
    /// The semaphores.
    pub(crate) handles: Vec<sys::CUexternalSemaphore>,
    /// Their raw parameters, in the same order.
    pub(crate) params: Vec<R>,
    /// How many there are.
    pub(crate) count: u32,
}

impl<R> Batch<R> {
    /// Checks a batch: some semaphores, all of `context`, each with parameters that fit its
    /// kind.
    pub(crate) fn new<'s, P>(
        operation: &'static str,
        context: &Context,
        items: impl ExactSizeIterator<Item = (&'s ExternalSemaphore, P)>,
        to_raw: impl Fn(P, SemaphoreKind) -> Result<R>,
    ) -> Result<Batch<R>> {
        let count =
            u32::try_from(items.len()).map_err(|_| Error::invalid(operation, "too many semaphores"))?;
        if count == 0 {
            return Err(Error::invalid(operation, "no semaphores given"));
        }
        let (mut handles, mut params) = (Vec::with_capacity(items.len()), Vec::with_capacity(items.len()));
        for (semaphore, p) in items {
            semaphore.check_context(operation, context)?;
            params.push(to_raw(p, semaphore.kind)?);
            handles.push(semaphore.raw);
        }
        Ok(Batch { handles, params, count })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_must_fit_the_kind() {
        use SemaphoreKind::*;
        assert!(SignalParams::new().to_raw(Binary).is_ok());
        assert!(SignalParams::value(3).to_raw(Timeline).is_ok_and(|r| r.params.fence.value == 3));
        assert!(WaitParams::new().to_raw(Timeline).is_ok(), "a timeline wait without a value waits for 0");
        let e = SignalParams::value(1).to_raw(Binary).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("a value for a Binary semaphore; use new()"), "{e}");
        let e =
            WaitParams::keyed_mutex(1, 5).to_raw(Timeline).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("use value(v)"), "{e}");
        let raw = WaitParams::keyed_mutex(7, 250).to_raw(KeyedMutex);
        assert!(raw.is_ok_and(|r| (r.params.keyedMutex.key, r.params.keyedMutex.timeoutMs) == (7, 250)));
        assert!(SignalParams::keyed_mutex(1).to_raw(NvSciSync).is_err());
    }

    #[test]
    fn skipping_the_memsync_sets_the_flag() {
        let raw = SignalParams::new().skip_nvscibuf_memsync().to_raw(SemaphoreKind::Binary);
        assert!(raw.is_ok_and(|r| r.flags == sys::CUDA_EXTERNAL_SEMAPHORE_SIGNAL_SKIP_NVSCIBUF_MEMSYNC));
        let raw = WaitParams::value(2).skip_nvscibuf_memsync().to_raw(SemaphoreKind::Timeline);
        assert!(raw.is_ok_and(|r| r.flags == sys::CUDA_EXTERNAL_SEMAPHORE_WAIT_SKIP_NVSCIBUF_MEMSYNC));
    }
}
