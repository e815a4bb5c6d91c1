//! Texture and surface objects, and tensor maps.
//!
//! Built with the `texture` feature, which is on by default.
//!
//! See [Texture Object Management](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TEXOBJECT.html),
//! [Surface Object Management](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__SURFOBJECT.html)
//! and [Tensor Map Object Management](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TENSOR__MEMORY.html).
//!
//! * A [`Resource`] is the memory a texture reads: an [`Array`](crate::memory::Array) or a
//!   [`MipmappedArray`](crate::memory::MipmappedArray) (shared through an `Arc`), a typed view
//!   of device memory ([`Resource::linear`]) or a [`PitchedBuffer`](crate::memory::PitchedBuffer)
//!   ([`Resource::pitch_2d`]), borrowed. Formats come from the element type ([`Texel`],
//!   [`ChannelFormat`]); alignment and pitch are checked against the device.
//! * A [`TextureDescriptor`] says how it is sampled; a [`ResourceViewDescriptor`] reinterprets
//!   an array. A [`TextureObject`] combines them and keeps the resource alive; a
//!   [`SurfaceObject`] reads and writes an array. Both hand their descriptors back, and both
//!   pass to kernels as their 64-bit handles.
//! * A [`TensorMapBuilder`] encodes a [`TensorMap`] for the copy engine of compute capability
//!   9.0 and later; it passes to kernels by value.
//!
//! Every mistake that can be seen before the call is an
//! [`Error::InvalidArgument`](crate::error::Error::InvalidArgument) whose message names the
//! descriptor field at fault. The deprecated texture and surface references are left to the
//! raw crate ([`cuhost_driver_sys`]).
//!
//! ```no_run
//! use cuhost::memory::{Array, ArrayFlags};
//! use cuhost::texture::{AddressMode, ChannelFormat, FilterMode, Resource, TextureDescriptor, TextureObject};
//! use cuhost::{Context, Device};
//! use std::sync::Arc;
//! # fn main() -> cuhost::Result<()> {
//! let ctx = Context::primary(&Device::get(0)?)?;
//! let format = ChannelFormat::of::<f32>();
//! let mut array = Array::new(&ctx, &format.array_descriptor(64, 64, 0, ArrayFlags::empty()))?;
//! array.copy_from_host(&vec![1.0f32; 64 * 64])?;
//! let texture = TextureObject::new(
//!     Resource::array(Arc::new(array))?,
//!     &TextureDescriptor {
//!         address_mode: [AddressMode::Wrap; 3],
//!         filter_mode: FilterMode::Linear,
//!         normalized_coordinates: true,
//!         ..Default::default()
//!     },
//!     None,
//! )?;
//! // `&texture` is a kernel argument: a `.u64` parameter, the handle for `tex.2d`.
//! # Ok(()) }
//! ```

mod descriptor;
mod format;
mod object;
mod resource;
mod tensor_map;
mod view;

pub use descriptor::{AddressMode, FilterMode, ReadMode, TextureDescriptor};
pub use format::{ChannelFormat, ChannelType, Texel};
pub use object::{SurfaceObject, TextureObject};
pub use resource::{Resource, ResourceDescriptor};
pub use tensor_map::{
    Im2colWideMode, Interleave, L2Promotion, OobFill, Swizzle, TensorDataType, TensorMap, TensorMapBuilder,
};
pub use view::{ResourceViewDescriptor, ResourceViewFormat};

/// Declares a Rust enum over the named constants of a raw newtype enum, with `as_raw` and a
/// `TryFrom` of the raw value that refuses values the crate does not know.
macro_rules! raw_enum {
    (
        $(#[$meta:meta])*
        $name:ident: $raw:ty {
            $($(#[$variant_meta:meta])* $variant:ident = $value:ident,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$variant_meta])* $variant,)+
        }

        impl $name {
            /// The raw value.
            pub const fn as_raw(self) -> $raw {
                match self {
                    $($name::$variant => <$raw>::$value,)+
                }
            }
        }

        impl TryFrom<$raw> for $name {
            type Error = crate::error::Error;
            fn try_from(raw: $raw) -> crate::error::Result<$name> {
                $(if raw == <$raw>::$value {
                    return Ok($name::$variant);
                })+
                Err(crate::error::Error::invalid(
                    concat!(stringify!($name), "::try_from"),
                    format!("unknown value {}; a newer driver may know it", raw.0),
                ))
            }
        }
    };
}
use raw_enum;
