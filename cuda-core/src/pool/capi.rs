//! A C interface to the current allocator, like CuPy's `cupy_memory.h`.
//!
//! The declarations are in `cuda-core/include/cuda_core_memory.h`, with the rules on
//! ownership, threads and errors; C or C++ code in a process that links cuda-core includes it:
//!
//! ```c
//! #include "cuda_core_memory.h"
//!
//! cuda_core_allocator_handle *h = cuda_core_get_allocator_handle();
//! void *p = cuda_core_malloc(h, 1 << 20);
//! if (p == NULL) {
//!     char why[256];
//!     cuda_core_get_last_error(why, sizeof why);
//! }
//! cuda_core_free(h, p);
//! cuda_core_destroy_allocator_handle(h);
//! ```
//!
//! A handle captures the calling thread's current allocator ([`get_allocator`]) when it is
//! made; memory is allocated on the legacy default stream. `cuda_core_malloc` returns null on
//! failure (the reason is kept per thread, for [`last_error`] and `cuda_core_get_last_error`);
//! memory still allocated when its handle is destroyed is freed then. A panic in a Rust
//! allocator is caught at this boundary and kept as [`Error::CallbackPanicked`].
//!
//! [`get_allocator`]: super::get_allocator

use crate::alloc::{Allocator, DeviceAllocation, StreamRef};
use crate::error::Error;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
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

/// Runs `f`, turning a panic (of a user's allocator) into a kept error and `fallback`.
fn guarded<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        keep(Error::CallbackPanicked { message: crate::error::panic_message(payload) });
        fallback
    })
}

/// Creates a handle to the calling thread's current allocator; null if there is none.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_core_get_allocator_handle() -> *mut AllocatorHandle {
    guarded(std::ptr::null_mut(), || match super::get_allocator() {
        Ok(allocator) => {
            Box::into_raw(Box::new(AllocatorHandle { allocator, live: Mutex::new(HashMap::new()) }))
        }
        Err(e) => {
            keep(e);
            std::ptr::null_mut()
        }
    })
}

/// Allocates `size` bytes of device memory through `handle`; null on failure or for size 0.
///
/// # Safety
///
/// `handle` is null or came from [`cuda_core_get_allocator_handle`] and was not destroyed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_core_malloc(handle: *mut AllocatorHandle, size: usize) -> *mut c_void {
    // SAFETY: the caller passes a live handle (or null, refused here).
    let Some(h) = (unsafe { handle.as_ref() }) else {
        keep(Error::invalid("cuda_core_malloc", "the handle is null"));
        return std::ptr::null_mut();
    };
    if size == 0 {
        return std::ptr::null_mut();
    }
    guarded(std::ptr::null_mut(), || match h.allocator.allocate(size, StreamRef::legacy()) {
        Ok(a) if a.ptr != 0 => {
            h.live.lock().unwrap_or_else(|p| p.into_inner()).insert(a.ptr, a);
            a.ptr as *mut c_void
        }
        Ok(_) => std::ptr::null_mut(),
        Err(e) => {
            keep(e);
            std::ptr::null_mut()
        }
    })
}

/// Frees memory from [`cuda_core_malloc`] on the same handle; null is ignored, an unknown
/// pointer is refused (see [`last_error`]).
///
/// # Safety
///
/// `handle` is null or live; no queued work still uses `ptr` on a stream other than the
/// legacy default one.
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
        Some(a) => guarded((), || {
            // SAFETY: the allocation came from this handle's allocator and left its table: once.
            if let Err(e) = unsafe { h.allocator.deallocate(a, StreamRef::legacy()) } {
                keep(e);
            }
        }),
        None => {
            keep(Error::invalid("cuda_core_free", format!("{ptr:?} was not allocated through this handle")))
        }
    }
}

/// Destroys a handle; memory still allocated through it is freed.
///
/// # Safety
///
/// `handle` is null or came from [`cuda_core_get_allocator_handle`], and is not used
/// afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_core_destroy_allocator_handle(handle: *mut AllocatorHandle) {
    if handle.is_null() {
        return;
    }
    // SAFETY: the handle was made by Box::into_raw and is destroyed once.
    let h = unsafe { Box::from_raw(handle) };
    guarded((), move || {
        let live = std::mem::take(&mut *h.live.lock().unwrap_or_else(|p| p.into_inner()));
        for a in live.into_values() {
            // SAFETY: each allocation came from this allocator and is given back once.
            if let Err(e) = unsafe { h.allocator.deallocate(a, StreamRef::legacy()) } {
                keep(e);
            }
        }
    })
}

/// Takes this thread's last error: writes its message (truncated, NUL-terminated) into
/// `buf` of `len` bytes and returns the message's full length; 0 when there is none. With a
/// null `buf` or a `len` of 0 the error is kept, so that a buffer can be sized first.
///
/// # Safety
///
/// `buf` is null or points to `len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_core_get_last_error(buf: *mut c_char, len: usize) -> usize {
    guarded(0, || {
        LAST_ERROR.with(|l| {
            let mut l = l.borrow_mut();
            let Some(e) = l.as_ref() else { return 0 };
            let message = e.to_string();
            if buf.is_null() || len == 0 {
                return message.len();
            }
            let n = message.len().min(len - 1);
            // SAFETY: the caller gives `len` writable bytes at `buf`; n + 1 <= len are written.
            unsafe {
                std::ptr::copy_nonoverlapping(message.as_ptr(), buf.cast::<u8>(), n);
                *buf.add(n) = 0;
            }
            *l = None;
            message.len()
        })
    })
}
