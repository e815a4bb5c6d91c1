//! Finding `libnccl` and resolving its exports.

use crate::types::ncclResult_t;
use core::ffi::{c_char, c_int};
use cuhost_loader::{Failure, Library, LoadError, LoadErrorKind, Slot, symbol_address};
use std::string::{String, ToString};

const LIBRARY_NAME: &str = "libnccl.so.2";

type GetVersion = unsafe extern "C" fn(*mut c_int) -> ncclResult_t;

/// What the loader keeps of an opened NCCL: its version code (e.g. 21803 for 2.18.3).
struct Nccl {
    version: i32,
}

static NCCL: Library<Nccl> = Library::new(
    LIBRARY_NAME,
    "NCCL_LIBRARY_PATH",
    &["libnccl.so.2", "libnccl.so"],
    "install NCCL 2 (the libnccl2 package, or `pip install nvidia-nccl-cu13`)",
    open_nccl,
);

fn open_nccl(lib: &'static libloading::Library, file: &str) -> Result<Nccl, LoadError> {
    let unusable = |reason: &str| LoadError {
        library: LIBRARY_NAME,
        kind: LoadErrorKind::Unusable { file: file.to_string(), reason: reason.to_string() },
    };
    let get_version = symbol_address(lib, c"ncclGetVersion")
        .ok_or_else(|| unusable("it does not export ncclGetVersion"))?;
    // SAFETY: ncclGetVersion has had this signature since NCCL 2.3.
    let get_version: GetVersion = unsafe { core::mem::transmute(get_version) };
    let mut version: c_int = 0;
    // SAFETY: the pointer is to a live local.
    if unsafe { get_version(&mut version) } != ncclResult_t::ncclSuccess {
        return Err(unusable("ncclGetVersion failed"));
    }
    Ok(Nccl { version })
}

/// `major.minor.patch` of an NCCL version code: `major * 10000 + minor * 100 + patch` from 2.9
/// on, `major * 1000 + minor * 100 + patch` before.
pub(crate) fn version_text(code: i32) -> String {
    if code >= 20900 {
        std::format!("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100)
    } else {
        std::format!("{}.{}.{}", code / 1000, (code % 1000) / 100, code % 100)
    }
}

/// The version code of the loaded NCCL (e.g. 21803 for 2.18.3), as `ncclGetVersion` reports
/// it, or why NCCL could not be loaded.
pub fn nccl_version() -> Result<i32, LoadError> {
    NCCL.get().map(|n| n.data.version).map_err(Clone::clone)
}

/// Why NCCL could not be loaded, if it could not; loads it if that was not tried yet.
pub fn library_error() -> Option<LoadError> {
    NCCL.get().err().cloned()
}

/// The file NCCL was loaded from, once loaded.
pub fn library_path() -> Option<String> {
    NCCL.get().ok().map(|l| l.file.clone())
}

pub(crate) fn resolve(slot: &Slot) -> Result<usize, LoadError> {
    let installed = NCCL.get().ok().map(|n| version_text(n.data.version));
    NCCL.resolve_exported(slot, false, installed)
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
        c"NCCL could not be loaded; see cuhost_nccl_sys::load_error".as_ptr()
    }
}

impl OnLoadFailure for () {
    fn on_load_failure(_: Failure) -> Self {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_codes_read_as_nccl_writes_them() {
        assert_eq!(version_text(21803), "2.18.3");
        assert_eq!(version_text(22809), "2.28.9");
        assert_eq!(version_text(2804), "2.8.4");
    }
}
