//! A stand-in `libcuda` that exports just enough of the driver for the loader's tests.
//!
//! * `cuDriverGetVersion` reports `FAKE_CUDA_DRIVER_VERSION` (default 13000).
//! * `cuGetProcAddress_v2` and `cuGetProcAddress` know a few functions, each introduced at a
//!   version; asking at a version the fake driver does not reach is "version not sufficient",
//!   asking for any other name is "symbol not found". `FAKE_CUDA_RESOLVE_DELAY_MS` makes every
//!   lookup sleep, to widen races.
//! * `fake_cuda_lookups(name)` counts the lookups of a name, for the tests to read.
#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::Mutex;

const SUCCESS: c_int = 0;
const INVALID_VALUE: c_int = 1;
const NOT_FOUND: c_int = 500;
const QUERY_SUCCESS: c_int = 0;
const QUERY_SYMBOL_NOT_FOUND: c_int = 1;
const QUERY_VERSION_NOT_SUFFICIENT: c_int = 2;
const PER_THREAD_FLAG: u64 = 2;

/// The device count the fake driver reports.
pub const FAKE_DEVICE_COUNT: c_int = 3;
/// Returned by the per-thread-default-stream variant of `cuMemcpy`, to tell it apart.
pub const PER_THREAD_MEMCPY_STATUS: c_int = 999;

static LOOKUPS: Mutex<Vec<(String, u32)>> = Mutex::new(Vec::new());

fn driver_version() -> c_int {
    std::env::var("FAKE_CUDA_DRIVER_VERSION").ok().and_then(|v| v.parse().ok()).unwrap_or(13000)
}

unsafe extern "C" fn fake_cuInit(_flags: c_uint) -> c_int {
    SUCCESS
}

unsafe extern "C" fn fake_cuDeviceGetCount(count: *mut c_int) -> c_int {
    if count.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: the caller passes a valid pointer, as the C contract requires.
    unsafe { *count = FAKE_DEVICE_COUNT };
    SUCCESS
}

unsafe extern "C" fn fake_cuMemcpy(_dst: u64, _src: u64, _n: usize) -> c_int {
    SUCCESS
}

unsafe extern "C" fn fake_cuMemcpy_ptds(_dst: u64, _src: u64, _n: usize) -> c_int {
    PER_THREAD_MEMCPY_STATUS
}

unsafe extern "C" fn fake_cuCtxCreate(
    _ctx: *mut *mut c_void,
    _p: *mut c_void,
    _f: c_uint,
    _d: c_int,
) -> c_int {
    SUCCESS
}

/// (name, version introduced, legacy address, per-thread address)
fn table() -> [(&'static str, c_int, usize, usize); 5] {
    [
        ("cuInit", 2000, fake_cuInit as *const () as usize, 0),
        ("cuDeviceGetCount", 2000, fake_cuDeviceGetCount as *const () as usize, 0),
        ("cuMemcpy", 4000, fake_cuMemcpy as *const () as usize, fake_cuMemcpy_ptds as *const () as usize),
        ("cuCtxCreate", 12050, fake_cuCtxCreate as *const () as usize, 0),
        ("cuCtxSynchronize", 13000, fake_cuInit as *const () as usize, 0),
    ]
}

fn lookup(symbol: *const c_char, version: c_int, flags: u64) -> (c_int, usize) {
    if symbol.is_null() {
        return (QUERY_SYMBOL_NOT_FOUND, 0);
    }
    // SAFETY: the caller passes a NUL-terminated name.
    let name = unsafe { CStr::from_ptr(symbol) }.to_string_lossy().into_owned();
    if let Ok(ms) = std::env::var("FAKE_CUDA_RESOLVE_DELAY_MS") {
        std::thread::sleep(std::time::Duration::from_millis(ms.parse().unwrap_or(0)));
    }
    if let Ok(mut all) = LOOKUPS.lock() {
        match all.iter_mut().find(|(n, _)| *n == name) {
            Some((_, c)) => *c += 1,
            None => all.push((name.clone(), 1)),
        }
    }
    let Some((_, introduced, legacy, per_thread)) = table().into_iter().find(|(n, ..)| *n == name) else {
        return (QUERY_SYMBOL_NOT_FOUND, 0);
    };
    if introduced > driver_version() || version < introduced {
        return (QUERY_VERSION_NOT_SUFFICIENT, 0);
    }
    let addr = if flags & PER_THREAD_FLAG != 0 && per_thread != 0 { per_thread } else { legacy };
    (QUERY_SUCCESS, addr)
}

/// `cuDriverGetVersion`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> c_int {
    if version.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: the caller passes a valid pointer.
    unsafe { *version = driver_version() };
    SUCCESS
}

/// `cuGetProcAddress_v2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> c_int {
    let (query, addr) = lookup(symbol, version, flags);
    // SAFETY: the caller passes valid out-pointers (status may be null).
    unsafe {
        if !pfn.is_null() {
            *pfn = addr as *mut c_void;
        }
        if !status.is_null() {
            *status = query;
        }
    }
    if query == QUERY_SUCCESS { SUCCESS } else { NOT_FOUND }
}

/// `cuGetProcAddress` (the 11.3 entry point, without a query result).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> c_int {
    // SAFETY: forwards the caller's pointers.
    unsafe { cuGetProcAddress_v2(symbol, pfn, version, flags, std::ptr::null_mut()) }
}

/// How many times `name` was looked up through either entry point.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fake_cuda_lookups(name: *const c_char) -> c_uint {
    if name.is_null() {
        return 0;
    }
    // SAFETY: the caller passes a NUL-terminated name.
    let name = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
    LOOKUPS.lock().ok().and_then(|all| all.iter().find(|(n, _)| *n == name).map(|(_, c)| *c)).unwrap_or(0)
}
