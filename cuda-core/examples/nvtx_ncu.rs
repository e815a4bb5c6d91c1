//! A real tool sees our NVTX ranges: launches kernel `inside_range` inside the NVTX range
//! "inside" and kernel `outside_range` outside any range. Run it under Nsight Compute with
//!
//! ```text
//! ncu --nvtx --nvtx-include "inside/" nvtx_ncu
//! ```
//!
//! and exactly one kernel, `inside_range`, is profiled. Kernels come from PTX loaded with the
//! raw driver API, so the example needs nothing but a driver.

use cuhost::driver_sys as sys;
use cuhost::nvtx;
use std::ffi::CStr;
use std::process::ExitCode;

const PTX: &CStr = c"
.version 7.0
.target sm_70
.address_size 64
.visible .entry inside_range() { ret; }
.visible .entry outside_range() { ret; }
";

fn check(call: &str, status: sys::CUresult) -> Result<(), String> {
    if status == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{call} failed: {} ({})", status.name().unwrap_or("unknown status"), status.0))
    }
}

fn launch(function: sys::CUfunction) -> Result<(), String> {
    // SAFETY: a kernel without parameters, launched 1x1 on the default stream.
    check("cuLaunchKernel", unsafe {
        sys::cuLaunchKernel(
            function,
            1,
            1,
            1,
            1,
            1,
            1,
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    })
}

fn run() -> Result<(), String> {
    println!("NVTX: {:?}", nvtx::injection());
    let mut device = 0;
    let mut context = std::ptr::null_mut();
    let mut module = std::ptr::null_mut();
    let (mut inside, mut outside) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: out-parameters to locals; the PTX string is NUL-terminated.
    unsafe {
        check("cuInit", sys::cuInit(0))?;
        check("cuDeviceGet", sys::cuDeviceGet(&mut device, 0))?;
        check("cuDevicePrimaryCtxRetain", sys::cuDevicePrimaryCtxRetain(&mut context, device))?;
        check("cuCtxSetCurrent", sys::cuCtxSetCurrent(context))?;
        check("cuModuleLoadData", sys::cuModuleLoadData(&mut module, PTX.as_ptr().cast()))?;
        check(
            "cuModuleGetFunction",
            sys::cuModuleGetFunction(&mut inside, module, c"inside_range".as_ptr()),
        )?;
        check(
            "cuModuleGetFunction",
            sys::cuModuleGetFunction(&mut outside, module, c"outside_range".as_ptr()),
        )?;
    }
    {
        let range = nvtx::push_range("inside");
        println!("range \"inside\" pushed at level {:?}", range.level());
        launch(inside)?;
    }
    launch(outside)?;
    // SAFETY: no arguments; the context is current.
    check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })?;
    println!("launched inside_range (in range \"inside\") and outside_range (in no range)");
    Ok(())
}

fn main() -> ExitCode {
    // The default pools cache freed blocks for reuse: give them back before exiting, so
    // that a leak checker (compute-sanitizer --leak-check full) sees only real leaks.
    match run().and_then(|r| cuhost::pool::release_default_pools().map(|()| r).map_err(|e| e.to_string())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
