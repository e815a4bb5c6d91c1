//! Safe, idiomatic CUDA for Rust.
//!
//! `cuda-core` wraps the raw `-sys` crates of this workspace ([`cuhost_driver_sys`],
//! [`cuhost_cudart_sys`], [`cuhost_nvtx_sys`], [`cuhost_nccl_sys`]) in one module per section of the CUDA driver API.
//!
//! # Contracts
//!
//! * **Errors.** Every fallible call returns [`Result`]. An [`Error`] names the C call that
//!   failed and its status by name, or says which argument was rejected before any call was
//!   made. Nothing in this crate panics on input from the user or answers from the driver.
//! * **Loading.** No CUDA library is needed to build. The driver, runtime and NCCL are loaded on
//!   first use; when one is missing, calls fail with [`Error::Load`], which names the files tried
//!   and what to install.
//! * **`unsafe`.** It is kept to what the compiler cannot check: launching a kernel (its
//!   parameters must match the kernel), adopting raw handles, and reading memory a kernel may
//!   still be writing. Everything checkable (sizes, bounds, alignment) is checked.
//! * **Streams.** Work that runs asynchronously takes the stream it runs on explicitly. Memory
//!   is given back in its own stream's order, after every other stream that safe operations
//!   queued work touching it on (they note those streams on the memory's owner by themselves).
//! * **Soundness.** No sequence of safe calls reaches undefined behaviour, on the host or on the
//!   device; the guide's safety chapter says what that covers, what each `unsafe` function and
//!   `unsafe trait` asks, and where each rule is tested.
//!
//! # Errors of thin wrappers
//!
//! Many functions make one C call and link that call's section of NVIDIA's reference. Where
//! such a function's documentation says nothing more about errors, it fails exactly when that
//! call does: with [`Error::Driver`] (for the runtime [`Error::Runtime`], for NCCL
//! [`Error::Nccl`]) naming the call and the status it returned, whose meaning for that call the
//! linked section lists; or with [`Error::Load`] when the library, or that function in it, is
//! missing from what is installed. Constructors that first initialise the driver
//! ([`device::init`]) can also fail with `cuInit`'s status, and an error kept from an earlier
//! `Drop` is returned as the [`context`] module describes. Failures that depend on the
//! arguments, or on state this crate checks before the call, are documented on the function
//! itself.

// Every literal of a C struct starts from its default (all zeroes, as C code starts from `{0}`),
// even where it names every field today: a newer header may add fields (`cargo xtask compat`
// checks it).
#![allow(clippy::needless_update)]
// An item is `pub` only where a user can reach it; inside the crate it says `pub(crate)`.
#![warn(unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

/// Calls a driver function and names it in the error, so that each call names its function
/// once: `unsafe { driver!(cuMemFree(ptr)) }` is `check("cuMemFree", sys::cuMemFree(ptr))`,
/// an `Ok(())` for `CUDA_SUCCESS` and otherwise the [`Error`] naming `cuMemFree` and its
/// status. The call is `unsafe`, so the macro is used inside an `unsafe` block, which carries
/// the call's `SAFETY` comment. Defined before the modules, which all see it.
///
/// `driver!(status: cuEventQuery(event))` is the same call for a caller that looks at the
/// status first (a `CUDA_ERROR_NOT_READY` that is an answer, not a failure): an
/// [`error::Status`] naming the function, whose [`check`](error::Status::check) gives the
/// `Result`.
macro_rules! driver {
    ($function:ident($($argument:expr),* $(,)?)) => {
        $crate::error::check(stringify!($function), ::cuhost_driver_sys::$function($($argument),*))
    };
    (status: $function:ident($($argument:expr),* $(,)?)) => {
        $crate::error::Status { call: stringify!($function), code: ::cuhost_driver_sys::$function($($argument),*) }
    };
}

mod abi;
pub mod alloc;
mod c_layout;
mod callback_registry;
#[cfg(feature = "checkpoint")]
#[cfg_attr(docsrs, doc(cfg(feature = "checkpoint")))]
pub mod checkpoint;
#[cfg(feature = "compile")]
#[cfg_attr(docsrs, doc(cfg(feature = "compile")))]
pub mod compile;
pub mod context;
pub mod copy;
#[cfg(feature = "coredump")]
#[cfg_attr(docsrs, doc(cfg(feature = "coredump")))]
pub mod coredump;
#[cfg(feature = "cudarc")]
#[cfg_attr(docsrs, doc(cfg(feature = "cudarc")))]
pub mod cudarc;
pub mod device;
#[cfg(feature = "dlpack")]
#[cfg_attr(docsrs, doc(cfg(feature = "dlpack")))]
pub mod dlpack;
pub mod error;
pub mod event;
mod flags;
#[cfg(feature = "async")]
#[cfg_attr(docsrs, doc(cfg(feature = "async")))]
pub mod future;
pub mod graph;
#[cfg(feature = "green")]
#[cfg_attr(docsrs, doc(cfg(feature = "green")))]
pub mod green;
#[cfg(any(feature = "interop", feature = "nccl", test))]
mod hex;
#[cfg(feature = "interop")]
#[cfg_attr(docsrs, doc(cfg(feature = "interop")))]
pub mod interop;
pub mod launch;
#[cfg(feature = "logs")]
#[cfg_attr(docsrs, doc(cfg(feature = "logs")))]
pub mod logs;
pub mod memory;
pub mod mempool;
pub mod module;
#[cfg(feature = "nccl")]
#[cfg_attr(docsrs, doc(cfg(feature = "nccl")))]
pub mod nccl;
#[cfg(feature = "nvtx")]
#[cfg_attr(docsrs, doc(cfg(feature = "nvtx")))]
pub mod nvtx;
pub mod occupancy;
pub mod peer;
pub mod pool;
pub mod profiler;
#[cfg(feature = "runtime")]
#[cfg_attr(docsrs, doc(cfg(feature = "runtime")))]
pub mod runtime;
pub mod stream;
#[cfg(feature = "texture")]
#[cfg_attr(docsrs, doc(cfg(feature = "texture")))]
pub mod texture;
mod track;
pub mod vmm;

pub use context::{Context, ContextFlags, CurrentGuard};
pub use device::Device;
pub use error::{Error, Result};
pub use event::{Event, EventFlags};
pub use launch::{
    ClusterScheduling, Dim3, KernelArgs, LaunchConfig, MemSyncDomain, MemSyncDomainMap, ProgrammaticEvent,
};
pub use memory::{DeviceBuffer, DeviceView, DeviceViewMut, ManagedBuffer, PinnedBuffer};
pub use module::{Function, Kernel, Library, Module};
pub use stream::{Stream, StreamFlags, StreamOrdering, SyncPolicy};

/// The plain-data traits element types and kernel arguments use ([`bytemuck::Pod`]), for
/// `#[derive(bytemuck::Pod, bytemuck::Zeroable)]` (with bytemuck's `derive` feature) without a
/// version to keep in step.
pub use bytemuck;
#[cfg(feature = "runtime")]
#[cfg_attr(docsrs, doc(cfg(feature = "runtime")))]
pub use cuhost_cudart_sys as runtime_sys;
pub use cuhost_driver_sys as driver_sys;
#[cfg(feature = "nccl")]
#[cfg_attr(docsrs, doc(cfg(feature = "nccl")))]
pub use cuhost_nccl_sys;
#[cfg(feature = "nvtx")]
#[cfg_attr(docsrs, doc(cfg(feature = "nvtx")))]
pub use cuhost_nvtx_sys;

/// The user guide's chapters (`docs/src`), included so that `cargo test` compiles every Rust
/// snippet in them. Only built for doctests.
#[cfg(doctest)]
mod guide {
    macro_rules! chapters {
        ($($(#[$attr:meta])* $name:ident = $file:literal;)*) => {
            $(
                $(#[$attr])*
                #[doc = include_str!(concat!("../../docs/src/", $file))]
                pub struct $name;
            )*
        };
    }
    chapters! {
        Introduction = "introduction.md";
        GettingStarted = "getting-started.md";
        Memory = "memory.md";
        Pools = "pools.md";
        Streams = "streams.md";
        #[cfg(feature = "async")]
        Async = "async.md";
        #[cfg(feature = "green")]
        Green = "green.md";
        Kernels = "kernels.md";
        #[cfg(feature = "compile")]
        Compile = "compile.md";
        Graphs = "graphs.md";
        Vmm = "vmm.md";
        #[cfg(feature = "interop")]
        Ipc = "ipc.md";
        #[cfg(feature = "interop")]
        Interop = "interop.md";
        #[cfg(feature = "texture")]
        Textures = "textures.md";
        #[cfg(feature = "nccl")]
        Nccl = "nccl.md";
        #[cfg(feature = "dlpack")]
        Dlpack = "dlpack.md";
        #[cfg(feature = "nvtx")]
        Nvtx = "nvtx.md";
        #[cfg(feature = "runtime")]
        Runtime = "runtime.md";
        Loading = "loading.md";
        // Its sections on the driver's log, coredumps and checkpoints use those modules.
        #[cfg(all(feature = "logs", feature = "coredump", feature = "checkpoint"))]
        Errors = "errors.md";
        Safety = "safety.md";
        SysCrates = "sys-crates.md";
        GpuTesting = "gpu-testing.md";
        // Its cudarc section shows the bridge (the `cudarc` feature) and NVRTC.
        #[cfg(all(feature = "cudarc", feature = "compile"))]
        ComingFrom = "coming-from.md";
    }
}
