//! Which ABI version of a driver function to call, chosen once per process.
//!
//! A driver has every ABI version up to its own. Where a function's ABI changed and the older
//! one means the same, the call site lists the versions it can call, newest first, and calls the
//! one [`AbiVersions::choose`] returns; after the first call the choice costs one atomic load.

#![forbid(unsafe_code)]

use crate::error::{Error, Result};
use cuhost_driver_sys as sys;
use std::sync::atomic::{AtomicI32, Ordering};

/// No choice made yet.
const UNCHOSEN: i32 = 0;

/// The ABI versions of one driver function that a call site knows how to call.
pub(crate) struct AbiVersions {
    call: &'static str,
    versions: &'static [i32],
    chosen: AtomicI32,
}

impl AbiVersions {
    /// `call` is the function's C name, for errors; `versions` are newest first.
    pub(crate) const fn new(call: &'static str, versions: &'static [i32]) -> Self {
        AbiVersions { call, versions, chosen: AtomicI32::new(UNCHOSEN) }
    }

    /// The newest listed version the installed driver has; an [`Error::Load`] naming the call,
    /// the oldest version listed and the version installed when it has none of them.
    #[inline]
    pub(crate) fn choose(&self) -> Result<i32> {
        let chosen = self.chosen.load(Ordering::Relaxed);
        if chosen != UNCHOSEN {
            return Ok(chosen);
        }
        self.choose_first()
    }

    #[cold]
    fn choose_first(&self) -> Result<i32> {
        let mut last = None;
        for &version in self.versions {
            match sys::check_abi_version(self.call, version) {
                Ok(()) => {
                    // Every thread computes the same answer; storing it twice is harmless.
                    self.chosen.store(version, Ordering::Relaxed);
                    return Ok(version);
                }
                Err(e) => last = Some(e),
            }
        }
        match last {
            Some(source) => Err(Error::Load { call: self.call, source }),
            None => Err(Error::invalid(self.call, "no ABI version is listed for this call")),
        }
    }

    /// The error for a use of the call that only `version` or newer supports (the older ABI
    /// cannot express it): it names the call, `version` and the version installed.
    #[cold]
    pub(crate) fn needs(&self, version: i32) -> Error {
        match sys::check_abi_version(self.call, version) {
            Err(source) => Error::Load { call: self.call, source },
            // Unreachable in practice: the caller found the installed driver older than this.
            Ok(()) => Error::invalid(self.call, format!("this use needs ABI version {version}")),
        }
    }
}
