//! [`PhysicalMemory`]: a physical allocation (`CUmemGenericAllocationHandle`), made, retained
//! from an address or imported from another process, and exported as a shareable handle.

use super::properties::{AllocationProperties, Granularity, HandleTypes};
use crate::context::Context;
use crate::error::{Error, Result};
use cuhost_driver_sys as sys;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A physical allocation: memory with no address until it is mapped into an
/// [`AddressRange`](super::AddressRange).
///
/// Clones share the allocation; it is released
/// ([`cuMemRelease`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)) when
/// the last clone and the last [`Mapping`](super::Mapping) of it are dropped, in whatever
/// order.
#[derive(Clone, Debug)]
pub struct PhysicalMemory {
    inner: Arc<Handle>,
}

#[derive(Debug)]
struct Handle {
    raw: sys::CUmemGenericAllocationHandle,
    size: usize,
    handle_types: HandleTypes,
    /// The minimum granularity of the allocation's properties: mappings are checked against it.
    granularity: usize,
    context: Context,
    /// Set when a buffer ([`VmmAllocator`](super::VmmAllocator),
    /// [`GrowableBuffer`](super::GrowableBuffer)) maps the memory as its own: no further mapping
    /// may be made, or the buffer's exclusive access would have a second way in.
    sealed: AtomicBool,
}

impl Drop for Handle {
    fn drop(&mut self) {
        let raw = self.raw;
        // SAFETY: this value holds one reference to the handle and gives it back once; the
        // mappings that use the memory hold this value, so none is left.
        self.context.with_current_for_drop("PhysicalMemory", || unsafe { driver!(cuMemRelease(raw)) });
    }
}

/// A fabric handle (`CUmemFabricHandle`): 64 bytes that name a physical allocation to other
/// processes, also on other nodes of a multi-node NVLink system; safe to send by any means.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FabricHandle(pub [u8; 64]);

/// The properties of a live allocation handle.
fn query_properties(handle: sys::CUmemGenericAllocationHandle) -> Result<AllocationProperties> {
    // SAFETY: a C struct of integers and a pointer, for which all zeroes is valid.
    let mut raw: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    // SAFETY: one out-parameter; the caller's handle is alive.
    unsafe { driver!(cuMemGetAllocationPropertiesFromHandle(&mut raw, handle)) }?;
    AllocationProperties::from_raw(&raw)
}

/// Rounds `bytes` up to a multiple of `granularity` (a power of two).
pub(crate) fn round_up(bytes: usize, granularity: usize) -> Option<usize> {
    let mask = granularity.checked_sub(1)?;
    bytes.checked_add(mask).map(|b| b & !mask)
}

impl PhysicalMemory {
    /// Allocates `size` bytes of physical memory with `props`
    /// ([`cuMemCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)).
    ///
    /// `size` must be a non-zero multiple of the minimum granularity of `props`
    /// ([`AllocationProperties::granularity`]); otherwise this is an
    /// [`Error::InvalidArgument`] naming the granularity. A handle type or feature the device
    /// does not support is the driver's error (`CUDA_ERROR_NOT_SUPPORTED` or
    /// `CUDA_ERROR_NOT_PERMITTED`, e.g. fabric handles without the IMEX service).
    pub fn new(context: &Context, size: usize, props: &AllocationProperties) -> Result<PhysicalMemory> {
        context.enter()?;
        let granularity = props.granularity(Granularity::Minimum)?;
        if size == 0 || size.checked_rem(granularity) != Some(0) {
            return Err(Error::invalid(
                "PhysicalMemory::new",
                format!(
                    "{size} bytes is not a non-zero multiple of the allocation granularity of {granularity} \
                     bytes; round it up to {}",
                    round_up(size.max(1), granularity).unwrap_or(granularity)
                ),
            ));
        }
        let raw_props = props.to_raw();
        let mut raw = 0;
        // SAFETY: one out-parameter and a valid, initialized property struct; flags must be 0.
        unsafe { driver!(cuMemCreate(&mut raw, size, &raw_props, 0)) }?;
        Ok(PhysicalMemory::wrap(context, raw, size, props.handle_types, granularity))
    }

    fn wrap(
        context: &Context,
        raw: sys::CUmemGenericAllocationHandle,
        size: usize,
        handle_types: HandleTypes,
        granularity: usize,
    ) -> PhysicalMemory {
        PhysicalMemory {
            inner: Arc::new(Handle {
                raw,
                size,
                handle_types,
                granularity,
                context: context.clone(),
                sealed: AtomicBool::new(false),
            }),
        }
    }

    /// Adopts a handle that holds one reference of its own (from `cuMemRetainAllocationHandle`
    /// or an import), reading its properties back; the handle is released if that fails.
    fn adopt(
        context: &Context,
        raw: sys::CUmemGenericAllocationHandle,
        size: usize,
    ) -> Result<PhysicalMemory> {
        // Owned at once, so that an error below releases the handle.
        let mut handle = Handle {
            raw,
            size,
            handle_types: HandleTypes::empty(),
            granularity: 1,
            context: context.clone(),
            sealed: AtomicBool::new(false),
        };
        let props = query_properties(raw)?;
        handle.granularity = props.granularity(Granularity::Minimum)?;
        handle.handle_types = props.handle_types;
        Ok(PhysicalMemory { inner: Arc::new(handle) })
    }

    /// The physical allocation mapped at `address` (any address inside a [`Mapping`]), with a
    /// reference of its own
    /// ([`cuMemRetainAllocationHandle`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)).
    ///
    /// Its size is that of the mapped range holding `address`
    /// ([`cuMemGetAddressRange`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    /// An address that no mapping holds is the driver's error.
    ///
    /// # Safety
    ///
    /// The result is a second way to memory that something else may own: mapping it again
    /// ([`AddressRange::map`](super::AddressRange::map)) gives views of the same bytes. So
    /// while the result, a clone of it or a mapping of it is alive, the memory at `address` must
    /// not be reached through anything that expects exclusive access to it (a
    /// [`DeviceBuffer`](crate::memory::DeviceBuffer) from [`VmmAllocator`](super::VmmAllocator), a
    /// [`GrowableBuffer`](super::GrowableBuffer), a `view_mut` of another [`Mapping`])
    /// except in an order that makes the accesses not overlap (for instance, only after that
    /// owner is dropped, as the memory then stays alive through the result). Where the
    /// memory is your own [`PhysicalMemory`], clone that instead: no `unsafe` is needed.
    ///
    /// Calling it is `unsafe` (F13 of the soundness review: with a safe form, mapping the result
    /// gave a second exclusive view of a live buffer's memory):
    ///
    /// ```compile_fail,E0133
    /// # fn main() -> cuhost::Result<()> {
    /// use cuhost::{Context, Device, vmm::PhysicalMemory};
    /// let ctx = Context::primary(&Device::get(0)?)?;
    /// let retained = PhysicalMemory::retain_from_address(&ctx, 0x7f00_0000_0000)?;
    /// # drop(retained); Ok(()) }
    /// ```
    ///
    /// ```no_run
    /// # fn main() -> cuhost::Result<()> {
    /// use cuhost::{Context, Device, vmm::{AddressRange, AllocationProperties, Granularity, PhysicalMemory}};
    /// let dev = Device::get(0)?;
    /// let ctx = Context::primary(&dev)?;
    /// let props = AllocationProperties::device(dev);
    /// let gran = props.granularity(Granularity::Minimum)?;
    /// let range = AddressRange::reserve(&ctx, gran, 0)?;
    /// let mapping = range.map(0, &PhysicalMemory::new(&ctx, gran, &props)?)?;
    /// // SAFETY: the only other way to the memory, `mapping`, is dropped before any use of this.
    /// let retained = unsafe { PhysicalMemory::retain_from_address(&ctx, mapping.as_raw())? };
    /// drop(mapping);
    /// let again = range.map(0, &retained)?;
    /// # drop(again); Ok(()) }
    /// ```
    ///
    /// [`Mapping`]: super::Mapping
    pub unsafe fn retain_from_address(
        context: &Context,
        address: sys::CUdeviceptr,
    ) -> Result<PhysicalMemory> {
        context.enter()?;
        let mut raw = 0;
        // SAFETY: one out-parameter; the driver checks that the address is mapped (the
        // address is only used as a number).
        unsafe { driver!(cuMemRetainAllocationHandle(&mut raw, address as usize as *mut std::ffi::c_void)) }?;
        match crate::memory::address_range(address) {
            Ok((_, size)) => PhysicalMemory::adopt(context, raw, size),
            Err(e) => {
                // SAFETY: the reference retained above is given back once.
                let _ = unsafe { sys::cuMemRelease(raw) };
                Err(e)
            }
        }
    }

    /// Imports a physical allocation that another process exported as a POSIX file descriptor
    /// ([`cuMemImportFromShareableHandle`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)).
    /// The descriptor stays the caller's (close it once imported).
    ///
    /// `size` is the allocation's size, which the descriptor does not carry: send it along.
    /// Mappings past it are refused by the driver. A descriptor that is not an exported
    /// allocation is the driver's error.
    ///
    /// # Safety
    ///
    /// The memory is shared with whoever exported it, and with every other importer, in this
    /// process or another, and the crate cannot see their uses: while views of a mapping of
    /// the imported memory are used, nothing else may use that memory in a conflicting way (no
    /// writes where they read, no use at all where they write). In particular, memory exported
    /// from a live buffer of this process ([`VmmAllocator`](super::VmmAllocator),
    /// [`GrowableBuffer`](super::GrowableBuffer)) aliases that buffer once mapped. This is the
    /// contract of [`IpcMemHandle::open`](crate::interop::ipc::IpcMemHandle::open), for the
    /// same reason.
    ///
    /// ```compile_fail,E0133
    /// # fn f(ctx: &cuhost::Context, fd: std::os::fd::BorrowedFd<'_>) -> cuhost::Result<()> {
    /// let shared = cuhost::vmm::PhysicalMemory::import_fd(ctx, fd, 1 << 21)?; // needs `unsafe`
    /// # Ok(()) }
    /// ```
    #[cfg(unix)]
    pub unsafe fn import_fd(
        context: &Context,
        fd: std::os::fd::BorrowedFd<'_>,
        size: usize,
    ) -> Result<PhysicalMemory> {
        use std::os::fd::{AsFd, AsRawFd};
        context.enter()?;
        // The handle travels as a pointer-sized integer, so descriptor 0 would read as null:
        // import a duplicate (numbered 3 or above) instead.
        let duplicate = if fd.as_raw_fd() == 0 {
            Some(fd.try_clone_to_owned().map_err(|e| {
                Error::invalid("PhysicalMemory::import_fd", format!("could not duplicate descriptor 0: {e}"))
            })?)
        } else {
            None
        };
        let fd = duplicate.as_ref().map_or(fd, |d| d.as_fd());
        let mut raw = 0;
        // SAFETY: for the POSIX handle type the handle is the descriptor itself, cast to a
        // pointer; the driver does not take ownership of it.
        unsafe {
            driver!(cuMemImportFromShareableHandle(
                &mut raw,
                fd.as_raw_fd() as usize as *mut std::ffi::c_void,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            ))
        }?;
        PhysicalMemory::adopt(context, raw, size)
    }

    /// Imports a physical allocation exported as a [`FabricHandle`], of `size` bytes
    /// ([`cuMemImportFromShareableHandle`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)).
    /// Where the system has no fabric (no multi-node NVLink, no IMEX service) the driver
    /// refuses it (`CUDA_ERROR_NOT_SUPPORTED` or `CUDA_ERROR_NOT_PERMITTED`).
    ///
    /// # Safety
    ///
    /// The memory is shared with whoever exported it, and with every other importer, in this
    /// process or another, and the crate cannot see their uses: while views of a mapping of
    /// the imported memory are used, nothing else may use that memory in a conflicting way (no
    /// writes where they read, no use at all where they write). In particular, memory exported
    /// from a live buffer of this process ([`VmmAllocator`](super::VmmAllocator),
    /// [`GrowableBuffer`](super::GrowableBuffer)) aliases that buffer once mapped. This is the
    /// contract of [`IpcMemHandle::open`](crate::interop::ipc::IpcMemHandle::open), for the
    /// same reason.
    pub unsafe fn import_fabric(
        context: &Context,
        handle: &FabricHandle,
        size: usize,
    ) -> Result<PhysicalMemory> {
        context.enter()?;
        let mut data = sys::CUmemFabricHandle { data: handle.0, ..Default::default() };
        let mut raw = 0;
        // SAFETY: for the fabric handle type the handle is a pointer to the 64-byte struct,
        // which lives across the call.
        unsafe {
            driver!(cuMemImportFromShareableHandle(
                &mut raw,
                (&mut data as *mut sys::CUmemFabricHandle).cast(),
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_FABRIC,
            ))
        }?;
        PhysicalMemory::adopt(context, raw, size)
    }

    fn exportable(&self, operation: &'static str, wanted: HandleTypes, name: &str) -> Result<()> {
        if self.inner.handle_types.contains(wanted) {
            Ok(())
        } else {
            Err(Error::invalid(
                operation,
                format!(
                    "the allocation was created with handle types {:?}, without {name}; create it with \
                     AllocationProperties::with_handle_types(HandleTypes::{name})",
                    self.inner.handle_types
                ),
            ))
        }
    }

    /// Exports the allocation as a new POSIX file descriptor, owned by the caller
    /// ([`cuMemExportToShareableHandle`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)).
    ///
    /// An allocation made without [`HandleTypes::POSIX_FILE_DESCRIPTOR`] is an
    /// [`Error::InvalidArgument`].
    #[cfg(unix)]
    pub fn export_fd(&self) -> Result<std::os::fd::OwnedFd> {
        use std::os::fd::FromRawFd;
        self.exportable(
            "PhysicalMemory::export_fd",
            HandleTypes::POSIX_FILE_DESCRIPTOR,
            "POSIX_FILE_DESCRIPTOR",
        )?;
        self.inner.context.enter()?;
        let mut fd: std::ffi::c_int = -1;
        // SAFETY: for the POSIX handle type the driver writes an int through the pointer.
        unsafe {
            driver!(cuMemExportToShareableHandle(
                (&mut fd as *mut std::ffi::c_int).cast(),
                self.inner.raw,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            ))
        }?;
        if fd < 0 {
            return Err(Error::invalid("PhysicalMemory::export_fd", "the driver returned no descriptor"));
        }
        // SAFETY: the driver returned a new descriptor that nobody else owns.
        Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
    }

    /// Exports the allocation as a [`FabricHandle`]
    /// ([`cuMemExportToShareableHandle`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)).
    ///
    /// An allocation made without [`HandleTypes::FABRIC`] is an [`Error::InvalidArgument`].
    pub fn export_fabric(&self) -> Result<FabricHandle> {
        self.exportable("PhysicalMemory::export_fabric", HandleTypes::FABRIC, "FABRIC")?;
        self.inner.context.enter()?;
        let mut data = sys::CUmemFabricHandle { data: [0; 64], ..Default::default() };
        // SAFETY: for the fabric handle type the driver writes the 64-byte struct.
        unsafe {
            driver!(cuMemExportToShareableHandle(
                (&mut data as *mut sys::CUmemFabricHandle).cast(),
                self.inner.raw,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_FABRIC,
                0,
            ))
        }?;
        Ok(FabricHandle(data.data))
    }

    /// The allocation's properties, as the driver reports them
    /// ([`cuMemGetAllocationPropertiesFromHandle`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)).
    ///
    /// Fails with the driver's status when it refuses the query, and with an
    /// [`Error::InvalidArgument`](crate::error::Error::InvalidArgument) for a location type this crate
    /// does not know.
    pub fn properties(&self) -> Result<AllocationProperties> {
        self.inner.context.enter()?;
        query_properties(self.inner.raw)
    }

    /// The size in bytes.
    #[inline]
    pub fn size(&self) -> usize {
        self.inner.size
    }

    /// The minimum granularity of the allocation's properties: offsets and sizes of its
    /// mappings are multiples of it.
    #[inline]
    pub fn granularity(&self) -> usize {
        self.inner.granularity
    }

    /// The handle types the allocation may be exported as.
    #[inline]
    pub fn handle_types(&self) -> HandleTypes {
        self.inner.handle_types
    }

    /// Marks the memory as a buffer's own: [`AddressRange::map`](super::AddressRange::map)
    /// refuses it from now on (see [`mappable`](Self::mappable)).
    pub(crate) fn seal(&self) {
        self.inner.sealed.store(true, Ordering::Release);
    }

    /// Refuses memory that a buffer has mapped as its own: a second mapping would give a second
    /// exclusive way to the buffer's bytes.
    pub(crate) fn mappable(&self, operation: &'static str) -> Result<()> {
        if self.inner.sealed.load(Ordering::Acquire) {
            return Err(Error::invalid(
                operation,
                "this physical memory backs a VmmAllocator buffer or a GrowableBuffer, which has \
                 exclusive access to it, so it cannot be mapped again; export it (export_fd, \
                 export_fabric) to share it with another process, or make a PhysicalMemory of your \
                 own to map it twice",
            ));
        }
        Ok(())
    }

    /// The context the allocation was made or imported in.
    #[inline]
    pub fn context(&self) -> &Context {
        &self.inner.context
    }

    /// The raw `CUmemGenericAllocationHandle`, valid while this value (or a clone, or a
    /// mapping of it) is alive.
    #[inline]
    pub fn as_raw(&self) -> sys::CUmemGenericAllocationHandle {
        self.inner.raw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_up_to_the_granularity() {
        assert_eq!(round_up(1, 2 << 20), Some(2 << 20));
        assert_eq!(round_up(2 << 20, 2 << 20), Some(2 << 20));
        assert_eq!(round_up((2 << 20) + 1, 2 << 20), Some(4 << 20));
        assert_eq!(round_up(0, 4096), Some(0));
        assert_eq!(round_up(usize::MAX, 4096), None);
        assert_eq!(round_up(5, 0), None);
    }
}
