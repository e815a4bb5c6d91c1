//! Run-time loading shared by the CUDA `-sys` crates.
//!
//! Nothing here panics or aborts. A library that cannot be opened, a symbol it lacks, or a
//! function newer than the installed library becomes a [`LoadError`]: the generated function
//! that needed it returns its library's own error status, and the full reason can be read back
//! with [`load_error`] (by the name of the function called, ABI suffix included) or
//! [`last_load_error`] (the calling thread's latest).
//!
//! * [`Library`] finds a shared library on first use: an environment variable naming the file
//!   wins, then a list of standard names is tried in order.
//! * [`Slot`] holds one lazily resolved function address. Once resolved, reading it is one
//!   atomic load; resolution itself runs once per symbol, under a lock, on first use.

mod error;
mod library;
mod per_thread;
mod slot;

pub use error::{LoadError, LoadErrorKind, cuda_version_text, last_load_error, load_error, version_code};
pub use library::{Library, Loaded, symbol_address};
pub use per_thread::{AlreadyChosen, DefaultStreamChoice};
pub use slot::{Failure, Slot};

/// Defines one `pub unsafe fn` that calls through a lazily resolved [`Slot`].
///
/// The `-sys` crates expand each line of their generated function lists into this: on the first
/// call `resolve` finds the address; afterwards the call is one atomic load and an indirect call.
/// When the function cannot be resolved, `on_failure(failure)` gives the value to return (the
/// library's own error status).
#[macro_export]
macro_rules! lazy_function {
    (
        $(#[$meta:meta])*
        $name:ident ( $( $arg:ident : $ty:ty ),* ) -> $ret:ty,
        slot: $slot:expr, resolve: $resolve:path, on_failure: $on_failure:path $(,)?
    ) => {
        $(#[$meta])*
        #[inline]
        pub unsafe fn $name($($arg: $ty),*) -> $ret {
            static SLOT: $crate::Slot = $slot;
            match SLOT.get($resolve) {
                Ok(addr) => {
                    // SAFETY: the library returned this address for this symbol, whose C
                    // signature is the one declared here.
                    let f: unsafe extern "C" fn($($ty),*) -> $ret = unsafe { ::core::mem::transmute(addr) };
                    // SAFETY: the caller upholds the C function's contract.
                    unsafe { f($($arg),*) }
                }
                Err(failure) => $on_failure(failure),
            }
        }
    };
}

/// Expands a generated list of exported functions, one line per C function
/// (`name(args) -> ret => c"symbol", "header", "section", "url";`), into [`lazy_function!`]s
/// that resolve the exported symbol through `resolve` and answer `on_failure` when it cannot be
/// resolved: the shape of every `-sys` crate whose functions are plain exports (NCCL, NVRTC,
/// nvJitLink). Each crate's own list macro forwards its lines here with its two paths.
#[macro_export]
macro_rules! exported_functions {
    (
        resolve: $resolve:path, on_failure: $on_failure:path;
        $( $name:ident ( $( $arg:ident : $ty:ty ),* ) -> $ret:ty
            => $symbol:literal, $header:literal, $section:literal, $url:literal; )*
    ) => {
        $(
            $crate::lazy_function! {
                #[doc = concat!(
                    "`", stringify!($name), "` from `", $header, "`, section [", $section, "](", $url,
                    "); the loader resolves the exported symbol `", stringify!($symbol), "`.\n\n",
                    "See the section for its contract.",
                )]
                $name($($arg: $ty),*) -> $ret,
                slot: $crate::Slot::new(stringify!($name), $symbol, 0, 0, c""),
                resolve: $resolve,
                on_failure: $on_failure,
            }
        )*
    };
}
