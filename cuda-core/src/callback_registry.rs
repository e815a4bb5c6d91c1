//! Closures that the driver calls from its own threads through a C trampoline (device
//! notifications, log messages): named to the driver by a number, never by a pointer, and dropped
//! on the thread that unregisters them, never on the driver's.
//!
//! A closure is listed in a [`Registry`] under a number, which the driver gets as its user
//! data. The trampoline looks the number up under the registry's lock and, while the closure is
//! listed, holds a reference to it for the length of the call ([`Registry::call`]). A call that
//! comes during or after unregistration therefore finds nothing, whatever the driver does with
//! calls in flight when its unregister call returns (its documentation promises nothing).
//!
//! The value that registered the closure, once the driver has unregistered it, takes it out of
//! the registry ([`Registry::remove`]) and waits until no call of it is running
//! ([`Registry::wait_for_calls`]): after the removal no call can take a new reference, and each
//! running call gives its reference back when it returns. The value's reference is then the
//! last one, and the closure, with what it captured (a buffer whose drop calls CUDA, a channel's
//! sender), is dropped with it, on the value's thread.
//!
//! One case cannot wait: a value dropped inside a call of its own closure, on the calling
//! thread, would wait for itself for ever. It does not wait; the call's reference may then be
//! the last one, and the trampoline keeps the closure (a leak) rather than drop it on the
//! driver's thread. The drivers documented so far refuse to unregister from inside a callback
//! anyway.
//!
//! The cost of the wait: dropping the value blocks while a call of the closure runs on another
//! thread. A closure that waits for a lock held by the thread dropping the value never returns.

#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// The numbers given to the driver, unique across registries; 0 is never given.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The numbers of the closures whose calls run on this thread, innermost last.
    static CALLING: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// Whether this thread is inside a call of the closure numbered `id`.
fn calling(id: u64) -> bool {
    CALLING.try_with(|c| c.try_borrow().is_ok_and(|ids| ids.contains(&id))).unwrap_or(false)
}

/// Notes on this thread that a call of `id` runs; false if it could not be noted.
fn enter(id: u64) -> bool {
    CALLING
        .try_with(|c| match c.try_borrow_mut() {
            Ok(mut ids) => {
                ids.push(id);
                true
            }
            Err(_) => false,
        })
        .unwrap_or(false)
}

fn leave() {
    let _ = CALLING.try_with(|c| c.try_borrow_mut().map(|mut ids| ids.pop()));
}

/// The listed closures (or the entries holding them) of one kind of callback.
pub(crate) struct Registry<E> {
    live: Mutex<Vec<(u64, Arc<E>)>>,
    /// Signalled each time a call gives its reference back.
    returned: Condvar,
}

impl<E> Registry<E> {
    /// An empty registry, for a `static`.
    pub(crate) const fn new() -> Registry<E> {
        Registry { live: Mutex::new(Vec::new()), returned: Condvar::new() }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<(u64, Arc<E>)>> {
        // Nothing panics while the lock is held (pushes, clones, removals, reference counts),
        // so a poisoned lock still holds consistent data.
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lists `entry` and returns its number, the user data to give the driver. List it before
    /// registering it, so that the first call finds it.
    pub(crate) fn insert(&self, entry: Arc<E>) -> u64 {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        self.lock().push((id, entry));
        id
    }

    /// Takes the entry numbered `id` out: calls from now on find nothing. The caller holds the
    /// registry's reference, and drops it, or waits with it ([`wait_for_calls`](Self::wait_for_calls)).
    pub(crate) fn remove(&self, id: u64) -> Option<Arc<E>> {
        let mut live = self.lock();
        let at = live.iter().position(|(i, _)| *i == id)?;
        Some(live.swap_remove(at).1)
    }

    /// Runs `f` with the entry numbered `id` if it is listed, holding a reference to it until
    /// `f` returns; does nothing otherwise. For the trampoline: `f` must not unwind (it catches
    /// the closure's panic).
    pub(crate) fn call(&self, id: u64, f: impl FnOnce(&E)) {
        let entry = self.lock().iter().find(|(i, _)| *i == id).map(|(_, e)| Arc::clone(e));
        let Some(entry) = entry else { return };
        let noted = enter(id);
        f(&entry);
        if noted {
            leave();
        }
        let live = self.lock();
        // The last reference only if the value was dropped inside this call (see the module's
        // documentation): kept, not dropped on the driver's thread.
        if let Some(last) = Arc::into_inner(entry) {
            std::mem::forget(last);
        }
        drop(live);
        self.returned.notify_all();
    }

    /// Waits until `entry`, numbered `id` and taken out of the registry ([`remove`](Self::remove)),
    /// is referred to by `entry` alone: every call that held it has returned, and none can
    /// start. Returns at once on a thread inside a call of it, which would wait for itself.
    pub(crate) fn wait_for_calls(&self, id: u64, entry: &Arc<E>) {
        if calling(id) {
            return;
        }
        let mut live = self.lock();
        // Calls give their references back under this lock, and signal after: no wake-up is
        // missed between the count and the wait.
        while Arc::strong_count(entry) > 1 {
            live = self.returned.wait(live).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;
    use std::thread::ThreadId;
    use std::time::Duration;

    /// Records the thread it is dropped on.
    struct DropSite(std::sync::mpsc::Sender<ThreadId>);

    impl Drop for DropSite {
        fn drop(&mut self) {
            let _ = self.0.send(std::thread::current().id());
        }
    }

    #[test]
    fn a_call_in_flight_is_waited_for_and_the_entry_dropped_by_the_waiter() {
        static REGISTRY: Registry<DropSite> = Registry::new();
        let (dropped_tx, dropped) = channel();
        let id = REGISTRY.insert(Arc::new(DropSite(dropped_tx)));
        let (entered_tx, entered) = channel();
        let (go_tx, go) = channel::<()>();
        let driver = std::thread::spawn(move || {
            REGISTRY.call(id, |_| {
                let _ = entered_tx.send(());
                let _ = go.recv();
            });
        });
        assert!(entered.recv_timeout(Duration::from_secs(10)).is_ok(), "the call never started");
        let taken = REGISTRY.remove(id);
        assert!(taken.is_some());
        let (waited_tx, waited) = channel();
        let owner = std::thread::spawn(move || {
            if let Some(entry) = taken {
                REGISTRY.wait_for_calls(id, &entry);
                let _ = waited_tx.send(std::thread::current().id());
            }
        });
        assert!(
            waited.recv_timeout(Duration::from_millis(200)).is_err(),
            "the wait ended while a call was running"
        );
        let _ = go_tx.send(());
        let owner_id = owner.thread().id();
        assert_eq!(waited.recv_timeout(Duration::from_secs(10)).ok(), Some(owner_id));
        assert!(owner.join().is_ok() && driver.join().is_ok());
        assert_eq!(dropped.try_recv().ok(), Some(owner_id), "dropped by the owner, once");
        // A late call finds nothing.
        let mut ran = false;
        REGISTRY.call(id, |_| ran = true);
        assert!(!ran);
    }

    #[test]
    fn an_entry_dropped_inside_its_own_call_is_kept_not_dropped_there() {
        static REGISTRY: Registry<DropSite> = Registry::new();
        let (dropped_tx, dropped) = channel();
        let id = REGISTRY.insert(Arc::new(DropSite(dropped_tx)));
        let (done_tx, done) = channel();
        let driver = std::thread::spawn(move || {
            REGISTRY.call(id, |_| {
                if let Some(entry) = REGISTRY.remove(id) {
                    REGISTRY.wait_for_calls(id, &entry); // returns at once: this call is its own
                }
            });
            let _ = done_tx.send(());
        });
        assert!(done.recv_timeout(Duration::from_secs(10)).is_ok(), "the call waited for itself");
        assert!(driver.join().is_ok());
        assert!(dropped.try_recv().is_err(), "the entry was dropped on the calling thread");
    }
}
