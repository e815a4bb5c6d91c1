//! A kernel in a loaded module: its attributes and cache and shared-memory configuration.

use super::LoadedCode;
use super::ParamLayout;
use super::driver_string;
pub use crate::context::CacheConfig;
use crate::error::{Error, Result};
use cuhost_driver_sys as sys;
use std::marker::PhantomData;
use std::sync::Arc;

/// A kernel (`CUfunction`) of a [`Module`](super::Module) or a [`Kernel`](super::Kernel) in one
/// context. It borrows what it came from, so it cannot outlive the loaded code.
///
/// Launch it with [`Function::launch`](crate::launch); read its resource use with
/// [`Function::attribute`] and the typed accessors; size launches with the occupancy calls
/// ([`crate::occupancy`]).
#[derive(Clone, Copy, Debug)]
pub struct Function<'m> {
    raw: sys::CUfunction,
    /// The loaded code of the module it was looked up in, which a captured launch hands to the
    /// capture's graph; none for functions of libraries and functions adopted from raw handles.
    code: Option<&'m Arc<LoadedCode>>,
    // Read once when the function is looked up so that a launch can check its block size
    // and its arguments without a driver call.
    max_threads_per_block: u32,
    params: ParamLayout,
    _code: PhantomData<&'m ()>,
}

// SAFETY: a CUfunction may be used from any thread; the driver synchronizes access to it.
unsafe impl Send for Function<'_> {}
// SAFETY: as above.
unsafe impl Sync for Function<'_> {}

/// The attributes of a function (`CUfunction_attribute`), for [`Function::attribute`] and
/// [`Function::set_attribute`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FunctionAttribute {
    /// `CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`: the largest block this function can launch with.
    MaxThreadsPerBlock,
    /// `CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES`: statically allocated shared memory.
    SharedSizeBytes,
    /// `CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES`: user constant memory.
    ConstSizeBytes,
    /// `CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES`: local memory per thread.
    LocalSizeBytes,
    /// `CU_FUNC_ATTRIBUTE_NUM_REGS`: registers per thread.
    NumRegs,
    /// `CU_FUNC_ATTRIBUTE_PTX_VERSION`: the virtual architecture the function's PTX was
    /// compiled for, major*10+minor (90 for `compute_90`); not the PTX ISA version.
    PtxVersion,
    /// `CU_FUNC_ATTRIBUTE_BINARY_VERSION`: the real architecture of the binary that runs,
    /// major*10+minor (90 for `sm_90`).
    BinaryVersion,
    /// `CU_FUNC_ATTRIBUTE_CACHE_MODE_CA`: compiled with `-Xptxas --dlcm=ca`.
    CacheModeCa,
    /// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`: the most dynamic shared memory a launch may ask for (settable).
    MaxDynamicSharedSizeBytes,
    /// `CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT`: preferred shared-memory share of L1, in percent (settable).
    PreferredSharedMemoryCarveout,
    /// `CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET`: the function needs a cluster size at launch.
    ClusterSizeMustBeSet,
    /// `CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH`.
    RequiredClusterWidth,
    /// `CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT`.
    RequiredClusterHeight,
    /// `CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH`.
    RequiredClusterDepth,
    /// `CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED` (settable).
    NonPortableClusterSizeAllowed,
    /// `CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE` (settable).
    ClusterSchedulingPolicyPreference,
}

impl FunctionAttribute {
    /// The raw attribute.
    pub fn as_raw(self) -> sys::CUfunction_attribute {
        sys::CUfunction_attribute(self as u32)
    }
}

impl TryFrom<sys::CUfunction_attribute> for FunctionAttribute {
    type Error = Error;
    fn try_from(raw: sys::CUfunction_attribute) -> Result<Self> {
        use FunctionAttribute::*;
        const ALL: [FunctionAttribute; 16] = [
            MaxThreadsPerBlock,
            SharedSizeBytes,
            ConstSizeBytes,
            LocalSizeBytes,
            NumRegs,
            PtxVersion,
            BinaryVersion,
            CacheModeCa,
            MaxDynamicSharedSizeBytes,
            PreferredSharedMemoryCarveout,
            ClusterSizeMustBeSet,
            RequiredClusterWidth,
            RequiredClusterHeight,
            RequiredClusterDepth,
            NonPortableClusterSizeAllowed,
            ClusterSchedulingPolicyPreference,
        ];
        ALL.get(raw.0 as usize).copied().ok_or_else(|| {
            Error::invalid("FunctionAttribute::try_from", format!("unknown function attribute {}", raw.0))
        })
    }
}

/// Shared-memory bank size (`CUsharedconfig`). Devices since Volta have a fixed bank size and
/// ignore it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SharedMemoryConfig {
    /// `CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE`.
    DefaultBankSize,
    /// `CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE`.
    FourByteBankSize,
    /// `CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE`.
    EightByteBankSize,
}

impl TryFrom<sys::CUsharedconfig> for SharedMemoryConfig {
    type Error = Error;
    fn try_from(raw: sys::CUsharedconfig) -> Result<Self> {
        [Self::DefaultBankSize, Self::FourByteBankSize, Self::EightByteBankSize]
            .get(raw.0 as usize)
            .copied()
            .ok_or_else(|| {
                Error::invalid("SharedMemoryConfig::try_from", format!("unknown bank size {}", raw.0))
            })
    }
}

impl<'m> Function<'m> {
    /// Wraps a raw function, reading its block-size limit
    /// ([`cuFuncGetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html)) and its parameter layout
    /// ([`cuFuncGetParamInfo`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html), see [`Function::param_info`]), which launches are
    /// checked against. A driver that cannot report the layout, or a function that lazy
    /// loading has not loaded yet, leaves launches unchecked.
    ///
    /// # Errors
    ///
    /// The driver's status when it cannot read the limit of a loaded function. Layout queries
    /// never fail it: a layout the driver cannot report leaves launches unchecked.
    ///
    /// # Safety
    ///
    /// `raw` must be a live function that stays loaded for `'m`.
    pub unsafe fn from_raw(raw: sys::CUfunction) -> Result<Function<'m>> {
        // SAFETY: passed on.
        unsafe { Function::from_raw_counted(raw, None) }
    }

    /// [`Function::from_raw`] for a function whose parameter count is known from its PTX: its
    /// layout is read without asking past the last parameter.
    ///
    /// # Safety
    ///
    /// As for [`Function::from_raw`]. `count` is the function's parameter count as its PTX
    /// declares it; a wrong one only makes the launch check refuse right arguments or check
    /// nothing (launches are `unsafe` whatever the check says), so it is no condition of this
    /// function's safety.
    pub(crate) unsafe fn from_raw_counted(
        raw: sys::CUfunction,
        count: Option<usize>,
    ) -> Result<Function<'m>> {
        let mut f = Function {
            raw,
            code: None,
            max_threads_per_block: 0,
            params: ParamLayout::UNKNOWN,
            _code: PhantomData,
        };
        let mut value = 0;
        // SAFETY: a live function and one out-parameter.
        let status = unsafe {
            driver!(status: cuFuncGetAttribute(&mut value, FunctionAttribute::MaxThreadsPerBlock.as_raw(), raw))
        };
        // Under lazy loading an enumerated function may not be loaded yet; its limit stays
        // unknown (0) and the driver checks the block size at launch instead. Its layout stays
        // unknown too, rather than be read from a function the driver has not loaded.
        if !status.is(sys::CUresult::CUDA_ERROR_FUNCTION_NOT_LOADED) {
            status.check()?;
            f.max_threads_per_block = u32::try_from(value).unwrap_or(0);
            let known = |out: &mut usize| match count {
                Some(n) => {
                    *out = n;
                    sys::CUresult::CUDA_SUCCESS
                }
                None => super::params::function_param_count(raw, out),
            };
            f.params = ParamLayout::read(known, |index, offset, size| {
                // SAFETY: a live function and two out-parameters.
                unsafe { sys::cuFuncGetParamInfo(raw, index, offset, size) }
            });
        }
        Ok(f)
    }

    /// The same function, knowing the loaded code of its module (`code`).
    pub(crate) fn loaded_from(mut self, code: &'m Arc<LoadedCode>) -> Function<'m> {
        self.code = Some(code);
        self
    }

    /// The loaded code of the module the function was looked up in, if known.
    #[inline]
    pub(crate) fn loaded_code(&self) -> Option<&'m Arc<LoadedCode>> {
        self.code
    }

    /// The same function with its lifetime dropped, for a handle that keeps the code loaded
    /// itself.
    ///
    /// # Safety
    ///
    /// The function must stay loaded for as long as the result (and every copy of it) is used.
    pub(crate) unsafe fn detached(self) -> Function<'static> {
        Function {
            raw: self.raw,
            // SAFETY: the caller keeps the code loaded for as long as the result is used; the
            // handle that does so holds the module, in which the reference points.
            code: self.code.map(|c| unsafe { &*std::ptr::from_ref(c) }),
            max_threads_per_block: self.max_threads_per_block,
            params: self.params,
            _code: PhantomData,
        }
    }

    /// The raw handle of the module the function belongs to
    /// ([`cuFuncGetModule`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html)):
    /// for code that holds only the function, such as one adopted from a raw handle. A
    /// function of a library kernel has the library's module in its context. Fails with the
    /// driver's status when it refuses the query.
    pub fn module_raw(&self) -> Result<sys::CUmodule> {
        let mut module = std::ptr::null_mut();
        // SAFETY: the function is live while `self` borrows its code; one out-parameter.
        unsafe { driver!(cuFuncGetModule(&mut module, self.raw)) }?;
        Ok(module)
    }

    /// The raw `CUfunction`.
    #[inline]
    pub fn as_raw(&self) -> sys::CUfunction {
        self.raw
    }

    /// The largest block this function launches with
    /// ([`cuFuncGetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html)
    /// with `CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`): the value read when the function was
    /// looked up, without a call; for a function that lazy loading had not loaded then (one
    /// enumerated from a module), the function is loaded now and the driver asked.
    ///
    /// # Errors
    ///
    /// As [`Function::attribute`]: the driver's status when the function cannot be loaded or
    /// the query is refused.
    #[inline]
    pub fn max_threads_per_block(&self) -> Result<u32> {
        match self.max_threads_per_block {
            0 => self.max_threads_per_block_loaded(),
            known => Ok(known),
        }
    }

    #[cold]
    fn max_threads_per_block_loaded(&self) -> Result<u32> {
        let value = self.attribute(FunctionAttribute::MaxThreadsPerBlock)?;
        u32::try_from(value).map_err(|_| {
            Error::invalid("Function::max_threads_per_block", format!("the driver reports {value} threads"))
        })
    }

    /// The block-size limit read when the function was looked up (0: not loaded then, the
    /// driver checks the launch), for the launch check, which makes no driver call.
    #[inline]
    pub(crate) fn launch_limit(&self) -> u32 {
        self.max_threads_per_block
    }

    /// The parameter layout read when the function was looked up.
    #[inline]
    pub(crate) fn param_layout(&self) -> &ParamLayout {
        &self.params
    }

    /// One attribute
    /// ([`cuFuncGetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html)).
    /// A function that lazy loading has not loaded yet is loaded first.
    pub fn attribute(&self, attribute: FunctionAttribute) -> Result<i32> {
        let mut value = 0;
        // SAFETY: a live function and one out-parameter.
        let mut status =
            unsafe { driver!(status: cuFuncGetAttribute(&mut value, attribute.as_raw(), self.raw)) };
        if status.is(sys::CUresult::CUDA_ERROR_FUNCTION_NOT_LOADED) {
            self.load()?;
            // SAFETY: as above.
            status = unsafe { driver!(status: cuFuncGetAttribute(&mut value, attribute.as_raw(), self.raw)) };
        }
        status.check()?;
        Ok(value)
    }

    /// Sets one attribute
    /// ([`cuFuncSetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html));
    /// only those marked settable in [`FunctionAttribute`] are accepted by the driver.
    pub fn set_attribute(&mut self, attribute: FunctionAttribute, value: i32) -> Result<()> {
        // SAFETY: a live function.
        unsafe { driver!(cuFuncSetAttribute(self.raw, attribute.as_raw(), value)) }
    }

    /// Registers per thread.
    ///
    /// This and the other attribute getters below fail as [`Function::attribute`] does: with
    /// the driver's status when it refuses the query, or when a lazily loaded function cannot
    /// be loaded.
    pub fn num_regs(&self) -> Result<i32> {
        self.attribute(FunctionAttribute::NumRegs)
    }

    /// Statically allocated shared memory, in bytes; fails as [`Function::attribute`] does.
    pub fn shared_size_bytes(&self) -> Result<i32> {
        self.attribute(FunctionAttribute::SharedSizeBytes)
    }

    /// Local memory per thread, in bytes; fails as [`Function::attribute`] does.
    pub fn local_size_bytes(&self) -> Result<i32> {
        self.attribute(FunctionAttribute::LocalSizeBytes)
    }

    /// User constant memory, in bytes; fails as [`Function::attribute`] does.
    pub fn const_size_bytes(&self) -> Result<i32> {
        self.attribute(FunctionAttribute::ConstSizeBytes)
    }

    /// The virtual architecture the function's PTX was compiled for, as major*10+minor: 90
    /// for code compiled for `compute_90` (NVRTC's `--gpu-architecture`, nvcc's `-arch`). This
    /// is what the driver returns for `CU_FUNC_ATTRIBUTE_PTX_VERSION`: a target architecture,
    /// not the PTX ISA version (the `.version 8.x` line of the PTX). Fails as
    /// [`Function::attribute`] does.
    pub fn ptx_version(&self) -> Result<i32> {
        self.attribute(FunctionAttribute::PtxVersion)
    }

    /// The real architecture of the binary the driver runs (loaded from a CUBIN or compiled from
    /// PTX), as major*10+minor: 90 for `sm_90`. Fails as [`Function::attribute`] does.
    pub fn binary_version(&self) -> Result<i32> {
        self.attribute(FunctionAttribute::BinaryVersion)
    }

    /// The most dynamic shared memory a launch may ask for, in bytes; fails as
    /// [`Function::attribute`] does.
    pub fn max_dynamic_shared_size_bytes(&self) -> Result<i32> {
        self.attribute(FunctionAttribute::MaxDynamicSharedSizeBytes)
    }

    /// Allows launches with up to `bytes` of dynamic shared memory (past the 48 KiB default,
    /// up to the device's opt-in limit).
    ///
    /// A value past `i32::MAX` is an [`Error::InvalidArgument`]; one past the device's opt-in limit
    /// ([`Device::max_shared_memory_per_block_optin`](crate::device::Device::max_shared_memory_per_block_optin)) is
    /// refused by the driver (`CUDA_ERROR_INVALID_VALUE`).
    pub fn set_max_dynamic_shared_size_bytes(&mut self, bytes: u32) -> Result<()> {
        let value = i32::try_from(bytes).map_err(|_| {
            Error::invalid(
                "Function::set_max_dynamic_shared_size_bytes",
                format!("{bytes} bytes is out of range"),
            )
        })?;
        self.set_attribute(FunctionAttribute::MaxDynamicSharedSizeBytes, value)
    }

    /// Prefers `percent` of the unified L1/shared storage as shared memory (0 to 100; a hint).
    ///
    /// A percentage over 100 is an [`Error::InvalidArgument`], checked before the call.
    pub fn set_preferred_shared_memory_carveout(&mut self, percent: u32) -> Result<()> {
        if percent > 100 {
            return Err(Error::invalid(
                "Function::set_preferred_shared_memory_carveout",
                format!("carveout is a percentage from 0 to 100, got {percent}"),
            ));
        }
        self.set_attribute(FunctionAttribute::PreferredSharedMemoryCarveout, percent as i32)
    }

    /// Sets the preferred cache configuration
    /// ([`cuFuncSetCacheConfig`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html)).
    pub fn set_cache_config(&mut self, config: CacheConfig) -> Result<()> {
        // SAFETY: a live function.
        unsafe { driver!(cuFuncSetCacheConfig(self.raw, config.as_raw())) }
    }

    /// Sets the shared-memory bank size
    /// ([`cuFuncSetSharedMemConfig`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC__DEPRECATED.html),
    /// deprecated: current devices ignore it).
    pub fn set_shared_memory_config(&mut self, config: SharedMemoryConfig) -> Result<()> {
        // SAFETY: a live function.
        unsafe { driver!(cuFuncSetSharedMemConfig(self.raw, sys::CUsharedconfig(config as u32))) }
    }

    /// The function's name as the module has it (mangled for C++)
    /// ([`cuFuncGetName`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html)).
    pub fn name(&self) -> Result<String> {
        let mut text = std::ptr::null();
        // SAFETY: a live function and one out-parameter; the string lives with the function.
        unsafe { driver!(cuFuncGetName(&mut text, self.raw)) }?;
        Ok(driver_string(text))
    }

    /// Offset and size in bytes of parameter `index`, or `None` past the last one
    /// ([`cuFuncGetParamInfo`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html)).
    pub fn param_info(&self, index: usize) -> Result<Option<(usize, usize)>> {
        let (mut offset, mut size) = (0, 0);
        // SAFETY: a live function and two out-parameters.
        let status = unsafe { driver!(status: cuFuncGetParamInfo(self.raw, index, &mut offset, &mut size)) };
        if status.is(sys::CUresult::CUDA_ERROR_INVALID_VALUE) {
            return Ok(None);
        }
        status.check()?;
        Ok(Some((offset, size)))
    }

    /// Loads the function now if lazy loading deferred it
    /// ([`cuFuncLoad`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html)).
    pub fn load(&self) -> Result<()> {
        // SAFETY: a live function.
        unsafe { driver!(cuFuncLoad(self.raw)) }
    }

    /// Whether the function is loaded on the device
    /// ([`cuFuncIsLoaded`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXEC.html)).
    pub fn is_loaded(&self) -> Result<bool> {
        let mut state = sys::CUfunctionLoadingState::CU_FUNCTION_LOADING_STATE_UNLOADED;
        // SAFETY: a live function and one out-parameter.
        unsafe { driver!(cuFuncIsLoaded(&mut state, self.raw)) }?;
        Ok(state == sys::CUfunctionLoadingState::CU_FUNCTION_LOADING_STATE_LOADED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_convert_both_ways() {
        for i in 0..16 {
            let a = FunctionAttribute::try_from(sys::CUfunction_attribute(i));
            assert_eq!(a.map(FunctionAttribute::as_raw).ok(), Some(sys::CUfunction_attribute(i)));
        }
        assert_eq!(
            FunctionAttribute::NumRegs.as_raw(),
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_NUM_REGS
        );
        assert_eq!(
            FunctionAttribute::ClusterSchedulingPolicyPreference.as_raw(),
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE
        );
        assert!(FunctionAttribute::try_from(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX).is_err());
        assert!(SharedMemoryConfig::try_from(sys::CUsharedconfig(3)).is_err());
    }
}
