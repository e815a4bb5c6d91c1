//! [`MemoryPool`]: CuPy's device memory pool, stream-aware.

use super::core::PoolCore;
use crate::alloc::{Allocator, DeviceAllocation, StreamEvents, StreamRef};
use crate::alloc::{DeviceAllocator, DriverEvents};
use crate::context::Context;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::stream::Stream;
use cuhost_driver_sys as sys;
use std::mem::ManuallyDrop;
use std::sync::Arc;

/// The environment variable that sets the default limit of new pools: a byte count (`"N"`) or
/// a share of the device's memory (`"N%"`).
pub const GPU_MEMORY_LIMIT_ENV: &str = "CUDA_CORE_GPU_MEMORY_LIMIT";

/// A limit on the bytes a pool holds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PoolLimit {
    /// No limit.
    None,
    /// At most this many bytes.
    Bytes(usize),
    /// At most this fraction (0 to 1) of the device's total memory.
    Fraction(f64),
}

impl PoolLimit {
    /// Parses the form of [`GPU_MEMORY_LIMIT_ENV`]: `"N"` bytes or `"N%"` of device memory.
    ///
    /// Text of neither form is an [`Error::InvalidArgument`] that quotes it.
    pub fn parse(text: &str) -> Result<PoolLimit> {
        let t = text.trim();
        let bad = || {
            Error::invalid(
                "PoolLimit::parse",
                format!("{t:?} is not a byte count (\"1073741824\") or a percentage (\"50%\")"),
            )
        };
        match t.strip_suffix('%') {
            Some(p) => {
                let percent: f64 = p.trim().parse().map_err(|_| bad())?;
                Ok(PoolLimit::Fraction(percent / 100.0))
            }
            None => t.parse().map(PoolLimit::Bytes).map_err(|_| bad()),
        }
    }

    /// The limit in bytes for a device of `total` bytes (0: none); bad fractions are errors.
    pub fn resolve(self, total: impl FnOnce() -> Result<usize>) -> Result<usize> {
        match self {
            PoolLimit::None => Ok(0),
            PoolLimit::Bytes(b) => Ok(b),
            PoolLimit::Fraction(f) if (0.0..=1.0).contains(&f) => Ok((total()? as f64 * f) as usize),
            PoolLimit::Fraction(f) => Err(Error::invalid(
                "MemoryPool::set_limit",
                format!("a fraction of device memory must be between 0 and 1, not {f}"),
            )),
        }
    }
}

/// A per-device cache of device memory, as CuPy's `MemoryPool`
/// ([CuPy](https://docs.cupy.dev/en/stable/reference/generated/cupy.cuda.MemoryPool.html)).
///
/// Requests are rounded up to 512 bytes and served best fit from the free blocks of the
/// stream they are made on, splitting larger blocks; freed blocks merge with free neighbours and
/// are reused by that stream at once, which is safe because work on one stream runs in order.
/// A buffer used on another stream is kept from reuse until that stream has passed the point
/// of use ([`DeviceBuffer::record_stream`](crate::memory::DeviceBuffer::record_stream)).
///
/// When the limit would be passed, or the upstream allocator is out of memory, the pool gives
/// back all its wholly free blocks and retries once before failing with
/// [`Error::OutOfMemory`].
///
/// All methods take `&self`; threads that allocate on different streams rarely contend.
pub struct MemoryPool {
    core: PoolCore,
    device: Option<Device>,
    /// Keeps the pool's context alive as long as the pool.
    context: Option<Context>,
}

impl std::fmt::Debug for MemoryPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryPool")
            .field("device", &self.device)
            .field("upstream", &self.core.upstream.name())
            .field("total_bytes", &self.core.total_bytes())
            .finish()
    }
}

impl MemoryPool {
    /// A pool of `cuMemAlloc` memory in `context`, with the default limit from
    /// [`GPU_MEMORY_LIMIT_ENV`] (a malformed value is an error).
    pub fn new(context: &Context) -> Result<MemoryPool> {
        MemoryPool::with_allocator(context, Arc::new(DeviceAllocator::new(context)))
    }

    /// A pool in `context` on top of `upstream`, with the default limit from
    /// [`GPU_MEMORY_LIMIT_ENV`].
    ///
    /// A malformed limit in the environment is an [`Error::InvalidArgument`], as is a
    /// percentage outside 0 to 100; reading the device's memory size for a percentage can fail
    /// with the driver's status.
    pub fn with_allocator(context: &Context, upstream: Arc<dyn Allocator>) -> Result<MemoryPool> {
        let mut core = PoolCore::new(upstream, Arc::new(DriverEvents::new(context)));
        let device = context.device();
        core.device_id = i32::try_from(device.ordinal()).unwrap_or(-1);
        let pool = MemoryPool { core, device: Some(device), context: Some(context.clone()) };
        if let Ok(text) = std::env::var(GPU_MEMORY_LIMIT_ENV) {
            pool.set_limit(PoolLimit::parse(&text)?)?;
        }
        Ok(pool)
    }

    /// A pool on `upstream` with events from `events`, tied to no device: for allocators and
    /// event sources of your own (a fraction limit is then an error). For the driver's events
    /// with an upstream of yours, use [`with_allocator`](Self::with_allocator).
    pub fn with_parts(upstream: Arc<dyn Allocator>, events: Arc<dyn StreamEvents>) -> MemoryPool {
        MemoryPool { core: PoolCore::new(upstream, events), device: None, context: None }
    }

    /// The device whose memory this pool holds, if it is tied to one.
    pub fn device(&self) -> Option<Device> {
        self.device
    }

    /// Allocates `bytes` (rounded up to a multiple of 512) for a buffer on a raw stream.
    #[inline]
    #[track_caller]
    pub(crate) fn allocate_on(&self, bytes: usize, stream: sys::CUstream) -> Result<DeviceAllocation> {
        self.core.malloc(bytes, stream)
    }

    /// Allocates `bytes` (> 0) for a buffer on `stream`, whose arena then holds a handle of the
    /// stream: the buffer borrows it through the uncounted copy returned, so that making and
    /// dropping a buffer touches no reference count.
    #[inline]
    #[track_caller]
    pub(crate) fn allocate_kept(
        &self,
        bytes: usize,
        stream: &Stream,
    ) -> Result<(DeviceAllocation, ManuallyDrop<Stream>)> {
        self.core.malloc_kept(bytes, stream)
    }

    /// Keeps `e`, an error met while giving memory back, in the pool's context (see
    /// [`Context::take_deferred_errors`]); a pool tied to no context prints it.
    pub(crate) fn defer(&self, e: Error) {
        match &self.context {
            Some(ctx) => ctx.defer(e),
            None => eprintln!("cuda-core: MemoryPool: {e}"),
        }
    }

    /// Gives a buffer's allocation back; with `recorded` streams, keeps it from reuse until an
    /// event recorded now on each of them has completed.
    #[inline(always)]
    #[track_caller]
    pub(crate) fn free_on(&self, allocation: DeviceAllocation, recorded: &[sys::CUstream]) -> Result<()> {
        self.core.free(allocation, recorded)
    }

    /// Gives back to the upstream allocator every free block that is a whole upstream
    /// allocation (never part of a split block), of `stream`'s arena or, with `None`, of all.
    ///
    /// Every such block leaves the pool's free blocks; the first error the upstream returned
    /// while giving them back is returned. A block whose release failed stays counted in
    /// [`total_bytes`](Self::total_bytes) (the upstream may still hold it), but is not given
    /// back again (an allocator's failed release gives the memory up).
    pub fn free_all_blocks(&self, stream: Option<&Stream>) -> Result<()> {
        self.core.free_all_blocks(stream.map(Stream::as_raw))
    }

    /// The number of free blocks held.
    pub fn n_free_blocks(&self) -> usize {
        self.core.n_free_blocks()
    }

    /// Bytes handed out and not yet reusable (buffers alive, or waiting on other streams).
    pub fn used_bytes(&self) -> usize {
        self.core.used_bytes()
    }

    /// Bytes held but free: `total_bytes() - used_bytes()`.
    pub fn free_bytes(&self) -> usize {
        self.core.total_bytes().saturating_sub(self.core.used_bytes())
    }

    /// Bytes obtained from the upstream allocator and not given back (including blocks whose
    /// release the upstream refused).
    pub fn total_bytes(&self) -> usize {
        self.core.total_bytes()
    }

    /// Sets the limit on [`total_bytes`](Self::total_bytes); a fraction outside 0..=1 is an
    /// error, and so is a fraction for a pool tied to no device.
    pub fn set_limit(&self, limit: PoolLimit) -> Result<()> {
        let bytes = limit.resolve(|| match self.device {
            Some(d) => d.total_memory(),
            None => Err(Error::invalid(
                "MemoryPool::set_limit",
                "this pool has no device; give the limit in bytes",
            )),
        })?;
        self.core.set_limit(bytes);
        Ok(())
    }

    /// The limit in bytes, or `None` when there is none.
    pub fn limit(&self) -> Option<usize> {
        Some(self.core.limit()).filter(|&l| l != 0)
    }

    /// Checks the pool's internal bookkeeping; for tests. Returns what is inconsistent.
    #[doc(hidden)]
    pub fn check_invariants(&self) -> Result<(), String> {
        self.core.check_invariants()
    }
}

// SAFETY: the pool hands each part of an upstream allocation (device memory of the kind and
// alignment the upstream's own contract gives, split at multiples of 512 bytes, so at least as
// aligned as `cuMemAlloc`) to one caller at a time, with at least the bytes asked; a block is
// reused only after it is given back, by the same stream (in order), or once the events recorded
// on the other streams report completion (`StreamEvents`'s contract).
unsafe impl Allocator for MemoryPool {
    fn context(&self) -> Option<&Context> {
        self.context.as_ref()
    }

    #[track_caller]
    fn allocate(&self, size: usize, stream: StreamRef<'_>) -> Result<DeviceAllocation> {
        self.core.malloc(size, stream.as_raw())
    }

    #[track_caller]
    unsafe fn deallocate(&self, allocation: DeviceAllocation, _stream: StreamRef<'_>) -> Result<()> {
        self.core.free(allocation, &[])
    }

    #[track_caller]
    unsafe fn deallocate_after(
        &self,
        allocation: DeviceAllocation,
        stream: &Stream,
        recorded: &[Stream],
    ) -> Result<()> {
        // The block goes back to the arena it came from once every stream has passed this point.
        match recorded {
            [] => self.core.free(allocation, &[stream.as_raw()]),
            [one] => self.core.free(allocation, &[stream.as_raw(), one.as_raw()]),
            many => {
                let raws: Vec<sys::CUstream> =
                    std::iter::once(stream).chain(many).map(Stream::as_raw).collect();
                self.core.free(allocation, &raws)
            }
        }
    }

    fn name(&self) -> &'static str {
        "MemoryPool"
    }
}
