//! Texture and surface objects: 64-bit handles that kernels read (and, for surfaces, write)
//! through, destroyed on drop, holding their resource.

use super::descriptor::TextureDescriptor;
use super::resource::{Resource, ResourceDescriptor};
use super::view::ResourceViewDescriptor;
use crate::error::{Error, Result};
use crate::launch::KernelArg;
use crate::memory::{Array, ArrayFlags};
use cuhost_driver_sys as sys;
use std::ffi::c_void;
use std::sync::Arc;

/// A texture object
/// ([`cuTexObjectCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TEXOBJECT.html)):
/// a resource sampled as a [`TextureDescriptor`] says, optionally through a
/// [`ResourceViewDescriptor`]. It holds the resource (sharing arrays, borrowing device memory
/// for `'a`), so the memory outlives the handle; the handle is destroyed on drop.
///
/// It passes to a kernel as its 64-bit handle (`&texture` in the argument tuple), the operand
/// of the PTX `tex` instructions (`tex.2d.v4.f32.f32 {...}, [handle, {x, y}]`).
#[derive(Debug)]
pub struct TextureObject<'a> {
    /// The handle; a kernel argument points at this field.
    raw: sys::CUtexObject,
    resource: Resource<'a>,
}

impl<'a> TextureObject<'a> {
    /// Creates a texture object over `resource`.
    ///
    /// Checked before the call, each error naming the field at fault: address modes that
    /// need normalized coordinates, the anisotropy range, the mipmap clamps, a read mode or
    /// linear filtering the texel format does not allow, and a view of anything but an array.
    pub fn new(
        resource: Resource<'a>,
        texture: &TextureDescriptor,
        view: Option<&ResourceViewDescriptor>,
    ) -> Result<TextureObject<'a>> {
        const OP: &str = "TextureObject::new";
        texture.check(OP, resource.format())?;
        if let Some(v) = view {
            v.check(OP, &resource)?;
        }
        resource.context().enter()?;
        let res = resource.descriptor().as_raw();
        let tex = texture.as_raw();
        let view_raw = view.map(ResourceViewDescriptor::as_raw);
        let view_ptr = view_raw.as_ref().map_or(std::ptr::null(), |v| v as *const _);
        let mut raw = 0;
        // SAFETY: valid descriptors (the view may be null); the resource is alive and held by
        // the object; the context is current.
        unsafe { driver!(cuTexObjectCreate(&mut raw, &res, &tex, view_ptr)) }?;
        Ok(TextureObject { raw, resource })
    }

    /// The raw `CUtexObject`.
    pub fn as_raw(&self) -> sys::CUtexObject {
        self.raw
    }

    /// The resource the texture reads.
    pub fn resource(&self) -> &Resource<'a> {
        &self.resource
    }

    /// The resource descriptor, as the driver keeps it
    /// ([`cuTexObjectGetResourceDesc`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TEXOBJECT.html)).
    pub fn resource_descriptor(&self) -> Result<ResourceDescriptor> {
        self.resource.context().enter()?;
        let mut raw = sys::CUDA_RESOURCE_DESC::default();
        // SAFETY: the object is alive; one out-parameter.
        unsafe { driver!(cuTexObjectGetResourceDesc(&mut raw, self.raw)) }?;
        ResourceDescriptor::from_raw(&raw)
    }

    /// The texture descriptor, as the driver keeps it
    /// ([`cuTexObjectGetTextureDesc`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TEXOBJECT.html)).
    /// The driver does not keep the border colour: it reads back as zeros.
    pub fn texture_descriptor(&self) -> Result<TextureDescriptor> {
        self.resource.context().enter()?;
        let mut raw = sys::CUDA_TEXTURE_DESC::default();
        // SAFETY: the object is alive; one out-parameter.
        unsafe { driver!(cuTexObjectGetTextureDesc(&mut raw, self.raw)) }?;
        TextureDescriptor::from_raw(&raw)
    }

    /// The resource view descriptor, as the driver keeps it
    /// ([`cuTexObjectGetResourceViewDesc`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TEXOBJECT.html));
    /// `None` for a texture made without a view.
    pub fn resource_view_descriptor(&self) -> Result<Option<ResourceViewDescriptor>> {
        self.resource.context().enter()?;
        let mut raw = sys::CUDA_RESOURCE_VIEW_DESC::default();
        // SAFETY: the object is alive; one out-parameter.
        let status = unsafe { driver!(status: cuTexObjectGetResourceViewDesc(&mut raw, self.raw)) };
        if status.is(sys::CUresult::CUDA_ERROR_INVALID_VALUE) {
            return Ok(None);
        }
        status.check()?;
        Ok(Some(ResourceViewDescriptor::from_raw(&raw)?))
    }
}

impl Drop for TextureObject<'_> {
    fn drop(&mut self) {
        let raw = self.raw;
        // SAFETY: this value created the object and destroys it once; the resource is dropped
        // after it.
        self.resource
            .context()
            .with_current_for_drop("TextureObject", || unsafe { driver!(cuTexObjectDestroy(raw)) });
    }
}

/// A surface object
/// ([`cuSurfObjectCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__SURFOBJECT.html)):
/// an array that kernels read and write by byte coordinates (`suld`/`sust`). The array must
/// have been created with [`ArrayFlags::SURFACE_LDST`]; the object shares it and is destroyed
/// on drop.
///
/// It passes to a kernel as its 64-bit handle (`&surface` in the argument tuple).
#[derive(Debug)]
pub struct SurfaceObject {
    /// The handle; a kernel argument points at this field.
    raw: sys::CUsurfObject,
    resource: Resource<'static>,
}

impl SurfaceObject {
    /// Creates a surface object over `array`. An array made without
    /// [`ArrayFlags::SURFACE_LDST`] is an [`Error::InvalidArgument`] naming `flags`.
    pub fn new(array: Arc<Array>) -> Result<SurfaceObject> {
        const OP: &str = "SurfaceObject::new";
        let resource = Resource::array(array)?;
        let ldst = resource.array_descriptor().is_some_and(|d| d.flags.contains(ArrayFlags::SURFACE_LDST));
        if !ldst {
            return Err(Error::invalid(
                OP,
                "`flags`: the array was created without ArrayFlags::SURFACE_LDST, which surfaces need",
            ));
        }
        resource.context().enter()?;
        let res = resource.descriptor().as_raw();
        let mut raw = 0;
        // SAFETY: a valid array descriptor; the array is alive and held by the object.
        unsafe { driver!(cuSurfObjectCreate(&mut raw, &res)) }?;
        Ok(SurfaceObject { raw, resource })
    }

    /// The raw `CUsurfObject`.
    pub fn as_raw(&self) -> sys::CUsurfObject {
        self.raw
    }

    /// The array the surface reads and writes.
    pub fn array(&self) -> Option<&Arc<Array>> {
        self.resource.array_handle()
    }

    /// The resource the surface was made from.
    pub fn resource(&self) -> &Resource<'static> {
        &self.resource
    }

    /// The resource descriptor, as the driver keeps it
    /// ([`cuSurfObjectGetResourceDesc`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__SURFOBJECT.html)).
    pub fn resource_descriptor(&self) -> Result<ResourceDescriptor> {
        self.resource.context().enter()?;
        let mut raw = sys::CUDA_RESOURCE_DESC::default();
        // SAFETY: the object is alive; one out-parameter.
        unsafe { driver!(cuSurfObjectGetResourceDesc(&mut raw, self.raw)) }?;
        ResourceDescriptor::from_raw(&raw)
    }
}

impl Drop for SurfaceObject {
    fn drop(&mut self) {
        let raw = self.raw;
        // SAFETY: this value created the object and destroys it once.
        self.resource
            .context()
            .with_current_for_drop("SurfaceObject", || unsafe { driver!(cuSurfObjectDestroy(raw)) });
    }
}

// SAFETY: the pointer is to the handle field of the borrowed object, which does not change
// while it is borrowed; a handle is 8 bytes.
unsafe impl KernelArg for &TextureObject<'_> {
    #[inline]
    fn arg_ptr(&self) -> *mut c_void {
        (&self.raw as *const sys::CUtexObject).cast_mut().cast()
    }

    #[inline]
    fn arg_size(&self) -> usize {
        std::mem::size_of::<sys::CUtexObject>()
    }

    #[inline]
    fn note_launch(&self, stream: &crate::stream::Stream) -> Result<()> {
        self.resource.note_launch(stream)
    }
}

// SAFETY: as for textures.
unsafe impl KernelArg for &SurfaceObject {
    #[inline]
    fn arg_ptr(&self) -> *mut c_void {
        (&self.raw as *const sys::CUsurfObject).cast_mut().cast()
    }

    #[inline]
    fn arg_size(&self) -> usize {
        std::mem::size_of::<sys::CUsurfObject>()
    }

    #[inline]
    fn note_launch(&self, stream: &crate::stream::Stream) -> Result<()> {
        self.resource.note_launch(stream)
    }
}
