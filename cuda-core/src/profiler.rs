//! Profiler control: limit what a profiler collects to the part of the program that matters.
//!
//! Profilers started with collection off (Nsight Systems `--capture-range=cudaProfilerApi`,
//! Nsight Compute `--profile-from-start off`) collect only between [`start`] and [`stop`].
//! See NVIDIA's [Profiler Control](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PROFILER.html).

use crate::error::Result;

/// Starts profiler collection for the current context
/// ([`cuProfilerStart`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PROFILER.html)).
/// Needs a current context.
pub fn start() -> Result<()> {
    // SAFETY: no arguments; the driver checks for a current context.
    unsafe { driver!(cuProfilerStart()) }
}

/// Stops profiler collection for the current context
/// ([`cuProfilerStop`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__PROFILER.html)).
pub fn stop() -> Result<()> {
    // SAFETY: no arguments; the driver checks for a current context.
    unsafe { driver!(cuProfilerStop()) }
}

/// Starts collection and returns a guard that stops it when dropped.
///
/// Fails as [`start`] does: with the driver's status when no context is current.
///
/// ```no_run
/// # fn main() -> cuhost::Result<()> {
/// let _profiling = cuhost::profiler::scope()?;
/// // ... the work to profile ...
/// # Ok(()) }
/// ```
pub fn scope() -> Result<ProfilerScope> {
    start()?;
    Ok(ProfilerScope { _not_send: std::marker::PhantomData })
}

/// Profiler collection, on until this guard is dropped or [`stop`](Self::stop)ped.
///
/// Collection is per context and the context is per thread, so the guard stays on its
/// thread (`!Send`).
#[must_use = "collection stops when this guard is dropped"]
#[derive(Debug)]
pub struct ProfilerScope {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl ProfilerScope {
    /// Stops collection now, reporting an error `Drop` would drop.
    pub fn stop(self) -> Result<()> {
        let result = stop();
        std::mem::forget(self);
        result
    }
}

impl Drop for ProfilerScope {
    fn drop(&mut self) {
        // An error here (the context was destroyed meanwhile) leaves nothing to stop.
        let _ = stop();
    }
}
