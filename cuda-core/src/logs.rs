//! The driver's error log (CUDA 12.9): the messages the driver writes when a call fails, which
//! say more than the status does (which argument, which limit), read back from its
//! buffer ([`Cursor`], [`all`]) or delivered as they are written ([`subscribe`], and with the
//! `tracing` feature `to_tracing`).
//!
//! ```no_run
//! # fn main() -> cuhost::Result<()> {
//! use cuhost::logs;
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

use crate::callback_registry::Registry;
use crate::error::{Error, Result, report_from_drop};
use cuhost_driver_sys as sys;
use std::ffi::{CString, c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::Arc;

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
        unsafe { driver!(cuLogsCurrent(&mut raw, 0)) }?;
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
        unsafe { driver!(cuLogsDumpToFile(&mut self.0, path.as_ptr(), 0)) }
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
    unsafe { driver!(cuLogsDumpToMemory(*iterator, buffer.as_mut_ptr().cast::<c_char>(), &mut size, 0)) }?;
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

/// A function the driver calls with each message as it is written; unregistered on drop, and
/// the closure freed after that, on the dropping thread.
///
/// Dropping it waits for the calls of the closure running on other threads (inside their
/// failing CUDA calls) to return, so that the closure and what it captured are never dropped
/// on another thread in the middle of a driver call; the closure must not wait for a lock held
/// by a thread that drops the subscription. A refusal to unregister is printed to standard
/// error, and the closure then stays registered, and alive, for the rest of the process.
pub struct Subscription {
    raw: sys::CUlogsCallbackHandle,
    /// The closure's number in `CALLBACKS`, the user data the driver calls back with.
    id: u64,
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

/// The subscribed closures. The driver gets a closure's number, never a pointer: the driver's
/// documentation does not say that no call is still running once `cuLogsUnregisterCallback`
/// returns, and this way a late call finds nothing, while a call in flight holds the closure
/// alive until it returns (see [`callback_registry`](crate::callback_registry)).
static CALLBACKS: Registry<Box<Callback>> = Registry::new();

unsafe extern "C" fn trampoline(
    data: *mut c_void,
    level: sys::CUlogLevel,
    message: *mut c_char,
    length: usize,
) {
    if message.is_null() {
        return;
    }
    // SAFETY: the driver passes `length` readable bytes of message for this call.
    let bytes = unsafe { std::slice::from_raw_parts(message.cast::<u8>(), length) };
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let text = String::from_utf8_lossy(&bytes[..end]);
    CALLBACKS.call(data as usize as u64, |f| {
        // A panic must not unwind into the driver, and nothing can report it. Its payload is
        // leaked, not dropped: a payload's drop may panic in turn, out of this C function.
        let call = || f(LogLevel::from_raw(level), text.trim_end());
        if let Err(payload) = catch_unwind(AssertUnwindSafe(call)) {
            std::mem::forget(payload);
        }
    });
}

/// Calls `f` with each message the driver writes from now on, on the thread whose call failed
/// ([`cuLogsRegisterCallback`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__LOGS.html)),
/// until the [`Subscription`] is dropped.
///
/// `f` must not call CUDA. A panic in `f` is caught and dropped: it cannot unwind into the
/// driver. Fails with the driver's status when it refuses the call.
pub fn subscribe(f: impl Fn(LogLevel, &str) + Send + Sync + 'static) -> Result<Subscription> {
    let boxed: Box<Callback> = Box::new(f);
    let id = CALLBACKS.insert(Arc::new(boxed));
    let mut raw = std::ptr::null_mut();
    // SAFETY: the trampoline matches `CUlogsCallback`; the user data is a number, not a
    // pointer, so nothing it names can dangle; one out-parameter.
    let registered =
        unsafe { driver!(cuLogsRegisterCallback(Some(trampoline), id as usize as *mut c_void, &mut raw)) };
    if let Err(e) = registered {
        // Refused: the driver never calls it.
        CALLBACKS.remove(id);
        return Err(e);
    }
    Ok(Subscription { raw, id })
}

impl Drop for Subscription {
    fn drop(&mut self) {
        // SAFETY: registered by `subscribe` and unregistered once, here.
        let status = unsafe { driver!(status: cuLogsUnregisterCallback(self.raw)) };
        unsubscribed(self.id, status);
    }
}

/// After the driver answered `status` to unregistering closure `id`: on success the closure
/// is taken out, and dropped here once no call of it runs; a refusal is reported, and the
/// closure stays listed for the driver's later calls.
fn unsubscribed(id: u64, status: crate::error::Status) {
    match status.check() {
        Ok(()) => {
            if let Some(f) = CALLBACKS.remove(id) {
                CALLBACKS.wait_for_calls(id, &f);
            }
        }
        Err(e) => report_from_drop("logs::Subscription kept registered, its closure still called", &e),
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
    use crate::error::PanicsOnDrop;
    use std::sync::Mutex;

    #[test]
    fn levels_convert_and_unknown_ones_keep_their_value() {
        assert_eq!(LogLevel::from_raw(sys::CUlogLevel::CU_LOG_LEVEL_ERROR), LogLevel::Error);
        assert_eq!(LogLevel::from_raw(sys::CUlogLevel::CU_LOG_LEVEL_WARNING), LogLevel::Warning);
        assert_eq!(LogLevel::from_raw(sys::CUlogLevel(7)), LogLevel::Other(7));
    }

    /// Calls the trampoline as the driver does, with the user data of closure `id`.
    fn deliver(id: u64, level: sys::CUlogLevel, message: &[u8]) {
        let mut message = message.to_vec();
        // SAFETY: `message` holds its length of bytes; the user data is a number, whatever it
        // names.
        unsafe { trampoline(id as usize as *mut c_void, level, message.as_mut_ptr().cast(), message.len()) };
    }

    type Seen = Arc<Mutex<Vec<(LogLevel, String)>>>;

    /// A closure listed as `subscribe` lists it, which records what it receives.
    fn listed() -> (u64, Seen) {
        let seen: Seen = Arc::default();
        let keep = seen.clone();
        let f: Box<Callback> = Box::new(move |level, text| {
            keep.lock().unwrap().push((level, text.to_string()));
            if text.contains("boom") {
                panic!("a panicking callback");
            }
        });
        (CALLBACKS.insert(Arc::new(f)), seen)
    }

    #[test]
    fn the_trampoline_reads_the_message_and_survives_a_panic() {
        let (id, seen) = listed();
        deliver(id, sys::CUlogLevel::CU_LOG_LEVEL_ERROR, b"bad value\n\0ignored");
        deliver(id, sys::CUlogLevel::CU_LOG_LEVEL_WARNING, b"boom");
        unsubscribed(
            id,
            crate::error::Status { call: "cuLogsUnregisterCallback", code: sys::CUresult::CUDA_SUCCESS },
        );
        deliver(id, sys::CUlogLevel::CU_LOG_LEVEL_ERROR, b"too late");
        let seen = seen.lock().unwrap();
        assert_eq!(
            *seen,
            [(LogLevel::Error, "bad value".to_string()), (LogLevel::Warning, "boom".to_string())]
        );
    }

    // H8: the trampoline dropped the caught payload, whose drop could unwind into the driver
    // (which aborts the process).
    #[test]
    fn h8_a_panic_payload_is_not_dropped_in_the_trampoline() {
        let f: Box<Callback> = Box::new(|_, _| std::panic::panic_any(PanicsOnDrop));
        let id = CALLBACKS.insert(Arc::new(f));
        deliver(id, sys::CUlogLevel::CU_LOG_LEVEL_ERROR, b"anything");
        unsubscribed(
            id,
            crate::error::Status { call: "cuLogsUnregisterCallback", code: sys::CUresult::CUDA_SUCCESS },
        );
    }

    // H8: the closure was leaked for good at every subscription. H7: a refused unregistration
    // was ignored.
    #[test]
    fn h8_h7_unsubscribing_frees_the_closure_and_a_refusal_is_reported() {
        let (id, seen) = listed();
        crate::error::reported::take();
        unsubscribed(
            id,
            crate::error::Status {
                call: "cuLogsUnregisterCallback",
                code: sys::CUresult::CUDA_ERROR_INVALID_VALUE,
            },
        );
        let reported = crate::error::reported::take();
        assert!(
            matches!(&reported[..], [line] if line.contains("logs::Subscription kept registered")
                && line.contains("CUDA_ERROR_INVALID_VALUE")),
            "{reported:?}"
        );
        deliver(id, sys::CUlogLevel::CU_LOG_LEVEL_ERROR, b"still called");
        assert_eq!(seen.lock().unwrap().len(), 1, "a closure kept registered is still called");
        unsubscribed(
            id,
            crate::error::Status { call: "cuLogsUnregisterCallback", code: sys::CUresult::CUDA_SUCCESS },
        );
        assert_eq!(Arc::strong_count(&seen), 1, "the closure, and what it captured, is freed");
        assert!(crate::error::reported::take().is_empty());
    }
}
