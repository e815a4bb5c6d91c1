//! Managed (unified) memory: one address valid on the host and every device, migrated by the
//! driver, with advice, prefetching, range attributes and stream attachment.

use super::buffer::DeviceBuffer;
use super::checked_bytes;
use super::source::Source;
use super::space::{HostAccessible, Managed};
use crate::abi::AbiVersions;
use crate::alloc::{ManagedAllocator, MemAttach};
use crate::device::Device;
use crate::error::{Error, Result, check};
use crate::stream::Stream;
use bytemuck::Pod;
use cuhost_driver_sys as sys;
use std::sync::Arc;

/// A place memory can live (`CUmemLocation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemLocation {
    /// A device.
    Device(Device),
    /// Host memory.
    Host,
    /// Host memory on a NUMA node.
    HostNuma(i32),
    /// Host memory on the NUMA node of the calling thread.
    HostNumaCurrent,
}

impl MemLocation {
    /// The raw `CUmemLocation`.
    pub fn as_raw(self) -> sys::CUmemLocation {
        use sys::CUmemLocationType as T;
        let (type_, id) = match self {
            MemLocation::Device(d) => (T::CU_MEM_LOCATION_TYPE_DEVICE, d.as_raw()),
            MemLocation::Host => (T::CU_MEM_LOCATION_TYPE_HOST, 0),
            MemLocation::HostNuma(n) => (T::CU_MEM_LOCATION_TYPE_HOST_NUMA, n),
            MemLocation::HostNumaCurrent => (T::CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT, 0),
        };
        crate::c_layout::mem_location(type_, id)
    }

    /// The `CUdevice` that the first ABI of `cuMemAdvise` and `cuMemPrefetchAsync` takes for
    /// this location (`CU_DEVICE_CPU` for the host); `None` for NUMA nodes, which it cannot name.
    pub(crate) fn device_ordinal(self) -> Option<sys::CUdevice> {
        match self {
            MemLocation::Device(d) => Some(d.as_raw()),
            MemLocation::Host => Some(sys::CU_DEVICE_CPU),
            MemLocation::HostNuma(_) | MemLocation::HostNumaCurrent => None,
        }
    }

    /// The location a raw type and id name; `None` for "no location" (`CU_MEM_LOCATION_TYPE_INVALID`).
    ///
    /// A type this crate does not know (from a driver newer than its headers) is an
    /// [`Error::InvalidArgument`] naming its value.
    pub fn from_raw(type_: sys::CUmemLocationType, id: i32) -> Result<Option<MemLocation>> {
        use sys::CUmemLocationType as T;
        match type_ {
            T::CU_MEM_LOCATION_TYPE_INVALID => Ok(None),
            T::CU_MEM_LOCATION_TYPE_DEVICE => Ok(Some(MemLocation::Device(Device::from_raw(id)))),
            T::CU_MEM_LOCATION_TYPE_HOST => Ok(Some(MemLocation::Host)),
            T::CU_MEM_LOCATION_TYPE_HOST_NUMA => Ok(Some(MemLocation::HostNuma(id))),
            T::CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT => Ok(Some(MemLocation::HostNumaCurrent)),
            _ => {
                Err(Error::invalid("MemLocation::from_raw", format!("unknown CUmemLocationType {}", type_.0)))
            }
        }
    }
}

/// Advice about how managed memory is used (`CUmem_advise`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemAdvice {
    /// `CU_MEM_ADVISE_SET_READ_MOSTLY`: mostly read; keep read-only copies where it is read.
    SetReadMostly,
    /// `CU_MEM_ADVISE_UNSET_READ_MOSTLY`.
    UnsetReadMostly,
    /// `CU_MEM_ADVISE_SET_PREFERRED_LOCATION`: keep it at the given location.
    SetPreferredLocation,
    /// `CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION`.
    UnsetPreferredLocation,
    /// `CU_MEM_ADVISE_SET_ACCESSED_BY`: keep it mapped for the given location.
    SetAccessedBy,
    /// `CU_MEM_ADVISE_UNSET_ACCESSED_BY`.
    UnsetAccessedBy,
}

impl MemAdvice {
    /// The raw `CUmem_advise`.
    pub fn as_raw(self) -> sys::CUmem_advise {
        use sys::CUmem_advise as A;
        match self {
            MemAdvice::SetReadMostly => A::CU_MEM_ADVISE_SET_READ_MOSTLY,
            MemAdvice::UnsetReadMostly => A::CU_MEM_ADVISE_UNSET_READ_MOSTLY,
            MemAdvice::SetPreferredLocation => A::CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
            MemAdvice::UnsetPreferredLocation => A::CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION,
            MemAdvice::SetAccessedBy => A::CU_MEM_ADVISE_SET_ACCESSED_BY,
            MemAdvice::UnsetAccessedBy => A::CU_MEM_ADVISE_UNSET_ACCESSED_BY,
        }
    }
}

/// `len` elements of `T` in managed memory: a [`DeviceBuffer`] whose memory the host can reach
/// too ([`as_host_slice`](DeviceBuffer::as_host_slice)), migrated by the driver on demand.
pub type ManagedBuffer<T> = DeviceBuffer<T, Managed>;

impl<T: Pod> DeviceBuffer<T, Managed> {
    /// Allocates `len` elements of managed memory for use on `stream`, attached as `attach`
    /// says, and zeroes them; returns once they are zero
    /// ([`cuMemAllocManaged`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// [`MemAttach::Single`] is refused: allocate globally or for the host, then attach to one
    /// stream with [`attach_async`](Self::attach_async). So is a stream being captured (an
    /// allocation there is graph memory, not managed memory): allocate before the capture.
    pub fn new_managed(stream: &Stream, len: usize, attach: MemAttach) -> Result<ManagedBuffer<T>> {
        let bytes = checked_bytes::<T>("ManagedBuffer::new_managed", len)?;
        if attach == MemAttach::Single {
            return Err(Error::invalid(
                "ManagedBuffer::new_managed",
                "allocate with MemAttach::Global or Host; attach to one stream with attach_async",
            ));
        }
        if crate::stream::capture_of(stream)?.is_some() {
            // On a capturing stream the allocation would be a graph memory node, device memory
            // that exists only inside the graph's launches, not managed memory.
            return Err(Error::refused(
                crate::error::Reason::DURING_CAPTURE,
                "ManagedBuffer::new_managed",
                "the stream is being captured into a graph, where allocations are graph memory (device \
                 memory of the graph's launches), not managed memory; allocate it before the capture",
            ));
        }
        let allocator = Arc::new(ManagedAllocator::with_attach(stream.context(), attach));
        // SAFETY: `cuMemAllocManaged` hands out managed memory.
        let mut b = unsafe { DeviceBuffer::allocate(Source::Shared(allocator), stream, len, bytes)? };
        b.view_mut().memset_d8(0)?;
        Ok(b)
    }
}

impl<T: Pod, S: HostAccessible> DeviceBuffer<T, S> {
    /// The memory as a host slice.
    ///
    /// # Safety
    ///
    /// No kernel or copy may be writing it while the slice is alive (synchronize first), and on
    /// devices without concurrent managed access no kernel may be running at all.
    pub unsafe fn as_host_slice(&self) -> &[T] {
        // SAFETY: managed memory is host-addressable; the caller excludes concurrent writers.
        unsafe { std::slice::from_raw_parts(self.as_raw() as *const T, self.len()) }
    }

    /// The memory as a mutable host slice.
    ///
    /// # Safety
    ///
    /// As [`as_host_slice`](Self::as_host_slice), and nothing may read it concurrently either.
    pub unsafe fn as_host_slice_mut(&mut self) -> &mut [T] {
        // SAFETY: as above, exclusively.
        unsafe { std::slice::from_raw_parts_mut(self.as_raw() as *mut T, self.len()) }
    }

    fn bytes(&self) -> usize {
        self.size_in_bytes()
    }

    /// Gives the driver advice about the whole buffer
    /// ([`cuMemAdvise`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__UNIFIED.html)).
    ///
    /// Drivers before 12.2 take a device or the host only: a NUMA location there is an
    /// [`Error::Load`] naming the version needed.
    pub fn advise(&self, advice: MemAdvice, location: MemLocation) -> Result<()> {
        static ADVISE: AbiVersions = AbiVersions::new("cuMemAdvise", &[12020, 8000]);
        let version = ADVISE.choose()?;
        self.context().enter()?;
        let status = if version == 12020 {
            // SAFETY: the range is this allocation.
            unsafe { sys::cuMemAdvise(self.as_raw(), self.bytes(), advice.as_raw(), location.as_raw()) }
        } else {
            let device = location.device_ordinal().ok_or_else(|| ADVISE.needs(12020))?;
            // SAFETY: as above.
            unsafe { sys::cuMemAdvise_v8000(self.as_raw(), self.bytes(), advice.as_raw(), device) }
        };
        check("cuMemAdvise", status)
    }

    /// Migrates the buffer to `location` in `stream`'s order
    /// ([`cuMemPrefetchAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__UNIFIED.html)).
    ///
    /// Drivers before 12.2 take a device or the host only: a NUMA location there is an
    /// [`Error::Load`] naming the version needed.
    pub fn prefetch_async(&self, location: MemLocation, stream: &Stream) -> Result<()> {
        static PREFETCH: AbiVersions = AbiVersions::new("cuMemPrefetchAsync", &[12020, 8000]);
        let version = PREFETCH.choose()?;
        self.context().enter()?;
        self.record_stream(stream)?;
        let (ptr, bytes) = (self.as_raw(), self.bytes());
        let status = if version == 12020 {
            // SAFETY: the range is this allocation; it is given back only after the work queued
            // on its stream and on `stream` (noted above).
            unsafe { sys::cuMemPrefetchAsync(ptr, bytes, location.as_raw(), 0, stream.as_raw()) }
        } else {
            let device = location.device_ordinal().ok_or_else(|| PREFETCH.needs(12020))?;
            // SAFETY: as above.
            unsafe { sys::cuMemPrefetchAsync_v8000(ptr, bytes, device, stream.as_raw()) }
        };
        check("cuMemPrefetchAsync", status)
    }

    /// Attaches the buffer to `stream` (or globally, or to the host) in stream order
    /// ([`cuStreamAttachMemAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)).
    pub fn attach_async(&self, stream: &Stream, attach: MemAttach) -> Result<()> {
        self.context().enter()?;
        self.record_stream(stream)?;
        // SAFETY: the whole allocation (length 0 means all of it).
        unsafe { driver!(cuStreamAttachMemAsync(stream.as_raw(), self.as_raw(), 0, attach.bits())) }
    }

    fn range_i32(&self, attribute: sys::CUmem_range_attribute) -> Result<i32> {
        let mut v: i32 = 0;
        // SAFETY: a 4-byte out-value, as these attributes write; the range is this allocation.
        unsafe {
            driver!(cuMemRangeGetAttribute((&raw mut v).cast(), 4, attribute, self.as_raw(), self.bytes()))
        }?;
        Ok(v)
    }

    /// Whether the read-mostly advice applies to the whole buffer
    /// ([`cuMemRangeGetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__UNIFIED.html)).
    ///
    /// Fails with the driver's status when it refuses the query, as on a device without
    /// managed memory.
    pub fn is_read_mostly(&self) -> Result<bool> {
        Ok(self.range_i32(sys::CUmem_range_attribute::CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY)? != 0)
    }

    /// The preferred location of the whole buffer, if one is set
    /// ([`cuMemRangeGetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__UNIFIED.html)).
    ///
    /// Fails with the driver's status when it refuses the query, and as
    /// [`MemLocation::from_raw`] does for a location type it does not know.
    pub fn preferred_location(&self) -> Result<Option<MemLocation>> {
        use sys::CUmem_range_attribute as R;
        let t = self.range_i32(R::CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE)?;
        let id = self.range_i32(R::CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID)?;
        MemLocation::from_raw(sys::CUmemLocationType(t as u32), id)
    }

    /// Where the whole buffer was last prefetched to, if anywhere
    /// ([`cuMemRangeGetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__UNIFIED.html)).
    ///
    /// Fails as [`preferred_location`](Self::preferred_location) does.
    pub fn last_prefetch_location(&self) -> Result<Option<MemLocation>> {
        use sys::CUmem_range_attribute as R;
        let t = self.range_i32(R::CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE)?;
        let id = self.range_i32(R::CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID)?;
        MemLocation::from_raw(sys::CUmemLocationType(t as u32), id)
    }

    /// The devices given the accessed-by advice for the whole buffer
    /// ([`cuMemRangeGetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__UNIFIED.html)).
    pub fn accessed_by(&self) -> Result<Vec<Device>> {
        let n = Device::count()?;
        let mut ids = vec![-1i32; n.max(1)];
        // SAFETY: the buffer holds one i32 per device, as the attribute requires.
        unsafe {
            driver!(cuMemRangeGetAttribute(
                ids.as_mut_ptr().cast(),
                ids.len() * 4,
                sys::CUmem_range_attribute::CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY,
                self.as_raw(),
                self.bytes(),
            ))
        }?;
        Ok(ids.into_iter().filter(|&d| d >= 0).map(Device::from_raw).collect())
    }
}
