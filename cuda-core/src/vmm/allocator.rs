//! [`VmmAllocator`]: an [`Allocator`] whose allocations are physical memory mapped into
//! address ranges of their own, so that any [`DeviceBuffer`](crate::memory::DeviceBuffer) can live
//! in VMM memory.

use super::mapping::{AccessGrant, Mapping};
use super::physical::{PhysicalMemory, round_up};
use super::properties::{AllocationProperties, Granularity};
use super::range::AddressRange;
use crate::alloc::{Allocator, DeviceAllocation, StreamRef};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::mempool::Access;
use cuhost_driver_sys as sys;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Device memory from the virtual memory management calls: each allocation is one physical
/// allocation ([`cuMemCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)),
/// its size rounded up to the granularity, mapped into a range of its own with the access
/// this allocator grants.
///
/// Use it where the memory must have properties plain `cuMemAlloc` cannot give (exportable
/// as a file descriptor or fabric handle, compressed, RDMA-capable, readable by peer devices
/// without peer contexts), or as the upstream of a [`MemoryPool`](crate::pool::MemoryPool).
/// Giving memory back waits for the stream it is given back on: unmapping is not
/// stream-ordered.
///
/// ```no_run
/// use cuhost::vmm::VmmAllocator;
/// use cuhost::{Context, Device, DeviceBuffer, Stream, StreamFlags};
/// use std::sync::Arc;
/// # fn main() -> cuhost::Result<()> {
/// let ctx = Context::primary(&Device::get(0)?)?;
/// let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
/// let vmm = Arc::new(VmmAllocator::new(&ctx)?);
/// let buffer = DeviceBuffer::<f32>::new_in(&stream, 1 << 20, vmm)?;
/// assert_eq!(buffer.allocator_name(), "cuMemCreate");
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct VmmAllocator {
    context: Context,
    props: AllocationProperties,
    granularity: usize,
    grants: Vec<AccessGrant>,
    live: Mutex<HashMap<sys::CUdeviceptr, Mapping>>,
}

impl VmmAllocator {
    /// Memory of `context`'s device, readable and writable by it; fails as
    /// [`with_properties`](Self::with_properties) does.
    pub fn new(context: &Context) -> Result<VmmAllocator> {
        let device = context.device();
        VmmAllocator::with_properties(
            context,
            AllocationProperties::device(device),
            &[AccessGrant::device(device, Access::ReadWrite)],
        )
    }

    /// Memory made with `props`, with access set to `grants` (which must not be empty).
    ///
    /// No grant is an [`Error::InvalidArgument`]; the granularity of `props` is read now
    /// ([`cuMemGetAllocationGranularity`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)), and a device without virtual memory
    /// management, or properties it does not support, fails there with the driver's status.
    pub fn with_properties(
        context: &Context,
        props: AllocationProperties,
        grants: &[AccessGrant],
    ) -> Result<VmmAllocator> {
        if grants.is_empty() {
            return Err(Error::invalid("VmmAllocator::with_properties", "no access grant was given"));
        }
        let granularity = props.granularity(Granularity::Minimum)?;
        Ok(VmmAllocator {
            context: context.clone(),
            props,
            granularity,
            grants: grants.to_vec(),
            live: Mutex::new(HashMap::new()),
        })
    }

    /// The properties each allocation is made with.
    pub fn properties(&self) -> &AllocationProperties {
        &self.props
    }

    /// Runs `f` on the mapping behind the live allocation at `ptr` (to export its physical
    /// memory, or change or read its access); `None` if no live allocation of this allocator
    /// starts there. `f` runs under the allocator's lock: it must not allocate from or give
    /// memory back to this allocator.
    pub fn with_mapping<R>(&self, ptr: sys::CUdeviceptr, f: impl FnOnce(&Mapping) -> R) -> Option<R> {
        self.lock().get(&ptr).map(f)
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<sys::CUdeviceptr, Mapping>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

// SAFETY: each allocation is a fresh address range mapped to fresh, sealed physical memory of
// at least the size asked (rounded up to the granularity, so aligned beyond `cuMemAlloc`),
// readable and writable from the devices granted, and owned by the caller until it is given
// back; `deallocate` waits for the stream's work before unmapping it.
unsafe impl Allocator for VmmAllocator {
    fn context(&self) -> Option<&Context> {
        Some(&self.context)
    }

    fn allocate(&self, size: usize, _stream: StreamRef<'_>) -> Result<DeviceAllocation> {
        let bytes = round_up(size.max(1), self.granularity).ok_or_else(|| {
            Error::invalid("VmmAllocator::allocate", format!("{size} bytes overflow the address space"))
        })?;
        let range = AddressRange::reserve(&self.context, bytes, 0)?;
        let physical = PhysicalMemory::new(&self.context, bytes, &self.props)?;
        let mapping = range.map(0, &physical)?;
        // The buffer's own memory: no second mapping of it may be made.
        physical.seal();
        mapping.set_access(&self.grants)?;
        let ptr = mapping.as_raw();
        self.lock().insert(ptr, mapping);
        Ok(DeviceAllocation { ptr, size: bytes, token: 0 })
    }

    unsafe fn deallocate(&self, allocation: DeviceAllocation, stream: StreamRef<'_>) -> Result<()> {
        let Some(mapping) = self.lock().remove(&allocation.ptr) else {
            return Err(Error::invalid(
                "VmmAllocator::deallocate",
                format!("{:#x} is not a live allocation of this allocator", allocation.ptr),
            ));
        };
        // Unmapping is not stream-ordered: wait for the work that may use the memory. A release
        // path: a deferred error from elsewhere must not skip the wait. If the wait fails, the
        // memory stays mapped (kept in the map, a leak) rather than unmapped under running work.
        if let Err(e) = stream.wait_for_users(&self.context) {
            self.lock().insert(allocation.ptr, mapping);
            return Err(e);
        }
        drop(mapping);
        Ok(())
    }

    fn name(&self) -> &'static str {
        "cuMemCreate"
    }
}
