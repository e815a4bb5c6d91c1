//! Raw bindings to the CUDA runtime API (`cuda_runtime_api.h`, `cuda_profiler_api.h`), loaded at
//! run time.
//!
//! Every function of the headers is a `pub unsafe fn` with its C name and C signature.
//!
//! # Loading
//!
//! The runtime is opened on the first call of any function: the file named by
//! `CUDART_LIBRARY_PATH` if set, else `libcudart.so.13`, then `libcudart.so.12`
//! (`cudart64_13.dll`, `cudart64_12.dll` on Windows); [`runtime_version`] says which. Each
//! function is looked up by its exported name once; afterwards a call costs one atomic load and an
//! indirect call.
//!
//! # CUDA 12 runtimes
//!
//! The bindings describe CUDA 13's ABI. Where a CUDA 12 runtime exports that ABI under another
//! name (CUDA 13's `cudaMemAdvise` is CUDA 12's `cudaMemAdvise_v2`), a 12 runtime is called
//! through that name. Where it does not export it at all (`cudaGetDeviceProperties`, whose
//! `cudaDeviceProp` changed layout in 13.0, and the other functions taking structs that
//! changed), the call is refused before reaching the library, as a function too new for the
//! installed runtime: it never reads or writes a struct of the wrong layout. A struct that only
//! gained fields at its end, passed alone through a pointer (`cudaPointerAttributes`), is no
//! change: the 12 runtime reads and writes the fields it knows. `cargo xtask bindgen` finds these
//! functions by comparing the two versions' `cuda_runtime_api.h` type by type. A missing library or symbol makes the function return
//! [`cudaError_t::cudaErrorSymbolNotFound`] (functions returning a string return a message, and
//! [`cudaCreateChannelDesc`] a zeroed descriptor); [`load_error`] says why. Nothing here panics.
//!
//! # Per-thread default stream
//!
//! Call [`set_per_thread_default_stream`] before the first runtime call (or set
//! `CUDA_API_PER_THREAD_DEFAULT_STREAM=1`) to get the `_ptds`/`_ptsz` exports, as C code compiled
//! with `--default-stream per-thread` does.
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
pub use cuhost_loader::{AlreadyChosen, LoadError, LoadErrorKind, last_load_error, load_error};
pub use loader::{
    library_error, library_path, per_thread_default_stream, runtime_version, set_per_thread_default_stream,
};

/// Expands each line of the generated function list into a lazily resolved function.
macro_rules! runtime_functions {
    ($( $name:ident ( $( $arg:ident : $ty:ty ),* ) -> $ret:ty
        => $symbol:literal, $per_thread:literal, $header:literal, $section:literal, $url:literal; )*) => {
        $(
            ::cuhost_loader::lazy_function! {
                #[doc = concat!(
                    "`", stringify!($name), "` from `", $header, "`, section [", $section, "](", $url,
                    "); the loader resolves the exported symbol `", stringify!($symbol), "`.\n\n",
                    "See the section for its contract.",
                )]
                $name($($arg: $ty),*) -> $ret,
                slot: ::cuhost_loader::Slot::new(stringify!($name), $symbol, 0, 0, $per_thread),
                resolve: $crate::loader::resolve,
                on_failure: $crate::loader::OnLoadFailure::on_load_failure,
            }
        )*
    };
}
pub(crate) use runtime_functions;

#[allow(clippy::all, clippy::pedantic)]
mod functions {
    use crate::types::*;
    include!("generated/functions.rs");
}
pub use functions::*;
