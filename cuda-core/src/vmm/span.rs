//! [`MappedSpan`]: mappings of one address range that lie end to end, used as one memory (the
//! striping of one buffer over the memory of several devices, or over several physical
//! allocations of one).

#![forbid(unsafe_code)]

use super::mapping::{AccessGrant, Mapping};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::memory::{DeviceView, DeviceViewMut};
use crate::stream::Stream;
use crate::track::StreamUses;
use bytemuck::Pod;
use cuhost_driver_sys as sys;

/// Mappings of one [`AddressRange`](super::AddressRange) that cover consecutive addresses,
/// owned together and viewed as one piece of memory.
///
/// This is how one buffer is striped over the memory of several devices: reserve one range,
/// map a [`PhysicalMemory`](super::PhysicalMemory) of each device at consecutive offsets, grant
/// access to the devices that use it, and view the whole as one array.
///
/// The span owns its mappings and notes the streams its views were used on. Dropping it waits
/// for the work queued through its views before the mappings are unmapped, as a
/// [`Mapping`]'s drop does; [`into_mappings`](Self::into_mappings) hands the mappings back,
/// each keeping those streams to wait for.
///
/// ```no_run
/// use cuhost::mempool::Access;
/// use cuhost::vmm::{AccessGrant, AddressRange, AllocationProperties, Granularity, MappedSpan, PhysicalMemory};
/// use cuhost::{Context, Device, Stream, StreamFlags};
/// # fn main() -> cuhost::Result<()> {
/// let devices = [Device::get(0)?, Device::get(1)?];
/// let ctx = Context::primary(&devices[0])?;
/// let props = |d| AllocationProperties::device(d);
/// let chunk = props(devices[0]).granularity(Granularity::Recommended)?;
/// let range = AddressRange::reserve(&ctx, 2 * chunk, 0)?;
/// let mut mappings = Vec::new();
/// for (i, d) in devices.iter().enumerate() {
///     // Half of the buffer lives on each device.
///     let physical = PhysicalMemory::new(&Context::primary(d)?, chunk, &props(*d))?;
///     mappings.push(range.map(i * chunk, &physical)?);
/// }
/// let mut span = MappedSpan::new(mappings)?;
/// span.set_access(&[AccessGrant::device(devices[0], Access::ReadWrite)])?;
/// let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
/// span.view_mut::<f32>(&stream)?.memset_d32(0)?; // one view over both devices' memory
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct MappedSpan {
    ptr: sys::CUdeviceptr,
    size: usize,
    /// The context of the range.
    context: Context,
    /// The streams the views were used on; waited for before the mappings go.
    uses: StreamUses,
    mappings: Vec<Mapping>,
}

impl MappedSpan {
    /// The span of `mappings`, given in address order: each must start where the one before
    /// it ends, all in one reserved range.
    ///
    /// No mapping, mappings of different ranges, or a gap or overlap between two of them is an
    /// [`Error::InvalidArgument`]; the mappings are then dropped (unmapped). Check them first
    /// to keep them.
    pub fn new(mappings: Vec<Mapping>) -> Result<MappedSpan> {
        const OP: &str = "MappedSpan::new";
        let Some(first) = mappings.first() else {
            return Err(Error::invalid(OP, "no mapping was given"));
        };
        let (ptr, range) = (first.as_raw(), first.range().as_raw());
        let mut end = ptr;
        for (i, m) in mappings.iter().enumerate() {
            if m.range().as_raw() != range {
                return Err(Error::invalid(
                    OP,
                    format!("mapping {i} is of another reserved range than mapping 0"),
                ));
            }
            if m.as_raw() != end {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "mapping {i} starts at {:#x}, not at {end:#x} where the one before it ends; give the \
                         mappings in address order, with no gap",
                        m.as_raw()
                    ),
                ));
            }
            end += m.size() as u64;
        }
        let size =
            usize::try_from(end - ptr).map_err(|_| Error::invalid(OP, "the span is larger than memory"))?;
        let context = first.range().context().clone();
        // Work queued through a mapping before comes before work through the span's views.
        let uses = StreamUses::unretained();
        mappings.iter().for_each(|m| m.give_uses_to(&uses));
        Ok(MappedSpan { ptr, size, context, uses, mappings })
    }

    /// The first address.
    #[inline]
    pub fn as_raw(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    /// The number of bytes the mappings cover together.
    #[inline]
    pub fn size(&self) -> usize {
        self.size
    }

    /// The mappings, in address order.
    #[inline]
    pub fn mappings(&self) -> &[Mapping] {
        &self.mappings
    }

    /// Sets the access of each location in `grants` to every mapping of the span
    /// ([`cuMemSetAccess`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)),
    /// as [`Mapping::set_access`] does; stops at the first mapping the driver refuses.
    pub fn set_access(&self, grants: &[AccessGrant]) -> Result<()> {
        self.mappings.iter().try_for_each(|m| m.set_access(grants))
    }

    fn elements<T: Pod>(&self, operation: &'static str) -> Result<usize> {
        super::mapping::mapped_elements::<T>(operation, self.ptr, self.size)
    }

    /// A shared view of the whole span as elements of `T`, as [`Mapping::view`] gives of one
    /// mapping: its synchronous copies run in `stream`'s order, and the span notes every
    /// stream its `_async` operations run on, for the unmap to wait for. Every device that
    /// runs work on it needs access to every mapping ([`set_access`](Self::set_access)).
    ///
    /// A span that is not a whole number of aligned `T`s is an [`Error::InvalidArgument`], and
    /// so is a default stream of another context or another thread.
    pub fn view<'a, T: Pod>(&'a self, stream: &'a Stream) -> Result<DeviceView<'a, T>> {
        let len = self.elements::<T>("MappedSpan::view")?;
        crate::track::nameable(&self.context, stream)?;
        Ok(DeviceView::unordered(&self.context, self.ptr, len, Some(stream), &self.uses))
    }

    /// An exclusive view of the whole span as elements of `T`, as [`view`](Self::view); fails
    /// as it does.
    pub fn view_mut<'a, T: Pod>(&'a mut self, stream: &'a Stream) -> Result<DeviceViewMut<'a, T>> {
        let len = self.elements::<T>("MappedSpan::view_mut")?;
        crate::track::nameable(&self.context, stream)?;
        Ok(DeviceViewMut::unordered(&self.context, self.ptr, len, Some(stream), &self.uses))
    }

    /// The mappings back, each noting the streams (and open NCCL groups) the span's views were
    /// used on, so that its own drop waits for that work.
    pub fn into_mappings(mut self) -> Vec<Mapping> {
        let mappings = std::mem::take(&mut self.mappings);
        mappings.iter().for_each(|m| m.take_uses_of(&self.uses));
        mappings
    }
}

impl Drop for MappedSpan {
    fn drop(&mut self) {
        if self.mappings.is_empty() {
            return;
        }
        // The mappings wait for their own uses as they drop; the span's come first.
        if let Err(e) = self.uses.synchronize_for_release() {
            self.context.defer(e.dropping("MappedSpan", None));
            // Kept mapped (leaked) rather than unmapped under running work.
            std::mem::take(&mut self.mappings).into_iter().for_each(std::mem::forget);
        }
    }
}
