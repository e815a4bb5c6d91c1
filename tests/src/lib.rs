//! The harness of the GPU integration tests.
//!
//! Each file in `tests/` is a test binary with `harness = false` whose `main` calls [`run`].
//! A GPU test is reported *ignored* (never passed) when no CUDA device is present, and a test
//! that needs several devices is ignored on a host with fewer. With `CUDA_TEST_REQUIRE_GPU=1`,
//! a missing device is a failure instead: the GPU host runs the suite that way.
//!
//! A test may also need something besides devices (a Python with PyTorch, a tool): it names a
//! check that says why it cannot run ([`gpu_needing`]), and is reported ignored with that reason
//! when the check fails. The check runs when the binary lists its tests, only for tests that
//! the filter selects and whose devices are present.
//!
//! The binaries speak libtest's command line, so `cargo test` and `cargo nextest` both run them.

pub mod bench;
pub mod child;
pub mod fd_passing;

use std::sync::OnceLock;

pub use libtest_mimic::Failed;

/// What a test returns: `Ok` or a failure message.
pub type TestResult = Result<(), Failed>;

/// One test: its name, how many devices it needs (0 for a CPU test), and its body.
#[derive(Clone, Copy)]
pub struct Test {
    /// The test's name, as filters and reports show it.
    pub name: &'static str,
    /// Devices the test needs; 0 runs it everywhere.
    pub devices: usize,
    /// The test.
    pub body: fn() -> TestResult,
    /// What else the test needs: `Err(why)` reports it ignored, saying why.
    pub requires: Option<fn() -> Result<(), String>>,
}

/// A test that needs one CUDA device.
pub const fn gpu(name: &'static str, body: fn() -> TestResult) -> Test {
    Test { name, devices: 1, body, requires: None }
}

/// A test that needs one CUDA device and what `requires` checks for; where that check fails
/// the test is reported ignored (never passed), and the reason is printed.
pub const fn gpu_needing(
    name: &'static str,
    requires: fn() -> Result<(), String>,
    body: fn() -> TestResult,
) -> Test {
    Test { name, devices: 1, body, requires: Some(requires) }
}

/// A test that needs `devices` CUDA devices.
pub const fn multi_gpu(name: &'static str, devices: usize, body: fn() -> TestResult) -> Test {
    Test { name, devices, body, requires: None }
}

/// A test that needs no device.
pub const fn cpu(name: &'static str, body: fn() -> TestResult) -> Test {
    Test { name, devices: 0, body, requires: None }
}

/// A test that needs no device but what `requires` checks for (a library, say); where that
/// check fails the test is reported ignored (never passed), and the reason is printed.
pub const fn cpu_needing(
    name: &'static str,
    requires: fn() -> Result<(), String>,
    body: fn() -> TestResult,
) -> Test {
    Test { name, devices: 0, body, requires: Some(requires) }
}

/// The number of CUDA devices present, or why there are none.
pub fn device_count() -> Result<usize, String> {
    static COUNT: OnceLock<Result<usize, String>> = OnceLock::new();
    COUNT
        .get_or_init(|| {
            use cuhost_driver_sys as sys;
            // SAFETY: cuInit takes flags 0; cuDeviceGetCount writes one int.
            let status = unsafe { sys::cuInit(0) };
            if status != sys::CUresult::CUDA_SUCCESS {
                let why = sys::library_error().map(|e| e.to_string()).unwrap_or_else(|| {
                    format!("cuInit failed: {}", status.name().unwrap_or("unknown status"))
                });
                return Err(why);
            }
            let mut n = 0;
            // SAFETY: as above.
            let status = unsafe { sys::cuDeviceGetCount(&mut n) };
            if status != sys::CUresult::CUDA_SUCCESS {
                return Err(format!(
                    "cuDeviceGetCount failed: {}",
                    status.name().unwrap_or("unknown status")
                ));
            }
            Ok(usize::try_from(n).unwrap_or(0))
        })
        .clone()
}

fn require_gpu() -> bool {
    std::env::var("CUDA_TEST_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// Runs the tests of one binary and exits with libtest's status.
pub fn run(tests: &[Test]) -> ! {
    let args = libtest_mimic::Arguments::from_args();
    let needs_gpu = tests.iter().any(|t| t.devices > 0);
    let found = if needs_gpu { device_count() } else { Ok(0) };
    // Which tests the filters select, whether or not they are ignored (`--ignored` lists only
    // the ignored ones, which is what a failed check is to decide).
    let selection = libtest_mimic::Arguments { ignored: false, ..args.clone() };
    let trials = tests
        .iter()
        .map(|t| {
            let body = t.body;
            let devices = t.devices;
            let found = found.clone();
            let available = found.as_ref().map_or(0, |n| *n);
            let ignored = devices > 0 && available < devices && !(require_gpu() && available == 0);
            let trial = libtest_mimic::Trial::test(t.name, move || {
                if devices > 0 && available == 0 {
                    let why = found.err().unwrap_or_else(|| "no CUDA device found".into());
                    return Err(format!("CUDA_TEST_REQUIRE_GPU=1 but no GPU: {why}").into());
                }
                body()
            });
            // Check what else the test needs only where it would run: selected, devices present.
            let lacking = match t.requires {
                Some(check) if !ignored && available >= devices && !selection.is_filtered_out(&trial) => {
                    check().err()
                }
                _ => None,
            };
            if let Some(why) = &lacking {
                if !args.list {
                    eprintln!("{}: ignored: {why}", t.name);
                }
            }
            trial.with_ignored_flag(ignored || lacking.is_some())
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    release_default_pools();
    conclusion.exit()
}

/// Gives what the default pools cache back to the driver, once every buffer is dropped, so
/// that a leak checker sees only memory that was really kept; a failure is printed.
pub fn release_default_pools() {
    if let Err(e) = cuhost::pool::release_default_pools() {
        eprintln!("could not give the default pools' cached blocks back: {e}");
    }
}

/// Fails the test with a message unless `cond` holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+).into());
        }
    };
}

/// Fails the test unless the two values are equal; an optional message (format arguments) says
/// what was compared.
#[macro_export]
macro_rules! ensure_eq {
    ($left:expr, $right:expr $(,)?) => {{
        let (l, r) = (&$left, &$right);
        if l != r {
            return Err(format!("{} != {}: {:?} != {:?}", stringify!($left), stringify!($right), l, r).into());
        }
    }};
    ($left:expr, $right:expr, $($msg:tt)+) => {{
        let (l, r) = (&$left, &$right);
        if l != r {
            let what = format!($($msg)+);
            return Err(format!("{what}: {} != {}: {:?} != {:?}", stringify!($left), stringify!($right), l, r).into());
        }
    }};
}

/// Device 0, its primary context bound to this thread, and a non-blocking stream on it: what
/// most single-device tests start from.
pub fn device_zero() -> Result<(cuhost::Device, cuhost::Context, cuhost::Stream), cuhost::Error> {
    let device = cuhost::Device::get(0)?;
    let ctx = cuhost::Context::primary(&device)?;
    ctx.bind_to_thread()?;
    let stream = cuhost::Stream::new(&ctx, cuhost::StreamFlags::NON_BLOCKING)?;
    Ok((device, ctx, stream))
}

/// Holds `stream` back for `ms` milliseconds (a host function that sleeps): the work queued
/// after this runs late, which is how the soundness tests make a missing order visible.
pub fn hold(stream: &cuhost::Stream, ms: u64) -> Result<(), cuhost::Error> {
    stream.launch_host_func(move || std::thread::sleep(std::time::Duration::from_millis(ms)))
}

/// Fails unless no drop kept an error in `ctx` (see `Context::take_deferred_errors`).
pub fn no_deferred(ctx: &cuhost::Context) -> TestResult {
    let deferred = ctx.take_deferred_errors();
    ensure!(deferred.is_empty(), "errors were kept from drops: {deferred:?}");
    Ok(())
}

/// Fails unless the context of `stream` still allocates, writes and reads a buffer: what a test
/// checks after provoking an error.
pub fn still_usable(stream: &cuhost::Stream) -> TestResult {
    let data: Vec<u32> = (0..1024).collect();
    let buffer = cuhost::DeviceBuffer::from_slice(stream, &data)?;
    ensure!(buffer.to_vec()? == data, "the context no longer round-trips a buffer");
    Ok(())
}

/// Converts a driver status into a test failure that names the call.
pub fn drv(call: &str, status: cuhost_driver_sys::CUresult) -> TestResult {
    if status == cuhost_driver_sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{call} failed: {}", status.name().unwrap_or("unknown status")).into())
    }
}

/// Converts a runtime status into a test failure that names the call.
pub fn rt(call: &str, status: cuhost_cudart_sys::cudaError_t) -> TestResult {
    if status == cuhost_cudart_sys::cudaError_t::cudaSuccess {
        Ok(())
    } else {
        Err(format!("{call} failed: {}", status.name().unwrap_or("unknown status")).into())
    }
}
