//! Initialisation: once per process, race-free, never panicking.

use super::export::{TOOL_VERSION, get_export_table};
use super::{NO_TOOL, NOT_INITIALIZED, SLOTS};
use crate::types::{
    NVTX_ERR_INIT_FAILED_LIBRARY_ENTRY_POINT, NVTX_ERR_INIT_LOAD_LIBRARY,
    NVTX_ERR_INIT_MISSING_LIBRARY_ENTRY_POINT, NVTX_ERR_NO_INJECTION_LIBRARY_AVAILABLE, NVTX_SUCCESS,
    NvtxInitializeInjectionNvtxFunc_t,
};
use core::cell::Cell;
use core::sync::atomic::{AtomicU32, Ordering};
use std::ffi::OsString;
use std::sync::OnceLock;

const FRESH: u32 = 0;
const STARTED: u32 = 1;
const COMPLETE: u32 = 2;

static STATE: AtomicU32 = AtomicU32::new(FRESH);
static OUTCOME: OnceLock<Injection> = OnceLock::new();

thread_local! {
    /// Set on the thread running the tool's `InitializeInjectionNvtx2`, so that NVTX calls the
    /// tool makes from there get defaults instead of waiting for themselves.
    static INITIALIZING: Cell<bool> = const { Cell::new(false) };
}

/// The environment variable that names the injection library.
pub const INJECTION_PATH_VARIABLE: &str =
    if cfg!(target_pointer_width = "32") { "NVTX_INJECTION32_PATH" } else { "NVTX_INJECTION64_PATH" };

/// How NVTX initialisation ended in this process.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Injection {
    /// A tool was loaded and its `InitializeInjectionNvtx2` returned non-zero.
    Attached {
        /// The library, as `NVTX_INJECTION64_PATH` named it.
        path: OsString,
    },
    /// `NVTX_INJECTION64_PATH` is not set (or empty): no tool, NVTX calls do nothing.
    NoInjectionLibrary,
    /// The library could not be loaded.
    LoadFailed {
        /// The library, as `NVTX_INJECTION64_PATH` named it.
        path: OsString,
        /// The loader's reason.
        reason: String,
    },
    /// The library has no `InitializeInjectionNvtx2`; it was unloaded again.
    MissingEntryPoint {
        /// The library, as `NVTX_INJECTION64_PATH` named it.
        path: OsString,
    },
    /// The tool's `InitializeInjectionNvtx2` returned 0. The library stays loaded (its code
    /// may still be running on other threads), but none of its functions is called.
    InitFailed {
        /// The library, as `NVTX_INJECTION64_PATH` named it.
        path: OsString,
    },
}

impl Injection {
    /// The status code NVIDIA's C implementation uses for this outcome (`NVTX_SUCCESS`,
    /// `NVTX_ERR_INIT_LOAD_LIBRARY`, ...).
    pub fn code(&self) -> u32 {
        match self {
            Injection::Attached { .. } => NVTX_SUCCESS,
            Injection::NoInjectionLibrary => NVTX_ERR_NO_INJECTION_LIBRARY_AVAILABLE,
            Injection::LoadFailed { .. } => NVTX_ERR_INIT_LOAD_LIBRARY,
            Injection::MissingEntryPoint { .. } => NVTX_ERR_INIT_MISSING_LIBRARY_ENTRY_POINT,
            Injection::InitFailed { .. } => NVTX_ERR_INIT_FAILED_LIBRARY_ENTRY_POINT,
        }
    }

    /// Whether a tool is attached.
    pub fn is_attached(&self) -> bool {
        matches!(self, Injection::Attached { .. })
    }
}

/// How initialisation ended, or `None` before it has run (no NVTX call yet) or while it runs.
pub fn injection() -> Option<&'static Injection> {
    if STATE.load(Ordering::Acquire) == COMPLETE { OUTCOME.get() } else { None }
}

/// The NVTX version the tool announced through `SetInjectionNvtxVersion`, if it did.
pub fn injection_nvtx_version() -> Option<u32> {
    match TOOL_VERSION.load(Ordering::Acquire) {
        0 => None,
        v => Some(v),
    }
}

/// Initialises NVTX for the process if that has not happened yet; any NVTX call does this
/// implicitly. Safe to call from any number of threads at once: one thread loads the tool,
/// the others wait until it is done. Called by the tool itself from inside its
/// initialisation, it returns at once.
pub fn initialize() {
    if STATE.load(Ordering::Acquire) == COMPLETE {
        return;
    }
    // After thread-local storage is torn down (a call from a TLS destructor) `try_with`
    // fails; such a thread cannot be the one initialising.
    if INITIALIZING.try_with(Cell::get).unwrap_or(false) {
        return;
    }
    match STATE.compare_exchange(FRESH, STARTED, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            let outcome = load_tool();
            let attached = outcome.is_attached();
            for row in &SLOTS {
                for slot in row {
                    if attached {
                        // Only slots the tool left alone become "no tool".
                        let _ = slot.compare_exchange(
                            NOT_INITIALIZED,
                            NO_TOOL,
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        );
                    } else {
                        slot.store(NO_TOOL, Ordering::Release);
                    }
                }
            }
            let _ = OUTCOME.set(outcome);
            STATE.store(COMPLETE, Ordering::Release);
        }
        Err(_) => {
            while STATE.load(Ordering::Acquire) != COMPLETE {
                std::thread::yield_now();
            }
        }
    }
}

fn load_tool() -> Injection {
    let path = match std::env::var_os(INJECTION_PATH_VARIABLE) {
        Some(p) if !p.is_empty() => p,
        _ => return Injection::NoInjectionLibrary,
    };
    // SAFETY: loading a library runs its initialisers. The library is the NVTX tool the user
    // (or Nsight) named in NVTX_INJECTION64_PATH for exactly this purpose.
    let library = match unsafe { libloading::Library::new(&path) } {
        Ok(l) => l,
        Err(e) => return Injection::LoadFailed { path, reason: e.to_string() },
    };
    // SAFETY: the NVTX protocol fixes the type of `InitializeInjectionNvtx2`.
    let init =
        match unsafe { library.get::<NvtxInitializeInjectionNvtxFunc_t>(b"InitializeInjectionNvtx2\0") } {
            Ok(symbol) => *symbol,
            Err(_) => None,
        };
    let Some(init) = init else {
        drop(library);
        return Injection::MissingEntryPoint { path };
    };
    let _ = INITIALIZING.try_with(|f| f.set(true));
    // SAFETY: the tool's entry point, called once with a `GetExportTable` that stays valid
    // for the life of the process, as the protocol requires.
    let status = unsafe { init(Some(get_export_table)) };
    let _ = INITIALIZING.try_with(|f| f.set(false));
    // The library stays loaded in both cases: on success it implements the slots; on failure
    // it may have started threads or kept pointers into this process, and unloading it
    // under them could crash the program.
    std::mem::forget(library);
    if status == 0 { Injection::InitFailed { path } } else { Injection::Attached { path } }
}
