//! Finding `libcuda` and resolving driver functions through `cuGetProcAddress`.

use crate::types::{CUdriverProcAddressQueryResult, CUresult, cuuint64_t};
use core::ffi::{c_char, c_int, c_void};
use cuhost_loader::{
    AlreadyChosen, DefaultStreamChoice, Failure, Library, LoadError, LoadErrorKind, Slot, symbol_address,
};
use std::string::{String, ToString};

const LIBRARY_NAME: &str = "libcuda.so.1";

#[cfg(windows)]
const CANDIDATES: &[&str] = &["nvcuda.dll"];
#[cfg(not(windows))]
const CANDIDATES: &[&str] = &["libcuda.so.1", "libcuda.so"];

type GetProcAddressV2 = unsafe extern "C" fn(
    *const c_char,
    *mut *mut c_void,
    c_int,
    cuuint64_t,
    *mut CUdriverProcAddressQueryResult,
) -> CUresult;
type GetProcAddressV1 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, cuuint64_t) -> CUresult;
type DriverGetVersion = unsafe extern "C" fn(*mut c_int) -> CUresult;

/// What the loader keeps of an opened driver.
pub(crate) struct Driver {
    get_proc_v2: Option<GetProcAddressV2>,
    get_proc_v1: Option<GetProcAddressV1>,
    version: i32,
    check: Option<CheckHooks>,
}

/// The table a checking driver hands out through its `cudaCheckGetHooks` export (C layout):
/// what a happens-before checker between the program and the driver cannot see for itself.
#[repr(C)]
struct CheckHooksTable {
    /// The size of this table in bytes, for later additions.
    size: u32,
    new_owner: Option<unsafe extern "C" fn(u64, u64)>,
    host_access: Option<unsafe extern "C" fn(u64, u64, c_int)>,
    /// Added later: tables whose size ends before it lack it.
    launch_reads: Option<unsafe extern "C" fn(u64)>,
}

type GetCheckHooks = unsafe extern "C" fn() -> *const CheckHooksTable;

/// The functions of a checking driver (a `libcuda` that checks the stream rule, such as the
/// workspace's `checked-cuda-driver`) that the program calls to tell it what the driver cannot
/// see. A driver offers them by exporting `const cudaCheckHooks *cudaCheckGetHooks(void)`,
/// which returns a table `{ uint32_t size; void (*new_owner)(uint64_t ptr, uint64_t size);
/// void (*host_access)(uint64_t ptr, uint64_t len, int write); void (*launch_reads)(uint64_t
/// ptr); }` or null (a table whose size ends before `launch_reads` lacks it); NVIDIA's driver
/// does not.
#[derive(Clone, Copy, Debug)]
pub struct CheckHooks {
    /// The `size` bytes at `ptr` (device or pinned host memory) have a new owner from now on:
    /// a pool handed the block out again without a driver call.
    pub new_owner: unsafe extern "C" fn(ptr: u64, size: u64),
    /// The calling thread reads (`write` = 0) or writes the `len` bytes of pinned memory at
    /// `ptr` now, through a slice the program took.
    pub host_access: unsafe extern "C" fn(ptr: u64, len: u64, write: c_int),
    /// The next kernel launch the calling thread makes only reads the memory its argument
    /// `ptr` points into (the program passed it as a shared borrow): without it, a checker
    /// counts every pointer argument as read and written. `None` where the driver's table
    /// lacks it.
    pub launch_reads: Option<unsafe extern "C" fn(ptr: u64)>,
}

/// The hooks of the loaded driver, when it is a checking driver that exports them.
fn check_hooks_of(lib: &libloading::Library) -> Option<CheckHooks> {
    let get = symbol_address(lib, c"cudaCheckGetHooks")?;
    // SAFETY: a driver that exports this name gives it the signature documented on
    // `CheckHooks`.
    let get: GetCheckHooks = unsafe { core::mem::transmute(get) };
    // SAFETY: as above; it takes nothing.
    let table = unsafe { get() };
    if table.is_null() {
        return None;
    }
    // SAFETY: a non-null table that starts with its size field (which says which fields
    // follow), static in the driver; read on its own, unaligned, before the table is known to
    // be whole.
    let size = unsafe { core::ptr::read_unaligned(core::ptr::addr_of!((*table).size)) };
    if (size as usize) < core::mem::offset_of!(CheckHooksTable, launch_reads) {
        return None;
    }
    let whole = size as usize >= core::mem::size_of::<CheckHooksTable>();
    // SAFETY: a table with at least the fields before `launch_reads` (its size says so), static
    // in the driver; `launch_reads` is read only where the size covers it.
    let (new_owner, host_access, launch_reads) = unsafe {
        let new_owner = core::ptr::read_unaligned(core::ptr::addr_of!((*table).new_owner));
        let host_access = core::ptr::read_unaligned(core::ptr::addr_of!((*table).host_access));
        let reads =
            if whole { core::ptr::read_unaligned(core::ptr::addr_of!((*table).launch_reads)) } else { None };
        (new_owner, host_access, reads)
    };
    Some(CheckHooks { new_owner: new_owner?, host_access: host_access?, launch_reads })
}

/// The hooks of the loaded driver when it is a checking driver (see [`CheckHooks`]); `None`
/// for NVIDIA's driver, or before the driver was loaded.
#[inline]
pub fn check_hooks() -> Option<&'static CheckHooks> {
    match DRIVER.loaded() {
        Some(d) => d.data.check.as_ref(),
        None => None,
    }
}

static DRIVER: Library<Driver> = Library::new(
    LIBRARY_NAME,
    "CUDA_DRIVER_LIBRARY_PATH",
    CANDIDATES,
    "install the NVIDIA driver (it provides libcuda.so.1)",
    open_driver,
);

fn unusable(file: &str, reason: &str) -> LoadError {
    LoadError {
        library: LIBRARY_NAME,
        kind: LoadErrorKind::Unusable { file: file.to_string(), reason: reason.to_string() },
    }
}

fn open_driver(lib: &'static libloading::Library, file: &str) -> Result<Driver, LoadError> {
    let get_version = symbol_address(lib, c"cuDriverGetVersion")
        .ok_or_else(|| unusable(file, "it does not export cuDriverGetVersion"))?;
    // SAFETY: cuDriverGetVersion has had this signature since CUDA 2.2.
    let get_version: DriverGetVersion = unsafe { core::mem::transmute(get_version) };
    let mut version: c_int = 0;
    // SAFETY: the pointer is to a live local.
    let status = unsafe { get_version(&mut version) };
    if status != CUresult::CUDA_SUCCESS {
        return Err(unusable(file, "cuDriverGetVersion failed"));
    }
    // cuGetProcAddress_v2 (with its query result) exists from 12.5; plain cuGetProcAddress
    // from 11.3.
    let get_proc_v2 = if version >= 12050 {
        // SAFETY: the exported cuGetProcAddress_v2 has the v12000 signature.
        symbol_address(lib, c"cuGetProcAddress_v2")
            .map(|a| unsafe { core::mem::transmute::<usize, GetProcAddressV2>(a) })
    } else {
        None
    };
    // SAFETY: the exported cuGetProcAddress has the v11030 signature.
    let get_proc_v1 = symbol_address(lib, c"cuGetProcAddress")
        .map(|a| unsafe { core::mem::transmute::<usize, GetProcAddressV1>(a) });
    if get_proc_v2.is_none() && get_proc_v1.is_none() {
        return Err(unusable(file, "it does not export cuGetProcAddress (driver older than CUDA 11.3)"));
    }
    Ok(Driver { get_proc_v2, get_proc_v1, version, check: check_hooks_of(lib) })
}

static DEFAULT_STREAM: DefaultStreamChoice = DefaultStreamChoice::new("CUDA_API_PER_THREAD_DEFAULT_STREAM");

/// Chooses the per-thread default stream (`true`) or the legacy one (`false`) for every driver
/// function, as `CUDA_API_PER_THREAD_DEFAULT_STREAM` does for C code. Must come before the first
/// driver call; afterwards it fails and changes nothing, unless the choice asked for is the one
/// in effect.
pub fn set_per_thread_default_stream(per_thread: bool) -> Result<(), AlreadyChosen> {
    DEFAULT_STREAM.set(per_thread)
}

/// Whether driver functions are resolved in their per-thread-default-stream variants. Fixes the
/// choice if it was not made yet (from `CUDA_API_PER_THREAD_DEFAULT_STREAM=1`, else legacy).
pub fn per_thread_default_stream() -> bool {
    DEFAULT_STREAM.per_thread()
}

/// The CUDA version the installed driver supports (e.g. 13000 for 13.0), as `cuDriverGetVersion`
/// reports it, or why the driver could not be loaded.
pub fn driver_version() -> Result<i32, LoadError> {
    DRIVER.get().map(|d| d.data.version).map_err(Clone::clone)
}

/// Whether the installed driver has ABI `version` of a function (drivers have every ABI up to
/// their own version): `Ok` when it does, else the error a call would give, naming `function`,
/// the version needed and the version installed, or why the driver could not be loaded.
pub fn check_abi_version(function: &str, version: i32) -> Result<(), LoadError> {
    let installed = driver_version()?;
    if version <= installed {
        return Ok(());
    }
    Err(LoadError {
        library: LIBRARY_NAME,
        kind: LoadErrorKind::VersionTooOld { symbol: function.to_string(), needed: version, installed },
    })
}

/// Why `libcuda` could not be loaded, if it could not; loads it if that was not tried yet.
pub fn library_error() -> Option<LoadError> {
    DRIVER.get().err().cloned()
}

/// The file `libcuda` was loaded from, once loaded.
pub fn library_path() -> Option<String> {
    DRIVER.get().ok().map(|d| d.file.clone())
}

const CU_GET_PROC_ADDRESS_LEGACY_STREAM: cuuint64_t = 1;
const CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM: cuuint64_t = 2;

/// Resolves one driver function; called once per function, under the loader's lock.
pub(crate) fn resolve(slot: &Slot) -> Result<usize, LoadError> {
    let driver = DRIVER.get().map_err(Clone::clone)?;
    let d = &driver.data;
    let per_thread = per_thread_default_stream() && slot.per_thread_version != 0;
    let (flags, version) = if per_thread {
        (CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, slot.per_thread_version)
    } else {
        (CU_GET_PROC_ADDRESS_LEGACY_STREAM, slot.version)
    };
    let symbol = slot.function.to_string();
    let too_old = || LoadError {
        library: LIBRARY_NAME,
        kind: LoadErrorKind::VersionTooOld { symbol: symbol.clone(), needed: version, installed: d.version },
    };
    let missing = || LoadError {
        library: LIBRARY_NAME,
        kind: LoadErrorKind::SymbolNotFound {
            symbol: symbol.clone(),
            file: driver.file.clone(),
            installed: Some(cuhost_loader::cuda_version_text(d.version)),
        },
    };
    // A driver cannot have an ABI newer than itself. Asked for one anyway, older drivers answer
    // with the newest variant they have, whose signature differs: refuse before asking.
    if version > d.version {
        return Err(too_old());
    }
    let mut pfn: *mut c_void = core::ptr::null_mut();
    if let Some(get_proc) = d.get_proc_v2 {
        let mut query = CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SUCCESS;
        // SAFETY: all pointers are to live locals or a NUL-terminated static name.
        let status = unsafe { get_proc(slot.name.as_ptr(), &mut pfn, version, flags, &mut query) };
        if query == CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT {
            return Err(too_old());
        }
        if status != CUresult::CUDA_SUCCESS
            || query != CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SUCCESS
            || pfn.is_null()
        {
            return Err(missing());
        }
    } else if let Some(get_proc) = d.get_proc_v1 {
        // SAFETY: as above.
        let status = unsafe { get_proc(slot.name.as_ptr(), &mut pfn, version, flags) };
        if status != CUresult::CUDA_SUCCESS || pfn.is_null() {
            return Err(missing());
        }
    }
    Ok(pfn as usize)
}

/// The status a function returns when it could not be resolved.
pub(crate) fn failure_status(failure: Failure) -> CUresult {
    match failure {
        Failure::Missing => CUresult::CUDA_ERROR_NOT_FOUND,
        Failure::TooOld => CUresult::CUDA_ERROR_NOT_SUPPORTED,
    }
}
