//! Kernel launches: results read back for plain, dynamic-shared-memory, cooperative, cluster,
//! priority and programmatic-serialization launches, on several kinds of stream.

#[path = "kernels/mod.rs"]
mod kernels;

use cuda_core::driver_sys as sys;
use cuda_core::module::{FunctionAttribute, JitOptions, Library, Module};
use cuda_core::occupancy::OccupancyFlags;
use cuda_core::{Context, Device, DeviceBuffer, Error, LaunchConfig, Stream, StreamFlags};
use cuda_tests::{TestResult, ensure, ensure_eq, gpu};

fn main() {
    cuda_tests::run(&[
        gpu("saxpy_results_are_read_back", saxpy_results_are_read_back),
        gpu("dynamic_shared_memory_reverses_a_block", dynamic_shared_memory_reverses_a_block),
        gpu(
            "cooperative_launch_fits_the_device_or_is_refused",
            cooperative_launch_fits_the_device_or_is_refused,
        ),
        gpu("cluster_launch_on_compute_9_and_later", cluster_launch_on_compute_9_and_later),
        gpu(
            "priority_and_programmatic_serialization_launches",
            priority_and_programmatic_serialization_launches,
        ),
        gpu(
            "launches_on_default_streams_and_from_other_threads",
            launches_on_default_streams_and_from_other_threads,
        ),
        gpu(
            "library_kernel_block_size_is_checked_before_the_launch",
            library_kernel_block_size_is_checked_before_the_launch,
        ),
    ]);
}

fn context() -> Result<Context, cuda_core::Error> {
    Context::primary(&Device::get(0)?)
}

struct Saxpy {
    n: u32,
    x: DeviceBuffer<f32>,
    y: DeviceBuffer<f32>,
}

impl Saxpy {
    fn new(ctx: &Context, n: u32) -> Result<Saxpy, cuda_core::Error> {
        let x = DeviceBuffer::from_slice(ctx, &(0..n).map(|i| i as f32).collect::<Vec<_>>())?;
        let y = DeviceBuffer::from_slice(ctx, &vec![1.0f32; n as usize])?;
        Ok(Saxpy { n, x, y })
    }

    /// y = a*x + y, once per launch that ran.
    fn check(&self, a: f32, launches: u32) -> TestResult {
        let expected: Vec<f32> = (0..self.n).map(|i| launches as f32 * a * i as f32 + 1.0).collect();
        ensure_eq!(self.y.to_vec()?, expected);
        Ok(())
    }
}

fn saxpy_results_are_read_back() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let saxpy = module.function("saxpy")?;
    let s = Saxpy::new(&ctx, 100_000)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let (a, xp, yp) = (2.0f32, s.x.device_ptr(), s.y.device_ptr());
    // SAFETY: saxpy takes (u32, f32, f32*, f32*); x and y hold n floats.
    unsafe {
        saxpy.launch(&stream, &LaunchConfig::for_elements(s.n, 256), (&s.n, &a, &xp, &yp))?;
        // A 2D grid covers the same threads when its x extent does.
        saxpy.launch(
            &stream,
            &LaunchConfig::new((s.n.div_ceil(128), 1), (128, 1, 1)),
            (&s.n, &a, &xp, &yp),
        )?;
    }
    stream.synchronize()?;
    s.check(a, 2)?;
    // No arguments at all.
    // SAFETY: empty takes no parameters.
    unsafe { module.function("empty")?.launch(&stream, &LaunchConfig::new(1, 1), ())? };
    stream.synchronize()?;
    Ok(())
}

fn dynamic_shared_memory_reverses_a_block() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let reverse = module.function("reverse")?;
    let n = 512u32;
    let host: Vec<u32> = (0..n).map(|i| i * 7 + 3).collect();
    let input = DeviceBuffer::from_slice(&ctx, &host)?;
    let output = DeviceBuffer::<u32>::zeroed(&ctx, n as usize)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let (ip, op) = (input.device_ptr(), output.device_ptr());
    let config = LaunchConfig::new(1, n).shared_mem_bytes(n * 4);
    // SAFETY: reverse takes (u32*, u32*), each with ntid.x words, and ntid.x*4 bytes of shared memory.
    unsafe { reverse.launch(&stream, &config, (&ip, &op))? };
    stream.synchronize()?;
    let mut expected = host.clone();
    expected.reverse();
    ensure_eq!(output.to_vec()?, expected);
    Ok(())
}

fn cooperative_launch_fits_the_device_or_is_refused() -> TestResult {
    let ctx = context()?;
    let device = ctx.device();
    if device.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH)? == 0 {
        return Ok(());
    }
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let saxpy = module.function("saxpy")?;
    let block = 256u32;
    let per_sm = saxpy.max_active_blocks_per_multiprocessor(block, 0, OccupancyFlags::empty())?;
    let sms = device.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
    let resident = per_sm * sms;
    ensure!(resident > 0, "{per_sm} blocks per SM on {sms} SMs");
    let s = Saxpy::new(&ctx, resident * block)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let (a, xp, yp) = (3.0f32, s.x.device_ptr(), s.y.device_ptr());
    // SAFETY: as in saxpy_results_are_read_back; the grid covers exactly n elements.
    unsafe { saxpy.launch_cooperative(&stream, &LaunchConfig::new(resident, block), (&s.n, &a, &xp, &yp))? };
    stream.synchronize()?;
    s.check(a, 1)?;
    // One block more than can be resident is refused, and the context stays usable.
    // SAFETY: as above; the extra block's threads are past n and do nothing.
    let too_large = unsafe {
        saxpy.launch_cooperative(&stream, &LaunchConfig::new(resident + 1, block), (&s.n, &a, &xp, &yp))
    };
    ensure_eq!(
        too_large.err().and_then(|e| e.driver_status()),
        Some(sys::CUresult::CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE)
    );
    stream.synchronize()?;
    s.check(a, 1)?;
    Ok(())
}

fn cluster_launch_on_compute_9_and_later() -> TestResult {
    let ctx = context()?;
    if ctx.device().compute_capability()?.0 < 9 {
        return Ok(());
    }
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let saxpy = module.function("saxpy")?;
    let s = Saxpy::new(&ctx, 64 * 128)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let (a, xp, yp) = (0.5f32, s.x.device_ptr(), s.y.device_ptr());
    let config = LaunchConfig::new(64, 128).cluster(4);
    // SAFETY: as in saxpy_results_are_read_back.
    unsafe { saxpy.launch(&stream, &config, (&s.n, &a, &xp, &yp))? };
    stream.synchronize()?;
    s.check(a, 1)?;
    // A grid that is not a multiple of the cluster is refused by the driver.
    // SAFETY: as above.
    let uneven =
        unsafe { saxpy.launch(&stream, &LaunchConfig::new(63, 128).cluster(4), (&s.n, &a, &xp, &yp)) };
    ensure!(uneven.is_err(), "63 blocks in clusters of 4 must be refused");
    stream.synchronize()?;
    s.check(a, 1)?;
    Ok(())
}

fn priority_and_programmatic_serialization_launches() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let saxpy = module.function("saxpy")?;
    let s = Saxpy::new(&ctx, 10_000)?;
    let (least, greatest) = ctx.stream_priority_range()?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let (a, xp, yp) = (1.0f32, s.x.device_ptr(), s.y.device_ptr());
    let base = LaunchConfig::for_elements(s.n, 256);
    // SAFETY: as in saxpy_results_are_read_back.
    unsafe {
        saxpy.launch(&stream, &base.priority(greatest), (&s.n, &a, &xp, &yp))?;
        saxpy.launch(&stream, &base.priority(least), (&s.n, &a, &xp, &yp))?;
        if ctx.device().compute_capability()?.0 >= 9 {
            saxpy.launch(&stream, &base.programmatic_stream_serialization(true), (&s.n, &a, &xp, &yp))?;
        } else {
            saxpy.launch(&stream, &base, (&s.n, &a, &xp, &yp))?;
        }
    }
    stream.synchronize()?;
    s.check(a, 3)?;
    Ok(())
}

fn launches_on_default_streams_and_from_other_threads() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let saxpy = module.function("saxpy")?;
    let s = Saxpy::new(&ctx, 5000)?;
    let (a, xp, yp) = (1.0f32, s.x.device_ptr(), s.y.device_ptr());
    let config = LaunchConfig::for_elements(s.n, 128);
    let legacy = Stream::legacy(&ctx);
    let per_thread = Stream::per_thread(&ctx);
    // SAFETY: as in saxpy_results_are_read_back.
    unsafe {
        saxpy.launch(&legacy, &config, (&s.n, &a, &xp, &yp))?;
    }
    legacy.synchronize()?;
    // SAFETY: as above.
    unsafe { saxpy.launch(&per_thread, &config, (&s.n, &a, &xp, &yp))? };
    per_thread.synchronize()?;
    // A thread on which no context is current launches on a created stream.
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    std::thread::scope(|scope| {
        scope
            .spawn(|| -> TestResult {
                // SAFETY: as above.
                unsafe { saxpy.launch(&stream, &config, (&s.n, &a, &xp, &yp))? };
                stream.synchronize()?;
                Ok(())
            })
            .join()
            .map_err(|_| "the launching thread panicked")?
    })?;
    s.check(a, 3)?;
    Ok(())
}

fn library_kernel_block_size_is_checked_before_the_launch() -> TestResult {
    let ctx = context()?;
    let device = ctx.device();
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let library = Library::from_ptx(kernels::PTX, &JitOptions::new())?;
    let saxpy = library.kernel("saxpy")?;
    let max = saxpy.max_threads_per_block(&device)?;
    ensure_eq!(i64::from(max), i64::from(saxpy.attribute(FunctionAttribute::MaxThreadsPerBlock, &device)?));
    ensure!(
        max > 0 && i64::from(max) <= i64::from(device.max_threads_per_block()?),
        "a kernel limit of {max} threads per block"
    );
    ensure_eq!(saxpy.max_threads_per_block(&device)?, max);
    let s = Saxpy::new(&ctx, 3 * max)?;
    let (a, xp, yp) = (4.0f32, s.x.device_ptr(), s.y.device_ptr());
    // Twice the limit, on a fresh kernel value (nothing remembered yet) and on the one that
    // has asked already; a zero dimension too.
    for (kernel, block) in [(library.kernel("saxpy")?, (max, 2, 1)), (saxpy.clone(), (max, 1, 2))] {
        // SAFETY: saxpy takes (u32, f32, f32*, f32*); x and y hold n floats; refused before the call.
        let refused = unsafe { kernel.launch(&stream, &LaunchConfig::new(3, block), (&s.n, &a, &xp, &yp)) };
        match refused {
            Err(e @ Error::InvalidArgument { .. }) => {
                ensure!(e.to_string().contains(&format!("{} threads", 2 * max)), "{e}")
            }
            other => return Err(format!("expected InvalidArgument, got {other:?}").into()),
        }
    }
    // SAFETY: as above.
    let zero = unsafe { saxpy.launch(&stream, &LaunchConfig::new(3, (max, 0, 1)), (&s.n, &a, &xp, &yp)) };
    ensure!(matches!(zero, Err(Error::InvalidArgument { .. })), "{zero:?}");
    // Nothing ran, and the context is usable: a block of exactly the limit launches.
    stream.synchronize()?;
    s.check(a, 0)?;
    // SAFETY: as above; 3 blocks of `max` threads cover the 3 * max elements.
    unsafe { saxpy.launch(&stream, &LaunchConfig::new(3, max), (&s.n, &a, &xp, &yp))? };
    stream.synchronize()?;
    s.check(a, 1)?;
    Ok(())
}
