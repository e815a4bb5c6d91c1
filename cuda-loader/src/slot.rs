//! One lazily resolved function address.

use crate::error::{LoadError, LoadErrorKind, record, set_last};
use std::ffi::CStr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

const UNRESOLVED: usize = 0;
const FAILED_MISSING: usize = 1;
const FAILED_TOO_OLD: usize = 2;
const LAST_SENTINEL: usize = FAILED_TOO_OLD;

/// Serialises first resolutions so that each symbol is looked up once, even when many threads
/// make their first call at the same moment.
static RESOLVING: Mutex<()> = Mutex::new(());

/// Why a slot has no function behind it; the owning crate turns it into its library's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The library or the symbol is missing.
    Missing,
    /// The installed library is older than the function needs.
    TooOld,
}

/// One function of a library: how to find it, and its address once found.
///
/// After the first call, [`Slot::get`] costs one atomic load and a compare. A failed resolution
/// is remembered too, so a missing function costs the same on later calls.
pub struct Slot {
    addr: AtomicUsize,
    /// The name callers know the function by (`cuEventElapsedTime_v2000`); load errors are
    /// recorded under it.
    pub function: &'static str,
    /// The name to look the function up by.
    pub name: &'static CStr,
    /// The ABI version to ask for, where the library versions its functions (the driver).
    pub version: i32,
    /// The ABI version of the per-thread-default-stream variant; 0 when there is none.
    pub per_thread_version: i32,
    /// The exported name of the per-thread-default-stream variant; empty when there is none.
    pub per_thread_name: &'static CStr,
}

impl Slot {
    /// An unresolved slot for the function callers know as `function`, looked up as `name`.
    pub const fn new(
        function: &'static str,
        name: &'static CStr,
        version: i32,
        per_thread_version: i32,
        per_thread_name: &'static CStr,
    ) -> Self {
        Slot {
            addr: AtomicUsize::new(UNRESOLVED),
            function,
            name,
            version,
            per_thread_version,
            per_thread_name,
        }
    }

    /// The function's address, resolving it with `resolve` on first use.
    #[inline(always)]
    pub fn get(&'static self, resolve: fn(&Slot) -> Result<usize, LoadError>) -> Result<usize, Failure> {
        let addr = self.addr.load(Ordering::Acquire);
        if addr > LAST_SENTINEL {
            return Ok(addr);
        }
        self.slow(addr, resolve)
    }

    #[cold]
    #[inline(never)]
    fn slow(
        &'static self,
        seen: usize,
        resolve: fn(&Slot) -> Result<usize, LoadError>,
    ) -> Result<usize, Failure> {
        let symbol = self.function;
        if seen != UNRESOLVED {
            return Err(self.failure_of(seen, symbol));
        }
        // A poisoned lock only means another thread panicked while holding it; the slot state
        // is still consistent because it is written last.
        let _guard = RESOLVING.lock().unwrap_or_else(|p| p.into_inner());
        let now = self.addr.load(Ordering::Acquire);
        if now > LAST_SENTINEL {
            return Ok(now);
        }
        if now != UNRESOLVED {
            return Err(self.failure_of(now, symbol));
        }
        match resolve(self) {
            Ok(addr) if addr > LAST_SENTINEL => {
                self.addr.store(addr, Ordering::Release);
                Ok(addr)
            }
            Ok(_) => {
                self.addr.store(FAILED_MISSING, Ordering::Release);
                Err(Failure::Missing)
            }
            Err(e) => {
                let code = match e.kind {
                    LoadErrorKind::VersionTooOld { .. } => FAILED_TOO_OLD,
                    _ => FAILED_MISSING,
                };
                record(symbol, &e);
                self.addr.store(code, Ordering::Release);
                Err(if code == FAILED_TOO_OLD { Failure::TooOld } else { Failure::Missing })
            }
        }
    }

    fn failure_of(&self, code: usize, symbol: &'static str) -> Failure {
        if let Some(e) = crate::load_error(symbol) {
            set_last(&e);
        }
        if code == FAILED_TOO_OLD { Failure::TooOld } else { Failure::Missing }
    }

    /// Whether the slot has been resolved (successfully or not).
    pub fn is_resolved(&self) -> bool {
        self.addr.load(Ordering::Acquire) != UNRESOLVED
    }
}
