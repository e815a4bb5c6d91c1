//! Real calls through `cuda-driver-sys`: init, devices, memory, and `cuGetProcAddress`.

use cuda_tests::{TestResult, drv, ensure, ensure_eq, gpu};
use cuhost_driver_sys as sys;
use std::ffi::c_void;

fn main() {
    cuda_tests::run(&[
        gpu("init_and_count_devices", init_and_count_devices),
        gpu("alloc_copy_free_round_trip", alloc_copy_free_round_trip),
        gpu("get_proc_address_returns_a_working_function", get_proc_address_returns_a_working_function),
        gpu("driver_version_matches_the_loader", driver_version_matches_the_loader),
    ]);
}

fn init_and_count_devices() -> TestResult {
    // SAFETY: plain out-parameter calls.
    drv("cuInit", unsafe { sys::cuInit(0) })?;
    let mut n = 0;
    drv("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut n) })?;
    ensure!(n >= 1, "expected a device, found {n}");
    let mut dev = 0;
    drv("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut dev, 0) })?;
    let mut name = [0 as std::ffi::c_char; 256];
    drv("cuDeviceGetName", unsafe { sys::cuDeviceGetName(name.as_mut_ptr(), 256, dev) })?;
    // SAFETY: the driver wrote a NUL-terminated name into the buffer.
    let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned();
    ensure!(!name.is_empty(), "empty device name");
    // An out-of-range ordinal is refused by the driver, not by a crash.
    let status = unsafe { sys::cuDeviceGet(&mut dev, n + 100) };
    ensure_eq!(status, sys::CUresult::CUDA_ERROR_INVALID_DEVICE);
    Ok(())
}

fn with_primary_context(f: impl FnOnce() -> TestResult) -> TestResult {
    // SAFETY: the primary context of device 0 is retained, made current, and released.
    unsafe {
        drv("cuInit", sys::cuInit(0))?;
        let mut ctx = std::ptr::null_mut();
        drv("cuDevicePrimaryCtxRetain", sys::cuDevicePrimaryCtxRetain(&mut ctx, 0))?;
        drv("cuCtxSetCurrent", sys::cuCtxSetCurrent(ctx))?;
        let r = f();
        drv("cuDevicePrimaryCtxRelease", sys::cuDevicePrimaryCtxRelease(0))?;
        r
    }
}

fn alloc_copy_free_round_trip() -> TestResult {
    with_primary_context(|| {
        let host: Vec<u32> = (0..4096u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
        let bytes = host.len() * 4;
        let mut back = vec![0u32; host.len()];
        let mut dptr: sys::CUdeviceptr = 0;
        // SAFETY: sizes match the host buffers; the device buffer is freed at the end.
        unsafe {
            drv("cuMemAlloc", sys::cuMemAlloc(&mut dptr, bytes))?;
            ensure!(dptr != 0, "cuMemAlloc returned a null pointer");
            drv("cuMemcpyHtoD", sys::cuMemcpyHtoD(dptr, host.as_ptr().cast(), bytes))?;
            drv("cuMemsetD32", sys::cuMemsetD32(dptr + 4, 7, 1))?;
            drv("cuMemcpyDtoH", sys::cuMemcpyDtoH(back.as_mut_ptr().cast(), dptr, bytes))?;
            let (mut free, mut total) = (0usize, 0usize);
            drv("cuMemGetInfo", sys::cuMemGetInfo(&mut free, &mut total))?;
            ensure!(free <= total && total > 0, "free {free} total {total}");
            drv("cuMemFree", sys::cuMemFree(dptr))?;
        }
        ensure_eq!(back[0], host[0]);
        ensure_eq!(back[1], 7);
        ensure_eq!(back[2..], host[2..]);
        Ok(())
    })
}

fn get_proc_address_returns_a_working_function() -> TestResult {
    // SAFETY: the returned address is called with the signature of cuDeviceGetCount at 2000.
    unsafe {
        drv("cuInit", sys::cuInit(0))?;
        let mut pfn: *mut c_void = std::ptr::null_mut();
        let mut query = sys::CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SUCCESS;
        drv(
            "cuGetProcAddress",
            sys::cuGetProcAddress(c"cuDeviceGetCount".as_ptr(), &mut pfn, 2000, 0, &mut query),
        )?;
        ensure_eq!(query, sys::CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SUCCESS);
        ensure!(!pfn.is_null(), "null address");
        let f: unsafe extern "C" fn(*mut i32) -> sys::CUresult = std::mem::transmute(pfn);
        let (mut a, mut b) = (0, 0);
        drv("cuDeviceGetCount (by address)", f(&mut a))?;
        drv("cuDeviceGetCount", sys::cuDeviceGetCount(&mut b))?;
        ensure_eq!(a, b);
        // A name the driver does not know is reported in the query result, with no address.
        pfn = std::ptr::null_mut();
        let status = sys::cuGetProcAddress(c"cuNoSuchFunction".as_ptr(), &mut pfn, 13000, 0, &mut query);
        ensure!(
            status == sys::CUresult::CUDA_SUCCESS || status == sys::CUresult::CUDA_ERROR_NOT_FOUND,
            "unexpected status {status:?}"
        );
        ensure_eq!(query, sys::CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
        ensure!(pfn.is_null(), "an address came back for an unknown name");
    }
    Ok(())
}

fn driver_version_matches_the_loader() -> TestResult {
    let mut v = 0;
    // SAFETY: one int out-parameter.
    drv("cuDriverGetVersion", unsafe { sys::cuDriverGetVersion(&mut v) })?;
    let loaded = sys::driver_version().map_err(|e| e.to_string())?;
    ensure_eq!(v, loaded);
    ensure!(v >= 12000, "driver reports CUDA {v}");
    ensure!(sys::library_path().is_some(), "loader did not record the library path");
    Ok(())
}
