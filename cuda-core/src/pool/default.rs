//! The default pools: one [`MemoryPool`] per device in its primary context, and one
//! [`PinnedMemoryPool`], each made on first use and kept for the life of the process (CuPy's
//! `get_default_memory_pool` and `get_default_pinned_memory_pool`), and [`get_allocator`], the
//! allocator of a thread: the one it chose (`alloc::set_allocator`) or its device's default pool.

use super::memory_pool::MemoryPool;
use super::pinned::PinnedMemoryPool;
use crate::alloc::{Allocator, thread_allocator};
use crate::context::Context;
use crate::device::Device;
use crate::error::{Error, Result};
use cuhost_driver_sys as sys;
use std::cell::RefCell;
use std::sync::{Arc, Mutex, OnceLock};

thread_local! {
    /// The default pools this thread has used, by device, so `get_allocator` makes one driver
    /// call and no allocation once warm.
    static DEFAULTS: RefCell<Vec<(sys::CUdevice, Arc<dyn Allocator>)>> = const { RefCell::new(Vec::new()) };
}

/// The default pools created so far, with the ordinal of each one's device. Each is kept behind
/// an `Arc` that lives as long as the process, so that [`get_allocator`] hands out the pool
/// itself while buffers refer to it without a reference count.
static DEFAULT_POOLS: Mutex<Vec<(usize, &'static Arc<MemoryPool>)>> = Mutex::new(Vec::new());

/// The default pool of `device`, in its primary context: created on first use and kept for
/// the life of the process (CuPy's `get_default_memory_pool`).
///
/// The first call for a device fails when its primary context cannot be retained (see
/// [`Context::primary`]) or [`GPU_MEMORY_LIMIT_ENV`](super::GPU_MEMORY_LIMIT_ENV) is malformed.
pub fn default_memory_pool(device: &Device) -> Result<&'static MemoryPool> {
    Ok(shared_default_pool(device)?)
}

/// The default pool of `device` as [`default_memory_pool`] makes it, behind its `Arc`.
fn shared_default_pool(device: &Device) -> Result<&'static Arc<MemoryPool>> {
    let mut pools = DEFAULT_POOLS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, p)) = pools.iter().find(|(d, _)| *d == device.ordinal()) {
        return Ok(p);
    }
    let ctx = Context::primary(device)?;
    let pool: &'static Arc<MemoryPool> = Box::leak(Box::new(Arc::new(MemoryPool::new(&ctx)?)));
    pools.push((device.ordinal(), pool));
    Ok(pool)
}

/// The default pools created so far (asking creates none).
pub(crate) fn default_memory_pools() -> Vec<&'static MemoryPool> {
    let pools = DEFAULT_POOLS.lock().unwrap_or_else(|p| p.into_inner());
    pools.iter().map(|&(_, pool)| &**pool).collect()
}

/// The default pool of `device`, found without a lock once it exists: the path of every
/// `DeviceBuffer::new` that uses the default pool.
#[inline]
pub(crate) fn default_pool_of(device: Device) -> Result<&'static MemoryPool> {
    const FAST: usize = 64;
    static POOLS: [OnceLock<&'static MemoryPool>; FAST] = [const { OnceLock::new() }; FAST];
    let ordinal = device.ordinal();
    match POOLS.get(ordinal) {
        Some(slot) => match slot.get() {
            Some(p) => Ok(p),
            None => {
                let p = default_memory_pool(&device)?;
                Ok(*slot.get_or_init(|| p))
            }
        },
        None => default_memory_pool(&device),
    }
}

/// This thread's allocator: the one set, or the default pool of the current context's device
/// (found with [`cuCtxGetDevice`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html)).
/// With neither a set allocator nor a current context, an [`Error::InvalidArgument`] says to
/// make a context current.
pub fn get_allocator() -> Result<Arc<dyn Allocator>> {
    if let Some(a) = thread_allocator() {
        return Ok(a);
    }
    let mut device = 0;
    // SAFETY: one out-parameter; the call only reads the thread's current context.
    let status = unsafe { driver!(status: cuCtxGetDevice(&mut device)) };
    if status.is(sys::CUresult::CUDA_ERROR_INVALID_CONTEXT)
        || status.is(sys::CUresult::CUDA_ERROR_NOT_INITIALIZED)
    {
        return Err(Error::invalid(
            "pool::get_allocator",
            "no allocator is set and no context is current; bind a context first",
        ));
    }
    status.check()?;
    if let Some(a) = DEFAULTS.with(|d| d.borrow().iter().find(|(o, _)| *o == device).map(|(_, a)| a.clone()))
    {
        return Ok(a);
    }
    let pool: Arc<dyn Allocator> = shared_default_pool(&Device::from_raw(device))?.clone();
    DEFAULTS.with(|d| d.borrow_mut().push((device, pool.clone())));
    Ok(pool)
}

/// The default pinned pool (CuPy's `get_default_pinned_memory_pool`), made on first use in
/// the primary context of device 0.
///
/// The first call fails when there is no device 0, or its primary context cannot be retained
/// (see [`Context::primary`]); later calls do not fail.
#[inline]
pub fn default_pinned_memory_pool() -> Result<&'static PinnedMemoryPool> {
    match DEFAULT_PINNED.get() {
        Some(p) => Ok(p),
        None => make_default_pinned_memory_pool(),
    }
}

/// The default pinned pool, made by the first caller.
#[cold]
fn make_default_pinned_memory_pool() -> Result<&'static PinnedMemoryPool> {
    static INIT: Mutex<()> = Mutex::new(());
    let _once = INIT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(p) = DEFAULT_PINNED.get() {
        return Ok(p);
    }
    let ctx = Context::primary(&Device::get(0)?)?;
    let pool: &'static PinnedMemoryPool = Box::leak(Box::new(PinnedMemoryPool::new(&ctx)));
    Ok(DEFAULT_PINNED.get_or_init(|| pool))
}

/// The default pinned pool, once made.
static DEFAULT_PINNED: OnceLock<&'static PinnedMemoryPool> = OnceLock::new();

/// Gives every block that the default pools made so far (device and pinned) hold free back to
/// the driver, after waiting for the devices' work; pools are neither made nor closed by it.
///
/// The default pools live as long as the process and keep what they cache; a program that wants
/// the driver to see every byte given back before it exits (a leak checker such as
/// `compute-sanitizer --leak-check full` counts cached blocks as leaks) calls this after its
/// last buffer is dropped. Blocks still in use stay; the first error is returned after trying
/// every pool.
pub fn release_default_pools() -> Result<()> {
    let mut first = Ok(());
    let mut keep = |r: Result<()>| {
        if first.is_ok() {
            first = r;
        }
    };
    for pool in default_memory_pools() {
        // Blocks freed behind recorded streams come back once the device has caught up.
        if let Some(device) = pool.device() {
            keep(Context::primary(&device).and_then(|ctx| ctx.synchronize()));
        }
        keep(pool.free_all_blocks(None));
    }
    if let Some(pinned) = DEFAULT_PINNED.get() {
        keep(pinned.free_all_blocks());
    }
    first
}
