//! The functions the test program calls, besides the driver's: reset between programs, tell
//! what the driver cannot see (the step, pool blocks changing owner, host accesses to pinned
//! memory), and read the reports.

use crate::checker::{Category, Range};
use crate::engine::Until;
use crate::{run_until, with_sim};
use std::ffi::{CString, c_char, c_int};

/// Runs everything still queued, then starts a new program: clocks, accesses, owners and
/// reports are forgotten (the agents, streams, events and live memory stay), memory freed
/// since the last reset is given back, and the random choices follow `seed`.
#[unsafe(no_mangle)]
pub extern "C" fn sim_reset(seed: u64) {
    run_until(Until::All);
    with_sim(|s| s.reset(seed));
}

/// Step `step` of the program begins on the calling thread, after the step before (on
/// whichever thread it ran): the thread has seen all that thread had.
#[unsafe(no_mangle)]
pub extern "C" fn sim_set_step(step: u32) {
    with_sim(|s| {
        let host = s.host();
        s.checker.set_step(step, host);
    });
}

/// The `size` bytes at `ptr` (device memory, or pinned host memory) have a new owner from now
/// on: a pool handed the block out again (the pool's `malloc_postprocess` hook tells it).
#[unsafe(no_mangle)]
pub extern "C" fn sim_new_owner(ptr: u64, size: u64) {
    with_sim(|s| s.checker.new_owner(Range::new(ptr, size)));
}

/// The newest owner epoch: what work issued now and queued later (an NCCL group's calls,
/// queued when the group ends) passes to [`sim_queue_as_of`] when it is queued.
#[unsafe(no_mangle)]
pub extern "C" fn sim_owner_epoch() -> u64 {
    with_sim(|s| s.checker.epoch())
}

/// The work the calling thread queues from now on was issued when the newest owner epoch was
/// `reads` (for the memory it reads) and `writes` (for the memory it writes), as
/// [`sim_owner_epoch`] said then: memory that has had a new owner since is a report of category
/// (a). `sim_queue_as_of(0, 0)` goes back to work issued as it is queued.
#[unsafe(no_mangle)]
pub extern "C" fn sim_queue_as_of(reads: u64, writes: u64) {
    crate::engine::queue_as_of(reads, writes);
}

/// The calling thread reads (or, with `write` non-zero, writes) the `len` bytes of pinned
/// memory at `ptr` now, through a slice the crate handed out.
#[unsafe(no_mangle)]
pub extern "C" fn sim_host_access(ptr: u64, len: u64, write: c_int) {
    with_sim(|s| {
        let host = s.host();
        let at = s.checker.tick(host);
        let site = s.checker.site(host, if write != 0 { "host write" } else { "host read" });
        s.checker.access(at, Range::new(ptr, len), write != 0, site);
    });
}

/// The table `cudaCheckGetHooks` hands out (the layout `cuda-driver-sys` reads).
#[repr(C)]
pub struct CheckHooks {
    size: u32,
    new_owner: extern "C" fn(u64, u64),
    host_access: extern "C" fn(u64, u64, c_int),
}

static HOOKS: CheckHooks = CheckHooks {
    size: size_of::<CheckHooks>() as u32,
    new_owner: sim_new_owner,
    host_access: sim_host_access,
};

/// The checking driver's hooks, through which `cuda-core` tells [`sim_new_owner`] and
/// [`sim_host_access`] itself; null when `SIM_CUDA_CHECK_HOOKS=0` (as `cargo xtask budget`
/// runs: NVIDIA's driver has none).
#[unsafe(no_mangle)]
pub extern "C" fn cudaCheckGetHooks() -> *const CheckHooks {
    if std::env::var_os("SIM_CUDA_CHECK_HOOKS").is_some_and(|v| v == "0") {
        return std::ptr::null();
    }
    &HOOKS
}

/// Whether sites carry the Rust call stack (captured unresolved, resolved in a report).
#[unsafe(no_mangle)]
pub extern "C" fn sim_set_backtraces(on: c_int) {
    with_sim(|s| s.checker.backtraces = on != 0);
}

/// How many reports of category `category` (0 to 3: (a) to (d)) the program made since the
/// last reset.
#[unsafe(no_mangle)]
pub extern "C" fn sim_report_count(category: c_int) -> u64 {
    let Some(c) = Category::from_number(category) else { return 0 };
    with_sim(|s| s.checker.count(c))
}

/// How many times `cuEventQuery` was called with an event that does not exist (destroyed, or
/// never made) since the process started: with a real driver, a use after free.
#[unsafe(no_mangle)]
pub extern "C" fn sim_dead_event_queries() -> u64 {
    crate::entry_points::DEAD_EVENT_QUERIES.load(std::sync::atomic::Ordering::Relaxed)
}

/// The reports since the last reset, in words; free the string with [`sim_free_string`].
#[unsafe(no_mangle)]
pub extern "C" fn sim_reports() -> *mut c_char {
    into_c(with_sim(|s| s.checker.reports_text()))
}

/// The driver functions looked up that the simulator does not implement (each answers
/// `CUDA_ERROR_NOT_SUPPORTED`), one per line; free the string with [`sim_free_string`].
#[unsafe(no_mangle)]
pub extern "C" fn sim_unsupported() -> *mut c_char {
    into_c(with_sim(|s| s.unsupported.join("\n")))
}

/// Frees a string this library returned.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sim_free_string(text: *mut c_char) {
    if !text.is_null() {
        // SAFETY: made by `into_c`, freed once, as the caller promises.
        drop(unsafe { CString::from_raw(text) });
    }
}

fn into_c(text: String) -> *mut c_char {
    CString::new(text.replace('\0', " ")).unwrap_or_default().into_raw()
}
