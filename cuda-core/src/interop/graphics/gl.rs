//! OpenGL buffers and images as [`GraphicsResource`]s, and the devices of a GL context.

use super::{GraphicsResource, RegisterFlags};
use crate::context::Context;
use crate::device::Device;
use crate::error::{Error, Result};
use cuhost_driver_sys as sys;

/// The kind of OpenGL image registered by [`GraphicsResource::gl_image`] (its GL target).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GlImageTarget {
    /// `GL_TEXTURE_2D`.
    Texture2D,
    /// `GL_TEXTURE_RECTANGLE`.
    TextureRectangle,
    /// `GL_TEXTURE_CUBE_MAP`.
    TextureCubeMap,
    /// `GL_TEXTURE_3D`.
    Texture3D,
    /// `GL_TEXTURE_2D_ARRAY`.
    Texture2DArray,
    /// `GL_RENDERBUFFER`.
    Renderbuffer,
}

impl GlImageTarget {
    /// The `GLenum` value.
    pub fn as_raw(self) -> u32 {
        match self {
            GlImageTarget::Texture2D => 0x0DE1,
            GlImageTarget::TextureRectangle => 0x84F5,
            GlImageTarget::TextureCubeMap => 0x8513,
            GlImageTarget::Texture3D => 0x806F,
            GlImageTarget::Texture2DArray => 0x8C1A,
            GlImageTarget::Renderbuffer => 0x8D41,
        }
    }
}

/// Which devices [`gl_devices`] lists (`CUGLDeviceList`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum GlDeviceList {
    /// Every device the current GL context renders on.
    #[default]
    All,
    /// The devices rendering the current frame (alternate-frame rendering).
    CurrentFrame,
    /// The devices that will render the next frame.
    NextFrame,
}

fn gl_name(operation: &'static str, name: u32) -> Result<u32> {
    if name == 0 {
        return Err(Error::invalid(operation, "GL name 0 names no object; pass a name glGen* returned"));
    }
    Ok(name)
}

impl GraphicsResource {
    /// Registers OpenGL buffer object `buffer` of the GL context current on this thread
    /// ([`cuGraphicsGLRegisterBuffer`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GL.html)).
    ///
    /// Name 0 is an [`Error::InvalidArgument`]; a name that is no buffer of the current GL
    /// context, or no current GL context, the driver's error.
    pub fn gl_buffer(context: &Context, buffer: u32, flags: RegisterFlags) -> Result<GraphicsResource> {
        let buffer = gl_name("GraphicsResource::gl_buffer", buffer)?;
        // SAFETY: one out-parameter; the driver checks the name against the current GL context.
        let read_only = flags.contains(RegisterFlags::READ_ONLY);
        GraphicsResource::register(context, "cuGraphicsGLRegisterBuffer", read_only, |raw| unsafe {
            sys::cuGraphicsGLRegisterBuffer(raw, buffer, flags.bits())
        })
    }

    /// Registers OpenGL texture or renderbuffer `image` of kind `target`, of the GL context
    /// current on this thread
    /// ([`cuGraphicsGLRegisterImage`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GL.html)).
    /// Mapped, its levels and layers are CUDA arrays ([`Mapped::array`](super::Mapped::array)).
    ///
    /// Name 0 is an [`Error::InvalidArgument`]; a name that is no such image, an internal
    /// format CUDA cannot map, or no current GL context, the driver's error.
    pub fn gl_image(
        context: &Context,
        image: u32,
        target: GlImageTarget,
        flags: RegisterFlags,
    ) -> Result<GraphicsResource> {
        let image = gl_name("GraphicsResource::gl_image", image)?;
        // SAFETY: one out-parameter; the driver checks the name against the current GL context.
        let read_only = flags.contains(RegisterFlags::READ_ONLY);
        GraphicsResource::register(context, "cuGraphicsGLRegisterImage", read_only, |raw| unsafe {
            sys::cuGraphicsGLRegisterImage(raw, image, target.as_raw(), flags.bits())
        })
    }
}

/// The CUDA devices the OpenGL context current on this thread renders on
/// ([`cuGLGetDevices`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GL.html)).
/// With no current GL context, or one on a GPU CUDA cannot use, the driver's error.
pub fn gl_devices(list: GlDeviceList) -> Result<Vec<Device>> {
    let capacity = Device::count()?;
    let raw_list = match list {
        GlDeviceList::All => sys::CUGLDeviceList::CU_GL_DEVICE_LIST_ALL,
        GlDeviceList::CurrentFrame => sys::CUGLDeviceList::CU_GL_DEVICE_LIST_CURRENT_FRAME,
        GlDeviceList::NextFrame => sys::CUGLDeviceList::CU_GL_DEVICE_LIST_NEXT_FRAME,
    };
    let mut devices = vec![0 as sys::CUdevice; capacity.max(1)];
    let mut found = 0u32;
    let room = u32::try_from(devices.len()).unwrap_or(u32::MAX);
    // SAFETY: `devices` has room for `room` handles; one count out-parameter.
    unsafe { driver!(cuGLGetDevices(&mut found, devices.as_mut_ptr(), room, raw_list)) }?;
    devices.truncate(found as usize);
    Ok(devices.into_iter().map(Device::from_raw).collect())
}
