//! A multi-stream pipeline: N chunks copied in, computed on and copied out on three streams, so
//! that one chunk's copies overlap another's kernel; checked element by element and timed
//! against the same work on one stream. Then the same pipeline captured into a graph (forked
//! to the three streams and joined back with events) and replayed with new inputs each time.
//!
//! ```sh
//! cargo run --release --example pipeline -- 64 262144   # chunks, elements per chunk
//! ```
//!
//! Where each thing lives: every chunk's device memory is allocated on the stream that uses it
//! (so it is freed in that stream's order, with nothing to record), the pinned host buffers are
//! read and written by the host only through `as_slice`/`as_mut_slice` (which wait for the
//! copies and graph launches that use them), and the kernel is a `SharedFunction` kept next to
//! the streams.

use cuhost::graph::{CaptureMode, InstantiateFlags};
use cuhost::module::{Module, SharedFunction};
use cuhost::{
    Context, Device, DeviceBuffer, Error, Event, EventFlags, LaunchConfig, PinnedBuffer, Stream, StreamFlags,
};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

/// `saxpy(u32 n, f32 a, const f32* x, f32* y)`, shared by the examples that launch it.
const PTX: &str = include_str!("kernels/saxpy.ptx");

/// The scale of `y = A * x + y`, with `y` zeroed first.
const A: f32 = 3.0;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1).map(|s| s.parse::<usize>().ok());
    let chunks = args.next().flatten().unwrap_or(64);
    let len = args.next().flatten().unwrap_or(1 << 18);
    // The default pools cache freed blocks for reuse: give them back before exiting, so
    // that a leak checker (compute-sanitizer --leak-check full) sees only real leaks.
    match run(chunks, len).and_then(|r| cuhost::pool::release_default_pools().map(|()| r)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pipeline: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One chunk: its pinned input and output on the host, its device memory, and the stream it
/// runs on.
struct Chunk {
    input: PinnedBuffer<f32>,
    output: PinnedBuffer<f32>,
    x: DeviceBuffer<f32>,
    y: DeviceBuffer<f32>,
    stream: usize,
}

/// The application: its streams and its kernel, side by side.
struct Pipeline {
    streams: Vec<Stream>,
    saxpy: SharedFunction,
    chunks: Vec<Chunk>,
    len: u32,
}

impl Pipeline {
    fn new(ctx: &Context, chunks: usize, len: usize) -> cuhost::Result<Pipeline> {
        let len32 = u32::try_from(len)
            .map_err(|_| Error::invalid("pipeline", "a chunk holds at most 2^32 - 1 elements"))?;
        let module = Arc::new(Module::from_ptx(ctx, PTX)?);
        let streams = (0..3)
            .map(|_| Stream::new(ctx, StreamFlags::NON_BLOCKING))
            .collect::<cuhost::Result<Vec<_>>>()?;
        let chunks = (0..chunks)
            .map(|i| {
                let stream = i % streams.len();
                Ok(Chunk {
                    input: PinnedBuffer::new(len)?,
                    output: PinnedBuffer::new(len)?,
                    // Allocated on the stream that uses them: freed in its order.
                    x: DeviceBuffer::new(&streams[stream], len)?,
                    y: DeviceBuffer::new(&streams[stream], len)?,
                    stream,
                })
            })
            .collect::<cuhost::Result<Vec<_>>>()?;
        Ok(Pipeline { saxpy: module.shared_function("saxpy")?, streams, chunks, len: len32 })
    }

    /// Writes each chunk's input: element `j` of chunk `i` is `i + j / 1024 + round`.
    fn fill(&mut self, round: u32) -> cuhost::Result<()> {
        for (i, chunk) in self.chunks.iter_mut().enumerate() {
            // Waits for the copies (or graph launches) still reading the input.
            for (j, v) in chunk.input.as_mut_slice()?.iter_mut().enumerate() {
                *v = (i + j / 1024) as f32 + round as f32;
            }
        }
        Ok(())
    }

    /// Queues every chunk: copy in, zero y, y = A*x + y, copy out, each on its chunk's stream
    /// (or all on stream 0 when `one_stream`).
    fn enqueue(&mut self, one_stream: bool) -> cuhost::Result<()> {
        let config = LaunchConfig::for_elements(self.len, 256);
        for chunk in &mut self.chunks {
            let stream = &self.streams[if one_stream { 0 } else { chunk.stream }];
            chunk.x.copy_from_pinned_async(&chunk.input, stream)?;
            chunk.y.view_mut().memset_d32_async(0, stream)?;
            // SAFETY: saxpy(u32 n, f32 a, const f32* x, f32* y) over `len` elements of both.
            unsafe {
                self.saxpy.function().launch(stream, &config, (&self.len, &A, &chunk.x, &mut chunk.y))?
            };
            chunk.y.copy_to_pinned_async(&mut chunk.output, stream)?;
        }
        Ok(())
    }

    /// Counts the outputs that are not `A * input`; waits for the copies writing them.
    fn wrong(&self) -> cuhost::Result<usize> {
        let mut wrong = 0;
        for chunk in &self.chunks {
            let (input, output) = (chunk.input.as_slice()?, chunk.output.as_slice()?);
            wrong += input.iter().zip(output.iter()).filter(|&(x, y)| *y != A * x).count();
        }
        Ok(wrong)
    }

    fn synchronize(&self) -> cuhost::Result<()> {
        self.streams.iter().try_for_each(Stream::synchronize)
    }
}

fn check(what: &str, wrong: usize) -> cuhost::Result<()> {
    if wrong == 0 {
        Ok(())
    } else {
        Err(Error::invalid("pipeline", format!("{what}: {wrong} elements differ from the host")))
    }
}

fn run(chunks: usize, len: usize) -> cuhost::Result<()> {
    let ctx = Context::primary(&Device::get(0)?)?;
    let mut p = Pipeline::new(&ctx, chunks, len)?;
    let mib = (chunks * len * 4) as f64 / (1 << 20) as f64;

    // Warm up, then time three streams against one.
    p.fill(0)?;
    p.enqueue(false)?;
    p.synchronize()?;
    let mut times = Vec::new();
    for one_stream in [false, true] {
        p.fill(1)?;
        let start = Instant::now();
        p.enqueue(one_stream)?;
        p.synchronize()?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
        check(if one_stream { "one stream" } else { "three streams" }, p.wrong()?)?;
    }
    println!(
        "{chunks} chunks of {len} floats ({mib:.0} MiB each way): three streams {:.2} ms, one stream {:.2} ms, all elements right",
        times[0], times[1]
    );

    // The same pipeline as a graph: captured on stream 0, forked to the others and joined back
    // through events (the capture holds its own stream handle, so `p`'s methods run meanwhile).
    let fork = Event::new(&ctx, EventFlags::DISABLE_TIMING)?;
    let joins = (1..p.streams.len())
        .map(|_| Event::new(&ctx, EventFlags::DISABLE_TIMING))
        .collect::<cuhost::Result<Vec<_>>>()?;
    let capture = p.streams[0].begin_capture(CaptureMode::ThreadLocal)?;
    fork.record(&p.streams[0])?;
    for stream in &p.streams[1..] {
        stream.wait_event(&fork)?;
    }
    p.enqueue(false)?;
    for (stream, join) in p.streams[1..].iter().zip(&joins) {
        join.record(stream)?;
        p.streams[0].wait_event(join)?;
    }
    let graph = capture.end()?;
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    let rounds = 5;
    let start = Instant::now();
    for round in 0..rounds {
        // Waits for the previous launch, which reads the inputs.
        p.fill(10 + round)?;
        exec.launch(&p.streams[0])?;
        // Waits for this launch, which writes the outputs.
        check("graph replay", p.wrong()?)?;
    }
    println!(
        "the pipeline as a graph of {} nodes: {rounds} replays with new inputs, {:.2} ms each with the checks, all elements right",
        graph.nodes()?.len(),
        start.elapsed().as_secs_f64() * 1e3 / f64::from(rounds)
    );
    drop((exec, graph));
    Ok(())
}
