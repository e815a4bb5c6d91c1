//! Modules, JIT options and logs, functions and their attributes, globals, the linker,
//! libraries and their kernels.

#[path = "kernels/mod.rs"]
mod kernels;

use cuda_tests::{TestResult, ensure, ensure_eq, gpu};
use cuhost::module::{
    CacheConfig, FunctionAttribute, JitInputType, JitOptions, Library, Linker, Module, OptimizationLevel,
    SharedFunction,
};
use cuhost::{Context, Device, DeviceBuffer, LaunchConfig, Stream, StreamFlags};

fn main() {
    // The driver keeps JIT-compiled PTX in a per-user cache (~/.nv/ComputeCache); a load that
    // the cache answers compiles nothing and leaves the info log empty, so the JIT test would
    // pass or fail by what earlier runs left on the machine. The driver reads this switch when
    // it initialises, which has not happened yet.
    // SAFETY: no other thread exists yet to read the environment concurrently.
    unsafe { std::env::set_var("CUDA_CACHE_DISABLE", "1") };
    cuda_tests::run(&[
        gpu("ptx_loads_and_lists_its_kernels", ptx_loads_and_lists_its_kernels),
        gpu("an_application_struct_keeps_its_kernels", an_application_struct_keeps_its_kernels),
        gpu(
            "jit_options_limit_registers_and_fill_the_info_log",
            jit_options_limit_registers_and_fill_the_info_log,
        ),
        gpu("function_attributes_are_read_and_set", function_attributes_are_read_and_set),
        gpu("globals_are_typed_views_kernels_read_and_write", globals_are_typed_views_kernels_read_and_write),
        gpu("linker_output_loads_as_a_cubin_module", linker_output_loads_as_a_cubin_module),
        gpu("library_kernels_launch_in_the_stream_context", library_kernels_launch_in_the_stream_context),
        gpu("modules_load_from_files", modules_load_from_files),
        gpu("fat_binaries_load_their_cubin_or_ptx", fat_binaries_load_their_cubin_or_ptx),
    ]);
}

fn context() -> Result<Context, cuhost::Error> {
    Context::primary(&Device::get(0)?)
}

fn ptx_loads_and_lists_its_kernels() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let mut names = module.functions()?.iter().map(|f| f.name()).collect::<Result<Vec<_>, _>>()?;
    names.sort();
    ensure_eq!(names, ["empty", "reverse", "saxpy", "scale_by_global", "store_to"]);
    // Under lazy loading (the default since CUDA 12.2) enumerated functions are not loaded yet:
    // their block-size limit is still the driver's, not 0.
    for f in module.functions()? {
        let limit = f.max_threads_per_block()?;
        ensure!(limit > 0, "{}: max_threads_per_block {limit}", f.name()?);
        ensure_eq!(i64::from(limit), i64::from(f.attribute(FunctionAttribute::MaxThreadsPerBlock)?));
    }
    ensure!(module.jit_log().wall_time_ms >= 0.0, "wall time {}", module.jit_log().wall_time_ms);
    ensure!(module.context() == &ctx, "the module remembers its context");
    let f = module.function("saxpy")?;
    f.load()?;
    ensure!(f.is_loaded()?, "saxpy is loaded after cuFuncLoad");
    cuhost::module::loading_mode()?;
    Ok(())
}

fn jit_options_limit_registers_and_fill_the_info_log() -> TestResult {
    let ctx = context()?;
    let options =
        JitOptions::new().max_registers(16).optimization_level(OptimizationLevel::O2).log_verbose(true);
    let module = Module::from_ptx_with(&ctx, kernels::PTX, &options)?;
    let regs = module.function("saxpy")?.num_regs()?;
    ensure!(regs > 0 && regs <= 16, "saxpy uses {regs} registers under a limit of 16");
    let info = &module.jit_log().info;
    ensure!(info.contains("saxpy"), "verbose info log names the kernels: {info:?}");
    ensure!(module.jit_log().error.is_empty(), "no errors: {:?}", module.jit_log().error);
    Ok(())
}

fn function_attributes_are_read_and_set() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let mut f = module.function("saxpy")?;
    let (major, minor) = ctx.device().compute_capability()?;
    ensure_eq!(f.name()?, "saxpy");
    ensure_eq!(f.ptx_version()?, 70);
    ensure_eq!(f.binary_version()?, major * 10 + minor);
    let max = f.attribute(FunctionAttribute::MaxThreadsPerBlock)?;
    ensure!(max > 0 && max <= 1024, "max threads per block {max}");
    ensure_eq!(f.max_threads_per_block()? as i32, max);
    ensure_eq!(f.shared_size_bytes()?, 0);
    ensure_eq!(f.param_info(0)?, Some((0, 4)));
    ensure_eq!(f.param_info(1)?, Some((4, 4)));
    ensure_eq!(f.param_info(2)?, Some((8, 8)));
    ensure_eq!(f.param_info(3)?, Some((16, 8)));
    ensure_eq!(f.param_info(4)?, None);
    let optin = ctx.device().attribute(
        cuhost::driver_sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
    )?;
    f.set_max_dynamic_shared_size_bytes(optin as u32)?;
    ensure_eq!(f.max_dynamic_shared_size_bytes()?, optin);
    f.set_preferred_shared_memory_carveout(50)?;
    ensure_eq!(f.attribute(FunctionAttribute::PreferredSharedMemoryCarveout)?, 50);
    ensure!(f.set_preferred_shared_memory_carveout(101).is_err(), "carveout over 100% is refused");
    f.set_cache_config(CacheConfig::PreferShared)?;
    Ok(())
}

fn globals_are_typed_views_kernels_read_and_write() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let mut factor = module.global::<f32>("factor")?;
    ensure_eq!((factor.len(), factor.size_bytes()), (1, 4));
    ensure_eq!(factor.to_vec()?, [1.0f32]);
    factor.copy_from_host(&[3.0])?;
    ensure_eq!(factor.as_view().to_vec()?, [3.0f32]);
    let hits = module.global::<u32>("hits")?;
    ensure_eq!(hits.len(), 4);
    // One live Global per variable: a second one, of any element type, is refused.
    let again = module.global::<u8>("hits");
    ensure!(
        matches!(again, Err(cuhost::Error::InvalidArgument { .. })),
        "a second Global of `hits`: {again:?}"
    );
    ensure!(module.global::<u64>("factor").is_err(), "4 bytes are not a whole u64");

    let n = 1000u32;
    let host: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let data = DeviceBuffer::from_slice(&stream, &host)?;
    let ptr = data.as_raw();
    // SAFETY: scale_by_global takes (f32*, u32) and `data` holds n floats.
    unsafe {
        module.function("scale_by_global")?.launch(
            &stream,
            &LaunchConfig::for_elements(n, 128),
            (&ptr, &n),
        )?
    };
    stream.synchronize()?;
    ensure_eq!(data.to_vec()?, host.iter().map(|x| x * 3.0).collect::<Vec<_>>());
    ensure_eq!(hits.to_vec()?, [n, 0, 0, 0]);
    drop(hits);
    ensure_eq!(module.global::<u8>("hits")?.len(), 16);
    Ok(())
}

fn linker_output_loads_as_a_cubin_module() -> TestResult {
    let ctx = context()?;
    let mut linker = Linker::new(&ctx, &JitOptions::new())?;
    linker.add_ptx("twice.ptx", kernels::PTX_TWICE)?;
    linker.add_data(JitInputType::Ptx, "double_all.ptx", kernels::PTX_DOUBLE_ALL.as_bytes())?;
    let cubin = linker.complete()?.to_vec();
    ensure!(cubin.starts_with(b"\x7fELF"), "the linker returns an ELF cubin");
    drop(linker);
    let module = Module::from_cubin(&ctx, &cubin)?;
    let module_again = Module::from_image(&ctx, &cubin, &JitOptions::new())?;
    ensure_eq!(module_again.functions()?.len(), 1);
    let stream = Stream::new(&ctx, StreamFlags::empty())?;
    let data = DeviceBuffer::from_slice(&stream, &[1.5f32, -2.0, 4.0, 0.25])?;
    let ptr = data.as_raw();
    // SAFETY: double_all takes one f32* and reads tid.x < 4 elements.
    unsafe { module.function("double_all")?.launch(&stream, &LaunchConfig::new(1, 4), (&ptr,))? };
    stream.synchronize()?;
    ensure_eq!(data.to_vec()?, [3.0f32, -4.0, 8.0, 0.5]);
    Ok(())
}

fn library_kernels_launch_in_the_stream_context() -> TestResult {
    let ctx = context()?;
    let library = Library::from_ptx(kernels::PTX, &JitOptions::new())?;
    let mut names = library.kernels()?.iter().map(|k| k.name()).collect::<Result<Vec<_>, _>>()?;
    names.sort();
    ensure_eq!(names.len(), 5);
    let saxpy = library.kernel("saxpy")?;
    ensure_eq!(saxpy.name()?, "saxpy");
    ensure_eq!(saxpy.param_info(&ctx, 3)?, Some((16, 8)));
    ensure_eq!(saxpy.param_info(&ctx, 4)?, None);
    let device = ctx.device();
    ensure!(saxpy.attribute(FunctionAttribute::NumRegs, &device)? > 0, "registers are known per device");
    saxpy.set_attribute(FunctionAttribute::MaxDynamicSharedSizeBytes, 1024, &device)?;
    ensure_eq!(saxpy.attribute(FunctionAttribute::MaxDynamicSharedSizeBytes, &device)?, 1024);
    saxpy.set_cache_config(CacheConfig::PreferL1, &device)?;
    ensure!(saxpy.function(&ctx)?.num_regs()? > 0, "the kernel's function in this context");
    ensure_eq!(library.global::<f32>(&ctx, "factor")?.to_vec()?, [1.0f32]);

    let n = 4096u32;
    let a = 2.0f32;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let x = DeviceBuffer::from_slice(&stream, &(0..n).map(|i| i as f32).collect::<Vec<_>>())?;
    let y = DeviceBuffer::from_slice(&stream, &vec![1.0f32; n as usize])?;
    let (xp, yp) = (x.as_raw(), y.as_raw());
    // SAFETY: saxpy takes (u32, f32, f32*, f32*); x and y hold n floats.
    unsafe { saxpy.launch(&stream, &LaunchConfig::for_elements(n, 256), (&n, &a, &xp, &yp))? };
    stream.synchronize()?;
    ensure_eq!(y.to_vec()?, (0..n).map(|i| 2.0 * i as f32 + 1.0).collect::<Vec<_>>());
    Ok(())
}

fn modules_load_from_files() -> TestResult {
    let ctx = context()?;
    let dir = std::env::temp_dir().join(format!("cuda-tests-module-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let ptx = dir.join("kernels.ptx");
    std::fs::write(&ptx, kernels::PTX)?;
    let module = Module::from_file(&ctx, &ptx, &JitOptions::new())?;
    ensure_eq!(module.functions()?.len(), 5);
    let library = Library::from_file(&ptx, &JitOptions::new())?;
    ensure_eq!(library.kernels()?.len(), 5);
    // The library's own handles, as the driver reports them.
    let kernel = library.kernels()?.into_iter().next().ok_or("no kernel")?;
    ensure_eq!(kernel.library_raw()?, library.as_raw());
    ensure!(!library.module_raw(&ctx)?.is_null(), "the library is a module in the context");
    ensure!(library.unified_function("no_such_function").is_err(), "an unknown unified function is refused");
    let missing_library = Library::from_file(dir.join("missing.ptx"), &JitOptions::new());
    ensure!(
        missing_library.is_err_and(|e| e.to_string().contains("missing.ptx")),
        "a missing library file is named"
    );
    let mut linker = Linker::new(&ctx, &JitOptions::new())?;
    let twice = dir.join("twice.ptx");
    std::fs::write(&twice, kernels::PTX_TWICE)?;
    linker.add_file(JitInputType::Ptx, &twice)?;
    linker.add_ptx("double_all", kernels::PTX_DOUBLE_ALL)?;
    let module = Module::from_cubin(&ctx, linker.complete()?)?;
    ensure!(module.function("double_all").is_ok(), "linked from a file and text");
    let missing = Module::from_file(&ctx, dir.join("missing.ptx"), &JitOptions::new());
    ensure!(missing.is_err_and(|e| e.to_string().contains("missing.ptx")), "a missing file is named");
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// A fat binary with one uncompressed entry: `kind` 1 for PTX, 2 for a cubin, for `arch`
/// (major*10+minor), with the entry's code version.
/// Fat binaries built from `kernels::PTX` by NVIDIA's `ptxas` and `fatbinary` (CUDA 13.0):
/// an sm_90 cubin with compute_70 PTX beside it, and the PTX alone.
const FATBIN_SM90_PTX70: &[u8] = include_bytes!("kernels/kernels_sm90_ptx70.fatbin");
const FATBIN_PTX70: &[u8] = include_bytes!("kernels/kernels_ptx70.fatbin");

fn fat_binaries_load_their_cubin_or_ptx() -> TestResult {
    let ctx = context()?;
    let (major, minor) = ctx.device().compute_capability()?;
    let arch = (major * 10 + minor) as u32;
    // On sm_90 the driver takes the cubin; elsewhere it compiles the PTX. Either way it runs.
    // `include_bytes!` data has no alignment; the loader copies it into aligned storage.
    let with_cubin = Module::from_fatbin(&ctx, FATBIN_SM90_PTX70)?;
    let with_ptx = Module::from_fatbin(&ctx, FATBIN_PTX70)?;
    ensure!(arch >= 70, "compute capability {arch} is below the PTX target");
    for module in [&with_cubin, &with_ptx] {
        let n = 256u32;
        let a = 4.0f32;
        let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
        let x = DeviceBuffer::from_slice(&stream, &vec![1.0f32; n as usize])?;
        let y = DeviceBuffer::from_slice(&stream, &vec![0.5f32; n as usize])?;
        let (xp, yp) = (x.as_raw(), y.as_raw());
        // SAFETY: saxpy takes (u32, f32, f32*, f32*); x and y hold n floats.
        unsafe { module.function("saxpy")?.launch(&stream, &LaunchConfig::new(1, n), (&n, &a, &xp, &yp))? };
        stream.synchronize()?;
        ensure_eq!(y.to_vec()?, vec![4.5f32; n as usize]);
    }
    Ok(())
}

/// What an application keeps: a stream and its kernels in one struct, with no borrow between
/// them; the kernels keep their module loaded after every other handle of it is gone, from any
/// thread.
struct Gpu {
    stream: Stream,
    saxpy: SharedFunction,
}

fn an_application_struct_keeps_its_kernels() -> TestResult {
    fn send_sync<T: Send + Sync + 'static>(_: &T) {}
    let ctx = Context::primary(&Device::get(0)?)?;
    let module = std::sync::Arc::new(Module::from_ptx(&ctx, kernels::PTX)?);
    let gpu = Gpu {
        stream: Stream::new(&ctx, StreamFlags::NON_BLOCKING)?,
        saxpy: module.shared_function("saxpy")?,
    };
    drop(module);
    send_sync(&gpu.saxpy);
    let again = gpu.saxpy.clone();
    ensure!(std::sync::Arc::strong_count(again.module()) == 2, "the kernel handles do not hold the module");
    let n = 4096u32;
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let (dx, mut dy) = (
        DeviceBuffer::from_slice(&gpu.stream, &x)?,
        DeviceBuffer::from_slice(&gpu.stream, &vec![1.0f32; n as usize])?,
    );
    // From another thread, through the clone: the handle is Send + Sync.
    let launched = std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: saxpy(u32 n, f32 a, const f32* x, f32* y) over n elements of both buffers.
            unsafe {
                again.function().launch(
                    &gpu.stream,
                    &LaunchConfig::for_elements(n, 256),
                    (&n, &2.0f32, &dx, &mut dy),
                )
            }
        })
        .join()
        .map_err(|_| "the launching thread panicked")
    })?;
    launched?;
    let y = dy.to_vec()?;
    let wrong = y.iter().zip(&x).filter(|&(&y, &x)| y != 2.0 * x + 1.0).count();
    ensure_eq!(wrong, 0, "elements of y = 2x + 1 wrong");
    Ok(())
}
