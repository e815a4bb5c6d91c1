//! Finding `libnvJitLink` and resolving its exports.

use crate::types::nvJitLinkResult;
use core::ffi::c_uint;
use cuhost_loader::{Failure, Library, LoadError, LoadErrorKind, Slot, symbol_address};
use std::string::{String, ToString};

const LIBRARY_NAME: &str = "libnvJitLink.so.13";

type Version = unsafe extern "C" fn(*mut c_uint, *mut c_uint) -> nvJitLinkResult;

/// What the loader keeps of an opened nvJitLink: its version, `major * 1000 + minor * 10`.
struct NvJitLink {
    version: i32,
}

#[cfg(not(windows))]
const CANDIDATES: &[&str] = &[
    "libnvJitLink.so.13",
    "libnvJitLink.so.12",
    "libnvJitLink.so",
    "/usr/local/cuda/lib64/libnvJitLink.so.13",
    "/usr/local/cuda/lib64/libnvJitLink.so.12",
];
#[cfg(windows)]
const CANDIDATES: &[&str] = &["nvJitLink_130_0.dll", "nvJitLink_120_0.dll"];

/// What to install; the loader's message adds that the variable may name the file (a wheel's
/// library is not on the loader's path), so this does not say it again.
const INSTALL_HINT: &str = "install nvJitLink: the CUDA toolkit (the libnvjitlink-13-0 package puts libnvJitLink.so.13 \
     in /usr/local/cuda/lib64), or `pip install nvidia-nvjitlink` (CUDA 13: \
     site-packages/nvidia/cu13/lib/libnvJitLink.so.13) or `pip install nvidia-nvjitlink-cu12` \
     (site-packages/nvidia/nvjitlink/lib/libnvJitLink.so.12), whose files are not on the loader's path";

static NVJITLINK: Library<NvJitLink> =
    Library::new(LIBRARY_NAME, "NVJITLINK_LIBRARY_PATH", CANDIDATES, INSTALL_HINT, open_nvjitlink);

fn open_nvjitlink(lib: &'static libloading::Library, file: &str) -> Result<NvJitLink, LoadError> {
    let unusable = |reason: &str| LoadError {
        library: LIBRARY_NAME,
        kind: LoadErrorKind::Unusable { file: file.to_string(), reason: reason.to_string() },
    };
    let version = symbol_address(lib, c"nvJitLinkVersion")
        .ok_or_else(|| unusable("it does not export nvJitLinkVersion"))?;
    // SAFETY: nvJitLinkVersion has this signature in every nvJitLink that exports it.
    let version: Version = unsafe { core::mem::transmute(version) };
    let (mut major, mut minor): (c_uint, c_uint) = (0, 0);
    // SAFETY: the pointers are to live locals.
    if unsafe { version(&mut major, &mut minor) } != nvJitLinkResult::NVJITLINK_SUCCESS {
        return Err(unusable("nvJitLinkVersion failed"));
    }
    let version = cuhost_loader::version_code(major.into(), minor.into())
        .ok_or_else(|| unusable("nvJitLinkVersion reported a version out of range"))?;
    Ok(NvJitLink { version })
}

/// The version of the loaded nvJitLink, `major * 1000 + minor * 10` (13000 for 13.0), as
/// `nvJitLinkVersion` reports it, or why nvJitLink could not be loaded.
pub fn nvjitlink_version() -> Result<i32, LoadError> {
    NVJITLINK.get().map(|n| n.data.version).map_err(Clone::clone)
}

/// Why nvJitLink could not be loaded, if it could not; loads it if that was not tried yet.
pub fn library_error() -> Option<LoadError> {
    NVJITLINK.get().err().cloned()
}

/// The file nvJitLink was loaded from, once loaded.
pub fn library_path() -> Option<String> {
    NVJITLINK.get().ok().map(|l| l.file.clone())
}

pub(crate) fn resolve(slot: &Slot) -> Result<usize, LoadError> {
    let installed = NVJITLINK.get().ok().map(|n| cuhost_loader::cuda_version_text(n.data.version));
    NVJITLINK.resolve_exported(slot, false, installed)
}

/// What a function returns when it could not be resolved.
pub(crate) trait OnLoadFailure {
    fn on_load_failure(failure: Failure) -> Self;
}

impl OnLoadFailure for nvJitLinkResult {
    fn on_load_failure(_: Failure) -> Self {
        nvJitLinkResult::NVJITLINK_ERROR_INTERNAL
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
            env_var: "NVJITLINK_LIBRARY_PATH",
            install_hint: INSTALL_HINT,
        };
        let text = LoadError { library: LIBRARY_NAME, kind }.to_string();
        assert_eq!(text.matches("NVJITLINK_LIBRARY_PATH").count(), 1, "{text}");
        assert!(text.contains("pip install") && text.contains("libnvJitLink.so.13"), "{text}");
    }
}
