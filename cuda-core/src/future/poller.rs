//! The poller: one thread for the process that queries the events of pending futures in
//! batches and wakes their tasks, and the free list of marker events it recycles.

#![forbid(unsafe_code)]

use super::slot::{Checked, Slot};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::event::{Event, EventFlags};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// How long the poller keeps querying without a pause after the last completion or new
/// future, in nanoseconds ([`PollerConfig::spin`]).
static SPIN_NS: AtomicU64 = AtomicU64::new(5_000_000);
/// The longest pause between rounds once the spin is over ([`PollerConfig::max_sleep`]).
static MAX_SLEEP_NS: AtomicU64 = AtomicU64::new(200_000);
/// How often slots completed by host functions are queried for errors.
const ERROR_WATCH: Duration = Duration::from_millis(1);
/// Marker events kept for reuse, at most.
const FREE_EVENTS: usize = 4096;

/// How the poller thread trades CPU time for wake-up latency (see the module documentation
/// of [`future`](super)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollerConfig {
    /// How long the poller queries without pausing (it yields its core between rounds) after
    /// the last completion or new future: within it, a task is woken a few microseconds after
    /// its GPU work completes. Default 5 ms.
    pub spin: Duration,
    /// The longest pause between rounds after the spin (pauses double from 10 µs up to it):
    /// the wake-up latency of work that runs longer than the spin. Default 200 µs.
    pub max_sleep: Duration,
}

impl Default for PollerConfig {
    fn default() -> PollerConfig {
        PollerConfig { spin: Duration::from_millis(5), max_sleep: Duration::from_micros(200) }
    }
}

/// Sets how the poller thread spins and sleeps, for the rounds from now on.
pub fn set_poller_config(config: PollerConfig) {
    SPIN_NS.store(nanos(config.spin), Ordering::Relaxed);
    MAX_SLEEP_NS.store(nanos(config.max_sleep).max(1_000), Ordering::Relaxed);
}

/// How the poller thread spins and sleeps now.
pub fn poller_config() -> PollerConfig {
    PollerConfig {
        spin: Duration::from_nanos(SPIN_NS.load(Ordering::Relaxed)),
        max_sleep: Duration::from_nanos(MAX_SLEEP_NS.load(Ordering::Relaxed)),
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

struct Incoming {
    slots: Vec<Arc<Slot>>,
    /// Whether the poller waits on the condition variable (a new slot must signal it).
    sleeping: bool,
}

/// The poller thread's inbox and the free marker events.
pub(crate) struct Poller {
    incoming: Mutex<Incoming>,
    signal: Condvar,
    free: Mutex<Vec<Event>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics under these locks (pushes, pops, swaps).
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Poller {
    /// The process's poller, its thread started on first use.
    pub(crate) fn get() -> Result<&'static Poller> {
        static POLLER: OnceLock<std::result::Result<&'static Poller, String>> = OnceLock::new();
        POLLER.get_or_init(start).as_ref().copied().map_err(|why| Error::invalid("future", why.clone()))
    }

    /// A marker event of `ctx` (without timing), reused when one is free.
    pub(crate) fn event(&self, ctx: &Context) -> Result<Event> {
        {
            let mut free = lock(&self.free);
            if let Some(at) = free.iter().rposition(|e| e.context() == ctx) {
                return Ok(free.swap_remove(at));
            }
        }
        Event::new(ctx, EventFlags::DISABLE_TIMING)
    }

    /// Keeps `event` for reuse. Reusing one still in flight is sound: only the poller queries
    /// marker events, and a new recording replaces what the query reads. Only events of
    /// primary contexts are kept: a kept event holds its context, and a created context must
    /// be destroyed when its user drops it.
    pub(crate) fn recycle(&self, event: Event) {
        if !event.context().is_primary() {
            return;
        }
        let mut free = lock(&self.free);
        if free.len() < FREE_EVENTS {
            free.push(event);
        }
    }

    /// Hands `slot` to the poller thread.
    pub(crate) fn register(&self, slot: Arc<Slot>) {
        let mut inbox = lock(&self.incoming);
        inbox.slots.push(slot);
        if inbox.sleeping {
            inbox.sleeping = false;
            self.signal.notify_one();
        }
    }

    /// The poller thread: queries every pending slot each round, takes in new ones, and
    /// pauses as [`PollerConfig`] says when nothing happens.
    fn run(&self) {
        let mut active: Vec<Arc<Slot>> = Vec::new();
        let mut finished: Vec<Event> = Vec::new();
        let mut last_progress = Instant::now();
        let mut last_watch = Instant::now();
        let mut pause = Duration::from_micros(10);
        loop {
            let arrived = self.take_incoming(&mut active);
            let watch = last_watch.elapsed() >= ERROR_WATCH;
            if watch {
                last_watch = Instant::now();
            }
            let before = active.len();
            active.retain(|slot| {
                let (checked, event) = slot.check(watch);
                finished.extend(event);
                checked == Checked::Pending
            });
            if !finished.is_empty() {
                // As `recycle`: events of created contexts, and those beyond the free list's
                // room, are destroyed here, outside its lock.
                finished.retain(|e| e.context().is_primary());
                let mut free = lock(&self.free);
                let keep = FREE_EVENTS.saturating_sub(free.len()).min(finished.len());
                free.extend(finished.drain(..keep));
                drop(free);
                finished.clear();
            }
            if arrived || active.len() < before {
                last_progress = Instant::now();
                pause = Duration::from_micros(10);
                std::thread::yield_now();
                continue;
            }
            if last_progress.elapsed() < Duration::from_nanos(SPIN_NS.load(Ordering::Relaxed)) {
                std::thread::yield_now();
                continue;
            }
            self.sleep(pause);
            let max = Duration::from_nanos(MAX_SLEEP_NS.load(Ordering::Relaxed));
            pause = (pause * 2).min(max);
        }
    }

    /// Moves the new slots into `active`, waiting for one while there is nothing to do;
    /// whether any arrived.
    fn take_incoming(&self, active: &mut Vec<Arc<Slot>>) -> bool {
        let mut inbox = lock(&self.incoming);
        while active.is_empty() && inbox.slots.is_empty() {
            inbox.sleeping = true;
            inbox = self.signal.wait(inbox).unwrap_or_else(PoisonError::into_inner);
        }
        inbox.sleeping = false;
        let arrived = !inbox.slots.is_empty();
        active.append(&mut inbox.slots);
        arrived
    }

    /// Pauses for `pause`, or until a new slot arrives.
    fn sleep(&self, pause: Duration) {
        let mut inbox = lock(&self.incoming);
        if !inbox.slots.is_empty() {
            return;
        }
        inbox.sleeping = true;
        let (mut inbox, _) = self.signal.wait_timeout(inbox, pause).unwrap_or_else(PoisonError::into_inner);
        inbox.sleeping = false;
    }
}

fn start() -> std::result::Result<&'static Poller, String> {
    let poller: &'static Poller = Box::leak(Box::new(Poller {
        incoming: Mutex::new(Incoming { slots: Vec::new(), sleeping: false }),
        signal: Condvar::new(),
        free: Mutex::new(Vec::new()),
    }));
    std::thread::Builder::new()
        .name("cuda-core-poller".into())
        .spawn(move || poller.run())
        .map_err(|e| format!("could not start the thread that polls the futures' events: {e}"))?;
    Ok(poller)
}
