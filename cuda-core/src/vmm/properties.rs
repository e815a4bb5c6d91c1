//! What a physical allocation is made of: [`AllocationProperties`] (location, shareable handle
//! types, compression, GPUDirect RDMA), its [`Granularity`], and what a device supports
//! ([`VmmSupport`]).

use crate::device::Device;
use crate::error::{Error, Result};
use crate::flags::flags;
use crate::memory::MemLocation;
use cuhost_driver_sys as sys;

flags! {
    /// The kinds of shareable handle a physical allocation may be exported as
    /// (`CUmemAllocationHandleType`, a bit mask).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct HandleTypes: u32 {
        /// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`: a file descriptor another process on
        /// this host can import (sent over a Unix socket with `SCM_RIGHTS`).
        const POSIX_FILE_DESCRIPTOR = 0x1;
        /// `CU_MEM_HANDLE_TYPE_FABRIC`: 64 bytes another process, also on another node of a
        /// multi-node NVLink system, can import (needs the IMEX service).
        const FABRIC = 0x8;
    }
}

/// Which allocation granularity to ask for (`CUmemAllocationGranularity_flags`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Granularity {
    /// The smallest unit sizes and offsets must be multiples of.
    Minimum,
    /// The unit the driver recommends for performance.
    Recommended,
}

impl Granularity {
    /// The raw value.
    pub fn as_raw(self) -> sys::CUmemAllocationGranularity_flags {
        match self {
            Granularity::Minimum => sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
            Granularity::Recommended => {
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
            }
        }
    }
}

impl TryFrom<sys::CUmemAllocationGranularity_flags> for Granularity {
    type Error = Error;
    fn try_from(raw: sys::CUmemAllocationGranularity_flags) -> Result<Granularity> {
        use sys::CUmemAllocationGranularity_flags as F;
        match raw {
            F::CU_MEM_ALLOC_GRANULARITY_MINIMUM => Ok(Granularity::Minimum),
            F::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED => Ok(Granularity::Recommended),
            other => {
                Err(Error::invalid("Granularity::try_from", format!("unknown granularity flag {}", other.0)))
            }
        }
    }
}

/// The properties of a physical allocation (`CUmemAllocationProp`): where it lives, which
/// handle types it can be exported as, and its optional features.
///
/// ```no_run
/// use cuhost::Device;
/// use cuhost::vmm::{AllocationProperties, Granularity, HandleTypes};
/// # fn main() -> cuhost::Result<()> {
/// let props = AllocationProperties::device(Device::get(0)?)
///     .with_handle_types(HandleTypes::POSIX_FILE_DESCRIPTOR);
/// let chunk = props.granularity(Granularity::Recommended)?;
/// # let _ = chunk; Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AllocationProperties {
    /// Where the memory lives: a device, or a host NUMA node
    /// ([`MemLocation::HostNuma`], CUDA 12.2 and later, where the device reports
    /// [`VmmSupport::host_numa`]).
    pub location: MemLocation,
    /// The handle types it may be exported as; empty: not shareable.
    pub handle_types: HandleTypes,
    /// Generic compression (`CU_MEM_ALLOCATION_COMP_GENERIC`), where the device reports
    /// [`VmmSupport::compression`]; the driver may still give uncompressed memory.
    pub compression: bool,
    /// Usable for GPUDirect RDMA, where the device reports [`VmmSupport::gpu_direct_rdma`].
    pub gpu_direct_rdma: bool,
    /// A tile pool (`CU_MEM_CREATE_USAGE_TILE_POOL`): memory that tiles of sparse arrays are
    /// mapped onto ([`SparseArray::map`](super::SparseArray::map)), which only such memory
    /// may back. The driver does not report it back in the properties of an allocation
    /// ([`PhysicalMemory::properties`](super::PhysicalMemory::properties) reads it as `false`).
    pub tile_pool: bool,
}

impl AllocationProperties {
    /// Pinned memory of `device`, not shareable, no compression, no RDMA.
    pub fn device(device: Device) -> AllocationProperties {
        AllocationProperties::at(MemLocation::Device(device))
    }

    /// Pinned host memory on NUMA node `node` (CUDA 12.2 and later).
    pub fn host_numa(node: i32) -> AllocationProperties {
        AllocationProperties::at(MemLocation::HostNuma(node))
    }

    fn at(location: MemLocation) -> AllocationProperties {
        AllocationProperties {
            location,
            handle_types: HandleTypes::empty(),
            compression: false,
            gpu_direct_rdma: false,
            tile_pool: false,
        }
    }

    /// The same, exportable as `handle_types`.
    pub fn with_handle_types(self, handle_types: HandleTypes) -> AllocationProperties {
        AllocationProperties { handle_types, ..self }
    }

    /// The same, with generic compression asked for or not.
    pub fn with_compression(self, compression: bool) -> AllocationProperties {
        AllocationProperties { compression, ..self }
    }

    /// The same, usable for GPUDirect RDMA or not.
    pub fn with_gpu_direct_rdma(self, gpu_direct_rdma: bool) -> AllocationProperties {
        AllocationProperties { gpu_direct_rdma, ..self }
    }

    /// The same, made a tile pool for sparse arrays or not.
    pub fn with_tile_pool(self, tile_pool: bool) -> AllocationProperties {
        AllocationProperties { tile_pool, ..self }
    }

    /// The raw `CUmemAllocationProp`.
    pub fn to_raw(&self) -> sys::CUmemAllocationProp {
        // SAFETY: a C struct of integers and a null pointer, for which all zeroes is valid.
        let mut raw: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
        raw.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        raw.requestedHandleTypes = sys::CUmemAllocationHandleType(self.handle_types.bits());
        raw.location = self.location.as_raw();
        raw.allocFlags.compressionType = if self.compression {
            sys::CUmemAllocationCompType::CU_MEM_ALLOCATION_COMP_GENERIC.0 as u8
        } else {
            sys::CUmemAllocationCompType::CU_MEM_ALLOCATION_COMP_NONE.0 as u8
        };
        raw.allocFlags.gpuDirectRDMACapable = u8::from(self.gpu_direct_rdma);
        if self.tile_pool {
            raw.allocFlags.usage = sys::CU_MEM_CREATE_USAGE_TILE_POOL as u16;
        }
        raw
    }

    /// The properties a raw `CUmemAllocationProp` describes; a location type the crate does
    /// not know, or none, is an [`Error::InvalidArgument`].
    pub fn from_raw(raw: &sys::CUmemAllocationProp) -> Result<AllocationProperties> {
        let location =
            MemLocation::from_raw(raw.location.type_, crate::c_layout::mem_location_id(&raw.location))?
                .ok_or_else(|| {
                    Error::invalid("AllocationProperties::from_raw", "the properties name no location")
                })?;
        Ok(AllocationProperties {
            location,
            handle_types: HandleTypes::from_bits_truncate(raw.requestedHandleTypes.0),
            compression: u32::from(raw.allocFlags.compressionType)
                == sys::CUmemAllocationCompType::CU_MEM_ALLOCATION_COMP_GENERIC.0,
            gpu_direct_rdma: raw.allocFlags.gpuDirectRDMACapable != 0,
            tile_pool: u32::from(raw.allocFlags.usage) & sys::CU_MEM_CREATE_USAGE_TILE_POOL != 0,
        })
    }

    /// The allocation granularity for these properties: sizes, offsets and reserved addresses
    /// of mappings are multiples of the minimum
    /// ([`cuMemGetAllocationGranularity`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)).
    ///
    /// Fails with the driver's status when it refuses the properties, and with an
    /// [`Error::InvalidArgument`] when it answers a granularity that is 0 or not a power of
    /// two, which nothing can be rounded to (every caller in this crate gets its granularity
    /// here, so none divides by such an answer).
    pub fn granularity(&self, which: Granularity) -> Result<usize> {
        crate::device::init()?;
        let raw = self.to_raw();
        let mut granularity = 0;
        // SAFETY: one out-parameter and a valid, initialized property struct.
        unsafe { driver!(cuMemGetAllocationGranularity(&mut granularity, &raw, which.as_raw())) }?;
        checked_granularity(granularity)
    }
}

/// A granularity the driver answered, if sizes can be rounded to it: not 0, a power of two.
fn checked_granularity(granularity: usize) -> Result<usize> {
    if granularity.is_power_of_two() {
        Ok(granularity)
    } else {
        Err(Error::invalid(
            "AllocationProperties::granularity",
            format!(
                "the driver reported an allocation granularity of {granularity} bytes, which is not a \
                 power of two; these properties cannot be used for virtual memory on this driver"
            ),
        ))
    }
}

/// What a device supports of virtual memory management, from its attributes
/// ([`cuDeviceGetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VmmSupport {
    /// `CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED`.
    pub virtual_memory_management: bool,
    /// `CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED`.
    pub posix_file_descriptor: bool,
    /// `CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED`.
    pub fabric: bool,
    /// `CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED`.
    pub compression: bool,
    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED`.
    pub gpu_direct_rdma: bool,
    /// `CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED`: host-NUMA
    /// physical allocations.
    pub host_numa: bool,
}

impl VmmSupport {
    /// Reads the attributes of `device`. An attribute an older driver does not know counts as
    /// unsupported, not as an error; any other failure of
    /// [`Device::attribute`](crate::device::Device::attribute) is returned.
    pub fn of(device: &Device) -> Result<VmmSupport> {
        use sys::CUdevice_attribute as A;
        let flag = |attribute: A| -> Result<bool> {
            match device.attribute(attribute) {
                Ok(v) => Ok(v != 0),
                Err(e) if e.driver_status() == Some(sys::CUresult::CUDA_ERROR_INVALID_VALUE) => Ok(false),
                Err(e) => Err(e),
            }
        };
        Ok(VmmSupport {
            virtual_memory_management: flag(A::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)?,
            posix_file_descriptor: flag(A::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED)?,
            fabric: flag(A::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED)?,
            compression: flag(A::CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED)?,
            gpu_direct_rdma: flag(A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED)?,
            host_numa: flag(A::CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_round_trip_through_the_raw_struct() {
        let props = AllocationProperties::device(Device::from_raw(1))
            .with_handle_types(HandleTypes::POSIX_FILE_DESCRIPTOR | HandleTypes::FABRIC)
            .with_compression(true)
            .with_gpu_direct_rdma(true)
            .with_tile_pool(true);
        let raw = props.to_raw();
        assert_eq!(u32::from(raw.allocFlags.usage), sys::CU_MEM_CREATE_USAGE_TILE_POOL);
        assert_eq!(raw.requestedHandleTypes.0, 0x9);
        assert_eq!(crate::c_layout::mem_location_id(&raw.location), 1);
        assert_eq!(raw.type_, sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED);
        assert_eq!(AllocationProperties::from_raw(&raw).ok(), Some(props));
        let numa = AllocationProperties::host_numa(3);
        assert_eq!(numa.to_raw().location.type_, sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST_NUMA);
        assert_eq!(AllocationProperties::from_raw(&numa.to_raw()).ok(), Some(numa));
    }

    #[test]
    fn granularity_flags_convert_both_ways() {
        for g in [Granularity::Minimum, Granularity::Recommended] {
            assert_eq!(Granularity::try_from(g.as_raw()).ok(), Some(g));
        }
        assert!(Granularity::try_from(sys::CUmemAllocationGranularity_flags(7)).is_err());
    }

    #[test]
    fn granularities_that_nothing_rounds_to_are_errors() {
        assert!(matches!(checked_granularity(0), Err(Error::InvalidArgument { .. })));
        assert!(matches!(checked_granularity(3 << 20), Err(Error::InvalidArgument { .. })));
        assert_eq!(checked_granularity(2 << 20).ok(), Some(2 << 20));
        assert_eq!(checked_granularity(1).ok(), Some(1));
    }

    #[test]
    fn properties_without_a_location_are_refused() {
        // SAFETY: all zeroes is a valid CUmemAllocationProp.
        let raw: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
        assert!(matches!(AllocationProperties::from_raw(&raw), Err(Error::InvalidArgument { .. })));
    }
}
