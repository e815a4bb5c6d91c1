//! The driver's error log (CUDA 12.9): the messages the driver writes when a call fails, which
//! say more than the status does (which argument, which limit), read back from its
//! buffer ([`Cursor`], [`all`]) or delivered as they are written ([`subscribe`], and with the
//! `tracing` feature `to_tracing`).
//!
//! ```no_run
//! # fn main() -> cuda_core::Result<()> {
//! use cuda_core::logs;
//! let mut cursor = logs::Cursor::now()?;
//! // ... calls that may fail ...
//! for line in cursor.read()?.lines() {
//!     eprintln!("driver: {line}");
//! }
//! # Ok(()) }
//! ```
//!
//! On a driver older than 12.9 every call here is an [`Error::Load`] naming
//! the version needed and the one installed.

use crate::error::{Error, Result, check};
use cuda_driver_sys as sys;
use std::ffi::{CString, c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

/// How severe a driver log message is (`CUlogLevel`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LogLevel {
    /// `CU_LOG_LEVEL_ERROR`.
    Error,
    /// `CU_LOG_LEVEL_WARNING`.
    Warning,
    /// A level this crate does not know, by its raw value.
    Other(u32),
}

impl LogLevel {
    fn from_raw(raw: sys::CUlogLevel) -> LogLevel {
        match raw {
            sys::CUlogLevel::CU_LOG_LEVEL_ERROR => LogLevel::Error,
            sys::CUlogLevel::CU_LOG_LEVEL_WARNING => LogLevel::Warning,
            other => LogLevel::Other(other.0),
        }
    }
}

/// The driver's log buffer holds at most this many bytes (the header's documented maximum).
const BUFFER_BYTES: usize = 25_600;

/// A position in the driver's log: [`read`](Self::read) returns the messages written since,
/// and moves past them (`CUlogIterator`).
#[derive(Debug)]
pub struct Cursor(sys::CUlogIterator);

impl Cursor {
    /// A cursor at the end of the log: it reads only messages written from now on
    /// ([`cuLogsCurrent`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__LOGS.html)).
    pub fn now() -> Result<Cursor> {
        let mut raw = 0;
        // SAFETY: one out-parameter; flags must be 0.
        check("cuLogsCurrent", unsafe { sys::cuLogsCurrent(&mut raw, 0) })?;
        Ok(Cursor(raw))
    }

    /// The messages written since the cursor's position, one per line, and the cursor moved
    /// past them; empty when there are none
    /// ([`cuLogsDumpToMemory`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__LOGS.html)).
    /// Messages the driver's buffer (25,600 bytes) no longer holds are lost; the text then says
    /// so at its start.
    ///
    /// Fails with the driver's status when it refuses the call.
    pub fn read(&mut self) -> Result<String> {
        dump(&mut std::ptr::from_mut(&mut self.0))
    }

    /// Writes the messages since the cursor's position to the file at `path` and moves the
    /// cursor past them
    /// ([`cuLogsDumpToFile`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__LOGS.html)).
    ///
    /// A path with a NUL byte or that is not UTF-8 is an [`Error::InvalidArgument`]; otherwise it
    /// fails with the driver's status (a file it cannot write).
    pub fn dump_to_file(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let path = c_path(path.as_ref())?;
        // SAFETY: a live iterator and a NUL-terminated path; flags must be 0.
        check("cuLogsDumpToFile", unsafe { sys::cuLogsDumpToFile(&mut self.0, path.as_ptr(), 0) })
    }
}

/// Every message the driver's buffer still holds
/// ([`cuLogsDumpToMemory`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__LOGS.html)
/// from the start).
///
/// Fails with the driver's status when it refuses the call.
pub fn all() -> Result<String> {
    let mut from_start = std::ptr::null_mut();
    dump(&mut from_start)
}

/// `cuLogsDumpToMemory` from `*iterator` (null: from the start).
fn dump(iterator: &mut *mut sys::CUlogIterator) -> Result<String> {
    let mut buffer = vec![0u8; BUFFER_BYTES + 1];
    let mut size = buffer.len();
    // SAFETY: `buffer` holds `size` bytes; the iterator is live or null; flags must be 0.
    check("cuLogsDumpToMemory", unsafe {
        sys::cuLogsDumpToMemory(*iterator, buffer.as_mut_ptr().cast::<c_char>(), &mut size, 0)
    })?;
    buffer.truncate(size.min(BUFFER_BYTES));
    Ok(String::from_utf8_lossy(&buffer).into_owned())
}

fn c_path(path: &Path) -> Result<CString> {
    let text = path.to_str().ok_or_else(|| {
        Error::invalid("logs::Cursor::dump_to_file", format!("{} is not UTF-8", path.display()))
    })?;
    CString::new(text).map_err(|_| {
        Error::invalid("logs::Cursor::dump_to_file", format!("{} holds a NUL byte", path.display()))
    })
}

/// A function the driver calls with each message as it is written; unregistered on drop.
///
/// The closure itself is kept for the rest of the process: the driver may be calling it on
/// another thread while it is unregistered, so it is never freed (a few bytes per
/// subscription; make one, early, and keep it).
pub struct Subscription {
    raw: sys::CUlogsCallbackHandle,
}

// SAFETY: the handle is an opaque token the driver accepts from any thread.
unsafe impl Send for Subscription {}
// SAFETY: `&Subscription` allows nothing.
unsafe impl Sync for Subscription {}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription").field("raw", &self.raw).finish()
    }
}

type Callback = dyn Fn(LogLevel, &str) + Send + Sync;

unsafe extern "C" fn trampoline(
    data: *mut c_void,
    level: sys::CUlogLevel,
    message: *mut c_char,
    length: usize,
) {
    if data.is_null() || message.is_null() {
        return;
    }
    // SAFETY: `data` is the leaked `Box<Box<Callback>>` of `subscribe`, never freed.
    let f = unsafe { &*data.cast::<Box<Callback>>() };
    // SAFETY: the driver passes `length` readable bytes of message for this call.
    let bytes = unsafe { std::slice::from_raw_parts(message.cast::<u8>(), length) };
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let text = String::from_utf8_lossy(&bytes[..end]);
    // A panic must not unwind into the driver; it is dropped here (nothing can report it).
    let _ = catch_unwind(AssertUnwindSafe(|| f(LogLevel::from_raw(level), text.trim_end())));
}

/// Calls `f` with each message the driver writes from now on, on the thread whose call failed
/// ([`cuLogsRegisterCallback`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__LOGS.html)).
///
/// `f` must not call CUDA. A panic in `f` is caught and dropped: it cannot unwind into the
/// driver. Fails with the driver's status when it refuses the call.
pub fn subscribe(f: impl Fn(LogLevel, &str) + Send + Sync + 'static) -> Result<Subscription> {
    let boxed: Box<Box<Callback>> = Box::new(Box::new(f));
    let data = Box::into_raw(boxed);
    let mut raw = std::ptr::null_mut();
    // SAFETY: the trampoline matches `CUlogsCallback`; `data` stays valid for the process.
    let status = unsafe { sys::cuLogsRegisterCallback(Some(trampoline), data.cast(), &mut raw) };
    if status != sys::CUresult::CUDA_SUCCESS {
        // SAFETY: the driver refused the registration, so it never calls the trampoline.
        drop(unsafe { Box::from_raw(data) });
    }
    check("cuLogsRegisterCallback", status)?;
    Ok(Subscription { raw })
}

impl Drop for Subscription {
    fn drop(&mut self) {
        // SAFETY: registered by `subscribe` and unregistered once. A failure leaves the
        // callback registered, calling a closure that is never freed: nothing unsound.
        let _ = unsafe { sys::cuLogsUnregisterCallback(self.raw) };
    }
}

/// Sends each message the driver writes from now on to `tracing`, as an event of target
/// `cuda_driver` at level ERROR or WARN.
///
/// Fails as [`subscribe`] does.
#[cfg(feature = "tracing")]
pub fn to_tracing() -> Result<Subscription> {
    subscribe(|level, message| match level {
        LogLevel::Warning => tracing::warn!(target: "cuda_driver", "{message}"),
        LogLevel::Error | LogLevel::Other(_) => tracing::error!(target: "cuda_driver", "{message}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_convert_and_unknown_ones_keep_their_value() {
        assert_eq!(LogLevel::from_raw(sys::CUlogLevel::CU_LOG_LEVEL_ERROR), LogLevel::Error);
        assert_eq!(LogLevel::from_raw(sys::CUlogLevel::CU_LOG_LEVEL_WARNING), LogLevel::Warning);
        assert_eq!(LogLevel::from_raw(sys::CUlogLevel(7)), LogLevel::Other(7));
    }

    #[test]
    fn the_trampoline_reads_the_message_and_survives_a_panic() {
        use std::sync::{Arc, Mutex};
        let seen = Arc::new(Mutex::new(Vec::new()));
        let keep = seen.clone();
        let f: Box<Callback> = Box::new(move |level, text| {
            keep.lock().unwrap().push((level, text.to_string()));
            if text.contains("boom") {
                panic!("a panicking callback");
            }
        });
        let data = Box::into_raw(Box::new(f));
        let mut message = b"bad value\n\0ignored".to_vec();
        // SAFETY: `data` is a boxed callback, `message` holds its length of bytes.
        unsafe {
            trampoline(
                data.cast(),
                sys::CUlogLevel::CU_LOG_LEVEL_ERROR,
                message.as_mut_ptr().cast(),
                message.len(),
            );
        }
        let mut boom = b"boom".to_vec();
        // SAFETY: as above.
        unsafe {
            trampoline(data.cast(), sys::CUlogLevel::CU_LOG_LEVEL_WARNING, boom.as_mut_ptr().cast(), 4)
        };
        // SAFETY: the test's own box, freed once.
        drop(unsafe { Box::from_raw(data) });
        let seen = seen.lock().unwrap();
        assert_eq!(seen[0], (LogLevel::Error, "bad value".to_string()));
        assert_eq!(seen[1], (LogLevel::Warning, "boom".to_string()));
    }
}
