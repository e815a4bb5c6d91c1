//! Options for the driver's just-in-time compiler and linker, and the logs they write.
//!
//! The same options serve [`Module`](super::Module) loading, the [`Linker`](super::Linker) and
//! [`Library`](super::Library) loading. See the
//! [`CUjit_option` reference](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TYPES.html#group__CUDA__TYPES_1g5527fa8030d5cabedc781a04dbd1997d).

#![forbid(unsafe_code)]

use crate::error::{Error, Result};
use cuhost_driver_sys as sys;
use std::ffi::c_void;

/// How hard the JIT compiler optimises (`CU_JIT_OPTIMIZATION_LEVEL`); the driver's default is
/// [`OptimizationLevel::O4`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OptimizationLevel {
    /// No optimisation.
    O0,
    /// Level 1.
    O1,
    /// Level 2.
    O2,
    /// Level 3.
    O3,
    /// Level 4, the highest and the default.
    O4,
}

impl TryFrom<u32> for OptimizationLevel {
    type Error = Error;
    fn try_from(level: u32) -> Result<Self> {
        Ok(match level {
            0 => Self::O0,
            1 => Self::O1,
            2 => Self::O2,
            3 => Self::O3,
            4 => Self::O4,
            _ => {
                return Err(Error::invalid(
                    "OptimizationLevel::try_from",
                    format!("optimisation level {level} is not one of 0 to 4"),
                ));
            }
        })
    }
}

/// The architecture the JIT compiler generates code for (`CU_JIT_TARGET`). Without one, it
/// compiles for the device of the current context.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JitTarget {
    /// `compute_XY`: code that runs on this and later architectures.
    Compute {
        /// Major compute capability.
        major: u32,
        /// Minor compute capability.
        minor: u32,
    },
    /// `compute_XYa`: architecture-specific features, runs only on exactly this architecture.
    ArchSpecific {
        /// Major compute capability.
        major: u32,
        /// Minor compute capability.
        minor: u32,
    },
    /// `compute_XYf`: family-specific features, runs on this architecture family.
    FamilySpecific {
        /// Major compute capability.
        major: u32,
        /// Minor compute capability.
        minor: u32,
    },
}

// The header encodes the `a` and `f` variants as the version plus these offsets.
const ARCH_SPECIFIC: u32 = 0x1_0000;
const FAMILY_SPECIFIC: u32 = 0x2_0000;

impl JitTarget {
    /// The raw `CUjit_target`.
    pub fn as_raw(self) -> sys::CUjit_target {
        let (base, offset) = match self {
            Self::Compute { major, minor } => (major * 10 + minor, 0),
            Self::ArchSpecific { major, minor } => (major * 10 + minor, ARCH_SPECIFIC),
            Self::FamilySpecific { major, minor } => (major * 10 + minor, FAMILY_SPECIFIC),
        };
        sys::CUjit_target(base + offset)
    }
}

impl TryFrom<sys::CUjit_target> for JitTarget {
    type Error = Error;
    fn try_from(raw: sys::CUjit_target) -> Result<Self> {
        let (kind, version) = (raw.0 & !0xFFFF, raw.0 & 0xFFFF);
        let (major, minor) = (version / 10, version % 10);
        if !(3..=99).contains(&major) {
            return Err(Error::invalid("JitTarget::try_from", format!("{} is not a CUjit_target", raw.0)));
        }
        match kind {
            0 => Ok(Self::Compute { major, minor }),
            ARCH_SPECIFIC => Ok(Self::ArchSpecific { major, minor }),
            FAMILY_SPECIFIC => Ok(Self::FamilySpecific { major, minor }),
            _ => Err(Error::invalid("JitTarget::try_from", format!("{} is not a CUjit_target", raw.0))),
        }
    }
}

/// What to load when a fat binary has no exact cubin for the device (`CU_JIT_FALLBACK_STRATEGY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JitFallback {
    /// `CU_PREFER_PTX`: compile the PTX.
    PreferPtx,
    /// `CU_PREFER_BINARY`: use a compatible cubin.
    PreferBinary,
}

/// The default caching of global loads (`CU_JIT_CACHE_MODE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JitCacheMode {
    /// `CU_JIT_CACHE_OPTION_NONE`: no preference.
    None,
    /// `CU_JIT_CACHE_OPTION_CG`: cache in L2 only.
    CacheGlobal,
    /// `CU_JIT_CACHE_OPTION_CA`: cache in L1 and L2.
    CacheAll,
}

/// Options for the JIT compiler. The default asks for nothing but the logs.
///
/// ```
/// use cuhost::module::{JitOptions, OptimizationLevel};
/// let options = JitOptions::new().optimization_level(OptimizationLevel::O3).max_registers(64);
/// assert_eq!(options.log_capacity(), 16 * 1024);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct JitOptions {
    max_registers: Option<u32>,
    threads_per_block: Option<u32>,
    optimization_level: Option<OptimizationLevel>,
    target: Option<JitTarget>,
    fallback: Option<JitFallback>,
    cache_mode: Option<JitCacheMode>,
    generate_debug_info: bool,
    generate_line_info: bool,
    log_verbose: bool,
    log_capacity: usize,
}

impl Default for JitOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl JitOptions {
    /// No options but info and error logs of 16 KiB each.
    pub fn new() -> Self {
        Self {
            max_registers: None,
            threads_per_block: None,
            optimization_level: None,
            target: None,
            fallback: None,
            cache_mode: None,
            generate_debug_info: false,
            generate_line_info: false,
            log_verbose: false,
            log_capacity: 16 * 1024,
        }
    }

    /// `CU_JIT_MAX_REGISTERS`: the most registers a thread may use.
    pub fn max_registers(mut self, registers: u32) -> Self {
        self.max_registers = Some(registers);
        self
    }

    /// `CU_JIT_THREADS_PER_BLOCK`: compile so that blocks of this many threads fit (limits registers).
    pub fn threads_per_block(mut self, threads: u32) -> Self {
        self.threads_per_block = Some(threads);
        self
    }

    /// `CU_JIT_OPTIMIZATION_LEVEL`.
    pub fn optimization_level(mut self, level: OptimizationLevel) -> Self {
        self.optimization_level = Some(level);
        self
    }

    /// `CU_JIT_TARGET`: compile for this architecture instead of the current context's device.
    pub fn target(mut self, target: JitTarget) -> Self {
        self.target = Some(target);
        self
    }

    /// `CU_JIT_FALLBACK_STRATEGY`.
    pub fn fallback(mut self, fallback: JitFallback) -> Self {
        self.fallback = Some(fallback);
        self
    }

    /// `CU_JIT_CACHE_MODE`.
    pub fn cache_mode(mut self, mode: JitCacheMode) -> Self {
        self.cache_mode = Some(mode);
        self
    }

    /// `CU_JIT_GENERATE_DEBUG_INFO`: device debug information (`-G`).
    pub fn generate_debug_info(mut self, on: bool) -> Self {
        self.generate_debug_info = on;
        self
    }

    /// `CU_JIT_GENERATE_LINE_INFO`: line numbers for profilers (`-lineinfo`).
    pub fn generate_line_info(mut self, on: bool) -> Self {
        self.generate_line_info = on;
        self
    }

    /// `CU_JIT_LOG_VERBOSE`: write register and memory use of each kernel to the info log.
    pub fn log_verbose(mut self, on: bool) -> Self {
        self.log_verbose = on;
        self
    }

    /// Bytes kept for each of the info and error logs (`CU_JIT_*_LOG_BUFFER_SIZE_BYTES`);
    /// longer logs are cut. 0 asks for no logs; with no option set either, the load passes the
    /// driver no option at all (and [`JitLog::wall_time_ms`] stays 0).
    pub fn log_capacity(&self) -> usize {
        self.log_capacity
    }

    /// Sets [`log_capacity`](Self::log_capacity).
    pub fn with_log_capacity(mut self, bytes: usize) -> Self {
        self.log_capacity = bytes;
        self
    }

    /// The raw option arrays, with log buffers, ready for a driver call.
    pub(crate) fn to_raw(&self) -> RawJitOptions {
        let mut raw = RawJitOptions::default();
        if self.log_capacity > 0 {
            raw.info = vec![0; self.log_capacity];
            raw.error = vec![0; self.log_capacity];
            let info = raw.info.as_mut_ptr().cast();
            let error = raw.error.as_mut_ptr().cast();
            raw.push(sys::CUjit_option::CU_JIT_INFO_LOG_BUFFER, info);
            raw.info_size_slot =
                Some(raw.push_value(sys::CUjit_option::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, self.log_capacity));
            raw.push(sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER, error);
            raw.error_size_slot = Some(
                raw.push_value(sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, self.log_capacity),
            );
        }
        if let Some(r) = self.max_registers {
            raw.push_value(sys::CUjit_option::CU_JIT_MAX_REGISTERS, r as usize);
        }
        if let Some(t) = self.threads_per_block {
            raw.push_value(sys::CUjit_option::CU_JIT_THREADS_PER_BLOCK, t as usize);
        }
        if let Some(level) = self.optimization_level {
            raw.push_value(sys::CUjit_option::CU_JIT_OPTIMIZATION_LEVEL, level as usize);
        }
        if let Some(target) = self.target {
            raw.push_value(sys::CUjit_option::CU_JIT_TARGET, target.as_raw().0 as usize);
        }
        if let Some(fallback) = self.fallback {
            let value = match fallback {
                JitFallback::PreferPtx => sys::CUjit_fallback::CU_PREFER_PTX,
                JitFallback::PreferBinary => sys::CUjit_fallback::CU_PREFER_BINARY,
            };
            raw.push_value(sys::CUjit_option::CU_JIT_FALLBACK_STRATEGY, value.0 as usize);
        }
        if let Some(mode) = self.cache_mode {
            let value = match mode {
                JitCacheMode::None => sys::CUjit_cacheMode::CU_JIT_CACHE_OPTION_NONE,
                JitCacheMode::CacheGlobal => sys::CUjit_cacheMode::CU_JIT_CACHE_OPTION_CG,
                JitCacheMode::CacheAll => sys::CUjit_cacheMode::CU_JIT_CACHE_OPTION_CA,
            };
            raw.push_value(sys::CUjit_option::CU_JIT_CACHE_MODE, value.0 as usize);
        }
        for (on, option) in [
            (self.generate_debug_info, sys::CUjit_option::CU_JIT_GENERATE_DEBUG_INFO),
            (self.generate_line_info, sys::CUjit_option::CU_JIT_GENERATE_LINE_INFO),
            (self.log_verbose, sys::CUjit_option::CU_JIT_LOG_VERBOSE),
        ] {
            if on {
                raw.push_value(option, 1);
            }
        }
        // Options that ask for nothing (no log, no setting) stay empty, so that the load is the
        // plain call (`cuModuleLoadData`, as a program loading a CUBIN makes it); otherwise the
        // compiler's time is asked for too.
        if !raw.keys.is_empty() {
            raw.wall_time_slot = Some(raw.push_value(sys::CUjit_option::CU_JIT_WALL_TIME, 0));
        }
        raw
    }
}

/// What the JIT compiler or linker wrote while it worked.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JitLog {
    /// The info log (`CU_JIT_INFO_LOG_BUFFER`): with [`JitOptions::log_verbose`], registers and
    /// memory per kernel.
    pub info: String,
    /// The error log (`CU_JIT_ERROR_LOG_BUFFER`): why compilation or linking failed.
    pub error: String,
    /// Milliseconds the compiler spent (`CU_JIT_WALL_TIME`); 0 for options that asked for
    /// nothing (no log capacity and no option set), which are not asked for the time either.
    pub wall_time_ms: f32,
}

/// Option arrays in the layout the driver takes, and the log buffers they point into.
///
/// The buffers are heap allocations owned here, so the pointers stay valid while this value
/// lives, even when it moves.
#[derive(Debug, Default)]
pub(crate) struct RawJitOptions {
    pub(crate) keys: Vec<sys::CUjit_option>,
    pub(crate) values: Vec<*mut c_void>,
    info: Vec<u8>,
    error: Vec<u8>,
    info_size_slot: Option<usize>,
    error_size_slot: Option<usize>,
    wall_time_slot: Option<usize>,
}

impl RawJitOptions {
    fn push(&mut self, key: sys::CUjit_option, value: *mut c_void) -> usize {
        self.keys.push(key);
        self.values.push(value);
        self.keys.len() - 1
    }

    // Integer options travel in the pointer slot itself, as the driver documents.
    fn push_value(&mut self, key: sys::CUjit_option, value: usize) -> usize {
        self.push(key, value as *mut c_void)
    }

    /// Number of options, as the driver's `unsigned int`.
    pub(crate) fn len(&self) -> u32 {
        u32::try_from(self.keys.len()).unwrap_or(0)
    }

    /// The key and value arrays as a driver call takes them, with [`len`](Self::len): null
    /// pointers for an empty list rather than an empty vector's dangling ones.
    pub(crate) fn arrays(&mut self) -> (*mut sys::CUjit_option, *mut *mut c_void) {
        if self.keys.is_empty() {
            (std::ptr::null_mut(), std::ptr::null_mut())
        } else {
            (self.keys.as_mut_ptr(), self.values.as_mut_ptr())
        }
    }

    /// The logs the driver wrote, after the call that took these options: none when no option
    /// was given (as in [`Module::from_cubin`](super::Module::from_cubin)'s first try), since no
    /// buffer was handed over.
    pub(crate) fn log(&self) -> JitLog {
        if self.keys.is_empty() {
            return JitLog::default();
        }
        let text = |buffer: &[u8], slot: Option<usize>| -> String {
            let written = slot.and_then(|s| self.values.get(s)).map_or(0, |v| *v as usize);
            let bytes = buffer.get(..written.min(buffer.len())).unwrap_or(&[]);
            let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
            String::from_utf8_lossy(&bytes[..end]).trim_end().to_string()
        };
        // The driver writes a float into the wall-time slot's storage.
        let wall_time_ms = self
            .wall_time_slot
            .and_then(|s| self.values.get(s))
            .map_or(0.0, |v| f32::from_bits((*v as usize & 0xFFFF_FFFF) as u32));
        JitLog {
            info: text(&self.info, self.info_size_slot),
            error: text(&self.error, self.error_size_slot),
            wall_time_ms,
        }
    }

    /// Turns a failed status into [`Error::Jit`] carrying the error log, or `Ok` with the logs.
    pub(crate) fn check(&self, status: crate::error::Status) -> Result<JitLog> {
        let log = self.log();
        match status.check() {
            Ok(()) => Ok(log),
            Err(Error::Driver { call, status }) => {
                let text = if log.error.is_empty() { log.info } else { log.error };
                Err(Error::Jit { call, status, log: text })
            }
            Err(other) => Err(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_that_ask_for_nothing_pass_no_option_and_others_ask_for_the_time() {
        let bare = JitOptions::new().with_log_capacity(0).to_raw();
        assert_eq!((bare.len(), bare.wall_time_slot), (0, None));
        let key = |raw: &RawJitOptions, slot: Option<usize>| slot.and_then(|s| raw.keys.get(s).copied());
        let logged = JitOptions::new().to_raw();
        assert_eq!(logged.len(), 5, "two logs, their sizes and the time");
        assert_eq!(key(&logged, logged.wall_time_slot), Some(sys::CUjit_option::CU_JIT_WALL_TIME));
        let set = JitOptions::new().with_log_capacity(0).max_registers(32).to_raw();
        assert_eq!(set.len(), 2);
        assert_eq!(key(&set, set.wall_time_slot), Some(sys::CUjit_option::CU_JIT_WALL_TIME));
    }

    #[test]
    fn targets_round_trip_through_the_raw_value() {
        for t in [
            JitTarget::Compute { major: 9, minor: 0 },
            JitTarget::ArchSpecific { major: 9, minor: 0 },
            JitTarget::FamilySpecific { major: 10, minor: 3 },
        ] {
            assert_eq!(JitTarget::try_from(t.as_raw()).ok(), Some(t));
        }
        assert_eq!(
            JitTarget::Compute { major: 8, minor: 6 }.as_raw(),
            sys::CUjit_target::CU_TARGET_COMPUTE_86
        );
        assert_eq!(
            JitTarget::ArchSpecific { major: 9, minor: 0 }.as_raw(),
            sys::CUjit_target::CU_TARGET_COMPUTE_90A
        );
        assert_eq!(
            JitTarget::FamilySpecific { major: 12, minor: 1 }.as_raw(),
            sys::CUjit_target::CU_TARGET_COMPUTE_121F
        );
        assert!(JitTarget::try_from(sys::CUjit_target(7)).is_err());
    }

    #[test]
    fn options_become_key_value_pairs_with_log_buffers() {
        let raw = JitOptions::new().max_registers(32).optimization_level(OptimizationLevel::O2).to_raw();
        let find =
            |k: sys::CUjit_option| raw.keys.iter().position(|x| *x == k).map(|i| raw.values[i] as usize);
        assert_eq!(find(sys::CUjit_option::CU_JIT_MAX_REGISTERS), Some(32));
        assert_eq!(find(sys::CUjit_option::CU_JIT_OPTIMIZATION_LEVEL), Some(2));
        assert_eq!(find(sys::CUjit_option::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES), Some(16 * 1024));
        assert_eq!(find(sys::CUjit_option::CU_JIT_TARGET), None);
        assert_eq!(raw.len() as usize, raw.values.len());
    }

    #[test]
    fn logs_are_read_up_to_the_size_the_driver_wrote() {
        let mut raw = JitOptions::new().with_log_capacity(32).to_raw();
        raw.info[..5].copy_from_slice(b"hello");
        raw.error[..3].copy_from_slice(b"bad");
        // What the driver does: write back the bytes used, including the terminator.
        raw.values[raw.info_size_slot.unwrap_or(0)] = 6 as *mut c_void;
        raw.values[raw.error_size_slot.unwrap_or(0)] = 4 as *mut c_void;
        let log = raw.log();
        assert_eq!(log.info, "hello");
        assert_eq!(log.error, "bad");
        assert!(OptimizationLevel::try_from(5).is_err());
        assert_eq!(OptimizationLevel::try_from(3).ok(), Some(OptimizationLevel::O3));
    }
}
