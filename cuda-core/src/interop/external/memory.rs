//! [`ExternalMemory`]: a memory object of another API, mapped as buffers and mipmapped arrays.

use super::{Raw, Refused, Win32Handle, fd_raw, settle, unsupported_win32};
use crate::alloc::{Allocator, DeviceAllocation, StreamRef};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::flags::flags;
use crate::memory::DeviceBuffer;
use crate::memory::{ArrayDescriptor, MipmappedArray, checked_bytes};
use crate::stream::Stream;
use bytemuck::Pod;
use cuhost_driver_sys as sys;
use std::ffi::c_void;
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// What an external memory object is imported from (`CUexternalMemoryHandleType` and its
/// handle).
#[derive(Debug)]
pub enum MemoryHandle {
    /// An opaque POSIX file descriptor: Vulkan's `VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT`
    /// (`vkGetMemoryFdKHR`), or a CUDA allocation exported as a file descriptor.
    OpaqueFd(OwnedFd),
    /// A Linux dma-buf file descriptor.
    DmaBufFd(OwnedFd),
    /// A Windows NT handle or name of an opaque object (Vulkan's `OPAQUE_WIN32`).
    OpaqueWin32(Win32Handle),
    /// A global share (KMT) handle of an opaque object.
    OpaqueWin32Kmt(*mut c_void),
    /// A Direct3D 12 heap.
    D3D12Heap(Win32Handle),
    /// A committed Direct3D 12 resource.
    D3D12Resource(Win32Handle),
    /// A shared Direct3D 11 resource.
    D3D11Resource(Win32Handle),
    /// A global share (KMT) handle of a Direct3D 11 resource.
    D3D11ResourceKmt(*mut c_void),
    /// An `NvSciBufObj`, which only `unsafe` code can name ([`NvSciBufObject::from_raw`]).
    NvSciBuf(NvSciBufObject),
}

/// An `NvSciBufObj` to import as external memory ([`MemoryHandle::NvSciBuf`]). The driver
/// dereferences it, so it is made only by [`from_raw`](Self::from_raw), whose caller vouches
/// for it; safe code cannot forge one from an integer:
///
/// ```compile_fail,E0133
/// use cuhost::interop::external::NvSciBufObject;
/// let forged = NvSciBufObject::from_raw(0x1000 as *mut std::ffi::c_void);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NvSciBufObject(*mut c_void);

impl NvSciBufObject {
    /// Wraps an `NvSciBufObj`.
    ///
    /// # Safety
    ///
    /// `object` is a live `NvSciBufObj` (from `NvSciBufObjAlloc` and the like) that stays
    /// alive until the import made from it returns.
    pub unsafe fn from_raw(object: *mut c_void) -> NvSciBufObject {
        NvSciBufObject(object)
    }

    /// The raw `NvSciBufObj`.
    pub fn as_raw(self) -> *mut c_void {
        self.0
    }
}

impl MemoryHandle {
    fn kind(&self) -> sys::CUexternalMemoryHandleType {
        use sys::CUexternalMemoryHandleType as K;
        match self {
            MemoryHandle::OpaqueFd(_) => K::CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD,
            MemoryHandle::DmaBufFd(_) => K::CU_EXTERNAL_MEMORY_HANDLE_TYPE_DMABUF_FD,
            MemoryHandle::OpaqueWin32(_) => K::CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_WIN32,
            MemoryHandle::OpaqueWin32Kmt(_) => K::CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_WIN32_KMT,
            MemoryHandle::D3D12Heap(_) => K::CU_EXTERNAL_MEMORY_HANDLE_TYPE_D3D12_HEAP,
            MemoryHandle::D3D12Resource(_) => K::CU_EXTERNAL_MEMORY_HANDLE_TYPE_D3D12_RESOURCE,
            MemoryHandle::D3D11Resource(_) => K::CU_EXTERNAL_MEMORY_HANDLE_TYPE_D3D11_RESOURCE,
            MemoryHandle::D3D11ResourceKmt(_) => K::CU_EXTERNAL_MEMORY_HANDLE_TYPE_D3D11_RESOURCE_KMT,
            MemoryHandle::NvSciBuf(_) => K::CU_EXTERNAL_MEMORY_HANDLE_TYPE_NVSCIBUF,
        }
    }

    fn raw(&self) -> Result<Raw> {
        const OP: &str = "ExternalMemory::import";
        match self {
            MemoryHandle::OpaqueFd(fd) | MemoryHandle::DmaBufFd(fd) => fd_raw(OP, fd),
            MemoryHandle::NvSciBuf(object) => Ok(Raw::Object(object.0.cast_const())),
            _ => Err(unsupported_win32(OP)),
        }
    }
}

flags! {
    /// Flags of an external memory import.
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct ExternalMemoryFlags: u32 {
        /// `CUDA_EXTERNAL_MEMORY_DEDICATED`: the object is a dedicated allocation (Vulkan's
        /// `VkMemoryDedicatedAllocateInfo`, a committed Direct3D 12 resource); must match how
        /// it was allocated.
        const DEDICATED = sys::CUDA_EXTERNAL_MEMORY_DEDICATED;
    }
}

/// An imported memory object, destroyed once it and every buffer and array mapped from it
/// are dropped
/// ([`cuImportExternalMemory`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXTRES__INTEROP.html)).
#[derive(Debug, Clone)]
pub struct ExternalMemory {
    inner: Arc<Imported>,
}

/// The driver's object; every mapping holds it.
#[derive(Debug)]
struct Imported {
    raw: sys::CUexternalMemory,
    context: Context,
    size: u64,
}

// SAFETY: a CUexternalMemory may be used from any thread.
unsafe impl Send for Imported {}
// SAFETY: shared access only reads the handle and calls the thread-safe driver.
unsafe impl Sync for Imported {}

impl Drop for Imported {
    fn drop(&mut self) {
        let raw = self.raw;
        // SAFETY: imported once here, destroyed once, after every mapping (they hold `self`).
        self.context
            .with_current_for_drop("ExternalMemory", || unsafe { driver!(cuDestroyExternalMemory(raw)) });
    }
}

impl ExternalMemory {
    /// Imports the memory object `handle` names, of `size` bytes, into `context`
    /// ([`cuImportExternalMemory`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXTRES__INTEROP.html)).
    ///
    /// `size` is the object's whole size (Vulkan's `VkMemoryRequirements::size`), and
    /// [`DEDICATED`](ExternalMemoryFlags::DEDICATED) says whether it is a dedicated allocation.
    /// On success a file descriptor belongs to the driver; on failure everything comes back
    /// in the [`Refused`]: a size of 0 is an [`Error::InvalidArgument`], a Windows handle off
    /// Windows [`Error::Unsupported`], and a descriptor that is not a memory object of this
    /// device the driver's error. The driver takes the size on trust where it cannot check it
    /// (an opaque Vulkan descriptor): a size larger than the object imports, and mapping its
    /// bytes past the object is then the driver's error.
    pub fn import(
        context: &Context,
        handle: MemoryHandle,
        size: u64,
        flags: ExternalMemoryFlags,
    ) -> Result<ExternalMemory, Box<Refused<MemoryHandle>>> {
        let imported = Self::import_raw(context, &handle, size, flags);
        settle(imported, handle)
            .map(|raw| ExternalMemory { inner: Arc::new(Imported { raw, context: context.clone(), size }) })
    }

    fn import_raw(
        context: &Context,
        handle: &MemoryHandle,
        size: u64,
        flags: ExternalMemoryFlags,
    ) -> Result<sys::CUexternalMemory> {
        if size == 0 {
            return Err(Error::invalid("ExternalMemory::import", "a size of 0; pass the object's size"));
        }
        // SAFETY: a plain C struct; all zeroes is a valid value.
        let mut desc: sys::CUDA_EXTERNAL_MEMORY_HANDLE_DESC = unsafe { std::mem::zeroed() };
        desc.type_ = handle.kind();
        let source = handle.raw()?;
        match &source {
            Raw::Fd(fd) => desc.handle.fd = fd.raw(),
            Raw::Object(object) => desc.handle.nvSciBufObject = *object,
        }
        desc.size = size;
        desc.flags = flags.bits();
        context.enter()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: one out-parameter and a filled descriptor.
        let status = unsafe { driver!(status: cuImportExternalMemory(&mut raw, &desc)) };
        // Once the driver has seen the descriptor it is never closed here, even when the
        // import is refused (see `Duplicate`).
        if let Raw::Fd(duplicate) = source {
            duplicate.given();
        }
        status.check()?;
        Ok(raw)
    }

    /// The raw `CUexternalMemory`.
    pub fn as_raw(&self) -> sys::CUexternalMemory {
        self.inner.raw
    }

    /// The context it was imported into.
    pub fn context(&self) -> &Context {
        &self.inner.context
    }

    /// The size in bytes it was imported with.
    pub fn size(&self) -> u64 {
        self.inner.size
    }

    /// Maps `len` elements of `T` from byte `offset` of the object as a buffer ordered on
    /// `stream`
    /// ([`cuExternalMemoryGetMappedBuffer`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXTRES__INTEROP.html)).
    /// Dropping the buffer waits for its stream and frees the mapping (`cuMemFree`), even
    /// while the context holds a deferred error; the object stays imported while any mapping
    /// lives, and for good if a mapping's wait or free fails.
    ///
    /// A range past [`size`](Self::size), a length of 0 or an offset not aligned for `T` is an
    /// [`Error::InvalidArgument`] before any call.
    ///
    /// # Safety
    ///
    /// The other API does not free the memory while the buffer lives, and does not write it
    /// while the buffer's views read or write it unless the two sides order their work (with an
    /// [`ExternalSemaphore`](super::ExternalSemaphore), for instance).
    pub unsafe fn map_buffer<T: Pod>(
        &self,
        offset: u64,
        len: usize,
        stream: &Stream,
    ) -> Result<DeviceBuffer<T>> {
        const OP: &str = "ExternalMemory::map_buffer";
        let bytes = checked_bytes::<T>(OP, len)?;
        self.check_range(OP, offset, bytes as u64)?;
        if offset % std::mem::align_of::<T>() as u64 != 0 {
            return Err(Error::invalid(OP, format!("offset {offset} is not aligned for the element type")));
        }
        let desc = sys::CUDA_EXTERNAL_MEMORY_BUFFER_DESC {
            offset,
            size: bytes as u64,
            flags: 0,
            reserved: [0; 16],
            ..Default::default()
        };
        self.inner.context.enter()?;
        let mut ptr = 0;
        // SAFETY: one out-parameter; the object is alive and the range lies inside it.
        unsafe { driver!(cuExternalMemoryGetMappedBuffer(&mut ptr, self.inner.raw, &desc)) }?;
        let mapper = Arc::new(MappedRange { memory: self.inner.clone() });
        let allocation = DeviceAllocation { ptr, size: bytes, token: ptr };
        let shared: Arc<dyn Allocator> = mapper.clone();
        // SAFETY: the mapping is device memory of the stream's context (the driver refuses
        // another), owned by nothing else, aligned for `T` (the offset is, and mappings start
        // aligned); the caller vouches that the other API keeps it; `mapper` frees it.
        let adopted = unsafe { DeviceBuffer::from_allocation(stream, shared, allocation, len) };
        if adopted.is_err() {
            // SAFETY: mapped above and used by nothing.
            let _ = unsafe { mapper.deallocate(allocation, StreamRef::from(stream)) };
        }
        adopted
    }

    /// Maps a mipmapped array of `levels` levels, level 0 as `descriptor` says, from byte
    /// `offset` of the object
    /// ([`cuExternalMemoryGetMappedMipmappedArray`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EXTRES__INTEROP.html)).
    /// The array is destroyed on drop; the object stays imported while it lives.
    ///
    /// The descriptor must match the image the other API made (extent, format, channels,
    /// levels; Vulkan images need `SURFACE_LDST` or `COLOR_ATTACHMENT` as their usage says),
    /// or the driver refuses it. An offset past [`size`](Self::size) or 0 levels is an
    /// [`Error::InvalidArgument`].
    ///
    /// # Safety
    ///
    /// As for [`map_buffer`](Self::map_buffer): the other API keeps the image alive and orders
    /// its writes with CUDA's reads and writes.
    pub unsafe fn map_mipmapped_array(
        &self,
        offset: u64,
        descriptor: &ArrayDescriptor,
        levels: u32,
    ) -> Result<MipmappedArray> {
        const OP: &str = "ExternalMemory::map_mipmapped_array";
        self.check_range(OP, offset, 1)?;
        if levels == 0 {
            return Err(Error::invalid(OP, "a mipmapped array needs at least one level"));
        }
        let desc = sys::CUDA_EXTERNAL_MEMORY_MIPMAPPED_ARRAY_DESC {
            offset,
            arrayDesc: descriptor.as_raw(),
            numLevels: levels,
            reserved: [0; 16],
            ..Default::default()
        };
        self.inner.context.enter()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: one out-parameter; the object is alive and the descriptor filled.
        unsafe { driver!(cuExternalMemoryGetMappedMipmappedArray(&mut raw, self.inner.raw, &desc)) }?;
        Ok(MipmappedArray::adopt(raw, &self.inner.context, levels, self.inner.clone()))
    }

    fn check_range(&self, operation: &'static str, offset: u64, bytes: u64) -> Result<()> {
        match offset.checked_add(bytes) {
            Some(end) if end <= self.inner.size => Ok(()),
            _ => Err(Error::invalid(
                operation,
                format!("{bytes} bytes at offset {offset} reach past the {} bytes imported", self.inner.size),
            )),
        }
    }
}

/// The allocator of buffers mapped from external memory: nothing is allocated from it; giving
/// a mapping back waits for the stream and frees it (`cuMemFree`).
#[derive(Debug)]
struct MappedRange {
    memory: Arc<Imported>,
}

// SAFETY: `allocate` never returns memory; `deallocate` waits for the work on the stream
// before it frees the mapping, and leaks the mapping and the object if it cannot.
unsafe impl Allocator for MappedRange {
    fn context(&self) -> Option<&Context> {
        Some(&self.memory.context)
    }

    fn allocate(&self, _size: usize, _stream: StreamRef<'_>) -> Result<DeviceAllocation> {
        Err(Error::invalid(
            "ExternalMemory::map_buffer",
            "memory of an external object is mapped, not allocated; call map_buffer",
        ))
    }

    unsafe fn deallocate(&self, allocation: DeviceAllocation, stream: StreamRef<'_>) -> Result<()> {
        // A release path: a deferred error kept from elsewhere neither skips nor is consumed
        // by the wait and the free. Freeing a mapping is not stream-ordered: wait for the work
        // that may use it first.
        let context = &self.memory.context;
        let freed = context.make_current().and_then(|()| stream.wait_for_users(context)).and_then(|()| {
            // SAFETY: the token is the address `cuExternalMemoryGetMappedBuffer` returned,
            // freed once, after the work that used it.
            unsafe { driver!(cuMemFree(allocation.token)) }
        });
        if freed.is_err() {
            // The mapping may still be mapped and in use: the object must not be destroyed
            // under it when the last handle goes, so this mapping's reference is leaked.
            std::mem::forget(self.memory.clone());
        }
        freed
    }

    fn name(&self) -> &'static str {
        "cuExternalMemoryGetMappedBuffer"
    }
}
