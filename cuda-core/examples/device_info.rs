//! Lists the CUDA devices and runs a self-check on each: allocate, copy a round trip, launch a
//! PTX kernel, verify the result.
//!
//! ```sh
//! cargo run --example device_info
//! ```
//!
//! Without a driver it prints one line saying what could not be loaded and what to install,
//! and exits with status 1.

use cuhost::module::Module;
use cuhost::{Context, Device, DeviceBuffer, LaunchConfig, Stream, StreamFlags};
use std::process::ExitCode;

/// `add_one(u32* data, u32 n)`: `data[i] += 1` for `i < n`.
const PTX: &str = r#"
.version 8.0
.target sm_70
.address_size 64

.visible .entry add_one(.param .u64 data, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<7>;
    .reg .b64 %rd<4>;

    ld.param.u64 %rd1, [data];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd1, %rd1;
    mul.wide.u32 %rd2, %r5, 4;
    add.s64 %rd3, %rd1, %rd2;
    ld.global.u32 %r6, [%rd3];
    add.u32 %r6, %r6, 1;
    st.global.u32 [%rd3], %r6;
DONE:
    ret;
}
"#;

fn main() -> ExitCode {
    // Without a driver, say so in one line rather than as an error per call.
    if let Some(e) = cuhost::driver_sys::library_error() {
        eprintln!("device_info: {e}");
        return ExitCode::FAILURE;
    }
    // The default pools cache freed blocks for reuse: give them back before exiting, so
    // that a leak checker (compute-sanitizer --leak-check full) sees only real leaks.
    match run().and_then(|r| cuhost::pool::release_default_pools().map(|()| r)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("device_info: {e}");
            ExitCode::FAILURE
        }
    }
}

fn version(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

fn run() -> cuhost::Result<bool> {
    let devices = Device::all()?;
    let driver = cuhost::device::driver_version()?;
    let runtime = match cuhost::runtime::runtime_version() {
        Ok(v) => version(v),
        Err(e) => format!("not available ({e})"),
    };
    println!("CUDA driver {} ({}), runtime {runtime}", version(driver), driver);
    println!("{} device(s)", devices.len());
    let mut all_ok = true;
    for device in &devices {
        let (major, minor) = device.compute_capability()?;
        let total = device.total_memory()?;
        println!(
            "\n[{}] {}\n    compute capability {major}.{minor}, {} SMs, {:.1} GiB, PCI {}, {}",
            device.ordinal(),
            device.name()?,
            device.multiprocessor_count()?,
            total as f64 / (1u64 << 30) as f64,
            device.pci_bus_id()?,
            device.uuid()?,
        );
        println!(
            "    max threads per block {}, shared memory per block {} KiB (opt-in {} KiB), L2 {} MiB, clock {} MHz",
            device.max_threads_per_block()?,
            device.max_shared_memory_per_block()? / 1024,
            device.max_shared_memory_per_block_optin()? / 1024,
            device.l2_cache_size()? >> 20,
            device.clock_rate()? / 1000,
        );
        match self_check(device) {
            Ok(()) => println!("    self-check: ok (allocate, copy round trip, PTX kernel launch)"),
            Err(e) => {
                println!("    self-check: FAILED: {e}");
                all_ok = false;
            }
        }
    }
    Ok(all_ok)
}

fn self_check(device: &Device) -> cuhost::Result<()> {
    let ctx = Context::primary(device)?;
    let (free, total) = ctx.memory_info()?;
    println!(
        "    memory: {:.1} GiB free of {:.1} GiB",
        free as f64 / (1u64 << 30) as f64,
        total as f64 / (1u64 << 30) as f64
    );
    let n = 1u32 << 20;
    let host: Vec<u32> = (0..n).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let mut data = DeviceBuffer::from_slice(&stream, &host)?;
    let back = data.to_vec()?;
    if back != host {
        return Err(cuhost::Error::invalid("self-check", "the copy round trip returned different data"));
    }
    let module = Module::from_ptx(&ctx, PTX)?;
    let add_one = module.function("add_one")?;
    // SAFETY: add_one takes (u32*, u32) and `data` holds n words.
    unsafe { add_one.launch(&stream, &LaunchConfig::for_elements(n, 256), (&mut data, &n))? };
    stream.synchronize()?;
    let result = data.to_vec()?;
    match result.iter().zip(&host).position(|(r, h)| *r != h.wrapping_add(1)) {
        None => Ok(()),
        Some(i) => Err(cuhost::Error::invalid(
            "self-check",
            format!("kernel result wrong at {i}: {} instead of {}", result[i], host[i].wrapping_add(1)),
        )),
    }
}
