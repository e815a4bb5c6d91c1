//! Host callbacks: Rust closures run in stream order through `cuLaunchHostFunc`.

use super::{CaptureStatus, Stream};
use crate::context::ContextInner;
use crate::error::{Error, Result, check};
use cuhost_driver_sys as sys;
use std::collections::HashMap;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError, Weak};

/// A closure queued by [`Stream::launch_host_func`] and not run yet.
type Pending = Box<dyn FnOnce() + Send>;

/// The closures queued and not run yet, by the number the driver gets as user data (never a
/// pointer): a call that the driver makes more than once (a `cuLaunchHostFunc` captured into a
/// graph because a capture began on another thread between the check and the call, run at
/// every launch) finds the closure at the first call only, and nothing is freed twice.
static PENDING: Mutex<Option<HashMap<usize, Pending>>> = Mutex::new(None);
/// The next number; 0 is never given.
static NEXT: AtomicUsize = AtomicUsize::new(1);

unsafe extern "C" fn trampoline(data: *mut c_void) {
    let id = data as usize;
    let f = PENDING.lock().unwrap_or_else(PoisonError::into_inner).as_mut().and_then(|m| m.remove(&id));
    if let Some(f) = f {
        f();
    }
}

/// Keeps a panic caught in a host function run by the driver as [`Error::CallbackPanicked`]
/// in the context, so the next call through it reports it.
pub(crate) fn report_panic(panic: Box<dyn std::any::Any + Send>, ctx: &Weak<ContextInner>) {
    let message = crate::error::panic_message(panic);
    if let Some(ctx) = ctx.upgrade() {
        ctx.defer(Error::CallbackPanicked { message });
    }
}

impl Stream {
    /// Runs `f` on a driver thread once all work queued before it on this stream is done;
    /// work queued after it waits for it
    /// ([`cuLaunchHostFunc`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html)).
    ///
    /// `f` must not call CUDA: the driver forbids it in host functions, and such a call may
    /// fail or deadlock. That includes this crate's calls that wait for the device, such as
    /// reading a [`PinnedBuffer`](crate::memory::PinnedBuffer) (`as_slice` waits for its copies, which
    /// may be queued after `f`): such a wait never ends. If `f` panics, the panic is caught and reported as
    /// [`Error::CallbackPanicked`] by the next call through this context (for instance
    /// [`Stream::synchronize`]).
    ///
    /// On a stream that is being captured ([`Stream::begin_capture`], or a stream that joined a
    /// capture by waiting on an event recorded in it) this is refused with
    /// [`Error::InvalidArgument`] and the capture goes on unharmed: captured, the closure would
    /// run at every launch of the graph, and an `FnOnce` runs once. Capture a closure the graph
    /// owns with [`launch_replayable_host_func`](Self::launch_replayable_host_func) instead, or
    /// add a host node to the graph ([`Graph::add_host_node`](crate::graph::Graph::add_host_node)).
    /// Should another thread begin a capture of the stream between that check and the call, the
    /// closure is captured and runs at the graph's first launch only (later launches find it
    /// gone): it never runs twice.
    ///
    /// ```no_run
    /// # use cuhost::{Context, Device, Stream, StreamFlags};
    /// # fn main() -> cuhost::Result<()> {
    /// # let ctx = Context::primary(&Device::get(0)?)?;
    /// let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// stream.launch_host_func(move || tx.send("copies done").unwrap_or(()))?;
    /// stream.synchronize()?;
    /// assert_eq!(rx.try_recv().ok(), Some("copies done"));
    /// # Ok(()) }
    /// ```
    pub fn launch_host_func<F: FnOnce() + Send + 'static>(&self, f: F) -> Result<()> {
        self.enqueue_host_func("cuLaunchHostFunc", f, |stream, trampoline, data| {
            // SAFETY: passed on from `enqueue_host_func`: a live stream, a matching trampoline
            // and its payload.
            unsafe { sys::cuLaunchHostFunc(stream, trampoline, data) }
        })
    }

    /// [`launch_host_func`](Self::launch_host_func) with the way the driver's thread waits for
    /// host functions to run
    /// ([`cuLaunchHostFunc_v2`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html),
    /// CUDA 13.1): [`HostFuncSync::SpinWait`] trades a busy thread for a shorter delay before
    /// `f` runs. Everything else, refusals included, is as for `launch_host_func`.
    ///
    /// On a driver older than 13.1 this is an [`Error::Load`] naming the version needed and
    /// the one installed, and nothing is queued.
    #[cfg(cuda_headers_13_1)]
    pub fn launch_host_func_with<F: FnOnce() + Send + 'static>(
        &self,
        sync: HostFuncSync,
        f: F,
    ) -> Result<()> {
        let mode = match sync {
            HostFuncSync::Blocking => sys::CUhostTaskSyncMode::CU_HOST_TASK_BLOCKING,
            HostFuncSync::SpinWait => sys::CUhostTaskSyncMode::CU_HOST_TASK_SPINWAIT,
        };
        self.enqueue_host_func("cuLaunchHostFunc_v2", f, |stream, trampoline, data| {
            // SAFETY: as in `launch_host_func`.
            unsafe { sys::cuLaunchHostFunc_v2(stream, trampoline, data, mode.0) }
        })
    }

    /// Queues `f` through `launch` (one of the `cuLaunchHostFunc` ABIs), which receives the
    /// stream, the trampoline and the boxed payload.
    fn enqueue_host_func<F: FnOnce() + Send + 'static>(
        &self,
        call: &'static str,
        f: F,
        launch: impl FnOnce(sys::CUstream, sys::CUhostFn, *mut c_void) -> sys::CUresult,
    ) -> Result<()> {
        let ctx = self.context();
        ctx.take_deferred()?;
        self.bind_if_default()?;
        if self.capture_status()? == CaptureStatus::Active {
            return Err(Error::refused(
                crate::error::Reason::DURING_CAPTURE,
                "Stream::launch_host_func",
                "the stream is being captured into a graph, where the closure would run at every \
                 launch but can run only once; add it to the graph with `Graph::add_host_node` \
                 (after the capture ends, or into the graph given to `begin_capture_to_graph`)",
            ));
        }
        let weak: Weak<ContextInner> = std::sync::Arc::downgrade(ctx.inner());
        let run: Pending = Box::new(move || {
            if let Err(panic) = catch_unwind(AssertUnwindSafe(f)) {
                report_panic(panic, &weak);
            }
        });
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        PENDING
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert_with(HashMap::new)
            .insert(id, run);
        // The trampoline matches `CUhostFn`; it takes the closure out by its number.
        let status = launch(self.as_raw(), Some(trampoline), id as *mut c_void);
        if status != sys::CUresult::CUDA_SUCCESS {
            // The driver refused the call: it will never run the trampoline.
            let refused =
                PENDING.lock().unwrap_or_else(PoisonError::into_inner).as_mut().and_then(|m| m.remove(&id));
            drop(refused);
        }
        check(call, status)
    }
}

/// How the driver's thread that runs host functions waits for the next one
/// (`CUhostTaskSyncMode`, CUDA 13.1).
#[cfg(cuda_headers_13_1)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum HostFuncSync {
    /// `CU_HOST_TASK_BLOCKING`: the thread sleeps until a host function is ready (what
    /// [`Stream::launch_host_func`] does).
    #[default]
    Blocking,
    /// `CU_HOST_TASK_SPINWAIT`: the thread spins, so the function starts sooner and a core is
    /// kept busy.
    SpinWait,
}
