//! A typical cudarc program, ported: kernels compiled from CUDA C++ with NVRTC, one module shared
//! by two threads, and on each thread a producer stream whose kernel writes a buffer and a
//! consumer stream that reads it (a copy, then a kernel) while the producer writes it again.
//!
//! cudarc orders such uses itself, with a read and a write event per slice. The port runs twice:
//!
//! - **implicit**: `set_stream_ordering(StreamOrdering::Implicit)` asks this crate to do the
//!   same, and the code reads as cudarc's did;
//! - **explicit** (the default mode): the program says the order itself, with one event per
//!   hand-over, and pays nothing where a buffer stays on its stream.
//!
//! Each stream is held back by a slow host function before its first use of `x`, so a missing
//! order would show as wrong values, which the program checks.
//!
//! `cargo run --example cudarc_port --features compile`

use cuhost::compile::{Arch, CompileOptions, Program};
use cuhost::module::SharedFunction;
use cuhost::stream::set_stream_ordering;
use cuhost::{
    Context, Device, DeviceBuffer, Event, EventFlags, LaunchConfig, Stream, StreamFlags, StreamOrdering,
};
use std::process::ExitCode;
use std::time::Duration;

const SOURCE: &str = r#"
// x[i] = i * a
extern "C" __global__ void ramp(float *x, float a, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = (float)i * a;
}
// y[i] += x[i]
extern "C" __global__ void accumulate(float *y, const float *x, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}
"#;

const N: u32 = 1 << 20;

fn main() -> ExitCode {
    match run().and_then(|()| cuhost::pool::release_default_pools()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cudarc_port: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The two kernels, shared by every thread.
struct Kernels {
    ramp: SharedFunction,
    accumulate: SharedFunction,
}

fn run() -> cuhost::Result<()> {
    let device = Device::get(0)?;
    let ctx = Context::primary(&device)?;
    // cudarc: `compile_ptx(src)` then `ctx.load_module(ptx)`.
    let compiled =
        Program::new(SOURCE).named("port.cu").compile(Arch::of(&device)?, &CompileOptions::new())?;
    let module = compiled.load(&ctx)?;
    let kernels = Kernels {
        ramp: compiled.shared_function(&module, "ramp")?,
        accumulate: compiled.shared_function(&module, "accumulate")?,
    };
    for ordering in [StreamOrdering::Implicit, StreamOrdering::Explicit] {
        set_stream_ordering(ordering);
        // cudarc: `std::thread::spawn` with clones of the `Arc<CudaFunction>`s.
        let results: Vec<cuhost::Result<f32>> = std::thread::scope(|scope| {
            let (ctx, kernels) = (&ctx, &kernels);
            let workers: Vec<_> =
                (1..=2).map(|t| scope.spawn(move || worker(ctx, kernels, ordering, t as f32))).collect();
            workers.into_iter().map(|w| w.join().unwrap_or_else(|_| Err(panicked()))).collect()
        });
        for (t, result) in results.into_iter().enumerate() {
            println!("{ordering:?} ordering, thread {}: y[N-1] = {} (checked)", t + 1, result?);
        }
    }
    set_stream_ordering(StreamOrdering::Explicit);
    Ok(())
}

/// On `ctx` current on this thread: `x = ramp(a)` on the producer, `y = copy of x` then
/// `y += x` on the consumer, then `x = ramp(2a)` on the producer again; checks `y = 2 ramp(a)`
/// and `x = ramp(2a)`, and returns `y`'s last element.
fn worker(ctx: &Context, kernels: &Kernels, ordering: StreamOrdering, a: f32) -> cuhost::Result<f32> {
    ctx.bind_to_thread()?;
    let producer = Stream::new(ctx, StreamFlags::NON_BLOCKING)?;
    let consumer = Stream::new(ctx, StreamFlags::NON_BLOCKING)?;
    let config = LaunchConfig::for_elements(N, 256);
    // In the explicit mode, `later` waits for what is queued on `earlier` so far (cudarc's
    // `later.join(&earlier)`); in the implicit one the crate does it, per buffer and only where
    // needed.
    let join = |later: &Stream, earlier: &Stream| -> cuhost::Result<()> {
        if ordering == StreamOrdering::Implicit {
            return Ok(());
        }
        let event = Event::new(ctx, EventFlags::DISABLE_TIMING)?;
        event.record(earlier)?;
        later.wait_event(&event)
    };
    let slow = |stream: &Stream| stream.launch_host_func(|| std::thread::sleep(Duration::from_millis(50)));

    let mut x = DeviceBuffer::<f32>::zeroed(&producer, N as usize)?;
    slow(&producer)?;
    // SAFETY: ramp takes (float *, float, unsigned) and writes N elements of `x`.
    unsafe { kernels.ramp.function().launch(&producer, &config, (&mut x, &a, &N)) }?;

    join(&consumer, &producer)?;
    slow(&consumer)?;
    let mut y = x.clone_on(&consumer)?; // cudarc: `consumer.clone_dtod(&x)`
    // SAFETY: accumulate takes (float *, const float *, unsigned) and touches N elements of each.
    unsafe { kernels.accumulate.function().launch(&consumer, &config, (&mut y, &x, &N)) }?;

    join(&producer, &consumer)?;
    let twice = 2.0 * a;
    // SAFETY: as the first launch.
    unsafe { kernels.ramp.function().launch(&producer, &config, (&mut x, &twice, &N)) }?;

    let (y, x) = (y.to_vec()?, x.to_vec()?);
    let wrong = (0..N as usize).find(|&i| y[i] != 2.0 * i as f32 * a || x[i] != i as f32 * twice);
    if let Some(i) = wrong {
        return Err(cuhost::Error::invalid(
            "cudarc_port",
            format!("element {i}: y = {}, x = {} (a use ran out of order)", y[i], x[i]),
        ));
    }
    Ok(y[N as usize - 1])
}

fn panicked() -> cuhost::Error {
    cuhost::Error::invalid("cudarc_port", "a worker thread panicked")
}
