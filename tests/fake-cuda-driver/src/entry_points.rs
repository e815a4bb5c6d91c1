//! The driver functions this fake implements, each at the ABI version whose signature it has.
//! Each records its call (see `called`), so tests can tell which ABI the caller reached.

use crate::{FAKE_DEVICE_COUNT, INVALID_VALUE, PER_THREAD_MEMCPY_STATUS, SUCCESS, called};
use std::cell::RefCell;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

type Ctx = *mut c_void;

const PRIMARY_BASE: usize = 0x1000;
const CREATED_BASE: usize = 0x2000;
static CREATED: AtomicUsize = AtomicUsize::new(0);
static HANDLES: AtomicUsize = AtomicUsize::new(0x10_0000);

thread_local! {
    static STACK: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

fn device_of(ctx: usize) -> c_int {
    (ctx % 16) as c_int
}

fn valid_device(dev: c_int) -> bool {
    (0..FAKE_DEVICE_COUNT).contains(&dev)
}

/// Writes `value` through an out-pointer; `false` when it is null.
fn put<T>(out: *mut T, value: T) -> bool {
    if out.is_null() {
        return false;
    }
    // SAFETY: callers pass a valid out-pointer, as the C contract requires; null is refused.
    unsafe { out.write(value) };
    true
}

fn status(ok: bool) -> c_int {
    if ok { SUCCESS } else { INVALID_VALUE }
}

fn new_handle() -> *mut c_void {
    HANDLES.fetch_add(16, Ordering::Relaxed) as *mut c_void
}

unsafe extern "C" fn cuInit(_flags: c_uint) -> c_int {
    SUCCESS
}

unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> c_int {
    status(put(count, FAKE_DEVICE_COUNT))
}

unsafe extern "C" fn cuDeviceGet(dev: *mut c_int, ordinal: c_int) -> c_int {
    status(valid_device(ordinal) && put(dev, ordinal))
}

unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut Ctx, dev: c_int) -> c_int {
    status(valid_device(dev) && put(ctx, (PRIMARY_BASE + dev as usize) as Ctx))
}

unsafe extern "C" fn cuDevicePrimaryCtxRelease(_dev: c_int) -> c_int {
    SUCCESS
}

unsafe extern "C" fn cuDevicePrimaryCtxGetState(
    _dev: c_int,
    flags: *mut c_uint,
    active: *mut c_int,
) -> c_int {
    status(put(flags, 0) && put(active, 1))
}

unsafe extern "C" fn cuCtxGetCurrent(ctx: *mut Ctx) -> c_int {
    let top = STACK.with(|s| s.borrow().last().copied().unwrap_or(0));
    status(put(ctx, top as Ctx))
}

unsafe extern "C" fn cuCtxSetCurrent(ctx: Ctx) -> c_int {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        s.pop();
        if !ctx.is_null() {
            s.push(ctx as usize);
        }
    });
    SUCCESS
}

unsafe extern "C" fn cuCtxPushCurrent(ctx: Ctx) -> c_int {
    called(format!("cuCtxPushCurrent@4000 ctx={:#x}", ctx as usize));
    STACK.with(|s| s.borrow_mut().push(ctx as usize));
    SUCCESS
}

unsafe extern "C" fn cuCtxPopCurrent(ctx: *mut Ctx) -> c_int {
    let top = STACK.with(|s| s.borrow_mut().pop()).unwrap_or(0);
    if !ctx.is_null() {
        put(ctx, top as Ctx);
    }
    SUCCESS
}

unsafe extern "C" fn cuCtxGetDevice_v2000(dev: *mut c_int) -> c_int {
    called("cuCtxGetDevice@2000".into());
    match STACK.with(|s| s.borrow().last().copied()) {
        Some(ctx) => status(put(dev, device_of(ctx))),
        None => 201, // CUDA_ERROR_INVALID_CONTEXT
    }
}

unsafe extern "C" fn cuCtxGetDevice_v13000(dev: *mut c_int, ctx: Ctx) -> c_int {
    called(format!("cuCtxGetDevice@13000 ctx={:#x}", ctx as usize));
    status(put(dev, device_of(ctx as usize)))
}

fn create_context(ctx: *mut Ctx, dev: c_int) -> c_int {
    let n = CREATED.fetch_add(1, Ordering::Relaxed);
    let handle = CREATED_BASE + 16 * n + dev as usize;
    if !valid_device(dev) || !put(ctx, handle as Ctx) {
        return INVALID_VALUE;
    }
    STACK.with(|s| s.borrow_mut().push(handle));
    SUCCESS
}

unsafe extern "C" fn cuCtxCreate_v3020(ctx: *mut Ctx, flags: c_uint, dev: c_int) -> c_int {
    called(format!("cuCtxCreate@3020 flags={flags} dev={dev}"));
    create_context(ctx, dev)
}

unsafe extern "C" fn cuCtxCreate_v11040(
    ctx: *mut Ctx,
    _affinity: *mut c_void,
    n: c_int,
    flags: c_uint,
    dev: c_int,
) -> c_int {
    called(format!("cuCtxCreate@11040 params={n} flags={flags} dev={dev}"));
    create_context(ctx, dev)
}

unsafe extern "C" fn cuCtxCreate_v12050(
    ctx: *mut Ctx,
    params: *mut c_void,
    flags: c_uint,
    dev: c_int,
) -> c_int {
    called(format!("cuCtxCreate@12050 params_null={} flags={flags} dev={dev}", params.is_null()));
    create_context(ctx, dev)
}

unsafe extern "C" fn cuCtxDestroy(_ctx: Ctx) -> c_int {
    SUCCESS
}

unsafe extern "C" fn cuCtxSynchronize() -> c_int {
    SUCCESS
}

unsafe extern "C" fn cuEventCreate(event: *mut *mut c_void, _flags: c_uint) -> c_int {
    status(put(event, new_handle()))
}

unsafe extern "C" fn cuEventDestroy(_event: *mut c_void) -> c_int {
    SUCCESS
}

unsafe extern "C" fn cuEventElapsedTime_v2000(ms: *mut f32, _a: *mut c_void, _b: *mut c_void) -> c_int {
    called("cuEventElapsedTime@2000".into());
    status(put(ms, 2.0))
}

unsafe extern "C" fn cuEventElapsedTime_v12080(ms: *mut f32, _a: *mut c_void, _b: *mut c_void) -> c_int {
    called("cuEventElapsedTime@12080".into());
    status(put(ms, 12.5))
}

unsafe extern "C" fn cuStreamCreate(stream: *mut *mut c_void, _flags: c_uint) -> c_int {
    status(put(stream, new_handle()))
}

unsafe extern "C" fn cuStreamDestroy(_stream: *mut c_void) -> c_int {
    SUCCESS
}

unsafe extern "C" fn cuStreamSynchronize(_stream: *mut c_void) -> c_int {
    SUCCESS
}

unsafe extern "C" fn cuMemAllocManaged(ptr: *mut u64, bytes: usize, _flags: c_uint) -> c_int {
    // Addresses only: nothing reads or writes through them.
    let base = HANDLES.fetch_add(bytes.max(1).next_multiple_of(256), Ordering::Relaxed) as u64;
    status(put(ptr, base))
}

unsafe extern "C" fn cuMemFree(_ptr: u64) -> c_int {
    SUCCESS
}

unsafe extern "C" fn cuMemsetD8Async(_ptr: u64, _value: u8, _n: usize, _stream: *mut c_void) -> c_int {
    SUCCESS
}

unsafe extern "C" fn cuMemsetD8(_ptr: u64, _value: u8, _n: usize) -> c_int {
    SUCCESS
}

/// `CUmemLocation`: a type and an id.
#[repr(C)]
#[derive(Clone, Copy)]
struct Location {
    type_: c_int,
    id: c_int,
}

unsafe extern "C" fn cuMemAdvise_v8000(_ptr: u64, _n: usize, advice: c_int, device: c_int) -> c_int {
    called(format!("cuMemAdvise@8000 advice={advice} device={device}"));
    SUCCESS
}

unsafe extern "C" fn cuMemAdvise_v12020(_ptr: u64, _n: usize, advice: c_int, location: Location) -> c_int {
    called(format!("cuMemAdvise@12020 advice={advice} location={}:{}", location.type_, location.id));
    SUCCESS
}

unsafe extern "C" fn cuMemPrefetchAsync_v8000(_ptr: u64, _n: usize, device: c_int, _s: *mut c_void) -> c_int {
    called(format!("cuMemPrefetchAsync@8000 device={device}"));
    SUCCESS
}

unsafe extern "C" fn cuMemPrefetchAsync_v12020(
    _ptr: u64,
    _n: usize,
    location: Location,
    flags: c_uint,
    _s: *mut c_void,
) -> c_int {
    called(format!("cuMemPrefetchAsync@12020 location={}:{} flags={flags}", location.type_, location.id));
    SUCCESS
}

unsafe extern "C" fn cuMemcpy(_dst: u64, _src: u64, _n: usize) -> c_int {
    SUCCESS
}

unsafe extern "C" fn cuMemcpy_ptds(_dst: u64, _src: u64, _n: usize) -> c_int {
    PER_THREAD_MEMCPY_STATUS
}

const MODULE_FUNCTION: usize = 0x3000;
const LIBRARY_KERNEL: usize = 0x4000;

unsafe extern "C" fn cuCtxSetFlags(flags: c_uint) -> c_int {
    called(format!("cuCtxSetFlags@12010 flags={flags}"));
    SUCCESS
}

unsafe extern "C" fn cuModuleUnload(_module: *mut c_void) -> c_int {
    SUCCESS
}

unsafe extern "C" fn cuModuleGetFunctionCount(count: *mut c_uint, _module: *mut c_void) -> c_int {
    called("cuModuleGetFunctionCount@12040".into());
    status(put(count, 1))
}

unsafe extern "C" fn cuModuleEnumerateFunctions(out: *mut *mut c_void, n: c_uint, _m: *mut c_void) -> c_int {
    called("cuModuleEnumerateFunctions@12040".into());
    status(n == 1 && put(out, MODULE_FUNCTION as *mut c_void))
}

unsafe extern "C" fn cuFuncGetAttribute(value: *mut c_int, _attribute: c_int, _f: *mut c_void) -> c_int {
    status(put(value, 1024))
}

/// One 8-byte parameter, for functions and kernels alike.
fn param_info(what: &str, index: usize, offset: *mut usize, size: *mut usize) -> c_int {
    called(format!("{what}@12040 index={index}"));
    if index > 0 {
        return INVALID_VALUE;
    }
    status(put(offset, 0) && put(size, 8))
}

unsafe extern "C" fn cuFuncGetParamInfo(
    _f: *mut c_void,
    i: usize,
    offset: *mut usize,
    size: *mut usize,
) -> c_int {
    param_info("cuFuncGetParamInfo", i, offset, size)
}

unsafe extern "C" fn cuKernelGetParamInfo(
    _k: *mut c_void,
    i: usize,
    offset: *mut usize,
    size: *mut usize,
) -> c_int {
    param_info("cuKernelGetParamInfo", i, offset, size)
}

unsafe extern "C" fn cuFuncGetName(name: *mut *const std::ffi::c_char, _f: *mut c_void) -> c_int {
    called("cuFuncGetName@12030".into());
    status(put(name, c"fake_function".as_ptr()))
}

unsafe extern "C" fn cuKernelGetName(name: *mut *const std::ffi::c_char, _k: *mut c_void) -> c_int {
    called("cuKernelGetName@12030".into());
    status(put(name, c"fake_kernel".as_ptr()))
}

unsafe extern "C" fn cuFuncLoad(_f: *mut c_void) -> c_int {
    called("cuFuncLoad@12040".into());
    SUCCESS
}

unsafe extern "C" fn cuFuncIsLoaded(state: *mut c_int, _f: *mut c_void) -> c_int {
    called("cuFuncIsLoaded@12040".into());
    // CU_FUNCTION_LOADING_STATE_LOADED
    status(put(state, 1))
}

unsafe extern "C" fn cuLibraryLoadData(
    library: *mut *mut c_void,
    _code: *const c_void,
    _jit_options: *mut c_void,
    _jit_values: *mut *mut c_void,
    _n_jit: c_uint,
    _library_options: *mut c_void,
    _library_values: *mut *mut c_void,
    _n_library: c_uint,
) -> c_int {
    status(put(library, new_handle()))
}

unsafe extern "C" fn cuLibraryUnload(_library: *mut c_void) -> c_int {
    SUCCESS
}

unsafe extern "C" fn cuLibraryGetKernel(
    kernel: *mut *mut c_void,
    _library: *mut c_void,
    _name: *const std::ffi::c_char,
) -> c_int {
    status(put(kernel, LIBRARY_KERNEL as *mut c_void))
}

unsafe extern "C" fn cuLibraryGetKernelCount(count: *mut c_uint, _library: *mut c_void) -> c_int {
    called("cuLibraryGetKernelCount@12040".into());
    status(put(count, 1))
}

unsafe extern "C" fn cuLibraryEnumerateKernels(out: *mut *mut c_void, n: c_uint, _l: *mut c_void) -> c_int {
    called("cuLibraryEnumerateKernels@12040".into());
    status(n == 1 && put(out, LIBRARY_KERNEL as *mut c_void))
}

/// Granularity of VMM allocations and of multicast objects in this fake: 2 MiB.
const GRANULARITY: usize = 2 << 20;

unsafe extern "C" fn cuMemGetAllocationGranularity(
    granularity: *mut usize,
    prop: *const c_void,
    _option: c_int,
) -> c_int {
    status(!prop.is_null() && put(granularity, GRANULARITY))
}

unsafe extern "C" fn cuMemCreate(handle: *mut u64, size: usize, prop: *const c_void, _flags: u64) -> c_int {
    let ok = !prop.is_null() && size > 0 && size % GRANULARITY == 0;
    status(ok && put(handle, new_handle() as u64))
}

unsafe extern "C" fn cuMemRelease(handle: u64) -> c_int {
    called(format!("cuMemRelease@10020 handle={handle:#x}"));
    SUCCESS
}

/// `CUmulticastObjectProp`: device count, size, handle types, flags.
#[repr(C)]
struct MulticastProp {
    devices: c_uint,
    size: usize,
    handle_types: u64,
    flags: u64,
}

unsafe extern "C" fn cuMulticastGetGranularity(
    granularity: *mut usize,
    prop: *const MulticastProp,
    option: c_int,
) -> c_int {
    called(format!("cuMulticastGetGranularity@12010 option={option}"));
    status(!prop.is_null() && put(granularity, GRANULARITY))
}

unsafe extern "C" fn cuMulticastCreate(handle: *mut u64, prop: *const MulticastProp) -> c_int {
    if prop.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: checked non-null; the caller passes a valid property struct.
    let p = unsafe { &*prop };
    called(format!("cuMulticastCreate@12010 devices={} size={:#x}", p.devices, p.size));
    let ok = p.devices > 0 && p.size > 0 && p.size % GRANULARITY == 0;
    status(ok && put(handle, new_handle() as u64))
}

unsafe extern "C" fn cuMulticastAddDevice(_handle: u64, dev: c_int) -> c_int {
    called(format!("cuMulticastAddDevice@12010 dev={dev}"));
    status(valid_device(dev))
}

unsafe extern "C" fn cuMulticastBindMem(
    _mc: u64,
    mc_offset: usize,
    _mem: u64,
    mem_offset: usize,
    size: usize,
    flags: u64,
) -> c_int {
    called(format!(
        "cuMulticastBindMem@12010 offset={mc_offset:#x} mem_offset={mem_offset:#x} size={size:#x} flags={flags}"
    ));
    status((mc_offset | mem_offset | size) % GRANULARITY == 0)
}

unsafe extern "C" fn cuMulticastBindAddr(
    _mc: u64,
    mc_offset: usize,
    _ptr: u64,
    size: usize,
    flags: u64,
) -> c_int {
    called(format!("cuMulticastBindAddr@12010 offset={mc_offset:#x} size={size:#x} flags={flags}"));
    status((mc_offset | size) % GRANULARITY == 0)
}

unsafe extern "C" fn cuMulticastUnbind(_mc: u64, dev: c_int, mc_offset: usize, size: usize) -> c_int {
    called(format!("cuMulticastUnbind@12010 dev={dev} offset={mc_offset:#x} size={size:#x}"));
    status(valid_device(dev))
}

macro_rules! addr {
    ($f:expr) => {
        $f as *const () as usize
    };
}

/// (name, ABI version, default-stream address, per-thread address or 0)
fn implemented() -> Vec<(&'static str, i32, usize, usize)> {
    vec![
        ("cuInit", 2000, addr!(cuInit), 0),
        ("cuDeviceGetCount", 2000, addr!(cuDeviceGetCount), 0),
        ("cuDeviceGet", 2000, addr!(cuDeviceGet), 0),
        ("cuDevicePrimaryCtxRetain", 7000, addr!(cuDevicePrimaryCtxRetain), 0),
        ("cuDevicePrimaryCtxRelease", 11000, addr!(cuDevicePrimaryCtxRelease), 0),
        ("cuDevicePrimaryCtxGetState", 7000, addr!(cuDevicePrimaryCtxGetState), 0),
        ("cuCtxGetCurrent", 4000, addr!(cuCtxGetCurrent), 0),
        ("cuCtxSetCurrent", 4000, addr!(cuCtxSetCurrent), 0),
        ("cuCtxPushCurrent", 4000, addr!(cuCtxPushCurrent), 0),
        ("cuCtxPopCurrent", 4000, addr!(cuCtxPopCurrent), 0),
        ("cuCtxGetDevice", 2000, addr!(cuCtxGetDevice_v2000), 0),
        ("cuCtxGetDevice", 13000, addr!(cuCtxGetDevice_v13000), 0),
        ("cuCtxCreate", 3020, addr!(cuCtxCreate_v3020), 0),
        ("cuCtxCreate", 11040, addr!(cuCtxCreate_v11040), 0),
        ("cuCtxCreate", 12050, addr!(cuCtxCreate_v12050), 0),
        ("cuCtxDestroy", 4000, addr!(cuCtxDestroy), 0),
        ("cuCtxSynchronize", 2000, addr!(cuCtxSynchronize), 0),
        ("cuEventCreate", 2000, addr!(cuEventCreate), 0),
        ("cuEventDestroy", 4000, addr!(cuEventDestroy), 0),
        ("cuEventElapsedTime", 2000, addr!(cuEventElapsedTime_v2000), 0),
        ("cuEventElapsedTime", 12080, addr!(cuEventElapsedTime_v12080), 0),
        ("cuStreamCreate", 2000, addr!(cuStreamCreate), 0),
        ("cuStreamDestroy", 4000, addr!(cuStreamDestroy), 0),
        ("cuStreamSynchronize", 2000, addr!(cuStreamSynchronize), addr!(cuStreamSynchronize)),
        ("cuMemAllocManaged", 6000, addr!(cuMemAllocManaged), 0),
        ("cuMemFree", 3020, addr!(cuMemFree), 0),
        ("cuMemsetD8", 3020, addr!(cuMemsetD8), addr!(cuMemsetD8)),
        ("cuMemsetD8Async", 3020, addr!(cuMemsetD8Async), addr!(cuMemsetD8Async)),
        ("cuMemAdvise", 8000, addr!(cuMemAdvise_v8000), 0),
        ("cuMemAdvise", 12020, addr!(cuMemAdvise_v12020), 0),
        ("cuMemPrefetchAsync", 8000, addr!(cuMemPrefetchAsync_v8000), addr!(cuMemPrefetchAsync_v8000)),
        ("cuMemPrefetchAsync", 12020, addr!(cuMemPrefetchAsync_v12020), addr!(cuMemPrefetchAsync_v12020)),
        ("cuMemcpy", 4000, addr!(cuMemcpy), addr!(cuMemcpy_ptds)),
        ("cuCtxSetFlags", 12010, addr!(cuCtxSetFlags), 0),
        ("cuModuleUnload", 2000, addr!(cuModuleUnload), 0),
        ("cuModuleGetFunctionCount", 12040, addr!(cuModuleGetFunctionCount), 0),
        ("cuModuleEnumerateFunctions", 12040, addr!(cuModuleEnumerateFunctions), 0),
        ("cuFuncGetAttribute", 2020, addr!(cuFuncGetAttribute), 0),
        ("cuFuncGetParamInfo", 12040, addr!(cuFuncGetParamInfo), 0),
        ("cuFuncGetName", 12030, addr!(cuFuncGetName), 0),
        ("cuFuncLoad", 12040, addr!(cuFuncLoad), 0),
        ("cuFuncIsLoaded", 12040, addr!(cuFuncIsLoaded), 0),
        ("cuLibraryLoadData", 12000, addr!(cuLibraryLoadData), 0),
        ("cuLibraryUnload", 12000, addr!(cuLibraryUnload), 0),
        ("cuLibraryGetKernel", 12000, addr!(cuLibraryGetKernel), 0),
        ("cuLibraryGetKernelCount", 12040, addr!(cuLibraryGetKernelCount), 0),
        ("cuLibraryEnumerateKernels", 12040, addr!(cuLibraryEnumerateKernels), 0),
        ("cuKernelGetName", 12030, addr!(cuKernelGetName), 0),
        ("cuKernelGetParamInfo", 12040, addr!(cuKernelGetParamInfo), 0),
        ("cuMemGetAllocationGranularity", 10020, addr!(cuMemGetAllocationGranularity), 0),
        ("cuMemCreate", 10020, addr!(cuMemCreate), 0),
        ("cuMemRelease", 10020, addr!(cuMemRelease), 0),
        ("cuMulticastGetGranularity", 12010, addr!(cuMulticastGetGranularity), 0),
        ("cuMulticastCreate", 12010, addr!(cuMulticastCreate), 0),
        ("cuMulticastAddDevice", 12010, addr!(cuMulticastAddDevice), 0),
        ("cuMulticastBindMem", 12010, addr!(cuMulticastBindMem), 0),
        ("cuMulticastBindAddr", 12010, addr!(cuMulticastBindAddr), 0),
        ("cuMulticastUnbind", 12010, addr!(cuMulticastUnbind), 0),
    ]
}

/// The address of `name` at ABI `version` (its default-stream variant's version), if this
/// fake implements it.
pub(crate) fn address(name: &str, version: i32, per_thread: bool) -> Option<usize> {
    implemented()
        .into_iter()
        .find(|(n, v, ..)| *n == name && *v == version)
        .map(|(_, _, legacy, pt)| if per_thread && pt != 0 { pt } else { legacy })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_implemented_abi_is_one_the_generated_table_lists() {
        for (name, version, ..) in implemented() {
            let listed = crate::abi::table().iter().any(|e| e.symbol == name && e.version == version);
            assert!(listed, "{name} at {version} is not in the generated ABI table");
        }
    }
}
