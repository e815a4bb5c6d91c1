//! Raw bindings to nvJitLink (`nvJitLink.h`), CUDA's run-time linker of LTO-IR, PTX and cubins,
//! loaded at run time.
//!
//! Every function of the header is a `pub unsafe fn` with its C name and C signature. The
//! header's C names are inline wrappers of versioned entry points (`__nvJitLinkCreate_13_5`,
//! the version of the header); the library exports the C names as well, and every nvJitLink of
//! a major release has them, where it has only its own and older versioned entry points. These
//! bindings call the C names, so that one build runs with any nvJitLink of the release.
//!
//! # Loading
//!
//! nvJitLink is opened on the first call of any function: the file named by
//! `NVJITLINK_LIBRARY_PATH` if set, else `libnvJitLink.so.13`, `libnvJitLink.so.12`,
//! `libnvJitLink.so`, then the same names under `/usr/local/cuda/lib64` (`nvJitLink_130_0.dll`,
//! `nvJitLink_120_0.dll` on Windows). A missing library or symbol makes the function return
//! [`nvJitLinkResult::NVJITLINK_ERROR_INTERNAL`]; [`load_error`] says why. Nothing here panics.
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]
#![no_std]
extern crate std;

#[allow(missing_docs, unpredictable_function_pointer_comparisons, clippy::all, clippy::pedantic)]
mod types {
    include!("generated/types.rs");
    // bindgen's layout checks (size, alignment and field offsets of every C type) are compiled
    // by `cargo test` only, which CI runs: in the builds of dependents they would cost type
    // checking every time and check nothing the tests have not.
    #[cfg(test)]
    include!("generated/layout.rs");
}
pub use types::*;

mod loader;
pub use cuhost_loader::{LoadError, LoadErrorKind, last_load_error, load_error};
pub use loader::{library_error, library_path, nvjitlink_version};

/// Expands the generated function list into lazily resolved functions
/// ([`cuhost_loader::exported_functions!`]).
macro_rules! nvjitlink_functions {
    ($($line:tt)*) => {
        ::cuhost_loader::exported_functions! {
            resolve: $crate::loader::resolve,
            on_failure: $crate::loader::OnLoadFailure::on_load_failure;
            $($line)*
        }
    };
}
pub(crate) use nvjitlink_functions;

#[allow(clippy::all, clippy::pedantic)]
mod functions {
    use crate::types::*;
    include!("generated/functions.rs");
}
pub use functions::*;
