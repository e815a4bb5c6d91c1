//! The version of the loaded NCCL, and the check that a function is not newer than it.

use crate::error::{Error, Result, check_nccl};
use cuhost_nccl_sys as nccl;
use std::sync::atomic::{AtomicI32, Ordering};

/// An NCCL version: `major.minor.patch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// The major version (2).
    pub major: u32,
    /// The minor version.
    pub minor: u32,
    /// The patch level.
    pub patch: u32,
}

impl Version {
    /// Decodes NCCL's version code: `major * 10000 + minor * 100 + patch` from 2.9 on,
    /// `major * 1000 + minor * 100 + patch` before.
    pub const fn from_code(code: u32) -> Version {
        let (major, rest) =
            if code >= 10000 { (code / 10000, code % 10000) } else { (code / 1000, code % 1000) };
        Version { major, minor: rest / 100, patch: rest % 100 }
    }

    /// The version code, as `ncclGetVersion` and `NCCL_VERSION_CODE` write it.
    pub const fn code(self) -> u32 {
        if self.major <= 2 && self.minor <= 8 {
            self.major * 1000 + self.minor * 100 + self.patch
        } else {
            self.major * 10000 + self.minor * 100 + self.patch
        }
    }

    /// The version of the `nccl.h` the bindings were generated from.
    pub const BINDINGS: Version = Version::from_code(nccl::NCCL_VERSION_CODE);
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The loaded library's version code, once asked; 0 before.
static LOADED: AtomicI32 = AtomicI32::new(0);

fn loaded_code() -> Result<i32> {
    let known = LOADED.load(Ordering::Relaxed);
    if known != 0 {
        return Ok(known);
    }
    let mut code = 0;
    // SAFETY: one int out-parameter.
    check_nccl("ncclGetVersion", unsafe { nccl::ncclGetVersion(&mut code) })?;
    LOADED.store(code, Ordering::Relaxed);
    Ok(code)
}

/// The version of the loaded NCCL
/// ([`ncclGetVersion`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/comms.html#ncclgetversion)).
/// Loads the library if that was not done yet; a missing library is an [`Error::Load`].
pub fn version() -> Result<Version> {
    let code = loaded_code()?;
    Ok(Version::from_code(u32::try_from(code).unwrap_or(0)))
}

/// An [`Error::Load`] naming `call`, the version it needs and the one installed, unless the
/// loaded NCCL is at least `needed` (a version code).
#[inline]
pub(crate) fn require(call: &'static str, needed: i32) -> Result<()> {
    let installed = loaded_code()?;
    if installed >= needed { Ok(()) } else { Err(too_old(call, needed, installed)) }
}

/// Whether the loaded NCCL is at least `needed` (a version code).
pub(crate) fn at_least(needed: i32) -> Result<bool> {
    Ok(loaded_code()? >= needed)
}

#[cold]
pub(crate) fn too_old(call: &'static str, needed: i32, installed: i32) -> Error {
    Error::Load {
        call,
        source: nccl::LoadError {
            library: "libnccl.so.2",
            kind: nccl::LoadErrorKind::VersionTooOld { symbol: call.into(), needed, installed },
        },
    }
}

/// Version codes of the NCCL releases that brought the functions and values used here.
pub(crate) mod since {
    /// `ncclSend`/`ncclRecv`.
    pub(crate) const SEND_RECV: i32 = 2700;
    /// `ncclAvg`, `ncclBfloat16`.
    pub(crate) const AVG_BF16: i32 = 21000;
    /// `ncclRedOpCreatePreMulSum`, `ncclRedOpDestroy`.
    pub(crate) const PRE_MUL_SUM: i32 = 21100;
    /// `ncclCommFinalize`, `ncclCommInitRankConfig`, non-blocking communicators.
    pub(crate) const CONFIG: i32 = 21400;
    /// `ncclCommSplit`, `ncclConfig_t::splitShare`.
    pub(crate) const SPLIT: i32 = 21800;
    /// `ncclCommRegister`, `ncclMemAlloc`.
    pub(crate) const REGISTER: i32 = 21900;
    /// `ncclGroupSimulateEnd`.
    pub(crate) const SIMULATE: i32 = 22200;
    /// `ncclFloat8e4m3`, `ncclFloat8e5m2`.
    pub(crate) const FP8: i32 = 22400;
    /// `ncclCommWindowRegister`, `ncclConfig_t::CTAPolicy`.
    pub(crate) const WINDOW: i32 = 22700;
    /// `ncclCommShrink`.
    pub(crate) const SHRINK: i32 = 22700;
    /// `ncclAlltoAll`, `ncclGather`, `ncclScatter`.
    pub(crate) const ALL_TO_ALL: i32 = 22800;
}
