//! The SMs a stream's work may use ([`Stream::sm_resource`], CUDA 13.1): all of the device's
//! for an ordinary stream, a partition's for a stream of a green context.
//!
//! Built where the bindings come from CUDA 13.1 headers or newer.

use super::Stream;
use crate::error::Result;
use cuhost_driver_sys as sys;

/// The streaming multiprocessors available to a stream (`CUdevSmResource`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SmResource {
    /// How many SMs.
    pub sm_count: u32,
    /// The smallest partition these SMs can be split into.
    pub min_partition_size: u32,
    /// The alignment of SM counts in a split (SMs scheduled together).
    pub coscheduled_alignment: u32,
}

impl Stream {
    /// The SMs work queued on this stream may use
    /// ([`cuStreamGetDevResource`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GREEN__CONTEXTS.html),
    /// CUDA 13.1). On a driver older than 13.1 this is an [`Error::Load`](crate::error::Error::Load)
    /// naming the version needed and the one installed.
    pub fn sm_resource(&self) -> Result<SmResource> {
        self.bind_if_default()?;
        let mut raw = sys::CUdevResource::default();
        // SAFETY: a live stream and one out-parameter of the type the call fills.
        unsafe {
            driver!(cuStreamGetDevResource(
                self.as_raw(),
                &mut raw,
                sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM,
            ))
        }?;
        // SAFETY: the driver filled the SM member, the one asked for.
        let sm = unsafe { raw.__bindgen_anon_1.sm };
        Ok(SmResource {
            sm_count: sm.smCount,
            min_partition_size: sm.minSmPartitionSize,
            coscheduled_alignment: sm.smCoscheduledAlignment,
        })
    }
}
