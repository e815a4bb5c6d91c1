//! The futures of `cuhost::future` (feature `async`) under four executors: tokio
//! (multi-thread and current-thread), async-executor (smol's) and `futures::executor`.
//!
//! Each executor runs 1,000 concurrent requests over 8 streams (a kernel fills a buffer, the
//! future copies it back) and checks every answer, in both waking modes. Then: a copy future
//! dropped while its copy waits behind a long kernel leaves its pinned staging block to the
//! pool only after the copy (the pool's hooks see which block each allocation got), and a
//! pinned buffer whose fill future was dropped still waits for the copy before it is read; a
//! waker that panics resolves its future with the error. A fault poisons the context for the
//! rest of the process, so the test that provokes one runs in a child process.

use cuda_tests::{TestResult, device_zero, ensure, ensure_eq, gpu};
use cuhost::future::{Waking, set_waking};
use cuhost::pool::hooks::{self, HookEvent, MemoryHook, MemoryKind};
use cuhost::{
    Context, DeviceBuffer, Error, LaunchConfig, Module, PinnedBuffer, Result as CudaResult, Stream,
    StreamFlags,
};
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context as TaskContext, Wake, Waker};
use std::time::{Duration, Instant};

#[path = "kernels/mod.rs"]
mod kernels;

/// Set in the environment of the child process that provokes the fault.
const CHILD_ENV: &str = "CUDA_CORE_ASYNC_FAULT_CHILD";

fn main() {
    if std::env::var(CHILD_ENV).is_ok() {
        let code = match fault_child() {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("async fault child: {}", e.message().unwrap_or("failed"));
                1
            }
        };
        std::process::exit(code);
    }
    cuda_tests::run(&[
        gpu("a_thousand_futures_over_eight_streams_under_tokio_multi_thread", tokio_multi_thread),
        gpu("a_thousand_futures_over_eight_streams_under_tokio_current_thread", tokio_current_thread),
        gpu("a_thousand_futures_over_eight_streams_under_async_executor", async_executor),
        gpu("a_thousand_futures_over_eight_streams_under_futures_block_on", futures_block_on),
        gpu("a_dropped_copy_future_keeps_its_staging_block_until_the_copy", dropped_copy_keeps_staging),
        gpu(
            "a_dropped_fill_future_leaves_the_copy_recorded_on_the_pinned_buffer",
            dropped_fill_is_waited_for,
        ),
        gpu("a_panicking_waker_resolves_its_future_with_the_error", panicking_waker),
        gpu("a_graph_launch_and_an_event_resolve", graph_and_event),
        gpu("a_fault_resolves_every_pending_future_with_the_error", fault),
    ]);
}

/// The waking mode is set for the whole process: the tests take turns.
fn serial() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What every request needs: the context, 8 streams, the kernel.
struct Service {
    ctx: Context,
    streams: Vec<Stream>,
    module: Arc<Module>,
}

impl Service {
    fn new() -> CudaResult<Arc<Service>> {
        let (_, ctx, _) = device_zero()?;
        let streams =
            (0..8).map(|_| Stream::new(&ctx, StreamFlags::NON_BLOCKING)).collect::<CudaResult<Vec<_>>>()?;
        let module = Arc::new(Module::from_ptx(&ctx, kernels::SPIN_PTX)?);
        Ok(Arc::new(Service { ctx, streams, module }))
    }

    /// Request `i`: a buffer of 256 elements filled with `i` by the kernel after `ns`
    /// nanoseconds, on stream `i % 8`, and the future of its copy to the host.
    async fn request(&self, i: u32, ns: u64) -> CudaResult<Vec<u32>> {
        self.ctx.bind_to_thread()?;
        let stream = &self.streams[i as usize % self.streams.len()];
        let n = 256u32;
        let mut out = DeviceBuffer::<u32>::new(stream, n as usize)?;
        let f = self.module.function("spin_fill")?;
        // SAFETY: spin_fill(u32*, u32, u32, u64) writes `n` u32s of `out`.
        unsafe { f.launch(stream, &LaunchConfig::for_elements(n, 256), (&mut out, &n, &i, &ns))? };
        // The buffer lives in this task until its copy resolved: borrowed by the future.
        out.to_vec_async(stream)?.await
    }
}

fn check(answers: Vec<CudaResult<Vec<u32>>>) -> TestResult {
    ensure_eq!(answers.len(), 1000);
    for (i, answer) in answers.into_iter().enumerate() {
        let v = answer?;
        ensure!(v.len() == 256 && v.iter().all(|&x| x as usize == i), "request {i} answered {:?}", &v[..4]);
    }
    Ok(())
}

/// Runs `body` in both waking modes.
fn both_modes(mut body: impl FnMut() -> TestResult) -> TestResult {
    let _turn = serial();
    for waking in [Waking::Poller, Waking::HostFunc] {
        set_waking(waking);
        let result = body();
        set_waking(Waking::Poller);
        result.map_err(|e| format!("{waking:?}: {}", e.message().unwrap_or("failed")))?;
    }
    Ok(())
}

fn tokio_multi_thread() -> TestResult {
    both_modes(|| {
        let service = Service::new()?;
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build()?;
        let answers = rt.block_on(async {
            let tasks: Vec<_> = (0..1000u32)
                .map(|i| {
                    let s = Arc::clone(&service);
                    tokio::spawn(async move { s.request(i, 20_000).await })
                })
                .collect();
            let mut answers = Vec::new();
            for t in tasks {
                answers.push(t.await.map_err(|e| Error::invalid("tokio", e.to_string())).and_then(|r| r));
            }
            answers
        });
        check(answers)
    })
}

fn tokio_current_thread() -> TestResult {
    both_modes(|| {
        let service = Service::new()?;
        let rt = tokio::runtime::Builder::new_current_thread().build()?;
        let answers = rt.block_on(async {
            let local = tokio::task::LocalSet::new();
            local
                .run_until(async {
                    let tasks: Vec<_> = (0..1000u32)
                        .map(|i| {
                            let s = Arc::clone(&service);
                            tokio::task::spawn_local(async move { s.request(i, 20_000).await })
                        })
                        .collect();
                    let mut answers = Vec::new();
                    for t in tasks {
                        answers.push(
                            t.await.map_err(|e| Error::invalid("tokio", e.to_string())).and_then(|r| r),
                        );
                    }
                    answers
                })
                .await
        });
        check(answers)
    })
}

fn async_executor() -> TestResult {
    both_modes(|| {
        let service = Service::new()?;
        let ex = async_executor::Executor::new();
        let tasks: Vec<_> = (0..1000u32)
            .map(|i| {
                let s = Arc::clone(&service);
                ex.spawn(async move { s.request(i, 20_000).await })
            })
            .collect();
        let answers = futures_lite::future::block_on(ex.run(async {
            let mut answers = Vec::new();
            for t in tasks {
                answers.push(t.await);
            }
            answers
        }));
        check(answers)
    })
}

fn futures_block_on() -> TestResult {
    both_modes(|| {
        let service = Service::new()?;
        let requests = (0..1000u32).map(|i| {
            let s = Arc::clone(&service);
            async move { s.request(i, 20_000).await }
        });
        check(futures::executor::block_on(futures::future::join_all(requests)))
    })
}

/// Notes the pinned blocks the pool hands out, in order.
struct PinnedBlocks(RefCell<Vec<u64>>);

impl MemoryHook for PinnedBlocks {
    fn name(&self) -> &str {
        "async-futures-pinned-blocks"
    }

    fn malloc_postprocess(&self, event: &HookEvent) {
        if event.kind == MemoryKind::PinnedHost {
            self.0.borrow_mut().push(event.mem_ptr);
        }
    }
}

/// The staging block of a copy future dropped while its copy waits behind a 200 ms kernel is
/// not handed out again while that kernel runs, and the device buffer it reads keeps its
/// memory too.
fn dropped_copy_keeps_staging() -> TestResult {
    let _turn = serial();
    let service = Service::new()?;
    let blocks = Rc::new(PinnedBlocks(RefCell::new(Vec::new())));
    let _hook = hooks::install(blocks.clone())?;
    let stream = &service.streams[0];
    let n = 1u32 << 16;
    let mut out = DeviceBuffer::<u32>::new(stream, n as usize)?;
    let f = service.module.function("spin_fill")?;
    let (value, ns) = (7u32, 200_000_000u64);
    // SAFETY: spin_fill(u32*, u32, u32, u64) writes `n` u32s of `out`.
    unsafe { f.launch(stream, &LaunchConfig::for_elements(n, 256), (&mut out, &n, &value, &ns))? };
    let future = out.to_vec_async(stream)?;
    drop(future);
    drop(out);
    let staging = *blocks.0.borrow().first().ok_or("the pool's hook saw no staging block")?;
    ensure!(!stream.query()?, "the kernel finished before the test could check the pool");
    // Same size, same pool: a block free for reuse would be the staging block.
    let mut next = PinnedBuffer::<u32>::new(n as usize)?;
    ensure!(!stream.query()?, "the kernel finished before the second allocation");
    let given = *blocks.0.borrow().last().ok_or("the pool's hook saw no second block")?;
    ensure!(given != staging, "the pool handed out the staging block while the copy into it was queued");
    next.as_mut_slice()?.fill(1);
    stream.synchronize()?;
    ensure!(next.as_slice()?.iter().all(|&x| x == 1), "the copy wrote into a block handed out again");
    cuda_tests::no_deferred(&service.ctx)
}

/// A fill future dropped while its copy waits behind a kernel: the pinned buffer still
/// records the copy, so reading it waits and sees the kernel's values.
fn dropped_fill_is_waited_for() -> TestResult {
    let _turn = serial();
    let service = Service::new()?;
    let stream = &service.streams[1];
    let n = 1u32 << 16;
    let mut out = DeviceBuffer::<u32>::new(stream, n as usize)?;
    let f = service.module.function("spin_fill")?;
    let (value, ns) = (9u32, 100_000_000u64);
    // SAFETY: as above.
    unsafe { f.launch(stream, &LaunchConfig::for_elements(n, 256), (&mut out, &n, &value, &ns))? };
    let mut host = PinnedBuffer::<u32>::new(n as usize)?;
    let future = out.to_pinned_async(&mut host, stream)?;
    drop(future);
    ensure!(host.has_copies_in_flight(), "the dropped future's copy is no longer recorded");
    ensure!(host.as_slice()?.iter().all(|&x| x == value), "the host read the buffer before the copy");
    Ok(())
}

/// A waker whose first wake panics.
struct Panicky(AtomicUsize);

impl Wake for Panicky {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    #[allow(clippy::panic)] // the panic is what is tested
    fn wake_by_ref(self: &Arc<Self>) {
        if self.0.fetch_add(1, Ordering::Relaxed) == 0 {
            std::panic::panic_any("this waker panics");
        }
    }
}

fn panicking_waker() -> TestResult {
    both_modes(|| {
        let service = Service::new()?;
        let stream = &service.streams[2];
        let mut out = DeviceBuffer::<u32>::new(stream, 256)?;
        let f = service.module.function("spin_fill")?;
        let (n, value, ns) = (256u32, 5u32, 10_000_000u64);
        // SAFETY: as above.
        unsafe { f.launch(stream, &LaunchConfig::for_elements(n, 256), (&mut out, &n, &value, &ns))? };
        // The stream waits at a gate until the future was polled once, so that it is pending then.
        let (open, gate) = std::sync::mpsc::channel::<()>();
        stream.launch_host_func(move || {
            let _ = gate.recv_timeout(Duration::from_secs(10));
        })?;
        let mut future = stream.synchronize_async()?;
        let panicky = Arc::new(Panicky(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&panicky));
        ensure!(
            Pin::new(&mut future).poll(&mut TaskContext::from_waker(&waker)).is_pending(),
            "resolved early"
        );
        open.send(()).map_err(|e| e.to_string())?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !future.is_done() {
            ensure!(Instant::now() < deadline, "the future never resolved");
            std::thread::sleep(Duration::from_millis(1));
        }
        ensure_eq!(panicky.0.load(Ordering::Relaxed), 1);
        match futures::executor::block_on(future) {
            Err(Error::CallbackPanicked { message }) => {
                ensure!(message.contains("this waker panics"), "{message}")
            }
            other => return Err(format!("expected the waker's panic, got {other:?}").into()),
        }
        // The poller, or the driver's thread, goes on.
        ensure_eq!(futures::executor::block_on(out.to_vec_async(stream)?)?, vec![value; 256]);
        Ok(())
    })
}

fn graph_and_event() -> TestResult {
    let _turn = serial();
    let service = Service::new()?;
    let stream = &service.streams[3];
    let mut out = DeviceBuffer::<u32>::zeroed(stream, 256)?;
    let f = service.module.function("spin_fill")?;
    let (n, value, ns) = (256u32, 11u32, 1_000_000u64);
    // SAFETY: the graph is launched while `out` and the module live, and dropped before them.
    let capture = stream.begin_capture(cuhost::graph::CaptureMode::ThreadLocal)?;
    // SAFETY: as above.
    unsafe { f.launch(stream, &LaunchConfig::for_elements(n, 256), (&mut out, &n, &value, &ns))? };
    let graph = capture.end()?;
    let exec = graph.instantiate(cuhost::graph::InstantiateFlags::empty())?;
    futures::executor::block_on(exec.launch_completion(stream)?)?;
    ensure_eq!(out.to_vec()?, vec![value; 256]);
    let event = cuhost::Event::new(&service.ctx, cuhost::EventFlags::DISABLE_TIMING)?;
    event.record(stream)?;
    futures::executor::block_on(event.synchronize_async()?)?;
    Ok(())
}

fn fault() -> TestResult {
    cuda_tests::child::Child::spawn(CHILD_ENV, "fault")?.finish()
}

/// In a child process: futures in both waking modes wait behind a kernel that faults; every
/// one resolves with the driver's error, none hangs (in the host-function mode the driver
/// never calls the host functions, and the poller's error watch resolves them).
fn fault_child() -> TestResult {
    let service = Service::new()?;
    let stream = &service.streams[4];
    let f = service.module.function("spin_fill")?;
    let mut out = DeviceBuffer::<u32>::new(stream, 256)?;
    let (n, value, ns) = (256u32, 1u32, 50_000_000u64);
    // SAFETY: spin_fill(u32*, u32, u32, u64) writes `n` u32s of `out`.
    unsafe { f.launch(stream, &LaunchConfig::for_elements(n, 256), (&mut out, &n, &value, &ns))? };
    let store = service.module.function("store_to")?;
    let bad = 0x10u64;
    // SAFETY: deliberately faults; the context is lost for the rest of the process.
    unsafe { store.launch(stream, &LaunchConfig::for_elements(1, 1), (&bad,))? };
    let mut pending = Vec::new();
    for waking in [Waking::Poller, Waking::HostFunc] {
        set_waking(waking);
        for _ in 0..8 {
            pending.push(stream.synchronize_async()?);
        }
    }
    let copy = out.to_vec_async(stream)?;
    let started = Instant::now();
    let results = futures::executor::block_on(futures::future::join_all(pending));
    let copied = futures::executor::block_on(copy);
    ensure!(started.elapsed() < Duration::from_secs(10), "the futures took {:?}", started.elapsed());
    for (i, r) in results.iter().enumerate() {
        ensure!(
            r.as_ref().err().and_then(Error::driver_status)
                == Some(cuhost_driver_sys::CUresult::CUDA_ERROR_ILLEGAL_ADDRESS),
            "future {i} ({}) resolved with {r:?}",
            if i < 8 { "poller" } else { "host function" }
        );
    }
    ensure!(copied.is_err(), "the copy behind the fault resolved with data");
    Ok(())
}
