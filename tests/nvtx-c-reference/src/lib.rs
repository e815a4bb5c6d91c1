//! NVIDIA's header-only C implementation of NVTX, compiled from the wheel's headers by the
//! build script, for benchmarking `nvtx-sys` against it in the same process.

use std::ffi::{CStr, c_int};

#[cfg(nvtx_c_reference)]
unsafe extern "C" {
    fn nvtx_c_push_pop_n(message: *const std::ffi::c_char, n: u64) -> c_int;
}

/// Whether the C implementation was compiled (the headers and a C compiler were there).
pub fn available() -> bool {
    cfg!(nvtx_c_reference)
}

/// `n` pairs of `nvtxRangePushA(message)` + `nvtxRangePop()` through the C implementation;
/// the last pop's value, or `None` when the C implementation was not compiled.
pub fn push_pop_n(message: &CStr, n: u64) -> Option<c_int> {
    #[cfg(nvtx_c_reference)]
    {
        // SAFETY: a NUL-terminated string that lives through the call.
        Some(unsafe { nvtx_c_push_pop_n(message.as_ptr(), n) })
    }
    #[cfg(not(nvtx_c_reference))]
    {
        let _ = (message, n);
        None
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn without_a_tool_pop_returns_minus_two() {
        if super::available() {
            // No tool is attached unless NVTX_INJECTION64_PATH is set.
            if std::env::var_os("NVTX_INJECTION64_PATH").is_none() {
                assert_eq!(super::push_pop_n(c"x", 3), Some(-2));
            }
        } else {
            assert_eq!(super::push_pop_n(c"x", 3), None);
        }
    }
}
