//! `cuda_core::event`: record, query, synchronize, timing, flags.

use cuda_core::event::EventRecordFlags;
use cuda_core::{Context, Device, Error, Event, EventFlags, Stream, StreamFlags};
use cuda_tests::{TestResult, ensure, gpu};
use std::time::Duration;

fn main() {
    cuda_tests::run(&[
        gpu("record_query_synchronize", record_query_synchronize),
        gpu("elapsed_time_measures_the_gap", elapsed_time_measures_the_gap),
        gpu("flag_combinations_are_checked", flag_combinations_are_checked),
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
