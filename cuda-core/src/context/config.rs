//! Context settings: limits, cache configuration, stream priorities, API version, execution
//! affinity, flags, and the primary context's state.

use super::{Context, ContextFlags};
use crate::device::Device;
use crate::error::{Error, Result};
use cuhost_driver_sys as sys;

/// A per-context resource limit (`CUlimit`), for [`Context::limit`] and [`Context::set_limit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Limit {
    /// `CU_LIMIT_STACK_SIZE`: stack bytes per GPU thread.
    StackSize,
    /// `CU_LIMIT_PRINTF_FIFO_SIZE`: bytes of the FIFO device `printf` writes to.
    PrintfFifoSize,
    /// `CU_LIMIT_MALLOC_HEAP_SIZE`: bytes of the heap device `malloc` uses.
    MallocHeapSize,
    /// `CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH`: nesting depth of device-side synchronization.
    DevRuntimeSyncDepth,
    /// `CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT`: outstanding device-side launches.
    DevRuntimePendingLaunchCount,
    /// `CU_LIMIT_MAX_L2_FETCH_GRANULARITY`: L2 fetch granularity in bytes (0 to 128).
    MaxL2FetchGranularity,
    /// `CU_LIMIT_PERSISTING_L2_CACHE_SIZE`: bytes of L2 set aside for persisting accesses.
    PersistingL2CacheSize,
    /// `CU_LIMIT_SHMEM_SIZE`: shared memory size (read-only, CIG contexts).
    ShmemSize,
    /// `CU_LIMIT_CIG_ENABLED`: whether CUDA-in-graphics is enabled (read-only).
    CigEnabled,
    /// `CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED`: shared-memory fallback for CIG contexts.
    CigShmemFallbackEnabled,
}

impl Limit {
    /// The raw `CUlimit`.
    pub fn as_raw(self) -> sys::CUlimit {
        use sys::CUlimit as L;
        match self {
            Limit::StackSize => L::CU_LIMIT_STACK_SIZE,
            Limit::PrintfFifoSize => L::CU_LIMIT_PRINTF_FIFO_SIZE,
            Limit::MallocHeapSize => L::CU_LIMIT_MALLOC_HEAP_SIZE,
            Limit::DevRuntimeSyncDepth => L::CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH,
            Limit::DevRuntimePendingLaunchCount => L::CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT,
            Limit::MaxL2FetchGranularity => L::CU_LIMIT_MAX_L2_FETCH_GRANULARITY,
            Limit::PersistingL2CacheSize => L::CU_LIMIT_PERSISTING_L2_CACHE_SIZE,
            Limit::ShmemSize => L::CU_LIMIT_SHMEM_SIZE,
            Limit::CigEnabled => L::CU_LIMIT_CIG_ENABLED,
            Limit::CigShmemFallbackEnabled => L::CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED,
        }
    }
}

impl TryFrom<sys::CUlimit> for Limit {
    type Error = Error;
    fn try_from(raw: sys::CUlimit) -> Result<Limit> {
        use Limit::*;
        [
            StackSize,
            PrintfFifoSize,
            MallocHeapSize,
            DevRuntimeSyncDepth,
            DevRuntimePendingLaunchCount,
            MaxL2FetchGranularity,
            PersistingL2CacheSize,
            ShmemSize,
            CigEnabled,
            CigShmemFallbackEnabled,
        ]
        .into_iter()
        .find(|l| l.as_raw() == raw)
        .ok_or_else(|| Error::invalid("Limit::try_from", format!("unknown CUlimit value {}", raw.0)))
    }
}

/// The preferred split between L1 cache and shared memory (`CUfunc_cache`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CacheConfig {
    /// `CU_FUNC_CACHE_PREFER_NONE`: no preference.
    PreferNone,
    /// `CU_FUNC_CACHE_PREFER_SHARED`: larger shared memory.
    PreferShared,
    /// `CU_FUNC_CACHE_PREFER_L1`: larger L1 cache.
    PreferL1,
    /// `CU_FUNC_CACHE_PREFER_EQUAL`: equal L1 and shared memory.
    PreferEqual,
}

impl CacheConfig {
    /// The raw `CUfunc_cache`.
    pub fn as_raw(self) -> sys::CUfunc_cache {
        use sys::CUfunc_cache as C;
        match self {
            CacheConfig::PreferNone => C::CU_FUNC_CACHE_PREFER_NONE,
            CacheConfig::PreferShared => C::CU_FUNC_CACHE_PREFER_SHARED,
            CacheConfig::PreferL1 => C::CU_FUNC_CACHE_PREFER_L1,
            CacheConfig::PreferEqual => C::CU_FUNC_CACHE_PREFER_EQUAL,
        }
    }
}

impl TryFrom<sys::CUfunc_cache> for CacheConfig {
    type Error = Error;
    fn try_from(raw: sys::CUfunc_cache) -> Result<CacheConfig> {
        use CacheConfig::*;
        [PreferNone, PreferShared, PreferL1, PreferEqual].into_iter().find(|c| c.as_raw() == raw).ok_or_else(
            || Error::invalid("CacheConfig::try_from", format!("unknown CUfunc_cache value {}", raw.0)),
        )
    }
}

/// An execution affinity of a context (`CUexecAffinityParam`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExecAffinity {
    /// `CU_EXEC_AFFINITY_TYPE_SM_COUNT`: the number of SMs the context may use.
    SmCount(u32),
}

/// The state of a device's primary context.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PrimaryContextState {
    /// Its flags (applied when it is next created).
    pub flags: ContextFlags,
    /// Whether it exists now (has been retained and not fully released).
    pub active: bool,
}

impl Context {
    /// A resource limit of this context
    /// ([`cuCtxGetLimit`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html)).
    pub fn limit(&self, limit: Limit) -> Result<usize> {
        self.enter()?;
        let mut v = 0;
        // SAFETY: one out-parameter; this context is current.
        unsafe { driver!(cuCtxGetLimit(&mut v, limit.as_raw())) }?;
        Ok(v)
    }

    /// Sets a resource limit of this context
    /// ([`cuCtxSetLimit`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html)).
    /// The driver may round the value; read it back with [`Context::limit`].
    pub fn set_limit(&self, limit: Limit, value: usize) -> Result<()> {
        self.enter()?;
        // SAFETY: plain values; this context is current.
        unsafe { driver!(cuCtxSetLimit(limit.as_raw(), value)) }
    }

    /// The preferred L1/shared-memory split
    /// ([`cuCtxGetCacheConfig`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html)).
    pub fn cache_config(&self) -> Result<CacheConfig> {
        self.enter()?;
        let mut c = sys::CUfunc_cache::CU_FUNC_CACHE_PREFER_NONE;
        // SAFETY: one out-parameter; this context is current.
        unsafe { driver!(cuCtxGetCacheConfig(&mut c)) }?;
        CacheConfig::try_from(c)
    }

    /// Sets the preferred L1/shared-memory split
    /// ([`cuCtxSetCacheConfig`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html)).
    pub fn set_cache_config(&self, config: CacheConfig) -> Result<()> {
        self.enter()?;
        // SAFETY: a valid enumerator; this context is current.
        unsafe { driver!(cuCtxSetCacheConfig(config.as_raw())) }
    }

    /// The stream priorities this context allows, as `(least, greatest)`; numerically the
    /// greatest priority is the smallest number, e.g. `(0, -5)`
    /// ([`cuCtxGetStreamPriorityRange`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html)).
    pub fn stream_priority_range(&self) -> Result<(i32, i32)> {
        self.enter()?;
        let (mut least, mut greatest) = (0, 0);
        // SAFETY: two out-parameters; this context is current.
        unsafe { driver!(cuCtxGetStreamPriorityRange(&mut least, &mut greatest)) }?;
        Ok((least, greatest))
    }

    /// The context's API version, e.g. `3020`
    /// ([`cuCtxGetApiVersion`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html)).
    pub fn api_version(&self) -> Result<u32> {
        self.take_deferred()?;
        let mut v = 0;
        // SAFETY: the context is alive; one out-parameter.
        unsafe { driver!(cuCtxGetApiVersion(self.as_raw(), &mut v)) }?;
        Ok(v)
    }

    /// The context's unique id
    /// ([`cuCtxGetId`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html)).
    pub fn id(&self) -> Result<u64> {
        let mut id = 0;
        // SAFETY: the context is alive; one out-parameter.
        unsafe { driver!(cuCtxGetId(self.as_raw(), &mut id)) }?;
        Ok(id)
    }

    /// The context's flags
    /// ([`cuCtxGetFlags`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html)).
    pub fn flags(&self) -> Result<ContextFlags> {
        self.enter()?;
        let mut f = 0;
        // SAFETY: one out-parameter; this context is current.
        unsafe { driver!(cuCtxGetFlags(&mut f)) }?;
        Ok(ContextFlags::from_bits_retain(f))
    }

    /// Sets the context's flags (scheduling policy and the like)
    /// ([`cuCtxSetFlags`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html)).
    pub fn set_flags(&self, flags: ContextFlags) -> Result<()> {
        self.enter()?;
        // SAFETY: plain value; this context is current.
        unsafe { driver!(cuCtxSetFlags(flags.bits())) }
    }

    /// The SM-count execution affinity of the context
    /// ([`cuCtxGetExecAffinity`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html)).
    pub fn exec_affinity(&self) -> Result<ExecAffinity> {
        self.enter()?;
        // SAFETY: a plain C struct; all zeroes is a valid value.
        let mut p: sys::CUexecAffinityParam = unsafe { std::mem::zeroed() };
        // SAFETY: one out-parameter; this context is current.
        unsafe {
            driver!(cuCtxGetExecAffinity(&mut p, sys::CUexecAffinityType::CU_EXEC_AFFINITY_TYPE_SM_COUNT))
        }?;
        // SAFETY: the SM-count member is the one the driver wrote for this type.
        Ok(ExecAffinity::SmCount(unsafe { p.param.smCount.val }))
    }

    /// Resets all persisting lines in the L2 cache to normal
    /// ([`cuCtxResetPersistingL2Cache`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html)).
    pub fn reset_persisting_l2_cache(&self) -> Result<()> {
        self.enter()?;
        // SAFETY: no arguments; this context is current.
        unsafe { driver!(cuCtxResetPersistingL2Cache()) }
    }

    /// The flags and activity of a device's primary context
    /// ([`cuDevicePrimaryCtxGetState`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PRIMARY__CTX.html)).
    pub fn primary_state(device: &Device) -> Result<PrimaryContextState> {
        crate::device::init()?;
        let (mut flags, mut active) = (0, 0);
        // SAFETY: two out-parameters.
        unsafe { driver!(cuDevicePrimaryCtxGetState(device.as_raw(), &mut flags, &mut active)) }?;
        Ok(PrimaryContextState { flags: ContextFlags::from_bits_retain(flags), active: active != 0 })
    }

    /// Sets the flags of a device's primary context
    /// ([`cuDevicePrimaryCtxSetFlags`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PRIMARY__CTX.html)).
    pub fn set_primary_flags(device: &Device, flags: ContextFlags) -> Result<()> {
        crate::device::init()?;
        // SAFETY: plain values.
        unsafe { driver!(cuDevicePrimaryCtxSetFlags(device.as_raw(), flags.bits())) }
    }

    /// Destroys all allocations and resets all state of a device's primary context
    /// ([`cuDevicePrimaryCtxReset`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PRIMARY__CTX.html)).
    ///
    /// # Safety
    ///
    /// Every stream, event, buffer and module made in the primary context becomes dangling:
    /// none of them may be used (or dropped, which would free them a second time) afterwards.
    /// The kernels that `compile::kernel` keeps loaded in the primary context are among them:
    /// call `compile::forget_loaded_kernels` first, and drop the ones the application holds.
    pub unsafe fn reset_primary(device: &Device) -> Result<()> {
        crate::device::init()?;
        // SAFETY: the caller guarantees nothing made in the context is used again.
        unsafe { driver!(cuDevicePrimaryCtxReset(device.as_raw())) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_convert_both_ways() {
        for l in [Limit::StackSize, Limit::MallocHeapSize, Limit::CigShmemFallbackEnabled] {
            assert_eq!(Limit::try_from(l.as_raw()).ok(), Some(l));
        }
        assert!(Limit::try_from(sys::CUlimit(1000)).is_err());
        for c in [
            CacheConfig::PreferNone,
            CacheConfig::PreferShared,
            CacheConfig::PreferL1,
            CacheConfig::PreferEqual,
        ] {
            assert_eq!(CacheConfig::try_from(c.as_raw()).ok(), Some(c));
        }
        assert!(CacheConfig::try_from(sys::CUfunc_cache(77)).is_err());
    }
}
