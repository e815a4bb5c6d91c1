//! [`MemoryPool`]: CuPy's device memory pool, stream-aware.

use super::allocator::{Allocator, DeviceAllocation, StreamEvents, StreamRef};
use super::core::PoolCore;
use super::upstream::{DeviceAllocator, DriverEvents};
use crate::memory::{DeviceView, DeviceViewMut};
use crate::{Context, Device, Error, Result, Stream};
use bytemuck::Pod;
use cuda_driver_sys as sys;
use std::sync::{Arc, Mutex, OnceLock};

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
/// of use ([`PoolBuffer::record_stream`]).
///
/// When the limit would be passed, or the upstream allocator is out of memory, the pool gives
/// back all its wholly free blocks and retries once before failing with
/// [`Error::OutOfMemory`].
///
/// All methods take `&self`; threads that allocate on different streams rarely contend.
pub struct MemoryPool {
    core: PoolCore,
    device: Option<Device>,
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

    /// A pool in `context` on top of `upstream`.
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
    /// event sources of your own (a fraction limit is then an error).
    pub fn with_parts(upstream: Arc<dyn Allocator>, events: Arc<dyn StreamEvents>) -> MemoryPool {
        MemoryPool { core: PoolCore::new(upstream, events), device: None, context: None }
    }

    /// The device whose memory this pool holds, if it is tied to one.
    pub fn device(&self) -> Option<Device> {
        self.device
    }

    /// Allocates `size` bytes (rounded up to a multiple of 512) for use on `stream`; a size of
    /// 0 gives an empty buffer without touching the pool.
    #[inline]
    #[track_caller]
    pub fn malloc(&self, size: usize, stream: &Stream) -> Result<PoolBuffer<'_>> {
        let raw = stream.as_raw();
        let allocation = self.core.malloc(size, raw)?;
        Ok(PoolBuffer { pool: self, allocation, size, stream: raw as usize, recorded: Vec::new() })
    }

    /// Gives back to the upstream allocator every free block that is a whole upstream
    /// allocation (never part of a split block), of `stream`'s arena or, with `None`, of all.
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

    /// Bytes obtained from the upstream allocator and not given back.
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

    #[inline]
    #[track_caller]
    fn free_buffer(&self, allocation: DeviceAllocation, recorded: &[Stream]) -> Result<()> {
        match recorded {
            [] => self.core.free(allocation, &[]),
            [one] => self.core.free(allocation, &[one.as_raw()]),
            many => {
                let raws: Vec<sys::CUstream> = many.iter().map(Stream::as_raw).collect();
                self.core.free(allocation, &raws)
            }
        }
    }
}

impl Allocator for MemoryPool {
    #[track_caller]
    fn allocate(&self, size: usize, stream: StreamRef<'_>) -> Result<DeviceAllocation> {
        self.core.malloc(size, stream.as_raw())
    }

    #[track_caller]
    unsafe fn deallocate(&self, allocation: DeviceAllocation, _stream: StreamRef<'_>) -> Result<()> {
        self.core.free(allocation, &[])
    }

    fn name(&self) -> &'static str {
        "MemoryPool"
    }
}

/// Device memory from a [`MemoryPool`], given back when dropped.
pub struct PoolBuffer<'p> {
    pool: &'p MemoryPool,
    allocation: DeviceAllocation,
    size: usize,
    /// The stream it was allocated on, as an integer (only compared).
    stream: usize,
    recorded: Vec<Stream>,
}

impl std::fmt::Debug for PoolBuffer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolBuffer").field("ptr", &self.allocation.ptr).field("size", &self.size).finish()
    }
}

impl PoolBuffer<'_> {
    /// The device address (0 for an empty buffer).
    #[inline]
    pub fn as_raw(&self) -> sys::CUdeviceptr {
        self.allocation.ptr
    }

    /// The bytes asked for.
    #[inline]
    pub fn len(&self) -> usize {
        self.size
    }

    /// Whether the buffer has no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// The bytes reserved: the size rounded up to a multiple of 512.
    #[inline]
    pub fn reserved(&self) -> usize {
        self.allocation.size
    }

    /// The buffer as `len() / size_of::<T>()` elements of `T`, for copies and launches; a
    /// length that is not a whole number of elements, or a pool tied to no context, is an
    /// [`Error::InvalidArgument`].
    pub fn view<T: Pod>(&self) -> Result<DeviceView<'_, T>> {
        let (ctx, n) = self.elements::<T>("PoolBuffer::view")?;
        // SAFETY: the buffer owns `n` elements of `T` of `ctx`'s memory while it is borrowed.
        Ok(unsafe { DeviceView::from_raw(ctx, self.allocation.ptr, n) })
    }

    /// Like [`view`](Self::view), for writing.
    pub fn view_mut<T: Pod>(&mut self) -> Result<DeviceViewMut<'_, T>> {
        let (ctx, n) = self.elements::<T>("PoolBuffer::view_mut")?;
        // SAFETY: as in `view`; `&mut self` makes this the only access while it lives.
        Ok(unsafe { DeviceViewMut::from_raw(ctx, self.allocation.ptr, n) })
    }

    fn elements<T>(&self, operation: &'static str) -> Result<(&Context, usize)> {
        let ctx = self.pool.context.as_ref().ok_or_else(|| {
            Error::invalid(
                operation,
                "the pool has no context; make it with MemoryPool::new or with_allocator",
            )
        })?;
        let size = std::mem::size_of::<T>();
        if size == 0 || self.size % size != 0 {
            return Err(Error::invalid(
                operation,
                format!("{} bytes are not a whole number of {size}-byte elements", self.size),
            ));
        }
        Ok((ctx, self.size / size))
    }

    /// Marks the buffer as used on `stream` too: when it is freed, an event is recorded on
    /// `stream` and the block is not reused until that event has completed (PyTorch's
    /// `record_stream`). Recording the stream it was allocated on does nothing.
    pub fn record_stream(&mut self, stream: &Stream) {
        if stream.as_raw() as usize != self.stream && !self.recorded.iter().any(|s| s == stream) {
            self.recorded.push(stream.clone());
        }
    }

    /// Gives the buffer back now, reporting what `Drop` would have to keep.
    #[track_caller]
    pub fn free(mut self) -> Result<()> {
        let recorded = std::mem::take(&mut self.recorded);
        let r = self.pool.free_buffer(self.allocation, &recorded);
        std::mem::forget(self);
        r
    }
}

impl Drop for PoolBuffer<'_> {
    #[track_caller]
    fn drop(&mut self) {
        if let Err(e) = self.pool.free_buffer(self.allocation, &self.recorded) {
            // Only recording an event can fail here; the block then stays out of reuse.
            if let Some(ctx) = &self.pool.context {
                ctx.defer(e);
            }
        }
    }
}

/// The default pool of `device`, in its primary context: created on first use and kept for
/// the life of the process (CuPy's `get_default_memory_pool`).
pub fn default_memory_pool(device: &Device) -> Result<&'static MemoryPool> {
    static POOLS: OnceLock<Mutex<Vec<(usize, &'static MemoryPool)>>> = OnceLock::new();
    let pools = POOLS.get_or_init(|| Mutex::new(Vec::new()));
    let mut pools = pools.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, p)) = pools.iter().find(|(d, _)| *d == device.ordinal()) {
        return Ok(p);
    }
    let ctx = Context::primary(device)?;
    let pool: &'static MemoryPool = Box::leak(Box::new(MemoryPool::new(&ctx)?));
    pools.push((device.ordinal(), pool));
    Ok(pool)
}
