//! `cuhost::event`: record, query, synchronize, timing, flags.

use cuda_tests::{TestResult, ensure, ensure_eq, gpu};
use cuhost::event::EventRecordFlags;
use cuhost::{Context, ContextFlags, Device, Error, Event, EventFlags, Stream, StreamFlags};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

fn main() {
    cuda_tests::run(&[
        gpu("record_query_synchronize", record_query_synchronize),
        gpu("elapsed_time_measures_the_gap", elapsed_time_measures_the_gap),
        gpu("flag_combinations_are_checked", flag_combinations_are_checked),
        gpu(
            "record_on_a_default_stream_captures_its_own_context",
            record_on_a_default_stream_captures_its_own_context,
        ),
    ]);
}

fn ctx() -> Result<Context, Error> {
    Context::primary(&Device::get(0)?)
}

fn record_query_synchronize() -> TestResult {
    let ctx = ctx()?;
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let e = Event::new(&ctx, EventFlags::BLOCKING_SYNC | EventFlags::DISABLE_TIMING)?;
    ensure!(e.query()?, "an event never recorded is not complete");
    s.launch_host_func(|| std::thread::sleep(Duration::from_millis(200)))?;
    e.record(&s)?;
    ensure!(!e.query()?, "an event behind a sleeping callback is complete");
    e.synchronize()?;
    ensure!(e.query()?, "a synchronized event is not complete");
    e.record_with_flags(&s, EventRecordFlags::empty())?;
    s.synchronize()?;
    ensure!(e.query()?, "an event on an idle stream is not complete");
    Ok(())
}

fn elapsed_time_measures_the_gap() -> TestResult {
    let ctx = ctx()?;
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let start = Event::new(&ctx, EventFlags::empty())?;
    let end = Event::new(&ctx, EventFlags::empty())?;
    start.record(&s)?;
    s.launch_host_func(|| std::thread::sleep(Duration::from_millis(50)))?;
    end.record(&s)?;
    end.synchronize()?;
    let ms = Event::elapsed_time(&start, &end)?;
    ensure!((45.0..5000.0).contains(&ms), "elapsed {ms} ms across a 50 ms callback");
    Ok(())
}

fn flag_combinations_are_checked() -> TestResult {
    let ctx = ctx()?;
    ensure!(
        matches!(Event::new(&ctx, EventFlags::INTERPROCESS), Err(Error::InvalidArgument { .. })),
        "an interprocess event with timing was accepted"
    );
    let ipc = Event::new(&ctx, EventFlags::INTERPROCESS | EventFlags::DISABLE_TIMING)?;
    ensure!(ipc.flags().contains(EventFlags::INTERPROCESS), "flags lost");
    let timed = Event::new(&ctx, EventFlags::empty())?;
    ensure!(
        matches!(Event::elapsed_time(&timed, &ipc), Err(Error::InvalidArgument { .. })),
        "timing an event without timing was attempted"
    );
    Ok(())
}

fn current_raw() -> Result<Option<cuhost::driver_sys::CUcontext>, Error> {
    Ok(Context::current()?.map(|c| c.as_raw()))
}

/// With another context current, recording on a default stream of `ctx` captures `ctx`'s
/// default stream (work queued there before the record), not the current context's.
fn record_on_a_default_stream_captures_its_own_context() -> TestResult {
    let ctx = ctx()?;
    let other = Context::create(&ctx.device(), ContextFlags::empty())?;
    let e = Event::new(&ctx, EventFlags::DISABLE_TIMING)?;
    for (i, s) in [Stream::legacy(&ctx), Stream::per_thread(&ctx)].into_iter().enumerate() {
        ensure!(s.is_default(), "stream {i} is not a default stream");
        let done = Arc::new(AtomicU32::new(0));
        let d = done.clone();
        s.launch_host_func(move || {
            std::thread::sleep(Duration::from_millis(150));
            d.store(1, Ordering::SeqCst);
        })?;
        other.bind_to_thread()?;
        if i == 0 {
            e.record(&s)?;
        } else {
            e.record_with_flags(&s, EventRecordFlags::empty())?;
        }
        ensure_eq!(current_raw()?, Some(ctx.as_raw()));
        ensure!(!e.query()?, "stream {i}: the event does not wait for the sleeping callback before it");
        e.synchronize()?;
        ensure_eq!(done.load(Ordering::SeqCst), 1);
        ensure!(e.query()?, "stream {i}: a synchronized event is not complete");
    }
    Ok(())
}
