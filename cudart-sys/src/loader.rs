//! Finding `libcudart` (CUDA 13 or 12) and resolving its exports.

use crate::types::{cudaChannelFormatDesc, cudaError_t};
use core::ffi::{c_char, c_int};
use cuhost_loader::{
    AlreadyChosen, DefaultStreamChoice, Failure, Library, LoadError, LoadErrorKind, Slot, symbol_address,
};
use std::ffi::CString;
use std::string::{String, ToString};

mod cuda12 {
    include!("generated/cuda12.rs");
}

const LIBRARY_NAME: &str = "libcudart";

#[cfg(windows)]
const CANDIDATES: &[&str] = &["cudart64_13.dll", "cudart64_12.dll"];
#[cfg(not(windows))]
const CANDIDATES: &[&str] = &["libcudart.so.13", "libcudart.so.12", "libcudart.so"];

/// The first version whose ABI the bindings describe.
const BINDINGS_VERSION: i32 = 13000;

type RuntimeGetVersion = unsafe extern "C" fn(*mut c_int) -> cudaError_t;

/// What the loader keeps of an opened runtime: its version (e.g. 12090 for 12.9).
struct Runtime {
    version: i32,
}

static RUNTIME: Library<Runtime> = Library::new(
    LIBRARY_NAME,
    "CUDART_LIBRARY_PATH",
    CANDIDATES,
    "install the CUDA 13 or 12 runtime (the CUDA toolkit, or `pip install nvidia-cuda-runtime`)",
    open_runtime,
);

fn open_runtime(lib: &'static libloading::Library, file: &str) -> Result<Runtime, LoadError> {
    let unusable = |reason: &str| LoadError {
        library: LIBRARY_NAME,
        kind: LoadErrorKind::Unusable { file: file.to_string(), reason: reason.to_string() },
    };
    let get_version = symbol_address(lib, c"cudaRuntimeGetVersion")
        .ok_or_else(|| unusable("it does not export cudaRuntimeGetVersion"))?;
    // SAFETY: cudaRuntimeGetVersion has had this signature since CUDA 2.2.
    let get_version: RuntimeGetVersion = unsafe { core::mem::transmute(get_version) };
    let mut version: c_int = 0;
    // SAFETY: the pointer is to a live local.
    if unsafe { get_version(&mut version) } != cudaError_t::cudaSuccess {
        return Err(unusable("cudaRuntimeGetVersion failed"));
    }
    if version < 12000 {
        return Err(unusable("it is older than CUDA 12.0; install the CUDA 13 or 12 runtime"));
    }
    Ok(Runtime { version })
}

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

/// The version of the loaded runtime (e.g. 13000 for 13.0, 12090 for 12.9), as
/// `cudaRuntimeGetVersion` reports it, or why it could not be loaded.
pub fn runtime_version() -> Result<i32, LoadError> {
    RUNTIME.get().map(|r| r.data.version).map_err(Clone::clone)
}

/// Why the runtime could not be loaded, if it could not; loads it if that was not tried yet.
pub fn library_error() -> Option<LoadError> {
    RUNTIME.get().err().cloned()
}

/// The file the runtime was loaded from, once loaded.
pub fn library_path() -> Option<String> {
    RUNTIME.get().ok().map(|l| l.file.clone())
}

/// Where a CUDA 12 runtime exports the CUDA 13 ABI of `function`: `Ok(None)` under its own
/// name, `Ok(Some(name))` under another, `Err(())` nowhere.
fn cuda12_export(function: &str) -> Result<Option<&'static str>, ()> {
    match cuda12::CUDA12_ABI.binary_search_by(|(name, _)| (*name).cmp(function)) {
        Ok(i) => cuda12::CUDA12_ABI.get(i).and_then(|(_, other)| *other).map(Some).ok_or(()),
        Err(_) => Ok(None),
    }
}

pub(crate) fn resolve(slot: &Slot) -> Result<usize, LoadError> {
    let loaded = RUNTIME.get().map_err(Clone::clone)?;
    let per_thread = per_thread_default_stream();
    let version = loaded.data.version;
    let installed = || Some(std::format!("{}.{}", version / 1000, (version % 1000) / 10));
    if version >= BINDINGS_VERSION {
        return RUNTIME.resolve_exported(slot, per_thread, installed());
    }
    let too_old = || LoadError {
        library: LIBRARY_NAME,
        kind: LoadErrorKind::VersionTooOld {
            symbol: slot.function.to_string(),
            needed: BINDINGS_VERSION,
            installed: version,
        },
    };
    let Some(other) = cuda12_export(slot.function).map_err(|()| too_old())? else {
        return RUNTIME.resolve_exported(slot, per_thread, installed());
    };
    // The per-thread export of the other name carries the same suffix.
    let suffix = slot.per_thread_name.to_bytes().get(slot.name.to_bytes().len()..).unwrap_or_default();
    let mut name = other.as_bytes().to_vec();
    if per_thread {
        name.extend_from_slice(suffix);
    }
    let name = CString::new(name).map_err(|_| too_old())?;
    symbol_address(loaded.library, &name).ok_or_else(|| LoadError {
        library: LIBRARY_NAME,
        kind: LoadErrorKind::SymbolNotFound {
            symbol: name.to_string_lossy().into_owned(),
            file: loaded.file.clone(),
            installed: installed(),
        },
    })
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
        c"the CUDA runtime could not be loaded; see cuhost_cudart_sys::load_error".as_ptr()
    }
}

impl OnLoadFailure for cudaChannelFormatDesc {
    fn on_load_failure(_: Failure) -> Self {
        cudaChannelFormatDesc::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cuda12_table_is_sorted_for_binary_search() {
        let names: std::vec::Vec<&str> = cuda12::CUDA12_ABI.iter().map(|(n, _)| *n).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
    }

    #[test]
    fn cuda12_exports_the_cuda13_abi_under_its_own_name_another_or_none() {
        assert_eq!(cuda12_export("cudaMalloc"), Ok(None));
        assert_eq!(cuda12_export("cudaMemAdvise"), Ok(Some("cudaMemAdvise_v2")));
        assert_eq!(cuda12_export("cudaStreamGetCaptureInfo"), Ok(Some("cudaStreamGetCaptureInfo_v3")));
        // cudaDeviceProp changed layout in 13.0: CUDA 12's form would fill a struct of another shape.
        assert_eq!(cuda12_export("cudaGetDeviceProperties"), Err(()));
    }
}
