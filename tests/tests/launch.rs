//! Kernel launches: results read back for plain, dynamic-shared-memory, cooperative, cluster,
//! priority and programmatic-serialization launches, on several kinds of stream; buffers and
//! views as arguments; arguments checked against the kernel's parameter layout.

#[path = "kernels/mod.rs"]
mod kernels;

use cuda_tests::{TestResult, ensure, ensure_eq, gpu, gpu_needing};
use cuhost::driver_sys as sys;
use cuhost::graph::Graph;
use cuhost::module::{FunctionAttribute, JitOptions, Library, Module};
use cuhost::occupancy::OccupancyFlags;
use cuhost::stream::{AccessPolicyWindow, AccessProperty};
use cuhost::{
    ClusterScheduling, Context, Device, DeviceBuffer, Error, Event, EventFlags, LaunchConfig, MemSyncDomain,
    MemSyncDomainMap, Stream, StreamFlags, SyncPolicy,
};

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
            "scheduling_domain_and_carveout_attributes_launch",
            scheduling_domain_and_carveout_attributes_launch,
        ),
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
        gpu(
            "buffers_views_and_raw_addresses_as_arguments_write_the_right_values",
            buffers_views_and_raw_addresses_as_arguments_write_the_right_values,
        ),
        gpu(
            "function_arguments_that_do_not_match_the_parameters_are_refused",
            function_arguments_that_do_not_match_the_parameters_are_refused,
        ),
        gpu(
            "library_kernel_arguments_that_do_not_match_the_parameters_are_refused",
            library_kernel_arguments_that_do_not_match_the_parameters_are_refused,
        ),
        gpu_needing(
            "programmatic_dependent_launch_overlaps_two_kernels",
            compute_9,
            programmatic_dependent_launch_overlaps_two_kernels,
        ),
        gpu_needing(
            "programmatic_event_lets_another_stream_start_early",
            compute_9,
            programmatic_event_lets_another_stream_start_early,
        ),
        gpu_needing(
            "launch_completion_event_fires_while_the_kernel_runs",
            compute_9,
            launch_completion_event_fires_while_the_kernel_runs,
        ),
        gpu("access_policy_window_launch_reads_back_right", access_policy_window_launch_reads_back_right),
        gpu("sync_policy_and_nvlink_scheduling_launches", sync_policy_and_nvlink_scheduling_launches),
        gpu_needing("mem_sync_domain_map_launch", compute_9, mem_sync_domain_map_launch),
        gpu(
            "bad_attribute_values_are_refused_before_the_launch",
            bad_attribute_values_are_refused_before_the_launch,
        ),
        gpu("a_padded_struct_passes_by_value", a_padded_struct_passes_by_value),
    ]);
}

fn context() -> Result<Context, cuhost::Error> {
    Context::primary(&Device::get(0)?)
}

struct Saxpy {
    n: u32,
    x: DeviceBuffer<f32>,
    y: DeviceBuffer<f32>,
}

impl Saxpy {
    /// Buffers on the legacy default stream; the tests synchronize their launch streams before
    /// checking.
    fn new(ctx: &Context, n: u32) -> Result<Saxpy, cuhost::Error> {
        let legacy = Stream::legacy(ctx);
        let x = DeviceBuffer::from_slice(&legacy, &(0..n).map(|i| i as f32).collect::<Vec<_>>())?;
        let y = DeviceBuffer::from_slice(&legacy, &vec![1.0f32; n as usize])?;
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
    let mut s = Saxpy::new(&ctx, 100_000)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let a = 2.0f32;
    // SAFETY: saxpy takes (u32, f32, f32*, f32*); x and y hold n floats.
    unsafe {
        saxpy.launch(&stream, &LaunchConfig::for_elements(s.n, 256), (&s.n, &a, &s.x, &mut s.y))?;
        // A 2D grid covers the same threads when its x extent does.
        saxpy.launch(
            &stream,
            &LaunchConfig::new((s.n.div_ceil(128), 1), (128, 1, 1)),
            (&s.n, &a, &s.x, &mut s.y),
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
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let input = DeviceBuffer::from_slice(&stream, &host)?;
    let mut output = DeviceBuffer::<u32>::zeroed(&stream, n as usize)?;
    let config = LaunchConfig::new(1, n).shared_mem_bytes(n * 4);
    // SAFETY: reverse takes (u32*, u32*), each with ntid.x words, and ntid.x*4 bytes of shared memory.
    unsafe { reverse.launch(&stream, &config, (&input, &mut output))? };
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
    let mut s = Saxpy::new(&ctx, resident * block)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let a = 3.0f32;
    // SAFETY: as in saxpy_results_are_read_back; the grid covers exactly n elements.
    unsafe {
        saxpy.launch_cooperative(&stream, &LaunchConfig::new(resident, block), (&s.n, &a, &s.x, &mut s.y))?
    };
    stream.synchronize()?;
    s.check(a, 1)?;
    // One block more than can be resident is refused, and the context stays usable.
    // SAFETY: as above; the extra block's threads are past n and do nothing.
    let too_large = unsafe {
        saxpy.launch_cooperative(&stream, &LaunchConfig::new(resident + 1, block), (&s.n, &a, &s.x, &mut s.y))
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
    let mut s = Saxpy::new(&ctx, 64 * 128)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let a = 0.5f32;
    let config = LaunchConfig::new(64, 128).cluster(4);
    // SAFETY: as in saxpy_results_are_read_back.
    unsafe { saxpy.launch(&stream, &config, (&s.n, &a, &s.x, &mut s.y))? };
    stream.synchronize()?;
    s.check(a, 1)?;
    // A grid that is not a multiple of the cluster is refused by the driver.
    // SAFETY: as above.
    let uneven =
        unsafe { saxpy.launch(&stream, &LaunchConfig::new(63, 128).cluster(4), (&s.n, &a, &s.x, &mut s.y)) };
    ensure!(uneven.is_err(), "63 blocks in clusters of 4 must be refused");
    stream.synchronize()?;
    s.check(a, 1)?;
    Ok(())
}

/// The cluster scheduling policy, a preferred cluster shape, the memory synchronization domain
/// and the shared-memory carveout, all on one launch whose results are checked; a carveout
/// over 100% is refused before the launch.
fn scheduling_domain_and_carveout_attributes_launch() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let saxpy = module.function("saxpy")?;
    let mut s = Saxpy::new(&ctx, 64 * 128)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let a = 0.25f32;
    let mut config = LaunchConfig::new(64, 128).shared_memory_carveout(50);
    if ctx.device().compute_capability()?.0 >= 9 {
        config = config
            .cluster(2)
            .preferred_cluster(4)
            .cluster_scheduling(ClusterScheduling::Spread)
            .mem_sync_domain(MemSyncDomain::Remote);
    }
    // SAFETY: as in saxpy_results_are_read_back.
    unsafe { saxpy.launch(&stream, &config, (&s.n, &a, &s.x, &mut s.y))? };
    stream.synchronize()?;
    s.check(a, 1)?;
    // SAFETY: refused before any launch.
    let too_much = unsafe {
        saxpy.launch(
            &stream,
            &LaunchConfig::new(64, 128).shared_memory_carveout(101),
            (&s.n, &a, &s.x, &mut s.y),
        )
    };
    ensure!(matches!(too_much, Err(Error::InvalidArgument { .. })), "a 101% carveout: {too_much:?}");
    Ok(())
}

fn priority_and_programmatic_serialization_launches() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let saxpy = module.function("saxpy")?;
    let mut s = Saxpy::new(&ctx, 10_000)?;
    let (least, greatest) = ctx.stream_priority_range()?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let a = 1.0f32;
    let base = LaunchConfig::for_elements(s.n, 256);
    // Views of the whole buffers, passed by reference.
    let (x, mut y) = (s.x.view(), s.y.view_mut());
    // SAFETY: as in saxpy_results_are_read_back.
    unsafe {
        saxpy.launch(&stream, &base.priority(greatest), (&s.n, &a, &x, &mut y))?;
        saxpy.launch(&stream, &base.priority(least), (&s.n, &a, &x, &mut y))?;
        if ctx.device().compute_capability()?.0 >= 9 {
            saxpy.launch(&stream, &base.programmatic_stream_serialization(true), (&s.n, &a, &x, &mut y))?;
        } else {
            saxpy.launch(&stream, &base, (&s.n, &a, &x, &mut y))?;
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
    let mut s = Saxpy::new(&ctx, 5000)?;
    let a = 1.0f32;
    let config = LaunchConfig::for_elements(s.n, 128);
    let legacy = Stream::legacy(&ctx);
    let per_thread = Stream::per_thread(&ctx);
    // SAFETY: as in saxpy_results_are_read_back.
    unsafe {
        saxpy.launch(&legacy, &config, (&s.n, &a, &s.x, &mut s.y))?;
    }
    legacy.synchronize()?;
    // SAFETY: as above.
    unsafe { saxpy.launch(&per_thread, &config, (&s.n, &a, &s.x, &mut s.y))? };
    per_thread.synchronize()?;
    // A thread on which no context is current launches on a created stream.
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    std::thread::scope(|scope| {
        scope
            .spawn(|| -> TestResult {
                // SAFETY: as above.
                unsafe { saxpy.launch(&stream, &config, (&s.n, &a, &s.x, &mut s.y))? };
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
    let mut s = Saxpy::new(&ctx, 3 * max)?;
    let a = 4.0f32;
    // Twice the limit, on a fresh kernel value (nothing remembered yet) and on the one that
    // has asked already; a zero dimension too.
    for (kernel, block) in [(library.kernel("saxpy")?, (max, 2, 1)), (saxpy.clone(), (max, 1, 2))] {
        // SAFETY: saxpy takes (u32, f32, f32*, f32*); x and y hold n floats; refused before the call.
        let refused =
            unsafe { kernel.launch(&stream, &LaunchConfig::new(3, block), (&s.n, &a, &s.x, &mut s.y)) };
        match refused {
            Err(e @ Error::InvalidArgument { .. }) => {
                ensure!(e.to_string().contains(&format!("{} threads", 2 * max)), "{e}")
            }
            other => return Err(format!("expected InvalidArgument, got {other:?}").into()),
        }
    }
    // SAFETY: as above.
    let zero =
        unsafe { saxpy.launch(&stream, &LaunchConfig::new(3, (max, 0, 1)), (&s.n, &a, &s.x, &mut s.y)) };
    ensure!(matches!(zero, Err(Error::InvalidArgument { .. })), "{zero:?}");
    // Nothing ran, and the context is usable: a block of exactly the limit launches.
    stream.synchronize()?;
    s.check(a, 0)?;
    // SAFETY: as above; 3 blocks of `max` threads cover the 3 * max elements.
    unsafe { saxpy.launch(&stream, &LaunchConfig::new(3, max), (&s.n, &a, &s.x, &mut s.y))? };
    stream.synchronize()?;
    s.check(a, 1)?;
    Ok(())
}

fn buffers_views_and_raw_addresses_as_arguments_write_the_right_values() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let saxpy = module.function("saxpy")?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let n = 4096u32;
    let half = n / 2;
    let host_x: Vec<f32> = (0..n).map(|i| (i % 500) as f32).collect();
    let x = DeviceBuffer::from_slice(&stream, &host_x)?;
    let mut y = DeviceBuffer::from_slice(&stream, &vec![1.0f32; n as usize])?;
    let config = LaunchConfig::for_elements(n, 256);
    // What each launch does to y, on the host: the kernel's fma rounds like mul_add.
    let mut expected = vec![1.0f32; n as usize];
    let mut saxpy_on_host = |a: f32, range: std::ops::Range<usize>| {
        for i in range {
            expected[i] = a.mul_add(host_x[i], expected[i]);
        }
    };
    let all = 0..n as usize;
    // SAFETY: saxpy takes (u32, f32, f32*, f32*); each launch passes views or addresses of at
    // least as many floats as the n it passes.
    unsafe {
        // Buffers by reference.
        saxpy.launch(&stream, &config, (&n, &2.0f32, &x, &mut y))?;
        saxpy_on_host(2.0, all.clone());
        // Views by value.
        saxpy.launch(&stream, &config, (&n, &3.0f32, x.view(), y.view_mut()))?;
        saxpy_on_host(3.0, all.clone());
        // Views by reference, one shared and one exclusive.
        saxpy.launch(&stream, &config, (&n, &0.5f32, &x.view(), &mut y.view_mut()))?;
        saxpy_on_host(0.5, all.clone());
        // A shared reference to an exclusive view.
        let whole = y.view_mut();
        saxpy.launch(&stream, &config, (&n, &-1.0f32, &x, &whole))?;
        saxpy_on_host(-1.0, all.clone());
        // Sub-views pass the address of their first element: the second halves only.
        let (xs, mut ys) = (x.slice(half as usize..)?, y.slice_mut(half as usize..)?);
        saxpy.launch(&stream, &LaunchConfig::for_elements(half, 256), (&half, &4.0f32, xs, &mut ys))?;
        saxpy_on_host(4.0, half as usize..n as usize);
        // Raw device addresses, as u64 values.
        saxpy.launch(&stream, &config, (&n, &1.5f32, &x.as_raw(), &y.as_raw()))?;
        saxpy_on_host(1.5, all);
    }
    stream.synchronize()?;
    ensure_eq!(y.to_vec()?, expected);
    Ok(())
}

/// Whether the driver reports parameter layouts (CUDA 12.4 and later), from the answer about a
/// kernel's first parameter. Where it does not, launches are not checked, and the tests of
/// refused launches have nothing to test.
fn layout_is_reported(first: cuhost::Result<Option<(usize, usize)>>) -> Result<bool, Error> {
    match first {
        Ok(_) => Ok(true),
        Err(Error::Load { .. }) => Ok(false),
        Err(e) if e.driver_status() == Some(sys::CUresult::CUDA_ERROR_NOT_SUPPORTED) => Ok(false),
        Err(e) => Err(e),
    }
}

/// `result` is an `InvalidArgument` whose message contains `expected`.
fn refused(result: cuhost::Result<()>, expected: &str) -> TestResult {
    match result {
        Err(e @ Error::InvalidArgument { .. }) => {
            ensure!(e.to_string().contains(expected), "`{e}` does not say `{expected}`");
            Ok(())
        }
        other => Err(format!("expected InvalidArgument saying `{expected}`, got {other:?}").into()),
    }
}

/// After refused launches: nothing ran and the context is usable; then `launch` (saxpy with
/// matching arguments) runs once.
fn nothing_ran_then(
    ctx: &Context,
    stream: &Stream,
    s: &mut Saxpy,
    a: f32,
    launch: impl FnOnce(&mut Saxpy) -> cuhost::Result<()>,
) -> TestResult {
    stream.synchronize()?;
    ensure!(ctx.deferred_error().is_none(), "{:?}", ctx.deferred_error());
    s.check(a, 0)?;
    launch(s)?;
    stream.synchronize()?;
    s.check(a, 1)
}

fn function_arguments_that_do_not_match_the_parameters_are_refused() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let saxpy = module.function("saxpy")?;
    let empty = module.function("empty")?;
    if !layout_is_reported(saxpy.param_info(0))? {
        return Ok(());
    }
    let mut s = Saxpy::new(&ctx, 1000)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let config = LaunchConfig::for_elements(s.n, 256);
    // The refused launches pass n = 0, so that even one that went through would touch no
    // memory; the u32 given for a pointer is the first of two, so that 8 bytes read at it stay
    // in bounds.
    let (a, none, small) = (2.0f32, 0u32, [0u32; 2]);
    // SAFETY: each launch below is refused before the call (and with n = 0 would do nothing).
    unsafe {
        refused(
            saxpy.launch(&stream, &config, (&none, &a, &s.x)),
            "Function::launch: the kernel takes 4 parameters but 3 arguments were given",
        )?;
        refused(
            saxpy.launch(&stream, &config, (&none, &a, &s.x, &mut s.y, &none)),
            "the kernel takes 4 parameters but 5 arguments were given",
        )?;
        refused(
            saxpy.launch(&stream, &config, (&none, &a, &s.x, &small[0])),
            "parameter 3 of the kernel is 8 bytes but argument 3 is 4 bytes",
        )?;
        refused(
            saxpy.launch(&stream, &config, (&0u64, &a, &s.x, &mut s.y)),
            "parameter 0 of the kernel is 4 bytes but argument 0 is 8 bytes",
        )?;
        refused(
            saxpy.launch_cooperative(&stream, &LaunchConfig::new(1, 32), (&none, &a, &small[0], &mut s.y)),
            "parameter 2 of the kernel is 8 bytes but argument 2 is 4 bytes",
        )?;
        refused(
            empty.launch(&stream, &LaunchConfig::new(1, 1), (&none,)),
            "the kernel takes 0 parameters but 1 argument was given",
        )?;
    }
    nothing_ran_then(&ctx, &stream, &mut s, a, |s| {
        // SAFETY: as in saxpy_results_are_read_back.
        unsafe {
            saxpy.launch(&stream, &config, (&s.n, &a, &s.x, &mut s.y))?;
            empty.launch(&stream, &LaunchConfig::new(1, 1), ())
        }
    })
}

fn library_kernel_arguments_that_do_not_match_the_parameters_are_refused() -> TestResult {
    let ctx = context()?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let library = Library::from_ptx(kernels::PTX, &JitOptions::new())?;
    if !layout_is_reported(library.kernel("saxpy")?.param_info(&ctx, 0))? {
        return Ok(());
    }
    let mut s = Saxpy::new(&ctx, 1000)?;
    let config = LaunchConfig::for_elements(s.n, 256);
    let (a, none, small) = (3.0f32, 0u32, [0u32; 2]);
    // A fresh kernel value reads the layout at its first launch, here a refused one; the same
    // value then refuses from what it remembered, and launches what matches.
    let saxpy = library.kernel("saxpy")?;
    let empty = library.kernel("empty")?;
    // SAFETY: as in function_arguments_that_do_not_match_the_parameters_are_refused.
    unsafe {
        refused(
            saxpy.launch(&stream, &config, (&none, &a, &s.x, &small[0])),
            "Kernel::launch: parameter 3 of the kernel is 8 bytes but argument 3 is 4 bytes",
        )?;
        refused(
            saxpy.launch(&stream, &config, (&none, &a, &s.x)),
            "the kernel takes 4 parameters but 3 arguments were given",
        )?;
        refused(
            saxpy.launch(&stream, &config, (&none, &a, &s.x, &mut s.y, &none)),
            "the kernel takes 4 parameters but 5 arguments were given",
        )?;
        refused(
            saxpy.clone().launch(&stream, &config, (&none, &a, &small[0], &mut s.y)),
            "parameter 2 of the kernel is 8 bytes but argument 2 is 4 bytes",
        )?;
        refused(
            empty.launch(&stream, &LaunchConfig::new(1, 1), (&none,)),
            "the kernel takes 0 parameters but 1 argument was given",
        )?;
    }
    nothing_ran_then(&ctx, &stream, &mut s, a, |s| {
        // SAFETY: as in saxpy_results_are_read_back.
        unsafe {
            saxpy.launch(&stream, &config, (&s.n, &a, &s.x, &mut s.y))?;
            empty.launch(&stream, &LaunchConfig::new(1, 1), ())
        }
    })
}

/// sm_90 kernels for programmatic launches (one thread each):
/// `wait_flag(const u32* flag, u32* out, u64 timeout_ns, u32 trigger)`: with `trigger` nonzero,
/// first lets dependent launches start (`griddepcontrol.launch_dependents`); then spins until
/// `*flag` is nonzero or `timeout_ns` has passed, and writes `out[0]` = 1 (flag seen) or 2
/// (timed out);
/// `set_flag_then_wait(u32* flag, u32* out, u32 wait)`: writes `*flag = 1`; with `wait`
/// nonzero then waits for the kernel it depends on (`griddepcontrol.wait`) and copies `out[0]`
/// to `out[1]`.
const PDL_PTX: &str = r#"
.version 8.0
.target sm_90
.address_size 64

.visible .entry wait_flag(
    .param .u64 w_flag,
    .param .u64 w_out,
    .param .u64 w_timeout_ns,
    .param .u32 w_trigger
)
{
    .reg .pred %p<4>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<8>;

    ld.param.u64 %rd1, [w_flag];
    ld.param.u64 %rd2, [w_out];
    ld.param.u64 %rd6, [w_timeout_ns];
    ld.param.u32 %r3, [w_trigger];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    setp.eq.u32 %p3, %r3, 0;
    @%p3 bra START;
    griddepcontrol.launch_dependents;
START:
    mov.u64 %rd3, %globaltimer;
    add.u64 %rd4, %rd3, %rd6;
    mov.u32 %r2, 2;
WAIT:
    ld.volatile.global.u32 %r1, [%rd1];
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra SEEN;
    mov.u64 %rd5, %globaltimer;
    setp.lt.u64 %p2, %rd5, %rd4;
    @%p2 bra WAIT;
    bra.uni DONE;
SEEN:
    mov.u32 %r2, 1;
DONE:
    st.global.u32 [%rd2], %r2;
    ret;
}

.visible .entry set_flag_then_wait(
    .param .u64 s_flag,
    .param .u64 s_out,
    .param .u32 s_wait
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<3>;

    ld.param.u64 %rd1, [s_flag];
    ld.param.u64 %rd2, [s_out];
    ld.param.u32 %r3, [s_wait];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    mov.u32 %r1, 1;
    st.volatile.global.u32 [%rd1], %r1;
    setp.eq.u32 %p1, %r3, 0;
    @%p1 bra SET_DONE;
    griddepcontrol.wait;
    ld.global.u32 %r2, [%rd2];
    st.global.u32 [%rd2+4], %r2;
SET_DONE:
    ret;
}
"#;

/// Programmatic launches need compute capability 9.0.
fn compute_9() -> Result<(), String> {
    let cc = Device::get(0).and_then(|d| d.compute_capability()).map_err(|e| e.to_string())?;
    if cc.0 >= 9 {
        Ok(())
    } else {
        Err(format!("needs compute capability 9.0, the device has {}.{}", cc.0, cc.1))
    }
}

/// A zeroed flag and a zeroed two-word result, ready on `stream` (synchronized, so that work
/// on other streams sees the zeros).
fn flag_and_out(stream: &Stream) -> Result<(DeviceBuffer<u32>, DeviceBuffer<u32>), Error> {
    let flag = DeviceBuffer::<u32>::zeroed(stream, 1)?;
    let out = DeviceBuffer::<u32>::zeroed(stream, 2)?;
    stream.synchronize()?;
    Ok((flag, out))
}

/// The primary kernel triggers its dependents at once and then spins until the secondary sets
/// a flag: it sees the flag only if the secondary ran while it was still running. With
/// programmatic stream serialization it does (`out[0] == 1`), and the secondary's
/// `griddepcontrol.wait` then sees the primary's write (`out[1] == 1`); without it, the
/// same pair runs one after the other and the primary times out (`out == [2, 2]`), so the
/// first result is not an accident.
fn programmatic_dependent_launch_overlaps_two_kernels() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, PDL_PTX)?;
    let (primary, secondary) = (module.function("wait_flag")?, module.function("set_flag_then_wait")?);
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let one = LaunchConfig::new(1, 1);
    let (trigger, wait) = (1u32, 1u32);

    let (mut flag, mut out) = flag_and_out(&stream)?;
    let timeout = 5_000_000_000u64;
    // SAFETY: the kernels take (u32*, u32*, u64, u32) and (u32*, u32*, u32), touch one and two
    // words, and the spin is bounded by the timeout.
    unsafe {
        primary.launch(&stream, &one, (&flag, &mut out, &timeout, &trigger))?;
        secondary.launch(
            &stream,
            &one.programmatic_stream_serialization(true),
            (&mut flag, &mut out, &wait),
        )?;
    }
    stream.synchronize()?;
    ensure_eq!(out.to_vec()?, vec![1, 1], "the secondary overlapped the primary, then waited for its write");

    let (mut flag, mut out) = flag_and_out(&stream)?;
    let short = 200_000_000u64;
    // SAFETY: as above.
    unsafe {
        primary.launch(&stream, &one, (&flag, &mut out, &short, &trigger))?;
        secondary.launch(&stream, &one, (&mut flag, &mut out, &wait))?;
    }
    stream.synchronize()?;
    ensure_eq!(out.to_vec()?, vec![2, 2], "without the attribute the secondary runs after the primary");
    Ok(())
}

/// A programmatic event recorded by the primary kernel is one a kernel on another stream can
/// wait for: launches with it, triggered from the kernel and at each block's start, run, the
/// waiting kernel runs, and the event is complete afterwards. An event that records timing is
/// refused before the launch.
fn programmatic_event_lets_another_stream_start_early() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, PDL_PTX)?;
    let (primary, secondary) = (module.function("wait_flag")?, module.function("set_flag_then_wait")?);
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let other = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let one = LaunchConfig::new(1, 1);
    let event = Event::new(&ctx, EventFlags::DISABLE_TIMING)?;
    let (timeout, no_wait) = (5_000_000_000u64, 0u32);
    for (trigger_in_kernel, at_block_start) in [(1u32, false), (0u32, true)] {
        let (mut flag, mut out) = flag_and_out(&stream)?;
        // SAFETY: as in programmatic_dependent_launch_overlaps_two_kernels.
        unsafe {
            primary.launch(
                &stream,
                &one.programmatic_event(&event, at_block_start),
                (&flag, &mut out, &timeout, &trigger_in_kernel),
            )?;
        }
        other.wait_event(&event)?;
        // SAFETY: as above; the secondary writes only the flag.
        unsafe { secondary.launch(&other, &one, (&mut flag, &mut out, &no_wait))? };
        other.synchronize()?;
        stream.synchronize()?;
        ensure!(event.query()?, "the event is complete after both streams");
        // The driver may let the waiting stream start once every block has triggered, or only
        // at the kernel's end ("dependents are not guaranteed to observe the release
        // precisely"): the primary saw the flag (1) or timed out (2); the secondary ran.
        let seen = out.to_vec()?[0];
        ensure!(
            seen == 1 || seen == 2,
            "the primary wrote {seen} (trigger at block start: {at_block_start})"
        );
        ensure!(flag.to_vec()?[0] != 0, "the other stream's kernel did not run");
    }
    let timed = Event::new(&ctx, EventFlags::empty())?;
    let (flag, mut out) = flag_and_out(&stream)?;
    // SAFETY: refused before any launch.
    let refused = unsafe {
        primary.launch(&stream, &one.programmatic_event(&timed, false), (&flag, &mut out, &timeout, &no_wait))
    };
    ensure!(matches!(refused, Err(Error::InvalidArgument { .. })), "a timing event: {refused:?}");
    Ok(())
}

/// A kernel spins until a flag in device memory is set; its launch-completion event completes
/// while it still spins (the stream is not done), and only then does the host set the flag, by
/// a kernel on another stream. The spinner saw the flag (it did not time out).
fn launch_completion_event_fires_while_the_kernel_runs() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, PDL_PTX)?;
    let (spinner, setter) = (module.function("wait_flag")?, module.function("set_flag_then_wait")?);
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let other = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let one = LaunchConfig::new(1, 1);
    let started = Event::new(&ctx, EventFlags::DISABLE_TIMING)?;
    let (mut flag, mut out) = flag_and_out(&stream)?;
    let mut unused = DeviceBuffer::<u32>::zeroed(&other, 2)?;
    // The setter on `other` signals the spinner on `stream` through `flag`: `other` is noted on
    // the flag before the spinner is queued, so that its first use waits only for the flag's
    // zeroing, not for the spinner (which would wait for the setter until its timeout).
    flag.record_stream(&other)?;
    let (timeout, no_trigger, no_wait) = (20_000_000_000u64, 0u32, 0u32);
    // SAFETY: as in programmatic_dependent_launch_overlaps_two_kernels.
    unsafe {
        spinner.launch(
            &stream,
            &one.launch_completion_event(&started),
            (&flag, &mut out, &timeout, &no_trigger),
        )?;
    }
    let since = std::time::Instant::now();
    let mut fired = false;
    while since.elapsed() < std::time::Duration::from_secs(10) {
        if started.query()? {
            fired = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let still_running = !stream.query()?;
    // Release the spinner whatever happened, so that the stream drains.
    // SAFETY: as above; the setter writes only the flag.
    unsafe { setter.launch(&other, &one, (&mut flag, &mut unused, &no_wait))? };
    other.synchronize()?;
    stream.synchronize()?;
    ensure!(fired, "the launch-completion event did not complete within 10 s");
    ensure!(still_running, "the kernel had ended when its launch-completion event was seen");
    ensure_eq!(out.to_vec()?[0], 1, "the spinner saw the flag set after the event");
    Ok(())
}

/// A launch with an L2 access-policy window over its input (persisting hits, streaming
/// misses) is accepted and computes the right result.
fn access_policy_window_launch_reads_back_right() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let saxpy = module.function("saxpy")?;
    let mut s = Saxpy::new(&ctx, 1 << 16)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let a = 3.0f32;
    let window =
        AccessPolicyWindow::over(&s.x.view(), 0.6, AccessProperty::Persisting, AccessProperty::Streaming);
    ensure_eq!((window.base, window.num_bytes), (s.x.as_raw(), s.x.size_in_bytes()));
    let max = ctx.device().max_access_policy_window_size()?;
    ensure!(
        window.num_bytes <= max as usize,
        "a {}-byte window is over the device's {max}",
        window.num_bytes
    );
    let config = LaunchConfig::for_elements(s.n, 256).access_policy_window(window);
    // SAFETY: as in saxpy_results_are_read_back.
    unsafe { saxpy.launch(&stream, &config, (&s.n, &a, &s.x, &mut s.y))? };
    stream.synchronize()?;
    s.check(a, 1)?;
    Ok(())
}

/// The synchronization policy, and (with a 13.0 driver) NVLink-centric scheduling, are
/// accepted on a launch whose results are right.
fn sync_policy_and_nvlink_scheduling_launches() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let saxpy = module.function("saxpy")?;
    let mut s = Saxpy::new(&ctx, 4096)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let a = 0.5f32;
    let base = LaunchConfig::for_elements(s.n, 128);
    let mut launches = 0;
    for policy in [SyncPolicy::Auto, SyncPolicy::Spin, SyncPolicy::Yield, SyncPolicy::BlockingSync] {
        stream.set_sync_policy(policy)?;
        ensure_eq!(stream.sync_policy()?, policy);
        // SAFETY: as in saxpy_results_are_read_back.
        unsafe { saxpy.launch(&stream, &base, (&s.n, &a, &s.x, &mut s.y))? };
        stream.synchronize()?;
        launches += 1;
    }
    if cuhost::device::driver_version()? >= 13000 {
        // SAFETY: as above.
        unsafe {
            saxpy.launch(&stream, &base.nvlink_util_centric_scheduling(true), (&s.n, &a, &s.x, &mut s.y))?
        };
        launches += 1;
    }
    stream.synchronize()?;
    s.check(a, launches)?;
    Ok(())
}

/// A memory synchronization domain map (default domain to 0, remote to the last the device
/// has), with the kernel in the remote domain, is accepted and the results are right.
fn mem_sync_domain_map_launch() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let saxpy = module.function("saxpy")?;
    let mut s = Saxpy::new(&ctx, 4096)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let a = 2.0f32;
    let count = ctx.device().mem_sync_domain_count()?;
    ensure!(count >= 2, "compute capability 9.0 has several domains, the device says {count}");
    let map = MemSyncDomainMap::new(0, (count - 1) as u8);
    let config =
        LaunchConfig::for_elements(s.n, 128).mem_sync_domain(MemSyncDomain::Remote).mem_sync_domain_map(map);
    // SAFETY: as in saxpy_results_are_read_back.
    unsafe { saxpy.launch(&stream, &config, (&s.n, &a, &s.x, &mut s.y))? };
    stream.synchronize()?;
    s.check(a, 1)?;
    Ok(())
}

/// Refused before any launch, each an `Error::InvalidArgument`: a window's hit ratio outside
/// [0, 1] and a persisting miss property, a domain ID the device does not have, a
/// device-updatable kernel node on a stream that is not capturing, and an event in a graph
/// kernel node. Nothing ran: the output is untouched.
fn bad_attribute_values_are_refused_before_the_launch() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let saxpy = module.function("saxpy")?;
    let mut s = Saxpy::new(&ctx, 256)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let a = 1.0f32;
    let base = LaunchConfig::for_elements(s.n, 128);
    let view = s.x.view();
    let ratio = AccessPolicyWindow::over(&view, 1.5, AccessProperty::Persisting, AccessProperty::Normal);
    let miss = AccessPolicyWindow::over(&view, 0.5, AccessProperty::Persisting, AccessProperty::Persisting);
    let count = ctx.device().mem_sync_domain_count().unwrap_or(1).clamp(1, 255) as u8;
    let event = Event::new(&ctx, EventFlags::DISABLE_TIMING)?;
    let bad = [
        ("hit ratio 1.5", base.access_policy_window(ratio)),
        ("persisting misses", base.access_policy_window(miss)),
        ("domain past the count", base.mem_sync_domain_map(MemSyncDomainMap::new(0, count))),
        ("device-updatable outside a capture", base.device_updatable_kernel_node(true)),
    ];
    for (what, config) in bad {
        // SAFETY: refused before any launch.
        let r = unsafe { saxpy.launch(&stream, &config, (&s.n, &a, &s.x, &mut s.y)) };
        ensure!(matches!(r, Err(Error::InvalidArgument { .. })), "{what}: {r:?}");
    }
    let graph = Graph::new(&ctx)?;
    // SAFETY: refused before any node is added.
    let node = unsafe {
        graph.add_kernel_node(&[], &saxpy, &base.launch_completion_event(&event), (&s.n, &a, &s.x, &mut s.y))
    };
    ensure!(matches!(node, Err(Error::InvalidArgument { .. })), "an event in a graph node: {node:?}");
    stream.synchronize()?;
    s.check(a, 0)?;
    Ok(())
}

cuhost::kernel_arg_struct! {
    /// The kernel's `struct Affine { float a; unsigned long long b; unsigned char c; }`: 4 bytes
    /// of padding after `a` and 7 after `c`, 24 bytes; not `Pod`.
    struct Affine {
        a: f32,
        b: u64,
        c: u8,
    }
}

/// `affine(Affine p, float *out, unsigned n)`: `out[i] = p.a * i + p.b + p.c`, with the struct
/// a 24-byte, 8-aligned parameter read at offsets 0, 8 and 16.
const AFFINE_PTX: &str = r#"
.version 7.0
.target sm_70
.address_size 64

.visible .entry affine(
    .param .align 8 .b8 affine_param_0[24],
    .param .u64 affine_param_1,
    .param .u32 affine_param_2
)
{
    .reg .pred %p<2>;
    .reg .b16 %rs<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<8>;
    .reg .b64 %rd<6>;

    ld.param.f32 %f1, [affine_param_0];
    ld.param.u64 %rd1, [affine_param_0+8];
    ld.param.u8 %rs1, [affine_param_0+16];
    ld.param.u64 %rd2, [affine_param_1];
    ld.param.u32 %r1, [affine_param_2];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvt.rn.f32.u32 %f2, %r5;
    cvt.rn.f32.u64 %f3, %rd1;
    cvt.rn.f32.u16 %f4, %rs1;
    mul.rn.f32 %f5, %f1, %f2;
    add.rn.f32 %f6, %f5, %f3;
    add.rn.f32 %f7, %f6, %f4;
    cvta.to.global.u64 %rd3, %rd2;
    mul.wide.u32 %rd4, %r5, 4;
    add.s64 %rd5, %rd3, %rd4;
    st.global.f32 [%rd5], %f7;
DONE:
    ret;
}
"#;

/// A `#[repr(C)]` struct with padding, declared with `kernel_arg_struct!` (no `unsafe` but the
/// launch's), passes by value: the kernel reads each field at its C offset. Where the driver
/// reports the layout, the struct's 24 bytes also match the parameter's size (without
/// `#[repr(C)]` Rust would reorder the fields into 16 bytes, and the launch would be refused).
fn a_padded_struct_passes_by_value() -> TestResult {
    let ctx = context()?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let module = Module::from_ptx(&ctx, AFFINE_PTX)?;
    let affine = module.function("affine")?;
    if layout_is_reported(affine.param_info(0))? {
        ensure_eq!(affine.param_info(0)?, Some((0, std::mem::size_of::<Affine>())));
    }
    let n = 4096u32;
    let mut out = DeviceBuffer::<f32>::zeroed(&stream, n as usize)?;
    let params = Affine { a: 0.5, b: 1000, c: 7 };
    // SAFETY: affine(Affine, float*, unsigned) writes n floats of `out`.
    unsafe { affine.launch(&stream, &LaunchConfig::for_elements(n, 256), (&params, &mut out, &n))? };
    let seen = out.to_vec()?;
    let wrong = (0..n as usize).filter(|&i| seen[i] != 0.5 * i as f32 + 1007.0).count();
    ensure_eq!(wrong, 0, "elements not a * i + b + c (first: {:?})", &seen[..4]);
    Ok(())
}
