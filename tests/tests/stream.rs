//! `cuhost::stream`: flags, priorities, default streams, adoption, callbacks, waits,
//! attributes, memory operations, capture status.

use cuda_tests::{TestResult, drv, ensure, ensure_eq, gpu};
use cuhost::stream::EventWaitFlags;
use cuhost::stream::{
    AccessPolicyWindow, AccessProperty, CaptureStatus, MAX_BATCH_MEM_OPS, StreamMemOp, StreamWaitValueFlags,
    StreamWriteValueFlags,
};
use cuhost::{Context, ContextFlags, Device, DeviceBuffer, Error, Event, EventFlags, Stream, StreamFlags};
use cuhost_driver_sys as sys;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn main() {
    cuda_tests::run(&[
        gpu("flags_and_priority_round_trip", flags_and_priority_round_trip),
        gpu("default_streams_work", default_streams_work),
        gpu("adopted_stream_is_not_destroyed", adopted_stream_is_not_destroyed),
        gpu("host_callbacks_run_in_stream_order", host_callbacks_run_in_stream_order),
        gpu("callback_panic_is_reported_not_aborted", callback_panic_is_reported_not_aborted),
        gpu("wait_event_orders_two_streams", wait_event_orders_two_streams),
        gpu("default_stream_waits_in_its_own_context", default_stream_waits_in_its_own_context),
        gpu("query_reports_pending_work", query_reports_pending_work),
        gpu("write_and_wait_value", write_and_wait_value),
        gpu("batch_mem_ops_run_in_order", batch_mem_ops_run_in_order),
        gpu("access_policy_window_round_trip", access_policy_window_round_trip),
        gpu("priority_attribute_round_trip", priority_attribute_round_trip),
        gpu("capture_status_follows_capture", capture_status_follows_capture),
    ]);
}

fn ctx() -> Result<Context, Error> {
    Context::primary(&Device::get(0)?)
}

fn flags_and_priority_round_trip() -> TestResult {
    let ctx = ctx()?;
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    ensure_eq!(s.flags()?, StreamFlags::NON_BLOCKING);
    ensure_eq!(Stream::new(&ctx, StreamFlags::empty())?.flags()?, StreamFlags::empty());
    let (least, greatest) = ctx.stream_priority_range()?;
    let high = Stream::with_priority(&ctx, StreamFlags::empty(), greatest)?;
    ensure_eq!(high.priority()?, greatest);
    let low = Stream::with_priority(&ctx, StreamFlags::empty(), least)?;
    ensure_eq!(low.priority()?, least);
    ensure!(high.id()? != low.id()?, "two streams share an id");
    ensure!(s.is_owned(), "a created stream is not owned");
    Ok(())
}

fn default_streams_work() -> TestResult {
    let ctx = ctx()?;
    for s in [Stream::legacy(&ctx), Stream::per_thread(&ctx)] {
        ensure!(!s.is_owned(), "a default stream is owned");
        // A buffer on the default stream: its synchronous copies run there too.
        let mut b = DeviceBuffer::<u32>::new(&s, 256)?;
        b.view_mut().memset_d32_async(9, &s)?;
        s.synchronize()?;
        ensure!(s.query()?, "idle default stream not ready");
        ensure_eq!(b.to_vec()?, vec![9u32; 256]);
    }
    Ok(())
}

fn adopted_stream_is_not_destroyed() -> TestResult {
    let ctx = ctx()?;
    ctx.bind_to_thread()?;
    let mut raw = std::ptr::null_mut();
    // SAFETY: one out-parameter; the context is current.
    drv("cuStreamCreate", unsafe { sys::cuStreamCreate(&mut raw, 0) })?;
    {
        // SAFETY: `raw` is a live stream of `ctx`, destroyed below after the wrapper is gone.
        let s = unsafe { Stream::from_raw(&ctx, raw) };
        ensure!(!s.is_owned(), "adopted stream is owned");
        s.synchronize()?;
    }
    // SAFETY: the stream is still alive: the wrapper did not destroy it.
    drv("cuStreamQuery", unsafe { sys::cuStreamQuery(raw) })?;
    // SAFETY: ours to destroy.
    drv("cuStreamDestroy", unsafe { sys::cuStreamDestroy(raw) })?;
    Ok(())
}

fn host_callbacks_run_in_stream_order() -> TestResult {
    let ctx = ctx()?;
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let order = Arc::new(Mutex::new(Vec::new()));
    for i in 0..8u32 {
        let order = order.clone();
        s.launch_host_func(move || {
            if i == 0 {
                std::thread::sleep(Duration::from_millis(20));
            }
            order.lock().map(|mut v| v.push(i)).ok();
        })?;
    }
    s.synchronize()?;
    let got = order.lock().map(|v| v.clone()).map_err(|_| "poisoned")?;
    ensure_eq!(got, (0..8).collect::<Vec<u32>>());
    Ok(())
}

// The panic is the point of the test: it must be caught and reported.
#[allow(clippy::panic)]
fn callback_panic_is_reported_not_aborted() -> TestResult {
    let ctx = ctx()?;
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let after = Arc::new(AtomicBool::new(false));
    s.launch_host_func(|| panic!("boom in a callback"))?;
    let a = after.clone();
    s.launch_host_func(move || a.store(true, Ordering::SeqCst))?;
    match s.synchronize() {
        Err(Error::CallbackPanicked { message }) => ensure!(message.contains("boom"), "message {message}"),
        other => return Err(format!("expected CallbackPanicked, got {other:?}").into()),
    }
    ensure!(after.load(Ordering::SeqCst), "the callback after the panic did not run");
    // Reported once; the stream and context stay usable.
    s.synchronize()?;
    let b = DeviceBuffer::from_slice(&s, &[5u8; 16])?;
    ensure_eq!(b.to_vec()?, vec![5u8; 16]);
    Ok(())
}

fn wait_event_orders_two_streams() -> TestResult {
    let ctx = ctx()?;
    let a = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let b = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let flag = Arc::new(AtomicU32::new(0));
    let seen = Arc::new(AtomicU32::new(u32::MAX));
    let f = flag.clone();
    a.launch_host_func(move || {
        std::thread::sleep(Duration::from_millis(100));
        f.store(1, Ordering::SeqCst);
    })?;
    let e = Event::new(&ctx, EventFlags::DISABLE_TIMING)?;
    e.record(&a)?;
    b.wait_event(&e)?;
    let (f, s) = (flag.clone(), seen.clone());
    b.launch_host_func(move || s.store(f.load(Ordering::SeqCst), Ordering::SeqCst))?;
    b.synchronize()?;
    ensure_eq!(seen.load(Ordering::SeqCst), 1);
    a.synchronize()?;
    Ok(())
}

fn current_raw() -> Result<Option<sys::CUcontext>, Error> {
    Ok(Context::current()?.map(|c| c.as_raw()))
}

/// With another context current, a default stream of `ctx` waits on an event, runs a callback,
/// reports pending work and synchronizes as `ctx`'s default stream, not the current context's.
fn default_stream_waits_in_its_own_context() -> TestResult {
    let ctx = ctx()?;
    let other = Context::create(&ctx.device(), ContextFlags::empty())?;
    let side = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let e = Event::new(&ctx, EventFlags::DISABLE_TIMING)?;
    for (i, s) in [Stream::legacy(&ctx), Stream::per_thread(&ctx)].into_iter().enumerate() {
        let flag = Arc::new(AtomicU32::new(0));
        let seen = Arc::new(AtomicU32::new(u32::MAX));
        let f = flag.clone();
        side.launch_host_func(move || {
            std::thread::sleep(Duration::from_millis(150));
            f.store(1, Ordering::SeqCst);
        })?;
        e.record(&side)?;
        other.bind_to_thread()?;
        if i == 0 {
            s.wait_event(&e)?;
        } else {
            s.wait_event_with_flags(&e, EventWaitFlags::empty())?;
        }
        ensure_eq!(current_raw()?, Some(ctx.as_raw()));
        other.bind_to_thread()?;
        let (f, v) = (flag.clone(), seen.clone());
        s.launch_host_func(move || v.store(f.load(Ordering::SeqCst), Ordering::SeqCst))?;
        other.bind_to_thread()?;
        ensure!(!s.query()?, "stream {i}: the default stream does not report the wait as pending");
        other.bind_to_thread()?;
        s.synchronize()?;
        ensure_eq!(seen.load(Ordering::SeqCst), 1);
        ensure_eq!(current_raw()?, Some(ctx.as_raw()));
        ensure!(s.query()?, "stream {i}: a synchronized default stream reports pending work");
        side.synchronize()?;
    }
    Ok(())
}

fn query_reports_pending_work() -> TestResult {
    let ctx = ctx()?;
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    s.launch_host_func(|| std::thread::sleep(Duration::from_millis(200)))?;
    ensure!(!s.query()?, "a stream with a sleeping callback reports ready");
    s.synchronize()?;
    ensure!(s.query()?, "an idle stream reports pending work");
    Ok(())
}

fn write_and_wait_value() -> TestResult {
    let ctx = ctx()?;
    let a = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let b = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let flags = DeviceBuffer::<u64>::zeroed(&a, 4)?;
    // Zeroed in `a`'s order: finish it before `b` writes and waits on the words.
    a.synchronize()?;
    let base = flags.as_raw();
    // SAFETY: the addresses are aligned words of `flags`, alive until the synchronizations below;
    // `b` waits for a value `a` writes.
    unsafe {
        b.wait_value_32(base, 1, StreamWaitValueFlags::EQ)?;
        b.write_value_64(base + 8, 0x1234_5678_9abc_def0, StreamWriteValueFlags::empty())?;
        a.write_value_32(base, 1, StreamWriteValueFlags::empty())?;
    }
    a.synchronize()?;
    b.synchronize()?;
    let v = flags.to_vec()?;
    ensure_eq!(v[0] & 0xffff_ffff, 1);
    ensure_eq!(v[1], 0x1234_5678_9abc_def0);
    Ok(())
}

fn batch_mem_ops_run_in_order() -> TestResult {
    let ctx = ctx()?;
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    // Zeroed in `s`'s order, before the batch queued there.
    let words = DeviceBuffer::<u64>::zeroed(&s, 3)?;
    let base = words.as_raw();
    let ops = [
        StreamMemOp::WriteValue32 { address: base, value: 5, flags: StreamWriteValueFlags::empty() },
        StreamMemOp::WaitValue32 { address: base, value: 5, flags: StreamWaitValueFlags::EQ },
        StreamMemOp::WriteValue64 {
            address: base + 8,
            value: u64::MAX - 1,
            flags: StreamWriteValueFlags::empty(),
        },
        StreamMemOp::Barrier { system: false },
        StreamMemOp::WaitValue64 { address: base + 8, value: u64::MAX - 1, flags: StreamWaitValueFlags::EQ },
        StreamMemOp::WriteValue64 { address: base + 16, value: 77, flags: StreamWriteValueFlags::empty() },
    ];
    // SAFETY: every address is an aligned word of `words`, alive until the synchronization;
    // every wait is satisfied by an earlier write of the same batch.
    unsafe { s.batch_mem_ops(&ops)? };
    s.synchronize()?;
    ensure_eq!(words.to_vec()?, vec![5, u64::MAX - 1, 77]);
    let too_many = vec![StreamMemOp::Barrier { system: false }; MAX_BATCH_MEM_OPS + 1];
    // SAFETY: refused before any call.
    let refused = unsafe { s.batch_mem_ops(&too_many) };
    ensure!(matches!(refused, Err(Error::InvalidArgument { .. })), "an oversized batch was accepted");
    Ok(())
}

fn access_policy_window_round_trip() -> TestResult {
    let ctx = ctx()?;
    let d = ctx.device();
    let max = usize::try_from(d.max_access_policy_window_size()?)?;
    ensure!(max > 0, "the device has no access-policy window");
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let buf = DeviceBuffer::<u8>::new(&s, 1 << 20)?;
    let window = AccessPolicyWindow {
        base: buf.as_raw(),
        num_bytes: max.min(1 << 20),
        hit_ratio: 0.5,
        hit_prop: AccessProperty::Persisting,
        miss_prop: AccessProperty::Streaming,
    };
    s.set_access_policy_window(&window)?;
    ensure_eq!(s.access_policy_window()?, window);
    let bad = AccessPolicyWindow { hit_ratio: 1.5, ..window };
    ensure!(
        matches!(s.set_access_policy_window(&bad), Err(Error::InvalidArgument { .. })),
        "a hit ratio of 1.5 was accepted"
    );
    Ok(())
}

fn priority_attribute_round_trip() -> TestResult {
    let ctx = ctx()?;
    let (_, greatest) = ctx.stream_priority_range()?;
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    s.set_priority_attribute(greatest)?;
    ensure_eq!(s.priority_attribute()?, greatest);
    let t = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    t.copy_attributes_from(&s)?;
    ensure_eq!(t.priority_attribute()?, greatest);
    Ok(())
}

fn capture_status_follows_capture() -> TestResult {
    let ctx = ctx()?;
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    ensure_eq!(s.capture_status()?, CaptureStatus::None);
    // SAFETY: capture of a live stream, ended below.
    drv("cuStreamBeginCapture", unsafe {
        sys::cuStreamBeginCapture(s.as_raw(), sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
    })?;
    ensure_eq!(s.capture_status()?, CaptureStatus::Active);
    let mut graph = std::ptr::null_mut();
    // SAFETY: ends the capture begun above; the graph is destroyed below.
    drv("cuStreamEndCapture", unsafe { sys::cuStreamEndCapture(s.as_raw(), &mut graph) })?;
    // SAFETY: the graph made by the capture.
    drv("cuGraphDestroy", unsafe { sys::cuGraphDestroy(graph) })?;
    ensure_eq!(s.capture_status()?, CaptureStatus::None);
    Ok(())
}
