//! A C interface to the current allocator, like CuPy's `cupy_memory.h`.
//!
//! C or C++ code in the same process declares:
//!
//! ```c
//! typedef struct cuda_core_allocator_handle cuda_core_allocator_handle;
//! cuda_core_allocator_handle* cuda_core_get_allocator_handle(void);
//! void* cuda_core_malloc(cuda_core_allocator_handle* handle, size_t size);
//! void cuda_core_free(cuda_core_allocator_handle* handle, void* ptr);
//! void cuda_core_destroy_allocator_handle(cuda_core_allocator_handle* handle);
//! ```
//!
//! A handle captures the calling thread's current allocator ([`get_allocator`]) when it is
//! made; memory is allocated on the legacy default stream. `cuda_core_malloc` returns null on
//! failure (the reason is kept for [`last_error`]); memory must be freed before its handle is
//! destroyed.
//!
//! [`get_allocator`]: super::get_allocator

use super::allocator::{Allocator, DeviceAllocation, StreamRef};
use crate::Error;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

/// What a C handle holds: the allocator and the live allocations by address.
pub struct AllocatorHandle {
    allocator: Arc<dyn Allocator>,
    live: Mutex<HashMap<u64, DeviceAllocation>>,
}

thread_local! {
    static LAST_ERROR: RefCell<Option<Error>> = const { RefCell::new(None) };
}

fn keep(e: Error) {
    LAST_ERROR.with(|l| *l.borrow_mut() = Some(e));
}

/// The error of this thread's last failed C call, taken.
pub fn last_error() -> Option<Error> {
    LAST_ERROR.with(|l| l.borrow_mut().take())
}

/// Creates a handle to the calling thread's current allocator; null if there is none.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_core_get_allocator_handle() -> *mut AllocatorHandle {
    match super::get_allocator() {
        Ok(allocator) => {
            Box::into_raw(Box::new(AllocatorHandle { allocator, live: Mutex::new(HashMap::new()) }))
        }
        Err(e) => {
            keep(e);
            std::ptr::null_mut()
        }
    }
}

/// Allocates `size` bytes of device memory through `handle`; null on failure or for size 0.
///
/// # Safety
///
/// `handle` came from [`cuda_core_get_allocator_handle`] and was not destroyed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_core_malloc(handle: *mut AllocatorHandle, size: usize) -> *mut c_void {
    // SAFETY: the caller passes a live handle (or null, refused here).
    let Some(h) = (unsafe { handle.as_ref() }) else {
        keep(Error::invalid("cuda_core_malloc", "the handle is null"));
        return std::ptr::null_mut();
    };
    match h.allocator.allocate(size, StreamRef::legacy()) {
        Ok(a) if a.ptr != 0 => {
            h.live.lock().unwrap_or_else(|p| p.into_inner()).insert(a.ptr, a);
            a.ptr as *mut c_void
        }
        Ok(_) => std::ptr::null_mut(),
        Err(e) => {
            keep(e);
            std::ptr::null_mut()
        }
    }
}

/// Frees memory from [`cuda_core_malloc`] on the same handle; null is ignored, an unknown
/// pointer is refused (see [`last_error`]).
///
/// # Safety
///
/// `handle` is live; no queued work still uses `ptr` on a stream other than the default one.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_core_free(handle: *mut AllocatorHandle, ptr: *mut c_void) {
    // SAFETY: the caller passes a live handle (or null, refused here).
    let Some(h) = (unsafe { handle.as_ref() }) else {
        return keep(Error::invalid("cuda_core_free", "the handle is null"));
    };
    if ptr.is_null() {
        return;
    }
    let found = h.live.lock().unwrap_or_else(|p| p.into_inner()).remove(&(ptr as u64));
    match found {
        // SAFETY: the allocation came from this handle's allocator and left its table: once.
        Some(a) => {
            if let Err(e) = unsafe { h.allocator.deallocate(a, StreamRef::legacy()) } {
                keep(e);
            }
        }
        None => {
            keep(Error::invalid("cuda_core_free", format!("{ptr:?} was not allocated through this handle")))
        }
    }
}

/// Destroys a handle; memory still allocated through it is freed.
///
/// # Safety
///
/// `handle` came from [`cuda_core_get_allocator_handle`] and is not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_core_destroy_allocator_handle(handle: *mut AllocatorHandle) {
    if handle.is_null() {
        return;
    }
    // SAFETY: the handle was made by Box::into_raw and is destroyed once.
    let h = unsafe { Box::from_raw(handle) };
    let live = std::mem::take(&mut *h.live.lock().unwrap_or_else(|p| p.into_inner()));
    for a in live.into_values() {
        // SAFETY: each allocation came from this allocator and is given back once.
        if let Err(e) = unsafe { h.allocator.deallocate(a, StreamRef::legacy()) } {
            keep(e);
        }
    }
}
