//! The current allocator of each thread: [`set_allocator`], [`get_allocator`],
//! [`using_allocator`], and [`alloc`] through it (CuPy's `cupy.cuda.alloc` and friends).

use super::allocator::{Allocator, DeviceAllocation, PinnedAllocation, PinnedAllocator, StreamRef};
use super::memory_pool::default_memory_pool;
use super::pinned::PinnedMemoryPool;
use crate::error::check;
use crate::{Context, Error, Event, Result};
use cuda_driver_sys as sys;
use std::cell::{Cell, RefCell};
use std::sync::{Arc, Mutex, OnceLock};

thread_local! {
    static CURRENT: RefCell<Option<Arc<dyn Allocator>>> = const { RefCell::new(None) };
    /// Whether `CURRENT` holds an allocator: one plain thread-local read on the path of
    /// `DeviceBuffer::new` (no destructor registration, no borrow).
    static HAS_CURRENT: Cell<bool> = const { Cell::new(false) };
    static CURRENT_PINNED: RefCell<Option<Arc<dyn PinnedAllocator>>> = const { RefCell::new(None) };
    /// Whether `CURRENT_PINNED` holds an allocator: one plain thread-local read on the path
    /// of `PinnedBuffer::new`.
    static HAS_CURRENT_PINNED: Cell<bool> = const { Cell::new(false) };
    /// The default pools this thread has used, by device, so `get_allocator` makes one driver
    /// call and no allocation once warm.
    static DEFAULTS: RefCell<Vec<(sys::CUdevice, Arc<dyn Allocator>)>> = const { RefCell::new(Vec::new()) };
}

/// Sets this thread's allocator; `None` restores the default (the [`MemoryPool`] of the
/// current context's device).
///
/// [`MemoryPool`]: super::MemoryPool
pub fn set_allocator(allocator: Option<Arc<dyn Allocator>>) {
    replace_current(allocator);
}

/// Makes `allocator` this thread's allocator, returning the previous one.
fn replace_current(allocator: Option<Arc<dyn Allocator>>) -> Option<Arc<dyn Allocator>> {
    HAS_CURRENT.with(|h| h.set(allocator.is_some()));
    CURRENT.with(|c| std::mem::replace(&mut *c.borrow_mut(), allocator))
}

/// This thread's allocator: the one set, or the default pool of the current context's device
/// (found with [`cuCtxGetDevice`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html)).
/// With neither a set allocator nor a current context, an [`Error::InvalidArgument`] says to
/// make a context current.
pub fn get_allocator() -> Result<Arc<dyn Allocator>> {
    if let Some(a) = CURRENT.with(|c| c.borrow().clone()) {
        return Ok(a);
    }
    let mut device = 0;
    // SAFETY: one out-parameter; the call only reads the thread's current context.
    let status = unsafe { sys::cuCtxGetDevice(&mut device) };
    if status == sys::CUresult::CUDA_ERROR_INVALID_CONTEXT
        || status == sys::CUresult::CUDA_ERROR_NOT_INITIALIZED
    {
        return Err(Error::invalid(
            "pool::get_allocator",
            "no allocator is set and no context is current; bind a context first",
        ));
    }
    check("cuCtxGetDevice", status)?;
    if let Some(a) = DEFAULTS.with(|d| d.borrow().iter().find(|(o, _)| *o == device).map(|(_, a)| a.clone()))
    {
        return Ok(a);
    }
    let pool: Arc<dyn Allocator> =
        Arc::new(DefaultPool(default_memory_pool(&crate::Device::from_raw(device))?));
    DEFAULTS.with(|d| d.borrow_mut().push((device, pool.clone())));
    Ok(pool)
}

/// The default pool, behind an `Arc` like any other allocator.
struct DefaultPool(&'static super::MemoryPool);

// SAFETY: forwards to the device's default `MemoryPool`, which keeps the contract of
// `Allocator` (its own `unsafe impl`).
unsafe impl Allocator for DefaultPool {
    fn context(&self) -> Option<&Context> {
        self.0.context()
    }

    #[track_caller]
    fn allocate(&self, size: usize, stream: StreamRef<'_>) -> Result<DeviceAllocation> {
        self.0.allocate(size, stream)
    }

    #[track_caller]
    unsafe fn deallocate(&self, allocation: DeviceAllocation, stream: StreamRef<'_>) -> Result<()> {
        // SAFETY: forwarded under the caller's contract.
        unsafe { self.0.deallocate(allocation, stream) }
    }

    #[track_caller]
    unsafe fn deallocate_after(
        &self,
        allocation: DeviceAllocation,
        stream: &crate::Stream,
        recorded: &[crate::Stream],
    ) -> Result<()> {
        // SAFETY: forwarded under the caller's contract. The pool defers the block's reuse with
        // its own events, as it does when it is reached directly (the trait's default would make
        // `stream` wait instead: the same pool would behave two ways).
        unsafe { self.0.deallocate_after(allocation, stream, recorded) }
    }

    fn name(&self) -> &'static str {
        self.0.name()
    }
}

/// Restores the allocator that was current before [`using_allocator`] when dropped.
#[must_use = "the previous allocator is restored when the guard is dropped"]
pub struct AllocatorGuard {
    previous: Option<Arc<dyn Allocator>>,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for AllocatorGuard {
    fn drop(&mut self) {
        replace_current(self.previous.take());
    }
}

/// Makes `allocator` this thread's allocator until the guard is dropped (CuPy's
/// `using_allocator`).
pub fn using_allocator(allocator: Arc<dyn Allocator>) -> AllocatorGuard {
    let previous = replace_current(Some(allocator));
    AllocatorGuard { previous, _not_send: std::marker::PhantomData }
}

/// The allocator set for this thread, if any (not the default).
#[inline]
pub(crate) fn thread_allocator() -> Option<Arc<dyn Allocator>> {
    if !HAS_CURRENT.with(Cell::get) {
        return None;
    }
    CURRENT.with(|c| c.borrow().clone())
}

/// The pinned allocator set for this thread, if any (not the default).
#[inline]
pub(crate) fn current_pinned_allocator() -> Option<Arc<dyn PinnedAllocator>> {
    if !HAS_CURRENT_PINNED.with(Cell::get) {
        return None;
    }
    CURRENT_PINNED.with(|c| c.borrow().clone())
}

/// Sets this thread's pinned-memory allocator; `None` restores the default (a process-wide
/// [`PinnedMemoryPool`] in the primary context of device 0).
pub fn set_pinned_memory_allocator(allocator: Option<Arc<dyn PinnedAllocator>>) {
    HAS_CURRENT_PINNED.with(|h| h.set(allocator.is_some()));
    CURRENT_PINNED.with(|c| *c.borrow_mut() = allocator);
}

/// The default pinned pool (CuPy's `get_default_pinned_memory_pool`), made on first use in
/// the primary context of device 0.
///
/// The first call fails when there is no device 0, or its primary context cannot be retained
/// (see [`Context::primary`]); later calls do not fail.
pub fn default_pinned_memory_pool() -> Result<&'static PinnedMemoryPool> {
    static INIT: Mutex<()> = Mutex::new(());
    if let Some(p) = DEFAULT_PINNED.get() {
        return Ok(p);
    }
    let _once = INIT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(p) = DEFAULT_PINNED.get() {
        return Ok(p);
    }
    let ctx = Context::primary(&crate::Device::get(0)?)?;
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
    for pool in super::memory_pool::default_memory_pools() {
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

// SAFETY: the pool hands out each upstream buffer (exclusively owned page-locked memory of at
// least the size asked, by the upstream's own contract) to one caller at a time: a buffer is
// reused only after it was given back and, when given back behind streams or copies, only once
// their events report completion (`StreamEvents`'s contract, or `cuEventQuery` on the copies'
// own event).
unsafe impl PinnedAllocator for PinnedMemoryPool {
    #[track_caller]
    fn allocate(&self, size: usize) -> Result<PinnedAllocation> {
        self.allocate_raw(size)
    }

    #[track_caller]
    unsafe fn deallocate(&self, allocation: PinnedAllocation) -> Result<()> {
        self.give_back(allocation, &[])
    }

    #[track_caller]
    unsafe fn deallocate_after(&self, allocation: PinnedAllocation, copies: Event) -> Result<()> {
        // The copies' own event covers them wherever they ran; reuse waits for it. Recording
        // an event of the pool's now, on a stream handle resolved on this thread, would not.
        self.give_back_after(allocation, copies)
    }

    fn context(&self) -> Option<&Context> {
        self.upstream_context()
    }
}
