//! A simulated `libcuda` for checking `cuda-core`'s stream rule on machines without a GPU.
//!
//! Point `CUDA_DRIVER_LIBRARY_PATH` at the built library (`libsim_cuda_driver.so`) before the
//! first driver call, and `cuda-core` runs against it:
//!
//! * **One device** (ordinal 0, compute capability 9.0, 16 GiB) with its primary context.
//! * **Memory** is host bytes: device allocations at made-up addresses ([`memory`]), pinned
//!   allocations in real host memory.
//! * **Virtual memory** ([`memory`]): address reservations, physical allocations (granularity
//!   64 KiB) and their mappings; a map starts a new owner of the addresses, and an unmap (which
//!   waits for nothing, as the driver's) is a release that every use must be ordered before.
//! * **Kernels** ([`kernels`]): a loaded image is a short text naming built-in kernels
//!   (`fill_u32`, `add_u32`) written in Rust; a launch is queued like any other work, and
//!   counts every pointer-sized argument inside a live allocation as read and written.
//! * **Capture and graphs** ([`graphs`]): work queued on a capturing stream is recorded as a
//!   node (with its ranges) of the capture's graph; `cuStreamIsCapturing` and
//!   `cuStreamGetCaptureInfo` tell the truth; a graph launch queues the nodes in capture order
//!   on the stream, each checked as the work it stands for. Calls the driver refuses while
//!   capturing are refused with its status.
//! * **Work is not run when it is queued** ([`engine`]): each stream keeps a queue, and a host
//!   synchronization runs what it waits for in a random order that respects stream order and
//!   event waits, seeded by `SIM_CUDA_SEED` or [`sim_reset`]. A query that could wait answers
//!   "done" (after running what it needs) two times out of three.
//! * **Every operation is checked** ([`checker`], the model the checking driver of
//!   `tests/checked-cuda-driver` shares): vector clocks per stream and host thread, and the
//!   address ranges each operation reads and writes, give the reports (a)–(d).
//! * **NCCL** is simulated by `tests/sim-nccl` (`NCCL_LIBRARY_PATH`), which queues its calls
//!   on this library as `cuMemcpyDtoDAsync` copies, checked like any other. A group's calls
//!   are queued only when the group ends, so it tells the checker the owner epoch of when each
//!   call was made ([`sim_owner_epoch`]) and queues the call as of it ([`sim_queue_as_of`]):
//!   memory that had a new owner in between is reported in (a).
//! * Functions the generated ABI table lists but the simulator does not implement are handed
//!   out as a stub that returns `CUDA_ERROR_NOT_SUPPORTED`, so that the crate's error paths
//!   meet them; [`sim_unsupported`] lists the ones looked up.
//!
//! The `sim_*` functions are for the test program (and the simulated NCCL): resetting between
//! programs, telling the step, the owners of pool blocks and host accesses to pinned memory,
//! queueing work issued earlier, reading the reports.
//! The library emulates driver version 12.4 (`cuDriverGetVersion` = 12040).
#![allow(non_snake_case, clippy::missing_safety_doc)]

#[path = "../../fake-cuda-driver/src/abi.rs"]
pub mod abi;
mod control;
pub mod engine;
mod entry_points;
pub mod graphs;
pub mod kernels;
pub mod memory;
pub mod rng;

pub use control::*;
pub use stream_checker::{checker, clock};

use engine::{Sim, Until};
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::{LazyLock, Mutex, PoisonError};

/// The driver version the simulator reports.
pub const DRIVER_VERSION: c_int = 12040;

pub(crate) const SUCCESS: c_int = 0;
const INVALID_VALUE: c_int = 1;
pub(crate) const NOT_FOUND: c_int = 500;
const NOT_READY: c_int = 600;
pub(crate) const NOT_SUPPORTED: c_int = 801;
pub(crate) const INVALID_HANDLE: c_int = 400;
const QUERY_SUCCESS: c_int = 0;
const QUERY_SYMBOL_NOT_FOUND: c_int = 1;
const QUERY_VERSION_NOT_SUFFICIENT: c_int = 2;

static SIM: LazyLock<Mutex<Sim>> = LazyLock::new(|| {
    let seed = std::env::var("SIM_CUDA_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    Mutex::new(Sim::new(seed))
});

/// Runs `f` on the simulator, under its lock.
fn with_sim<R>(f: impl FnOnce(&mut Sim) -> R) -> R {
    let mut sim = SIM.lock().unwrap_or_else(PoisonError::into_inner);
    f(&mut sim)
}

/// Runs what `until` needs; host functions are called with the lock released, as a driver
/// calls them on a thread of its own.
fn run_until(until: Until) {
    while let Some((f, data)) = with_sim(|s| s.run(until)) {
        // SAFETY: the function and its argument were given together to `cuLaunchHostFunc`.
        unsafe { f(data as *mut c_void) };
    }
}

fn lookup(symbol: *const c_char, version: c_int) -> (c_int, usize) {
    if symbol.is_null() {
        return (QUERY_SYMBOL_NOT_FOUND, 0);
    }
    // SAFETY: the caller passes a NUL-terminated name.
    let name = unsafe { CStr::from_ptr(symbol) }.to_string_lossy().into_owned();
    match abi::answer(&name, version.min(DRIVER_VERSION), false) {
        abi::Answer::Unknown => (QUERY_SYMBOL_NOT_FOUND, 0),
        abi::Answer::TooOld => (QUERY_VERSION_NOT_SUFFICIENT, 0),
        abi::Answer::Abi(abi) => match entry_points::address(&name, abi) {
            Some(addr) => (QUERY_SUCCESS, addr),
            None => {
                with_sim(|s| {
                    if !s.unsupported.contains(&name) {
                        s.unsupported.push(name);
                    }
                });
                (QUERY_SUCCESS, entry_points::unsupported as *const () as usize)
            }
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
    unsafe { *version = DRIVER_VERSION };
    SUCCESS
}

/// `cuGetProcAddress_v2`: the newest ABI of `symbol` at or below `version` (and the driver's).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    _flags: u64,
    status: *mut c_int,
) -> c_int {
    let (query, addr) = lookup(symbol, version);
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

/// `cuGetProcAddress` (without a query result).
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
