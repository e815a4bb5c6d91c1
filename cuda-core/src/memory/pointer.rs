//! What the driver knows about an address: pointer attributes and address ranges.

use crate::error::{Error, Result};
use cuhost_driver_sys as sys;
use std::ffi::c_void;

/// Where memory lives (`CUmemorytype`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemoryType {
    /// `CU_MEMORYTYPE_HOST`.
    Host,
    /// `CU_MEMORYTYPE_DEVICE`.
    Device,
    /// `CU_MEMORYTYPE_ARRAY`.
    Array,
    /// `CU_MEMORYTYPE_UNIFIED`.
    Unified,
}

impl TryFrom<u32> for MemoryType {
    type Error = Error;
    fn try_from(raw: u32) -> Result<MemoryType> {
        use sys::CUmemorytype as M;
        match sys::CUmemorytype(raw) {
            M::CU_MEMORYTYPE_HOST => Ok(MemoryType::Host),
            M::CU_MEMORYTYPE_DEVICE => Ok(MemoryType::Device),
            M::CU_MEMORYTYPE_ARRAY => Ok(MemoryType::Array),
            M::CU_MEMORYTYPE_UNIFIED => Ok(MemoryType::Unified),
            _ => Err(Error::invalid("MemoryType::try_from", format!("unknown CUmemorytype {raw}"))),
        }
    }
}

/// The attributes of an address that the driver knows (from `cuPointerGetAttributes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PointerAttributes {
    /// The context that owns the memory (null for memory no context owns).
    pub context: sys::CUcontext,
    /// Host or device memory; `None` for an address the driver does not know.
    pub memory_type: Option<MemoryType>,
    /// The device address that reaches the memory.
    pub device_pointer: sys::CUdeviceptr,
    /// The host address that reaches the memory (null if none).
    pub host_pointer: *mut c_void,
    /// Whether synchronous copies on this memory synchronize all work.
    pub sync_memops: bool,
    /// A process-unique id of the allocation.
    pub buffer_id: u64,
    /// Whether it is managed memory.
    pub is_managed: bool,
    /// The ordinal of the device the memory belongs to.
    pub device_ordinal: i32,
    /// The first address of the allocation holding it.
    pub range_start: sys::CUdeviceptr,
    /// The size of the allocation holding it.
    pub range_size: usize,
    /// Whether the memory is mapped (backed).
    pub mapped: bool,
}

/// Reads the pointer attributes of `ptr` in one call
/// ([`cuPointerGetAttributes`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__UNIFIED.html)).
/// An address the driver does not know yields `memory_type: None` rather than an error.
pub fn pointer_attributes(ptr: sys::CUdeviceptr) -> Result<PointerAttributes> {
    use sys::CUpointer_attribute as A;
    let mut context: sys::CUcontext = std::ptr::null_mut();
    let mut memory_type: u32 = 0;
    let mut device_pointer: sys::CUdeviceptr = 0;
    let mut host_pointer: *mut c_void = std::ptr::null_mut();
    let mut sync_memops: u32 = 0;
    let mut buffer_id: u64 = 0;
    let mut is_managed: u32 = 0;
    let mut device_ordinal: i32 = 0;
    let mut range_start: sys::CUdeviceptr = 0;
    let mut range_size: usize = 0;
    let mut mapped: u32 = 0;
    let mut attributes = [
        A::CU_POINTER_ATTRIBUTE_CONTEXT,
        A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        A::CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
        A::CU_POINTER_ATTRIBUTE_HOST_POINTER,
        A::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
        A::CU_POINTER_ATTRIBUTE_BUFFER_ID,
        A::CU_POINTER_ATTRIBUTE_IS_MANAGED,
        A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        A::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
        A::CU_POINTER_ATTRIBUTE_MAPPED,
    ];
    let mut data: [*mut c_void; 11] = [
        (&raw mut context).cast(),
        (&raw mut memory_type).cast(),
        (&raw mut device_pointer).cast(),
        (&raw mut host_pointer).cast(),
        (&raw mut sync_memops).cast(),
        (&raw mut buffer_id).cast(),
        (&raw mut is_managed).cast(),
        (&raw mut device_ordinal).cast(),
        (&raw mut range_start).cast(),
        (&raw mut range_size).cast(),
        (&raw mut mapped).cast(),
    ];
    crate::device::init()?;
    // SAFETY: each data pointer points to a local of the type its attribute writes; 11 of each.
    unsafe { driver!(cuPointerGetAttributes(11, attributes.as_mut_ptr(), data.as_mut_ptr(), ptr)) }?;
    Ok(PointerAttributes {
        context,
        memory_type: MemoryType::try_from(memory_type).ok(),
        device_pointer,
        host_pointer,
        sync_memops: sync_memops != 0,
        buffer_id,
        is_managed: is_managed != 0,
        device_ordinal,
        range_start,
        range_size,
        mapped: mapped != 0,
    })
}

/// Makes synchronous copies on the allocation holding `ptr` synchronize all work
/// (`CU_POINTER_ATTRIBUTE_SYNC_MEMOPS`)
/// ([`cuPointerSetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__UNIFIED.html)).
pub fn set_sync_memops(ptr: sys::CUdeviceptr, enabled: bool) -> Result<()> {
    let v: u32 = u32::from(enabled);
    // SAFETY: the attribute takes an unsigned int; the driver validates the address.
    unsafe {
        driver!(cuPointerSetAttribute(
            (&raw const v).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
            ptr,
        ))
    }
}

/// The base address and size of the allocation holding `ptr`
/// ([`cuMemGetAddressRange`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
/// A context must be current (any call through a [`crate::context::Context`] makes it so).
pub fn address_range(ptr: sys::CUdeviceptr) -> Result<(sys::CUdeviceptr, usize)> {
    let (mut base, mut size) = (0, 0);
    // SAFETY: two out-parameters; the driver validates the address.
    unsafe { driver!(cuMemGetAddressRange(&mut base, &mut size, ptr)) }?;
    Ok((base, size))
}
