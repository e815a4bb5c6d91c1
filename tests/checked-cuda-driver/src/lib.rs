//! A `libcuda` that checks `cuda-core`'s stream rule on a GPU.
//!
//! Point `CUDA_DRIVER_LIBRARY_PATH` at the built library (`libchecked_cuda_driver.so`) and a
//! program that loads the driver through `cuda-driver-sys` runs against it. It opens the real
//! driver (`CUDA_CHECK_REAL_DRIVER`, default `libcuda.so.1`) and answers `cuDriverGetVersion`
//! and `cuGetProcAddress` with the real answers, except for the functions it models
//! ([`wrappers`]): for those it hands out a wrapper that calls the real function and, when it
//! succeeds, tells the happens-before checker of `stream-checker` ([`model`]) what the call
//! did: which memory it allocated or freed, which ranges the queued work reads and writes, on
//! which stream, and what the streams, events and host threads have waited for.
//!
//! What no driver call shows (a pool handing a cached block out again, the host taking a
//! slice of pinned memory), `cuda-core` tells through the table [`cudaCheckGetHooks`] returns.
//!
//! Each report is printed to standard error when it is made (both sites: host thread, driver
//! call, and with `CUDA_CHECK_BACKTRACE=1` the Rust call stack). At exit a summary line per
//! category is printed, and when a report of (a)–(c) was made the process exits with status
//! [`EXIT_STATUS`], so that a test that breaks the rule fails.
#![allow(non_snake_case, clippy::missing_safety_doc)]

#[path = "../../fake-cuda-driver/src/abi.rs"]
pub mod abi;
pub mod model;
mod real;
pub mod wrappers;

use std::ffi::{CStr, c_char, c_int, c_void};

/// The exit status of a process in which a report of (a)–(c) was made.
pub const EXIT_STATUS: c_int = 86;

const SUCCESS: c_int = 0;
const INVALID_VALUE: c_int = 1;
const NOT_INITIALIZED: c_int = 3;
const NOT_FOUND: c_int = 500;
/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
const PER_THREAD_FLAG: u64 = 2;

/// `cuDriverGetVersion`: the real driver's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> c_int {
    let Some(real) = real::driver() else { return NOT_INITIALIZED };
    if version.is_null() {
        return INVALID_VALUE;
    }
    model::start();
    // SAFETY: checked non-null; the caller passes a valid pointer.
    unsafe { *version = real.version };
    SUCCESS
}

/// `cuGetProcAddress_v2`: the real driver's answer, or the wrapper of a modelled function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { get_proc(symbol, pfn, version, flags, status) }
}

/// `cuGetProcAddress` (without a query result).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { get_proc(symbol, pfn, version, flags, std::ptr::null_mut()) }
}

unsafe fn get_proc(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> c_int {
    let Some(real) = real::driver() else { return NOT_INITIALIZED };
    if symbol.is_null() || pfn.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: the caller passes a NUL-terminated name.
    let name = unsafe { CStr::from_ptr(symbol) }.to_string_lossy();
    if let Some(ours) = own_export(&name, version) {
        // SAFETY: valid out-pointers, checked or as the caller promises (status may be null).
        unsafe {
            *pfn = ours as *mut c_void;
            if !status.is_null() {
                *status = 0;
            }
        }
        return SUCCESS;
    }
    // SAFETY: forwarded to the real driver.
    let result = unsafe { real.get_proc(symbol, pfn, version, flags, status) };
    // SAFETY: the real driver wrote `pfn`.
    let found = unsafe { *pfn };
    if result != SUCCESS || found.is_null() {
        return result;
    }
    let per_thread = flags & PER_THREAD_FLAG != 0;
    let abi = match abi::answer(&name, version.min(real.version), per_thread) {
        abi::Answer::Abi(abi) => abi,
        _ => return result,
    };
    match wrappers::wrap(&name, abi, per_thread, found as usize) {
        // SAFETY: as above.
        Some(wrapper) => unsafe { *pfn = wrapper as *mut c_void },
        None => model::looked_up_unmodelled(&name),
    }
    result
}

/// This library's own answer for the functions it exports itself.
fn own_export(name: &str, version: c_int) -> Option<usize> {
    match name {
        "cuGetProcAddress" if version >= 12000 => Some(cuGetProcAddress_v2 as *const () as usize),
        "cuGetProcAddress" => Some(cuGetProcAddress as *const () as usize),
        "cuDriverGetVersion" => Some(cuDriverGetVersion as *const () as usize),
        _ => None,
    }
}

/// The table of `cudaCheckGetHooks` (the layout `cuda-driver-sys` reads).
#[repr(C)]
pub struct CheckHooks {
    size: u32,
    new_owner: extern "C" fn(u64, u64),
    host_access: extern "C" fn(u64, u64, c_int),
    launch_reads: extern "C" fn(u64),
}

static HOOKS: CheckHooks = CheckHooks {
    size: size_of::<CheckHooks>() as u32,
    new_owner: model::new_owner_hook,
    host_access: model::host_access_hook,
    launch_reads: wrappers::launch_reads_hook,
};

/// The checker's hooks, through which `cuda-core` tells what no driver call shows.
#[unsafe(no_mangle)]
pub extern "C" fn cudaCheckGetHooks() -> *const CheckHooks {
    &HOOKS
}

/// `NOT_FOUND`, for wrappers whose real function is missing.
pub(crate) const fn not_found() -> c_int {
    NOT_FOUND
}
