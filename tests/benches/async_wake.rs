//! The futures of `cuhost::future`: how long after the GPU finishes a task is woken, in
//! each waking mode, against `cuStreamSynchronize` returning; and what making and polling one
//! future costs, against the raw event record and query it stands for.
//!
//! Wake-up rows: one round queues a kernel that spins for a fixed time on the GPU's clock,
//! then waits for it, `iters` times: ours awaits `Stream::synchronize_async` under
//! `futures::executor::block_on` (the thread parks until the waker unparks it), the raw side
//! calls `cuStreamSynchronize`. The kernel's length is the same on both sides, so ours − raw
//! is the wake-up latency over `cuStreamSynchronize`'s (goal: 5 µs or less). The 10 ms rows
//! show the poller after its spin (default 5 ms) ran out: woken within its longest pause.
//!
//! Cost rows: making a future on an idle stream, polling it once with a no-op waker, and
//! dropping it, against `cuEventRecord` + `cuEventQuery` on a raw event (goal: 1 µs or less
//! over that).

#[path = "../tests/kernels/mod.rs"]
mod kernels;

use cuda_tests::bench::{Row, compare_settled, print_table};
use cuhost::future::{PollerConfig, Waking, set_poller_config, set_waking};
use cuhost::{
    Context, Device, DeviceBuffer, Event, EventFlags, LaunchConfig, Module, Result, Stream, StreamFlags,
};
use cuhost_driver_sys as sys;
use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::task::{Context as TaskContext, Waker};

fn main() {
    match run() {
        Ok(rows) => print_table(
            "futures: wake-up after the GPU finishes, against cuStreamSynchronize; one future's cost",
            &rows,
        ),
        Err(e) => eprintln!("benchmark skipped: {e}"),
    }
}

fn run() -> Result<Vec<Row>> {
    let ctx = Context::primary(&Device::get(0)?)?;
    ctx.bind_to_thread()?;
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let module = Module::from_ptx(&ctx, kernels::SPIN_PTX)?;
    let spin = module.function("spin_fill")?;
    let out = DeviceBuffer::<u32>::zeroed(&s, 32)?;
    let ptr = out.as_raw();
    let mut rows = Vec::new();

    for (kernel_ns, iters) in [(100_000u64, 200u64), (10_000_000, 10)] {
        for waking in [Waking::Poller, Waking::HostFunc] {
            set_waking(waking);
            let launch = || {
                let (n, v) = (32u32, 1u32);
                // SAFETY: spin_fill(u32*, u32, u32, u64) writes 32 u32s at `ptr`, `out`'s.
                unsafe { spin.launch(&s, &LaunchConfig::for_elements(n, 32), (&ptr, &n, &v, &kernel_ns)) }
            };
            let name = format!("wake after a {} µs kernel, {waking:?}", kernel_ns / 1000);
            let sr = s.as_raw();
            let (ours_launch, raw_launch) = (launch, launch);
            rows.push(compare_settled(
                &name,
                11,
                iters,
                || {
                    ours_launch().ok();
                    black_box(futures::executor::block_on(async { s.synchronize_async()?.await })).ok();
                },
                || {
                    raw_launch().ok();
                    // SAFETY: a live stream.
                    black_box(unsafe { sys::cuStreamSynchronize(sr) });
                },
                || {
                    s.synchronize().ok();
                },
            ));
        }
    }
    set_waking(Waking::Poller);

    // The cost of one future, the stream idle: make it, poll it once, drop it.
    let idle = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let e = Event::new(&ctx, EventFlags::DISABLE_TIMING)?;
    let (ir, er) = (idle.as_raw(), e.as_raw());
    let waker = Waker::noop();
    for waking in [Waking::Poller, Waking::HostFunc] {
        set_waking(waking);
        rows.push(compare_settled(
            &format!("make, poll once and drop a future, {waking:?}"),
            31,
            2_000,
            || {
                if let Ok(mut f) = idle.synchronize_async() {
                    black_box(Pin::new(&mut f).poll(&mut TaskContext::from_waker(waker)).is_ready());
                }
            },
            // SAFETY: live handles of one context.
            || unsafe {
                black_box(sys::cuEventRecord(er, ir));
                black_box(sys::cuEventQuery(er));
            },
            || {
                idle.synchronize().ok();
            },
        ));
    }
    set_waking(Waking::Poller);

    // The poller with no spin: what the latency is when it always sleeps between rounds.
    set_poller_config(PollerConfig { spin: std::time::Duration::ZERO, ..PollerConfig::default() });
    let launch = || {
        let (n, v, ns) = (32u32, 1u32, 100_000u64);
        // SAFETY: as above.
        unsafe { spin.launch(&s, &LaunchConfig::for_elements(n, 32), (&ptr, &n, &v, &ns)) }
    };
    let sr = s.as_raw();
    let raw_launch = launch;
    rows.push(compare_settled(
        "wake after a 100 µs kernel, Poller without spin",
        11,
        200,
        || {
            launch().ok();
            black_box(futures::executor::block_on(async { s.synchronize_async()?.await })).ok();
        },
        || {
            raw_launch().ok();
            // SAFETY: a live stream.
            black_box(unsafe { sys::cuStreamSynchronize(sr) });
        },
        || {
            s.synchronize().ok();
        },
    ));
    set_poller_config(PollerConfig::default());
    Ok(rows)
}
