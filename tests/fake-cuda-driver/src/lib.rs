//! A stand-in `libcuda` for the loader's and the safe layer's CPU tests.
//!
//! * `cuDriverGetVersion` reports `FAKE_CUDA_DRIVER_VERSION` (default 13000): set it to 12000,
//!   12020, 12040, 12080 or 13000 to emulate that driver.
//! * `cuGetProcAddress_v2` and `cuGetProcAddress` answer from the ABI table that
//!   `cuda-driver-sys` generates from `cudaTypedefs.h` (see [`abi`]): asked for a function at a
//!   version, they hand out the newest ABI of it that both the version asked for and the
//!   emulated driver reach, as a real driver does. No such ABI is "version not sufficient"; a
//!   function this fake does not implement is "symbol not found". `FAKE_CUDA_RESOLVE_DELAY_MS`
//!   makes every lookup sleep, to widen races.
//! * Every implemented entry point records its name, the ABI version it implements and the
//!   arguments that tell versions apart; `fake_cuda_calls` returns the record and
//!   `fake_cuda_lookups(name)` counts the lookups of a name.
//!
//! * `ncclGetVersion` (and no other NCCL function) lets the same file stand in for an old NCCL.
//!
//! Handles are made-up numbers: a context is `0x1000 + device` (primary) or
//! `0x2000 + 16 * n + device` (created), so the device of any context can be read back.
#![allow(non_snake_case, clippy::missing_safety_doc)]

pub mod abi;
mod entry_points;

use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
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
static CALLS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn driver_version() -> c_int {
    std::env::var("FAKE_CUDA_DRIVER_VERSION").ok().and_then(|v| v.parse().ok()).unwrap_or(13000)
}

/// Records one call of an entry point, e.g. `cuMemAdvise@8000 device=-1`.
fn called(what: String) {
    if let Ok(mut all) = CALLS.lock() {
        all.push(what);
    }
}

fn count_lookup(name: &str) {
    if let Ok(mut all) = LOOKUPS.lock() {
        match all.iter_mut().find(|(n, _)| n == name) {
            Some((_, c)) => *c += 1,
            None => all.push((name.to_string(), 1)),
        }
    }
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
    count_lookup(&name);
    let per_thread = flags & PER_THREAD_FLAG != 0;
    // A driver answers with the newest ABI it has that the caller's version reaches; a driver
    // older than the version asked for has only older ABIs to give.
    let reach = version.min(driver_version());
    match abi::answer(&name, reach, per_thread) {
        abi::Answer::Unknown => (QUERY_SYMBOL_NOT_FOUND, 0),
        abi::Answer::TooOld => (QUERY_VERSION_NOT_SUFFICIENT, 0),
        abi::Answer::Abi(abi_version) => match entry_points::address(&name, abi_version, per_thread) {
            Some(addr) => (QUERY_SUCCESS, addr),
            None => (QUERY_SYMBOL_NOT_FOUND, 0),
        },
    }
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

/// Every entry point called so far, one per line (`name@abi-version details`). The string is
/// the caller's to keep; it is never freed.
#[unsafe(no_mangle)]
pub extern "C" fn fake_cuda_calls() -> *const c_char {
    let text = CALLS.lock().map(|all| all.join("\n")).unwrap_or_default();
    CString::new(text).unwrap_or_default().into_raw()
}

/// `ncclGetVersion`, so that this library also stands in for an NCCL that has nothing else:
/// it reports `FAKE_NCCL_VERSION` (default 21803, NCCL 2.18.3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGetVersion(version: *mut c_int) -> c_int {
    if version.is_null() {
        return 4; // ncclInvalidArgument
    }
    let v = std::env::var("FAKE_NCCL_VERSION").ok().and_then(|v| v.parse().ok()).unwrap_or(21803);
    // SAFETY: the caller passes a valid pointer.
    unsafe { *version = v };
    SUCCESS
}
