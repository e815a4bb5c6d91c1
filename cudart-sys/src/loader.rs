//! Finding `libcudart` and resolving its exports.

use crate::types::{cudaChannelFormatDesc, cudaError_t};
use core::ffi::c_char;
use cuda_loader::{AlreadyChosen, DefaultStreamChoice, Failure, Library, LoadError, Slot};
use std::string::String;

#[cfg(windows)]
const CANDIDATES: &[&str] = &["cudart64_13.dll"];
#[cfg(not(windows))]
const CANDIDATES: &[&str] = &["libcudart.so.13", "libcudart.so"];

static RUNTIME: Library<()> = Library::new(
    "libcudart.so.13",
    "CUDART_LIBRARY_PATH",
    CANDIDATES,
    "install the CUDA 13 runtime (the CUDA toolkit, or `pip install nvidia-cuda-runtime`)",
    |_, _| Ok(()),
);

static DEFAULT_STREAM: DefaultStreamChoice = DefaultStreamChoice::new("CUDA_API_PER_THREAD_DEFAULT_STREAM");

/// Chooses the per-thread default stream (`true`) or the legacy one (`false`) for every runtime
/// function. Must come before the first runtime call; afterwards it fails and changes nothing,
/// unless the choice asked for is the one in effect.
pub fn set_per_thread_default_stream(per_thread: bool) -> Result<(), AlreadyChosen> {
    DEFAULT_STREAM.set(per_thread)
}

/// Whether runtime functions resolve to their `_ptds`/`_ptsz` exports. Fixes the choice if it was
/// not made yet (from `CUDA_API_PER_THREAD_DEFAULT_STREAM=1`, else legacy).
pub fn per_thread_default_stream() -> bool {
    DEFAULT_STREAM.per_thread()
}

/// Why the runtime could not be loaded, if it could not; loads it if that was not tried yet.
pub fn library_error() -> Option<LoadError> {
    RUNTIME.get().err().cloned()
}

/// The file the runtime was loaded from, once loaded.
pub fn library_path() -> Option<String> {
    RUNTIME.get().ok().map(|l| l.file.clone())
}

pub(crate) fn resolve(slot: &Slot) -> Result<usize, LoadError> {
    RUNTIME.resolve_exported(slot, per_thread_default_stream())
}

/// What a function returns when it could not be resolved.
pub(crate) trait OnLoadFailure {
    fn on_load_failure(failure: Failure) -> Self;
}

impl OnLoadFailure for cudaError_t {
    fn on_load_failure(_: Failure) -> Self {
        cudaError_t::cudaErrorSymbolNotFound
    }
}

impl OnLoadFailure for *const c_char {
    fn on_load_failure(_: Failure) -> Self {
        c"the CUDA runtime could not be loaded; see cudart_sys::load_error".as_ptr()
    }
}

impl OnLoadFailure for cudaChannelFormatDesc {
    fn on_load_failure(_: Failure) -> Self {
        cudaChannelFormatDesc::default()
    }
}
