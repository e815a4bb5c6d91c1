//! A kernel that faults surfaces as an error from the next synchronizing call, without a panic
//! or an abort, and later calls keep returning errors instead of crashing.
//!
//! A fault poisons the context for the rest of the process, so this binary holds only this test.

use cuda_tests::{TestResult, drv, ensure, ensure_eq, gpu};
use cuhost::alloc::{Allocator, DeviceAllocator};
use cuhost::{Context, Device, DeviceBuffer, Stream, StreamFlags};
use cuhost_driver_sys as sys;
use std::ffi::c_void;
use std::sync::Arc;

fn main() {
    cuda_tests::run(&[gpu(
        "illegal_address_is_reported_by_synchronize",
        illegal_address_is_reported_by_synchronize,
    )]);
}

/// Stores 42 through the pointer it is given.
const PTX: &str = "
.version 7.0
.target sm_75
.address_size 64
.visible .entry store42(.param .u64 p)
{
    .reg .u64 %rd<2>;
    .reg .u32 %r<2>;
    ld.param.u64 %rd1, [p];
    mov.u32 %r1, 42;
    st.global.u32 [%rd1], %r1;
    ret;
}
\0";

fn illegal_address_is_reported_by_synchronize() -> TestResult {
    let ctx = Context::primary(&Device::get(0)?)?;
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    ctx.bind_to_thread()?;
    let mut module = std::ptr::null_mut();
    let mut function = std::ptr::null_mut();
    // SAFETY: a NUL-terminated PTX image; out-parameters.
    unsafe {
        drv("cuModuleLoadData", sys::cuModuleLoadData(&mut module, PTX.as_ptr().cast()))?;
        drv("cuModuleGetFunction", sys::cuModuleGetFunction(&mut function, module, c"store42".as_ptr()))?;
    }
    let launch = |mut ptr: u64| -> TestResult {
        let mut params = [(&raw mut ptr).cast::<c_void>()];
        // SAFETY: one u64 parameter, as the kernel declares.
        drv("cuLaunchKernel", unsafe {
            sys::cuLaunchKernel(
                function,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                s.as_raw(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })
    };
    // Plain cuMemAlloc memory, so that allocating and freeing call the driver (a pool may
    // serve both from its cache without a call, which a poisoned context cannot refuse).
    let plain: Arc<dyn Allocator> = Arc::new(DeviceAllocator::new(&ctx));
    // First a good store, to show the kernel works.
    let mut good = DeviceBuffer::<u32>::new_in(&s, 1, plain.clone())?;
    good.copy_from(&[0])?;
    launch(good.as_raw())?;
    s.synchronize()?;
    ensure_eq!(good.to_vec()?, vec![42]);
    // Then a store to an address nothing maps.
    launch(0x10)?;
    let err = s.synchronize().err().ok_or("a faulting kernel synchronized cleanly")?;
    ensure_eq!(err.driver_status(), Some(sys::CUresult::CUDA_ERROR_ILLEGAL_ADDRESS));
    ensure!(err.to_string().contains("cuStreamSynchronize"), "error text: {err}");
    // The context is now unusable, and says so rather than crashing.
    ensure!(ctx.synchronize().is_err(), "a poisoned context synchronized cleanly");
    ensure!(DeviceBuffer::<u32>::new_in(&s, 4, plain).is_err(), "a poisoned context allocated");
    // Dropping everything keeps the errors instead of panicking.
    drop(good);
    drop(s);
    ensure!(!ctx.take_deferred_errors().is_empty(), "freeing in a poisoned context reported nothing");
    Ok(())
}
