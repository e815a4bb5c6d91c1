//! A recording NVTX tool, for the tests of `nvtx-sys`.
//!
//! Loaded through `NVTX_INJECTION64_PATH`, it speaks the tool side of the NVTX v3 protocol
//! from its own reading of NVIDIA's headers (it shares no code or types with `nvtx-sys`, so the
//! tests check both sides against each other): it fetches every module's slot table, writes a
//! recording function into each slot except `nvtxRangePushW` (left empty on purpose), and
//! appends one line per call to a log that tests read with [`nvtx_test_tool_read_log`].
//! Event attributes are decoded by byte offset, as a C tool sees them.
//!
//! `NVTX_TEST_TOOL_MODE` selects the behaviour: unset for the above, `fail` to fill the slots
//! and then return 0 from `InitializeInjectionNvtx2`, `slow` to sleep 200 ms before filling.
#![allow(clippy::missing_safety_doc)]

mod entries;
mod log;

pub use log::{nvtx_test_tool_init_count, nvtx_test_tool_read_log};

use core::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::Ordering;

type GetExportTable = unsafe extern "C" fn(u32) -> *const c_void;
type GetModuleFunctionTable = unsafe extern "C" fn(u32, *mut *mut *mut usize, *mut c_uint) -> c_int;

/// `NvtxExportTableCallbacks`.
#[repr(C)]
struct Callbacks {
    struct_size: usize,
    get_module_function_table: Option<GetModuleFunctionTable>,
}

/// `NvtxExportTableVersionInfo`.
#[repr(C)]
struct VersionInfo {
    struct_size: usize,
    version: u32,
    reserved0: u32,
    set_injection_nvtx_version: Option<unsafe extern "C" fn(u32)>,
}

/// The entry point the NVTX loader looks up.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn InitializeInjectionNvtx2(get_export_table: Option<GetExportTable>) -> c_int {
    log::INIT_COUNT.fetch_add(1, Ordering::SeqCst);
    let mode = std::env::var("NVTX_TEST_TOOL_MODE").unwrap_or_default();
    if mode == "slow" {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let Some(get) = get_export_table else {
        log::line("init: no GetExportTable".into());
        return 0;
    };
    // SAFETY: calling the loader's GetExportTable with the ids the protocol defines.
    let (callbacks, version, reserved, invalid, beyond) =
        unsafe { (get(1).cast::<Callbacks>(), get(3).cast::<VersionInfo>(), get(2), get(0), get(4)) };
    if callbacks.is_null() || version.is_null() {
        log::line("init: missing export table".into());
        return 0;
    }
    // SAFETY: non-null tables from the loader, laid out as the protocol says.
    let (callbacks, version) = unsafe { (&*callbacks, &*version) };
    log::line(format!(
        "init: callbacks.size={} versioninfo.size={} version={} reserved={} etid2={} etid0={} etid4={}",
        callbacks.struct_size,
        version.struct_size,
        version.version,
        version.reserved0,
        null_or_set(reserved),
        null_or_set(invalid),
        null_or_set(beyond),
    ));
    if let Some(set_version) = version.set_injection_nvtx_version {
        // SAFETY: the loader's function, called with the version this tool speaks.
        unsafe { set_version(3) };
    }
    let Some(get_table) = callbacks.get_module_function_table else {
        log::line("init: no GetModuleFunctionTable".into());
        return 0;
    };
    for module in 0..=7u32 {
        let mut table: *mut *mut usize = core::ptr::null_mut();
        let mut size: c_uint = 0;
        // SAFETY: out-pointers to locals.
        let ok = unsafe { get_table(module, &mut table, &mut size) };
        if ok == 0 || table.is_null() {
            log::line(format!("module {module}: none"));
            continue;
        }
        // SAFETY: the loader's table has `size + 1` entries: index 0, ids 1..size, a null end.
        let entries: Vec<*mut usize> = (0..=size as usize).map(|i| unsafe { *table.add(i) }).collect();
        let ends_null =
            entries.first().is_some_and(|p| p.is_null()) && entries.last().is_some_and(|p| p.is_null());
        let inner_set = entries.iter().skip(1).take(size as usize - 1).all(|p| !p.is_null());
        log::line(format!("module {module}: size={size} ends_null={ends_null} entries_set={inner_set}"));
        for (id, function) in entries::for_module(module) {
            if let Some(slot) = entries.get(id).copied().filter(|p| !p.is_null()) {
                // SAFETY: the loader's slot for this id; writing a function into it is the
                // protocol's way of attaching.
                unsafe { slot.write(function) };
            }
        }
    }
    if mode == "fail" { 0 } else { 1 }
}

fn null_or_set(p: *const c_void) -> &'static str {
    if p.is_null() { "null" } else { "set" }
}
