//! The stream-ordered allocator: memory pools of the driver
//! ([Stream Ordered Memory Allocator](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html)).
//!
//! [`MemPool`] wraps a `CUmemoryPool`: the device's default pool, its current pool, or one
//! created with [`MemPoolProps`]. Memory comes from it as the crate's
//! [`DeviceBuffer`](crate::memory::DeviceBuffer), through the stream-ordered allocator
//! [`AsyncAllocator::from_pool`] (or [`MemPool::allocator`]): allocated with
//! `cuMemAllocFromPoolAsync` on the buffer's stream, given back with `cuMemFreeAsync` in that
//! stream's order. The allocator can also be the upstream of a
//! [`MemoryPool`](crate::pool::MemoryPool). Pools created with a POSIX file-descriptor handle
//! type can be shared with another process ([`ipc`]).
//!
//! ```no_run
//! use cuhost::mempool::{MemPool, MemPoolProps};
//! use cuhost::{Context, Device, DeviceBuffer, Stream, StreamFlags};
//! # fn main() -> cuhost::Result<()> {
//! let ctx = Context::primary(&Device::get(0)?)?;
//! let pool = MemPool::create(&MemPoolProps::device(ctx.device()))?;
//! let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
//! let buffer = DeviceBuffer::<f32>::new_in(&stream, 1 << 20, pool.allocator(&ctx))?;
//! stream.synchronize()?;
//! assert!(pool.used_mem_current()? >= 4 << 20);
//! drop(buffer); // cuMemFreeAsync on `stream`
//! # Ok(()) }
//! ```

mod allocator;
pub mod ipc;
mod location;

pub use allocator::AsyncAllocator;
pub use location::{PoolKind, PoolLocation};

use crate::alloc::Allocator;
use crate::context::Context;
use crate::device::Device;
use crate::error::{Error, Result};
use cuhost_driver_sys as sys;
use std::sync::Arc;

/// How a pool's memory may be shared with other processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShareableHandle {
    /// Not shareable.
    None,
    /// A POSIX file descriptor (Linux).
    PosixFileDescriptor,
    /// A fabric handle (multi-node NVLink).
    Fabric,
}

impl ShareableHandle {
    /// The raw value.
    pub fn as_raw(self) -> sys::CUmemAllocationHandleType {
        match self {
            ShareableHandle::None => sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
            ShareableHandle::PosixFileDescriptor => {
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
            }
            ShareableHandle::Fabric => sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_FABRIC,
        }
    }
}

impl TryFrom<sys::CUmemAllocationHandleType> for ShareableHandle {
    type Error = Error;
    fn try_from(raw: sys::CUmemAllocationHandleType) -> Result<Self> {
        use sys::CUmemAllocationHandleType as T;
        match raw {
            T::CU_MEM_HANDLE_TYPE_NONE => Ok(ShareableHandle::None),
            T::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR => Ok(ShareableHandle::PosixFileDescriptor),
            T::CU_MEM_HANDLE_TYPE_FABRIC => Ok(ShareableHandle::Fabric),
            other => Err(Error::invalid(
                "ShareableHandle::try_from",
                format!("unsupported handle type {}", other.0),
            )),
        }
    }
}

/// What a pool may do with a device's access to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// No access.
    None,
    /// Read only.
    Read,
    /// Read and write.
    ReadWrite,
}

impl Access {
    /// The raw value.
    pub fn as_raw(self) -> sys::CUmemAccess_flags {
        match self {
            Access::None => sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE,
            Access::Read => sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READ,
            Access::ReadWrite => sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        }
    }
}

impl TryFrom<sys::CUmemAccess_flags> for Access {
    type Error = Error;
    fn try_from(raw: sys::CUmemAccess_flags) -> Result<Self> {
        use sys::CUmemAccess_flags as F;
        match raw {
            F::CU_MEM_ACCESS_FLAGS_PROT_NONE => Ok(Access::None),
            F::CU_MEM_ACCESS_FLAGS_PROT_READ => Ok(Access::Read),
            F::CU_MEM_ACCESS_FLAGS_PROT_READWRITE => Ok(Access::ReadWrite),
            other => Err(Error::invalid("Access::try_from", format!("unknown access flags {}", other.0))),
        }
    }
}

/// Properties of a pool to create: where its memory lives, how it may be shared, how large it
/// may grow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemPoolProps {
    /// The device whose memory the pool holds.
    pub device: Device,
    /// How the pool may be exported to other processes.
    pub handle: ShareableHandle,
    /// The most bytes the pool may reserve; 0 lets the driver choose.
    pub max_size: usize,
}

impl MemPoolProps {
    /// Device memory of `device`, not shareable, no maximum.
    pub fn device(device: Device) -> Self {
        MemPoolProps { device, handle: ShareableHandle::None, max_size: 0 }
    }

    fn to_raw(self) -> Result<sys::CUmemPoolProps> {
        // SAFETY: a C struct of integers and a pointer, for which all zeroes is valid.
        let mut p: sys::CUmemPoolProps = unsafe { std::mem::zeroed() };
        p.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        p.handleTypes = self.handle.as_raw();
        p.location = device_location(self.device)?;
        p.maxSize = self.max_size;
        Ok(p)
    }
}

fn device_location(device: Device) -> Result<sys::CUmemLocation> {
    let id = i32::try_from(device.ordinal()).map_err(|_| {
        Error::invalid("MemPool", format!("device ordinal {} is out of range", device.ordinal()))
    })?;
    Ok(crate::c_layout::mem_location(sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id))
}

/// A stream-ordered memory pool of the driver (`CUmemoryPool`).
///
/// A pool made by [`MemPool::create`] or imported is destroyed when the last clone is dropped
/// (the driver keeps its memory until outstanding allocations are freed); the device's default
/// pool is borrowed. While a pool is a device's current pool ([`MemPool::set_current`]), the
/// device holds a clone of it. Cloning is cheap and shares the pool: allocators made from
/// it ([`MemPool::allocator`], [`AsyncAllocator::from_pool`]) hold a clone, so the pool lives
/// as long as they do.
#[derive(Clone, Debug)]
pub struct MemPool {
    inner: Arc<PoolHandle>,
}

/// The pool handle behind the clones of a [`MemPool`].
#[derive(Debug)]
struct PoolHandle {
    raw: sys::CUmemoryPool,
    owned: bool,
    /// Whether the pool hands out device memory (a device's pinned pool), which is what a
    /// [`DeviceBuffer`](crate::memory::DeviceBuffer) over its allocator must hold; a host or managed
    /// pool ([`MemPool::default_at`]) does not.
    device_memory: bool,
}

// SAFETY: a CUmemoryPool may be used from any thread; the driver synchronizes access to it.
unsafe impl Send for PoolHandle {}
// SAFETY: as above; the fields are never mutated after creation.
unsafe impl Sync for PoolHandle {}

impl MemPool {
    fn wrap(raw: sys::CUmemoryPool, owned: bool) -> MemPool {
        MemPool { inner: Arc::new(PoolHandle { raw, owned, device_memory: true }) }
    }

    /// A borrowed pool of a location other than a device's pinned memory.
    fn wrap_other(raw: sys::CUmemoryPool) -> MemPool {
        MemPool { inner: Arc::new(PoolHandle { raw, owned: false, device_memory: false }) }
    }

    /// Whether the pool hands out a device's own memory: false for the host, host-NUMA and
    /// managed pools of [`MemPool::default_at`], whose [`allocator`](Self::allocator) refuses
    /// to allocate device buffers.
    pub fn holds_device_memory(&self) -> bool {
        self.inner.device_memory
    }

    /// Creates a pool ([`cuMemPoolCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html)).
    pub fn create(props: &MemPoolProps) -> Result<MemPool> {
        crate::device::init()?;
        let raw_props = props.to_raw()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: one out-parameter; the properties are a valid, initialized struct.
        unsafe { driver!(cuMemPoolCreate(&mut raw, &raw_props)) }?;
        Ok(MemPool::wrap(raw, true))
    }

    /// The device's default pool, borrowed
    /// ([`cuDeviceGetDefaultMemPool`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html)).
    pub fn device_default(device: &Device) -> Result<MemPool> {
        crate::device::init()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: one out-parameter.
        unsafe { driver!(cuDeviceGetDefaultMemPool(&mut raw, device.as_raw())) }?;
        Ok(MemPool::wrap(raw, false))
    }

    /// The device's current pool, the one `cuMemAllocAsync` uses
    /// ([`cuDeviceGetMemPool`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html)).
    ///
    /// A pool made current with [`set_current`](Self::set_current) comes back as a clone of
    /// the value given there (which the device holds while the pool is current, so it is
    /// alive); the device's default pool comes back borrowed, as from
    /// [`device_default`](Self::device_default), since it lives as long as the device.
    ///
    /// A pool made current outside this crate (`cudaDeviceSetMemPool`, a raw call) is an
    /// [`Error::InvalidArgument`]: nothing here can keep it alive. Wrap it with the `unsafe`
    /// [`MemPool::from_raw`] instead. Otherwise it fails only with the driver's status.
    ///
    /// ```no_run
    /// # fn main() -> cuhost::Result<()> {
    /// use cuhost::{Context, Device, mempool::{MemPool, MemPoolProps}};
    /// let dev = Device::get(0)?;
    /// let pool = MemPool::create(&MemPoolProps::device(dev))?;
    /// MemPool::set_current(&dev, &pool)?;
    /// let current = MemPool::current(&dev)?;
    /// drop(pool); // the device still holds the pool: `current` is a live pool (G3)
    /// current.trim_to(0)?;
    /// MemPool::set_current(&dev, &MemPool::device_default(&dev)?)?; // lets it go
    /// # Ok(()) }
    /// ```
    pub fn current(device: &Device) -> Result<MemPool> {
        crate::device::init()?;
        let key = location::SlotKey::device(device)?;
        let slots = location::lock_current();
        let mut raw = std::ptr::null_mut();
        // SAFETY: one out-parameter.
        unsafe { driver!(cuDeviceGetMemPool(&mut raw, device.as_raw())) }?;
        location::resolve_current(
            "MemPool::current",
            &slots,
            key,
            raw,
            || MemPool::device_default(device),
            &format_args!("device {}", device.ordinal()),
        )
    }

    /// Makes `pool` the device's current pool
    /// ([`cuDeviceSetMemPool`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html)).
    ///
    /// The device keeps a clone of `pool` while it is current, so dropping the caller's values
    /// does not destroy it; making another pool current (the
    /// [default](Self::device_default), for instance) lets it go. Fails with the driver's
    /// status (a pool of another device, for instance), and then nothing changes.
    pub fn set_current(device: &Device, pool: &MemPool) -> Result<()> {
        let key = location::SlotKey::device(device)?;
        let mut slots = location::lock_current();
        // SAFETY: the pool is alive, and stays alive while current: the slot below holds it.
        unsafe { driver!(cuDeviceSetMemPool(device.as_raw(), pool.as_raw())) }?;
        let previous = location::replace_current(&mut slots, key, pool);
        drop(slots);
        // The pool that was current may be destroyed here, outside the lock.
        drop(previous);
        Ok(())
    }

    /// Wraps a raw pool; an `owned` pool is destroyed when the last clone is dropped.
    ///
    /// # Safety
    ///
    /// `raw` is a live pool of a device's memory (its allocator hands out device buffers); if
    /// `owned`, nothing else destroys it; if not, it stays alive as long as the returned value
    /// and its clones.
    pub unsafe fn from_raw(raw: sys::CUmemoryPool, owned: bool) -> MemPool {
        MemPool::wrap(raw, owned)
    }

    /// The raw `CUmemoryPool`.
    pub fn as_raw(&self) -> sys::CUmemoryPool {
        self.inner.raw
    }

    /// Whether the pool is destroyed when the last clone is dropped (created or imported).
    pub fn is_owned(&self) -> bool {
        self.inner.owned
    }

    /// The stream-ordered allocator of this pool in `context` (a context of the pool's device):
    /// [`AsyncAllocator::from_pool`] with a clone of the pool, shared. Buffers get their memory
    /// from it with `DeviceBuffer::new_in(&stream, len, pool.allocator(&ctx))`
    /// ([`cuMemAllocFromPoolAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html),
    /// given back with `cuMemFreeAsync`).
    pub fn allocator(&self, context: &Context) -> Arc<dyn Allocator> {
        Arc::new(AsyncAllocator::from_pool(context, self.clone()))
    }

    fn get_u64(&self, attr: sys::CUmemPool_attribute) -> Result<u64> {
        let mut v: u64 = 0;
        // SAFETY: these attributes are 64-bit values.
        unsafe { driver!(cuMemPoolGetAttribute(self.as_raw(), attr, (&mut v as *mut u64).cast())) }?;
        Ok(v)
    }

    fn set_u64(&self, attr: sys::CUmemPool_attribute, mut v: u64) -> Result<()> {
        // SAFETY: these attributes are 64-bit values.
        unsafe { driver!(cuMemPoolSetAttribute(self.as_raw(), attr, (&mut v as *mut u64).cast())) }
    }

    fn get_flag(&self, attr: sys::CUmemPool_attribute) -> Result<bool> {
        let mut v: i32 = 0;
        // SAFETY: the reuse attributes are ints.
        unsafe { driver!(cuMemPoolGetAttribute(self.as_raw(), attr, (&mut v as *mut i32).cast())) }?;
        Ok(v != 0)
    }

    fn set_flag(&self, attr: sys::CUmemPool_attribute, on: bool) -> Result<()> {
        let mut v = i32::from(on);
        // SAFETY: the reuse attributes are ints.
        unsafe { driver!(cuMemPoolSetAttribute(self.as_raw(), attr, (&mut v as *mut i32).cast())) }
    }

    /// Bytes the pool keeps reserved when idle instead of releasing them at synchronization
    /// (`CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`, read with
    /// [`cuMemPoolGetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html)).
    ///
    /// The attribute getters of the pool fail only when the driver refuses the query, with its
    /// status.
    pub fn release_threshold(&self) -> Result<u64> {
        self.get_u64(sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
    }

    /// Sets the release threshold; `u64::MAX` keeps everything
    /// ([`cuMemPoolSetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html)).
    ///
    /// The attribute setters of the pool fail only when the driver refuses the value, with its
    /// status.
    pub fn set_release_threshold(&self, bytes: u64) -> Result<()> {
        self.set_u64(sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, bytes)
    }

    /// Whether freed memory may be reused by a stream that waits on the freeing stream's event
    /// (`CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES`); fails as
    /// [`release_threshold`](Self::release_threshold) does.
    pub fn reuse_follow_event_dependencies(&self) -> Result<bool> {
        self.get_flag(sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES)
    }

    /// Sets `CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES`; fails as
    /// [`set_release_threshold`](Self::set_release_threshold) does.
    pub fn set_reuse_follow_event_dependencies(&self, on: bool) -> Result<()> {
        self.set_flag(sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES, on)
    }

    /// Whether memory whose free has completed may be reused by any stream
    /// (`CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC`); fails as
    /// [`release_threshold`](Self::release_threshold) does.
    pub fn reuse_allow_opportunistic(&self) -> Result<bool> {
        self.get_flag(sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC)
    }

    /// Sets `CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC`; fails as
    /// [`set_release_threshold`](Self::set_release_threshold) does.
    pub fn set_reuse_allow_opportunistic(&self, on: bool) -> Result<()> {
        self.set_flag(sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, on)
    }

    /// Whether the driver may insert dependencies to reuse memory
    /// (`CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES`); fails as
    /// [`release_threshold`](Self::release_threshold) does.
    pub fn reuse_allow_internal_dependencies(&self) -> Result<bool> {
        self.get_flag(sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES)
    }

    /// Sets `CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES`; fails as
    /// [`set_release_threshold`](Self::set_release_threshold) does.
    pub fn set_reuse_allow_internal_dependencies(&self, on: bool) -> Result<()> {
        self.set_flag(sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, on)
    }

    /// Bytes of backing memory the pool holds now (`CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT`);
    /// fails as [`release_threshold`](Self::release_threshold) does.
    pub fn reserved_mem_current(&self) -> Result<u64> {
        self.get_u64(sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
    }

    /// The high-water mark of reserved memory (`CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH`); fails as
    /// [`release_threshold`](Self::release_threshold) does.
    pub fn reserved_mem_high(&self) -> Result<u64> {
        self.get_u64(sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
    }

    /// Resets the reserved high-water mark to the current value, by setting it to 0, the only
    /// value the driver accepts for it; fails as
    /// [`set_release_threshold`](Self::set_release_threshold) does.
    pub fn reset_reserved_mem_high(&self) -> Result<()> {
        self.set_u64(sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, 0)
    }

    /// Bytes allocated from the pool and not freed (`CU_MEMPOOL_ATTR_USED_MEM_CURRENT`); fails
    /// as [`release_threshold`](Self::release_threshold) does.
    pub fn used_mem_current(&self) -> Result<u64> {
        self.get_u64(sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_CURRENT)
    }

    /// The high-water mark of used memory (`CU_MEMPOOL_ATTR_USED_MEM_HIGH`); fails as
    /// [`release_threshold`](Self::release_threshold) does.
    pub fn used_mem_high(&self) -> Result<u64> {
        self.get_u64(sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH)
    }

    /// Resets the used high-water mark to the current value, by setting it to 0, the only
    /// value the driver accepts for it; fails as
    /// [`set_release_threshold`](Self::set_release_threshold) does.
    pub fn reset_used_mem_high(&self) -> Result<()> {
        self.set_u64(sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH, 0)
    }

    /// Releases reserved memory until the pool holds at most `min_bytes_to_keep` more than is
    /// in use ([`cuMemPoolTrimTo`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html)).
    pub fn trim_to(&self, min_bytes_to_keep: usize) -> Result<()> {
        // SAFETY: the pool is alive.
        unsafe { driver!(cuMemPoolTrimTo(self.as_raw(), min_bytes_to_keep)) }
    }

    /// Grants `device` the given access to the pool's memory
    /// ([`cuMemPoolSetAccess`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html)).
    pub fn set_access(&self, device: &Device, access: Access) -> Result<()> {
        let desc = sys::CUmemAccessDesc {
            location: device_location(*device)?,
            flags: access.as_raw(),
            ..Default::default()
        };
        // SAFETY: one descriptor, read by the call.
        unsafe { driver!(cuMemPoolSetAccess(self.as_raw(), &desc, 1)) }
    }

    /// The access `device` has to the pool's memory
    /// ([`cuMemPoolGetAccess`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html)).
    pub fn access(&self, device: &Device) -> Result<Access> {
        let mut location = device_location(*device)?;
        let mut flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE;
        // SAFETY: one out-parameter and one location, both live locals.
        unsafe { driver!(cuMemPoolGetAccess(&mut flags, self.as_raw(), &mut location)) }?;
        Access::try_from(flags)
    }
}

impl Drop for PoolHandle {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: the last clone destroys the pool once. An error cannot be reported from
            // here; the driver keeps memory still allocated until it is freed.
            let _ = unsafe { sys::cuMemPoolDestroy(self.raw) };
        }
    }
}
