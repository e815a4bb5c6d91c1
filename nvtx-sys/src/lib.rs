//! NVTX v3 (`nvToolsExt.h`, `nvToolsExtCuda.h`, `nvToolsExtCudaRt.h`, `nvToolsExtSync.h`) in pure
//! Rust: the C types, and every `nvtx*` function with its C name and signature.
//!
//! NVTX is header-only in C; there is no library to load. Each function reads its slot in the
//! NVTX tool protocol (see [`protocol`]): with no tool attached it returns the documented default
//! (`nvtxRangePush*`/`nvtxRangePop` return -2, `nvtxRangeStart*` returns 0, handles are null, the
//! rest do nothing). The first call in the process loads the tool that `NVTX_INJECTION64_PATH`
//! names, as NVIDIA's headers do; [`protocol::injection`] says whether one attached, or why not.
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

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

pub mod protocol;

/// Expands each line of the generated function list into a call through its protocol slot.
macro_rules! nvtx_functions {
    ($( $name:ident ( $( $arg:ident : $ty:ty ),* ) -> $ret:ty => $module:ident, $id:literal,
        $header:literal, $section:literal, $url:literal; )*) => {
        $(
            #[doc = concat!(
                "`", stringify!($name), "` from `", $header, "`, section [", $section, "](", $url,
                "); called through slot ", stringify!($id), " of the NVTX v3 tool protocol's ",
                stringify!($module), " callback table (no library is loaded).\n\n",
                "See the section for its contract.",
            )]
            #[inline]
            pub unsafe fn $name($($arg: $ty),*) -> $ret {
                match $crate::protocol::slot($crate::protocol::Module::$module, $id) {
                    Some(addr) => {
                        // SAFETY: a tool filled this slot with its implementation of this
                        // function, whose signature the NVTX headers fix.
                        let f: unsafe extern "C" fn($($ty),*) -> $ret =
                            unsafe { ::core::mem::transmute(addr) };
                        // SAFETY: the caller upholds the C function's contract.
                        unsafe { f($($arg),*) }
                    }
                    None => $crate::protocol::NoToolDefault::no_tool_default(),
                }
            }
        )*
    };
}
pub(crate) use nvtx_functions;

#[allow(clippy::all, clippy::pedantic)]
mod functions {
    use crate::types::*;
    include!("generated/functions.rs");
}
pub use functions::*;
