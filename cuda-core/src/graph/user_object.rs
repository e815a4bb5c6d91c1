//! User objects: Rust values whose life the driver counts, so that a graph, its clones, the
//! graphs that hold it as a child and their executable graphs keep them exactly as long as
//! any of them may run.
//!
//! The driver calls a user object's destructor, when its last reference goes, on a shared
//! internal thread where no CUDA call is allowed, at a moment no CUDA call waits for. So the
//! destructor does not drop the value there: it hands it to a thread of this crate (started
//! with the first user object), which drops it. A value's `Drop` may therefore call CUDA
//! (free a buffer, destroy an event), and a panic in it is caught there and printed, never
//! unwound into the driver.

use super::Graph;
use crate::context::Context;
use crate::error::{Error, Result};
use cuhost_driver_sys as sys;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Mutex, PoisonError};

/// What a user object holds: its value, boxed once more so that one thin pointer names it.
type Payload = Box<dyn Send>;

/// Where destructors send the values they release; `None` until the first user object.
static REAPER: Mutex<Option<Sender<Payload>>> = Mutex::new(None);

/// Starts the thread that drops released values, once.
fn start_reaper() -> Result<()> {
    let mut sender = REAPER.lock().unwrap_or_else(PoisonError::into_inner);
    if sender.is_some() {
        return Ok(());
    }
    let (tx, rx) = channel::<Payload>();
    std::thread::Builder::new().name("cuda-user-objects".into()).spawn(move || reap(rx)).map_err(|e| {
        Error::invalid(
            "UserObject::new",
            format!("could not start the thread that drops user objects' values: {e}"),
        )
    })?;
    *sender = Some(tx);
    Ok(())
}

/// Drops every value it receives; a panicking `Drop` is printed and the next value goes on.
fn reap(values: Receiver<Payload>) {
    for value in values {
        if let Err(panic) = catch_unwind(AssertUnwindSafe(move || drop(value))) {
            eprintln!("cuda-core: a value held by a CUDA user object panicked while it was dropped");
            // Dropping the panic's payload may panic too; it is not worth a second report.
            std::mem::forget(panic);
        }
    }
}

/// The destructor the driver calls when a user object's last reference goes.
unsafe extern "C" fn destroy(data: *mut c_void) {
    let handed_over = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `data` is the box `UserObject::new` leaked for this object, and the driver
        // calls the destructor once, after the last reference is gone.
        let value = unsafe { Box::from_raw(data.cast::<Payload>()) };
        let sender = REAPER.lock().unwrap_or_else(PoisonError::into_inner);
        match sender.as_ref() {
            Some(sender) => {
                if let Err(returned) = sender.send(*value) {
                    // The reaper is gone (the process is ending): leak rather than drop here.
                    std::mem::forget(returned);
                }
            }
            None => std::mem::forget(value),
        }
    }));
    if let Err(panic) = handed_over {
        std::mem::forget(panic);
    }
}

/// A reference to a CUDA user object (`CUuserObject`) that holds a Rust value; the value is
/// dropped once the last reference, this crate's or a graph's, is released.
///
/// Give a graph its own reference with [`Graph::retain_user_object`]: from then on the
/// driver keeps the value for that graph, for every clone ([`Graph::try_clone`]) and every
/// graph holding it as a child ([`Graph::add_child_graph_node`]) made later, and for every
/// executable graph made from any of them, until their launches have finished
/// ([User Objects](https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#graph-object-lifetime)).
/// This holds for copies the driver makes without this crate (a graph cloned through the raw
/// API) too.
///
/// The value is dropped on a thread of this crate, soon after the driver releases it (the
/// driver's own thread allows no CUDA call), so its `Drop` may call CUDA; it is `Send` for that
/// reason. Dropping this value releases one reference
/// ([`cuUserObjectRelease`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
#[derive(Debug)]
pub struct UserObject {
    raw: sys::CUuserObject,
    ctx: Context,
}

// SAFETY: the driver counts references atomically; a handle may be used from any thread. The
// value is only touched by the destructor, which needs it `Send`.
unsafe impl Send for UserObject {}
// SAFETY: as above; no method mutates through `&self` beyond the driver's count.
unsafe impl Sync for UserObject {}

impl UserObject {
    /// Makes a user object holding `value`, with one reference, this one
    /// ([`cuUserObjectCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html),
    /// with `CU_USER_OBJECT_NO_DESTRUCTOR_SYNC`). `ctx` is made current for the calls.
    ///
    /// Fails with the driver's status, or an [`Error::InvalidArgument`] when the thread that
    /// drops the values cannot be started; `value` is then dropped here.
    pub fn new<T: Send + 'static>(ctx: &Context, value: T) -> Result<UserObject> {
        let raw = create(ctx, Box::new(value), 1)?;
        Ok(UserObject { raw, ctx: ctx.clone() })
    }

    /// The raw `CUuserObject`.
    pub fn as_raw(&self) -> sys::CUuserObject {
        self.raw
    }

    /// One more reference to the same object
    /// ([`cuUserObjectRetain`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    pub fn try_clone(&self) -> Result<UserObject> {
        self.ctx.enter()?;
        // SAFETY: this value holds a reference, so the object is live.
        unsafe { driver!(cuUserObjectRetain(self.raw, 1)) }?;
        Ok(UserObject { raw: self.raw, ctx: self.ctx.clone() })
    }
}

/// Creates a user object with `refs` references that holds `value`.
fn create(ctx: &Context, value: Payload, refs: u32) -> Result<sys::CUuserObject> {
    ctx.enter()?;
    start_reaper()?;
    let data = Box::into_raw(Box::new(value));
    let mut raw = std::ptr::null_mut();
    let flags = sys::CUuserObject_flags::CU_USER_OBJECT_NO_DESTRUCTOR_SYNC.0;
    // SAFETY: one out-parameter; `data` is a live box that the destructor takes back once.
    let status =
        unsafe { driver!(status: cuUserObjectCreate(&mut raw, data.cast(), Some(destroy), refs, flags)) };
    if let Err(e) = status.check() {
        // SAFETY: the driver made no object, so nothing else will take the box back.
        drop(unsafe { Box::from_raw(data) });
        return Err(e);
    }
    Ok(raw)
}

impl Drop for UserObject {
    fn drop(&mut self) {
        let raw = self.raw;
        // SAFETY: this value holds one reference, given back here.
        self.ctx.with_current_for_drop("UserObject", || unsafe { driver!(cuUserObjectRelease(raw, 1)) });
    }
}

impl Graph {
    /// Gives this graph a reference to `object`
    /// ([`cuGraphRetainUserObject`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)):
    /// its value then lives as long as this graph, the clones and parents made of it from now
    /// on, and the executable graphs made from any of them (until their last launch is done).
    pub fn retain_user_object(&self, object: &UserObject) -> Result<()> {
        self.ctx.enter()?;
        // SAFETY: both are live; the graph gets a reference of its own.
        unsafe { driver!(cuGraphRetainUserObject(self.raw, object.raw, 1, 0)) }
    }

    /// Keeps `value` alive through the driver: a user object made for it, whose only
    /// reference is moved into this graph (`CU_GRAPH_USER_OBJECT_MOVE`). Like
    /// [`keep`](Self::keep), but the driver counts the references, so the value lives exactly
    /// as long as something made from the graph may run, through any copy the driver makes;
    /// it is dropped on this crate's user-object thread
    /// ([`cuUserObjectCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html),
    /// [`cuGraphRetainUserObject`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// Fails with the driver's status when it refuses either call; the value is then dropped
    /// (on the user-object thread).
    pub fn keep_as_user_object<T: Send + 'static>(&self, value: T) -> Result<()> {
        let raw = create(&self.ctx, Box::new(value), 1)?;
        let moved = sys::CUuserObjectRetain_flags::CU_GRAPH_USER_OBJECT_MOVE.0;
        // SAFETY: both are live; the reference created above moves to the graph.
        let status = unsafe { driver!(status: cuGraphRetainUserObject(self.raw, raw, 1, moved)) };
        if !status.is(sys::CUresult::CUDA_SUCCESS) {
            // The reference is still ours: give it back (the value goes to the reaper).
            // SAFETY: `raw` holds the one reference created above.
            let _ = unsafe { sys::cuUserObjectRelease(raw, 1) };
        }
        status.check()
    }

    /// Takes back `count` references to `object` that this graph holds
    /// ([`cuGraphReleaseUserObject`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    /// Executable graphs, clones and parents made earlier keep their own.
    ///
    /// # Safety
    ///
    /// This graph holds at least `count` references to `object` (given by
    /// [`retain_user_object`](Self::retain_user_object)), and nothing the graph's nodes use
    /// relies on those references: graphs, clones and executables made from this graph after
    /// the call will not keep the value.
    pub unsafe fn release_user_object(&self, object: &UserObject, count: u32) -> Result<()> {
        self.ctx.enter()?;
        // SAFETY: both are live; the caller vouches for the count.
        unsafe { driver!(cuGraphReleaseUserObject(self.raw, object.raw, count)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::{Duration, Instant};

    struct Counted(Arc<AtomicU32>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    struct Panics;

    impl Drop for Panics {
        fn drop(&mut self) {
            panic!("dropped badly");
        }
    }

    fn wait_for(count: &AtomicU32, value: u32) -> bool {
        let start = Instant::now();
        while count.load(Ordering::SeqCst) != value {
            if start.elapsed() > Duration::from_secs(10) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    /// What the driver does with the pointer and the destructor, done by hand: the value is
    /// dropped once, on the reaper thread, and a panic there does not stop the next value.
    #[test]
    fn the_destructor_hands_the_value_to_the_reaper_which_drops_it_once() {
        assert!(start_reaper().is_ok());
        let count = Arc::new(AtomicU32::new(0));
        for value in [Box::new(Panics) as Payload, Box::new(Counted(count.clone()))] {
            let data = Box::into_raw(Box::new(value));
            // SAFETY: `data` is a leaked payload box, handed over once, as the driver does.
            unsafe { destroy(data.cast()) };
        }
        assert!(wait_for(&count, 1), "the value was not dropped");
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(count.load(Ordering::SeqCst), 1);
    }
}
