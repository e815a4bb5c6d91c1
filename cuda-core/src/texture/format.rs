//! The channel format of texels: the element kind of each channel and the number of channels,
//! and the Rust element types that map to them.

#![forbid(unsafe_code)]

use super::raw_enum;
use crate::error::{Error, Result};
use crate::memory::{ArrayDescriptor, ArrayFlags};
use cuhost_driver_sys as sys;

raw_enum! {
    /// The kind of one channel of a texel (`CUarray_format`, the plain integer and float
    /// formats).
    ChannelType: sys::CUarray_format {
        /// `CU_AD_FORMAT_UNSIGNED_INT8`: `u8`.
        UnsignedInt8 = CU_AD_FORMAT_UNSIGNED_INT8,
        /// `CU_AD_FORMAT_UNSIGNED_INT16`: `u16`.
        UnsignedInt16 = CU_AD_FORMAT_UNSIGNED_INT16,
        /// `CU_AD_FORMAT_UNSIGNED_INT32`: `u32`.
        UnsignedInt32 = CU_AD_FORMAT_UNSIGNED_INT32,
        /// `CU_AD_FORMAT_SIGNED_INT8`: `i8`.
        SignedInt8 = CU_AD_FORMAT_SIGNED_INT8,
        /// `CU_AD_FORMAT_SIGNED_INT16`: `i16`.
        SignedInt16 = CU_AD_FORMAT_SIGNED_INT16,
        /// `CU_AD_FORMAT_SIGNED_INT32`: `i32`.
        SignedInt32 = CU_AD_FORMAT_SIGNED_INT32,
        /// `CU_AD_FORMAT_HALF`: a 16-bit float.
        Half = CU_AD_FORMAT_HALF,
        /// `CU_AD_FORMAT_FLOAT`: `f32`.
        Float = CU_AD_FORMAT_FLOAT,
    }
}

impl ChannelType {
    /// Bytes of one channel.
    pub const fn bytes(self) -> usize {
        match self {
            ChannelType::UnsignedInt8 | ChannelType::SignedInt8 => 1,
            ChannelType::UnsignedInt16 | ChannelType::SignedInt16 | ChannelType::Half => 2,
            ChannelType::UnsignedInt32 | ChannelType::SignedInt32 | ChannelType::Float => 4,
        }
    }

    /// Whether the channel holds an integer (which a texture can return as it is, or as a
    /// normalized float when it has 8 or 16 bits).
    pub const fn is_integer(self) -> bool {
        !matches!(self, ChannelType::Half | ChannelType::Float)
    }
}

/// The format of one texel: the kind of its channels and how many there are (1, 2 or 4), as
/// CuPy's `ChannelFormatDescriptor` or the runtime's `cudaChannelFormatDesc` describe it.
///
/// [`ChannelFormat::of`] gives the format of a Rust element type: `f32` is one float
/// channel, `[u8; 4]` four unsigned 8-bit channels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChannelFormat {
    channel_type: ChannelType,
    channels: u32,
}

impl ChannelFormat {
    /// `channels` channels of `channel_type`; a count other than 1, 2 or 4 is an
    /// [`Error::InvalidArgument`] naming `channels`.
    pub fn new(channel_type: ChannelType, channels: u32) -> Result<ChannelFormat> {
        if !matches!(channels, 1 | 2 | 4) {
            return Err(Error::invalid(
                "ChannelFormat::new",
                format!("channels is {channels}; textures and surfaces take 1, 2 or 4 channels"),
            ));
        }
        Ok(ChannelFormat { channel_type, channels })
    }

    /// The format of the element type `T`.
    pub const fn of<T: Texel>() -> ChannelFormat {
        T::FORMAT
    }

    /// The kind of each channel.
    pub const fn channel_type(&self) -> ChannelType {
        self.channel_type
    }

    /// The number of channels: 1, 2 or 4.
    pub const fn channels(&self) -> u32 {
        self.channels
    }

    /// Bytes of one texel (all channels).
    pub const fn bytes(&self) -> usize {
        self.channel_type.bytes() * self.channels as usize
    }

    /// The descriptor of an array of `width` × `height` × `depth` texels of this format
    /// (`height == 0` for 1D, `depth == 0` for 2D; `depth` counts layers of a layered array).
    pub fn array_descriptor(
        &self,
        width: usize,
        height: usize,
        depth: usize,
        flags: ArrayFlags,
    ) -> ArrayDescriptor {
        ArrayDescriptor {
            width,
            height,
            depth,
            format: self.channel_type.as_raw(),
            num_channels: self.channels,
            flags,
        }
    }

    /// The format of an array descriptor, or an [`Error::InvalidArgument`] naming `format` for
    /// the formats that are not plain integer or float channels (block-compressed, video).
    pub fn from_array_descriptor(descriptor: &ArrayDescriptor) -> Result<ChannelFormat> {
        ChannelFormat::from_raw(descriptor.format, descriptor.num_channels)
    }

    /// The format of a raw format and channel count.
    ///
    /// A format that is not a plain integer or float channel type, or a channel count other
    /// than 1, 2 or 4, is an [`Error::InvalidArgument`].
    pub fn from_raw(format: sys::CUarray_format, channels: u32) -> Result<ChannelFormat> {
        let channel_type = ChannelType::try_from(format).map_err(|_| {
            Error::invalid(
                "ChannelFormat::from_raw",
                format!(
                    "format {} ({}) is not a plain integer or float channel type",
                    format.0,
                    format.name().unwrap_or("unknown")
                ),
            )
        })?;
        ChannelFormat::new(channel_type, channels)
    }
}

/// An element type whose bytes are one texel of a known [`ChannelFormat`]: the scalars `u8`,
/// `i8`, `u16`, `i16`, `u32`, `i32`, `f32`, and arrays of 1, 2 or 4 of them (`[f32; 4]` is a
/// `float4`). Implement it for a type of your own (a 16-bit float, say) to use it as a texel.
///
/// `size_of::<Self>()` must equal `FORMAT.bytes()`; textures over memory of a type where they
/// differ are refused.
pub trait Texel: bytemuck::Pod {
    /// The format of one value.
    const FORMAT: ChannelFormat;
}

macro_rules! texels {
    ($($t:ty => $kind:ident),+ $(,)?) => {$(
        impl Texel for $t {
            const FORMAT: ChannelFormat = ChannelFormat { channel_type: ChannelType::$kind, channels: 1 };
        }
        impl Texel for [$t; 1] {
            const FORMAT: ChannelFormat = ChannelFormat { channel_type: ChannelType::$kind, channels: 1 };
        }
        impl Texel for [$t; 2] {
            const FORMAT: ChannelFormat = ChannelFormat { channel_type: ChannelType::$kind, channels: 2 };
        }
        impl Texel for [$t; 4] {
            const FORMAT: ChannelFormat = ChannelFormat { channel_type: ChannelType::$kind, channels: 4 };
        }
    )+};
}

texels!(
    u8 => UnsignedInt8,
    u16 => UnsignedInt16,
    u32 => UnsignedInt32,
    i8 => SignedInt8,
    i16 => SignedInt16,
    i32 => SignedInt32,
    f32 => Float,
);

/// An [`Error::InvalidArgument`] unless `T`'s size is one texel of its format.
pub(super) fn texel_size<T: Texel>(operation: &'static str) -> Result<ChannelFormat> {
    let format = T::FORMAT;
    if format.bytes() != std::mem::size_of::<T>() {
        return Err(Error::invalid(
            operation,
            format!(
                "format: the element type has {} bytes but its format ({:?} × {}) {}",
                std::mem::size_of::<T>(),
                format.channel_type,
                format.channels,
                format.bytes()
            ),
        ));
    }
    Ok(format)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_types_map_to_formats() {
        assert_eq!(ChannelFormat::of::<f32>(), ChannelFormat::new(ChannelType::Float, 1).unwrap());
        assert_eq!(ChannelFormat::of::<[u8; 4]>().channels(), 4);
        assert_eq!(ChannelFormat::of::<[u8; 4]>().bytes(), 4);
        assert_eq!(ChannelFormat::of::<[i16; 2]>().channel_type(), ChannelType::SignedInt16);
        assert_eq!(ChannelFormat::of::<[f32; 4]>().bytes(), 16);
        assert!(texel_size::<[f32; 4]>("t").is_ok());
    }

    #[test]
    fn channel_counts_and_raw_formats_are_checked() {
        let e = ChannelFormat::new(ChannelType::Float, 3).unwrap_err().to_string();
        assert!(e.contains("channels is 3"), "{e}");
        let raw = ChannelFormat::of::<[u16; 2]>().array_descriptor(4, 4, 0, ArrayFlags::empty());
        assert_eq!(ChannelFormat::from_array_descriptor(&raw).unwrap(), ChannelFormat::of::<[u16; 2]>());
        let nv12 =
            ChannelFormat::from_raw(sys::CUarray_format::CU_AD_FORMAT_NV12, 1).unwrap_err().to_string();
        assert!(nv12.contains("CU_AD_FORMAT_NV12"), "{nv12}");
        assert_eq!(ChannelType::try_from(sys::CUarray_format::CU_AD_FORMAT_HALF).unwrap(), ChannelType::Half);
        assert!(ChannelType::Half.bytes() == 2 && !ChannelType::Half.is_integer());
    }
}
