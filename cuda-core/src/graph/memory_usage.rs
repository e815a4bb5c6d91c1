//! The memory that graphs' allocation nodes draw from, per device: usage and trimming.

use crate::device::Device;
use crate::error::Result;
use cuhost_driver_sys as sys;

/// How much memory a device's graphs use and hold (`CUgraphMem_attribute`), in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct GraphMemoryUsage {
    /// `CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT`: allocated by allocation nodes and not freed.
    pub used: u64,
    /// `CU_GRAPH_MEM_ATTR_USED_MEM_HIGH`: the most `used` has been since the last reset.
    pub used_high: u64,
    /// `CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT`: held by the graph allocator, used or cached.
    pub reserved: u64,
    /// `CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH`: the most `reserved` has been since the last
    /// reset.
    pub reserved_high: u64,
}

fn attribute(device: &Device, attr: sys::CUgraphMem_attribute) -> Result<u64> {
    let mut value = 0u64;
    // SAFETY: each of these attributes is one 64-bit value.
    unsafe { driver!(cuDeviceGetGraphMemAttribute(device.as_raw(), attr, (&mut value as *mut u64).cast())) }?;
    Ok(value)
}

/// The memory `device`'s graphs use and hold
/// ([`cuDeviceGetGraphMemAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
///
/// Reads four attributes; the driver's status is returned when it refuses one (a driver that
/// cannot be initialised, or a device it does not know).
pub fn memory_usage(device: &Device) -> Result<GraphMemoryUsage> {
    crate::device::init()?;
    use sys::CUgraphMem_attribute as A;
    Ok(GraphMemoryUsage {
        used: attribute(device, A::CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT)?,
        used_high: attribute(device, A::CU_GRAPH_MEM_ATTR_USED_MEM_HIGH)?,
        reserved: attribute(device, A::CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT)?,
        reserved_high: attribute(device, A::CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)?,
    })
}

/// Sets the two high watermarks of [`memory_usage`] back to zero
/// ([`cuDeviceSetGraphMemAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
pub fn reset_memory_high_watermarks(device: &Device) -> Result<()> {
    crate::device::init()?;
    for attr in [
        sys::CUgraphMem_attribute::CU_GRAPH_MEM_ATTR_USED_MEM_HIGH,
        sys::CUgraphMem_attribute::CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH,
    ] {
        let mut zero = 0u64;
        // SAFETY: the watermarks take one 64-bit value, which must be zero.
        unsafe {
            driver!(cuDeviceSetGraphMemAttribute(device.as_raw(), attr, (&mut zero as *mut u64).cast()))
        }?;
    }
    Ok(())
}

/// Gives the memory the graph allocator caches on `device`, and no running or queued graph
/// uses, back to the system
/// ([`cuDeviceGraphMemTrim`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
pub fn trim_memory(device: &Device) -> Result<()> {
    crate::device::init()?;
    // SAFETY: any device ordinal; the driver checks it.
    unsafe { driver!(cuDeviceGraphMemTrim(device.as_raw())) }
}
