//! The allocator each thread has chosen: [`set_allocator`], [`using_allocator`] and
//! [`set_pinned_memory_allocator`] (CuPy's names). A thread that chose none gets the default
//! pool of the device, which the pools' room keeps (`pool::get_allocator`).

#![forbid(unsafe_code)]

use super::allocator::{Allocator, PinnedAllocator};
use std::cell::{Cell, RefCell};
use std::sync::Arc;

thread_local! {
    static CURRENT: RefCell<Option<Arc<dyn Allocator>>> = const { RefCell::new(None) };
    /// Whether `CURRENT` holds an allocator: one plain thread-local read on the path of
    /// `DeviceBuffer::new` (no destructor registration, no borrow).
    static HAS_CURRENT: Cell<bool> = const { Cell::new(false) };
    static CURRENT_PINNED: RefCell<Option<Arc<dyn PinnedAllocator>>> = const { RefCell::new(None) };
    /// Whether `CURRENT_PINNED` holds an allocator: one plain thread-local read on the path
    /// of `PinnedBuffer::new`.
    static HAS_CURRENT_PINNED: Cell<bool> = const { Cell::new(false) };
}

/// Sets this thread's allocator; `None` restores the default (the `MemoryPool` of the
/// current context's device, in the `pool` module).
pub fn set_allocator(allocator: Option<Arc<dyn Allocator>>) {
    replace_current(allocator);
}

/// Makes `allocator` this thread's allocator, returning the previous one.
fn replace_current(allocator: Option<Arc<dyn Allocator>>) -> Option<Arc<dyn Allocator>> {
    HAS_CURRENT.with(|h| h.set(allocator.is_some()));
    CURRENT.with(|c| std::mem::replace(&mut *c.borrow_mut(), allocator))
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
/// `PinnedMemoryPool` in the primary context of device 0, in the `pool` module).
pub fn set_pinned_memory_allocator(allocator: Option<Arc<dyn PinnedAllocator>>) {
    HAS_CURRENT_PINNED.with(|h| h.set(allocator.is_some()));
    CURRENT_PINNED.with(|c| *c.borrow_mut() = allocator);
}
