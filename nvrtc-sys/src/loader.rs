//! Finding `libnvrtc` and resolving its exports.

use crate::types::nvrtcResult;
use core::ffi::{c_char, c_int};
use cuhost_loader::{Failure, Library, LoadError, LoadErrorKind, Slot, symbol_address};
use std::string::{String, ToString};

const LIBRARY_NAME: &str = "libnvrtc.so.13";

type Version = unsafe extern "C" fn(*mut c_int, *mut c_int) -> nvrtcResult;

/// What the loader keeps of an opened NVRTC: its version, `major * 1000 + minor * 10`.
struct Nvrtc {
    version: i32,
}

#[cfg(not(windows))]
const CANDIDATES: &[&str] = &[
    "libnvrtc.so.13",
    "libnvrtc.so.12",
    "libnvrtc.so",
    "/usr/local/cuda/lib64/libnvrtc.so.13",
    "/usr/local/cuda/lib64/libnvrtc.so.12",
];
#[cfg(windows)]
const CANDIDATES: &[&str] = &["nvrtc64_130_0.dll", "nvrtc64_120_0.dll"];

/// What to install; the loader's message adds that the variable may name the file (a wheel's
/// library is not on the loader's path), so this does not say it again. NVRTC finds
/// `libnvrtc-builtins` beside the file it is loaded from, where both the toolkit and the wheels
/// put it.
const INSTALL_HINT: &str = "install NVRTC: the CUDA toolkit (the cuda-nvrtc-13-0 package puts libnvrtc.so.13 in \
     /usr/local/cuda/lib64), or `pip install nvidia-cuda-nvrtc` (CUDA 13: \
     site-packages/nvidia/cu13/lib/libnvrtc.so.13) or `pip install nvidia-cuda-nvrtc-cu12` \
     (site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12), whose files are not on the loader's path";

static NVRTC: Library<Nvrtc> =
    Library::new(LIBRARY_NAME, "NVRTC_LIBRARY_PATH", CANDIDATES, INSTALL_HINT, open_nvrtc);

fn open_nvrtc(lib: &'static libloading::Library, file: &str) -> Result<Nvrtc, LoadError> {
    let unusable = |reason: &str| LoadError {
        library: LIBRARY_NAME,
        kind: LoadErrorKind::Unusable { file: file.to_string(), reason: reason.to_string() },
    };
    let version =
        symbol_address(lib, c"nvrtcVersion").ok_or_else(|| unusable("it does not export nvrtcVersion"))?;
    // SAFETY: nvrtcVersion has had this signature since NVRTC's first release.
    let version: Version = unsafe { core::mem::transmute(version) };
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: the pointers are to live locals.
    if unsafe { version(&mut major, &mut minor) } != nvrtcResult::NVRTC_SUCCESS {
        return Err(unusable("nvrtcVersion failed"));
    }
    let version = cuhost_loader::version_code(major.into(), minor.into())
        .ok_or_else(|| unusable("nvrtcVersion reported a version out of range"))?;
    Ok(Nvrtc { version })
}

/// The version of the loaded NVRTC, `major * 1000 + minor * 10` (13000 for 13.0), as
/// `nvrtcVersion` reports it, or why NVRTC could not be loaded.
pub fn nvrtc_version() -> Result<i32, LoadError> {
    NVRTC.get().map(|n| n.data.version).map_err(Clone::clone)
}

/// Why NVRTC could not be loaded, if it could not; loads it if that was not tried yet.
pub fn library_error() -> Option<LoadError> {
    NVRTC.get().err().cloned()
}

/// The file NVRTC was loaded from, once loaded.
pub fn library_path() -> Option<String> {
    NVRTC.get().ok().map(|l| l.file.clone())
}

pub(crate) fn resolve(slot: &Slot) -> Result<usize, LoadError> {
    let installed = NVRTC.get().ok().map(|n| cuhost_loader::cuda_version_text(n.data.version));
    NVRTC.resolve_exported(slot, false, installed)
}

/// What a function returns when it could not be resolved.
pub(crate) trait OnLoadFailure {
    fn on_load_failure(failure: Failure) -> Self;
}

impl OnLoadFailure for nvrtcResult {
    fn on_load_failure(_: Failure) -> Self {
        nvrtcResult::NVRTC_ERROR_INTERNAL_ERROR
    }
}

impl OnLoadFailure for *const c_char {
    fn on_load_failure(_: Failure) -> Self {
        c"NVRTC could not be loaded; see cuhost_nvrtc_sys::load_error".as_ptr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message of a library not found names the variable once, where the loader adds it.
    #[test]
    fn the_variable_is_named_once() {
        let kind = LoadErrorKind::LibraryNotFound {
            tried: std::vec::Vec::new(),
            env_var: "NVRTC_LIBRARY_PATH",
            install_hint: INSTALL_HINT,
        };
        let text = LoadError { library: LIBRARY_NAME, kind }.to_string();
        assert_eq!(text.matches("NVRTC_LIBRARY_PATH").count(), 1, "{text}");
        assert!(text.contains("pip install") && text.contains("libnvrtc.so.13"), "{text}");
    }
}
