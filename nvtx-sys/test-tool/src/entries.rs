//! The recording implementation of every NVTX function, and which slot each one goes in.

use crate::log::{ascii, attributes, handle, handle_name, line, message, wide};
use core::cell::Cell;
use core::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};

type Str = *const c_char;
type WStr = *const i32;
type Ptr = *mut c_void;

thread_local! {
    static DEPTH: Cell<c_int> = const { Cell::new(0) };
}

/// Range ids use the high 32 bits, so a loader that truncated them to 32 would be caught.
static NEXT_RANGE_ID: AtomicU64 = AtomicU64::new(0xDEAD_BEEF_0000_0001);

fn push() -> c_int {
    DEPTH.with(|d| {
        let level = d.get();
        d.set(level + 1);
        level
    })
}

fn pop() -> c_int {
    DEPTH.with(|d| {
        let level = d.get() - 1;
        d.set(level.max(0));
        level
    })
}

fn start(what: String) -> u64 {
    let id = NEXT_RANGE_ID.fetch_add(1, Ordering::SeqCst);
    line(format!("{what} -> {id:#x}"));
    id
}

fn domain(d: Ptr) -> String {
    // SAFETY: domains are handles this tool returned, or null for the default domain.
    if d.is_null() { "default".into() } else { unsafe { handle_name(d) } }
}

// Every function below is called by the NVTX loader with the arguments its C signature names;
// the pointers are NVTX's (strings, attributes) or handles this tool returned.

unsafe extern "C" fn mark_ex(a: *const c_void) {
    line(format!("CORE.MarkEx {}", unsafe { attributes(a) }));
}
unsafe extern "C" fn mark_a(m: Str) {
    line(format!("CORE.MarkA {}", unsafe { ascii(m) }));
}
unsafe extern "C" fn mark_w(m: WStr) {
    line(format!("CORE.MarkW {}", unsafe { wide(m) }));
}
unsafe extern "C" fn range_start_ex(a: *const c_void) -> u64 {
    start(format!("CORE.RangeStartEx {}", unsafe { attributes(a) }))
}
unsafe extern "C" fn range_start_a(m: Str) -> u64 {
    start(format!("CORE.RangeStartA {}", unsafe { ascii(m) }))
}
unsafe extern "C" fn range_start_w(m: WStr) -> u64 {
    start(format!("CORE.RangeStartW {}", unsafe { wide(m) }))
}
unsafe extern "C" fn range_end(id: u64) {
    line(format!("CORE.RangeEnd {id:#x}"));
}
unsafe extern "C" fn range_push_ex(a: *const c_void) -> c_int {
    line(format!("CORE.RangePushEx {}", unsafe { attributes(a) }));
    push()
}
unsafe extern "C" fn range_push_a(m: Str) -> c_int {
    line(format!("CORE.RangePushA {}", unsafe { ascii(m) }));
    push()
}
unsafe extern "C" fn range_pop() -> c_int {
    line("CORE.RangePop".into());
    pop()
}
unsafe extern "C" fn name_category_a(c: u32, m: Str) {
    line(format!("CORE.NameCategoryA {c} {}", unsafe { ascii(m) }));
}
unsafe extern "C" fn name_category_w(c: u32, m: WStr) {
    line(format!("CORE.NameCategoryW {c} {}", unsafe { wide(m) }));
}
unsafe extern "C" fn name_os_thread_a(t: u32, m: Str) {
    line(format!("CORE.NameOsThreadA {t} {}", unsafe { ascii(m) }));
}
unsafe extern "C" fn name_os_thread_w(t: u32, m: WStr) {
    line(format!("CORE.NameOsThreadW {t} {}", unsafe { wide(m) }));
}

unsafe extern "C" fn name_cu_device_a(d: c_int, m: Str) {
    line(format!("CUDA.NameCuDeviceA {d} {}", unsafe { ascii(m) }));
}
unsafe extern "C" fn name_cu_device_w(d: c_int, m: WStr) {
    line(format!("CUDA.NameCuDeviceW {d} {}", unsafe { wide(m) }));
}
unsafe extern "C" fn name_cu_context_a(h: Ptr, m: Str) {
    line(format!("CUDA.NameCuContextA {h:p} {}", unsafe { ascii(m) }));
}
unsafe extern "C" fn name_cu_context_w(h: Ptr, m: WStr) {
    line(format!("CUDA.NameCuContextW {h:p} {}", unsafe { wide(m) }));
}
unsafe extern "C" fn name_cu_stream_a(h: Ptr, m: Str) {
    line(format!("CUDA.NameCuStreamA {h:p} {}", unsafe { ascii(m) }));
}
unsafe extern "C" fn name_cu_stream_w(h: Ptr, m: WStr) {
    line(format!("CUDA.NameCuStreamW {h:p} {}", unsafe { wide(m) }));
}
unsafe extern "C" fn name_cu_event_a(h: Ptr, m: Str) {
    line(format!("CUDA.NameCuEventA {h:p} {}", unsafe { ascii(m) }));
}
unsafe extern "C" fn name_cu_event_w(h: Ptr, m: WStr) {
    line(format!("CUDA.NameCuEventW {h:p} {}", unsafe { wide(m) }));
}

unsafe extern "C" fn name_cuda_device_a(d: c_int, m: Str) {
    line(format!("CUDART.NameCudaDeviceA {d} {}", unsafe { ascii(m) }));
}
unsafe extern "C" fn name_cuda_device_w(d: c_int, m: WStr) {
    line(format!("CUDART.NameCudaDeviceW {d} {}", unsafe { wide(m) }));
}
unsafe extern "C" fn name_cuda_stream_a(h: Ptr, m: Str) {
    line(format!("CUDART.NameCudaStreamA {h:p} {}", unsafe { ascii(m) }));
}
unsafe extern "C" fn name_cuda_stream_w(h: Ptr, m: WStr) {
    line(format!("CUDART.NameCudaStreamW {h:p} {}", unsafe { wide(m) }));
}
unsafe extern "C" fn name_cuda_event_a(h: Ptr, m: Str) {
    line(format!("CUDART.NameCudaEventA {h:p} {}", unsafe { ascii(m) }));
}
unsafe extern "C" fn name_cuda_event_w(h: Ptr, m: WStr) {
    line(format!("CUDART.NameCudaEventW {h:p} {}", unsafe { wide(m) }));
}

unsafe extern "C" fn domain_mark_ex(d: Ptr, a: *const c_void) {
    line(format!("CORE2.DomainMarkEx {} {}", domain(d), unsafe { attributes(a) }));
}
unsafe extern "C" fn domain_range_start_ex(d: Ptr, a: *const c_void) -> u64 {
    start(format!("CORE2.DomainRangeStartEx {} {}", domain(d), unsafe { attributes(a) }))
}
unsafe extern "C" fn domain_range_end(d: Ptr, id: u64) {
    line(format!("CORE2.DomainRangeEnd {} {id:#x}", domain(d)));
}
unsafe extern "C" fn domain_range_push_ex(d: Ptr, a: *const c_void) -> c_int {
    line(format!("CORE2.DomainRangePushEx {} {}", domain(d), unsafe { attributes(a) }));
    push()
}
unsafe extern "C" fn domain_range_pop(d: Ptr) -> c_int {
    line(format!("CORE2.DomainRangePop {}", domain(d)));
    pop()
}
/// `nvtxResourceAttributes_t`: version u16, size u16, identifierType i32 @4, identifier @8,
/// messageType i32 @16, message @24.
unsafe extern "C" fn domain_resource_create(d: Ptr, a: *const c_void) -> Ptr {
    if a.is_null() {
        line(format!("CORE2.DomainResourceCreate {} attr=null", domain(d)));
        return core::ptr::null_mut();
    }
    let b = a.cast::<u8>();
    // SAFETY: a 32-byte `nvtxResourceAttributes_t`.
    let (kind, id, mtype, mvalue) = unsafe {
        (
            b.add(4).cast::<i32>().read_unaligned(),
            b.add(8).cast::<u64>().read_unaligned(),
            b.add(16).cast::<i32>().read_unaligned(),
            b.add(24).cast::<*const c_void>().read_unaligned(),
        )
    };
    let text = unsafe { message(mtype, mvalue) };
    line(format!("CORE2.DomainResourceCreate {} type={kind:#x} id={id:#x} message={text}", domain(d)));
    handle(format!("resource {text}"))
}
unsafe extern "C" fn domain_resource_destroy(r: Ptr) {
    line(format!("CORE2.DomainResourceDestroy {}", unsafe { handle_name(r) }));
}
unsafe extern "C" fn domain_name_category_a(d: Ptr, c: u32, m: Str) {
    line(format!("CORE2.DomainNameCategoryA {} {c} {}", domain(d), unsafe { ascii(m) }));
}
unsafe extern "C" fn domain_name_category_w(d: Ptr, c: u32, m: WStr) {
    line(format!("CORE2.DomainNameCategoryW {} {c} {}", domain(d), unsafe { wide(m) }));
}
unsafe extern "C" fn domain_register_string_a(d: Ptr, m: Str) -> Ptr {
    let text = unsafe { ascii(m) };
    line(format!("CORE2.DomainRegisterStringA {} {text}", domain(d)));
    handle(format!("string {text}"))
}
unsafe extern "C" fn domain_register_string_w(d: Ptr, m: WStr) -> Ptr {
    let text = unsafe { wide(m) };
    line(format!("CORE2.DomainRegisterStringW {} {text}", domain(d)));
    handle(format!("string {text}"))
}
unsafe extern "C" fn domain_create_a(m: Str) -> Ptr {
    let text = unsafe { ascii(m) };
    line(format!("CORE2.DomainCreateA {text}"));
    handle(format!("domain {text}"))
}
unsafe extern "C" fn domain_create_w(m: WStr) -> Ptr {
    let text = unsafe { wide(m) };
    line(format!("CORE2.DomainCreateW {text}"));
    handle(format!("domain {text}"))
}
unsafe extern "C" fn domain_destroy(d: Ptr) {
    line(format!("CORE2.DomainDestroy {}", domain(d)));
}
unsafe extern "C" fn initialize(reserved: *const c_void) {
    line(format!("CORE2.Initialize {reserved:p}"));
}

/// `nvtxSyncUserAttributes_t`: version u16, size u16, messageType i32 @4, message @8.
unsafe extern "C" fn sync_user_create(d: Ptr, a: *const c_void) -> Ptr {
    if a.is_null() {
        line(format!("SYNC.SyncUserCreate {} attr=null", domain(d)));
        return core::ptr::null_mut();
    }
    let b = a.cast::<u8>();
    // SAFETY: a 16-byte `nvtxSyncUserAttributes_t`.
    let (size, mtype, mvalue) = unsafe {
        (
            b.add(2).cast::<u16>().read_unaligned(),
            b.add(4).cast::<i32>().read_unaligned(),
            b.add(8).cast::<*const c_void>().read_unaligned(),
        )
    };
    let text = unsafe { message(mtype, mvalue) };
    line(format!("SYNC.SyncUserCreate {} size={size} message={text}", domain(d)));
    handle(format!("sync {text}"))
}
unsafe extern "C" fn sync_user_destroy(h: Ptr) {
    line(format!("SYNC.SyncUserDestroy {}", unsafe { handle_name(h) }));
}
unsafe extern "C" fn sync_user_acquire_start(h: Ptr) {
    line(format!("SYNC.SyncUserAcquireStart {}", unsafe { handle_name(h) }));
}
unsafe extern "C" fn sync_user_acquire_failed(h: Ptr) {
    line(format!("SYNC.SyncUserAcquireFailed {}", unsafe { handle_name(h) }));
}
unsafe extern "C" fn sync_user_acquire_success(h: Ptr) {
    line(format!("SYNC.SyncUserAcquireSuccess {}", unsafe { handle_name(h) }));
}
unsafe extern "C" fn sync_user_releasing(h: Ptr) {
    line(format!("SYNC.SyncUserReleasing {}", unsafe { handle_name(h) }));
}

/// (function id, address) of every function this tool implements in `module`.
/// `nvtxRangePushW` (CORE 10) is left out on purpose: the loader must make it a no-op.
pub(crate) fn for_module(module: u32) -> Vec<(usize, usize)> {
    macro_rules! ids {
        ($($id:literal => $f:expr),* $(,)?) => { vec![$(($id, $f as usize)),*] };
    }
    match module {
        1 => ids![
            1 => mark_ex as unsafe extern "C" fn(_), 2 => mark_a as unsafe extern "C" fn(_),
            3 => mark_w as unsafe extern "C" fn(_), 4 => range_start_ex as unsafe extern "C" fn(_) -> _,
            5 => range_start_a as unsafe extern "C" fn(_) -> _, 6 => range_start_w as unsafe extern "C" fn(_) -> _,
            7 => range_end as unsafe extern "C" fn(_), 8 => range_push_ex as unsafe extern "C" fn(_) -> _,
            9 => range_push_a as unsafe extern "C" fn(_) -> _, 11 => range_pop as unsafe extern "C" fn() -> _,
            12 => name_category_a as unsafe extern "C" fn(_, _), 13 => name_category_w as unsafe extern "C" fn(_, _),
            14 => name_os_thread_a as unsafe extern "C" fn(_, _), 15 => name_os_thread_w as unsafe extern "C" fn(_, _),
        ],
        2 => ids![
            1 => name_cu_device_a as unsafe extern "C" fn(_, _), 2 => name_cu_device_w as unsafe extern "C" fn(_, _),
            3 => name_cu_context_a as unsafe extern "C" fn(_, _), 4 => name_cu_context_w as unsafe extern "C" fn(_, _),
            5 => name_cu_stream_a as unsafe extern "C" fn(_, _), 6 => name_cu_stream_w as unsafe extern "C" fn(_, _),
            7 => name_cu_event_a as unsafe extern "C" fn(_, _), 8 => name_cu_event_w as unsafe extern "C" fn(_, _),
        ],
        4 => ids![
            1 => name_cuda_device_a as unsafe extern "C" fn(_, _), 2 => name_cuda_device_w as unsafe extern "C" fn(_, _),
            3 => name_cuda_stream_a as unsafe extern "C" fn(_, _), 4 => name_cuda_stream_w as unsafe extern "C" fn(_, _),
            5 => name_cuda_event_a as unsafe extern "C" fn(_, _), 6 => name_cuda_event_w as unsafe extern "C" fn(_, _),
        ],
        5 => ids![
            1 => domain_mark_ex as unsafe extern "C" fn(_, _),
            2 => domain_range_start_ex as unsafe extern "C" fn(_, _) -> _,
            3 => domain_range_end as unsafe extern "C" fn(_, _),
            4 => domain_range_push_ex as unsafe extern "C" fn(_, _) -> _,
            5 => domain_range_pop as unsafe extern "C" fn(_) -> _,
            6 => domain_resource_create as unsafe extern "C" fn(_, _) -> _,
            7 => domain_resource_destroy as unsafe extern "C" fn(_),
            8 => domain_name_category_a as unsafe extern "C" fn(_, _, _),
            9 => domain_name_category_w as unsafe extern "C" fn(_, _, _),
            10 => domain_register_string_a as unsafe extern "C" fn(_, _) -> _,
            11 => domain_register_string_w as unsafe extern "C" fn(_, _) -> _,
            12 => domain_create_a as unsafe extern "C" fn(_) -> _,
            13 => domain_create_w as unsafe extern "C" fn(_) -> _,
            14 => domain_destroy as unsafe extern "C" fn(_),
            15 => initialize as unsafe extern "C" fn(_),
        ],
        6 => ids![
            1 => sync_user_create as unsafe extern "C" fn(_, _) -> _,
            2 => sync_user_destroy as unsafe extern "C" fn(_),
            3 => sync_user_acquire_start as unsafe extern "C" fn(_),
            4 => sync_user_acquire_failed as unsafe extern "C" fn(_),
            5 => sync_user_acquire_success as unsafe extern "C" fn(_),
            6 => sync_user_releasing as unsafe extern "C" fn(_),
        ],
        _ => Vec::new(),
    }
}
