//! [`Mapping`]: physical memory mapped into an address range, and who may access it
//! ([`AccessGrant`]).

use super::physical::PhysicalMemory;
use super::range::AddressRange;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::memory::{DeviceView, DeviceViewMut, MemLocation};
use crate::mempool::Access;
use crate::stream::Stream;
use crate::track::StreamUses;
use bytemuck::Pod;
use cuhost_driver_sys as sys;
use std::mem::ManuallyDrop;

/// Access to a mapping granted to one location (`CUmemAccessDesc`); a slice of them is what
/// [`Mapping::set_access`] passes to the driver as it is.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct AccessGrant(sys::CUmemAccessDesc);

impl AccessGrant {
    /// What the grant holds, for comparing and printing: the location's type and id, and the
    /// access flags. (The C struct's derives depend on the header it was generated from.)
    fn key(&self) -> (u32, i32, u32) {
        (self.0.location.type_.0, crate::c_layout::mem_location_id(&self.0.location), self.0.flags.0)
    }
}

impl PartialEq for AccessGrant {
    fn eq(&self, other: &AccessGrant) -> bool {
        self.key() == other.key()
    }
}

impl Eq for AccessGrant {}

impl std::hash::Hash for AccessGrant {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}

impl std::fmt::Debug for AccessGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (location_type, id, flags) = self.key();
        f.debug_struct("AccessGrant")
            .field("location_type", &location_type)
            .field("id", &id)
            .field("flags", &flags)
            .finish()
    }
}

impl AccessGrant {
    /// `access` for `location` (a device, or host memory where the driver supports it).
    pub fn new(location: MemLocation, access: Access) -> AccessGrant {
        AccessGrant(sys::CUmemAccessDesc {
            location: location.as_raw(),
            flags: access.as_raw(),
            ..Default::default()
        })
    }

    /// `access` for `device`.
    pub fn device(device: Device, access: Access) -> AccessGrant {
        AccessGrant::new(MemLocation::Device(device), access)
    }

    /// The raw `CUmemAccessDesc`.
    pub fn as_raw(&self) -> sys::CUmemAccessDesc {
        self.0
    }
}

/// Physical memory mapped at an address: `size` bytes from [`as_raw`](Self::as_raw).
///
/// Made by [`AddressRange::map`]. The mapping holds its range and its physical allocation, so
/// that whatever order the three are dropped in, the memory is unmapped
/// ([`cuMemUnmap`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)) first,
/// then released, then the addresses freed. Dropping it first waits for the work queued
/// through its views ([`view`](Self::view), [`view_mut`](Self::view_mut)) on any stream:
/// unmapping is not stream-ordered. If that wait fails (the context is broken), the memory is
/// left mapped and kept (a leak, not an unmap under running work) and the error is kept in the
/// context.
#[derive(Debug)]
pub struct Mapping {
    /// The first mapped address.
    ptr: sys::CUdeviceptr,
    size: usize,
    /// The streams its views were used on.
    uses: StreamUses,
    // Dropped by hand after the unmap: the physical memory is released before the addresses
    // are freed.
    physical: ManuallyDrop<PhysicalMemory>,
    range: ManuallyDrop<AddressRange>,
}

/// Mapping into a range lives with the mappings, so that a range does not depend on them.
impl AddressRange {
    /// Maps all of `physical` at `offset` bytes into the range
    /// ([`cuMemMap`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)).
    /// Nothing may access the mapping until [`Mapping::set_access`] allows it. The driver maps
    /// whole physical allocations only (a part, or from an offset, is `CUDA_ERROR_NOT_SUPPORTED`),
    /// so to map pieces, make one [`PhysicalMemory`] per piece.
    ///
    /// Checked before the call, as [`Error::InvalidArgument`]s: a mapping that ends past the
    /// reserved range, an offset that is not a multiple of the allocation granularity (the
    /// message names it), and physical memory that a [`VmmAllocator`](super::VmmAllocator)
    /// buffer or a [`GrowableBuffer`](super::GrowableBuffer) maps as its own (reached through
    /// [`Mapping::physical`]), which has exclusive access to it. Mapping over addresses
    /// already mapped is the driver's error.
    pub fn map(&self, offset: usize, physical: &PhysicalMemory) -> Result<Mapping> {
        physical.mappable("AddressRange::map")?;
        let size = physical.size();
        super::range::check_mapping(self.size(), offset, size, physical.granularity())?;
        self.context().enter()?;
        let ptr = self.as_raw() + offset as u64;
        // SAFETY: the addresses are inside this reservation (checked above); the reservation and
        // the physical allocation stay alive while the mapping, which holds them, is.
        unsafe { driver!(cuMemMap(ptr, size, 0, physical.as_raw(), 0)) }?;
        Ok(Mapping::new(ptr, size, self.clone(), physical.clone()))
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        #[cfg(feature = "nccl")]
        if let Some(group) = self.uses.pending_group() {
            return self.unmap_after(group);
        }
        if let Err(e) = self.uses.synchronize_for_release() {
            self.range.context().defer(e.dropping("Mapping", None));
            return;
        }
        let (ptr, size) = (self.ptr, self.size);
        // SAFETY: this value made the mapping and unmaps it once, after the work queued
        // through its views.
        self.range.context().with_current_for_drop("Mapping", || unsafe { driver!(cuMemUnmap(ptr, size)) });
        // SAFETY: each field is dropped once, here, and never used again.
        unsafe {
            ManuallyDrop::drop(&mut self.physical);
            ManuallyDrop::drop(&mut self.range);
        }
    }
}

impl Mapping {
    /// Hands the mapping to the NCCL group `group`, whose calls (queued when it ends) use it:
    /// it is unmapped once they are queued, in the streams' order, as a dropped buffer is. A
    /// group that was still queueing its calls in the background when it ended (non-blocking
    /// communicators) leaves it mapped (leaked), with an error kept in the context.
    #[cfg(feature = "nccl")]
    #[cold]
    fn unmap_after(&mut self, group: u64) {
        // SAFETY: `self` is being dropped and never uses these fields again; the new value
        // takes them over.
        let later = unsafe {
            Mapping {
                ptr: self.ptr,
                size: self.size,
                uses: std::mem::take(&mut self.uses),
                physical: ManuallyDrop::new(ManuallyDrop::take(&mut self.physical)),
                range: ManuallyDrop::new(ManuallyDrop::take(&mut self.range)),
            }
        };
        let release: crate::track::scopes::Release = Box::new(move |queued| {
            if queued {
                // Dropped again: waits for the group's streams, or hands itself to a group
                // still open.
                drop(later);
            } else {
                later.range.context().defer(
                    Error::invalid(
                        "Mapping",
                        "a mapping dropped inside an NCCL group of non-blocking communicators is kept \
                     (leaked): the group was still queueing its calls in the background when it \
                     ended; keep mappings alive until the communicators are done (Communicator::wait)",
                    )
                    .dropping("Mapping", None),
                );
                std::mem::forget(later);
            }
        });
        if let Err(now) = crate::track::scopes::defer_to(group, release) {
            // The group ended meanwhile: its calls are queued.
            now(true);
        }
    }

    pub(crate) fn new(
        ptr: sys::CUdeviceptr,
        size: usize,
        range: AddressRange,
        physical: PhysicalMemory,
    ) -> Mapping {
        Mapping {
            ptr,
            size,
            uses: StreamUses::unretained(),
            physical: ManuallyDrop::new(physical),
            range: ManuallyDrop::new(range),
        }
    }

    /// Sets the access of each location in `grants` to the mapped memory
    /// ([`cuMemSetAccess`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)).
    /// A device must be granted access before anything on it touches the memory; a device
    /// other than the memory's own needs peer capability with it.
    ///
    /// No grant is an [`Error::InvalidArgument`]; a device without peer capability is refused
    /// by the driver with its status.
    pub fn set_access(&self, grants: &[AccessGrant]) -> Result<()> {
        if grants.is_empty() {
            return Err(Error::invalid("Mapping::set_access", "no access grant was given"));
        }
        self.range.context().enter()?;
        // SAFETY: `AccessGrant` is a transparent `CUmemAccessDesc`, so the slice is an array of
        // `grants.len()` of them; the addresses are mapped while `self` lives.
        unsafe { driver!(cuMemSetAccess(self.ptr, self.size, grants.as_ptr().cast(), grants.len())) }
    }

    /// The access `location` has to the mapped memory
    /// ([`cuMemGetAccess`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)).
    ///
    /// Fails with the driver's status when it refuses the query, and with an
    /// [`Error::InvalidArgument`] for access flags this crate does not know.
    pub fn access(&self, location: MemLocation) -> Result<Access> {
        self.range.context().enter()?;
        let raw_location = location.as_raw();
        let mut flags = 0u64;
        // SAFETY: one out-parameter and one location, both live locals.
        unsafe { driver!(cuMemGetAccess(&mut flags, &raw_location, self.ptr)) }?;
        let flags = u32::try_from(flags).map_err(|_| {
            Error::invalid("Mapping::access", format!("the driver reported unknown access flags {flags:#x}"))
        })?;
        Access::try_from(sys::CUmemAccess_flags(flags))
    }

    /// The first mapped address.
    #[inline]
    pub fn as_raw(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    /// The number of bytes mapped.
    #[inline]
    pub fn size(&self) -> usize {
        self.size
    }

    /// The range the memory is mapped into.
    #[inline]
    pub fn range(&self) -> &AddressRange {
        &self.range
    }

    /// The physical allocation mapped.
    #[inline]
    pub fn physical(&self) -> &PhysicalMemory {
        &self.physical
    }

    /// Notes the streams and open scopes of `uses` as ones whose work uses the mapping (for a
    /// span handing its mappings back).
    pub(crate) fn take_uses_of(&self, uses: &StreamUses) {
        uses.copy_into(&self.uses);
    }

    /// Notes the mapping's streams and open scopes, and the order of its uses, on `uses` (for a
    /// span made of it).
    pub(crate) fn give_uses_to(&self, uses: &StreamUses) {
        self.uses.copy_into(uses);
    }

    fn elements<T: Pod>(&self, operation: &'static str) -> Result<usize> {
        mapped_elements::<T>(operation, self.ptr, self.size)
    }

    /// A shared view of the mapped memory as elements of `T`, whose synchronous copies run in
    /// `stream`'s order. The memory must be readable by `stream`'s device
    /// ([`set_access`](Self::set_access)). The mapping notes `stream`, and every other stream
    /// the view's `_async` operations run on, and waits for them before it unmaps.
    ///
    /// A mapping that is not a whole number of `T`s, or not aligned for `T`, is an
    /// [`Error::InvalidArgument`], and so is a default stream of another context or another
    /// thread.
    pub fn view<'a, T: Pod>(&'a self, stream: &'a Stream) -> Result<DeviceView<'a, T>> {
        let len = self.elements::<T>("Mapping::view")?;
        crate::track::nameable(self.range.context(), stream)?;
        Ok(DeviceView::unordered(self.range.context(), self.ptr, len, Some(stream), &self.uses))
    }

    /// An exclusive view of the mapped memory as elements of `T`, as [`view`](Self::view); fails
    /// as it does.
    pub fn view_mut<'a, T: Pod>(&'a mut self, stream: &'a Stream) -> Result<DeviceViewMut<'a, T>> {
        let len = self.elements::<T>("Mapping::view_mut")?;
        crate::track::nameable(self.range.context(), stream)?;
        Ok(DeviceViewMut::unordered(self.range.context(), self.ptr, len, Some(stream), &self.uses))
    }
}

/// How many `T`s `size` mapped bytes at `ptr` hold: a whole number of aligned elements, or an
/// [`Error::InvalidArgument`] of `operation`.
pub(super) fn mapped_elements<T: Pod>(
    operation: &'static str,
    ptr: sys::CUdeviceptr,
    size: usize,
) -> Result<usize> {
    let element = std::mem::size_of::<T>();
    if element == 0 || size % element != 0 || ptr % std::mem::align_of::<T>() as u64 != 0 {
        return Err(Error::invalid(
            operation,
            format!("{size} mapped bytes are not a whole number of aligned {element}-byte elements"),
        ));
    }
    Ok(size / element)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_are_access_descriptors() {
        assert_eq!(std::mem::size_of::<AccessGrant>(), std::mem::size_of::<sys::CUmemAccessDesc>());
        let g = AccessGrant::device(Device::from_raw(2), Access::ReadWrite).as_raw();
        assert_eq!(g.location.type_, sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE);
        assert_eq!(crate::c_layout::mem_location_id(&g.location), 2);
        assert_eq!(g.flags, sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    }
}
