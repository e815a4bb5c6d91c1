//! NVTX with no tool attached: a push+pop pair through `nvtx-sys` (pure Rust) and through
//! `cuhost::nvtx`, against NVIDIA's header-only C implementation compiled from the wheel
//! headers into this binary (`nvtx-c-reference`). Each side runs its pairs in a loop of its own
//! language, so neither pays a call per pair that the other does not.

use cuda_tests::bench::{Row, compare, print_table};
use cuhost::nvtx;
use cuhost_nvtx_sys as sys;
use std::ffi::CStr;
use std::hint::black_box;

const PAIRS: u64 = 1000;

#[inline(never)]
fn sys_push_pop_n(message: &CStr, n: u64) -> i32 {
    let mut last = 0;
    for _ in 0..n {
        // SAFETY: a NUL-terminated string that lives through the call.
        unsafe { sys::nvtxRangePushA(black_box(message).as_ptr()) };
        // SAFETY: no arguments.
        last = unsafe { sys::nvtxRangePop() };
    }
    last
}

#[inline(never)]
fn safe_push_pop_n(message: &CStr, n: u64) {
    for _ in 0..n {
        drop(black_box(nvtx::push_range(black_box(message))));
    }
}

#[inline(never)]
fn safe_str_push_pop_n(message: &str, n: u64) {
    for _ in 0..n {
        drop(black_box(nvtx::push_range(black_box(message))));
    }
}

fn per_pair(mut row: Row) -> Row {
    row.ours /= PAIRS as f64;
    row.raw /= PAIRS as f64;
    row
}

fn main() {
    if std::env::var_os("NVTX_INJECTION64_PATH").is_some() {
        eprintln!("NVTX_INJECTION64_PATH is set: this benchmark measures NVTX with no tool attached");
        return;
    }
    if !nvtx_c_reference::available() {
        eprintln!(
            "the C reference was not built (NVTX headers missing: run `cargo xtask bindgen`); \
             timing nvtx-sys alone"
        );
    }
    let message = c"bench";
    // Both implementations initialise on their first call; do that outside the timing.
    let (ours, theirs) = (sys_push_pop_n(message, 1), nvtx_c_reference::push_pop_n(message, 1));
    println!("no tool: nvtxRangePop returns {ours} (nvtx-sys) and {theirs:?} (C headers)");
    let c = |_: ()| {
        black_box(nvtx_c_reference::push_pop_n(black_box(message), PAIRS));
    };
    let rows = vec![
        per_pair(compare(
            "push+pop, nvtx-sys (raw = C headers)",
            41,
            2_000,
            || {
                black_box(sys_push_pop_n(message, PAIRS));
            },
            || c(()),
        )),
        per_pair(compare(
            "push+pop, cuhost::nvtx::push_range(&CStr) (raw = C headers)",
            41,
            2_000,
            || safe_push_pop_n(message, PAIRS),
            || c(()),
        )),
        per_pair(compare(
            "push+pop, cuhost::nvtx::push_range(&str) (raw = C headers)",
            41,
            2_000,
            || safe_str_push_pop_n("bench", PAIRS),
            || c(()),
        )),
    ];
    print_table("NVTX push+pop pair with no tool attached, ns per pair", &rows);
}
