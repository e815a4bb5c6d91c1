//! GPU coredump settings (CUDA 12.1): whether a GPU exception writes a coredump, where, what it
//! holds, and whether a write to a pipe triggers one, for one context ([`Coredump::of`]) or for
//! the process ([`Coredump::global`])
//! ([`cuCoredumpGetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__COREDUMP.html)).
//!
//! ```no_run
//! # fn main() -> cuhost::Result<()> {
//! use cuhost::coredump::{Coredump, CoredumpFlags};
//! let settings = Coredump::global();
//! settings.set_file("/var/tmp/my-app.cudacore")?;
//! settings.set_flags(CoredumpFlags::SKIP_GLOBAL_MEMORY | CoredumpFlags::SKIP_ABORT)?;
//! settings.set_enabled_on_exception(true)?;
//! # Ok(()) }
//! ```

use crate::context::Context;
use crate::error::{Error, Result, check};
use cuhost_driver_sys as sys;
use std::ffi::c_void;

/// The longest file or pipe name the driver keeps, in bytes.
const MAX_NAME: usize = 1023;

crate::flags::flags! {
    /// What a coredump leaves out, and how it is made (`CUCoredumpGenerationFlags`); empty is
    /// the driver's default (everything it can reach).
    #[derive(Clone, Copy, PartialEq, Eq, Hash)]
    pub struct CoredumpFlags: u32 {
        /// `CU_COREDUMP_SKIP_NONRELOCATED_ELF_IMAGES`.
        const SKIP_NONRELOCATED_ELF_IMAGES = 1 << 0;
        /// `CU_COREDUMP_SKIP_GLOBAL_MEMORY`.
        const SKIP_GLOBAL_MEMORY = 1 << 1;
        /// `CU_COREDUMP_SKIP_SHARED_MEMORY`.
        const SKIP_SHARED_MEMORY = 1 << 2;
        /// `CU_COREDUMP_SKIP_LOCAL_MEMORY`.
        const SKIP_LOCAL_MEMORY = 1 << 3;
        /// `CU_COREDUMP_SKIP_ABORT`: a GPU exception does not abort the host process.
        const SKIP_ABORT = 1 << 4;
        /// `CU_COREDUMP_SKIP_CONSTBANK_MEMORY`.
        const SKIP_CONSTBANK_MEMORY = 1 << 5;
        /// `CU_COREDUMP_GZIP_COMPRESS` (CUDA 13.1 drivers).
        const GZIP_COMPRESS = 1 << 6;
        /// `CU_COREDUMP_FAULTED_CONTEXTS_ONLY` (CUDA 13.1 drivers).
        const FAULTED_CONTEXTS_ONLY = 1 << 7;
        /// `CU_COREDUMP_SKIP_TENSOR_MEMORY` (CUDA 13.1 drivers).
        const SKIP_TENSOR_MEMORY = 1 << 8;
        /// `CU_COREDUMP_NO_ERRBAR_AT_EXIT` (CUDA 13.1 drivers).
        const NO_ERRBAR_AT_EXIT = 1 << 30;
        /// `CU_COREDUMP_LOG_ONLY`: log the exception, write no file (CUDA 13.1 drivers).
        const LOG_ONLY = 1 << 31;
    }
}

/// The coredump settings of one context, or of the process.
#[derive(Clone, Copy, Debug)]
pub struct Coredump<'a> {
    ctx: Option<&'a Context>,
}

impl Coredump<'static> {
    /// The settings every context starts from (`cuCoredump*AttributeGlobal`).
    pub fn global() -> Coredump<'static> {
        Coredump { ctx: None }
    }
}

impl<'a> Coredump<'a> {
    /// The settings of `ctx` (`cuCoredump*Attribute`, with `ctx` made current).
    pub fn of(ctx: &'a Context) -> Coredump<'a> {
        Coredump { ctx: Some(ctx) }
    }

    /// Whether a GPU exception writes a coredump (`CU_COREDUMP_ENABLE_ON_EXCEPTION`).
    ///
    /// Fails with the driver's status when it refuses the query.
    pub fn enabled_on_exception(&self) -> Result<bool> {
        Ok(self.get(sys::CUcoredumpSettings::CU_COREDUMP_ENABLE_ON_EXCEPTION)?.iter().any(|&b| b != 0))
    }

    /// Sets [`enabled_on_exception`](Self::enabled_on_exception).
    ///
    /// Fails with the driver's status when it refuses the setting.
    pub fn set_enabled_on_exception(&self, on: bool) -> Result<()> {
        self.set_bool(sys::CUcoredumpSettings::CU_COREDUMP_ENABLE_ON_EXCEPTION, on)
    }

    /// Whether a write to the pipe ([`pipe`](Self::pipe)) triggers a coredump
    /// (`CU_COREDUMP_ENABLE_USER_TRIGGER`).
    ///
    /// Fails with the driver's status when it refuses the query.
    pub fn user_trigger(&self) -> Result<bool> {
        Ok(self.get(sys::CUcoredumpSettings::CU_COREDUMP_ENABLE_USER_TRIGGER)?.iter().any(|&b| b != 0))
    }

    /// Sets [`user_trigger`](Self::user_trigger). The driver takes it for the process only:
    /// on the settings of a context it is an [`Error::InvalidArgument`], before any call.
    ///
    /// Fails with the driver's status when it refuses the setting.
    pub fn set_user_trigger(&self, on: bool) -> Result<()> {
        self.global_only("Coredump::set_user_trigger")?;
        self.set_bool(sys::CUcoredumpSettings::CU_COREDUMP_ENABLE_USER_TRIGGER, on)
    }

    fn global_only(&self, operation: &'static str) -> Result<()> {
        match self.ctx {
            None => Ok(()),
            Some(_) => Err(Error::invalid(
                operation,
                "the driver sets this for the whole process only; use Coredump::global()",
            )),
        }
    }

    /// Where coredumps are written (`CU_COREDUMP_FILE`).
    ///
    /// Fails with the driver's status when it refuses the query.
    pub fn file(&self) -> Result<String> {
        self.get_text(sys::CUcoredumpSettings::CU_COREDUMP_FILE)
    }

    /// Sets [`file`](Self::file). A name longer than 1,023 bytes or with a NUL byte is an
    /// [`Error::InvalidArgument`]; otherwise it fails with the driver's status.
    pub fn set_file(&self, path: &str) -> Result<()> {
        self.set_text("Coredump::set_file", sys::CUcoredumpSettings::CU_COREDUMP_FILE, path)
    }

    /// The pipe watched for user-triggered coredumps (`CU_COREDUMP_PIPE`).
    ///
    /// Fails with the driver's status when it refuses the query.
    pub fn pipe(&self) -> Result<String> {
        self.get_text(sys::CUcoredumpSettings::CU_COREDUMP_PIPE)
    }

    /// Sets [`pipe`](Self::pipe), for the process only (on the settings of a context it is an
    /// [`Error::InvalidArgument`]); otherwise fails as [`set_file`](Self::set_file) does.
    pub fn set_pipe(&self, path: &str) -> Result<()> {
        self.global_only("Coredump::set_pipe")?;
        self.set_text("Coredump::set_pipe", sys::CUcoredumpSettings::CU_COREDUMP_PIPE, path)
    }

    /// What a coredump leaves out (`CU_COREDUMP_GENERATION_FLAGS`); bits this crate does not
    /// name are kept.
    ///
    /// Fails with the driver's status when it refuses the query.
    pub fn flags(&self) -> Result<CoredumpFlags> {
        let bytes = self.get(sys::CUcoredumpSettings::CU_COREDUMP_GENERATION_FLAGS)?;
        let mut word = [0u8; 4];
        for (w, b) in word.iter_mut().zip(&bytes) {
            *w = *b;
        }
        Ok(CoredumpFlags::from_bits_retain(u32::from_ne_bytes(word)))
    }

    /// Sets [`flags`](Self::flags).
    ///
    /// Fails with the driver's status when it refuses the setting (flags newer than the
    /// driver).
    pub fn set_flags(&self, flags: CoredumpFlags) -> Result<()> {
        self.set(sys::CUcoredumpSettings::CU_COREDUMP_GENERATION_FLAGS, &flags.bits().to_ne_bytes())
    }

    /// Calls the scope's getter or setter with `value` of `size` bytes (`value` null: the
    /// driver reports the size it expects).
    fn call(
        &self,
        set: bool,
        attrib: sys::CUcoredumpSettings,
        value: *mut c_void,
        size: &mut usize,
    ) -> Result<()> {
        if let Some(ctx) = self.ctx {
            ctx.enter()?;
        }
        // SAFETY: `value` is null or holds `*size` bytes, as every caller below makes it.
        let (call, status) = unsafe {
            match (self.ctx.is_some(), set) {
                (true, false) => ("cuCoredumpGetAttribute", sys::cuCoredumpGetAttribute(attrib, value, size)),
                (true, true) => ("cuCoredumpSetAttribute", sys::cuCoredumpSetAttribute(attrib, value, size)),
                (false, false) => {
                    ("cuCoredumpGetAttributeGlobal", sys::cuCoredumpGetAttributeGlobal(attrib, value, size))
                }
                (false, true) => {
                    ("cuCoredumpSetAttributeGlobal", sys::cuCoredumpSetAttributeGlobal(attrib, value, size))
                }
            }
        };
        check(call, status)
    }

    /// The value's bytes, in a buffer of the size the driver says it expects.
    fn get(&self, attrib: sys::CUcoredumpSettings) -> Result<Vec<u8>> {
        let mut size = 0;
        self.call(false, attrib, std::ptr::null_mut(), &mut size)?;
        let mut value = vec![0u8; size.clamp(1, MAX_NAME + 1)];
        let mut size = value.len();
        self.call(false, attrib, value.as_mut_ptr().cast(), &mut size)?;
        value.truncate(size.min(value.len()));
        Ok(value)
    }

    fn set(&self, attrib: sys::CUcoredumpSettings, bytes: &[u8]) -> Result<()> {
        let mut value = bytes.to_vec();
        let mut size = value.len();
        self.call(true, attrib, value.as_mut_ptr().cast(), &mut size)
    }

    /// A boolean in as many bytes as the driver expects for it.
    fn set_bool(&self, attrib: sys::CUcoredumpSettings, on: bool) -> Result<()> {
        let mut size = 0;
        self.call(false, attrib, std::ptr::null_mut(), &mut size)?;
        let mut value = vec![0u8; size.clamp(1, 8)];
        value[0] = u8::from(on);
        self.set(attrib, &value)
    }

    fn get_text(&self, attrib: sys::CUcoredumpSettings) -> Result<String> {
        let mut value = vec![0u8; MAX_NAME + 1];
        let mut size = value.len();
        self.call(false, attrib, value.as_mut_ptr().cast(), &mut size)?;
        let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
        Ok(String::from_utf8_lossy(&value[..end]).into_owned())
    }

    fn set_text(&self, operation: &'static str, attrib: sys::CUcoredumpSettings, text: &str) -> Result<()> {
        if text.len() > MAX_NAME || text.contains('\0') {
            return Err(Error::invalid(
                operation,
                format!(
                    "the name must be at most {MAX_NAME} bytes without NUL; {} bytes were given",
                    text.len()
                ),
            ));
        }
        let mut bytes = text.as_bytes().to_vec();
        bytes.push(0);
        self.set(attrib, &bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_too_long_or_with_nul_are_refused_before_any_call() {
        let global = Coredump::global();
        let long = "x".repeat(MAX_NAME + 1);
        assert!(matches!(global.set_file(&long), Err(Error::InvalidArgument { .. })));
        assert!(matches!(global.set_pipe("a\0b"), Err(Error::InvalidArgument { .. })));
    }
}
