//! Raw bindings to the CUDA driver API (`cuda.h`, `cudaProfiler.h`, and the GL, EGL and VDPAU
//! interop headers), loaded at run time.
//!
//! Every function of the headers is a `pub unsafe fn` with its C name and C signature. The name
//! is the one C code calls (`cuMemAlloc`, never `cuMemAlloc_v2`); newer ABI variants that C code
//! calls by their suffixed name (`cuCtxSynchronize_v2`) keep it.
//!
//! # Older ABI versions
//!
//! Where a function's ABI changed, `cudaTypedefs.h` keeps a `PFN_<name>_v<version>` typedef for
//! every version. The names above get the newest; every other version is a function of its
//! own named `<name>_v<version>`, with the signature of its typedef, resolved at exactly that
//! version: [`cuEventElapsedTime_v2000`] (drivers before 12.8), [`cuCtxCreate_v3020`] (the
//! `cuCtxCreate_v2` of C, before 12.5), [`cuMemAdvise_v8000`] and [`cuMemPrefetchAsync_v8000`]
//! (a device ordinal instead of a `CUmemLocation`, before 12.2). The suffix is the typedef's
//! version, not C's `_v2`, so it says which drivers have it. Code that must run on older
//! drivers calls the newest version that [`check_abi_version`] accepts; a function asked for at
//! a version newer than the installed driver is never resolved (the driver would hand out an
//! older ABI), it fails as below.
//!
//! # Loading
//!
//! `libcuda` is opened on the first call of any function: the file named by
//! `CUDA_DRIVER_LIBRARY_PATH` if set, else `libcuda.so.1` (`nvcuda.dll` on Windows). Each
//! function is then looked up once, through `cuGetProcAddress`, at the ABI version that
//! `cudaTypedefs.h` gives it, so the call gets exactly the ABI this crate's signature describes.
//! After that a call costs one atomic load and an indirect call.
//!
//! Nothing here panics. When the library, the function, or a new enough driver is missing, the
//! function returns [`CUresult::CUDA_ERROR_NOT_FOUND`] (missing) or
//! [`CUresult::CUDA_ERROR_NOT_SUPPORTED`] (driver too old), and [`load_error`] says why: the files
//! tried, the symbol, the version needed and the version installed.
//!
//! # Per-thread default stream
//!
//! Call [`set_per_thread_default_stream`] before the first driver call (or set
//! `CUDA_API_PER_THREAD_DEFAULT_STREAM=1`) to get the `_ptds`/`_ptsz` variants, as C code
//! compiled with `--default-stream per-thread` does.
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
    CheckHooks, check_abi_version, check_hooks, driver_version, library_error, library_path,
    per_thread_default_stream, set_per_thread_default_stream,
};

/// Expands each line of the generated function list into a lazily resolved function.
macro_rules! driver_functions {
    ($( $name:ident ( $( $arg:ident : $ty:ty ),* ) -> $ret:ty
        => $symbol:literal, $version:literal, $pt_version:literal,
        $header:literal, $section:literal, $url:literal; )*) => {
        $(
            ::cuhost_loader::lazy_function! {
                #[doc = concat!(
                    "`", stringify!($name), "` from `", $header, "`, section [", $section, "](", $url,
                    "); the loader asks for ABI version ", stringify!($version),
                    " (`cuGetProcAddress` of `", stringify!($symbol), "`).\n\n",
                    "See the section for its contract.",
                )]
                $name($($arg: $ty),*) -> $ret,
                slot: ::cuhost_loader::Slot::new(stringify!($name), $symbol, $version, $pt_version, c""),
                resolve: $crate::loader::resolve,
                on_failure: $crate::loader::failure_status,
            }
        )*
    };
}
pub(crate) use driver_functions;

#[allow(clippy::all, clippy::pedantic)]
mod functions {
    use crate::types::*;
    include!("generated/functions.rs");
}
pub use functions::*;
