//! Runs one loader scenario in a fresh process and prints what it saw as `key=value` lines.
//!
//! The loader keeps its state for the life of the process, so each scenario of
//! `tests/loader.rs` runs this probe with its own environment.

use cuhost_driver_sys as sys;
use std::ffi::{c_char, c_uint};

fn status(s: sys::CUresult) -> &'static str {
    s.name().unwrap_or("unknown")
}

fn report_error(key: &str, symbol: &str) {
    match sys::load_error(symbol) {
        Some(e) => {
            println!("{key}.kind={:?}", e.kind);
            println!("{key}.message={e}");
        }
        None => println!("{key}.kind=none"),
    }
}

fn lookups(name: &std::ffi::CStr) -> c_uint {
    let Some(path) = sys::library_path() else { return 0 };
    // SAFETY: the fake driver is already loaded by the loader; this opens the same file again
    // to reach its test-only counter, whose signature is known.
    unsafe {
        let Ok(lib) = libloading::Library::new(path) else { return 0 };
        let Ok(f) = lib.get::<unsafe extern "C" fn(*const c_char) -> c_uint>(b"fake_cuda_lookups\0") else {
            return 0;
        };
        f(name.as_ptr())
    }
}

fn main() {
    let scenario = std::env::args().nth(1).unwrap_or_default();
    // SAFETY (all calls below): out-parameters are live locals; the fake or missing driver
    // answers with a status.
    match scenario.as_str() {
        "basic" => unsafe {
            println!("cuInit={}", status(sys::cuInit(0)));
            let mut n = 0;
            println!("cuDeviceGetCount={}", status(sys::cuDeviceGetCount(&mut n)));
            println!("count={n}");
            println!("again={}", status(sys::cuDeviceGetCount(&mut n)));
            println!("lookups.cuDeviceGetCount={}", lookups(c"cuDeviceGetCount"));
            println!("version={:?}", sys::driver_version());
        },
        "missing_symbol" => unsafe {
            let s = sys::cuCheckpointProcessLock(1, std::ptr::null_mut());
            println!("cuCheckpointProcessLock={}", status(s));
            println!("again={}", status(sys::cuCheckpointProcessLock(1, std::ptr::null_mut())));
            println!("lookups.cuCheckpointProcessLock={}", lookups(c"cuCheckpointProcessLock"));
            report_error("error", "cuCheckpointProcessLock");
            println!("cuInit={}", status(sys::cuInit(0)));
        },
        "too_old" => unsafe {
            println!("cuInit={}", status(sys::cuInit(0)));
            let mut ctx = std::ptr::null_mut();
            let s = sys::cuCtxCreate(&mut ctx, std::ptr::null_mut(), 0, 0);
            println!("cuCtxCreate={}", status(s));
            report_error("cuCtxCreate", "cuCtxCreate");
            println!("lookups.cuCtxCreate={}", lookups(c"cuCtxCreate"));
            let s = sys::cuCtxCreate_v3020(&mut ctx, 0, 0);
            println!("cuCtxCreate_v3020={}", status(s));
            println!("cuCtxSynchronize_v2={}", status(sys::cuCtxSynchronize_v2(std::ptr::null_mut())));
            report_error("cuCtxSynchronize", "cuCtxSynchronize_v2");
        },
        "no_library" => unsafe {
            println!("cuInit={}", status(sys::cuInit(0)));
            println!("again={}", status(sys::cuInit(0)));
            let mut n = 0;
            println!("cuDeviceGetCount={}", status(sys::cuDeviceGetCount(&mut n)));
            report_error("error", "cuInit");
            match sys::library_error() {
                Some(e) => println!("library_error={e}"),
                None => println!("library_error=none"),
            }
            println!("last={}", sys::last_load_error().is_some());
        },
        "concurrent" => {
            let barrier = std::sync::Barrier::new(8);
            let counts: Vec<(sys::CUresult, i32)> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..8)
                    .map(|_| {
                        s.spawn(|| {
                            barrier.wait();
                            let mut n = 0;
                            // SAFETY: as above.
                            let r = unsafe { sys::cuDeviceGetCount(&mut n) };
                            (r, n)
                        })
                    })
                    .collect();
                handles.into_iter().filter_map(|h| h.join().ok()).collect()
            });
            println!("threads={}", counts.len());
            let ok = counts.iter().filter(|(r, n)| *r == sys::CUresult::CUDA_SUCCESS && *n == 3).count();
            println!("ok={ok}");
            println!("lookups.cuDeviceGetCount={}", lookups(c"cuDeviceGetCount"));
        }
        "per_thread" => unsafe {
            println!("set={:?}", sys::set_per_thread_default_stream(true));
            println!("cuMemcpy={}", sys::cuMemcpy(0, 0, 0).0);
            println!("set_again_legacy={}", sys::set_per_thread_default_stream(false).is_err());
            println!("per_thread={}", sys::per_thread_default_stream());
        },
        "legacy" => unsafe {
            println!("cuMemcpy={}", sys::cuMemcpy(0, 0, 0).0);
            println!("set_per_thread_late={}", sys::set_per_thread_default_stream(true).is_err());
        },
        "nccl" => unsafe {
            println!("nccl_version={:?}", cuhost_nccl_sys::nccl_version());
            let mut v = 0;
            println!("ncclGetVersion={:?} {v}", cuhost_nccl_sys::ncclGetVersion(&mut v).name());
            let mut comm = std::ptr::null_mut();
            let s = cuhost_nccl_sys::ncclCommShrink(
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
                &mut comm,
                std::ptr::null_mut(),
                0,
            );
            println!("ncclCommShrink={:?}", s.name());
            match cuhost_nccl_sys::load_error("ncclCommShrink") {
                Some(e) => println!("ncclCommShrink.message={e}"),
                None => println!("ncclCommShrink.message=none"),
            }
        },
        other => {
            eprintln!("unknown scenario {other:?}");
            std::process::exit(2);
        }
    }
}
