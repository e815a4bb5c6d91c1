//! The NVTX v3 tool protocol, in Rust.
//!
//! NVIDIA's C headers implement NVTX as a table of function pointers ("slots") inside the
//! program, one per NVTX function, that a tool (Nsight Systems, Nsight Compute, or any library
//! named by `NVTX_INJECTION64_PATH`) fills in. This module is that table and the loader that
//! hands it to the tool, following the
//! [NVTX documentation](https://nvidia.github.io/NVTX/doxygen/index.html) and the protocol
//! fixed by `nvtxDetail/nvtxInit.h` and `nvtxDetail/nvtxImpl.h`:
//!
//! * Every slot starts out "not yet initialised". The first NVTX call in the process, from any
//!   thread, runs [`initialize`] once: it reads `NVTX_INJECTION64_PATH`, loads that library,
//!   and calls its `InitializeInjectionNvtx2` with a `GetExportTable` function. Through the
//!   export tables the tool receives, per callback module, an array of pointers to the slots,
//!   and writes its functions into them. Every slot the tool left alone then becomes "no
//!   tool", and so does every slot when any step fails.
//! * A call then costs one atomic load of its slot: "no tool" returns the documented default
//!   (see [`NoToolDefault`]), anything else is the tool's function and is called.
//!
//! Failures never panic or abort: they leave NVTX a no-op, and [`injection`] says what
//! happened.

mod export;
mod init;

use core::ffi::c_int;
use core::sync::atomic::{AtomicUsize, Ordering};

pub use init::{INJECTION_PATH_VARIABLE, Injection, initialize, injection, injection_nvtx_version};

/// The callback modules of the protocol, by their numeric ids (`NvtxCallbackModule`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Module {
    /// `nvToolsExt.h` core functions (`NVTX_CB_MODULE_CORE`).
    CORE = 1,
    /// `nvToolsExtCuda.h` (`NVTX_CB_MODULE_CUDA`).
    CUDA = 2,
    /// `nvToolsExtOpenCL.h` (`NVTX_CB_MODULE_OPENCL`); this crate declares none of its
    /// functions, but a tool still gets its table.
    OPENCL = 3,
    /// `nvToolsExtCudaRt.h` (`NVTX_CB_MODULE_CUDART`).
    CUDART = 4,
    /// Domain functions of `nvToolsExt.h` and `nvtxInitialize` (`NVTX_CB_MODULE_CORE2`).
    CORE2 = 5,
    /// `nvToolsExtSync.h` (`NVTX_CB_MODULE_SYNC`).
    SYNC = 6,
}

impl Module {
    /// Every module, in id order.
    pub const ALL: [Module; 6] =
        [Module::CORE, Module::CUDA, Module::OPENCL, Module::CUDART, Module::CORE2, Module::SYNC];

    /// The module with this `NvtxCallbackModule` value, if there is one.
    pub const fn from_id(id: u32) -> Option<Module> {
        match id {
            1 => Some(Module::CORE),
            2 => Some(Module::CUDA),
            3 => Some(Module::OPENCL),
            4 => Some(Module::CUDART),
            5 => Some(Module::CORE2),
            6 => Some(Module::SYNC),
            _ => None,
        }
    }

    /// The module's `NVTX_CBID_<module>_SIZE`: one past its highest function id. Id 0 is
    /// unused in every module.
    pub const fn size(self) -> usize {
        match self {
            Module::CORE => 16,
            Module::CUDA => 9,
            Module::OPENCL => 15,
            Module::CUDART => 7,
            Module::CORE2 => 16,
            Module::SYNC => 7,
        }
    }
}

/// The largest `NVTX_CBID_<module>_SIZE`.
pub(crate) const MAX_MODULE_SIZE: usize = 16;

/// Slot value: the process has not initialised NVTX yet.
pub(crate) const NOT_INITIALIZED: usize = usize::MAX;
/// Slot value: no tool implements this function.
pub(crate) const NO_TOOL: usize = 0;

/// One slot per function id and module, indexed `[module id][function id]`; row 0 and column
/// 0 are unused. `AtomicUsize` has the size and alignment of a C function pointer, so a tool
/// can write its function into a slot through the pointer it is given, as it does in C.
pub(crate) static SLOTS: [[AtomicUsize; MAX_MODULE_SIZE]; 7] =
    [const { [const { AtomicUsize::new(NOT_INITIALIZED) }; MAX_MODULE_SIZE] }; 7];

/// The function address in a slot, or `None` when no tool implements the function.
///
/// In the steady state this is one atomic load. The first call in the process initialises
/// NVTX (see [`initialize`]) and then reads the slot again.
#[inline(always)]
pub fn slot(module: Module, id: u32) -> Option<usize> {
    let cell = SLOTS.get(module as usize)?.get(id as usize)?;
    match cell.load(Ordering::Acquire) {
        NO_TOOL => None,
        NOT_INITIALIZED => initialize_then_read(cell),
        function => Some(function),
    }
}

#[cold]
#[inline(never)]
fn initialize_then_read(cell: &AtomicUsize) -> Option<usize> {
    initialize();
    match cell.load(Ordering::Acquire) {
        // Still not initialised only when the tool itself calls NVTX from inside its
        // initialisation: that call gets the default, as if no tool were attached.
        NO_TOOL | NOT_INITIALIZED => None,
        function => Some(function),
    }
}

/// What a function returns when no tool implements it.
pub trait NoToolDefault {
    /// The documented default.
    fn no_tool_default() -> Self;
}

impl NoToolDefault for () {
    #[inline(always)]
    fn no_tool_default() -> Self {}
}

/// `nvtxRangePush*` and `nvtxRangePop` return -2 when no tool is attached.
impl NoToolDefault for c_int {
    #[inline(always)]
    fn no_tool_default() -> Self {
        -2
    }
}

/// `nvtxRangeStart*` returns range id 0 when no tool is attached.
impl NoToolDefault for u64 {
    #[inline(always)]
    fn no_tool_default() -> Self {
        0
    }
}

/// Handle-returning functions return null when no tool is attached.
impl<T> NoToolDefault for *mut T {
    #[inline(always)]
    fn no_tool_default() -> Self {
        core::ptr::null_mut()
    }
}

impl<T> NoToolDefault for *const T {
    #[inline(always)]
    fn no_tool_default() -> Self {
        core::ptr::null()
    }
}
