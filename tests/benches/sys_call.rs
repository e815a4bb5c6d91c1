//! The cost of calling through the lazily resolved `-sys` functions, against calling the
//! function pointer the library hands out directly.

use cuda_tests::bench::{Row, compare, print_table};
use cuhost_driver_sys as sys;
use std::ffi::c_void;
use std::hint::black_box;

fn main() {
    let mut rows: Vec<Row> = Vec::new();
    // SAFETY: cuInit/cuGetProcAddress with live out-pointers; the direct pointer is called with
    // the signature of cuCtxGetCurrent at ABI version 4000.
    unsafe {
        if sys::cuInit(0) != sys::CUresult::CUDA_SUCCESS {
            eprintln!("no CUDA driver or device: {:?}", sys::library_error().map(|e| e.to_string()));
            return;
        }
        let mut pfn: *mut c_void = std::ptr::null_mut();
        let mut q = sys::CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SUCCESS;
        let s = sys::cuGetProcAddress(c"cuCtxGetCurrent".as_ptr(), &mut pfn, 4000, 0, &mut q);
        if s != sys::CUresult::CUDA_SUCCESS || pfn.is_null() {
            eprintln!("cuGetProcAddress failed");
            return;
        }
        let direct: unsafe extern "C" fn(*mut sys::CUcontext) -> sys::CUresult = std::mem::transmute(pfn);
        let (mut ctx_a, mut ctx_b): (sys::CUcontext, sys::CUcontext) =
            (std::ptr::null_mut(), std::ptr::null_mut());
        rows.push(compare(
            "cuCtxGetCurrent via cuda-driver-sys",
            31,
            200_000,
            || {
                black_box(sys::cuCtxGetCurrent(black_box(&mut ctx_a)));
            },
            || {
                black_box(direct(black_box(&mut ctx_b)));
            },
        ));
        let (mut count_a, mut count_b) = (0, 0);
        let mut pfn: *mut c_void = std::ptr::null_mut();
        let s = sys::cuGetProcAddress(c"cuDeviceGetCount".as_ptr(), &mut pfn, 2000, 0, &mut q);
        if s == sys::CUresult::CUDA_SUCCESS && !pfn.is_null() {
            let direct: unsafe extern "C" fn(*mut i32) -> sys::CUresult = std::mem::transmute(pfn);
            rows.push(compare(
                "cuDeviceGetCount via cuda-driver-sys",
                31,
                200_000,
                || {
                    black_box(sys::cuDeviceGetCount(black_box(&mut count_a)));
                },
                || {
                    black_box(direct(black_box(&mut count_b)));
                },
            ));
        }
    }
    print_table("-sys call overhead (raw = the driver's function pointer called directly)", &rows);
}
