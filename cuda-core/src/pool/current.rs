//! The current allocator of each thread: [`set_allocator`], [`get_allocator`],
//! [`using_allocator`], and [`alloc`] through it (CuPy's `cupy.cuda.alloc` and friends).

use super::allocator::{Allocator, DeviceAllocation, PinnedAllocation, PinnedAllocator, StreamRef};
use super::memory_pool::default_memory_pool;
use super::pinned::PinnedMemoryPool;
use crate::error::check;
use crate::{Context, Error, Result, Stream};
use cuda_driver_sys as sys;
use std::cell::RefCell;
use std::sync::{Arc, Mutex, OnceLock};

thread_local! {
    static CURRENT: RefCell<Option<Arc<dyn Allocator>>> = const { RefCell::new(None) };
    static CURRENT_PINNED: RefCell<Option<Arc<dyn PinnedAllocator>>> = const { RefCell::new(None) };
    /// The default pools this thread has used, by device, so `get_allocator` makes one driver
    /// call and no allocation once warm.
    static DEFAULTS: RefCell<Vec<(sys::CUdevice, Arc<dyn Allocator>)>> = const { RefCell::new(Vec::new()) };
}

/// Sets this thread's allocator; `None` restores the default (the [`MemoryPool`] of the
/// current context's device).
///
/// [`MemoryPool`]: super::MemoryPool
pub fn set_allocator(allocator: Option<Arc<dyn Allocator>>) {
    CURRENT.with(|c| *c.borrow_mut() = allocator);
}

/// This thread's allocator: the one set, or the default pool of the current context's device.
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

impl Allocator for DefaultPool {
    #[track_caller]
    fn allocate(&self, size: usize, stream: StreamRef<'_>) -> Result<DeviceAllocation> {
        self.0.allocate(size, stream)
    }

    #[track_caller]
    unsafe fn deallocate(&self, allocation: DeviceAllocation, stream: StreamRef<'_>) -> Result<()> {
        // SAFETY: forwarded under the caller's contract.
        unsafe { self.0.deallocate(allocation, stream) }
    }

    fn name(&self) -> &'static str {
        "MemoryPool"
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
        let previous = self.previous.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// Makes `allocator` this thread's allocator until the guard is dropped (CuPy's
/// `using_allocator`).
pub fn using_allocator(allocator: Arc<dyn Allocator>) -> AllocatorGuard {
    let previous = CURRENT.with(|c| c.borrow_mut().replace(allocator));
    AllocatorGuard { previous, _not_send: std::marker::PhantomData }
}

/// Device memory from the current allocator, given back (ordered on its stream) when dropped.
pub struct Memory {
    allocator: Arc<dyn Allocator>,
    allocation: DeviceAllocation,
    stream: Stream,
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory")
            .field("ptr", &self.allocation.ptr)
            .field("size", &self.allocation.size)
            .field("allocator", &self.allocator.name())
            .finish()
    }
}

impl Memory {
    /// The device address.
    pub fn as_raw(&self) -> sys::CUdeviceptr {
        self.allocation.ptr
    }

    /// The bytes reserved.
    pub fn len(&self) -> usize {
        self.allocation.size
    }

    /// Whether no bytes are reserved.
    pub fn is_empty(&self) -> bool {
        self.allocation.size == 0
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        // SAFETY: the allocation came from this allocator and is given back once, ordered after
        // the work on the stream it was allocated for. An error cannot be reported from here.
        let _ = unsafe { self.allocator.deallocate(self.allocation, StreamRef::from(&self.stream)) };
    }
}

/// Allocates `size` bytes for `stream` from this thread's allocator (CuPy's `cupy.cuda.alloc`).
#[track_caller]
pub fn alloc(size: usize, stream: &Stream) -> Result<Memory> {
    let allocator = get_allocator()?;
    let allocation = allocator.allocate(size, stream.into())?;
    Ok(Memory { allocator, allocation, stream: stream.clone() })
}

/// Sets this thread's pinned-memory allocator; `None` restores the default (a process-wide
/// [`PinnedMemoryPool`] in the primary context of device 0).
pub fn set_pinned_memory_allocator(allocator: Option<Arc<dyn PinnedAllocator>>) {
    CURRENT_PINNED.with(|c| *c.borrow_mut() = allocator);
}

/// The default pinned pool (CuPy's `get_default_pinned_memory_pool`).
pub fn default_pinned_memory_pool() -> Result<&'static PinnedMemoryPool> {
    static POOL: OnceLock<&'static PinnedMemoryPool> = OnceLock::new();
    static INIT: Mutex<()> = Mutex::new(());
    if let Some(p) = POOL.get() {
        return Ok(p);
    }
    let _once = INIT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(p) = POOL.get() {
        return Ok(p);
    }
    let ctx = Context::primary(&crate::Device::get(0)?)?;
    let pool: &'static PinnedMemoryPool = Box::leak(Box::new(PinnedMemoryPool::new(&ctx)));
    Ok(POOL.get_or_init(|| pool))
}

impl PinnedAllocator for PinnedMemoryPool {
    #[track_caller]
    fn allocate(&self, size: usize) -> Result<PinnedAllocation> {
        self.allocate_raw(size)
    }

    #[track_caller]
    unsafe fn deallocate(&self, allocation: PinnedAllocation) -> Result<()> {
        self.give_back(allocation, &[])
    }
}

struct DefaultPinned(&'static PinnedMemoryPool);

impl PinnedAllocator for DefaultPinned {
    #[track_caller]
    fn allocate(&self, size: usize) -> Result<PinnedAllocation> {
        self.0.allocate_raw(size)
    }

    #[track_caller]
    unsafe fn deallocate(&self, allocation: PinnedAllocation) -> Result<()> {
        self.0.give_back(allocation, &[])
    }
}

/// Pinned host memory from the current pinned allocator, given back when dropped.
pub struct PinnedMemory {
    allocator: Arc<dyn PinnedAllocator>,
    allocation: PinnedAllocation,
}

impl std::fmt::Debug for PinnedMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedMemory")
            .field("ptr", &self.allocation.ptr)
            .field("size", &self.allocation.size)
            .finish()
    }
}

impl PinnedMemory {
    /// The host address.
    pub fn as_ptr(&self) -> *const u8 {
        self.allocation.ptr
    }

    /// The host address, for writing.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.allocation.ptr
    }

    /// The bytes reserved.
    pub fn len(&self) -> usize {
        self.allocation.size
    }

    /// Whether no bytes are reserved.
    pub fn is_empty(&self) -> bool {
        self.allocation.size == 0
    }
}

impl Drop for PinnedMemory {
    #[track_caller]
    fn drop(&mut self) {
        // SAFETY: the allocation came from this allocator and is given back once.
        let _ = unsafe { self.allocator.deallocate(self.allocation) };
    }
}

/// Allocates `size` bytes of pinned host memory from this thread's pinned allocator (CuPy's
/// `alloc_pinned_memory`).
#[track_caller]
pub fn alloc_pinned_memory(size: usize) -> Result<PinnedMemory> {
    let allocator = match CURRENT_PINNED.with(|c| c.borrow().clone()) {
        Some(a) => a,
        None => Arc::new(DefaultPinned(default_pinned_memory_pool()?)),
    };
    let allocation = allocator.allocate(size)?;
    Ok(PinnedMemory { allocator, allocation })
}
