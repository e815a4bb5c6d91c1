//! An async service on the GPU: N concurrent requests, each copied to the device, squared by
//! a kernel and copied back on a stream from a small pool, every answer checked, served three
//! ways and timed:
//!
//! * **async**: tokio tasks that `.await` the copy back (`DeviceBuffer::to_vec_async`); two
//!   worker threads serve every request, none blocks;
//! * **thread per request**: one OS thread per request, blocked in the synchronous copy back;
//! * **spawn_blocking**: tokio tasks that hand the request to `spawn_blocking`, where it
//!   blocks in `Stream::synchronize`.
//!
//! ```sh
//! cargo run --release -p cuda-tests --example async_service -- 1000 16384 4   # requests, elements, streams
//! ```
//!
//! It prints one line per variant: requests per second and the time taken. The kernel is
//! compiled with NVRTC at start. Each request's input is pinned host memory
//! (`PinnedBuffer::from_fn`), copied in with `copy_from_pinned_async`; its device buffers are
//! allocated on the request's stream, so they are freed in that stream's order.

use cuhost::compile::{Arch, CompileOptions, Program};
use cuhost::module::SharedFunction;
use cuhost::{Context, Device, DeviceBuffer, Error, LaunchConfig, PinnedBuffer, Result, Stream, StreamFlags};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SOURCE: &str = r#"
// y = x * x + k over n elements.
extern "C" __global__ void square_plus(const float *x, float *y, unsigned n, float k) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * x[i] + k;
}
"#;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1).map(|s| s.parse::<usize>().ok());
    let requests = args.next().flatten().unwrap_or(1000);
    let len = args.next().flatten().unwrap_or(1 << 14);
    let streams = args.next().flatten().unwrap_or(4).max(1);
    // The default pools' cache goes back at the end, so that a leak checker sees only real leaks.
    match run(requests, len, streams).and_then(|()| cuhost::pool::release_default_pools()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("async_service: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What every request needs: the context, the stream pool and the kernel.
struct Service {
    ctx: Context,
    streams: Vec<Stream>,
    kernel: SharedFunction,
    len: usize,
}

/// Request `i`'s input: small whole numbers, so that the answers are exact in f32.
fn input(i: usize, j: usize) -> f32 {
    ((i + j) % 64) as f32
}

impl Service {
    fn new(streams: usize, len: usize) -> Result<Arc<Service>> {
        let device = Device::get(0)?;
        let ctx = Context::primary(&device)?;
        let compiled = Program::new(SOURCE)
            .named("square_plus.cu")
            .compile(Arch::of(&device)?, &CompileOptions::new())?;
        let module = Arc::new(compiled.load(&ctx)?);
        let kernel = compiled.shared_function(&module, "square_plus")?;
        let streams =
            (0..streams).map(|_| Stream::new(&ctx, StreamFlags::NON_BLOCKING)).collect::<Result<_>>()?;
        Ok(Arc::new(Service { ctx, streams, kernel, len }))
    }

    /// Queues request `i` on its stream: the input copied in, the kernel; returns the output
    /// buffer (the input buffers go back in the stream's order, after the kernel).
    fn queue(&self, i: usize) -> Result<(DeviceBuffer<f32>, &Stream)> {
        self.ctx.bind_to_thread()?;
        let stream = &self.streams[i % self.streams.len()];
        let host = PinnedBuffer::from_fn(self.len, |j| input(i, j))?;
        let mut x = DeviceBuffer::<f32>::new(stream, self.len)?;
        x.copy_from_pinned_async(&host, stream)?;
        let mut y = DeviceBuffer::<f32>::new(stream, self.len)?;
        let n = u32::try_from(self.len).map_err(|_| Error::invalid("async_service", "too many elements"))?;
        // SAFETY: square_plus(const float*, float*, unsigned, float) touches `n` elements of
        // `x` and `y`, both `n` long.
        unsafe {
            self.kernel.function().launch(
                stream,
                &LaunchConfig::for_elements(n, 256),
                (&x, &mut y, &n, &(i as f32)),
            )?
        };
        Ok((y, stream))
    }

    /// Whether `answer` is request `i`'s.
    fn check(&self, i: usize, answer: &[f32]) -> Result<()> {
        let right = answer.len() == self.len
            && answer.iter().enumerate().all(|(j, &y)| y == input(i, j) * input(i, j) + i as f32);
        if right {
            Ok(())
        } else {
            Err(Error::invalid("async_service", format!("request {i} got a wrong answer")))
        }
    }

    /// The async request: nothing blocks the task's worker thread.
    async fn serve_async(self: Arc<Self>, i: usize) -> Result<()> {
        let (y, stream) = self.queue(i)?;
        let answer = y.to_vec_async(stream)?.await?;
        self.check(i, &answer)
    }

    /// The blocking request: the thread waits in the synchronous copy back.
    fn serve_blocking(&self, i: usize) -> Result<()> {
        let (y, stream) = self.queue(i)?;
        stream.synchronize()?;
        let answer = y.to_vec()?;
        self.check(i, &answer)
    }
}

fn run(requests: usize, len: usize, streams: usize) -> Result<()> {
    let service = Service::new(streams, len)?;
    println!("{requests} requests of {len} elements over {streams} streams");
    // A warm-up pass fills the pools, so that no variant pays for first allocations.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .map_err(|e| Error::invalid("tokio", e.to_string()))?;
    serve_async(&runtime, &service, requests.min(64))?;

    let t = Instant::now();
    serve_async(&runtime, &service, requests)?;
    report("async (to_vec_async on 2 tokio workers)", requests, t.elapsed());

    let t = Instant::now();
    std::thread::scope(|scope| {
        let service = &service;
        let threads: Vec<_> =
            (0..requests).map(|i| (i, scope.spawn(move || service.serve_blocking(i)))).collect();
        threads.into_iter().try_for_each(|(i, t)| {
            t.join().map_err(|_| Error::invalid("async_service", format!("request {i}'s thread panicked")))?
        })
    })?;
    report("a blocking thread per request", requests, t.elapsed());

    let t = Instant::now();
    runtime.block_on(async {
        let tasks: Vec<_> = (0..requests)
            .map(|i| {
                let s = Arc::clone(&service);
                tokio::task::spawn_blocking(move || s.serve_blocking(i))
            })
            .collect();
        for task in tasks {
            task.await.map_err(|e| Error::invalid("tokio", e.to_string()))??;
        }
        Ok::<(), Error>(())
    })?;
    report("spawn_blocking + synchronize", requests, t.elapsed());
    Ok(())
}

fn serve_async(runtime: &tokio::runtime::Runtime, service: &Arc<Service>, requests: usize) -> Result<()> {
    runtime.block_on(async {
        let tasks: Vec<_> = (0..requests).map(|i| tokio::spawn(Arc::clone(service).serve_async(i))).collect();
        for task in tasks {
            task.await.map_err(|e| Error::invalid("tokio", e.to_string()))??;
        }
        Ok(())
    })
}

fn report(variant: &str, requests: usize, took: Duration) {
    println!(
        "{variant:<42} {:>10.0} requests/s ({requests} answers checked in {:.1} ms)",
        requests as f64 / took.as_secs_f64(),
        took.as_secs_f64() * 1e3
    );
}
