//! The real driver: opened once, from `CUDA_CHECK_REAL_DRIVER` (default `libcuda.so.1`).

use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;

type GetProcV2 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> c_int;
type GetProcV1 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> c_int;
type GetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;

/// The opened real driver.
pub(crate) struct Real {
    /// Its `cuDriverGetVersion`.
    pub version: c_int,
    v2: Option<GetProcV2>,
    v1: Option<GetProcV1>,
}

impl Real {
    /// Its `cuGetProcAddress` (with the query result when it has `_v2`).
    pub unsafe fn get_proc(
        &self,
        symbol: *const c_char,
        pfn: *mut *mut c_void,
        version: c_int,
        flags: u64,
        status: *mut c_int,
    ) -> c_int {
        // SAFETY: the caller's arguments, forwarded.
        unsafe {
            match (self.v2, self.v1) {
                (Some(f), _) => f(symbol, pfn, version, flags, status),
                (None, Some(f)) => {
                    if !status.is_null() {
                        *status = 0;
                    }
                    f(symbol, pfn, version, flags)
                }
                (None, None) => crate::not_found(),
            }
        }
    }

    /// The address of `name` at ABI `version` (legacy default stream), if it has it.
    pub fn function(&self, name: &std::ffi::CStr, version: c_int) -> Option<usize> {
        let mut pfn = std::ptr::null_mut();
        // SAFETY: a NUL-terminated name and a live out-pointer.
        let status = unsafe { self.get_proc(name.as_ptr(), &mut pfn, version, 1, std::ptr::null_mut()) };
        (status == 0 && !pfn.is_null()).then_some(pfn as usize)
    }
}

/// The real driver, opened on first use; `None` (after saying why on standard error) when it
/// cannot be.
pub(crate) fn driver() -> Option<&'static Real> {
    static REAL: OnceLock<Option<Real>> = OnceLock::new();
    REAL.get_or_init(|| match open() {
        Ok(real) => Some(real),
        Err(e) => {
            eprintln!("cuda-check: {e}");
            None
        }
    })
    .as_ref()
}

fn open() -> Result<Real, String> {
    let file = std::env::var("CUDA_CHECK_REAL_DRIVER").unwrap_or_else(|_| "libcuda.so.1".into());
    // SAFETY: opening the driver runs its initialisers, as every program that links it does.
    let lib = unsafe { libloading::Library::new(&file) }
        .map_err(|e| format!("cannot open the real driver {file} (set CUDA_CHECK_REAL_DRIVER): {e}"))?;
    // Kept open for the life of the process: the addresses handed out point into it.
    let lib: &'static libloading::Library = Box::leak(Box::new(lib));
    // SAFETY: the driver's exports of these names have these signatures.
    unsafe {
        let get_version = *lib
            .get::<GetVersion>(b"cuDriverGetVersion\0")
            .map_err(|e| format!("{file} has no cuDriverGetVersion: {e}"))?;
        let mut version = 0;
        if get_version(&mut version) != 0 {
            return Err(format!("cuDriverGetVersion of {file} failed"));
        }
        let v2 = if version >= 12050 {
            lib.get::<GetProcV2>(b"cuGetProcAddress_v2\0").ok().map(|f| *f)
        } else {
            None
        };
        let v1 = lib.get::<GetProcV1>(b"cuGetProcAddress\0").ok().map(|f| *f);
        if v1.is_none() && v2.is_none() {
            return Err(format!("{file} has no cuGetProcAddress"));
        }
        Ok(Real { version, v2, v1 })
    }
}
