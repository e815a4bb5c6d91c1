//! Memory hooks: callbacks before and after each upstream allocation, pool allocation and free.
//!
//! Hooks are installed per thread, by name, for a scope ([`install`] returns a guard that
//! removes the hook). They fire for both pools: [`MemoryPool`](super::MemoryPool) (device
//! memory) and [`PinnedMemoryPool`](super::PinnedMemoryPool) (page-locked host memory);
//! [`HookEvent::kind`] says which. While no thread has a hook installed, a pool pays one
//! relaxed atomic load per call for this feature and allocates nothing for it.
//!
//! [`DebugPrintHook`](super::DebugPrintHook) prints one JSON line per event;
//! [`LineProfileHook`](super::LineProfileHook) attributes bytes to call sites.

#![forbid(unsafe_code)]

use crate::error::{Error, Result};
use std::cell::RefCell;
use std::panic::Location;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The memory an event is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemoryKind {
    /// Device memory, of a [`MemoryPool`](super::MemoryPool).
    Device,
    /// Page-locked host memory, of a [`PinnedMemoryPool`](super::PinnedMemoryPool).
    PinnedHost,
}

impl MemoryKind {
    /// A short lower-case name: `device` or `pinned_host`.
    pub fn name(self) -> &'static str {
        match self {
            MemoryKind::Device => "device",
            MemoryKind::PinnedHost => "pinned_host",
        }
    }
}

/// What a hook is told about an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HookEvent {
    /// Device or pinned host memory.
    pub kind: MemoryKind,
    /// The device ordinal of the pool, or -1 where none is known (always for pinned memory).
    pub device_id: i32,
    /// The bytes the caller asked for (0 for upstream events and frees).
    pub size: usize,
    /// The bytes reserved: the rounded size for the pool, the upstream size for upstream events.
    pub mem_size: usize,
    /// The device address, or the host address for pinned memory; 0 before an allocation is
    /// made.
    pub mem_ptr: u64,
    /// The pool's identity (its address), 0 for upstream events.
    pub pmem_id: usize,
    /// Where in the program the allocation or free was asked for. A buffer given back by its
    /// drop reports the drop glue's place in `core::ptr`, since Rust passes no call site
    /// through a drop; `free` reports its caller.
    pub location: &'static Location<'static>,
}

/// Callbacks around the pool's events; every method does nothing unless overridden.
///
/// `alloc_*` surround an upstream allocation (the pool growing), `malloc_*` a pool allocation,
/// `free_*` a pool free. A hook must not allocate from a pool itself.
pub trait MemoryHook {
    /// The name it is installed under; one hook per name per thread.
    fn name(&self) -> &str;
    /// Before the pool asks its upstream allocator for memory.
    fn alloc_preprocess(&self, _event: &HookEvent) {}
    /// After the upstream allocation succeeded.
    fn alloc_postprocess(&self, _event: &HookEvent) {}
    /// Before a pool allocation.
    fn malloc_preprocess(&self, _event: &HookEvent) {}
    /// After a pool allocation succeeded.
    fn malloc_postprocess(&self, _event: &HookEvent) {}
    /// Before a pool free.
    fn free_preprocess(&self, _event: &HookEvent) {}
    /// After a pool free.
    fn free_postprocess(&self, _event: &HookEvent) {}
}

/// Hooks installed on any thread; the hot path reads only this while it is 0.
static INSTALLED: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static HOOKS: RefCell<Vec<Rc<dyn MemoryHook>>> = const { RefCell::new(Vec::new()) };
}

/// Removes its hook from the thread's registry when dropped.
#[must_use = "the hook is removed when the guard is dropped"]
pub struct HookGuard {
    name: String,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for HookGuard {
    fn drop(&mut self) {
        let removed = HOOKS.with(|h| {
            let mut h = h.borrow_mut();
            let before = h.len();
            h.retain(|x| x.name() != self.name);
            before - h.len()
        });
        INSTALLED.fetch_sub(removed, Ordering::Relaxed);
    }
}

/// Installs `hook` on this thread until the guard is dropped; a second hook of the same name
/// is an [`Error::InvalidArgument`].
pub fn install(hook: Rc<dyn MemoryHook>) -> Result<HookGuard> {
    let name = hook.name().to_owned();
    HOOKS.with(|h| {
        let mut h = h
            .try_borrow_mut()
            .map_err(|_| Error::invalid("hooks::install", "cannot install a hook from inside a hook"))?;
        if h.iter().any(|x| x.name() == name) {
            return Err(Error::invalid(
                "hooks::install",
                format!("a hook named {name:?} is already installed on this thread; drop its guard first"),
            ));
        }
        h.push(hook);
        INSTALLED.fetch_add(1, Ordering::Relaxed);
        Ok(HookGuard { name, _not_send: std::marker::PhantomData })
    })
}

/// The names of the hooks installed on this thread, in installation order.
pub fn installed() -> Vec<String> {
    HOOKS.with(|h| h.borrow().iter().map(|x| x.name().to_owned()).collect())
}

/// The callbacks, as the pool calls them.
#[derive(Clone, Copy)]
pub(crate) enum Point {
    AllocPre,
    AllocPost,
    MallocPre,
    MallocPost,
    FreePre,
    FreePost,
}

/// Counts a checking driver as one installed hook, once, when the loaded driver is one: the
/// pools then tell it of every block they hand out ([`call`] at [`Point::MallocPost`]). Called
/// where a pool goes to its upstream allocator, which comes before any block is handed out
/// again.
#[cold]
pub(crate) fn arm_checker() {
    static ARMED: std::sync::Once = std::sync::Once::new();
    ARMED.call_once(|| {
        if crate::track::checker::present() {
            INSTALLED.fetch_add(1, Ordering::Relaxed);
        }
    });
}

/// Whether any thread has a hook; one relaxed load.
#[inline(always)]
pub(crate) fn any() -> bool {
    INSTALLED.load(Ordering::Relaxed) != 0
}

/// Calls every hook of this thread at `point`. Hooks that re-enter the pool see no hooks.
#[cold]
pub(crate) fn call(point: Point, event: &HookEvent) {
    if let Point::MallocPost = point {
        crate::track::checker::new_owner(event.mem_ptr, event.mem_size);
    }
    // During the thread's teardown (a buffer dropped by another thread-local's destructor)
    // the hooks may be gone: none are called then.
    let hooks = HOOKS.try_with(|h| h.try_borrow().map(|h| h.clone()).unwrap_or_default()).unwrap_or_default();
    for hook in &hooks {
        match point {
            Point::AllocPre => hook.alloc_preprocess(event),
            Point::AllocPost => hook.alloc_postprocess(event),
            Point::MallocPre => hook.malloc_preprocess(event),
            Point::MallocPost => hook.malloc_postprocess(event),
            Point::FreePre => hook.free_preprocess(event),
            Point::FreePost => hook.free_postprocess(event),
        }
    }
}
