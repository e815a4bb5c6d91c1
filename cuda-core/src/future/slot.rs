//! [`Slot`]: what a pending future and whatever completes it (the poller thread, or a host
//! function) share: the event it waits for, the result once known, the task's waker.

use crate::error::{Error, Result};
use crate::event::Event;
use cuhost_driver_sys as sys;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context as TaskContext, Poll, Waker};

/// The event a slot waits for.
#[derive(Debug)]
enum Target {
    /// A marker event the slot owns (recycled by the poller once it is done with it).
    Owned(Event),
    /// A user's event, borrowed by the future: queried only until the slot is cancelled (the
    /// query runs under the slot's lock), which the future's drop does, and the event's drop
    /// (or `into_raw`) before the event goes, for a future that was forgotten
    /// ([`Watchers`]).
    Borrowed(sys::CUevent),
    /// Handed back, or never queried again.
    Gone,
}

#[derive(Debug)]
struct State {
    target: Target,
    result: Option<Result<()>>,
    waker: Option<Waker>,
    /// The future was dropped: nothing waits for the result any more.
    cancelled: bool,
    /// A completer is calling the waker it took (its panic would still change the result).
    waking: bool,
}

/// How a slot is completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Completer {
    /// The poller queries the event every round.
    Poller,
    /// A host function completes the slot; the poller queries the event (recorded after the
    /// host function) now and then only, to resolve the slot with the context's error when the
    /// driver will not run the host function any more.
    HostFunc,
}

/// The state shared between a future and what completes it.
#[derive(Debug)]
pub(crate) struct Slot {
    state: Mutex<State>,
    pub(crate) completer: Completer,
}

// SAFETY: the raw event of `Target::Borrowed` is only queried under the lock, until the slot
// is cancelled, which happens before the event is destroyed; `Event` and `Waker` are Send +
// Sync.
unsafe impl Send for Slot {}
// SAFETY: as above; every field is behind the mutex.
unsafe impl Sync for Slot {}

/// What [`Slot::check`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Checked {
    /// Still pending: check again later.
    Pending,
    /// Done with: completed or cancelled. The owned event, if any, is handed back.
    Finished,
}

impl Slot {
    /// A slot over an event it owns.
    pub(crate) fn owned(event: Event, completer: Completer) -> Slot {
        Slot::with(Target::Owned(event), completer)
    }

    /// A slot over a user's event that the future borrows.
    pub(crate) fn borrowed(event: &Event) -> Slot {
        Slot::with(Target::Borrowed(event.as_raw()), Completer::Poller)
    }

    fn with(target: Target, completer: Completer) -> Slot {
        Slot {
            state: Mutex::new(State { target, result: None, waker: None, cancelled: false, waking: false }),
            completer,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing that may panic runs under the lock (wakers are called after it is released).
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The future's poll: the result once known (taken: a second poll after it reads an
    /// error), else the waker is kept for the completer.
    pub(crate) fn poll(&self, cx: &mut TaskContext<'_>) -> Poll<Result<()>> {
        {
            let mut s = self.lock();
            if let Some(ready) = take_result(&mut s) {
                return ready;
            }
            if s.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                return Poll::Pending;
            }
        }
        // A waker's clone and drop may run any code (even code that looks at this slot): both
        // run outside the lock, which only swaps them.
        let waker = cx.waker().clone();
        let old = {
            let mut s = self.lock();
            if let Some(ready) = take_result(&mut s) {
                return ready;
            }
            s.waker.replace(waker)
        };
        drop(old);
        Poll::Pending
    }

    /// Whether a result is known and the waker, if one was called, has returned: a poll now
    /// resolves, with what the waker's panic made of the result.
    pub(crate) fn is_resolved(&self) -> bool {
        let s = self.lock();
        s.result.is_some() && !s.waking
    }

    /// The future is dropped: its waker goes, and the completer stops querying a borrowed
    /// event. Owned memory the future held is released by its own `Drop`, which follows the
    /// stream rule; nothing here waits.
    pub(crate) fn cancel(&self) {
        let waker = {
            let mut s = self.lock();
            s.cancelled = true;
            if matches!(s.target, Target::Borrowed(_)) {
                s.target = Target::Gone;
            }
            s.waker.take()
        };
        drop(waker);
    }

    /// Resolves the slot with `result` (unless it already has one) and wakes the task. For the
    /// host function: calls no CUDA, drops nothing that does.
    pub(crate) fn complete(&self, result: Result<()>) {
        let waker = {
            let mut s = self.lock();
            if s.result.is_some() || s.cancelled {
                return;
            }
            s.result = Some(result);
            s.waking = s.waker.is_some();
            s.waker.take()
        };
        self.wake(waker);
    }

    /// Calls the task's waker; a waker that panics resolves the future with
    /// [`Error::CallbackPanicked`] instead (its task may still poll it), and the caller (the
    /// poller thread or the driver's) goes on.
    fn wake(&self, waker: Option<Waker>) {
        let Some(waker) = waker else { return };
        // The payload is read and forgotten (`panic_message`), never dropped: its drop could
        // panic too, here on the poller's or the driver's thread.
        let panicked = catch_unwind(AssertUnwindSafe(move || waker.wake()))
            .err()
            .map(|panic| format!("the task's waker panicked: {}", crate::error::panic_message(panic)));
        let mut s = self.lock();
        s.waking = false;
        // Unless a poll took the result meanwhile: then the panic has nowhere to go.
        if let (Some(message), true) = (panicked, s.result.is_some()) {
            s.result = Some(Err(Error::CallbackPanicked { message }));
        }
    }

    /// For the poller: queries the event (when `query` is set, or the slot is completed by
    /// the poller) and resolves the slot when it is done or failed. Returns the slot's owned
    /// event when the slot is finished with, for reuse: never left in the slot, so that the
    /// last reference (perhaps a host function's, on the driver's thread) drops no event.
    pub(crate) fn check(&self, query: bool) -> (Checked, Option<Event>) {
        let mut s = self.lock();
        if s.cancelled || s.result.is_some() {
            return (Checked::Finished, take_owned(&mut s.target));
        }
        if self.completer == Completer::HostFunc && !query {
            return (Checked::Pending, None);
        }
        let status = match &s.target {
            // The lock is not held across the query: a driver may run host functions inside
            // it (a simulated one does), and this slot's own would wait for the lock. Only
            // the poller takes the event out, so it stays alive meanwhile.
            Target::Owned(e) => {
                let raw = e.as_raw();
                drop(s);
                // SAFETY: the event is alive while the slot holds it (see above).
                let status = unsafe { driver!(status: cuEventQuery(raw)) };
                s = self.lock();
                status
            }
            // SAFETY: a borrowed event is alive until the slot is cancelled (by the future's
            // drop, or by the event's drop or `into_raw` for a forgotten future), and it is
            // not: checked under this lock, which the query holds.
            Target::Borrowed(raw) => unsafe { driver!(status: cuEventQuery(*raw)) },
            Target::Gone => return (Checked::Finished, None),
        };
        if status.is(sys::CUresult::CUDA_ERROR_NOT_READY) && !s.cancelled && s.result.is_none() {
            return (Checked::Pending, None);
        }
        let waker = if s.cancelled || s.result.is_some() {
            None
        } else {
            // Done (success), or the work or the context failed: the status says which.
            s.result = Some(status.check());
            s.waking = s.waker.is_some();
            s.waker.take()
        };
        let event = take_owned(&mut s.target);
        drop(s);
        self.wake(waker);
        (Checked::Finished, event)
    }

    /// The owned event, raw, while the slot holds it.
    pub(crate) fn event_raw(&self) -> Option<sys::CUevent> {
        match &self.lock().target {
            Target::Owned(e) => Some(e.as_raw()),
            _ => None,
        }
    }

    /// Hands back the owned event of a slot the completer never took (registration failed).
    pub(crate) fn take_event(&self) -> Option<Event> {
        take_owned(&mut self.lock().target)
    }
}

/// The slots of the futures that watch a user's event ([`Event::synchronize_async`]), kept by
/// the event, which cancels them before it is destroyed or given up: a future forgotten with
/// `mem::forget` never cancels its slot, and the poller would go on querying the event.
#[derive(Debug, Default)]
pub(crate) struct Watchers(Mutex<Vec<Weak<Slot>>>);

impl Watchers {
    fn lock(&self) -> MutexGuard<'_, Vec<Weak<Slot>>> {
        // Nothing panics under the lock (pushes, retains and a swap).
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `slot`, which watches the event, forgetting slots no one holds any more.
    pub(crate) fn add(&self, slot: &Arc<Slot>) {
        let mut slots = self.lock();
        slots.retain(|w| w.strong_count() > 0);
        slots.push(Arc::downgrade(slot));
    }

    /// Cancels every slot that watches the event: once this returns, none queries it again.
    pub(crate) fn cancel_all(&self) {
        let slots = std::mem::take(&mut *self.lock());
        for slot in slots.iter().filter_map(Weak::upgrade) {
            slot.cancel();
        }
    }
}

/// The result for a poll, once known: taken (a later poll is refused), or the refusal.
fn take_result(s: &mut State) -> Option<Poll<Result<()>>> {
    if s.cancelled {
        return Some(Poll::Ready(Err(polled_after_completion())));
    }
    let result = s.result.take()?;
    // Ready once: later polls are refused.
    s.cancelled = true;
    Some(Poll::Ready(result))
}

fn take_owned(target: &mut Target) -> Option<Event> {
    match std::mem::replace(target, Target::Gone) {
        Target::Owned(e) => Some(e),
        _ => None,
    }
}

#[cold]
pub(crate) fn polled_after_completion() -> Error {
    Error::invalid("future", "the future was polled after it completed; poll each future to completion once")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    struct Count(AtomicUsize, bool);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
            if self.1 {
                std::panic::panic_any("the waker panics");
            }
        }
    }

    fn waker(panics: bool) -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0), panics));
        (Arc::clone(&count), Waker::from(count))
    }

    /// A slot that a host function completes, with no event (the tests call no driver).
    fn slot() -> Slot {
        Slot::with(Target::Gone, Completer::HostFunc)
    }

    #[test]
    fn a_completed_slot_wakes_its_task_once_and_resolves_once() {
        let s = slot();
        let (count, w) = waker(false);
        let mut cx = TaskContext::from_waker(&w);
        assert!(s.poll(&mut cx).is_pending());
        assert!(s.poll(&mut cx).is_pending(), "a second poll keeps the same waker");
        s.complete(Ok(()));
        s.complete(Err(Error::invalid("test", "a second completion is ignored")));
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        assert!(matches!(s.poll(&mut cx), Poll::Ready(Ok(()))));
        assert!(matches!(s.poll(&mut cx), Poll::Ready(Err(Error::InvalidArgument { .. }))));
    }

    #[test]
    fn an_error_is_the_result() {
        let s = slot();
        s.complete(Err(Error::invalid("test", "the work failed")));
        let (_, w) = waker(false);
        assert!(matches!(
            s.poll(&mut TaskContext::from_waker(&w)),
            Poll::Ready(Err(Error::InvalidArgument { .. }))
        ));
    }

    #[test]
    fn a_panicking_waker_resolves_the_slot_with_the_panic() {
        let s = slot();
        let (count, w) = waker(true);
        assert!(s.poll(&mut TaskContext::from_waker(&w)).is_pending());
        s.complete(Ok(())); // the panic is caught here
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        let (_, quiet) = waker(false);
        match s.poll(&mut TaskContext::from_waker(&quiet)) {
            Poll::Ready(Err(Error::CallbackPanicked { message })) => {
                assert!(message.contains("the waker panics"), "{message}")
            }
            other => panic!("expected the waker's panic, got {other:?}"),
        }
    }

    #[test]
    fn a_cancelled_slot_is_finished_and_wakes_nobody() {
        let s = slot();
        let (count, w) = waker(false);
        assert!(s.poll(&mut TaskContext::from_waker(&w)).is_pending());
        s.cancel();
        assert_eq!(s.check(false).0, Checked::Finished);
        s.complete(Ok(()));
        assert_eq!(count.0.load(Ordering::Relaxed), 0);
    }

    /// L2: a waker whose clone and drop look at the slot (here: whether it is resolved) may be
    /// given to a poll: neither runs under the slot's lock, which would deadlock.
    #[test]
    fn a_wakers_clone_and_drop_run_outside_the_slots_lock() {
        use std::task::{RawWaker, RawWakerVTable};
        thread_local! {
            static SLOT: std::cell::Cell<*const Slot> = const { std::cell::Cell::new(std::ptr::null()) };
        }
        fn look() {
            // SAFETY: the slot outlives every waker made in the test's thread.
            SLOT.with(|p| unsafe { (*p.get()).is_resolved() });
        }
        fn clone(data: *const ()) -> RawWaker {
            look();
            RawWaker::new(data, &VTABLE)
        }
        fn noop(_: *const ()) {}
        fn drop_waker(_: *const ()) {
            look();
        }
        static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, noop, noop, drop_waker);
        let (done, waited) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let s = slot();
            SLOT.with(|p| p.set(&s));
            for data in [1usize, 2] {
                // SAFETY: the vtable's functions ignore the data pointer.
                let w = unsafe { Waker::from_raw(RawWaker::new(data as *const (), &VTABLE)) };
                // The second poll replaces the first waker (another data pointer): a drop.
                assert!(s.poll(&mut TaskContext::from_waker(&w)).is_pending());
            }
            s.cancel();
            let _ = done.send(());
        });
        assert!(waited.recv_timeout(std::time::Duration::from_secs(10)).is_ok(), "a poll deadlocked");
    }

    #[test]
    fn a_host_function_slot_is_not_queried_between_error_watches() {
        let s = slot();
        assert_eq!(s.check(false).0, Checked::Pending);
        s.complete(Ok(()));
        assert_eq!(s.check(false).0, Checked::Finished);
    }
}
