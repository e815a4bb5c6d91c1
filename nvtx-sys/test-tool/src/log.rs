//! The call log, and decoding of what the calls pass.

use core::ffi::{CStr, c_char, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

pub(crate) static INIT_COUNT: AtomicU32 = AtomicU32::new(0);
static LOG: Mutex<String> = Mutex::new(String::new());

pub(crate) fn line(text: String) {
    let mut log = LOG.lock().unwrap_or_else(|e| e.into_inner());
    log.push_str(&text);
    log.push('\n');
}

/// Copies up to `capacity` bytes of the log (one line per call) to `out` and returns the log's
/// full length in bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvtx_test_tool_read_log(out: *mut u8, capacity: usize) -> usize {
    let log = LOG.lock().unwrap_or_else(|e| e.into_inner());
    let n = log.len().min(capacity);
    if !out.is_null() {
        // SAFETY: the caller passes a buffer of `capacity` bytes.
        unsafe { core::ptr::copy_nonoverlapping(log.as_ptr(), out, n) };
    }
    log.len()
}

/// How many times `InitializeInjectionNvtx2` was called.
#[unsafe(no_mangle)]
pub extern "C" fn nvtx_test_tool_init_count() -> u32 {
    INIT_COUNT.load(Ordering::SeqCst)
}

pub(crate) unsafe fn ascii(p: *const c_char) -> String {
    if p.is_null() {
        return "<null>".into();
    }
    // SAFETY: NVTX passes NUL-terminated strings.
    format!("{:?}", unsafe { CStr::from_ptr(p) }.to_string_lossy())
}

pub(crate) unsafe fn wide(p: *const i32) -> String {
    if p.is_null() {
        return "<null>".into();
    }
    let mut s = String::new();
    let mut i = 0;
    loop {
        // SAFETY: NVTX passes NUL-terminated wchar_t strings (32-bit on Linux).
        let c = unsafe { *p.add(i) };
        if c == 0 {
            break;
        }
        s.push(char::from_u32(c as u32).unwrap_or('\u{fffd}'));
        i += 1;
    }
    format!("L{s:?}")
}

/// A handle this tool returned: a leaked C string naming it.
pub(crate) fn handle(name: String) -> *mut c_void {
    match std::ffi::CString::new(name) {
        Ok(c) => c.into_raw().cast(),
        Err(_) => core::ptr::null_mut(),
    }
}

pub(crate) unsafe fn handle_name(p: *const c_void) -> String {
    if p.is_null() {
        return "null".into();
    }
    // SAFETY: every handle this tool returns is a leaked C string.
    unsafe { CStr::from_ptr(p.cast()) }.to_string_lossy().into_owned()
}

/// A message given as (`nvtxMessageType_t`, `nvtxMessageValue_t`).
pub(crate) unsafe fn message(kind: i32, value: *const c_void) -> String {
    match kind {
        0 => "none".into(),
        // SAFETY (all arms): the message type says what the value points at.
        1 => format!("ascii:{}", unsafe { ascii(value.cast()) }),
        2 => format!("unicode:{}", unsafe { wide(value.cast()) }),
        3 => format!("registered:{}", unsafe { handle_name(value) }),
        other => format!("type{other}"),
    }
}

unsafe fn read<T: Copy>(base: *const u8, offset: usize) -> T {
    // SAFETY: the caller passes a structure at least `offset + size_of::<T>()` long.
    unsafe { base.add(offset).cast::<T>().read_unaligned() }
}

/// `nvtxEventAttributes_t`, read by byte offset as the protocol fixes it.
pub(crate) unsafe fn attributes(p: *const c_void) -> String {
    if p.is_null() {
        return "attr=null".into();
    }
    let b = p.cast::<u8>();
    // SAFETY: (all reads) an `nvtxEventAttributes_t` of 48 bytes.
    unsafe {
        let version: u16 = read(b, 0);
        let size: u16 = read(b, 2);
        let category: u32 = read(b, 4);
        let color_type: i32 = read(b, 8);
        let color: u32 = read(b, 12);
        let payload_type: i32 = read(b, 16);
        let payload = match payload_type {
            0 => "none".to_string(),
            1 => format!("u64:{}", read::<u64>(b, 24)),
            2 => format!("i64:{}", read::<i64>(b, 24)),
            3 => format!("f64:{}", read::<f64>(b, 24)),
            4 => format!("u32:{}", read::<u32>(b, 24)),
            5 => format!("i32:{}", read::<i32>(b, 24)),
            6 => format!("f32:{}", read::<f32>(b, 24)),
            other => format!("type{other}"),
        };
        let message_type: i32 = read(b, 32);
        let message_value: *const c_void = read(b, 40);
        let color = match color_type {
            0 => "none".to_string(),
            1 => format!("argb:{color:08x}"),
            other => format!("type{other}"),
        };
        format!(
            "v={version} size={size} category={category} color={color} payload={payload} message={}",
            message(message_type, message_value)
        )
    }
}
