//! The functions the checking driver models: each wrapper calls the real function (looked up
//! at the same ABI, with the same default-stream flag) and, when it succeeds, tells the
//! [`model`] what it did. Releases are told before the call, so that the
//! driver cannot hand the memory out again before the model knows it is gone.

use crate::model::{self, with};
use std::ffi::{c_int, c_uint, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use stream_checker::checker::Range;

type Handle = *mut c_void;

const SUCCESS: c_int = 0;

/// The ranges of a 1D copy or set of `len` bytes at `ptr`.
fn span(ptr: u64, len: usize) -> [Range; 1] {
    [Range::new(ptr, len as u64)]
}

/// Reads an out-parameter the real function wrote.
fn out<T: Copy>(p: *const T) -> Option<T> {
    // SAFETY: written by the real function, which succeeded; null is refused.
    (!p.is_null()).then(|| unsafe { *p })
}

/// The calling thread's current context (0 when none), from the real driver.
pub(crate) fn current_context() -> u64 {
    static GET: OnceLock<Option<usize>> = OnceLock::new();
    let Some(get) = *GET.get_or_init(|| crate::real::driver()?.function(c"cuCtxGetCurrent", 4000)) else {
        return 0;
    };
    // SAFETY: `cuCtxGetCurrent` at ABI 4000 has this signature.
    let get: unsafe extern "C" fn(*mut Handle) -> c_int = unsafe { std::mem::transmute(get) };
    let mut ctx = std::ptr::null_mut();
    // SAFETY: one live out-pointer.
    unsafe { get(&mut ctx) };
    ctx as u64
}

/// The parameter layout of kernel `f`: (offset, size) of each parameter, from the real
/// `cuFuncGetParamInfo` (12.4 and later); `None` when the driver cannot tell it.
fn params(f: u64) -> Option<Vec<(usize, usize)>> {
    if let Some(known) = with(|m| m.params.get(&f).cloned()) {
        return known;
    }
    static GET: OnceLock<Option<usize>> = OnceLock::new();
    let layout =
        GET.get_or_init(|| crate::real::driver()?.function(c"cuFuncGetParamInfo", 12040)).and_then(|get| {
            // SAFETY: `cuFuncGetParamInfo` at ABI 12040 has this signature.
            let get: unsafe extern "C" fn(Handle, usize, *mut usize, *mut usize) -> c_int =
                unsafe { std::mem::transmute(get) };
            let mut layout = Vec::new();
            loop {
                let (mut offset, mut size) = (0, 0);
                // SAFETY: live out-pointers; an index past the last parameter is an error.
                if unsafe { get(f as Handle, layout.len(), &mut offset, &mut size) } != SUCCESS {
                    break;
                }
                layout.push((offset, size));
            }
            (!layout.is_empty()).then_some(layout)
        });
    with(|m| m.params.insert(f, layout.clone()));
    layout
}

/// `CU_LAUNCH_PARAM_BUFFER_POINTER` and `_SIZE`, keys of the `extra` array.
const BUFFER_POINTER: usize = 1;
const BUFFER_SIZE: usize = 2;

/// The 8-byte arguments of a launch of `f` (from `params`, or the `extra` buffer).
fn arguments(f: Handle, params: *mut *mut c_void, extra: *mut *mut c_void) -> Option<Vec<u64>> {
    let layout = self::params(f as u64)?;
    let read = |p: *const u8| {
        let mut bytes = [0u8; 8];
        // SAFETY: the caller of the launch passes 8 readable bytes for an 8-byte parameter.
        unsafe { std::ptr::copy_nonoverlapping(p, bytes.as_mut_ptr(), 8) };
        u64::from_ne_bytes(bytes)
    };
    if !params.is_null() {
        let values = layout.iter().enumerate().filter(|(_, (_, size))| *size == 8).filter_map(|(i, _)| {
            // SAFETY: one pointer per parameter, as the launch's contract requires.
            let p = unsafe { *params.add(i) };
            (!p.is_null()).then(|| read(p.cast()))
        });
        return Some(values.collect());
    }
    if extra.is_null() {
        return Some(Vec::new());
    }
    let (mut buffer, mut len) = (std::ptr::null::<u8>(), 0usize);
    let mut i = 0;
    loop {
        // SAFETY: `extra` is a list of key/value pairs ending with a null key.
        let key = unsafe { *extra.add(i) } as usize;
        match key {
            0 => break,
            // SAFETY: as above; the value follows its key.
            BUFFER_POINTER => buffer = unsafe { *extra.add(i + 1) }.cast(),
            // SAFETY: as above; the value points at the buffer's size.
            BUFFER_SIZE => len = unsafe { *(*extra.add(i + 1)).cast::<usize>() },
            _ => {}
        }
        i += 2;
    }
    if buffer.is_null() {
        return Some(Vec::new());
    }
    let values =
        layout.iter().filter(|(offset, size)| *size == 8 && offset + 8 <= len).map(|&(offset, _)| {
            // SAFETY: inside the argument buffer of `len` bytes.
            read(unsafe { buffer.add(offset) })
        });
    Some(values.collect())
}

/// Tells the model of a launch of `f` on `stream`.
fn launched(
    call: &'static str,
    f: Handle,
    stream: Handle,
    pt: bool,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    read_only: &[u64],
) {
    let values = arguments(f, params, extra);
    with(|m| {
        let (mut reads, mut writes) = (Vec::new(), Vec::new());
        match &values {
            Some(values) => {
                for &v in values {
                    let Some(range) = m.argument_range(v) else { continue };
                    reads.push(range);
                    if !read_only.contains(&v) {
                        writes.push(range);
                    }
                }
            }
            None => m.unmodelled(format!("{call} of a kernel whose parameters the driver does not describe")),
        }
        m.queued(stream as u64, pt, call, &reads, &writes)
    });
}

thread_local! {
    /// The arguments the program said its next launch on this thread only reads; taken (and so
    /// cleared) by every launch before it reaches the real driver, whether that makes it or not.
    static READ_ONLY: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The arguments the launch being made only reads (see [`READ_ONLY`]).
fn take_read_only() -> Vec<u64> {
    READ_ONLY.with(std::cell::RefCell::take)
}

/// The `launch_reads` hook: the next launch on this thread only reads the memory at `ptr`.
pub extern "C" fn launch_reads_hook(ptr: u64) {
    READ_ONLY.with(|r| r.borrow_mut().push(ptr));
}

/// The part of `CUlaunchConfig` read here (the layout of `cuda.h`).
#[repr(C)]
pub struct LaunchConfig {
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared_mem_bytes: c_uint,
    stream: Handle,
    attrs: *mut c_void,
    num_attrs: c_uint,
}

/// The name a wrapper is looked up by: its own, or the one given with `as`.
macro_rules! symbol_of {
    ($name:ident) => {
        stringify!($name)
    };
    ($name:ident $symbol:literal) => {
        $symbol
    };
}

macro_rules! wrappers {
    ($( $name:ident $(as $symbol:literal)? $version:literal ( $($arg:ident : $ty:ty),* ) |$real:ident, $pt:ident| $body:block )*) => {
        $(
            #[allow(non_snake_case, non_upper_case_globals)]
            mod $name {
                pub static REAL: [super::AtomicUsize; 2] = [super::AtomicUsize::new(0), super::AtomicUsize::new(0)];
            }
            #[allow(non_snake_case, unused_variables)]
            unsafe extern "C" fn $name<const PT: bool>($($arg: $ty),*) -> c_int {
                let addr = $name::REAL[usize::from(PT)].load(Ordering::Acquire);
                // SAFETY: stored by `wrap` from the real driver's answer for this function at
                // this ABI, before this wrapper was handed out.
                let $real: unsafe extern "C" fn($($ty),*) -> c_int = unsafe { std::mem::transmute(addr) };
                let $pt = PT;
                $body
            }
        )*

        /// (name, ABI version, the wrappers for the legacy and the per-thread default stream,
        /// the real functions' slots).
        fn table() -> &'static [(&'static str, i32, [usize; 2], &'static [AtomicUsize; 2])] {
            static TABLE: OnceLock<Vec<(&'static str, i32, [usize; 2], &'static [AtomicUsize; 2])>> = OnceLock::new();
            TABLE.get_or_init(|| vec![$(
                (
                    symbol_of!($name $($symbol)?),
                    $version,
                    [$name::<false> as *const () as usize, $name::<true> as *const () as usize],
                    &$name::REAL,
                ),
            )*])
        }
    };
}

/// The wrapper of `name` at ABI `abi` (for the per-thread default stream when `per_thread`),
/// which calls `real`; `None` when the function is not modelled at that ABI.
pub fn wrap(name: &str, abi: i32, per_thread: bool, real: usize) -> Option<usize> {
    let (_, _, wrappers, slots) = table().iter().find(|(n, v, _, _)| *n == name && *v == abi)?;
    let per_thread =
        per_thread && crate::abi::table().iter().any(|e| e.symbol == name && e.per_thread_version != 0);
    let i = usize::from(per_thread);
    slots[i].store(real, Ordering::Release);
    model::start();
    Some(wrappers[i])
}

/// The names and ABI versions modelled.
pub fn modelled() -> Vec<(&'static str, i32)> {
    table().iter().map(|(n, v, _, _)| (*n, *v)).collect()
}

wrappers! {
    cuMemAlloc 3020 (dptr: *mut u64, size: usize) |real, pt| {
        // SAFETY: the caller's arguments, forwarded.
        let s = unsafe { real(dptr, size) };
        if let (SUCCESS, Some(p)) = (s, out(dptr)) { with(|m| m.allocated(p, size as u64, None)) }
        s
    }
    cuMemAllocPitch 3020 (dptr: *mut u64, pitch: *mut usize, width: usize, height: usize, elem: c_uint) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(dptr, pitch, width, height, elem) };
        if let (SUCCESS, Some(p), Some(pitch)) = (s, out(dptr), out(pitch)) {
            with(|m| m.allocated(p, (pitch * height) as u64, None))
        }
        s
    }
    cuMemAllocManaged 6000 (dptr: *mut u64, size: usize, flags: c_uint) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(dptr, size, flags) };
        if let (SUCCESS, Some(p)) = (s, out(dptr)) { with(|m| m.allocated(p, size as u64, None)) }
        s
    }
    cuMemHostAlloc 2020 (pp: *mut *mut c_void, size: usize, flags: c_uint) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(pp, size, flags) };
        if let (SUCCESS, Some(p)) = (s, out(pp)) { with(|m| m.allocated(p as u64, size as u64, None)) }
        s
    }
    cuMemAllocHost 3020 (pp: *mut *mut c_void, size: usize) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(pp, size) };
        if let (SUCCESS, Some(p)) = (s, out(pp)) { with(|m| m.allocated(p as u64, size as u64, None)) }
        s
    }
    cuMemAllocAsync 11020 (dptr: *mut u64, size: usize, stream: Handle) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(dptr, size, stream) };
        if let (SUCCESS, Some(p)) = (s, out(dptr)) { with(|m| m.allocated(p, size as u64, Some((stream as u64, pt)))) }
        s
    }
    cuMemAllocFromPoolAsync 11020 (dptr: *mut u64, size: usize, pool: Handle, stream: Handle) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(dptr, size, pool, stream) };
        if let (SUCCESS, Some(p)) = (s, out(dptr)) { with(|m| m.allocated(p, size as u64, Some((stream as u64, pt)))) }
        s
    }
    cuMemFree 3020 (ptr: u64) |real, pt| {
        with(|m| m.freed_synchronously(ptr));
        // SAFETY: forwarded.
        unsafe { real(ptr) }
    }
    cuMemFreeHost 2000 (p: *mut c_void) |real, pt| {
        with(|m| m.released_by_host(p as u64, None, "cuMemFreeHost"));
        // SAFETY: forwarded.
        unsafe { real(p) }
    }
    cuMemFreeAsync 11020 (ptr: u64, stream: Handle) |real, pt| {
        with(|m| m.freed_async(ptr, stream as u64, pt));
        // SAFETY: forwarded.
        unsafe { real(ptr, stream) }
    }
    cuMemMap 10020 (ptr: u64, size: usize, offset: usize, handle: u64, flags: u64) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(ptr, size, offset, handle, flags) };
        if s == SUCCESS { with(|m| m.allocated(ptr, size as u64, None)) }
        s
    }
    cuMemUnmap 10020 (ptr: u64, size: usize) |real, pt| {
        with(|m| m.released_by_host(ptr, Some(size as u64), "cuMemUnmap"));
        // SAFETY: forwarded.
        unsafe { real(ptr, size) }
    }
    cuMemcpyAsync 4000 (dst: u64, src: u64, n: usize, stream: Handle) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(dst, src, n, stream) };
        if s == SUCCESS { with(|m| m.queued(stream as u64, pt, "cuMemcpyAsync", &span(src, n), &span(dst, n))) }
        s
    }
    cuMemcpyHtoDAsync 3020 (dst: u64, src: *const c_void, n: usize, stream: Handle) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(dst, src, n, stream) };
        if s == SUCCESS { with(|m| m.queued(stream as u64, pt, "cuMemcpyHtoDAsync", &span(src as u64, n), &span(dst, n))) }
        s
    }
    cuMemcpyDtoHAsync 3020 (dst: *mut c_void, src: u64, n: usize, stream: Handle) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(dst, src, n, stream) };
        if s == SUCCESS { with(|m| m.queued(stream as u64, pt, "cuMemcpyDtoHAsync", &span(src, n), &span(dst as u64, n))) }
        s
    }
    cuMemcpyDtoDAsync 3020 (dst: u64, src: u64, n: usize, stream: Handle) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(dst, src, n, stream) };
        if s == SUCCESS { with(|m| m.queued(stream as u64, pt, "cuMemcpyDtoDAsync", &span(src, n), &span(dst, n))) }
        s
    }
    cuMemcpyPeerAsync 4000 (dst: u64, dctx: Handle, src: u64, sctx: Handle, n: usize, stream: Handle) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(dst, dctx, src, sctx, n, stream) };
        if s == SUCCESS { with(|m| m.queued(stream as u64, pt, "cuMemcpyPeerAsync", &span(src, n), &span(dst, n))) }
        s
    }
    cuMemcpy 4000 (dst: u64, src: u64, n: usize) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(dst, src, n) };
        if s == SUCCESS { with(|m| m.queued_and_waited(pt, "cuMemcpy", &span(src, n), &span(dst, n))) }
        s
    }
    cuMemcpyHtoD 3020 (dst: u64, src: *const c_void, n: usize) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(dst, src, n) };
        if s == SUCCESS { with(|m| m.queued_and_waited(pt, "cuMemcpyHtoD", &span(src as u64, n), &span(dst, n))) }
        s
    }
    cuMemcpyDtoH 3020 (dst: *mut c_void, src: u64, n: usize) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(dst, src, n) };
        if s == SUCCESS { with(|m| m.queued_and_waited(pt, "cuMemcpyDtoH", &span(src, n), &span(dst as u64, n))) }
        s
    }
    cuMemcpyDtoD 3020 (dst: u64, src: u64, n: usize) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(dst, src, n) };
        if s == SUCCESS { with(|m| m.queued_and_waited(pt, "cuMemcpyDtoD", &span(src, n), &span(dst, n))) }
        s
    }
    cuMemcpyPeer 4000 (dst: u64, dctx: Handle, src: u64, sctx: Handle, n: usize) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(dst, dctx, src, sctx, n) };
        if s == SUCCESS { with(|m| m.queued_and_waited(pt, "cuMemcpyPeer", &span(src, n), &span(dst, n))) }
        s
    }
    cuMemsetD8 3020 (dst: u64, v: u8, n: usize) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(dst, v, n) };
        if s == SUCCESS { with(|m| m.queued(0, pt, "cuMemsetD8", &[], &span(dst, n))) }
        s
    }
    cuMemsetD16 3020 (dst: u64, v: u16, n: usize) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(dst, v, n) };
        if s == SUCCESS { with(|m| m.queued(0, pt, "cuMemsetD16", &[], &span(dst, n * 2))) }
        s
    }
    cuMemsetD32 3020 (dst: u64, v: u32, n: usize) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(dst, v, n) };
        if s == SUCCESS { with(|m| m.queued(0, pt, "cuMemsetD32", &[], &span(dst, n * 4))) }
        s
    }
    cuMemsetD8Async 3020 (dst: u64, v: u8, n: usize, stream: Handle) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(dst, v, n, stream) };
        if s == SUCCESS { with(|m| m.queued(stream as u64, pt, "cuMemsetD8Async", &[], &span(dst, n))) }
        s
    }
    cuMemsetD16Async 3020 (dst: u64, v: u16, n: usize, stream: Handle) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(dst, v, n, stream) };
        if s == SUCCESS { with(|m| m.queued(stream as u64, pt, "cuMemsetD16Async", &[], &span(dst, n * 2))) }
        s
    }
    cuMemsetD32Async 3020 (dst: u64, v: u32, n: usize, stream: Handle) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(dst, v, n, stream) };
        if s == SUCCESS { with(|m| m.queued(stream as u64, pt, "cuMemsetD32Async", &[], &span(dst, n * 4))) }
        s
    }
    cuLaunchKernel 4000 (f: Handle, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, stream: Handle, params: *mut *mut c_void, extra: *mut *mut c_void) |real, pt| {
        let read_only = take_read_only();
        // SAFETY: forwarded.
        let s = unsafe { real(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra) };
        if s == SUCCESS { launched("cuLaunchKernel", f, stream, pt, params, extra, &read_only) }
        s
    }
    cuLaunchCooperativeKernel 9000 (f: Handle, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, stream: Handle, params: *mut *mut c_void) |real, pt| {
        let read_only = take_read_only();
        // SAFETY: forwarded.
        let s = unsafe { real(f, gx, gy, gz, bx, by, bz, shared, stream, params) };
        if s == SUCCESS { launched("cuLaunchCooperativeKernel", f, stream, pt, params, std::ptr::null_mut(), &read_only) }
        s
    }
    cuLaunchKernelEx 11060 (config: *const LaunchConfig, f: Handle, params: *mut *mut c_void, extra: *mut *mut c_void) |real, pt| {
        let read_only = take_read_only();
        // SAFETY: forwarded.
        let s = unsafe { real(config, f, params, extra) };
        if s == SUCCESS && !config.is_null() {
            // SAFETY: the configuration the real call read.
            let stream = unsafe { (*config).stream };
            launched("cuLaunchKernelEx", f, stream, pt, params, extra, &read_only)
        }
        s
    }
    cuLaunchHostFunc 10000 (stream: Handle, f: Handle, data: *mut c_void) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(stream, f, data) };
        if s == SUCCESS { with(|m| m.queued(stream as u64, pt, "cuLaunchHostFunc", &[], &[])) }
        s
    }
    cuEventRecord 2000 (event: Handle, stream: Handle) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(event, stream) };
        if s == SUCCESS { with(|m| m.event_recorded(event as u64, stream as u64, pt)) }
        s
    }
    cuEventRecordWithFlags 11010 (event: Handle, stream: Handle, flags: c_uint) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(event, stream, flags) };
        if s == SUCCESS { with(|m| m.event_recorded(event as u64, stream as u64, pt)) }
        s
    }
    cuStreamWaitEvent 3020 (stream: Handle, event: Handle, flags: c_uint) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(stream, event, flags) };
        if s == SUCCESS { with(|m| m.event_waited(stream as u64, pt, event as u64)) }
        s
    }
    cuEventSynchronize 2000 (event: Handle) |real, pt| {
        let before = with(|m| m.event_clock(event as u64));
        // SAFETY: forwarded.
        let s = unsafe { real(event) };
        if let (SUCCESS, Some(clock)) = (s, before) { with(|m| m.host_saw(&clock)) }
        s
    }
    cuEventQuery 2000 (event: Handle) |real, pt| {
        let before = with(|m| m.event_clock(event as u64));
        // SAFETY: forwarded.
        let s = unsafe { real(event) };
        if let (SUCCESS, Some(clock)) = (s, before) { with(|m| m.host_saw(&clock)) }
        s
    }
    cuStreamSynchronize 2000 (stream: Handle) |real, pt| {
        let before = with(|m| m.stream_clock(stream as u64, pt));
        // SAFETY: forwarded.
        let s = unsafe { real(stream) };
        if let (SUCCESS, Some(clock)) = (s, before) { with(|m| m.host_saw(&clock)) }
        s
    }
    cuStreamQuery 2000 (stream: Handle) |real, pt| {
        let before = with(|m| m.stream_clock(stream as u64, pt));
        // SAFETY: forwarded.
        let s = unsafe { real(stream) };
        if let (SUCCESS, Some(clock)) = (s, before) { with(|m| m.host_saw(&clock)) }
        s
    }
    cuCtxSynchronize 2000 () |real, pt| {
        let before = model::everything_now();
        // SAFETY: forwarded.
        let s = unsafe { real() };
        if s == SUCCESS { with(|m| m.device_waited(&before)) }
        s
    }
    cuCtxSynchronize_v13000 as "cuCtxSynchronize" 13000 (ctx: Handle) |real, pt| {
        let before = model::everything_now();
        // SAFETY: forwarded.
        let s = unsafe { real(ctx) };
        if s == SUCCESS { with(|m| m.device_waited(&before)) }
        s
    }
    cuCtxDestroy 4000 (ctx: Handle) |real, pt| {
        let before = model::everything_now();
        // SAFETY: forwarded.
        let s = unsafe { real(ctx) };
        if s == SUCCESS { with(|m| m.device_waited(&before)) }
        s
    }
    cuDevicePrimaryCtxReset 11000 (dev: c_int) |real, pt| {
        let before = model::everything_now();
        // SAFETY: forwarded.
        let s = unsafe { real(dev) };
        if s == SUCCESS { with(|m| m.device_waited(&before)) }
        s
    }
    cuStreamCreate 2000 (ps: *mut Handle, flags: c_uint) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(ps, flags) };
        if let (SUCCESS, Some(h)) = (s, out(ps)) { with(|m| m.stream_created(h as u64, flags & 1 == 0)) }
        s
    }
    cuStreamCreateWithPriority 5050 (ps: *mut Handle, flags: c_uint, priority: c_int) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(ps, flags, priority) };
        if let (SUCCESS, Some(h)) = (s, out(ps)) { with(|m| m.stream_created(h as u64, flags & 1 == 0)) }
        s
    }
    cuStreamDestroy 4000 (stream: Handle) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(stream) };
        if s == SUCCESS { with(|m| m.stream_destroyed(stream as u64)) }
        s
    }
    cuStreamBeginCapture 10010 (stream: Handle, mode: c_uint) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(stream, mode) };
        if s == SUCCESS { with(|m| m.capture_began(stream as u64, pt)) }
        s
    }
    cuStreamEndCapture 10000 (stream: Handle, graph: *mut Handle) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(stream, graph) };
        let made = if s == SUCCESS { out(graph).map_or(0, |g| g as u64) } else { 0 };
        with(|m| m.capture_ended(stream as u64, pt, made));
        s
    }
    cuGraphInstantiateWithFlags 11040 (exec: *mut Handle, graph: Handle, flags: u64) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(exec, graph, flags) };
        if let (SUCCESS, Some(e)) = (s, out(exec)) { with(|m| m.instantiated(graph as u64, e as u64)) }
        s
    }
    cuGraphInstantiateWithParams 12000 (exec: *mut Handle, graph: Handle, params: *mut c_void) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(exec, graph, params) };
        if let (SUCCESS, Some(e)) = (s, out(exec)) { with(|m| m.instantiated(graph as u64, e as u64)) }
        s
    }
    cuGraphLaunch 10000 (exec: Handle, stream: Handle) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(exec, stream) };
        if s == SUCCESS { with(|m| m.graph_launched(exec as u64, stream as u64, pt)) }
        s
    }
    cuGraphExecDestroy 10000 (exec: Handle) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(exec) };
        if s == SUCCESS { with(|m| m.graph_destroyed(exec as u64)) }
        s
    }
    cuGraphDestroy 10000 (graph: Handle) |real, pt| {
        // SAFETY: forwarded.
        let s = unsafe { real(graph) };
        if s == SUCCESS { with(|m| m.graph_destroyed(graph as u64)) }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_modelled_function_is_an_abi_of_the_generated_table() {
        for (name, version) in modelled() {
            let listed = crate::abi::table().iter().any(|e| e.symbol == name && e.version == version);
            assert!(listed, "{name} at {version}");
        }
    }
}
