//! Where the pages of managed memory live now ([`ManagedBuffer::residency`], CUDA 13.4).

use super::{ManagedBuffer, MemLocation};
use crate::c_layout::mem_location_id;
use crate::error::{Error, Result};
use bytemuck::Pod;
use cuhost_driver_sys as sys;

impl<T: Pod> ManagedBuffer<T> {
    /// Where the buffer's memory lives, region by region
    /// ([`cuMemGetLocationInfo`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__UNIFIED.html),
    /// CUDA 13.4).
    ///
    /// The buffer is cut into regions of `summary_bytes` (the last one may be shorter); for
    /// each, the driver samples its pages every `sampling_bytes` (0: a granularity of the
    /// driver's choice) and reports the most common location, or `None` where the sampled
    /// pages are resident nowhere yet (never touched). The answer is a snapshot: work queued
    /// on any stream may move the pages.
    ///
    /// # Errors
    ///
    /// * [`Error::InvalidArgument`] when `summary_bytes` is 0 or larger than the buffer (an
    ///   empty buffer has no region), or `sampling_bytes` is larger than `summary_bytes`;
    /// * [`Error::Load`] naming the version needed and the one installed, on a driver older
    ///   than 13.4;
    /// * the driver's `CUDA_ERROR_NOT_SUPPORTED` where a device of the system lacks concurrent
    ///   managed access;
    /// * a location of a type [`MemLocation`] does not name (locality domains), as
    ///   [`MemLocation::from_raw`] refuses it.
    pub fn residency(&self, summary_bytes: usize, sampling_bytes: usize) -> Result<Vec<Option<MemLocation>>> {
        let size = self.size_in_bytes();
        if summary_bytes == 0 || summary_bytes > size {
            return Err(Error::invalid(
                "ManagedBuffer::residency",
                format!(
                    "the summary granularity is {summary_bytes} bytes; give 1 to {size} (the buffer's size)"
                ),
            ));
        }
        if sampling_bytes > summary_bytes {
            return Err(Error::invalid(
                "ManagedBuffer::residency",
                format!(
                    "the sampling granularity ({sampling_bytes} bytes) is larger than the summary granularity ({summary_bytes}); give at most that, or 0 for the driver's choice"
                ),
            ));
        }
        let regions = size.div_ceil(summary_bytes);
        let mut raw = Vec::new();
        raw.try_reserve_exact(regions).map_err(|_| {
            Error::invalid(
                "ManagedBuffer::residency",
                format!("{regions} regions of {summary_bytes} bytes are too many to report; give a larger summary granularity"),
            )
        })?;
        raw.resize(regions, sys::CUmemLocation::default());
        self.context().enter()?;
        // SAFETY: the range is this live allocation; the driver writes one location per region,
        // and `raw` holds that many.
        unsafe {
            driver!(cuMemGetLocationInfo(
                self.as_raw(),
                size,
                summary_bytes,
                sampling_bytes,
                raw.as_mut_ptr()
            ))
        }?;
        raw.iter().map(|l| MemLocation::from_raw(l.type_, mem_location_id(l))).collect()
    }
}
