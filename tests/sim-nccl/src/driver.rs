//! The simulated driver as this library reaches it: the file `cuda-core` opened as `libcuda`
//! (`CUDA_DRIVER_LIBRARY_PATH`), its functions through `cuGetProcAddress_v2`, and the
//! simulator's `sim_owner_epoch` and `sim_queue_as_of`, which tell its checker that work
//! queued now was issued earlier.

use libloading::Library;
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

type GetProcAddress = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> c_int;
type CopyAsync = unsafe extern "C" fn(u64, u64, usize, usize) -> c_int;
type EventCreate = unsafe extern "C" fn(*mut usize, c_uint) -> c_int;
type EventRecord = unsafe extern "C" fn(usize, usize) -> c_int;
type StreamWaitEvent = unsafe extern "C" fn(usize, usize, c_uint) -> c_int;
type EventDestroy = unsafe extern "C" fn(usize) -> c_int;
type OwnerEpoch = extern "C" fn() -> u64;
type QueueAsOf = extern "C" fn(u64, u64);

/// The driver version whose ABIs are asked for (CUDA 12.0).
const ABI_VERSION: c_int = 12000;
/// `CU_EVENT_DISABLE_TIMING`.
const DISABLE_TIMING: c_uint = 2;

/// The driver functions this library queues its work with.
pub(crate) struct Driver {
    copy: CopyAsync,
    event_create: EventCreate,
    event_record: EventRecord,
    wait_event: StreamWaitEvent,
    event_destroy: EventDestroy,
    owner_epoch: Option<OwnerEpoch>,
    queue_as_of: Option<QueueAsOf>,
    _library: Library,
}

/// The simulated driver, opened on first use; `None` when `CUDA_DRIVER_LIBRARY_PATH` names
/// no library with the functions needed.
pub(crate) fn driver() -> Option<&'static Driver> {
    static DRIVER: OnceLock<Option<Driver>> = OnceLock::new();
    DRIVER.get_or_init(open).as_ref()
}

fn open() -> Option<Driver> {
    let path = std::env::var_os("CUDA_DRIVER_LIBRARY_PATH")?;
    // SAFETY: the simulated driver, already loaded by `cuda-core` (this opens the same file
    // again and gets the same library); its initialisers only set up Rust statics.
    let library = unsafe { Library::new(path) }.ok()?;
    // SAFETY: `cuGetProcAddress_v2` has this signature in every driver since CUDA 12.0.
    let get: GetProcAddress = unsafe { *library.get::<GetProcAddress>(b"cuGetProcAddress_v2\0").ok()? };
    let lookup = |name: &CStr| -> Option<usize> {
        let (mut pfn, mut status) = (std::ptr::null_mut(), 0);
        // SAFETY: a NUL-terminated name and two out-pointers to locals.
        let r = unsafe { get(name.as_ptr(), &mut pfn, ABI_VERSION, 0, &mut status) };
        (r == 0 && status == 0 && !pfn.is_null()).then_some(pfn as usize)
    };
    let (copy, create, record, wait, destroy) = (
        lookup(c"cuMemcpyDtoDAsync")?,
        lookup(c"cuEventCreate")?,
        lookup(c"cuEventRecord")?,
        lookup(c"cuStreamWaitEvent")?,
        lookup(c"cuEventDestroy")?,
    );
    // SAFETY: the functions of `cuda.h` at the ABI of CUDA 12.0, whose signatures these are;
    // the `sim_*` functions have the signatures of the simulator's `control` module.
    unsafe {
        Some(Driver {
            copy: std::mem::transmute::<usize, CopyAsync>(copy),
            event_create: std::mem::transmute::<usize, EventCreate>(create),
            event_record: std::mem::transmute::<usize, EventRecord>(record),
            wait_event: std::mem::transmute::<usize, StreamWaitEvent>(wait),
            event_destroy: std::mem::transmute::<usize, EventDestroy>(destroy),
            owner_epoch: library.get::<OwnerEpoch>(b"sim_owner_epoch\0").ok().map(|f| *f),
            queue_as_of: library.get::<QueueAsOf>(b"sim_queue_as_of\0").ok().map(|f| *f),
            _library: library,
        })
    }
}

/// A driver status other than success.
pub(crate) struct Failed;

fn check(status: c_int) -> Result<(), Failed> {
    if status == 0 { Ok(()) } else { Err(Failed) }
}

impl Driver {
    /// The simulator's newest owner epoch (0 when it cannot tell).
    pub(crate) fn owner_epoch(&self) -> u64 {
        self.owner_epoch.map_or(0, |f| f())
    }

    /// Queues a copy of `bytes` from `src` to `dst` on `stream`, issued when the newest owner
    /// epoch was `as_of` (for the memory read, and for the memory written; 0: now).
    pub(crate) fn copy(
        &self,
        dst: u64,
        src: u64,
        bytes: u64,
        stream: usize,
        as_of: (u64, u64),
    ) -> Result<(), Failed> {
        let Ok(bytes) = usize::try_from(bytes) else { return Err(Failed) };
        if let Some(f) = self.queue_as_of {
            f(as_of.0, as_of.1);
        }
        // SAFETY: device addresses and a stream handle, checked by the driver.
        let status = unsafe { (self.copy)(dst, src, bytes, stream) };
        if let Some(f) = self.queue_as_of {
            f(0, 0);
        }
        check(status)
    }

    /// Makes `waiter` wait for the work queued on `on` so far (an event recorded on `on`).
    pub(crate) fn wait(&self, waiter: usize, on: usize) -> Result<(), Failed> {
        let mut event = 0;
        // SAFETY: one out-pointer to a local.
        check(unsafe { (self.event_create)(&mut event, DISABLE_TIMING) })?;
        // SAFETY: a live event and stream handles, checked by the driver.
        let waited = check(unsafe { (self.event_record)(event, on) })
            .and_then(|()| check(unsafe { (self.wait_event)(waiter, event, 0) }));
        // SAFETY: the event made above, destroyed once.
        let destroyed = check(unsafe { (self.event_destroy)(event) });
        waited.and(destroyed)
    }
}
