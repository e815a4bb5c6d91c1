//! Bad input to modules and launches gets a typed error with a message, and the context stays
//! usable: a missing kernel name, garbage PTX and binaries, too many threads per block, zero
//! dimensions, too much shared memory, and a kernel that faults.

#[path = "kernels/mod.rs"]
mod kernels;

use cuda_tests::{TestResult, ensure, ensure_eq, gpu};
use cuhost::driver_sys as sys;
use cuhost::module::{JitOptions, Library, Module};
use cuhost::{Context, Device, DeviceBuffer, Error, LaunchConfig, Stream, StreamFlags};

const FAULT_CHILD: &str = "CUDA_TESTS_FAULT_CHILD";

fn main() {
    if std::env::var_os(FAULT_CHILD).is_some() {
        fault_child();
    }
    cuda_tests::run(&[
        gpu("missing_kernel_name_is_named_in_the_error", missing_kernel_name_is_named_in_the_error),
        gpu("garbage_ptx_returns_the_compiler_log", garbage_ptx_returns_the_compiler_log),
        gpu(
            "garbage_binaries_are_refused_before_the_driver_reads_them",
            garbage_binaries_are_refused_before_the_driver_reads_them,
        ),
        gpu("too_many_threads_per_block_is_refused", too_many_threads_per_block_is_refused),
        gpu("too_much_shared_memory_is_refused", too_much_shared_memory_is_refused),
        gpu("absurd_sizes_and_grids_are_refused", absurd_sizes_and_grids_are_refused),
        gpu(
            "a_faulting_kernel_is_reported_by_the_next_synchronize",
            a_faulting_kernel_is_reported_by_the_next_synchronize,
        ),
    ]);
}

fn context() -> Result<Context, Error> {
    Context::primary(&Device::get(0)?)
}

/// Runs saxpy once and checks the result: the context still works.
fn context_still_works(ctx: &Context) -> TestResult {
    let module = Module::from_ptx(ctx, kernels::PTX)?;
    let n = 1000u32;
    let a = 2.0f32;
    let stream = Stream::new(ctx, StreamFlags::NON_BLOCKING)?;
    let x = DeviceBuffer::from_slice(&stream, &vec![1.0f32; n as usize])?;
    let y = DeviceBuffer::from_slice(&stream, &vec![0.5f32; n as usize])?;
    let (xp, yp) = (x.as_raw(), y.as_raw());
    // SAFETY: saxpy takes (u32, f32, f32*, f32*); x and y hold n floats.
    unsafe {
        module.function("saxpy")?.launch(&stream, &LaunchConfig::for_elements(n, 128), (&n, &a, &xp, &yp))?
    };
    stream.synchronize()?;
    ensure_eq!(y.to_vec()?, vec![2.5f32; n as usize]);
    Ok(())
}

fn missing_kernel_name_is_named_in_the_error() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    match module.function("no_such_kernel") {
        Err(e @ Error::InvalidArgument { .. }) => {
            ensure!(e.to_string().contains("no_such_kernel"), "the message names the kernel: {e}")
        }
        other => return Err(format!("expected InvalidArgument, got {other:?}").into()),
    }
    ensure!(module.function("bad\0name").is_err(), "an interior NUL is refused");
    ensure!(module.global::<u32>("no_such_global").is_err(), "a missing global is refused");
    let library = Library::from_ptx(kernels::PTX, &JitOptions::new())?;
    let e = library.kernel("no_such_kernel").err().map(|e| e.to_string()).unwrap_or_default();
    ensure!(e.contains("no_such_kernel"), "the library error names the kernel: {e}");
    context_still_works(&ctx)
}

fn garbage_ptx_returns_the_compiler_log() -> TestResult {
    let ctx = context()?;
    let garbage = ".version 8.0\n.target sm_70\n.address_size 64\n.visible .entry k() { this is not ptx; }\n";
    match Module::from_ptx(&ctx, garbage) {
        Err(Error::Jit { call, status, log }) => {
            ensure_eq!(call, "cuModuleLoadDataEx");
            ensure_eq!(status, sys::CUresult::CUDA_ERROR_INVALID_PTX);
            ensure!(!log.is_empty(), "the error log says what is wrong");
        }
        other => return Err(format!("expected Error::Jit, got {other:?}").into()),
    }
    let e = Module::from_ptx(&ctx, "complete nonsense").err().map(|e| e.to_string()).unwrap_or_default();
    ensure!(e.contains("cuModuleLoadDataEx failed"), "{e}");
    // A library compiles when it is loaded, or (lazy loading) when a kernel is first used.
    match Library::from_ptx(garbage, &JitOptions::new()) {
        Err(Error::Jit { .. }) => {}
        Err(other) => return Err(format!("expected Error::Jit, got {other}").into()),
        Ok(library) => {
            let used = library.kernel("k").and_then(|k| k.function(&ctx)).and_then(|f| f.num_regs());
            ensure!(used.is_err(), "garbage PTX in a library fails at first use");
        }
    }
    context_still_works(&ctx)
}

fn garbage_binaries_are_refused_before_the_driver_reads_them() -> TestResult {
    let ctx = context()?;
    let mut truncated = vec![0x7f, b'E', b'L', b'F', 2, 1];
    truncated.resize(80, 0xff);
    for (what, result) in [
        ("ptx with NUL", Module::from_ptx(&ctx, "abc\0def").map(drop)),
        ("empty ptx", Module::from_ptx(&ctx, "").map(drop)),
        ("truncated cubin", Module::from_cubin(&ctx, &truncated).map(drop)),
        ("non-ELF cubin", Module::from_cubin(&ctx, &[1, 2, 3, 4]).map(drop)),
        ("non-fatbin", Module::from_fatbin(&ctx, &[0u8; 64]).map(drop)),
    ] {
        ensure!(matches!(result, Err(Error::InvalidArgument { .. })), "{what}: {result:?}");
    }
    context_still_works(&ctx)
}

fn too_many_threads_per_block_is_refused() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let empty = module.function("empty")?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let max = empty.max_threads_per_block()?;
    // SAFETY: empty takes no parameters.
    let refused = unsafe { empty.launch(&stream, &LaunchConfig::new(1, (max, 2, 1)), ()) };
    match refused {
        Err(e @ Error::InvalidArgument { .. }) => {
            ensure!(e.to_string().contains(&format!("{} threads", max * 2)), "{e}")
        }
        other => return Err(format!("expected InvalidArgument, got {other:?}").into()),
    }
    // SAFETY: as above.
    let zero = unsafe { empty.launch(&stream, &LaunchConfig::new(0, 32), ()) };
    ensure!(matches!(zero, Err(Error::InvalidArgument { .. })), "{zero:?}");
    // A library kernel is checked against its limit on the stream's device, before the call.
    let library = Library::from_ptx(kernels::PTX, &JitOptions::new())?;
    // SAFETY: as above.
    let refused = unsafe { library.kernel("empty")?.launch(&stream, &LaunchConfig::new(1, 4096), ()) };
    ensure!(matches!(refused, Err(Error::InvalidArgument { .. })), "{refused:?}");
    stream.synchronize()?;
    context_still_works(&ctx)
}

fn too_much_shared_memory_is_refused() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let empty = module.function("empty")?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    // SAFETY: empty takes no parameters.
    let refused = unsafe { empty.launch(&stream, &LaunchConfig::new(1, 32).shared_mem_bytes(16 << 20), ()) };
    let status = refused.err().and_then(|e| e.driver_status());
    ensure!(status.is_some(), "16 MiB of shared memory per block is refused by the driver");
    stream.synchronize()?;
    context_still_works(&ctx)
}

fn absurd_sizes_and_grids_are_refused() -> TestResult {
    let ctx = context()?;
    cuhost::runtime::set_device(0)?;
    let overflow = cuhost::runtime::malloc::<u64>(&Stream::legacy(&ctx), usize::MAX / 4);
    ensure!(
        matches!(overflow, Err(Error::InvalidArgument { .. })),
        "a byte count that overflows: {overflow:?}"
    );
    let huge = cuhost::runtime::malloc::<u8>(&Stream::legacy(&ctx), 1 << 60);
    ensure!(
        matches!(huge, Err(Error::Runtime { status, .. }) if status == cuhost_cudart_sys::cudaError_t::cudaErrorMemoryAllocation),
        "an exabyte is out of memory: {huge:?}"
    );
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let empty = module.function("empty")?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    // Grid y and z are limited to 65535 blocks.
    // SAFETY: empty takes no parameters.
    let tall = unsafe { empty.launch(&stream, &LaunchConfig::new((1, 1 << 20), 32), ()) };
    ensure_eq!(tall.err().and_then(|e| e.driver_status()), Some(sys::CUresult::CUDA_ERROR_INVALID_VALUE));
    stream.synchronize()?;
    ensure!(cuhost::runtime::malloc::<u8>(&stream, 1 << 20).is_ok(), "the runtime still allocates");
    context_still_works(&ctx)
}

fn a_faulting_kernel_is_reported_by_the_next_synchronize() -> TestResult {
    // A fault ruins the context for the whole process, so it happens in a child process.
    let exe = std::env::current_exe()?;
    let out = std::process::Command::new(exe).env(FAULT_CHILD, "1").output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(out.status.code() == Some(0), "child failed: {stdout} {}", String::from_utf8_lossy(&out.stderr));
    ensure!(stdout.contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "the fault is reported by name: {stdout}");
    Ok(())
}

/// In the child: launch a store to an unmapped address; the launch succeeds, the next
/// synchronize reports the fault, and nothing panics or aborts.
fn fault_child() -> ! {
    let result = (|| -> Result<String, Error> {
        let ctx = context()?;
        let module = Module::from_ptx(&ctx, kernels::PTX)?;
        let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
        let bad_address = 0x10u64;
        // SAFETY: deliberately not: store_to writes to an address that is not mapped. The GPU
        // reports it; host memory is not touched.
        unsafe { module.function("store_to")?.launch(&stream, &LaunchConfig::new(1, 1), (&bad_address,))? };
        match stream.synchronize() {
            Err(e) => Ok(e.to_string()),
            Ok(()) => Ok("no error from synchronize".into()),
        }
    })();
    match result {
        Ok(text) => {
            println!("{text}");
            std::process::exit(0)
        }
        Err(e) => {
            println!("setup failed: {e}");
            std::process::exit(1)
        }
    }
}
