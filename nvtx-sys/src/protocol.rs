//! The NVTX v3 tool protocol: per-function slots that an attached tool fills.

use core::ffi::c_int;

/// The callback modules of the protocol, by their numeric ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Module {
    /// `nvToolsExt.h` core functions.
    CORE = 1,
    /// `nvToolsExtCuda.h`.
    CUDA = 2,
    /// `nvToolsExtOpenCl.h`.
    OPENCL = 3,
    /// `nvToolsExtCudaRt.h`.
    CUDART = 4,
    /// Domain functions of `nvToolsExt.h`.
    CORE2 = 5,
    /// `nvToolsExtSync.h`.
    SYNC = 6,
}

/// The function address in a slot, or `None` when no tool implements the function.
#[inline(always)]
pub fn slot(_module: Module, _id: u32) -> Option<usize> {
    None
}

/// What a function returns when no tool implements it.
pub trait NoToolDefault {
    /// The documented default.
    fn no_tool_default() -> Self;
}

impl NoToolDefault for () {
    fn no_tool_default() -> Self {}
}

impl NoToolDefault for c_int {
    fn no_tool_default() -> Self {
        -2
    }
}

impl NoToolDefault for u64 {
    fn no_tool_default() -> Self {
        0
    }
}

impl<T> NoToolDefault for *mut T {
    fn no_tool_default() -> Self {
        core::ptr::null_mut()
    }
}

impl<T> NoToolDefault for *const T {
    fn no_tool_default() -> Self {
        core::ptr::null()
    }
}
