//! An LLM-style decode step captured once and replayed: each step allocates its temporaries,
//! runs a few kernels on two streams (forked and joined with events), copies a small result
//! out and frees the temporaries. Captured, the allocations and frees become graph memory
//! nodes (at the same addresses at every launch), and what the step uses is held by the graph;
//! nothing is `unsafe` but the kernel launches. Every step's result is checked; the replay is
//! timed against the same kernels run eagerly.
//!
//! ```sh
//! cargo run --release --example graph_decode -- 200 4096   # steps, width of the hidden state
//! ```
//!
//! The step, for an input `x` of `width` floats:
//!
//! ```text
//! h  = 2x + 1                  (main stream)
//! sq = h * h                   (side stream, forked after h)
//! sc = 3h                      (main stream, beside it)
//! partial[b] = sum over block b of (sq + sc)   (main stream, after joining the side stream)
//! ```
//!
//! and `partial` (one float per block of 256) is the small result copied to the host.

use cuhost::compile::{Arch, CompileOptions, Program};
use cuhost::graph::{CaptureMode, GraphExec, InstantiateFlags};
use cuhost::module::Function;
use cuhost::{
    Context, Device, DeviceBuffer, Error, Event, EventFlags, LaunchConfig, PinnedBuffer, Stream, StreamFlags,
};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const SOURCE: &str = r#"
extern "C" __global__ void affine(const float *x, float *y, float a, float b, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b;
}

extern "C" __global__ void square(const float *x, float *y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * x[i];
}

// One block of 256 threads per 256 elements: partial[block] = sum of p + q over the block.
extern "C" __global__ void add_reduce(const float *p, const float *q, float *partial, unsigned n) {
    __shared__ float s[256];
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? p[i] + q[i] : 0.0f;
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}
"#;

/// Threads per block, and elements per partial sum.
const BLOCK: u32 = 256;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1).map(|s| s.parse::<usize>().ok());
    let steps = args.next().flatten().unwrap_or(200);
    let width = args.next().flatten().unwrap_or(4096);
    // The default pools' cache goes back at the end, so that a leak checker sees only real leaks.
    match run(steps, width).and_then(|()| cuhost::pool::release_default_pools()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("graph_decode: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The compiled kernels of one step.
struct Kernels<'m> {
    affine: Function<'m>,
    square: Function<'m>,
    add_reduce: Function<'m>,
}

/// What a step runs on: two streams, the events that fork and join them, the input and the
/// output the host writes and reads.
struct Decoder<'m> {
    kernels: Kernels<'m>,
    main: Stream,
    side: Stream,
    fork: Event,
    join: Event,
    input: PinnedBuffer<f32>,
    output: PinnedBuffer<f32>,
    width: u32,
}

impl Decoder<'_> {
    /// Queues one step: allocates the temporaries on the streams that use them, runs the
    /// kernels, copies the partial sums out and drops the temporaries.
    fn step(&mut self) -> cuhost::Result<()> {
        let n = self.width;
        let blocks = n.div_ceil(BLOCK);
        let config = LaunchConfig::for_elements(n, BLOCK);
        let reduce = LaunchConfig::for_elements(blocks * BLOCK, BLOCK);
        let k = &self.kernels;
        let mut x = DeviceBuffer::<f32>::new(&self.main, n as usize)?;
        x.copy_from_pinned_async(&self.input, &self.main)?;
        let mut h = DeviceBuffer::<f32>::new(&self.main, n as usize)?;
        // SAFETY: each kernel's parameters are the arguments given, in order and type; the
        // buffers hold `n` floats (`partial`, `blocks`); the module outlives every launch and
        // every graph made of them (`run` declares it first).
        unsafe { k.affine.launch(&self.main, &config, (&x, &mut h, &2.0f32, &1.0f32, &n))? };
        drop(x);
        self.fork.record(&self.main)?;
        self.side.wait_event(&self.fork)?;
        let mut sq = DeviceBuffer::<f32>::new(&self.side, n as usize)?;
        // SAFETY: as above.
        unsafe { k.square.launch(&self.side, &config, (&h, &mut sq, &n))? };
        let mut sc = DeviceBuffer::<f32>::new(&self.main, n as usize)?;
        // SAFETY: as above.
        unsafe { k.affine.launch(&self.main, &config, (&h, &mut sc, &3.0f32, &0.0f32, &n))? };
        self.join.record(&self.side)?;
        self.main.wait_event(&self.join)?;
        let mut partial = DeviceBuffer::<f32>::new(&self.main, blocks as usize)?;
        // SAFETY: as above.
        unsafe { k.add_reduce.launch(&self.main, &reduce, (&sq, &sc, &mut partial, &n))? };
        partial.copy_to_pinned_async(&mut self.output, &self.main)?;
        // The temporaries go back in their streams' order (free nodes when captured): `h` and
        // `sq` after the side stream's work, which they are ordered after by themselves.
        drop((h, sq, sc, partial));
        Ok(())
    }

    /// Writes the input of step `t` (waits for the step before, which reads it).
    fn set_input(&mut self, t: usize) -> cuhost::Result<()> {
        let mut input = self.input.as_mut_slice()?;
        for (i, v) in input.iter_mut().enumerate() {
            *v = input_value(t, i);
        }
        Ok(())
    }

    /// Checks the output of step `t` (waits for the step).
    fn check(&self, t: usize) -> cuhost::Result<()> {
        let output = self.output.as_slice()?;
        let expected = expected_partials(t, self.width as usize);
        match output.iter().zip(&expected).position(|(o, e)| o != e) {
            None => Ok(()),
            Some(b) => Err(Error::invalid(
                "graph_decode",
                format!("step {t}: partial sum {b} is {} where {} was expected", output[b], expected[b]),
            )),
        }
    }
}

/// The input element `i` of step `t`: small integers, so that every sum is exact in `f32`.
fn input_value(t: usize, i: usize) -> f32 {
    ((t % 10) + (i % 7)) as f32
}

/// The partial sums the step computes for the input of step `t`, on the host.
fn expected_partials(t: usize, width: usize) -> Vec<f32> {
    (0..width.div_ceil(BLOCK as usize))
        .map(|b| {
            (b * BLOCK as usize..((b + 1) * BLOCK as usize).min(width))
                .map(|i| {
                    let h = 2.0 * input_value(t, i) + 1.0;
                    h * h + 3.0 * h
                })
                .sum()
        })
        .collect()
}

fn run(steps: usize, width: usize) -> cuhost::Result<()> {
    let device = Device::get(0)?;
    let ctx = Context::primary(&device)?;
    let compiled =
        Program::new(SOURCE).named("decode.cu").compile(Arch::of(&device)?, &CompileOptions::new())?;
    let module = compiled.load(&ctx)?;
    let kernels = Kernels {
        affine: module.function("affine")?,
        square: module.function("square")?,
        add_reduce: module.function("add_reduce")?,
    };
    let width =
        u32::try_from(width).map_err(|_| Error::invalid("graph_decode", "the width must fit in 32 bits"))?;
    let blocks = width.div_ceil(BLOCK) as usize;
    let mut d = Decoder {
        kernels,
        main: Stream::new(&ctx, StreamFlags::NON_BLOCKING)?,
        side: Stream::new(&ctx, StreamFlags::NON_BLOCKING)?,
        fork: Event::new(&ctx, EventFlags::DISABLE_TIMING)?,
        join: Event::new(&ctx, EventFlags::DISABLE_TIMING)?,
        input: PinnedBuffer::new(width as usize)?,
        output: PinnedBuffer::new(blocks)?,
        width,
    };

    // Eager: every step allocates, launches, copies out and frees as it goes.
    d.set_input(0)?;
    d.step()?;
    d.check(0)?;
    let start = Instant::now();
    for t in 0..steps {
        d.set_input(t)?;
        d.step()?;
        d.check(t)?;
    }
    let eager = start.elapsed();

    // Captured once; the graph holds the pinned buffers, and the temporaries are its memory.
    let start = Instant::now();
    let capture = d.main.begin_capture(CaptureMode::ThreadLocal)?;
    d.step()?;
    let graph = capture.end()?;
    let exec: GraphExec = graph.instantiate(InstantiateFlags::empty())?;
    exec.upload(&d.main)?;
    let captured = start.elapsed();
    d.set_input(0)?;
    exec.launch(&d.main)?;
    d.check(0)?;
    let start = Instant::now();
    for t in 0..steps {
        d.set_input(t)?;
        exec.launch(&d.main)?;
        d.check(t)?;
    }
    let replayed = start.elapsed();
    d.main.synchronize()?;

    println!("decode step: width {width}, {steps} steps, every partial sum checked");
    println!("  capture + instantiate: {:>9.1} us", micros(captured));
    println!("  eager:                 {:>9.1} us per step", micros(eager) / steps as f64);
    println!("  graph replay:          {:>9.1} us per step", micros(replayed) / steps as f64);
    println!(
        "  replay is {:.2}x the eager step's speed",
        micros(eager) / micros(replayed).max(f64::MIN_POSITIVE)
    );
    drop((exec, graph));
    Ok(())
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
