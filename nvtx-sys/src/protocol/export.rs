//! The export tables a tool reads through `GetExportTable`: `NVTX_ETID_CALLBACKS` (the
//! per-module slot tables) and `NVTX_ETID_VERSIONINFO`.

use super::{MAX_MODULE_SIZE, Module, SLOTS};
use crate::types::{
    NvtxCallbackModule, NvtxExportTableCallbacks, NvtxExportTableID, NvtxExportTableVersionInfo,
    NvtxFunctionPointer, NvtxFunctionTable,
};
use core::cell::UnsafeCell;
use core::ffi::{c_int, c_uint, c_void};
use core::sync::atomic::{AtomicU32, Ordering};

/// The version of the protocol this crate speaks (`NVTX_VERSION`).
const NVTX_VERSION: u32 = 3;

/// One table per module: index 0 and the entry at the module's size are null, entries between
/// point at the module's slots. The tables live in writable memory, as in C, though tools
/// only read them.
struct SlotTables(UnsafeCell<[[*mut NvtxFunctionPointer; MAX_MODULE_SIZE + 1]; 7]>);

// SAFETY: after construction nothing in this crate writes the tables; tools only read them.
unsafe impl Sync for SlotTables {}

static SLOT_TABLES: SlotTables = SlotTables(UnsafeCell::new(slot_tables()));

const fn slot_tables() -> [[*mut NvtxFunctionPointer; MAX_MODULE_SIZE + 1]; 7] {
    let mut tables = [[core::ptr::null_mut(); MAX_MODULE_SIZE + 1]; 7];
    let mut m = 0;
    while m < Module::ALL.len() {
        let module = Module::ALL[m];
        let row = module as usize;
        let mut id = 1;
        while id < module.size() {
            // A slot is an `AtomicUsize`, which has the layout of a C function pointer.
            tables[row][id] = SLOTS[row][id].as_ptr().cast::<NvtxFunctionPointer>();
            id += 1;
        }
        m += 1;
    }
    tables
}

/// `NvtxExportTableCallbacks::GetModuleFunctionTable`: hands a tool the slot table of a
/// module and its size (`NVTX_CBID_<module>_SIZE`). Returns 0 for an unknown module.
unsafe extern "C" fn get_module_function_table(
    module: NvtxCallbackModule,
    out_table: *mut NvtxFunctionTable,
    out_size: *mut c_uint,
) -> c_int {
    let Some(module) = Module::from_id(module.0) else { return 0 };
    let table = SLOT_TABLES.0.get().cast::<[*mut NvtxFunctionPointer; MAX_MODULE_SIZE + 1]>();
    // SAFETY: `module as usize` is 1..=6, inside the 7 rows of the tables.
    let row = unsafe { table.add(module as usize) }.cast::<*mut NvtxFunctionPointer>();
    if !out_size.is_null() {
        // SAFETY: the tool passes a pointer to an `unsigned int` it owns, or null (checked).
        unsafe { out_size.write(module.size() as c_uint) };
    }
    if !out_table.is_null() {
        // SAFETY: as above, for the table pointer.
        unsafe { out_table.write(row) };
    }
    1
}

static CALLBACKS: NvtxExportTableCallbacks = NvtxExportTableCallbacks {
    struct_size: size_of::<NvtxExportTableCallbacks>(),
    GetModuleFunctionTable: Some(get_module_function_table),
};

/// The version a tool announced through `SetInjectionNvtxVersion`; 0 until one does.
pub(super) static TOOL_VERSION: AtomicU32 = AtomicU32::new(0);

unsafe extern "C" fn set_injection_nvtx_version(version: u32) {
    TOOL_VERSION.store(version, Ordering::Release);
}

static VERSION_INFO: NvtxExportTableVersionInfo = NvtxExportTableVersionInfo {
    struct_size: size_of::<NvtxExportTableVersionInfo>(),
    version: NVTX_VERSION,
    reserved0: 0,
    SetInjectionNvtxVersion: Some(set_injection_nvtx_version),
};

/// The `GetExportTable` function given to the tool's `InitializeInjectionNvtx2`.
pub(super) unsafe extern "C" fn get_export_table(id: u32) -> *const c_void {
    match NvtxExportTableID(id) {
        NvtxExportTableID::NVTX_ETID_CALLBACKS => (&raw const CALLBACKS).cast(),
        NvtxExportTableID::NVTX_ETID_VERSIONINFO => (&raw const VERSION_INFO).cast(),
        _ => core::ptr::null(),
    }
}
