//! [`AsyncAllocator`]: buffers' memory from the driver's stream-ordered allocator, and the
//! stream-ordered release it shares with imported allocations.

use super::MemPool;
use crate::alloc::{Allocator, DeviceAllocation, StreamRef};
use crate::context::Context;
use crate::error::{Error, Result};

/// Stream-ordered memory from
/// [`cuMemAllocAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html)
/// (the device's current pool) or `cuMemAllocFromPoolAsync` (a given pool), freed with
/// `cuMemFreeAsync` on the stream it is given back on.
#[derive(Debug)]
pub struct AsyncAllocator {
    context: Context,
    pool: Option<MemPool>,
}

impl AsyncAllocator {
    /// Allocates from the device's current memory pool.
    pub fn new(context: &Context) -> Self {
        AsyncAllocator { context: context.clone(), pool: None }
    }

    /// Allocates from `pool`, which stays alive as long as this allocator.
    pub fn from_pool(context: &Context, pool: MemPool) -> Self {
        AsyncAllocator { context: context.clone(), pool: Some(pool) }
    }
}

// SAFETY: `cuMemAllocAsync`/`cuMemAllocFromPoolAsync` return device memory of the context's
// device, of the size asked, aligned as `cuMemAlloc` aligns, usable in stream order on the
// stream given and owned by the caller until `cuMemFreeAsync`, which is ordered after the work
// queued on the stream it is given back on (and after all of the context's work when given back
// without a stream).
unsafe impl Allocator for AsyncAllocator {
    fn context(&self) -> Option<&Context> {
        Some(&self.context)
    }

    fn allocate(&self, size: usize, stream: StreamRef<'_>) -> Result<DeviceAllocation> {
        if let Some(p) = self.pool.as_ref().filter(|p| !p.holds_device_memory()) {
            return Err(Error::invalid(
                "AsyncAllocator::allocate",
                format!(
                    "pool {:p} holds host or managed memory, and device buffers need device memory; \
                     allocate from a device's pool (MemPool::create, MemPool::device_default)",
                    p.as_raw()
                ),
            ));
        }
        self.context.enter()?;
        let mut ptr = 0;
        match &self.pool {
            // SAFETY: one out-parameter; the stream belongs to the current context (the
            // caller's contract on `stream`), the pool is alive.
            Some(p) => {
                unsafe { driver!(cuMemAllocFromPoolAsync(&mut ptr, size, p.as_raw(), stream.as_raw())) }?
            }
            // SAFETY: as above.
            None => unsafe { driver!(cuMemAllocAsync(&mut ptr, size, stream.as_raw())) }?,
        }
        Ok(DeviceAllocation { ptr, size, token: 0 })
    }

    unsafe fn deallocate(&self, allocation: DeviceAllocation, stream: StreamRef<'_>) -> Result<()> {
        // SAFETY: the caller gives back an allocation of this allocator, once, ordered on `stream`.
        unsafe { free_async(&self.context, allocation, stream) }
    }

    fn name(&self) -> &'static str {
        "cuMemAllocAsync"
    }
}

/// Gives `allocation` back with `cuMemFreeAsync`, ordered on `stream`; given back without a
/// stream (a pool releasing its cache, the C interface), it first waits for `context`'s work, as
/// work on streams that do not synchronize with the legacy stream may still use it.
///
/// A release: a deferred error pending in the context skips neither the wait nor the free.
///
/// # Safety
///
/// `allocation` is memory of the stream-ordered allocator in `context` (allocated or imported),
/// given back once, and no work that uses it is queued on another stream without being ordered
/// before `stream`.
pub(super) unsafe fn free_async(
    context: &Context,
    allocation: DeviceAllocation,
    stream: StreamRef<'_>,
) -> Result<()> {
    context.make_current()?;
    if stream.as_raw().is_null() {
        stream.wait_for_users(context)?;
    }
    // SAFETY: the caller gives back the allocation once, ordered on `stream`.
    unsafe { driver!(cuMemFreeAsync(allocation.ptr, stream.as_raw())) }
}
