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

/// The launch the calling thread is preparing only reads the memory its argument `ptr` points
/// into: kept until [`launch_reads_told`] tells the checking driver, just before the launch is
/// made, so that a launch refused after some arguments were noted tells it nothing.
#[inline]
pub(crate) fn launch_reads(ptr: u64) {
    if sys::check_hooks().is_some_and(|h| h.launch_reads.is_some()) {
        let _ = READ_ONLY.try_with(|r| r.borrow_mut().push(ptr));
    }
}

/// Forgets what an earlier launch that was not made kept; called before a launch notes its
/// arguments.
#[inline]
pub(crate) fn launch_reads_forgotten() {
    if sys::check_hooks().is_some_and(|h| h.launch_reads.is_some()) {
        let _ = READ_ONLY.try_with(|r| r.borrow_mut().clear());
    }
}

/// Tells the checking driver the arguments the launch about to be made only reads.
#[inline]
pub(crate) fn launch_reads_told() {
    if let Some(reads) = sys::check_hooks().and_then(|h| h.launch_reads) {
        let pending = READ_ONLY.try_with(|r| std::mem::take(&mut *r.borrow_mut())).unwrap_or_default();
        // SAFETY: as in `new_owner`; the addresses are only recorded.
        pending.into_iter().for_each(|ptr| unsafe { reads(ptr) });
    }
}

thread_local! {
    /// The arguments of the launch being prepared on this thread that it only reads.
    static READ_ONLY: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The calling thread reads (or, with `write`, writes) the elements of `slice` now.
#[inline]
pub(crate) fn host_access<T>(slice: &[T], write: bool) {
    if let Some(hooks) = sys::check_hooks() {
        // SAFETY: as in `new_owner`; the addresses are only recorded.
        unsafe { (hooks.host_access)(slice.as_ptr() as u64, size_of_val(slice) as u64, c_int::from(write)) };
    }
}
