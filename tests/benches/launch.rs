//! The host cost of a kernel launch: `Function::launch` (through `cuLaunchKernelEx`) against
//! raw `cuLaunchKernel` with the same arguments, in the same run.
//!
//! The GPU's own launch rate would hide the host cost, so each timed batch is launched into a
//! stream that is blocked: the stream first waits (`cuStreamWaitValue32`) on a flag in mapped
//! host memory, the batch is queued and timed, then the flag is written and the stream drains.
//! Batches of ours and raw alternate; the table reports the median batch, per launch.

#[path = "../tests/kernels/mod.rs"]
mod kernels;

use cuda_tests::bench::{Row, print_table};
use cuhost::memory::HostAllocFlags;
use cuhost::module::{Function, Module};
use cuhost::stream::StreamWaitValueFlags;
use cuhost::{Context, Device, DeviceBuffer, LaunchConfig, PinnedBuffer, Stream, StreamFlags};
use cuhost_driver_sys as sys;
use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::time::Instant;

/// Launches per timed batch: well below the number of launches a stream can queue.
const BATCH: u32 = 128;
const ROUNDS: usize = 301;

/// Holds a stream still until released.
struct Gate {
    flag: PinnedBuffer<u32>,
    device_flag: sys::CUdeviceptr,
    generation: u32,
}

impl Gate {
    fn new(ctx: &Context) -> cuhost::Result<Gate> {
        let flag = PinnedBuffer::<u32>::with_flags(ctx, 1, HostAllocFlags::DEVICEMAP)?;
        let device_flag = flag.device_ptr(ctx)?;
        Ok(Gate { flag, device_flag, generation: 0 })
    }

    fn close(&mut self, stream: &Stream) -> cuhost::Result<()> {
        self.generation = self.generation.wrapping_add(1);
        // SAFETY: the flag is mapped host memory that lives as long as the gate, and `open`
        // always follows.
        unsafe { stream.wait_value_32(self.device_flag, self.generation, StreamWaitValueFlags::empty()) }
    }

    fn open(&mut self, stream: &Stream) -> cuhost::Result<()> {
        // No copy uses the flag, so this does not wait; the GPU reads it through its mapping.
        let flag = self.flag.as_mut_slice()?.as_mut_ptr();
        // SAFETY: a live, aligned pinned allocation of one u32; the GPU only reads it.
        unsafe { std::ptr::write_volatile(flag, self.generation) };
        stream.synchronize()
    }
}

/// Median nanoseconds per launch of `ours` and `raw`, each timed over `BATCH` launches into a
/// blocked stream.
fn measure(
    name: &str,
    gate: &mut Gate,
    stream: &Stream,
    mut ours: impl FnMut(),
    mut raw: impl FnMut(),
) -> cuhost::Result<Row> {
    let mut a = Vec::with_capacity(ROUNDS);
    let mut b = Vec::with_capacity(ROUNDS);
    let batch = |f: &mut dyn FnMut(), gate: &mut Gate| -> cuhost::Result<f64> {
        gate.close(stream)?;
        let t = Instant::now();
        for _ in 0..BATCH {
            f();
        }
        let ns = t.elapsed().as_nanos() as f64 / f64::from(BATCH);
        gate.open(stream)?;
        Ok(ns)
    };
    for _ in 0..5 {
        batch(&mut ours, gate)?;
        batch(&mut raw, gate)?;
    }
    for r in 0..ROUNDS {
        if r % 2 == 0 {
            a.push(batch(&mut ours, gate)?);
            b.push(batch(&mut raw, gate)?);
        } else {
            b.push(batch(&mut raw, gate)?);
            a.push(batch(&mut ours, gate)?);
        }
    }
    Ok(Row::from_rounds(name, a, b))
}

/// The pointer array of a raw `saxpy(n, a, x, y)` launch.
fn saxpy_args(n: &u32, a: &f32, x: &u64, y: &u64) -> [*mut c_void; 4] {
    [
        (n as *const u32).cast_mut().cast(),
        (a as *const f32).cast_mut().cast(),
        (x as *const u64).cast_mut().cast(),
        (y as *const u64).cast_mut().cast(),
    ]
}

fn check(status: sys::CUresult) {
    if status != sys::CUresult::CUDA_SUCCESS {
        eprintln!("raw launch failed: {:?}", status.name());
        std::process::exit(1);
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("launch benchmark: {e}");
        std::process::exit(1);
    }
}

fn run() -> cuhost::Result<()> {
    let ctx = Context::primary(&Device::get(0)?)?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let saxpy: Function<'_> = module.function("saxpy")?;
    let empty = module.function("empty")?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let mut gate = Gate::new(&ctx)?;
    let n = 1024u32;
    let a = 2.0f32;
    let x = DeviceBuffer::<f32>::zeroed(&stream, n as usize)?;
    let y = DeviceBuffer::<f32>::zeroed(&stream, n as usize)?;
    let (xp, yp) = (x.as_raw(), y.as_raw());
    let config = LaunchConfig::new(4, 256);
    let (f, s) = (saxpy.as_raw(), stream.as_raw());
    let mut rows = Vec::new();

    rows.push(measure(
        "launch saxpy (4 args), blocked stream",
        &mut gate,
        &stream,
        // SAFETY: saxpy takes (u32, f32, f32*, f32*); x and y hold n floats.
        || unsafe { saxpy.launch(&stream, &config, (&n, &a, &xp, &yp)).unwrap_or_else(|e| fail(e)) },
        || {
            let mut args = saxpy_args(&n, &a, &xp, &yp);
            // SAFETY: as above.
            check(unsafe {
                sys::cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, s, args.as_mut_ptr(), std::ptr::null_mut())
            });
        },
    )?);

    let e = empty.as_raw();
    rows.push(measure(
        "launch empty kernel (no args), blocked stream",
        &mut gate,
        &stream,
        // SAFETY: empty takes no parameters.
        || unsafe { empty.launch(&stream, &LaunchConfig::new(1, 32), ()).unwrap_or_else(|e| fail(e)) },
        || {
            // SAFETY: as above.
            check(unsafe {
                sys::cuLaunchKernel(e, 1, 1, 1, 32, 1, 1, 0, s, std::ptr::null_mut(), std::ptr::null_mut())
            });
        },
    )?);

    // For reference: the driver's own cost of the Ex entry point against the classic one.
    rows.push(measure(
        "raw cuLaunchKernelEx vs raw cuLaunchKernel (saxpy)",
        &mut gate,
        &stream,
        || {
            let mut args = saxpy_args(&n, &a, &xp, &yp);
            let mut attrs = [const { MaybeUninit::<sys::CUlaunchAttribute>::uninit() }; 4];
            let raw = sys::CUlaunchConfig {
                gridDimX: 4,
                gridDimY: 1,
                gridDimZ: 1,
                blockDimX: 256,
                blockDimY: 1,
                blockDimZ: 1,
                sharedMemBytes: 0,
                hStream: s,
                attrs: attrs.as_mut_ptr().cast(),
                numAttrs: 0,
            };
            // SAFETY: as above.
            check(unsafe { sys::cuLaunchKernelEx(&raw, f, args.as_mut_ptr(), std::ptr::null_mut()) });
        },
        || {
            let mut args = saxpy_args(&n, &a, &xp, &yp);
            // SAFETY: as above.
            check(unsafe {
                sys::cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, s, args.as_mut_ptr(), std::ptr::null_mut())
            });
        },
    )?);

    // Buffers passed as arguments directly: on their own stream nothing is noted (the cost must
    // stay that of the raw launch); on another stream the launch notes that stream on each
    // buffer (a lock, no event), where raw code that frees safely would record an event on the
    // other stream and make the owner's stream wait for it around each launch.
    let mut y2 = DeviceBuffer::<f32>::zeroed(&stream, n as usize)?;
    let y2p = y2.as_raw();
    // The raw launch of saxpy over `x` and `y2` on `on`.
    let raw_saxpy_y2 = |on: sys::CUstream| {
        let mut args = saxpy_args(&n, &a, &xp, &y2p);
        // SAFETY: saxpy takes (u32, f32, f32*, f32*); x and y2 hold n floats.
        check(unsafe {
            sys::cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, on, args.as_mut_ptr(), std::ptr::null_mut())
        });
    };
    rows.push(measure(
        "launch saxpy (&x, &mut y buffers), same stream",
        &mut gate,
        &stream,
        // SAFETY: as for the first row.
        || unsafe { saxpy.launch(&stream, &config, (&n, &a, &x, &mut y2)).unwrap_or_else(|e| fail(e)) },
        || raw_saxpy_y2(s),
    )?);
    let other = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let o = other.as_raw();
    let event = cuhost::Event::new(&ctx, cuhost::EventFlags::DISABLE_TIMING)?;
    let ev = event.as_raw();
    rows.push(measure(
        "launch saxpy (&x, &mut y buffers), other stream vs raw record+wait+launch",
        &mut gate,
        &other,
        // SAFETY: as for the first row.
        || unsafe { saxpy.launch(&other, &config, (&n, &a, &x, &mut y2)).unwrap_or_else(|e| fail(e)) },
        || {
            raw_saxpy_y2(o);
            // SAFETY: live event and streams.
            check(unsafe { sys::cuEventRecord(ev, o) });
            // SAFETY: as above.
            check(unsafe { sys::cuStreamWaitEvent(s, ev, 0) });
        },
    )?);
    stream.synchronize()?;

    // cudarc's semantics on request (`StreamOrdering::Implicit`): on one stream every launch
    // takes each buffer's lock and queues nothing more; alternating between two streams, each
    // launch first makes its stream wait for the other, which wrote `y` last (one event
    // recorded and waited for), as raw code that orders its streams does by hand.
    cuhost::stream::set_stream_ordering(cuhost::StreamOrdering::Implicit);
    rows.push(measure(
        "launch saxpy (&x, &mut y buffers), same stream, implicit ordering",
        &mut gate,
        &stream,
        // SAFETY: as for the first row.
        || unsafe { saxpy.launch(&stream, &config, (&n, &a, &x, &mut y2)).unwrap_or_else(|e| fail(e)) },
        || raw_saxpy_y2(s),
    )?);
    let mut turn = 0usize;
    let mut raw_turn = 0usize;
    rows.push(measure(
        "launch saxpy (&x, &mut y buffers), two streams in turn, implicit ordering vs raw record+wait+launch",
        &mut gate,
        &stream,
        || {
            turn += 1;
            let on = if turn % 2 == 0 { &stream } else { &other };
            // SAFETY: as for the first row.
            unsafe { saxpy.launch(on, &config, (&n, &a, &x, &mut y2)).unwrap_or_else(|e| fail(e)) }
        },
        || {
            raw_turn += 1;
            let (on, after) = if raw_turn % 2 == 0 { (s, o) } else { (o, s) };
            // SAFETY: live event and streams.
            check(unsafe { sys::cuEventRecord(ev, after) });
            // SAFETY: as above.
            check(unsafe { sys::cuStreamWaitEvent(on, ev, 0) });
            raw_saxpy_y2(on);
        },
    )?);
    cuhost::stream::set_stream_ordering(cuhost::StreamOrdering::Explicit);
    other.synchronize()?;
    stream.synchronize()?;

    let (_, greatest) = ctx.stream_priority_range()?;
    let with_priority = config.priority(greatest);
    rows.push(measure(
        "launch saxpy with a priority attribute vs raw Ex",
        &mut gate,
        &stream,
        // SAFETY: as for the first row.
        || unsafe { saxpy.launch(&stream, &with_priority, (&n, &a, &xp, &yp)).unwrap_or_else(|e| fail(e)) },
        || {
            let mut args = saxpy_args(&n, &a, &xp, &yp);
            let mut attrs = [sys::CUlaunchAttribute {
                id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PRIORITY,
                pad: [0; 4],
                value: sys::CUlaunchAttributeValue { priority: greatest },
            }];
            let raw = sys::CUlaunchConfig {
                gridDimX: 4,
                gridDimY: 1,
                gridDimZ: 1,
                blockDimX: 256,
                blockDimY: 1,
                blockDimZ: 1,
                sharedMemBytes: 0,
                hStream: s,
                attrs: attrs.as_mut_ptr(),
                numAttrs: 1,
            };
            // SAFETY: as above.
            check(unsafe { sys::cuLaunchKernelEx(&raw, f, args.as_mut_ptr(), std::ptr::null_mut()) });
        },
    )?);

    print_table("Kernel launch, host cost per launch (ours = Function::launch)", &rows);
    Ok(())
}

#[cold]
fn fail(e: cuhost::Error) -> ! {
    eprintln!("launch failed: {e}");
    std::process::exit(1)
}
