//! The futures of `cuhost::future` against the simulated driver, with the happens-before
//! checker watching: they resolve (the poller's queries drive the simulator, which runs queued
//! work when the host queries it), with the data the copies wrote, in both waking modes; a
//! future dropped while its copy runs leaves the pinned staging memory to the pool only after
//! the copy; a waker that panics resolves its future with the error and the poller goes on.
//!
//! The executor is a few lines of std (a thread that parks), so that these tests need no
//! crate besides the simulator; the GPU suite (`tests/tests/async_futures.rs`) runs the same
//! futures under tokio, smol and `futures::executor`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "harness/sim.rs"]
#[allow(dead_code)]
mod sim;

use cuhost::future::{Waking, set_waking};
use cuhost::pool::hooks::{self, HookEvent, MemoryHook};
use cuhost::{Context, Device, DeviceBuffer, Error, Event, EventFlags, PinnedBuffer, Stream, StreamFlags};
use sim::Sim;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::{Duration, Instant};

/// The waking mode is set for the whole process: the tests take turns.
fn serial() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    let turn = TURN.lock().unwrap_or_else(PoisonError::into_inner);
    Sim::get();
    turn
}

/// Wakes the thread that waits in [`block_on`] or [`join_all`].
struct Unpark {
    thread: std::thread::Thread,
    woken: AtomicBool,
    count: AtomicUsize,
}

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.woken.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

fn unpark() -> Arc<Unpark> {
    Arc::new(Unpark {
        thread: std::thread::current(),
        woken: AtomicBool::new(false),
        count: AtomicUsize::new(0),
    })
}

/// Polls every future each time the thread is woken, until all are ready (ten seconds at
/// most: a future that never wakes its task fails the test instead of hanging it).
fn join_all<F: Future + Unpin>(mut futures: Vec<F>) -> Vec<F::Output> {
    let signal = unpark();
    let waker = Waker::from(Arc::clone(&signal));
    let mut cx = TaskContext::from_waker(&waker);
    let mut out: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        signal.woken.store(false, Ordering::Release);
        for (f, slot) in futures.iter_mut().zip(&mut out) {
            if slot.is_none() {
                if let Poll::Ready(v) = Pin::new(f).poll(&mut cx) {
                    *slot = Some(v);
                }
            }
        }
        if out.iter().all(Option::is_some) {
            return out.into_iter().map(Option::unwrap).collect();
        }
        while !signal.woken.load(Ordering::Acquire) {
            assert!(Instant::now() < deadline, "a future was never woken");
            std::thread::park_timeout(Duration::from_millis(100));
        }
    }
}

fn block_on<F: Future + Unpin>(future: F) -> F::Output {
    join_all(vec![future]).pop().unwrap()
}

fn setup() -> (Context, Vec<Stream>) {
    let ctx = Context::primary(&Device::get(0).unwrap()).unwrap();
    ctx.bind_to_thread().unwrap();
    let streams = (0..8).map(|_| Stream::new(&ctx, StreamFlags::NON_BLOCKING).unwrap()).collect();
    (ctx, streams)
}

fn assert_no_reports() {
    let (bugs, races) = Sim::get().counts();
    assert_eq!(bugs, [0, 0, 0], "the checker reported:\n{}", Sim::get().reports());
    assert_eq!(races, 0, "the checker reported races:\n{}", Sim::get().reports());
}

/// A buffer of `len` elements, each `value`, written on `stream`.
fn filled(stream: &Stream, len: usize, value: u32) -> DeviceBuffer<u32> {
    let mut b = DeviceBuffer::<u32>::new(stream, len).unwrap();
    b.view_mut().memset_d32_async(value, stream).unwrap();
    b
}

fn copies_resolve_to_the_data_over_eight_streams(waking: Waking, count: usize) {
    set_waking(waking);
    (Sim::get().reset)(11);
    let (_ctx, streams) = setup();
    // Each buffer is written on its own stream and read back on another: the copy's first
    // use waits for the write (the stream rule).
    let buffers: Vec<_> =
        (0..count).map(|i| filled(&streams[i % 8], 64, u32::try_from(i).unwrap())).collect();
    let futures: Vec<_> =
        buffers.iter().enumerate().map(|(i, b)| b.to_vec_async(&streams[(i + 1) % 8]).unwrap()).collect();
    for (i, v) in join_all(futures).into_iter().enumerate() {
        assert_eq!(v.unwrap(), vec![u32::try_from(i).unwrap(); 64], "future {i}");
    }
    let done: Vec<_> = streams.iter().map(|s| s.synchronize_async().unwrap()).collect();
    assert!(join_all(done).into_iter().all(|r| r.is_ok()));
    drop(buffers);
    set_waking(Waking::Poller);
    assert_no_reports();
}

#[test]
fn a_thousand_copies_over_eight_streams_resolve_to_their_data_with_the_poller() {
    let _turn = serial();
    copies_resolve_to_the_data_over_eight_streams(Waking::Poller, 1000);
}

#[test]
fn copies_resolve_to_their_data_with_host_functions() {
    let _turn = serial();
    copies_resolve_to_the_data_over_eight_streams(Waking::HostFunc, 200);
}

#[test]
fn a_pinned_buffer_filled_by_a_future_reads_the_copy() {
    let _turn = serial();
    (Sim::get().reset)(12);
    let (_ctx, streams) = setup();
    let b = filled(&streams[0], 256, 7);
    let mut host = PinnedBuffer::<u32>::new(256).unwrap();
    let slice = block_on(b.to_pinned_async(&mut host, &streams[1]).unwrap()).unwrap();
    assert!(slice.iter().all(|&x| x == 7));
    drop(slice);
    let e = cuhost::Event::new(&_ctx, cuhost::EventFlags::DISABLE_TIMING).unwrap();
    e.record(&streams[2]).unwrap();
    assert!(block_on(e.synchronize_async().unwrap()).is_ok());
    assert_no_reports();
}

/// Counts the pinned blocks a pool hands out (the pool tells the simulator of each new owner
/// itself).
struct NewOwners(Rc<std::cell::Cell<Vec<u64>>>);

impl MemoryHook for NewOwners {
    fn name(&self) -> &str {
        "sim-new-owners"
    }

    fn malloc_postprocess(&self, event: &HookEvent) {
        let mut seen = self.0.take();
        seen.push(event.mem_ptr);
        self.0.set(seen);
    }
}

#[test]
fn a_copy_future_dropped_while_pending_keeps_its_staging_memory_until_the_copy() {
    let _turn = serial();
    (Sim::get().reset)(13);
    let seen = Rc::new(std::cell::Cell::new(Vec::new()));
    let _hook = hooks::install(Rc::new(NewOwners(Rc::clone(&seen)))).unwrap();
    let (_ctx, streams) = setup();
    for round in 0..50u32 {
        let b = filled(&streams[0], 256, round);
        // The copy is queued, the future dropped before the simulator ran anything.
        let future = b.to_vec_async(&streams[1]).unwrap();
        drop(future);
        // A pinned block of the same size from the pool, written by the host at once: if it
        // were the staging block and the copy still ran, the checker would see the race.
        let mut next = PinnedBuffer::<u32>::new(256).unwrap();
        let mut slice = next.as_mut_slice().unwrap();
        slice.fill(round);
        drop(slice);
        drop(next);
        drop(b);
    }
    let _ = streams.iter().map(Stream::synchronize).collect::<Result<Vec<_>, _>>();
    assert!(!seen.take().is_empty(), "the pool's hook saw no pinned block handed out");
    assert_no_reports();
}

/// H3: a future over a user's event that is forgotten (`mem::forget`, so it never cancels
/// itself) is cancelled by the event's drop: the poller never queries the destroyed event.
/// Taken out, the poller queries events destroyed before it got to them (a use after free
/// with a real driver), which the simulator counts.
#[test]
fn a_forgotten_event_future_is_never_polled_after_its_event_is_dropped() {
    let _turn = serial();
    (Sim::get().reset)(17);
    let (ctx, streams) = setup();
    let before = (Sim::get().dead_event_queries)();
    for _ in 0..200 {
        let event = Event::new(&ctx, EventFlags::DISABLE_TIMING).unwrap();
        event.record(&streams[0]).unwrap();
        std::mem::forget(event.synchronize_async().unwrap());
        drop(event);
    }
    // Long enough for the poller to go through its slots a few times.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!((Sim::get().dead_event_queries)(), before, "the poller queried a destroyed event");
    streams[0].synchronize().unwrap();
    assert_no_reports();
}

/// L6: with a checking driver the pool's hooks are looked at for every thread; a pinned buffer
/// kept in a thread-local, dropped by that thread's teardown after the hooks' own thread-local
/// is gone, is given back without them. Before, the look-up panicked in a thread-local's
/// destructor, which aborts the process.
#[test]
fn a_buffer_dropped_in_a_threads_teardown_meets_no_hooks() {
    thread_local! {
        static KEPT: std::cell::RefCell<Option<PinnedBuffer<u32>>> = const { std::cell::RefCell::new(None) };
    }
    let _turn = serial();
    let (_ctx, _streams) = setup();
    std::thread::spawn(|| {
        // KEPT's destructor is registered first, so it runs after that of the hooks' list,
        // which the allocation below registers.
        KEPT.with(|k| k.borrow_mut().take());
        let buffer = PinnedBuffer::<u32>::new(64).unwrap();
        KEPT.with(|k| *k.borrow_mut() = Some(buffer));
    })
    .join()
    .unwrap();
}

/// A waker whose first wake panics.
struct Panicky(AtomicUsize);

impl Wake for Panicky {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.0.fetch_add(1, Ordering::Relaxed) == 0 {
            panic!("this waker panics");
        }
    }
}

fn a_panicking_waker_resolves_its_future_with_the_error(waking: Waking) {
    set_waking(waking);
    (Sim::get().reset)(14);
    let (_ctx, streams) = setup();
    let b = filled(&streams[0], 64, 3);
    // The stream waits at a gate until the future was polled once, so that it is pending then.
    let (open, gate) = std::sync::mpsc::channel::<()>();
    streams[0]
        .launch_host_func(move || {
            let _ = gate.recv_timeout(Duration::from_secs(10));
        })
        .unwrap();
    let mut future = streams[0].synchronize_async().unwrap();
    let panicky = Arc::new(Panicky(AtomicUsize::new(0)));
    let waker = Waker::from(Arc::clone(&panicky));
    assert!(Pin::new(&mut future).poll(&mut TaskContext::from_waker(&waker)).is_pending());
    open.send(()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !future.is_done() {
        assert!(Instant::now() < deadline, "the future never resolved");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(panicky.0.load(Ordering::Relaxed), 1, "the waker was called once");
    match block_on(future) {
        Err(Error::CallbackPanicked { message }) => {
            assert!(message.contains("this waker panics"), "{message}")
        }
        other => panic!("expected the waker's panic, got {other:?}"),
    }
    // The poller (or the driver's thread) goes on: later futures resolve.
    assert_eq!(block_on(b.to_vec_async(&streams[1]).unwrap()).unwrap(), vec![3; 64]);
    set_waking(Waking::Poller);
    assert_no_reports();
}

#[test]
fn a_panicking_waker_resolves_its_future_with_the_error_on_the_poller() {
    let _turn = serial();
    a_panicking_waker_resolves_its_future_with_the_error(Waking::Poller);
}

#[test]
fn a_panicking_waker_resolves_its_future_with_the_error_on_a_host_function() {
    let _turn = serial();
    a_panicking_waker_resolves_its_future_with_the_error(Waking::HostFunc);
}

#[test]
fn a_future_is_refused_on_a_capturing_stream_and_polled_twice_is_an_error() {
    let _turn = serial();
    (Sim::get().reset)(15);
    let (_ctx, streams) = setup();
    let b = filled(&streams[0], 16, 1);
    // SAFETY: nothing is captured (both calls are refused) and the graph is never launched.
    let capture = streams[3].begin_capture(cuhost::graph::CaptureMode::Relaxed).unwrap();
    assert!(matches!(streams[3].synchronize_async(), Err(Error::InvalidArgument { .. })));
    assert!(matches!(b.to_vec_async(&streams[3]), Err(Error::InvalidArgument { .. })));
    drop(capture.end().unwrap());
    let mut done = streams[0].synchronize_async().unwrap();
    assert!(block_on(&mut done).is_ok());
    let waker = Waker::from(unpark());
    assert!(matches!(
        Pin::new(&mut done).poll(&mut TaskContext::from_waker(&waker)),
        Poll::Ready(Err(Error::InvalidArgument { .. }))
    ));
    // L7: the copy of an empty view resolves once too.
    let empty = b.slice(0..0).unwrap();
    let mut nothing = empty.to_vec_async(&streams[0]).unwrap();
    assert!(block_on(&mut nothing).unwrap().is_empty());
    assert!(matches!(
        Pin::new(&mut nothing).poll(&mut TaskContext::from_waker(&waker)),
        Poll::Ready(Err(Error::InvalidArgument { .. }))
    ));
    assert_no_reports();
}
