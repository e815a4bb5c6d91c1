//! [`MulticastObject`]: one address range backed by memory of several devices at once, where a
//! store reaches every device's copy and a reduction reads all of them (NVLink SHARP, CUDA
//! 12.1 and later, on NVSwitch systems).

use super::physical::PhysicalMemory;
use super::properties::{Granularity, HandleTypes};
use crate::context::Context;
use crate::device::Device;
use crate::error::{Error, Result};
use cuhost_driver_sys as sys;
use std::sync::{Mutex, PoisonError};

/// The properties of a multicast object (`CUmulticastObjectProp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MulticastProperties {
    /// How many devices will be added.
    pub devices: u32,
    /// The size in bytes; a multiple of the multicast granularity.
    pub size: usize,
    /// The shareable handle types the object may be exported as.
    pub handle_types: HandleTypes,
}

impl MulticastProperties {
    fn to_raw(self) -> sys::CUmulticastObjectProp {
        sys::CUmulticastObjectProp {
            numDevices: self.devices,
            size: self.size,
            handleTypes: u64::from(self.handle_types.bits()),
            ..Default::default()
        }
    }

    /// The size granularity of a multicast object of these properties
    /// ([`cuMulticastGetGranularity`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MULTICAST.html)).
    pub fn granularity(&self, context: &Context, which: Granularity) -> Result<usize> {
        context.enter()?;
        let (raw, mut granularity) = (self.to_raw(), 0usize);
        let option = match which {
            Granularity::Minimum => sys::CUmulticastGranularity_flags::CU_MULTICAST_GRANULARITY_MINIMUM,
            Granularity::Recommended => {
                sys::CUmulticastGranularity_flags::CU_MULTICAST_GRANULARITY_RECOMMENDED
            }
        };
        // SAFETY: one out-parameter and the properties, live locals.
        unsafe { driver!(cuMulticastGetGranularity(&mut granularity, &raw, option)) }?;
        Ok(granularity)
    }
}

/// A multicast object: an allocation handle whose memory is the memory of every device added
/// to it ([`cuMulticastCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MULTICAST.html)).
///
/// Devices are added first ([`add_device`](Self::add_device)), then each binds its own
/// physical memory ([`bind_memory`](Self::bind_memory)). It keeps every physical memory ever
/// bound to it until it is released (`cuMemRelease`, on drop), unbound or not.
#[derive(Debug)]
pub struct MulticastObject {
    raw: sys::CUmemGenericAllocationHandle,
    context: Context,
    properties: MulticastProperties,
    /// The physical memory bound to it, kept until it is released.
    bound: Mutex<Vec<PhysicalMemory>>,
}

impl MulticastObject {
    /// Creates a multicast object of `properties`, in `context`'s device.
    ///
    /// No device or a size of 0 is an [`Error::InvalidArgument`]; a size that is not a
    /// multiple of the granularity, or a system without multicast
    /// (`CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED`), is the driver's status.
    pub fn new(context: &Context, properties: MulticastProperties) -> Result<MulticastObject> {
        if properties.devices == 0 || properties.size == 0 {
            return Err(Error::invalid(
                "MulticastObject::new",
                "a multicast object needs devices and a size",
            ));
        }
        context.enter()?;
        let (props, mut raw) = (properties.to_raw(), 0);
        // SAFETY: one out-parameter and the properties, live locals.
        unsafe { driver!(cuMulticastCreate(&mut raw, &props)) }?;
        Ok(MulticastObject { raw, context: context.clone(), properties, bound: Mutex::new(Vec::new()) })
    }

    /// The raw handle; it stays this object's.
    #[inline]
    pub fn as_raw(&self) -> sys::CUmemGenericAllocationHandle {
        self.raw
    }

    /// The properties it was made with.
    #[inline]
    pub fn properties(&self) -> MulticastProperties {
        self.properties
    }

    /// Adds `device` to the object; every device must be added before memory is bound
    /// ([`cuMulticastAddDevice`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MULTICAST.html)).
    pub fn add_device(&self, device: Device) -> Result<()> {
        self.context.enter()?;
        // SAFETY: the handle is this object's, alive while it is.
        unsafe { driver!(cuMulticastAddDevice(self.raw, device.as_raw())) }
    }

    fn check_range(&self, operation: &'static str, offset: usize, size: usize) -> Result<()> {
        match offset.checked_add(size) {
            Some(end) if size > 0 && end <= self.properties.size => Ok(()),
            _ => Err(Error::invalid(
                operation,
                format!(
                    "{size} bytes at offset {offset} do not fit a multicast object of {} bytes",
                    self.properties.size
                ),
            )),
        }
    }

    /// Binds `size` bytes of `memory` from `memory_offset` to the object at `offset`, for the
    /// device the memory lives on
    /// ([`cuMulticastBindMem`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MULTICAST.html)).
    /// The object keeps `memory` until it is released.
    ///
    /// A range outside the object or outside `memory` is an [`Error::InvalidArgument`];
    /// offsets and sizes off the granularity are the driver's status.
    pub fn bind_memory(
        &self,
        offset: usize,
        memory: &PhysicalMemory,
        memory_offset: usize,
        size: usize,
    ) -> Result<()> {
        const OP: &str = "MulticastObject::bind_memory";
        self.check_range(OP, offset, size)?;
        if memory_offset.checked_add(size).is_none_or(|end| end > memory.size()) {
            return Err(Error::invalid(
                OP,
                format!(
                    "{size} bytes at offset {memory_offset} do not fit physical memory of {} bytes",
                    memory.size()
                ),
            ));
        }
        self.context.enter()?;
        let mut bound = self.bound.lock().unwrap_or_else(PoisonError::into_inner);
        // SAFETY: both handles are alive (the object's, and `memory`, which is kept below for as
        // long as it is bound); the ranges are checked.
        unsafe { driver!(cuMulticastBindMem(self.raw, offset, memory.as_raw(), memory_offset, size, 0)) }?;
        bound.push(memory.clone());
        Ok(())
    }

    /// Binds the `size` mapped bytes at `address` to the object at `offset`
    /// ([`cuMulticastBindAddr`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MULTICAST.html)).
    ///
    /// A range outside the object is an [`Error::InvalidArgument`].
    ///
    /// # Safety
    ///
    /// `address..address + size` is device memory mapped through VMM, and stays mapped until
    /// it is unbound ([`unbind`](Self::unbind)) or the object is dropped.
    pub unsafe fn bind_address(&self, offset: usize, address: sys::CUdeviceptr, size: usize) -> Result<()> {
        self.check_range("MulticastObject::bind_address", offset, size)?;
        self.context.enter()?;
        // SAFETY: the handle is alive; the caller keeps the range mapped while bound.
        unsafe { driver!(cuMulticastBindAddr(self.raw, offset, address, size, 0)) }
    }

    /// Unbinds what `device` bound at `offset`, `size` bytes
    /// ([`cuMulticastUnbind`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MULTICAST.html)).
    ///
    /// A range outside the object is an [`Error::InvalidArgument`]; one that is not bound is
    /// the driver's status.
    pub fn unbind(&self, device: Device, offset: usize, size: usize) -> Result<()> {
        self.check_range("MulticastObject::unbind", offset, size)?;
        self.context.enter()?;
        // SAFETY: the handle is alive; the memory unbound stays kept until the release.
        unsafe { driver!(cuMulticastUnbind(self.raw, device.as_raw(), offset, size)) }
    }
}

impl Drop for MulticastObject {
    fn drop(&mut self) {
        let raw = self.raw;
        // SAFETY: the handle was created here and is released once; the memory bound to it is
        // let go after (the `bound` field drops after this).
        self.context.with_current_for_drop("MulticastObject", || unsafe { driver!(cuMemRelease(raw)) });
    }
}
