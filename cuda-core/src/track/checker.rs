//! What a checking driver cannot see, told by the crate itself.
//!
//! A checking driver (a `libcuda` between the program and NVIDIA's that checks the stream rule
//! with a happens-before model, such as the workspace's `checked-cuda-driver`, or the
//! simulated driver) sees every allocation, copy, launch, event and synchronization. Two things
//! happen without a driver call, and the crate tells them through the driver's
//! [`check_hooks`](cuhost_driver_sys::check_hooks):
//!
//! * a pool hands a cached block out again: the block has a *new owner*, whose work must be
//!   ordered after the earlier owner's (the pools call [`new_owner`] through their memory
//!   hooks, which count a checking driver as one installed hook, so that with NVIDIA's driver
//!   their hot paths stay as they are);
//! * the host takes a slice of pinned memory ([`host_access`], when a guard is taken and when
//!   it drops): the copies that use the memory must be ordered with it;
//! * a kernel argument is passed as a shared borrow ([`launch_reads`]): the driver sees only an
//!   address, which a checker would otherwise count as read and written.
//!
//! With NVIDIA's driver each of these costs one predictable branch.

use cuhost_driver_sys as sys;
use std::ffi::c_int;

/// Whether the loaded driver is a checking driver.
#[inline]
pub(crate) fn present() -> bool {
    sys::check_hooks().is_some()
}

/// The `size` bytes at `ptr` have a new owner from now on.
#[inline]
pub(crate) fn new_owner(ptr: u64, size: usize) {
    if let Some(hooks) = sys::check_hooks() {
        // SAFETY: the checking driver's function of this signature; it only reads its
        // arguments.
        unsafe { (hooks.new_owner)(ptr, size as u64) };
    }
}

/// The next launch on the calling thread only reads the memory its argument `ptr` points into.
#[inline]
pub(crate) fn launch_reads(ptr: u64) {
    if let Some(reads) = sys::check_hooks().and_then(|h| h.launch_reads) {
        // SAFETY: as in `new_owner`; the address is only recorded.
        unsafe { reads(ptr) };
    }
}

/// The calling thread reads (or, with `write`, writes) the elements of `slice` now.
#[inline]
pub(crate) fn host_access<T>(slice: &[T], write: bool) {
    if let Some(hooks) = sys::check_hooks() {
        // SAFETY: as in `new_owner`; the addresses are only recorded.
        unsafe { (hooks.host_access)(slice.as_ptr() as u64, size_of_val(slice) as u64, c_int::from(write)) };
    }
}
