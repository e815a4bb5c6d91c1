//! Occupancy: how many blocks or clusters of a kernel fit on the device at once, and which
//! block size fills it best.
//!
//! See the [Occupancy](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__OCCUPANCY.html)
//! section of the driver API. These are methods of [`Function`].

use crate::error::{Error, Result};
use crate::flags::flags;
use crate::launch::LaunchConfig;
use crate::module::Function;
use std::cell::Cell;
use std::ffi::c_int;
use std::mem::MaybeUninit;
use std::panic::{AssertUnwindSafe, catch_unwind};

flags! {
    /// Occupancy calculator flags (`CUoccupancy_flags`).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct OccupancyFlags: u32 {
        /// `CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE`: assume the L1/shared carveout the device
        /// defaults to, rather than the function's preference.
        const DISABLE_CACHING_OVERRIDE = 0x1;
    }
}

/// The result of the block-size calculator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockSize {
    /// The block size that reaches the highest occupancy.
    pub block_size: u32,
    /// The smallest grid that fills the device with blocks of that size.
    pub min_grid_size: u32,
}

fn to_int(operation: &'static str, what: &str, value: u32) -> Result<c_int> {
    c_int::try_from(value).map_err(|_| Error::invalid(operation, format!("{what} {value} is out of range")))
}

fn to_u32(value: c_int) -> u32 {
    u32::try_from(value).unwrap_or(0)
}

// The driver's block-size callback takes no user data, so the closure in use is reached
// through this thread's slot. The driver calls it on the calling thread, during the call.
type SharedMemoryFn<'a> = dyn FnMut(u32) -> usize + 'a;

thread_local! {
    static CALLBACK: Cell<Option<*mut SharedMemoryFn<'static>>> = const { Cell::new(None) };
    static CALLBACK_PANIC: Cell<Option<String>> = const { Cell::new(None) };
}

unsafe extern "C" fn shared_memory_trampoline(block_size: c_int) -> usize {
    let Some(f) = CALLBACK.with(Cell::get) else { return 0 };
    // SAFETY: the slot holds the closure of the call in progress on this thread, which
    // outlives the call, and nothing else uses it meanwhile.
    let f = unsafe { &mut *f };
    match catch_unwind(AssertUnwindSafe(|| f(u32::try_from(block_size).unwrap_or(0)))) {
        Ok(bytes) => bytes,
        Err(payload) => {
            let message = crate::error::panic_message(payload);
            CALLBACK_PANIC.with(|p| p.set(Some(message)));
            0
        }
    }
}

impl Function<'_> {
    /// How many blocks of `block_size` threads, each with `dynamic_shared_mem` bytes of
    /// dynamic shared memory, fit on one multiprocessor at once
    /// ([`cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__OCCUPANCY.html)).
    pub fn max_active_blocks_per_multiprocessor(
        &self,
        block_size: u32,
        dynamic_shared_mem: usize,
        flags: OccupancyFlags,
    ) -> Result<u32> {
        let op = "Function::max_active_blocks_per_multiprocessor";
        let block = to_int(op, "block size", block_size)?;
        let mut blocks = 0;
        // SAFETY: a live function and one out-parameter.
        unsafe {
            driver!(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
                &mut blocks,
                self.as_raw(),
                block,
                dynamic_shared_mem,
                flags.bits(),
            ))
        }?;
        Ok(to_u32(blocks))
    }

    /// The block size that gives the highest occupancy when every block uses
    /// `dynamic_shared_mem` bytes of dynamic shared memory, at most `block_size_limit` threads
    /// (0: the function's limit)
    /// ([`cuOccupancyMaxPotentialBlockSizeWithFlags`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__OCCUPANCY.html)).
    pub fn max_potential_block_size(
        &self,
        dynamic_shared_mem: usize,
        block_size_limit: u32,
        flags: OccupancyFlags,
    ) -> Result<BlockSize> {
        let op = "Function::max_potential_block_size";
        let limit = to_int(op, "block size limit", block_size_limit)?;
        let (mut grid, mut block) = (0, 0);
        // SAFETY: a live function, two out-parameters, no callback.
        unsafe {
            driver!(cuOccupancyMaxPotentialBlockSizeWithFlags(
                &mut grid,
                &mut block,
                self.as_raw(),
                None,
                dynamic_shared_mem,
                limit,
                flags.bits(),
            ))
        }?;
        Ok(BlockSize { block_size: to_u32(block), min_grid_size: to_u32(grid) })
    }

    /// Like [`max_potential_block_size`](Self::max_potential_block_size) for a kernel whose
    /// dynamic shared memory depends on its block size: `shared_mem_per_block(block_size)`
    /// gives the bytes a block of that size needs. The closure runs on this thread during the
    /// call; a panic in it is caught and returned as [`Error::CallbackPanicked`].
    pub fn max_potential_block_size_with(
        &self,
        shared_mem_per_block: impl FnMut(u32) -> usize,
        block_size_limit: u32,
        flags: OccupancyFlags,
    ) -> Result<BlockSize> {
        let op = "Function::max_potential_block_size_with";
        let limit = to_int(op, "block size limit", block_size_limit)?;
        let mut closure = shared_mem_per_block;
        let wide: &mut SharedMemoryFn<'_> = &mut closure;
        // SAFETY: only the lifetime is erased; the pointer is removed from the slot (restored
        // to the previous value) before this function returns, while the closure still lives.
        let erased: *mut SharedMemoryFn<'static> =
            unsafe { std::mem::transmute(wide as *mut SharedMemoryFn<'_>) };
        let previous = CALLBACK.with(|c| c.replace(Some(erased)));
        let (mut grid, mut block) = (0, 0);
        // SAFETY: a live function, two out-parameters, and a callback that reads this
        // thread's slot, set above.
        let status = unsafe {
            driver!(status: cuOccupancyMaxPotentialBlockSizeWithFlags(
                &mut grid,
                &mut block,
                self.as_raw(),
                Some(shared_memory_trampoline),
                0,
                limit,
                flags.bits(),
            ))
        };
        CALLBACK.with(|c| c.set(previous));
        if let Some(message) = CALLBACK_PANIC.with(Cell::take) {
            return Err(Error::CallbackPanicked { message });
        }
        status.check()?;
        Ok(BlockSize { block_size: to_u32(block), min_grid_size: to_u32(grid) })
    }

    /// How much dynamic shared memory each block can have when `blocks_per_multiprocessor`
    /// blocks of `block_size` threads share a multiprocessor
    /// ([`cuOccupancyAvailableDynamicSMemPerBlock`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__OCCUPANCY.html)).
    pub fn available_dynamic_shared_memory_per_block(
        &self,
        blocks_per_multiprocessor: u32,
        block_size: u32,
    ) -> Result<usize> {
        let op = "Function::available_dynamic_shared_memory_per_block";
        let blocks = to_int(op, "block count", blocks_per_multiprocessor)?;
        let block = to_int(op, "block size", block_size)?;
        let mut bytes = 0;
        // SAFETY: a live function and one out-parameter.
        unsafe {
            driver!(cuOccupancyAvailableDynamicSMemPerBlock(&mut bytes, self.as_raw(), blocks, block))
        }?;
        Ok(bytes)
    }

    /// The largest cluster size this function can launch with under `config` (its grid, block
    /// and shared memory; a cluster size in it is ignored)
    /// ([`cuOccupancyMaxPotentialClusterSize`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__OCCUPANCY.html)).
    pub fn max_potential_cluster_size(&self, config: &LaunchConfig) -> Result<u32> {
        let mut attrs = [const { MaybeUninit::uninit() }; crate::launch::MAX_ATTRIBUTES];
        let raw = config.raw_config(std::ptr::null_mut(), &mut attrs);
        let mut size = 0;
        // SAFETY: a live function; the configuration points at its initialised attributes.
        unsafe { driver!(cuOccupancyMaxPotentialClusterSize(&mut size, self.as_raw(), &raw)) }?;
        Ok(to_u32(size))
    }

    /// How many clusters of `config.cluster` blocks can be resident on the device at once
    /// ([`cuOccupancyMaxActiveClusters`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__OCCUPANCY.html)).
    /// `config` must set [`LaunchConfig::cluster`]: without it this is an
    /// [`Error::InvalidArgument`], checked before the call.
    pub fn max_active_clusters(&self, config: &LaunchConfig) -> Result<u32> {
        if config.cluster.is_none() {
            return Err(Error::invalid(
                "Function::max_active_clusters",
                "the launch configuration has no cluster dimensions; set LaunchConfig::cluster",
            ));
        }
        let mut attrs = [const { MaybeUninit::uninit() }; crate::launch::MAX_ATTRIBUTES];
        let raw = config.raw_config(std::ptr::null_mut(), &mut attrs);
        let mut clusters = 0;
        // SAFETY: a live function; the configuration points at its initialised attributes.
        unsafe { driver!(cuOccupancyMaxActiveClusters(&mut clusters, self.as_raw(), &raw)) }?;
        Ok(to_u32(clusters))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trampoline_calls_the_installed_closure_and_catches_panics() {
        let mut seen = Vec::new();
        let mut f = |b: u32| {
            seen.push(b);
            b as usize * 4
        };
        let wide: &mut SharedMemoryFn<'_> = &mut f;
        // SAFETY: the slot is cleared below while `f` still lives.
        let erased: *mut SharedMemoryFn<'static> =
            unsafe { std::mem::transmute(wide as *mut SharedMemoryFn<'_>) };
        CALLBACK.with(|c| c.set(Some(erased)));
        // SAFETY: called as the driver would, on this thread.
        assert_eq!(unsafe { shared_memory_trampoline(64) }, 256);
        CALLBACK.with(|c| c.set(None));
        assert_eq!(seen, [64]);
        // SAFETY: no closure installed: the trampoline answers 0.
        assert_eq!(unsafe { shared_memory_trampoline(64) }, 0);

        #[allow(clippy::panic)]
        let mut g = |_: u32| -> usize { std::panic::panic_any("too big") };
        let wide: &mut SharedMemoryFn<'_> = &mut g;
        // SAFETY: as above.
        let erased: *mut SharedMemoryFn<'static> =
            unsafe { std::mem::transmute(wide as *mut SharedMemoryFn<'_>) };
        CALLBACK.with(|c| c.set(Some(erased)));
        // SAFETY: as above.
        assert_eq!(unsafe { shared_memory_trampoline(32) }, 0);
        CALLBACK.with(|c| c.set(None));
        assert_eq!(CALLBACK_PANIC.with(Cell::take).as_deref(), Some("too big"));
    }
}
