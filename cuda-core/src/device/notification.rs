//! Asynchronous notifications from the driver about a device (CUDA 12.4): a closure the driver
//! calls on its own thread, for instance when the application is over its memory budget.

use super::Device;
use crate::error::{Error, Result, check};
use cuda_driver_sys as sys;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
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

/// The live registrations, by the id the driver hands back to the trampoline. The driver gets
/// the id, never a pointer: a call that comes during or after unregistration finds nothing
/// (or an entry it holds alive until it returns), whatever the driver guarantees about calls
/// in flight when unregistration returns.
static REGISTRY: Mutex<Vec<(u64, Arc<Entry>)>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn registry() -> std::sync::MutexGuard<'static, Vec<(u64, Arc<Entry>)>> {
    // A panic never happens while the lock is held (only pushes, clones and removals), so a
    // poisoned lock still holds consistent data.
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

fn remove(id: u64) -> Option<Arc<Entry>> {
    let mut live = registry();
    let at = live.iter().position(|(i, _)| *i == id)?;
    Some(live.swap_remove(at).1)
}

unsafe extern "C" fn trampoline(
    info: *mut sys::CUasyncNotificationInfo,
    user_data: *mut c_void,
    _handle: sys::CUasyncCallbackHandle,
) {
    let id = user_data as usize as u64;
    let entry = registry().iter().find(|(i, _)| *i == id).map(|(_, e)| Arc::clone(e));
    let Some(entry) = entry else { return };
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
    // A panic must not unwind into the driver: it is kept for `take_panic` and `unregister`.
    if let Err(payload) = catch_unwind(AssertUnwindSafe(|| (entry.callback)(notification))) {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_string());
        *entry.panic.lock().unwrap_or_else(PoisonError::into_inner) = Some(message);
    }
}

/// A closure registered for a device's asynchronous notifications; unregistered on drop, and
/// the closure freed after that (and after any call of it still running).
///
/// The driver calls the closure on a thread of its own, in no particular order and possibly
/// several at once; it should return quickly (the driver asks for about 10 ms) and must not
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
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let entry = Arc::new(Entry { callback: Box::new(f), panic: Mutex::new(None) });
        // In the registry before the driver may call.
        registry().push((id, Arc::clone(&entry)));
        let mut handle = std::ptr::null_mut();
        // SAFETY: the trampoline matches `CUasyncCallback`; the user data is an id, not a
        // pointer, so nothing it names can dangle; one out-parameter.
        let status = unsafe {
            sys::cuDeviceRegisterAsyncNotification(
                self.as_raw(),
                Some(trampoline),
                id as usize as *mut c_void,
                &mut handle,
            )
        };
        if let Err(e) = check("cuDeviceRegisterAsyncNotification", status) {
            remove(id);
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
    /// ([`cuDeviceUnregisterAsyncNotification`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)),
    /// returning the driver's refusal, or else a panic the closure raised and nobody took.
    /// After a refusal the closure stays registered and is never freed.
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

    fn release(&mut self) -> Result<()> {
        if !std::mem::replace(&mut self.registered, false) {
            return Ok(());
        }
        // SAFETY: registered by `register_async_notification` on this device, unregistered
        // once (`registered` is cleared first).
        let status = unsafe { sys::cuDeviceUnregisterAsyncNotification(self.device.as_raw(), self.handle) };
        check("cuDeviceUnregisterAsyncNotification", status)?;
        // The driver calls no more; a call still running holds its own reference.
        remove(self.id);
        Ok(())
    }
}

impl Drop for AsyncNotifications {
    fn drop(&mut self) {
        // No context keeps device-level errors: a refusal is printed (the closure stays
        // registered, and in the registry, so any later call still finds it alive).
        if let Err(e) = self.release() {
            eprintln!("cuda-core: AsyncNotifications kept registered: {e}");
        }
        if let Some(e) = self.take_panic() {
            eprintln!("cuda-core: an async notification callback panicked: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trampoline_reaches_only_live_entries_and_keeps_panics() {
        let hits = Arc::new(AtomicU64::new(0));
        let seen = Arc::clone(&hits);
        let entry = Arc::new(Entry {
            callback: Box::new(move |n| {
                if let AsyncNotification::OverBudget { bytes_over_budget } = n {
                    seen.fetch_add(bytes_over_budget, Ordering::Relaxed);
                } else {
                    std::panic::panic_any("not over budget");
                }
            }),
            panic: Mutex::new(None),
        });
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        registry().push((id, Arc::clone(&entry)));
        let mut info = sys::CUasyncNotificationInfo {
            type_: sys::CUasyncNotificationType::CU_ASYNC_NOTIFICATION_TYPE_OVER_BUDGET,
            info: sys::CUasyncNotificationInfo_st__bindgen_ty_1 {
                overBudget: sys::CUasyncNotificationInfo_st__bindgen_ty_1__bindgen_ty_1 {
                    bytesOverBudget: 42,
                    ..Default::default()
                },
            },
            ..Default::default()
        };
        let data = id as usize as *mut c_void;
        // SAFETY: a live notification; the id is registered.
        unsafe { trampoline(&mut info, data, std::ptr::null_mut()) };
        assert_eq!(hits.load(Ordering::Relaxed), 42);
        info.type_ = sys::CUasyncNotificationType(77);
        // SAFETY: as above; the closure panics on this type, which is caught.
        unsafe { trampoline(&mut info, data, std::ptr::null_mut()) };
        assert_eq!(
            entry.panic.lock().unwrap_or_else(PoisonError::into_inner).as_deref(),
            Some("not over budget")
        );
        assert!(remove(id).is_some());
        info.type_ = sys::CUasyncNotificationType::CU_ASYNC_NOTIFICATION_TYPE_OVER_BUDGET;
        // SAFETY: the id is gone: nothing is called.
        unsafe { trampoline(&mut info, data, std::ptr::null_mut()) };
        assert_eq!(hits.load(Ordering::Relaxed), 42);
    }
}
