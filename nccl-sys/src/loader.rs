//! Finding `libnccl` and resolving its exports.

use crate::types::ncclResult_t;
use core::ffi::c_char;
use cuda_loader::{Failure, Library, LoadError, Slot};
use std::string::String;

static NCCL: Library<()> = Library::new(
    "libnccl.so.2",
    "NCCL_LIBRARY_PATH",
    &["libnccl.so.2", "libnccl.so"],
    "install NCCL 2 (the libnccl2 package, or `pip install nvidia-nccl-cu13`)",
    |_, _| Ok(()),
);

/// Why NCCL could not be loaded, if it could not; loads it if that was not tried yet.
pub fn library_error() -> Option<LoadError> {
    NCCL.get().err().cloned()
}

/// The file NCCL was loaded from, once loaded.
pub fn library_path() -> Option<String> {
    NCCL.get().ok().map(|l| l.file.clone())
}

pub(crate) fn resolve(slot: &Slot) -> Result<usize, LoadError> {
    NCCL.resolve_exported(slot, false)
}

/// What a function returns when it could not be resolved.
pub(crate) trait OnLoadFailure {
    fn on_load_failure(failure: Failure) -> Self;
}

impl OnLoadFailure for ncclResult_t {
    fn on_load_failure(_: Failure) -> Self {
        ncclResult_t::ncclSystemError
    }
}

impl OnLoadFailure for *const c_char {
    fn on_load_failure(_: Failure) -> Self {
        c"NCCL could not be loaded; see nccl_sys::load_error".as_ptr()
    }
}

impl OnLoadFailure for () {
    fn on_load_failure(_: Failure) -> Self {}
}
