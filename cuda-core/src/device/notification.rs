//! Asynchronous notifications from the driver about a device (CUDA 12.4): a closure the driver
//! calls on its own thread, for instance when the application is over its memory budget.

use super::Device;
use crate::callback_registry::Registry;
use crate::error::{Error, Result, report_from_drop};
use cuhost_driver_sys as sys;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, PoisonError};

/// What the driver notifies (`CUasyncNotificationInfo`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AsyncNotification {
    /// `CU_ASYNC_NOTIFICATION_TYPE_OVER_BUDGET`: the application uses this many bytes of
    /// device memory more than its budget; free some.
    OverBudget {
        /// How far over the budget, in bytes.
        bytes_over_budget: u64,
    },
    /// A notification this crate does not know, by its raw `CUasyncNotificationType`.
    Other(u32),
}

type Callback = dyn Fn(AsyncNotification) + Send + Sync;

/// What the driver's calls reach: the closure, and the message of a panic it raised.
struct Entry {
    callback: Box<Callback>,
    panic: Mutex<Option<String>>,
}

/// The live registrations. The driver gets an entry's number, never a pointer; see
/// [`callback_registry`](crate::callback_registry) for how a call in flight when the value is
/// dropped is waited for, so that the closure is dropped on the value's thread.
static CALLBACKS: Registry<Entry> = Registry::new();

unsafe extern "C" fn trampoline(
    info: *mut sys::CUasyncNotificationInfo,
    user_data: *mut c_void,
    _handle: sys::CUasyncCallbackHandle,
) {
    if info.is_null() {
        return;
    }
    // SAFETY: the driver passes a live notification for the length of the call.
    let info = unsafe { &*info };
    let notification = match info.type_ {
        sys::CUasyncNotificationType::CU_ASYNC_NOTIFICATION_TYPE_OVER_BUDGET => {
            // SAFETY: the type names the union member the driver wrote.
            AsyncNotification::OverBudget {
                bytes_over_budget: unsafe { info.info.overBudget.bytesOverBudget },
            }
        }
        other => AsyncNotification::Other(other.0),
    };
    CALLBACKS.call(user_data as usize as u64, |entry| {
        // A panic must not unwind into the driver: it is kept for `take_panic` and `unregister`.
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| (entry.callback)(notification))) {
            let message = crate::error::panic_message(payload);
            *entry.panic.lock().unwrap_or_else(PoisonError::into_inner) = Some(message);
        }
    });
}

/// A closure registered for a device's asynchronous notifications; unregistered on drop, and
/// the closure freed after that, on the dropping thread: the drop waits for the calls of it
/// still running on the driver's thread to return.
///
/// The driver calls the closure on a thread of its own, in no particular order and possibly
/// several at once; it should return quickly (the driver asks for about 10 ms), must not wait
/// for a lock held by a thread that drops this value (the drop would wait for it), and must not
/// register or unregister notifications (the driver refuses that with
/// `CUDA_ERROR_NOT_PERMITTED`: a subscription dropped inside a callback stays registered, and
/// its closure is kept, not freed).
pub struct AsyncNotifications {
    device: Device,
    handle: sys::CUasyncCallbackHandle,
    id: u64,
    entry: Arc<Entry>,
    registered: bool,
}

// SAFETY: the handle is an opaque token the driver accepts from any thread; the closure is
// `Send + Sync`.
unsafe impl Send for AsyncNotifications {}
// SAFETY: `&AsyncNotifications` only reads the panic slot, under its lock.
unsafe impl Sync for AsyncNotifications {}

impl std::fmt::Debug for AsyncNotifications {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncNotifications")
            .field("device", &self.device)
            .field("handle", &self.handle)
            .finish()
    }
}

impl Device {
    /// Calls `f` with each asynchronous notification the driver sends about this device, such
    /// as being over the memory budget, until the returned value is dropped
    /// ([`cuDeviceRegisterAsyncNotification`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// A panic in `f` is caught (it must not unwind into the driver) and returned by
    /// [`AsyncNotifications::take_panic`] or [`AsyncNotifications::unregister`]. A driver
    /// older than 12.4 is an [`Error::Load`] naming the version needed; a device or platform
    /// without notifications is the driver's `CUDA_ERROR_NOT_SUPPORTED`.
    pub fn register_async_notification(
        &self,
        f: impl Fn(AsyncNotification) + Send + Sync + 'static,
    ) -> Result<AsyncNotifications> {
        crate::device::init()?;
        let entry = Arc::new(Entry { callback: Box::new(f), panic: Mutex::new(None) });
        let id = CALLBACKS.insert(Arc::clone(&entry));
        let mut handle = std::ptr::null_mut();
        // SAFETY: the trampoline matches `CUasyncCallback`; the user data is an id, not a
        // pointer, so nothing it names can dangle; one out-parameter.
        let status = unsafe {
            driver!(status: cuDeviceRegisterAsyncNotification(
                self.as_raw(),
                Some(trampoline),
                id as usize as *mut c_void,
                &mut handle,
            ))
        };
        if let Err(e) = status.check() {
            CALLBACKS.remove(id);
            return Err(e);
        }
        Ok(AsyncNotifications { device: *self, handle, id, entry, registered: true })
    }
}

impl AsyncNotifications {
    /// The device the notifications are about.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The raw `CUasyncCallbackHandle`.
    pub fn as_raw(&self) -> sys::CUasyncCallbackHandle {
        self.handle
    }

    /// The panic the closure raised, if it did since the last call, as an
    /// [`Error::CallbackPanicked`].
    pub fn take_panic(&self) -> Option<Error> {
        let message = self.entry.panic.lock().unwrap_or_else(PoisonError::into_inner).take()?;
        Some(Error::CallbackPanicked { message })
    }

    /// Unregisters now
    /// ([`cuDeviceUnregisterAsyncNotification`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html))
    /// and waits for the calls of the closure still running, returning the driver's refusal, or
    /// else a panic the closure raised and nobody took. After a refusal the closure stays
    /// registered and is never freed.
    ///
    /// Fails with the driver's status when it refuses (for example, when called from inside
    /// the callback), or with [`Error::CallbackPanicked`] for a panic not yet taken.
    pub fn unregister(mut self) -> Result<()> {
        self.release()?;
        match self.take_panic() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Unregisters, once, and waits until no call of the closure runs; after a refusal the
    /// closure stays listed, for the driver's later calls.
    fn release(&mut self) -> Result<()> {
        if !std::mem::replace(&mut self.registered, false) {
            return Ok(());
        }
        // SAFETY: registered by `register_async_notification` on this device, unregistered
        // once (`registered` is cleared first).
        let status = unsafe {
            driver!(status: cuDeviceUnregisterAsyncNotification(self.device.as_raw(), self.handle))
        };
        self.unregistered(status)
    }

    /// Follows the driver's answer `status` to the unregistration. On success the closure is
    /// taken out of the registry, so that no call reaches it any more, and the calls that did
    /// are waited for: `self.entry` is then its last reference, which drops it on this thread.
    fn unregistered(&self, status: crate::error::Status) -> Result<()> {
        status.check()?;
        CALLBACKS.remove(self.id);
        CALLBACKS.wait_for_calls(self.id, &self.entry);
        Ok(())
    }
}

impl Drop for AsyncNotifications {
    fn drop(&mut self) {
        // No context keeps device-level errors: a refusal is printed (the closure stays
        // registered, and listed, so any later call still finds it alive).
        if let Err(e) = self.release() {
            report_from_drop("AsyncNotifications kept registered", &e);
        }
        if let Some(e) = self.take_panic() {
            report_from_drop("an async notification callback panicked", &e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::PanicsOnDrop;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::mpsc::{Sender, channel};
    use std::thread::ThreadId;
    use std::time::Duration;

    fn over_budget(bytes: u64) -> sys::CUasyncNotificationInfo {
        sys::CUasyncNotificationInfo {
            type_: sys::CUasyncNotificationType::CU_ASYNC_NOTIFICATION_TYPE_OVER_BUDGET,
            info: sys::CUasyncNotificationInfo_st__bindgen_ty_1 {
                overBudget: sys::CUasyncNotificationInfo_st__bindgen_ty_1__bindgen_ty_1 {
                    bytesOverBudget: bytes,
                    ..Default::default()
                },
            },
            ..Default::default()
        }
    }

    /// Calls the trampoline as the driver does, with the user data of entry `id`.
    fn notify(id: u64, info: &mut sys::CUasyncNotificationInfo) {
        // SAFETY: a live notification; the user data is a number, whatever it names.
        unsafe { trampoline(info, id as usize as *mut c_void, std::ptr::null_mut()) };
    }

    fn entry(callback: impl Fn(AsyncNotification) + Send + Sync + 'static) -> Arc<Entry> {
        Arc::new(Entry { callback: Box::new(callback), panic: Mutex::new(None) })
    }

    fn panic_of(entry: &Entry) -> Option<String> {
        entry.panic.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    #[test]
    fn the_trampoline_reaches_only_live_entries_and_keeps_panics() {
        let hits = Arc::new(AtomicU64::new(0));
        let seen = Arc::clone(&hits);
        let entry = entry(move |n| {
            if let AsyncNotification::OverBudget { bytes_over_budget } = n {
                seen.fetch_add(bytes_over_budget, Ordering::Relaxed);
            } else {
                std::panic::panic_any("not over budget");
            }
        });
        let id = CALLBACKS.insert(Arc::clone(&entry));
        let mut info = over_budget(42);
        notify(id, &mut info);
        assert_eq!(hits.load(Ordering::Relaxed), 42);
        info.type_ = sys::CUasyncNotificationType(77);
        notify(id, &mut info); // the closure panics on this type, which is caught
        assert_eq!(panic_of(&entry).as_deref(), Some("not over budget"));
        assert!(CALLBACKS.remove(id).is_some());
        info.type_ = sys::CUasyncNotificationType::CU_ASYNC_NOTIFICATION_TYPE_OVER_BUDGET;
        notify(id, &mut info); // the id is gone: nothing is called
        assert_eq!(hits.load(Ordering::Relaxed), 42);
    }

    // H8: the trampoline dropped the caught payload, whose drop could unwind into the driver.
    #[test]
    fn h8_a_panic_payload_is_not_dropped_in_the_trampoline() {
        let entry = entry(|_| std::panic::panic_any(PanicsOnDrop));
        let id = CALLBACKS.insert(Arc::clone(&entry));
        notify(id, &mut over_budget(1));
        assert_eq!(panic_of(&entry).as_deref(), Some("a panic without a message"));
        CALLBACKS.remove(id);
    }

    /// Sends the id of the thread it is dropped on.
    struct DropSite(Sender<ThreadId>);

    impl Drop for DropSite {
        fn drop(&mut self) {
            let _ = self.0.send(std::thread::current().id());
        }
    }

    // H8: a value dropped while its closure ran left the trampoline the last reference, and the
    // closure (with what it captured) was dropped on the driver's thread.
    #[test]
    fn h8_a_value_dropped_during_a_call_drops_the_closure_on_its_own_thread() {
        let (dropped_tx, dropped) = channel();
        let (entered_tx, entered) = channel();
        let (go_tx, go) = channel::<()>();
        let go = Mutex::new(go);
        let site = DropSite(dropped_tx);
        let entry = entry(move |_| {
            let _keep = &site;
            let _ = entered_tx.send(());
            let _ = go.lock().map(|go| go.recv());
        });
        let id = CALLBACKS.insert(Arc::clone(&entry));
        // Unregistered already: dropping it does not call the driver.
        let value = AsyncNotifications {
            device: Device { raw: 0 },
            handle: std::ptr::null_mut(),
            id,
            entry,
            registered: false,
        };
        let driver = std::thread::spawn(move || notify(id, &mut over_budget(1)));
        assert!(entered.recv_timeout(Duration::from_secs(10)).is_ok(), "the call never started");
        let owner = std::thread::spawn(move || {
            // As the drop does once the driver has unregistered the closure.
            let unregistered = value.unregistered(crate::error::Status {
                call: "cuDeviceUnregisterAsyncNotification",
                code: sys::CUresult::CUDA_SUCCESS,
            });
            drop(value);
            unregistered
        });
        let owner_id = owner.thread().id();
        std::thread::sleep(Duration::from_millis(100));
        assert!(dropped.try_recv().is_err(), "the closure was dropped while it ran");
        let _ = go_tx.send(());
        assert!(driver.join().is_ok());
        assert!(matches!(owner.join(), Ok(Ok(()))));
        assert_eq!(dropped.try_recv().ok(), Some(owner_id), "dropped once, by the owner's thread");
    }
}
