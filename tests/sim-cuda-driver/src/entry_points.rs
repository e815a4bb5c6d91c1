//! The driver functions the simulator implements, each at the ABI version whose signature it
//! has. Handles are made-up numbers; the one device is ordinal 0 and its primary context
//! [`PRIMARY`].

use crate::checker::Range;
use crate::engine::{HostFn, Until, Work};
use crate::graphs::CAPTURE_UNSUPPORTED;
use crate::{INVALID_HANDLE, INVALID_VALUE, NOT_READY, NOT_SUPPORTED, SUCCESS, run_until, with_sim};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_uint, c_void};

type Handle = *mut c_void;

/// The primary context of device 0.
const PRIMARY: usize = 0x1000;
/// `CU_STREAM_NON_BLOCKING`.
const NON_BLOCKING: c_uint = 1;
/// `CUDA_ERROR_OUT_OF_MEMORY`.
const OUT_OF_MEMORY: c_int = 2;
/// The device memory the simulated device reports, and the most one allocation may take.
const TOTAL_MEMORY: usize = 16 << 30;

thread_local! {
    static CONTEXTS: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
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

fn handle(ok: bool) -> c_int {
    if ok { SUCCESS } else { INVALID_HANDLE }
}

/// What every function the simulator does not implement answers.
pub(crate) unsafe extern "C" fn unsupported() -> c_int {
    NOT_SUPPORTED
}

unsafe extern "C" fn cuInit(_flags: c_uint) -> c_int {
    SUCCESS
}

unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> c_int {
    status(put(count, 1))
}

unsafe extern "C" fn cuDeviceGet(dev: *mut c_int, ordinal: c_int) -> c_int {
    status(ordinal == 0 && put(dev, 0))
}

/// Attributes of an H100-like device; 0 for the rest.
unsafe extern "C" fn cuDeviceGetAttribute(value: *mut c_int, attribute: c_int, dev: c_int) -> c_int {
    let v = match attribute {
        1 => 1024,      // MAX_THREADS_PER_BLOCK
        2 | 3 => 1024,  // MAX_BLOCK_DIM_X, _Y
        4 => 64,        // MAX_BLOCK_DIM_Z
        5 => i32::MAX,  // MAX_GRID_DIM_X
        6 | 7 => 65535, // MAX_GRID_DIM_Y, _Z
        8 => 49152,     // MAX_SHARED_MEMORY_PER_BLOCK
        10 => 32,       // WARP_SIZE
        16 => 132,      // MULTIPROCESSOR_COUNT
        41 => 1,        // UNIFIED_ADDRESSING
        75 => 9,        // COMPUTE_CAPABILITY_MAJOR
        76 => 0,        // COMPUTE_CAPABILITY_MINOR
        83 | 89 => 1,   // MANAGED_MEMORY, CONCURRENT_MANAGED_ACCESS
        115 => 1,       // MEMORY_POOLS_SUPPORTED
        _ => 0,
    };
    status(dev == 0 && put(value, v))
}

unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: c_int) -> c_int {
    let text = c"Simulated CUDA device";
    let bytes = text.to_bytes_with_nul();
    if name.is_null() || dev != 0 || len < bytes.len() as c_int {
        return INVALID_VALUE;
    }
    // SAFETY: `name` holds `len` bytes, at least the name's.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr().cast(), name, bytes.len()) };
    SUCCESS
}

unsafe extern "C" fn cuDeviceTotalMem(bytes: *mut usize, dev: c_int) -> c_int {
    status(dev == 0 && put(bytes, TOTAL_MEMORY))
}

unsafe extern "C" fn cuMemGetInfo(free: *mut usize, total: *mut usize) -> c_int {
    status(put(free, TOTAL_MEMORY / 2) && put(total, TOTAL_MEMORY))
}

unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut Handle, dev: c_int) -> c_int {
    status(dev == 0 && put(ctx, PRIMARY as Handle))
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

unsafe extern "C" fn cuCtxGetCurrent(ctx: *mut Handle) -> c_int {
    let top = CONTEXTS.with(|s| s.borrow().last().copied().unwrap_or(0));
    status(put(ctx, top as Handle))
}

unsafe extern "C" fn cuCtxSetCurrent(ctx: Handle) -> c_int {
    CONTEXTS.with(|s| {
        let mut s = s.borrow_mut();
        s.pop();
        if !ctx.is_null() {
            s.push(ctx as usize);
        }
    });
    SUCCESS
}

unsafe extern "C" fn cuCtxPushCurrent(ctx: Handle) -> c_int {
    CONTEXTS.with(|s| s.borrow_mut().push(ctx as usize));
    SUCCESS
}

unsafe extern "C" fn cuCtxPopCurrent(ctx: *mut Handle) -> c_int {
    let top = CONTEXTS.with(|s| s.borrow_mut().pop()).unwrap_or(0);
    put(ctx, top as Handle);
    SUCCESS
}

unsafe extern "C" fn cuCtxGetDevice(dev: *mut c_int) -> c_int {
    match CONTEXTS.with(|s| s.borrow().last().copied()) {
        Some(_) => status(put(dev, 0)),
        None => 201, // CUDA_ERROR_INVALID_CONTEXT
    }
}

unsafe extern "C" fn cuCtxSynchronize() -> c_int {
    if with_sim(|s| s.refuse_unsafe_call()) {
        return CAPTURE_UNSUPPORTED;
    }
    run_until(Until::All);
    with_sim(|s| s.host_saw_all());
    SUCCESS
}

unsafe extern "C" fn cuStreamCreate(stream: *mut Handle, flags: c_uint) -> c_int {
    let h = with_sim(|s| s.create_stream(flags & NON_BLOCKING == 0));
    status(put(stream, h as Handle))
}

unsafe extern "C" fn cuStreamCreateWithPriority(
    stream: *mut Handle,
    flags: c_uint,
    _priority: c_int,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { cuStreamCreate(stream, flags) }
}

unsafe extern "C" fn cuStreamDestroy(stream: Handle) -> c_int {
    handle(with_sim(|s| s.destroy_stream(stream as u64)))
}

unsafe extern "C" fn cuStreamGetCtx(stream: Handle, ctx: *mut Handle) -> c_int {
    handle(with_sim(|s| s.is_stream(stream as u64)) && put(ctx, PRIMARY as Handle))
}

unsafe extern "C" fn cuStreamGetFlags(stream: Handle, flags: *mut c_uint) -> c_int {
    handle(with_sim(|s| s.is_stream(stream as u64)) && put(flags, 0))
}

/// `CUstreamCaptureStatus`: none, active, invalidated.
fn capture_status(capture: Option<&crate::graphs::Capture>) -> c_int {
    match capture {
        None => 0,
        Some(c) if c.invalid => 2,
        Some(_) => 1,
    }
}

unsafe extern "C" fn cuStreamIsCapturing(stream: Handle, capturing: *mut c_int) -> c_int {
    match with_sim(|s| s.capture_of(stream as u64).map(capture_status)) {
        Some(status) => handle(put(capturing, status)),
        None => INVALID_HANDLE,
    }
}

/// The status, id, graph and dependencies (the last captured node, if any) of a capture.
unsafe extern "C" fn cuStreamGetCaptureInfo(
    stream: Handle,
    capturing: *mut c_int,
    id: *mut u64,
    graph: *mut Handle,
    deps: *mut *const u64,
    edges: *mut *const c_void,
    count: *mut usize,
) -> c_int {
    let info = with_sim(|s| {
        s.capture_of(stream as u64).map(|c| {
            let status = capture_status(c);
            let (id, graph) = c.map_or((0, 0), |c| (c.id, c.graph));
            let dep = c.filter(|c| c.deps[0] != 0).map(|c| c.deps.as_ptr());
            (status, id, graph, dep)
        })
    });
    let Some((status, capture_id, capture_graph, dep)) = info else { return INVALID_HANDLE };
    if capturing.is_null() {
        return INVALID_VALUE;
    }
    put(capturing, status);
    if status != 0 {
        if !id.is_null() {
            put(id, capture_id);
        }
        if !graph.is_null() {
            put(graph, capture_graph as Handle);
        }
        if !deps.is_null() {
            put(deps, dep.unwrap_or(std::ptr::null()));
        }
        if !edges.is_null() {
            put(edges, std::ptr::null());
        }
        if !count.is_null() {
            put(count, usize::from(dep.is_some()));
        }
    }
    SUCCESS
}

unsafe extern "C" fn cuStreamBeginCapture(stream: Handle, mode: c_uint) -> c_int {
    if stream as u64 == 0 || stream as u64 == crate::engine::LEGACY {
        return CAPTURE_UNSUPPORTED;
    }
    with_sim(|s| s.begin_capture(stream as u64, mode))
}

unsafe extern "C" fn cuStreamEndCapture(stream: Handle, graph: *mut Handle) -> c_int {
    if graph.is_null() {
        return INVALID_VALUE;
    }
    match with_sim(|s| s.end_capture(stream as u64)) {
        Ok(g) => status(put(graph, g as Handle)),
        Err(e) => {
            put(graph, std::ptr::null_mut());
            e
        }
    }
}

unsafe extern "C" fn cuThreadExchangeStreamCaptureMode(mode: *mut c_uint) -> c_int {
    if mode.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: an in-out parameter, checked above.
    unsafe { *mode = crate::graphs::exchange_thread_mode(*mode) };
    SUCCESS
}

/// `CUDA_GRAPH_INSTANTIATE_PARAMS` (the layout of `cuda.h`).
#[repr(C)]
struct InstantiateParams {
    flags: u64,
    upload_stream: Handle,
    err_node_out: Handle,
    result_out: c_int,
}

unsafe extern "C" fn cuGraphInstantiateWithParams(
    exec: *mut Handle,
    graph: Handle,
    params: *mut InstantiateParams,
) -> c_int {
    if exec.is_null() || params.is_null() {
        return INVALID_VALUE;
    }
    let Some(h) = with_sim(|s| s.instantiate(graph as u64)) else { return INVALID_HANDLE };
    // SAFETY: the caller passes valid parameters; only the outputs are written.
    unsafe {
        (*params).err_node_out = std::ptr::null_mut();
        (*params).result_out = 0;
    }
    status(put(exec, h as Handle))
}

unsafe extern "C" fn cuGraphLaunch(exec: Handle, stream: Handle) -> c_int {
    with_sim(|s| s.launch_graph(exec as u64, stream as u64))
}

unsafe extern "C" fn cuGraphDestroy(graph: Handle) -> c_int {
    handle(with_sim(|s| s.destroy_graph(graph as u64)))
}

unsafe extern "C" fn cuGraphExecDestroy(exec: Handle) -> c_int {
    handle(with_sim(|s| s.destroy_exec(exec as u64)))
}

unsafe extern "C" fn cuStreamSynchronize(stream: Handle) -> c_int {
    if let Some(refused) = with_sim(|s| s.refuse_if_capturing(stream as u64)) {
        return refused;
    }
    let Some((last, agent)) = with_sim(|s| s.stream_point(stream as u64)) else { return INVALID_HANDLE };
    if let Some(op) = last {
        run_until(Until::Op(op));
    }
    with_sim(|s| s.host_saw_agent(agent));
    SUCCESS
}

unsafe extern "C" fn cuStreamQuery(stream: Handle) -> c_int {
    if let Some(refused) = with_sim(|s| s.refuse_if_capturing(stream as u64)) {
        return refused;
    }
    let Some((last, agent)) = with_sim(|s| s.stream_point(stream as u64)) else { return INVALID_HANDLE };
    if let Some(op) = last.filter(|&op| !with_sim(|s| s.is_done(op))) {
        if !with_sim(|s| s.query_finishes()) {
            return NOT_READY;
        }
        run_until(Until::Op(op));
    }
    with_sim(|s| s.host_saw_agent(agent));
    SUCCESS
}

unsafe extern "C" fn cuStreamWaitEvent(stream: Handle, event: Handle, flags: c_uint) -> c_int {
    // CU_EVENT_WAIT_EXTERNAL
    with_sim(|s| s.wait_event(stream as u64, event as u64, flags & 1 != 0))
}

unsafe extern "C" fn cuEventCreate(event: *mut Handle, _flags: c_uint) -> c_int {
    let h = with_sim(|s| s.create_event());
    status(put(event, h as Handle))
}

unsafe extern "C" fn cuEventDestroy(event: Handle) -> c_int {
    handle(with_sim(|s| s.destroy_event(event as u64)))
}

unsafe extern "C" fn cuEventRecord(event: Handle, stream: Handle) -> c_int {
    with_sim(|s| s.record_event(event as u64, stream as u64))
}

unsafe extern "C" fn cuEventRecordWithFlags(event: Handle, stream: Handle, _flags: c_uint) -> c_int {
    // SAFETY: forwarded.
    unsafe { cuEventRecord(event, stream) }
}

unsafe extern "C" fn cuEventSynchronize(event: Handle) -> c_int {
    if with_sim(|s| s.is_captured_event(event as u64)) {
        return crate::graphs::CAPTURED_EVENT;
    }
    let Some(point) = with_sim(|s| s.event_point(event as u64)) else {
        DEAD_EVENT_QUERIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return INVALID_HANDLE;
    };
    if let Some((op, clock)) = point {
        run_until(Until::Op(op));
        with_sim(|s| s.host_saw(&clock));
    }
    SUCCESS
}

/// Queries of events that do not exist (destroyed, or never made): with a real driver, a use
/// of a destroyed handle ([`crate::control::sim_dead_event_queries`]).
pub(crate) static DEAD_EVENT_QUERIES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

unsafe extern "C" fn cuEventQuery(event: Handle) -> c_int {
    if with_sim(|s| s.is_captured_event(event as u64)) {
        return crate::graphs::CAPTURED_EVENT;
    }
    let Some(point) = with_sim(|s| s.event_point(event as u64)) else {
        DEAD_EVENT_QUERIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return INVALID_HANDLE;
    };
    if let Some((op, clock)) = point {
        if !with_sim(|s| s.is_done(op)) {
            if !with_sim(|s| s.query_finishes()) {
                return NOT_READY;
            }
            run_until(Until::Op(op));
        }
        with_sim(|s| s.host_saw(&clock));
    }
    SUCCESS
}

unsafe extern "C" fn cuMemAlloc(ptr: *mut u64, bytes: usize) -> c_int {
    if with_sim(|s| s.refuse_unsafe_call()) {
        return CAPTURE_UNSUPPORTED;
    }
    alloc_device(ptr, bytes)
}

/// A new device allocation of `bytes`.
fn alloc_device(ptr: *mut u64, bytes: usize) -> c_int {
    if bytes == 0 {
        return INVALID_VALUE;
    }
    if bytes > TOTAL_MEMORY {
        return OUT_OF_MEMORY;
    }
    let p = with_sim(|s| {
        let p = s.memory.alloc_device(bytes);
        s.checker.new_owner(Range::new(p, bytes as u64));
        p
    });
    status(put(ptr, p))
}

/// Waits for the device, as the driver's `cuMemFree` does, then frees.
unsafe extern "C" fn cuMemFree(ptr: u64) -> c_int {
    if with_sim(|s| s.refuse_unsafe_call()) {
        return CAPTURE_UNSUPPORTED;
    }
    run_until(Until::All);
    with_sim(|s| {
        s.host_saw_all();
        status(s.memory.free_device(ptr).is_some())
    })
}

unsafe extern "C" fn cuMemAllocAsync(ptr: *mut u64, bytes: usize, stream: Handle) -> c_int {
    match with_sim(|s| s.capture_of(stream as u64).map(|c| c.is_some())) {
        None => return INVALID_VALUE,
        // An allocation node: the memory is made now and stays (a node that does nothing).
        Some(true) => {
            let recorded = with_sim(|s| s.capture_wait(stream as u64, None));
            if recorded != SUCCESS {
                return recorded;
            }
        }
        Some(false) => {}
    }
    // Fresh addresses: nothing queued anywhere touches them, so no ordering is needed.
    alloc_device(ptr, bytes)
}

unsafe extern "C" fn cuMemFreeAsync(ptr: u64, stream: Handle) -> c_int {
    with_sim(|s| {
        let Some(size) = s.memory.device_size(ptr) else { return INVALID_VALUE };
        if s.capture_of(stream as u64).is_some_and(|c| c.is_some()) {
            // A free node: does nothing; the memory stays for the graph's launches.
            return s.capture_wait(stream as u64, None);
        }
        let Some((_, at)) = s.enqueue(stream as u64, Work::Mark, None, "cuMemFreeAsync", &[], &[]) else {
            return INVALID_HANDLE;
        };
        let host = s.host();
        let site = s.checker.site(host, "cuMemFreeAsync");
        s.checker.release(at, Range::new(ptr, size as u64), site);
        s.memory.free_device(ptr);
        SUCCESS
    })
}

unsafe extern "C" fn cuMemHostAlloc(pp: *mut *mut c_void, bytes: usize, _flags: c_uint) -> c_int {
    if with_sim(|s| s.refuse_unsafe_call()) {
        return CAPTURE_UNSUPPORTED;
    }
    if bytes > TOTAL_MEMORY {
        return OUT_OF_MEMORY;
    }
    let p = with_sim(|s| {
        let p = s.memory.alloc_pinned(bytes);
        if !p.is_null() {
            s.checker.new_owner(Range::new(p as u64, bytes as u64));
        }
        p
    });
    if p.is_null() {
        return OUT_OF_MEMORY;
    }
    status(put(pp, p.cast()))
}

/// Frees pinned memory without waiting: work that may still use it is reported.
unsafe extern "C" fn cuMemFreeHost(p: *mut c_void) -> c_int {
    if with_sim(|s| s.refuse_unsafe_call()) {
        return CAPTURE_UNSUPPORTED;
    }
    with_sim(|s| {
        let Some(size) = s.memory.free_pinned(p as u64) else { return INVALID_VALUE };
        let host = s.host();
        let at = s.checker.tick(host);
        let site = s.checker.site(host, "cuMemFreeHost");
        s.checker.release(at, Range::new(p as u64, size as u64), site);
        SUCCESS
    })
}

unsafe extern "C" fn cuMemHostGetFlags(flags: *mut c_uint, p: *mut c_void) -> c_int {
    let known = with_sim(|s| s.memory.pinned_size(p as u64).is_some());
    status(known && put(flags, 0))
}

/// Queues a copy of `bytes` from `src` to `dst` on `stream`.
fn copy(call: &'static str, dst: u64, src: u64, bytes: usize, stream: Handle) -> c_int {
    let bytes = bytes as u64;
    let work = Work::Copy { dst, src, bytes };
    let (r, w) = ([Range::new(src, bytes)], [Range::new(dst, bytes)]);
    with_sim(|s| s.submit(stream as u64, work, call, &r, &w))
}

unsafe extern "C" fn cuMemcpyHtoDAsync(dst: u64, src: *const c_void, bytes: usize, stream: Handle) -> c_int {
    copy("cuMemcpyHtoDAsync", dst, src as u64, bytes, stream)
}

unsafe extern "C" fn cuMemcpyDtoHAsync(dst: *mut c_void, src: u64, bytes: usize, stream: Handle) -> c_int {
    copy("cuMemcpyDtoHAsync", dst as u64, src, bytes, stream)
}

unsafe extern "C" fn cuMemcpyDtoDAsync(dst: u64, src: u64, bytes: usize, stream: Handle) -> c_int {
    copy("cuMemcpyDtoDAsync", dst, src, bytes, stream)
}

/// Queues a memset of `count` elements of `width` bytes.
fn memset(call: &'static str, dst: u64, value: u32, width: u8, count: usize, stream: Handle) -> c_int {
    let count = count as u64;
    let work = Work::Memset { dst, count, width, value };
    let w = [Range::new(dst, count.saturating_mul(u64::from(width)))];
    with_sim(|s| s.submit(stream as u64, work, call, &[], &w))
}

unsafe extern "C" fn cuMemsetD8Async(dst: u64, value: u8, n: usize, stream: Handle) -> c_int {
    memset("cuMemsetD8Async", dst, value.into(), 1, n, stream)
}

unsafe extern "C" fn cuMemsetD16Async(dst: u64, value: u16, n: usize, stream: Handle) -> c_int {
    memset("cuMemsetD16Async", dst, value.into(), 2, n, stream)
}

unsafe extern "C" fn cuMemsetD32Async(dst: u64, value: u32, n: usize, stream: Handle) -> c_int {
    memset("cuMemsetD32Async", dst, value, 4, n, stream)
}

unsafe extern "C" fn cuLaunchHostFunc(stream: Handle, f: Option<HostFn>, data: *mut c_void) -> c_int {
    let Some(f) = f else { return INVALID_VALUE };
    let work = Work::Host { f, data: data as usize };
    with_sim(|s| s.submit(stream as u64, work, "cuLaunchHostFunc", &[], &[]))
}

/// `CUDA_ERROR_INVALID_PTX`: an image that names a kernel the simulator does not have.
const INVALID_PTX: c_int = 218;

/// Loads an image (see [`kernels`](crate::kernels)): text naming built-in kernels.
unsafe fn load_image(module: *mut Handle, image: *const c_void) -> c_int {
    if image.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: the caller passes NUL-terminated text (a binary image is refused below, at
    // its first NUL byte or as text that names no built-in kernel).
    let text = unsafe { std::ffi::CStr::from_ptr(image.cast()) }.to_bytes();
    let Some(kernels) = crate::kernels::parse_image(text) else { return INVALID_PTX };
    let h = with_sim(|s| s.load_module(&kernels));
    status(put(module, h as Handle))
}

unsafe extern "C" fn cuModuleLoadData(module: *mut Handle, image: *const c_void) -> c_int {
    // SAFETY: forwarded.
    unsafe { load_image(module, image) }
}

/// Options are accepted and ignored; the log sizes are left as given (the logs stay empty).
unsafe extern "C" fn cuModuleLoadDataEx(
    module: *mut Handle,
    image: *const c_void,
    _count: c_uint,
    _options: *mut c_int,
    _values: *mut *mut c_void,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { load_image(module, image) }
}

unsafe extern "C" fn cuModuleUnload(module: Handle) -> c_int {
    handle(with_sim(|s| s.unload_module(module as u64)))
}

unsafe extern "C" fn cuModuleGetFunction(f: *mut Handle, module: Handle, name: *const c_char) -> c_int {
    if name.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: the caller passes a NUL-terminated name.
    let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes();
    match with_sim(|s| s.function(module as u64, name)) {
        None => INVALID_HANDLE,
        Some(None) => crate::NOT_FOUND,
        Some(Some(h)) => status(put(f, h as Handle)),
    }
}

unsafe extern "C" fn cuModuleGetFunctionCount(count: *mut c_uint, module: Handle) -> c_int {
    match with_sim(|s| s.module_functions(module as u64)) {
        Some(fs) => status(put(count, fs.len() as c_uint)),
        None => INVALID_HANDLE,
    }
}

unsafe extern "C" fn cuModuleEnumerateFunctions(out: *mut Handle, count: c_uint, module: Handle) -> c_int {
    let Some(fs) = with_sim(|s| s.module_functions(module as u64)) else { return INVALID_HANDLE };
    if out.is_null() || (count as usize) < fs.len() {
        return INVALID_VALUE;
    }
    for (i, f) in fs.into_iter().enumerate() {
        // SAFETY: `out` holds `count` entries, at least as many as the functions.
        unsafe { out.add(i).write(f as Handle) };
    }
    SUCCESS
}

/// `CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK` is 1024; every other attribute is 0.
unsafe extern "C" fn cuFuncGetAttribute(value: *mut c_int, attribute: c_int, f: Handle) -> c_int {
    if with_sim(|s| s.kernel_of(f as u64)).is_none() {
        return INVALID_HANDLE;
    }
    status(put(value, if attribute == 0 { 1024 } else { 0 }))
}

unsafe extern "C" fn cuFuncGetName(name: *mut *const c_char, f: Handle) -> c_int {
    match with_sim(|s| s.kernel_of(f as u64)) {
        Some(k) => status(put(name, crate::kernels::BUILTINS[k].name.as_ptr())),
        None => INVALID_HANDLE,
    }
}

unsafe extern "C" fn cuFuncGetParamInfo(
    f: Handle,
    index: usize,
    offset: *mut usize,
    size: *mut usize,
) -> c_int {
    let Some(k) = with_sim(|s| s.kernel_of(f as u64)) else { return INVALID_HANDLE };
    let params = crate::kernels::BUILTINS[k].params;
    let Some(&bytes) = params.get(index) else { return INVALID_VALUE };
    let at = params[..index].iter().fold(0, |at: usize, &p| at.next_multiple_of(p) + p);
    status(put(offset, at.next_multiple_of(bytes)) && put(size, bytes))
}

/// Reads the arguments of a launch of function `f` and queues it on `stream`.
unsafe fn launch(call: &'static str, f: Handle, stream: Handle, params: *mut *mut c_void) -> c_int {
    let Some(kernel) = with_sim(|s| s.kernel_of(f as u64)) else { return INVALID_HANDLE };
    let sizes = crate::kernels::BUILTINS[kernel].params;
    if params.is_null() {
        return INVALID_VALUE;
    }
    let mut args = [0u64; crate::kernels::MAX_PARAMS];
    for (i, &size) in sizes.iter().enumerate() {
        // SAFETY: the caller passes one pointer per parameter, each to the parameter's bytes.
        let p = unsafe { *params.add(i) };
        if p.is_null() {
            return INVALID_VALUE;
        }
        let mut bytes = [0u8; 8];
        // SAFETY: `p` points at `size` (4 or 8) readable bytes.
        unsafe { std::ptr::copy_nonoverlapping(p.cast::<u8>(), bytes.as_mut_ptr(), size) };
        args[i] = u64::from_le_bytes(bytes);
    }
    let launch = crate::kernels::Launch { kernel, function: f as u64, args };
    with_sim(|s| {
        let (reads, writes) = launch.ranges(&s.memory);
        s.submit(stream as u64, Work::Kernel(launch), call, &reads, &writes)
    })
}

/// The part of `CUlaunchConfig` the simulator reads (the layout of `cuda.h`).
#[repr(C)]
struct LaunchConfig {
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared_mem_bytes: c_uint,
    stream: Handle,
    attrs: *mut c_void,
    num_attrs: c_uint,
}

unsafe extern "C" fn cuLaunchKernelEx(
    config: *const LaunchConfig,
    f: Handle,
    params: *mut *mut c_void,
    _extra: *mut *mut c_void,
) -> c_int {
    if config.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: the caller passes a valid configuration.
    let config = unsafe { &*config };
    if config.grid.contains(&0) || config.block.contains(&0) {
        return INVALID_VALUE;
    }
    // SAFETY: forwarded.
    unsafe { launch("cuLaunchKernelEx", f, config.stream, params) }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn cuLaunchKernel(
    f: Handle,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    _shared: c_uint,
    stream: Handle,
    params: *mut *mut c_void,
    _extra: *mut *mut c_void,
) -> c_int {
    if [gx, gy, gz, bx, by, bz].contains(&0) {
        return INVALID_VALUE;
    }
    // SAFETY: forwarded.
    unsafe { launch("cuLaunchKernel", f, stream, params) }
}

/// `cuMemGetAllocationGranularity`: [`GRANULARITY`](crate::memory::GRANULARITY), minimum
/// and recommended alike.
unsafe extern "C" fn cuMemGetAllocationGranularity(
    g: *mut usize,
    prop: *const c_void,
    _option: c_int,
) -> c_int {
    status(!prop.is_null() && put(g, crate::memory::GRANULARITY))
}

unsafe extern "C" fn cuMemCreate(h: *mut u64, size: usize, prop: *const c_void, _flags: u64) -> c_int {
    if prop.is_null() || size == 0 || size % crate::memory::GRANULARITY != 0 {
        return INVALID_VALUE;
    }
    if size > TOTAL_MEMORY {
        return OUT_OF_MEMORY;
    }
    let handle = with_sim(|s| s.memory.create_physical(size));
    status(put(h, handle))
}

unsafe extern "C" fn cuMemRelease(h: u64) -> c_int {
    status(with_sim(|s| s.memory.release_physical(h)))
}

unsafe extern "C" fn cuMemAddressReserve(
    ptr: *mut u64,
    size: usize,
    align: usize,
    _addr: u64,
    _flags: u64,
) -> c_int {
    if size == 0 || size % crate::memory::GRANULARITY != 0 || (align != 0 && !align.is_power_of_two()) {
        return INVALID_VALUE;
    }
    let p = with_sim(|s| s.memory.reserve(size as u64, align as u64));
    status(put(ptr, p))
}

unsafe extern "C" fn cuMemAddressFree(ptr: u64, size: usize) -> c_int {
    status(with_sim(|s| s.memory.address_free(ptr, size as u64)))
}

/// Maps physical memory: the addresses have a new owner from now on.
unsafe extern "C" fn cuMemMap(ptr: u64, size: usize, offset: usize, h: u64, _flags: u64) -> c_int {
    if offset != 0 {
        return NOT_SUPPORTED;
    }
    with_sim(|s| {
        if !s.memory.map(ptr, size as u64, h) {
            return INVALID_VALUE;
        }
        s.checker.new_owner(Range::new(ptr, size as u64));
        SUCCESS
    })
}

/// Unmaps at once, as the driver does (it waits for nothing): a release, which every use of
/// the memory must be ordered before.
unsafe extern "C" fn cuMemUnmap(ptr: u64, size: usize) -> c_int {
    with_sim(|s| {
        if !s.memory.unmap(ptr, size as u64) {
            return INVALID_VALUE;
        }
        let host = s.host();
        let at = s.checker.tick(host);
        let site = s.checker.site(host, "cuMemUnmap");
        s.checker.release(at, Range::new(ptr, size as u64), site);
        SUCCESS
    })
}

unsafe extern "C" fn cuMemSetAccess(ptr: u64, size: usize, desc: *const c_void, count: usize) -> c_int {
    status(!desc.is_null() && count > 0 && with_sim(|s| s.memory.is_mapped(ptr, size as u64)))
}

/// Every mapping is readable and writable (`CU_MEM_ACCESS_FLAGS_PROT_READWRITE`).
unsafe extern "C" fn cuMemGetAccess(flags: *mut u64, location: *const c_void, ptr: u64) -> c_int {
    status(!location.is_null() && with_sim(|s| s.memory.is_mapped(ptr, 1)) && put(flags, 3))
}

macro_rules! addr {
    ($f:expr) => {
        $f as *const () as usize
    };
}

/// (name, ABI version, address)
fn implemented() -> Vec<(&'static str, i32, usize)> {
    vec![
        ("cuInit", 2000, addr!(cuInit)),
        ("cuDeviceGetCount", 2000, addr!(cuDeviceGetCount)),
        ("cuDeviceGet", 2000, addr!(cuDeviceGet)),
        ("cuDeviceGetAttribute", 2000, addr!(cuDeviceGetAttribute)),
        ("cuDeviceGetName", 2000, addr!(cuDeviceGetName)),
        ("cuDeviceTotalMem", 3020, addr!(cuDeviceTotalMem)),
        ("cuMemGetInfo", 3020, addr!(cuMemGetInfo)),
        ("cuDevicePrimaryCtxRetain", 7000, addr!(cuDevicePrimaryCtxRetain)),
        ("cuDevicePrimaryCtxRelease", 11000, addr!(cuDevicePrimaryCtxRelease)),
        ("cuDevicePrimaryCtxGetState", 7000, addr!(cuDevicePrimaryCtxGetState)),
        ("cuCtxGetCurrent", 4000, addr!(cuCtxGetCurrent)),
        ("cuCtxSetCurrent", 4000, addr!(cuCtxSetCurrent)),
        ("cuCtxPushCurrent", 4000, addr!(cuCtxPushCurrent)),
        ("cuCtxPopCurrent", 4000, addr!(cuCtxPopCurrent)),
        ("cuCtxGetDevice", 2000, addr!(cuCtxGetDevice)),
        ("cuCtxSynchronize", 2000, addr!(cuCtxSynchronize)),
        ("cuStreamCreate", 2000, addr!(cuStreamCreate)),
        ("cuStreamCreateWithPriority", 5050, addr!(cuStreamCreateWithPriority)),
        ("cuStreamDestroy", 4000, addr!(cuStreamDestroy)),
        ("cuStreamGetCtx", 9020, addr!(cuStreamGetCtx)),
        ("cuStreamGetFlags", 5050, addr!(cuStreamGetFlags)),
        ("cuStreamIsCapturing", 10000, addr!(cuStreamIsCapturing)),
        ("cuStreamGetCaptureInfo", 12030, addr!(cuStreamGetCaptureInfo)),
        ("cuStreamSynchronize", 2000, addr!(cuStreamSynchronize)),
        ("cuStreamQuery", 2000, addr!(cuStreamQuery)),
        ("cuStreamWaitEvent", 3020, addr!(cuStreamWaitEvent)),
        ("cuEventCreate", 2000, addr!(cuEventCreate)),
        ("cuEventDestroy", 4000, addr!(cuEventDestroy)),
        ("cuEventRecord", 2000, addr!(cuEventRecord)),
        ("cuEventRecordWithFlags", 11010, addr!(cuEventRecordWithFlags)),
        ("cuEventSynchronize", 2000, addr!(cuEventSynchronize)),
        ("cuEventQuery", 2000, addr!(cuEventQuery)),
        ("cuMemAlloc", 3020, addr!(cuMemAlloc)),
        ("cuMemFree", 3020, addr!(cuMemFree)),
        ("cuMemAllocAsync", 11020, addr!(cuMemAllocAsync)),
        ("cuMemFreeAsync", 11020, addr!(cuMemFreeAsync)),
        ("cuMemHostAlloc", 2020, addr!(cuMemHostAlloc)),
        ("cuMemFreeHost", 2000, addr!(cuMemFreeHost)),
        ("cuMemHostGetFlags", 2030, addr!(cuMemHostGetFlags)),
        ("cuMemcpyHtoDAsync", 3020, addr!(cuMemcpyHtoDAsync)),
        ("cuMemcpyDtoHAsync", 3020, addr!(cuMemcpyDtoHAsync)),
        ("cuMemcpyDtoDAsync", 3020, addr!(cuMemcpyDtoDAsync)),
        ("cuMemsetD8Async", 3020, addr!(cuMemsetD8Async)),
        ("cuMemsetD16Async", 3020, addr!(cuMemsetD16Async)),
        ("cuMemsetD32Async", 3020, addr!(cuMemsetD32Async)),
        ("cuLaunchHostFunc", 10000, addr!(cuLaunchHostFunc)),
        ("cuModuleLoadData", 2000, addr!(cuModuleLoadData)),
        ("cuModuleLoadDataEx", 2010, addr!(cuModuleLoadDataEx)),
        ("cuModuleUnload", 2000, addr!(cuModuleUnload)),
        ("cuModuleGetFunction", 2000, addr!(cuModuleGetFunction)),
        ("cuModuleGetFunctionCount", 12040, addr!(cuModuleGetFunctionCount)),
        ("cuModuleEnumerateFunctions", 12040, addr!(cuModuleEnumerateFunctions)),
        ("cuFuncGetAttribute", 2020, addr!(cuFuncGetAttribute)),
        ("cuFuncGetName", 12030, addr!(cuFuncGetName)),
        ("cuFuncGetParamInfo", 12040, addr!(cuFuncGetParamInfo)),
        ("cuLaunchKernel", 4000, addr!(cuLaunchKernel)),
        ("cuLaunchKernelEx", 11060, addr!(cuLaunchKernelEx)),
        ("cuMemGetAllocationGranularity", 10020, addr!(cuMemGetAllocationGranularity)),
        ("cuMemCreate", 10020, addr!(cuMemCreate)),
        ("cuMemRelease", 10020, addr!(cuMemRelease)),
        ("cuMemAddressReserve", 10020, addr!(cuMemAddressReserve)),
        ("cuMemAddressFree", 10020, addr!(cuMemAddressFree)),
        ("cuMemMap", 10020, addr!(cuMemMap)),
        ("cuMemUnmap", 10020, addr!(cuMemUnmap)),
        ("cuMemSetAccess", 10020, addr!(cuMemSetAccess)),
        ("cuMemGetAccess", 10020, addr!(cuMemGetAccess)),
        ("cuStreamBeginCapture", 10010, addr!(cuStreamBeginCapture)),
        ("cuStreamEndCapture", 10000, addr!(cuStreamEndCapture)),
        ("cuThreadExchangeStreamCaptureMode", 10010, addr!(cuThreadExchangeStreamCaptureMode)),
        ("cuGraphInstantiateWithParams", 12000, addr!(cuGraphInstantiateWithParams)),
        ("cuGraphLaunch", 10000, addr!(cuGraphLaunch)),
        ("cuGraphDestroy", 10000, addr!(cuGraphDestroy)),
        ("cuGraphExecDestroy", 10000, addr!(cuGraphExecDestroy)),
    ]
}

/// The address of `name` at ABI `version`, if the simulator implements it.
pub(crate) fn address(name: &str, version: i32) -> Option<usize> {
    implemented().into_iter().find(|(n, v, _)| *n == name && *v == version).map(|(_, _, a)| a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_implemented_abi_is_one_the_generated_table_lists_at_or_below_the_driver() {
        for (name, version, _) in implemented() {
            let answer = crate::abi::answer(name, crate::DRIVER_VERSION, false);
            assert_eq!(answer, crate::abi::Answer::Abi(version), "{name} at {version}");
        }
    }
}
