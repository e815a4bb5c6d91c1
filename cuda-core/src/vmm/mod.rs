//! Virtual memory management: physical allocations, reserved address ranges, mappings and
//! their access, shareable handles, and what is built on them — a buffer that grows in place
//! ([`GrowableBuffer`]) and an allocator for any [`DeviceBuffer`](crate::memory::DeviceBuffer)
//! ([`VmmAllocator`]).
//!
//! See the [Virtual Memory Management](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)
//! section of the driver API.
//!
//! # The pieces
//!
//! * [`AllocationProperties`]: where physical memory lives (a device, or a host NUMA node),
//!   which shareable handles it may be exported as ([`HandleTypes`]), compression and
//!   GPUDirect RDMA; its [`Granularity`]. [`VmmSupport`] says what a device offers.
//! * [`PhysicalMemory`]: memory without an address (`cuMemCreate`), exported as a POSIX file
//!   descriptor or a [`FabricHandle`] and imported in another process, or retained from an
//!   address it is mapped at.
//! * [`AddressRange`]: reserved virtual addresses (`cuMemAddressReserve`), anywhere or at a
//!   fixed address.
//! * [`Mapping`]: physical memory mapped into a range (`cuMemMap`), with the access of each
//!   device set with [`Mapping::set_access`] (`cuMemSetAccess`): memory of one device can be
//!   made usable by another this way.
//! * [`MulticastObject`]: memory of several devices behind one handle, where a store reaches
//!   every device (NVLink multicast on NVSwitch systems).
//! * [`MappedSpan`]: mappings that lie end to end in one range, viewed as one memory (a
//!   buffer striped over several devices).
//! * [`SparseArray`] and [`SparseMipmappedArray`]: CUDA arrays whose tiles are backed by
//!   tile-pool physical memory, mapped and unmapped in a stream's order (`cuMemMapArrayAsync`).
//!
//! # Lifetimes
//!
//! A mapping holds its range and its physical memory (both are shared handles), so they may
//! be dropped in any order: unmapping comes first, then the physical memory is released once
//! nothing holds it, then the addresses are freed. None of these waits for the device; a
//! [`GrowableBuffer`] and the [`VmmAllocator`] wait for their stream before unmapping.
//!
//! # What is checked
//!
//! Sizes and offsets of physical allocations and mappings against the granularity (the
//! error names it), mappings past the end of their range or physical allocation, and exports
//! as a handle type the allocation was not made with, are [`crate::error::Error::InvalidArgument`]s
//! before any call. What only the driver knows (a handle type or feature the system lacks, a
//! descriptor that is not an exported allocation) is the driver's status, by name.
//!
//! # Example
//!
//! ```no_run
//! use cuhost::mempool::Access;
//! use cuhost::vmm::{AccessGrant, AddressRange, AllocationProperties, Granularity, PhysicalMemory};
//! use cuhost::{Context, Device, Stream, StreamFlags};
//! # fn main() -> cuhost::Result<()> {
//! let device = Device::get(0)?;
//! let ctx = Context::primary(&device)?;
//! let props = AllocationProperties::device(device);
//! let chunk = props.granularity(Granularity::Recommended)?;
//! let range = AddressRange::reserve(&ctx, 4 * chunk, 0)?;
//! let physical = PhysicalMemory::new(&ctx, chunk, &props)?;
//! let mut mapping = range.map(chunk, &physical)?; // the second chunk of the range
//! mapping.set_access(&[AccessGrant::device(device, Access::ReadWrite)])?;
//! drop((range, physical)); // the mapping keeps both
//! let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
//! mapping.view_mut::<u32>(&stream)?.memset_d32(7)?;
//! # Ok(()) }
//! ```

mod allocator;
mod growable;
mod mapping;
mod multicast;
mod physical;
mod properties;
mod range;
mod span;
mod sparse;

pub use allocator::VmmAllocator;
pub use growable::GrowableBuffer;
pub use mapping::{AccessGrant, Mapping};
pub use multicast::{MulticastObject, MulticastProperties};
pub use physical::{FabricHandle, PhysicalMemory};
pub use properties::{AllocationProperties, Granularity, HandleTypes, VmmSupport};
pub use range::AddressRange;
pub use span::MappedSpan;
pub use sparse::{SparseArray, SparseMipmappedArray, SparseRegion};

// A growable buffer is a kernel argument as a device buffer is: its device address, for a `T*`
// parameter; a launch on another stream than the buffer's own notes that stream. (Here rather
// than in `growable.rs`, which holds no unsafe code.)
crate::launch::address_arg!(
    [T: bytemuck::Pod] &GrowableBuffer<T> => Read,
    [T: bytemuck::Pod] &mut GrowableBuffer<T> => Write,
);
