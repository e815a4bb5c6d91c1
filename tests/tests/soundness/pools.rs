//! Pools and allocators (review findings F5, F15, F16): memory a pool or an upstream allocator
//! takes back is reused only once the copies on it have run, wherever they ran, and is given
//! back even while an error is pending in its context.
//!
//! The copy tests hold a stream back with a sleeping host function, so that the copy queued
//! behind it runs late every time, and drop the pinned buffer meanwhile. (The compile-time
//! holes of the same findings, F1–F4, are `compile_fail` doctests on `cuhost::pool`'s
//! traits.)

use cuda_tests::{
    Failed, Test, TestResult, device_zero, drv, ensure, ensure_eq, gpu, hold, multi_gpu, no_deferred,
};
use cuhost::alloc::{DeviceAllocator, PinnedAllocator};
use cuhost::graph::{CaptureMode, Graph, InstantiateFlags};
use cuhost::pool::{MemoryPool, PinnedMemoryPool};
use cuhost::{
    Context, ContextFlags, Device, DeviceBuffer, Error, Event, EventFlags, PinnedBuffer, Stream, StreamFlags,
};
use cuhost_driver_sys as sys;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The tests of this module.
pub const TESTS: &[Test] = &[
    gpu("pinned_pool_waits_for_a_copy_on_another_threads_per_thread_stream", pinned_copy_on_another_thread),
    gpu("pinned_copies_on_the_default_streams_of_two_contexts_are_chained", pinned_copies_in_two_contexts),
    gpu("pinned_pool_takes_back_a_buffer_copied_in_another_context", pinned_copy_in_another_context),
    multi_gpu("pinned_pool_takes_back_a_buffer_copied_on_another_device", 2, pinned_copy_on_another_device),
    gpu("device_allocator_frees_while_a_deferred_error_is_pending", device_free_with_deferred_error),
    gpu("pinned_pool_keeps_a_block_whose_copy_was_captured", pinned_copy_captured),
    gpu("pinned_pool_keeps_a_block_given_back_with_a_captured_event", pinned_block_with_captured_event),
    gpu("memory_pool_keeps_a_block_freed_into_a_capture", device_block_freed_into_a_capture),
];

/// Elements of the buffers: 64 MiB of `u32`, so that a late copy is plainly visible.
const N: usize = 1 << 24;

/// Counts the elements of `seen` that are not `expected`.
fn wrong(seen: &[u32], expected: u32) -> usize {
    seen.iter().filter(|&&v| v != expected).count()
}

// F5(b): a pinned buffer written by a copy on thread A's per-thread default stream, then dropped
// on thread B (the main thread, with the context current). Before the fix, the pool recorded an
// event of its own at the drop, on `CU_STREAM_PER_THREAD` as resolved on thread B: an idle
// stream, so the event completed at once and the block was handed to the next request (zeroed,
// filled, lent as `&mut [u32]`) while A's copy was still to write it; the fives landed in the new
// buffer. Now the pool keeps the block until the event the buffer's copy tracker recorded after
// the copy, on A, has completed: the next request gets another block, and its sevens stay.
fn pinned_copy_on_another_thread() -> TestResult {
    let (_device, ctx, _stream) = device_zero()?;
    let pool = Arc::new(PinnedMemoryPool::new(&ctx));
    let worker_ctx = ctx.clone();
    let worker_pool = pool.clone();
    let host = std::thread::spawn(move || -> Result<(PinnedBuffer<u32>, usize, Event), Error> {
        worker_ctx.bind_to_thread()?;
        let stream = Stream::per_thread(&worker_ctx);
        let device = DeviceBuffer::<u32>::from_slice(&stream, &vec![5; N])?;
        let mut host = PinnedBuffer::<u32>::new_in(N, worker_pool)?;
        let address = host.as_ptr() as usize;
        hold(&stream, 500)?;
        device.copy_to_pinned_async(&mut host, &stream)?; // lands in ~500 ms
        let copied = Event::new(&worker_ctx, EventFlags::DISABLE_TIMING)?;
        copied.record(&stream)?;
        Ok((host, address, copied))
    })
    .join()
    .map_err(|_| "the copying thread panicked")??;
    let (host, address, copied) = host;
    ensure!(host.has_copies_in_flight(), "the copy was not recorded");
    // Whether the copy was still to run at the drop (it always is on its own; a tool that
    // runs host functions at enqueue, as compute-sanitizer may, has finished it already, and
    // then the block may come back).
    let in_flight = !copied.query()?;
    drop(host); // on this thread: the pool must not reuse the block while the copy is to run
    let mut next = PinnedBuffer::<u32>::new_in(N, pool.clone())?;
    let reused = next.as_ptr() as usize == address;
    next.as_mut_slice()?.fill(7);
    // Wait for everything of the context, the other thread's per-thread stream included.
    ctx.synchronize()?;
    ensure_eq!(wrong(&next.as_slice()?, 7), 0, "the late copy wrote into the next buffer (reused: {reused})");
    ensure!(!(reused && in_flight), "the pool handed the block back while a copy was still to write it");
    drop(next);
    // Once the copy has run, the block comes back to the pool.
    pool.free_all_blocks()?;
    ensure_eq!((pool.used_bytes(), pool.total_bytes()), (0, 0), "the pool kept a block for good");
    no_deferred(&ctx)
}

// F5(a): copies into one pinned buffer on the legacy default streams of two contexts of one
// device. Before the fix those two streams compared equal, so the second copy did not wait for
// the first, and the tracker replaced its event with one that covered only the second copy:
// `as_slice` returned while the first (held back) copy was still to write the memory, and the
// slice changed under the shared borrow. Now the second context's stream waits for the first
// copy's event before its own copy, and `as_slice` waits for both: the slice holds the second
// copy's nines, and still does after the first copy's time has passed.
fn pinned_copies_in_two_contexts() -> TestResult {
    let device = Device::get(0)?;
    let c1 = Context::primary(&device)?;
    let c2 = Context::create(&device, ContextFlags::empty())?;
    let (s1, s2) = (Stream::legacy(&c1), Stream::legacy(&c2));
    ensure!(s1 != s2, "the legacy streams of two contexts compare equal");
    let b1 = DeviceBuffer::<u32>::from_slice(&s1, &vec![5; N])?;
    let b2 = DeviceBuffer::<u32>::from_slice(&s2, &vec![9; N])?;
    let mut host = PinnedBuffer::<u32>::new_in(N, Arc::new(PinnedMemoryPool::new(&c1)))?;
    hold(&s1, 500)?;
    b1.copy_to_pinned_async(&mut host, &s1)?; // fives, late
    b2.copy_to_pinned_async(&mut host, &s2)?; // nines, after the fives
    let seen = host.as_slice()?;
    let at_once = wrong(&seen, 9);
    std::thread::sleep(Duration::from_millis(800));
    let later = wrong(&seen, 9);
    ensure_eq!((at_once, later), (0, 0), "words of the shared slice not the last copy's (at once, later)");
    drop(seen);
    drop(host);
    no_deferred(&c1)?;
    no_deferred(&c2)
}

/// Copies into a pinned buffer of `pool` on `stream` (held back first), drops the buffer with
/// the copy in flight, then checks that the pool takes the block back once the copy has run,
/// and that nothing was kept in the stream's context.
fn pinned_block_comes_back(pool: &Arc<PinnedMemoryPool>, stream: &Stream) -> TestResult {
    let device = DeviceBuffer::<u32>::from_slice(stream, &vec![3; N])?;
    let mut host = PinnedBuffer::<u32>::new_in(N, pool.clone())?;
    hold(stream, 200)?;
    device.copy_to_pinned_async(&mut host, stream)?;
    drop(host);
    ensure_eq!(pool.used_bytes(), N * 4, "the block was handed back with the copy in flight");
    stream.synchronize()?;
    pool.free_all_blocks()?;
    ensure_eq!((pool.used_bytes(), pool.total_bytes()), (0, 0), "the block never came back to the pool");
    no_deferred(stream.context())
}

// F16, one device: the pool's events were made in its own context (here device 0's primary
// one, as the default pinned pool's) and recorded on the copy's stream, a stream of another
// context of the same device. `cuEventRecord` refused the pair, the pool kept the block forever
// (`used_bytes` never went down) and the error was kept in the stream's context. Now the pool
// waits on the copy tracker's event, made in the stream's context: the block comes back.
fn pinned_copy_in_another_context() -> TestResult {
    let device = Device::get(0)?;
    let primary = Context::primary(&device)?;
    let pool = Arc::new(PinnedMemoryPool::new(&primary));
    let other = Context::create(&device, ContextFlags::empty())?;
    let stream = Stream::new(&other, StreamFlags::NON_BLOCKING)?;
    pinned_block_comes_back(&pool, &stream)?;
    no_deferred(&primary)
}

// F16, two devices: the same with the copy on device 1 and the pool's context on device 0 (the
// default pinned pool's place). Before the fix the block leaked for good.
fn pinned_copy_on_another_device() -> TestResult {
    let ctx0 = Context::primary(&Device::get(0)?)?;
    let ctx1 = Context::primary(&Device::get(1)?)?;
    let pool = Arc::new(PinnedMemoryPool::new(&ctx0));
    let stream = Stream::new(&ctx1, StreamFlags::NON_BLOCKING)?;
    pinned_block_comes_back(&pool, &stream)?;
    no_deferred(&ctx0)
}

/// Whether `ptr` is (part of) a live allocation, asked of the driver in the current context.
fn is_allocated(ptr: u64) -> bool {
    let (mut base, mut size) = (0, 0);
    // SAFETY: two out-parameters; the driver only looks the address up.
    unsafe { sys::cuMemGetAddressRange(&mut base, &mut size, ptr) == sys::CUresult::CUDA_SUCCESS }
}

// F15: while an error is pending in a context (here a panicked host callback's), every
// `DeviceAllocator` buffer dropped there returned at `enter()?` without `cuMemFree`: the memory
// leaked, and the drop only queued the old error again. Now the release makes the context
// current without taking the error: each buffer's memory is freed (the driver no longer knows
// the address), and the pending error is still there, once, for the next call to report. A
// context of its own keeps the pending error away from the tests that run alongside.
#[allow(clippy::panic)] // the host function panics on purpose
fn device_free_with_deferred_error() -> TestResult {
    let device = Device::get(0)?;
    let ctx = Context::create(&device, ContextFlags::empty())?;
    ctx.bind_to_thread()?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let allocator = Arc::new(DeviceAllocator::new(&ctx));
    let buffers = (0..8)
        .map(|_| DeviceBuffer::<u8>::new_in(&stream, 64 << 20, allocator.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    let addresses: Vec<u64> = buffers.iter().map(|b| b.as_raw()).collect();
    ensure!(addresses.iter().all(|&a| is_allocated(a)), "a buffer is not allocated");
    stream.launch_host_func(|| panic!("a host function that fails (on purpose)"))?;
    // Wait for the error to be kept, without taking it.
    let start = Instant::now();
    while ctx.deferred_error().is_none() {
        ensure!(start.elapsed() < Duration::from_secs(10), "the panic was never reported");
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(buffers);
    let leaked = addresses.iter().filter(|&&a| is_allocated(a)).count();
    let kept = ctx.take_deferred_errors();
    ensure_eq!(leaked, 0, "buffers whose memory was not freed while an error was pending");
    ensure_eq!(kept.len(), 1, "errors kept: {kept:?}");
    ensure!(matches!(kept[0], Error::CallbackPanicked { .. }), "the kept error is not the panic: {kept:?}");
    Ok(())
}

/// The status `cuEventQuery` gives for `event`, by name.
fn query_status(event: &Event) -> &'static str {
    // SAFETY: the event is alive while borrowed; querying needs no current context.
    let status = unsafe { sys::cuEventQuery(event.as_raw()) };
    status.name().unwrap_or("unknown status")
}

/// Runs `work` inside a capture of `stream` begun with the raw driver call, which the crate does
/// not see (as another library sharing the stream would begin it), and returns what it made
/// with the capture's graph. The capture is ended whether or not `work` failed. Relaxed mode:
/// the crate's calls make their events while the capture is under way.
fn in_raw_capture<T>(
    ctx: &Context,
    stream: &Stream,
    work: impl FnOnce() -> Result<T, Error>,
) -> Result<(T, Graph), Failed> {
    // SAFETY: a capture of a live stream, ended below on the same stream and thread.
    drv("cuStreamBeginCapture", unsafe {
        sys::cuStreamBeginCapture(stream.as_raw(), sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
    })?;
    let made = work();
    let mut raw = std::ptr::null_mut();
    // SAFETY: ends the capture begun above; the graph is owned below.
    let ended = drv("cuStreamEndCapture", unsafe { sys::cuStreamEndCapture(stream.as_raw(), &mut raw) });
    let graph = (!raw.is_null()).then(|| {
        // SAFETY: the capture's new graph, of `ctx`, owned by nothing else.
        unsafe { Graph::from_raw(ctx, raw) }
    });
    let made = made?;
    ended?;
    Ok((made, graph.ok_or("the capture made no graph")?))
}

// A copy from a pinned buffer of the pool recorded inside a stream capture that the crate does
// not see (begun with a raw `cuStreamBeginCapture`, as another library sharing the stream would
// begin it): the buffer's copy tracker records its event inside the capture, and the dropped
// buffer hands that event to the pool. Once the capture has ended, driver 580 answers
// `cuEventQuery` on an event last recorded in it with `CUDA_ERROR_INVALID_VALUE` (while it runs,
// `CUDA_ERROR_CAPTURED_EVENT`). The pool read that answer as "the copies are done" and handed the
// block to the next request of its size, while the captured graph still copies from it at every
// launch: on the GPU the next buffer got the first one's address, and the launch copied that
// buffer's sevens. Now the pool keeps the block: the next buffers get other memory, and the
// launch copies the first buffer's pattern.
fn pinned_copy_captured() -> TestResult {
    const LEN: usize = 1 << 16; // 256 KiB: one size class of the pool
    let (_device, ctx, stream) = device_zero()?;
    let pool = Arc::new(PinnedMemoryPool::new(&ctx));
    let mut device = DeviceBuffer::<u32>::zeroed(&stream, LEN)?;
    let mut host = PinnedBuffer::<u32>::new_in(LEN, pool.clone())?;
    for (i, v) in host.as_mut_slice()?.iter_mut().enumerate() {
        *v = i as u32;
    }
    let address = host.as_ptr() as usize;
    stream.synchronize()?;
    let (probe, graph) = in_raw_capture(&ctx, &stream, || {
        // Captured: the graph copies the buffer into `device` at each launch.
        device.copy_from_pinned_async(&host, &stream)?;
        // An event recorded at the same point, for the report: what the driver says of it.
        let probe = Event::new(&ctx, EventFlags::DISABLE_TIMING)?;
        probe.record(&stream)?;
        Ok(probe)
    })?;
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    let probe_status = query_status(&probe);
    ensure!(
        host.has_copies_in_flight(),
        "the captured copy was not recorded on the buffer (did a capture begun through the crate run \
         alongside, so that the crate saw this one?)"
    );
    // The graph still reads this memory at every launch (the block is the pool's to keep).
    drop(host);
    let mut next =
        (0..4).map(|_| PinnedBuffer::<u32>::new_in(LEN, pool.clone())).collect::<Result<Vec<_>, _>>()?;
    let addresses: Vec<usize> = next.iter().map(|b| b.as_ptr() as usize).collect();
    for b in &mut next {
        b.as_mut_slice()?.fill(7);
    }
    exec.launch(&stream)?;
    stream.synchronize()?;
    let seen = device.to_vec()?;
    let wrong = seen.iter().enumerate().filter(|&(i, &v)| v != i as u32).count();
    let sevens = seen.iter().filter(|&&v| v == 7).count();
    let reused = addresses.iter().position(|&a| a == address);
    ensure!(
        reused.is_none(),
        "the pool handed the block of the captured copy out again (as new buffer {reused:?} of 4) while the \
         graph still copies from it; the launch then copied {wrong} words not the first buffer's ({sevens} \
         sevens of the new buffer); cuEventQuery on an event recorded in the capture: {probe_status}"
    );
    ensure_eq!(
        wrong,
        0,
        "words the launch copied that are not the first buffer's ({sevens} sevens; cuEventQuery on an event \
         recorded in the capture: {probe_status})"
    );
    drop(exec);
    drop(graph);
    drop(next);
    no_deferred(&ctx)
}

// The same at the pinned allocator's interface, with a capture begun through the crate: memory
// given back to the pool behind an event last recorded in a capture
// (`PinnedAllocator::deallocate_after`, what a dropped `PinnedBuffer` calls) is not handed out
// again. Before the fix the pool's query read the driver's answer for such an event as
// complete and the next request of the size got the same address.
fn pinned_block_with_captured_event() -> TestResult {
    const BYTES: usize = 1 << 18;
    let (_device, ctx, stream) = device_zero()?;
    let pool = PinnedMemoryPool::new(&ctx);
    let first = pool.allocate(BYTES)?;
    let copies = Event::new(&ctx, EventFlags::DISABLE_TIMING)?;
    let capture = stream.begin_capture(CaptureMode::ThreadLocal)?;
    let recorded = copies.record(&stream);
    let graph = capture.end()?;
    recorded?;
    let status = query_status(&copies);
    // SAFETY: `first` came from this pool and is given back once; no copy uses it, and nothing
    // records `copies` again (it is handed over).
    unsafe { pool.deallocate_after(first, copies)? };
    let next = pool.allocate(BYTES)?;
    let reused = next.ptr == first.ptr;
    // SAFETY: `next` came from this pool and nothing uses it.
    unsafe { pool.deallocate(next)? };
    ensure!(
        !reused,
        "the pool handed out again a block given back behind an event recorded in a capture (cuEventQuery \
         on that event: {status})"
    );
    drop(graph);
    no_deferred(&ctx)
}

// The device pool's side of the same hole: a buffer of a `MemoryPool`, used on a second stream
// that is being captured (begun with the raw call, as another library sharing the stream would
// begin it), is dropped during the capture. Its release records the pool's event on that
// stream, inside the capture, so the block waits on an event that says nothing about the
// captured memset; once the capture has ended, driver 580 answers `cuEventQuery` on it with
// `CUDA_ERROR_INVALID_VALUE`, which the pool read as "done": the next buffer of the size got the
// block, and every launch of the graph wrote over it. Now the pool keeps the block.
fn device_block_freed_into_a_capture() -> TestResult {
    const LEN: usize = 1 << 20;
    let (_device, ctx, stream) = device_zero()?;
    let other = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let pool = Arc::new(MemoryPool::new(&ctx)?);
    let mut first = DeviceBuffer::<u8>::new_in(&stream, LEN, pool.clone())?;
    let address = first.as_raw();
    stream.synchronize()?;
    let ((), graph) = in_raw_capture(&ctx, &other, || {
        // Captured: every launch of the graph sets the buffer's bytes to 0x11.
        first.view_mut().memset_d8_async(0x11, &other)?;
        // Dropped while the capture runs: the release's event on `other` is recorded into it.
        drop(first);
        Ok(())
    })?;
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    let next = (0..4)
        .map(|_| -> Result<DeviceBuffer<u8>, Error> {
            let mut b = DeviceBuffer::<u8>::new_in(&stream, LEN, pool.clone())?;
            b.view_mut().memset_d8_async(0x22, &stream)?;
            Ok(b)
        })
        .collect::<Result<Vec<_>, _>>()?;
    stream.synchronize()?;
    exec.launch(&other)?;
    other.synchronize()?;
    let reused = next.iter().position(|b| b.as_raw() == address);
    let overwritten: usize = next
        .iter()
        .map(|b| b.to_vec().map(|v| v.iter().filter(|&&x| x != 0x22).count()))
        .sum::<Result<_, _>>()?;
    ensure!(
        reused.is_none(),
        "the pool handed the block freed into the capture out again (as new buffer {reused:?} of 4) while the \
         graph still writes it; the launch then changed {overwritten} bytes of the new buffers"
    );
    ensure_eq!(overwritten, 0, "bytes of the new buffers that the graph's launch changed");
    drop(exec);
    drop(graph);
    drop(next);
    no_deferred(&ctx)
}
