//! Raw bindings to NCCL (`nccl.h`), loaded at run time.
//!
//! Every function of the header is a `pub unsafe fn` with its C name and C signature, the
//! profiling `pnccl*` entry points included.
//!
//! # Loading
//!
//! NCCL is opened on the first call of any function: the file named by `NCCL_LIBRARY_PATH` if
//! set, else `libnccl.so.2`. Each function is looked up by its exported name once; afterwards a
//! call costs one atomic load and an indirect call. A missing library or symbol makes the function
//! return [`ncclResult_t::ncclSystemError`] (`ncclGetErrorString` and `ncclGetLastError` return a
//! message saying so); [`load_error`] says why. Nothing here panics.
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
pub use loader::{library_error, library_path, nccl_version};

/// Expands the generated function list into lazily resolved functions
/// ([`cuhost_loader::exported_functions!`]).
macro_rules! nccl_functions {
    ($($line:tt)*) => {
        ::cuhost_loader::exported_functions! {
            resolve: $crate::loader::resolve,
            on_failure: $crate::loader::OnLoadFailure::on_load_failure;
            $($line)*
        }
    };
}
pub(crate) use nccl_functions;

#[allow(clippy::all, clippy::pedantic)]
mod functions {
    use crate::types::*;
    include!("generated/functions.rs");
}
pub use functions::*;
