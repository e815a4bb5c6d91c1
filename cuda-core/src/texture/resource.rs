//! Resources: what a texture or surface reads — a CUDA array, a mipmapped array, linear memory
//! or pitched 2D memory — held by the object made from them for as long as it lives.

use super::format::{ChannelFormat, Texel, texel_size};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::memory::{Array, ArrayDescriptor, DeviceView, MipmappedArray, PitchedBuffer, Track};
use crate::stream::Stream;
use cuhost_driver_sys as sys;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A plain description of a resource (`CUDA_RESOURCE_DESC`): raw handles and addresses, as
/// the driver reads and gives back. [`Resource`] is the form that keeps the memory alive.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ResourceDescriptor {
    /// `CU_RESOURCE_TYPE_ARRAY`: a CUDA array.
    Array {
        /// The array.
        array: sys::CUarray,
    },
    /// `CU_RESOURCE_TYPE_MIPMAPPED_ARRAY`: a mipmapped array.
    MipmappedArray {
        /// The mipmapped array.
        array: sys::CUmipmappedArray,
    },
    /// `CU_RESOURCE_TYPE_LINEAR`: a 1D range of device memory, fetched by texel index.
    Linear {
        /// Device address of the first texel.
        address: sys::CUdeviceptr,
        /// Format of one texel.
        format: ChannelFormat,
        /// Bytes of the range.
        size_in_bytes: usize,
    },
    /// `CU_RESOURCE_TYPE_PITCH2D`: a 2D matrix in device memory whose rows start
    /// `pitch_in_bytes` apart.
    Pitch2d {
        /// Device address of the first row.
        address: sys::CUdeviceptr,
        /// Format of one texel.
        format: ChannelFormat,
        /// Texels per row.
        width: usize,
        /// Rows.
        height: usize,
        /// Bytes from one row to the next.
        pitch_in_bytes: usize,
    },
}

impl ResourceDescriptor {
    /// The raw descriptor.
    pub fn as_raw(&self) -> sys::CUDA_RESOURCE_DESC {
        let mut raw = sys::CUDA_RESOURCE_DESC::default();
        match *self {
            ResourceDescriptor::Array { array } => {
                raw.resType = sys::CUresourcetype::CU_RESOURCE_TYPE_ARRAY;
                raw.res.array.hArray = array;
            }
            ResourceDescriptor::MipmappedArray { array } => {
                raw.resType = sys::CUresourcetype::CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
                raw.res.mipmap.hMipmappedArray = array;
            }
            ResourceDescriptor::Linear { address, format, size_in_bytes } => {
                raw.resType = sys::CUresourcetype::CU_RESOURCE_TYPE_LINEAR;
                raw.res.linear.devPtr = address;
                raw.res.linear.format = format.channel_type().as_raw();
                raw.res.linear.numChannels = format.channels();
                raw.res.linear.sizeInBytes = size_in_bytes;
            }
            ResourceDescriptor::Pitch2d { address, format, width, height, pitch_in_bytes } => {
                raw.resType = sys::CUresourcetype::CU_RESOURCE_TYPE_PITCH2D;
                raw.res.pitch2D.devPtr = address;
                raw.res.pitch2D.format = format.channel_type().as_raw();
                raw.res.pitch2D.numChannels = format.channels();
                raw.res.pitch2D.width = width;
                raw.res.pitch2D.height = height;
                raw.res.pitch2D.pitchInBytes = pitch_in_bytes;
            }
        }
        raw
    }

    /// A descriptor from its raw form; an unknown resource type or a format that is not plain
    /// integer or float channels is an [`Error::InvalidArgument`].
    pub fn from_raw(raw: &sys::CUDA_RESOURCE_DESC) -> Result<ResourceDescriptor> {
        use sys::CUresourcetype as T;
        // SAFETY (each union read below): `resType` says which member the descriptor holds,
        // and every member is plain data.
        Ok(match raw.resType {
            T::CU_RESOURCE_TYPE_ARRAY => ResourceDescriptor::Array { array: unsafe { raw.res.array.hArray } },
            T::CU_RESOURCE_TYPE_MIPMAPPED_ARRAY => {
                ResourceDescriptor::MipmappedArray { array: unsafe { raw.res.mipmap.hMipmappedArray } }
            }
            T::CU_RESOURCE_TYPE_LINEAR => {
                let l = unsafe { raw.res.linear };
                ResourceDescriptor::Linear {
                    address: l.devPtr,
                    format: ChannelFormat::from_raw(l.format, l.numChannels)?,
                    size_in_bytes: l.sizeInBytes,
                }
            }
            T::CU_RESOURCE_TYPE_PITCH2D => {
                let p = unsafe { raw.res.pitch2D };
                ResourceDescriptor::Pitch2d {
                    address: p.devPtr,
                    format: ChannelFormat::from_raw(p.format, p.numChannels)?,
                    width: p.width,
                    height: p.height,
                    pitch_in_bytes: p.pitchInBytes,
                }
            }
            other => {
                return Err(Error::invalid(
                    "ResourceDescriptor::from_raw",
                    format!("`resType` {} is not a resource type this crate knows", other.0),
                ));
            }
        })
    }
}

/// What keeps the memory of a resource alive.
#[derive(Clone, Debug)]
enum Owner {
    Array(Arc<Array>),
    MipmappedArray(Arc<MipmappedArray>),
    /// Memory borrowed for the resource's lifetime.
    Borrowed,
}

/// The memory a [`TextureObject`](super::TextureObject) or
/// [`SurfaceObject`](super::SurfaceObject) reads, checked when it is made, and kept alive by
/// the object: arrays are shared ([`Arc`]), device memory is borrowed for `'a`.
///
/// * [`Resource::array`] and [`Resource::mipmapped_array`] take any array;
/// * [`Resource::borrowed_array`] borrows one another value owns (a mapped graphics
///   resource's level);
/// * [`Resource::linear`] takes a typed view of device memory, whose element type gives the
///   texel format ([`Texel`]); its address must be aligned to the device's texture alignment;
/// * [`Resource::pitch_2d`] takes a [`PitchedBuffer`], whose pitch must be a multiple of the
///   device's texture pitch alignment (the buffer's own pitch always is).
#[derive(Clone, Debug)]
pub struct Resource<'a> {
    descriptor: ResourceDescriptor,
    format: Option<ChannelFormat>,
    array: Option<ArrayDescriptor>,
    owner: Owner,
    /// The owner of borrowed linear memory, for launches on other streams to note.
    track: Option<Track<'a>>,
    /// The queued-work flag of the array behind it (see `Array::queue_flag`), set by launches.
    array_queued: Option<Arc<AtomicBool>>,
    ctx: Context,
    _borrow: PhantomData<&'a ()>,
}

// SAFETY: the descriptor holds driver handles and device addresses, usable from any thread;
// the owners are Send + Sync.
unsafe impl Send for Resource<'_> {}
// SAFETY: as above; shared access only reads.
unsafe impl Sync for Resource<'_> {}

fn attribute(operation: &'static str, value: i32, what: &str) -> Result<usize> {
    usize::try_from(value)
        .map_err(|_| Error::invalid(operation, format!("the device reports a {what} of {value}")))
}

impl Resource<'static> {
    /// A CUDA array, shared with the objects made from it (`CU_RESOURCE_TYPE_ARRAY`). Reads
    /// the array's descriptor
    /// ([`cuArray3DGetDescriptor`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// Fails only when the driver refuses to describe the array.
    pub fn array(array: Arc<Array>) -> Result<Resource<'static>> {
        Resource::over_array(&array, Owner::Array(array.clone()))
    }

    /// A mipmapped array, shared with the objects made from it
    /// (`CU_RESOURCE_TYPE_MIPMAPPED_ARRAY`). Reads the descriptor of level 0
    /// ([`cuMipmappedArrayGetLevel`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html),
    /// [`cuArray3DGetDescriptor`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// Fails only when the driver refuses either call.
    pub fn mipmapped_array(array: Arc<MipmappedArray>) -> Result<Resource<'static>> {
        let d = array.level_descriptor(0)?;
        Ok(Resource {
            descriptor: ResourceDescriptor::MipmappedArray { array: array.as_raw() },
            format: ChannelFormat::from_array_descriptor(&d).ok(),
            array: Some(d),
            ctx: array.context().clone(),
            array_queued: Some(array.queue_flag()),
            owner: Owner::MipmappedArray(array),
            track: None,
            _borrow: PhantomData,
        })
    }
}

impl<'a> Resource<'a> {
    /// A CUDA array borrowed for `'a` (`CU_RESOURCE_TYPE_ARRAY`): one another value owns, such
    /// as a level of a mapped graphics resource
    /// ([`Mapped::array`](crate::interop::graphics::Mapped::array)), which then outlives the
    /// objects made from it. Reads the array's descriptor
    /// ([`cuArray3DGetDescriptor`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// Fails only when the driver refuses to describe the array.
    pub fn borrowed_array(array: &'a Array) -> Result<Resource<'a>> {
        Resource::over_array(array, Owner::Borrowed)
    }

    /// A resource over `array`, kept alive by `owner`.
    fn over_array(array: &Array, owner: Owner) -> Result<Resource<'a>> {
        let d = array.descriptor()?;
        Ok(Resource {
            descriptor: ResourceDescriptor::Array { array: array.as_raw() },
            format: ChannelFormat::from_array_descriptor(&d).ok(),
            array: Some(d),
            ctx: array.context().clone(),
            array_queued: Some(array.queue_flag()),
            owner,
            track: None,
            _borrow: PhantomData,
        })
    }

    /// The texels of `view`, fetched by index (`CU_RESOURCE_TYPE_LINEAR`).
    ///
    /// An [`Error::InvalidArgument`] names the field at fault: `address` when the view does
    /// not start at a multiple of the device's texture alignment
    /// (`CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT`; slice at a multiple of it), `size_in_bytes`
    /// when it holds more texels than a linear texture of its format may
    /// ([`cuDeviceGetTexture1DLinearMaxWidth`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__DEVICE.html)),
    /// `format` when `T`'s size is not that of its texel format.
    pub fn linear<T: Texel>(view: DeviceView<'a, T>) -> Result<Resource<'a>> {
        const OP: &str = "Resource::linear";
        let format = texel_size::<T>(OP)?;
        let device = view.context().device();
        let alignment = attribute(OP, device.texture_alignment()?, "texture alignment")?;
        check_alignment(OP, "address", view.as_raw(), alignment, "texture alignment")?;
        let mut max = 0usize;
        // SAFETY: one out-parameter; a device ordinal the context was made on.
        unsafe {
            driver!(cuDeviceGetTexture1DLinearMaxWidth(
                &mut max,
                format.channel_type().as_raw(),
                format.channels(),
                device.as_raw(),
            ))
        }?;
        if view.is_empty() || view.len() > max {
            return Err(Error::invalid(
                OP,
                format!(
                    "`size_in_bytes`: the view holds {} texels; a linear texture takes 1 to {max}",
                    view.len()
                ),
            ));
        }
        Ok(Resource {
            descriptor: ResourceDescriptor::Linear {
                address: view.as_raw(),
                format,
                size_in_bytes: view.size_in_bytes(),
            },
            format: Some(format),
            array: None,
            owner: Owner::Borrowed,
            track: view.track,
            array_queued: None,
            ctx: view.context().clone(),
            _borrow: PhantomData,
        })
    }

    /// The rows of `buffer`, addressed in 2D (`CU_RESOURCE_TYPE_PITCH2D`).
    ///
    /// An [`Error::InvalidArgument`] names the field at fault: `address` (texture alignment),
    /// `pitch_in_bytes` (not a multiple of `CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT`, or
    /// over the device's maximum), `width` or `height` (over the device's maximum for 2D
    /// linear textures), `format`.
    pub fn pitch_2d<T: Texel>(buffer: &'a PitchedBuffer<T>) -> Result<Resource<'a>> {
        const OP: &str = "Resource::pitch_2d";
        let format = texel_size::<T>(OP)?;
        let device = buffer.context().device();
        let alignment = attribute(OP, device.texture_alignment()?, "texture alignment")?;
        check_alignment(OP, "address", buffer.as_raw(), alignment, "texture alignment")?;
        let pitch_alignment = attribute(OP, device.texture_pitch_alignment()?, "texture pitch alignment")?;
        check_alignment(
            OP,
            "pitch_in_bytes",
            buffer.pitch() as u64,
            pitch_alignment,
            "texture pitch alignment",
        )?;
        let limits = [
            ("width", buffer.width(), device.maximum_texture2d_linear_width()?),
            ("height", buffer.height(), device.maximum_texture2d_linear_height()?),
            ("pitch_in_bytes", buffer.pitch(), device.maximum_texture2d_linear_pitch()?),
        ];
        for (field, value, max) in limits {
            // A limit the device does not report (0) is not checked.
            let max = attribute(OP, max, "2D linear texture limit")?;
            if max > 0 && value > max {
                return Err(Error::invalid(
                    OP,
                    format!("`{field}` is {value}; the device's 2D linear textures allow at most {max}"),
                ));
            }
        }
        Ok(Resource {
            descriptor: ResourceDescriptor::Pitch2d {
                address: buffer.as_raw(),
                format,
                width: buffer.width(),
                height: buffer.height(),
                pitch_in_bytes: buffer.pitch(),
            },
            format: Some(format),
            array: None,
            owner: Owner::Borrowed,
            track: buffer.storage().view().track,
            array_queued: None,
            ctx: buffer.context().clone(),
            _borrow: PhantomData,
        })
    }

    /// Notes a launch on `stream` of a kernel that uses the resource's memory through an
    /// object made from it, on that memory's owner (see
    /// [`KernelArg::note_launch`](crate::launch::KernelArg::note_launch)): a buffer notes the
    /// stream, an array waits for its context before it is destroyed.
    #[inline]
    ///
    /// An array resource refuses a stream of another context than the array's: the array's
    /// owner waits for its own context only before it destroys or unmaps it.
    pub(crate) fn note_launch(&self, stream: &Stream) -> Result<()> {
        if let Some(queued) = &self.array_queued {
            if stream.context() != &self.ctx {
                return Err(crate::error::Error::refused(
                    crate::error::Reason::WRONG_CONTEXT,
                    "texture launch",
                    "the texture or surface reads an array of another context than the stream's, and \
                     the array's owner waits for its own context only; launch on a stream of the \
                     array's context",
                ));
            }
            queued.store(true, Ordering::Relaxed);
        }
        self.track.map_or(Ok(()), |t| t.note_launch(stream))
    }

    /// The plain description the driver is given.
    pub fn descriptor(&self) -> &ResourceDescriptor {
        &self.descriptor
    }

    /// The texel format, where it is plain integer or float channels (for arrays of other
    /// formats, `None`).
    pub fn format(&self) -> Option<ChannelFormat> {
        self.format
    }

    /// The array's descriptor (level 0 of a mipmapped array), for array resources.
    pub fn array_descriptor(&self) -> Option<&ArrayDescriptor> {
        self.array.as_ref()
    }

    /// The array, for a [`Resource::array`].
    pub fn array_handle(&self) -> Option<&Arc<Array>> {
        match &self.owner {
            Owner::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The mipmapped array, for a [`Resource::mipmapped_array`].
    pub fn mipmapped_array_handle(&self) -> Option<&Arc<MipmappedArray>> {
        match &self.owner {
            Owner::MipmappedArray(a) => Some(a),
            _ => None,
        }
    }

    /// The context the memory belongs to.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Whether it is an array or a mipmapped array.
    pub(super) fn is_array(&self) -> bool {
        matches!(
            self.descriptor,
            ResourceDescriptor::Array { .. } | ResourceDescriptor::MipmappedArray { .. }
        )
    }
}

pub(super) fn check_alignment(
    operation: &'static str,
    field: &str,
    value: u64,
    alignment: usize,
    what: &str,
) -> Result<()> {
    if alignment > 1 && value % alignment as u64 != 0 {
        return Err(Error::invalid(
            operation,
            format!("`{field}` is {value:#x}, not a multiple of the {what} of {alignment} bytes"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_round_trip_through_the_raw_form() {
        let format = ChannelFormat::of::<[f32; 2]>();
        for d in [
            ResourceDescriptor::Linear { address: 0x1000, format, size_in_bytes: 4096 },
            ResourceDescriptor::Pitch2d { address: 0x2000, format, width: 3, height: 5, pitch_in_bytes: 512 },
            ResourceDescriptor::Array { array: 0x30 as sys::CUarray },
            ResourceDescriptor::MipmappedArray { array: 0x40 as sys::CUmipmappedArray },
        ] {
            assert_eq!(ResourceDescriptor::from_raw(&d.as_raw()).unwrap(), d);
        }
        let bad = sys::CUDA_RESOURCE_DESC { resType: sys::CUresourcetype(77), ..Default::default() };
        let e = ResourceDescriptor::from_raw(&bad).unwrap_err().to_string();
        assert!(e.contains("`resType` 77"), "{e}");
    }

    #[test]
    fn alignment_errors_name_the_field() {
        assert!(check_alignment("t", "address", 0x200, 512, "texture alignment").is_ok());
        let e = check_alignment("t", "address", 0x204, 512, "texture alignment").unwrap_err().to_string();
        assert!(e.contains("`address` is 0x204") && e.contains("512"), "{e}");
    }
}
