//! Resource view descriptors: an array read with another format, extent, or range of mipmap
//! levels or layers.

#![forbid(unsafe_code)]

use super::format::{ChannelFormat, ChannelType};
use super::resource::Resource;
use crate::error::{Error, Result};
use cuhost_driver_sys as sys;

/// The format a resource view reads an array as (`CUresourceViewFormat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum ResourceViewFormat {
    /// `CU_RES_VIEW_FORMAT_NONE`: the array's own format.
    #[default]
    None,
    /// Plain integer or float channels (`CU_RES_VIEW_FORMAT_UINT_1X8` ..
    /// `CU_RES_VIEW_FORMAT_FLOAT_4X32`).
    Channels(ChannelFormat),
    /// `CU_RES_VIEW_FORMAT_UNSIGNED_BC1`.
    UnsignedBc1,
    /// `CU_RES_VIEW_FORMAT_UNSIGNED_BC2`.
    UnsignedBc2,
    /// `CU_RES_VIEW_FORMAT_UNSIGNED_BC3`.
    UnsignedBc3,
    /// `CU_RES_VIEW_FORMAT_UNSIGNED_BC4`.
    UnsignedBc4,
    /// `CU_RES_VIEW_FORMAT_SIGNED_BC4`.
    SignedBc4,
    /// `CU_RES_VIEW_FORMAT_UNSIGNED_BC5`.
    UnsignedBc5,
    /// `CU_RES_VIEW_FORMAT_SIGNED_BC5`.
    SignedBc5,
    /// `CU_RES_VIEW_FORMAT_UNSIGNED_BC6H`.
    UnsignedBc6h,
    /// `CU_RES_VIEW_FORMAT_SIGNED_BC6H`.
    SignedBc6h,
    /// `CU_RES_VIEW_FORMAT_UNSIGNED_BC7`.
    UnsignedBc7,
}

const CHANNEL_TYPES: [ChannelType; 8] = [
    ChannelType::UnsignedInt8,
    ChannelType::SignedInt8,
    ChannelType::UnsignedInt16,
    ChannelType::SignedInt16,
    ChannelType::UnsignedInt32,
    ChannelType::SignedInt32,
    ChannelType::Half,
    ChannelType::Float,
];

const BLOCK_COMPRESSED: [ResourceViewFormat; 10] = [
    ResourceViewFormat::UnsignedBc1,
    ResourceViewFormat::UnsignedBc2,
    ResourceViewFormat::UnsignedBc3,
    ResourceViewFormat::UnsignedBc4,
    ResourceViewFormat::SignedBc4,
    ResourceViewFormat::UnsignedBc5,
    ResourceViewFormat::SignedBc5,
    ResourceViewFormat::UnsignedBc6h,
    ResourceViewFormat::SignedBc6h,
    ResourceViewFormat::UnsignedBc7,
];

impl ResourceViewFormat {
    /// The raw format.
    pub fn as_raw(self) -> sys::CUresourceViewFormat {
        // The header numbers the channel formats 1 to 24 in the order of `CHANNEL_TYPES`, three
        // channel counts each; the block-compressed ones follow from 25.
        let value = match self {
            ResourceViewFormat::None => 0,
            ResourceViewFormat::Channels(f) => {
                let kind = CHANNEL_TYPES.iter().position(|&k| k == f.channel_type()).unwrap_or(0) as u32;
                let count = match f.channels() {
                    1 => 0,
                    2 => 1,
                    _ => 2,
                };
                1 + 3 * kind + count
            }
            bc => 25 + BLOCK_COMPRESSED.iter().position(|&b| b == bc).unwrap_or(0) as u32,
        };
        sys::CUresourceViewFormat(value)
    }
}

impl TryFrom<sys::CUresourceViewFormat> for ResourceViewFormat {
    type Error = Error;
    fn try_from(raw: sys::CUresourceViewFormat) -> Result<ResourceViewFormat> {
        match raw.0 {
            0 => Ok(ResourceViewFormat::None),
            v @ 1..=24 => {
                let kind = CHANNEL_TYPES[((v - 1) / 3) as usize];
                Ok(ResourceViewFormat::Channels(ChannelFormat::new(kind, [1, 2, 4][((v - 1) % 3) as usize])?))
            }
            v @ 25..=34 => Ok(BLOCK_COMPRESSED[(v - 25) as usize]),
            v => Err(Error::invalid(
                "ResourceViewFormat::try_from",
                format!("unknown resource view format {v}; a newer driver may know it"),
            )),
        }
    }
}

/// A view of an array resource with another format, extent, or range of mipmap levels or
/// layers (`CUDA_RESOURCE_VIEW_DESC`). Zero extents keep the array's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ResourceViewDescriptor {
    /// The format texels are read as.
    pub format: ResourceViewFormat,
    /// Width in texels (0: the array's).
    pub width: usize,
    /// Height in texels (0: the array's).
    pub height: usize,
    /// Depth in texels (0: the array's).
    pub depth: usize,
    /// The first mipmap level seen.
    pub first_mipmap_level: u32,
    /// The last mipmap level seen.
    pub last_mipmap_level: u32,
    /// The first layer seen.
    pub first_layer: u32,
    /// The last layer seen.
    pub last_layer: u32,
}

impl ResourceViewDescriptor {
    /// The raw descriptor.
    pub fn as_raw(&self) -> sys::CUDA_RESOURCE_VIEW_DESC {
        sys::CUDA_RESOURCE_VIEW_DESC {
            format: self.format.as_raw(),
            width: self.width,
            height: self.height,
            depth: self.depth,
            firstMipmapLevel: self.first_mipmap_level,
            lastMipmapLevel: self.last_mipmap_level,
            firstLayer: self.first_layer,
            lastLayer: self.last_layer,
            reserved: [0; 16],
            ..Default::default()
        }
    }

    /// A descriptor from its raw form; a format this crate does not know is an
    /// [`Error::InvalidArgument`].
    pub fn from_raw(raw: &sys::CUDA_RESOURCE_VIEW_DESC) -> Result<ResourceViewDescriptor> {
        Ok(ResourceViewDescriptor {
            format: ResourceViewFormat::try_from(raw.format)?,
            width: raw.width,
            height: raw.height,
            depth: raw.depth,
            first_mipmap_level: raw.firstMipmapLevel,
            last_mipmap_level: raw.lastMipmapLevel,
            first_layer: raw.firstLayer,
            last_layer: raw.lastLayer,
        })
    }

    /// Checks the view against its resource; the error names the field at fault.
    pub(super) fn check(&self, operation: &'static str, resource: &Resource<'_>) -> Result<()> {
        if !resource.is_array() {
            return Err(Error::invalid(
                operation,
                "`view`: resource views apply to arrays and mipmapped arrays only; pass None for linear and pitched memory",
            ));
        }
        if self.first_mipmap_level > self.last_mipmap_level {
            return Err(Error::invalid(
                operation,
                format!(
                    "`first_mipmap_level` ({}) is after `last_mipmap_level` ({})",
                    self.first_mipmap_level, self.last_mipmap_level
                ),
            ));
        }
        if self.first_layer > self.last_layer {
            return Err(Error::invalid(
                operation,
                format!("`first_layer` ({}) is after `last_layer` ({})", self.first_layer, self.last_layer),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_formats_map_to_the_header_numbers() {
        use sys::CUresourceViewFormat as R;
        let f = |t, n| ResourceViewFormat::Channels(ChannelFormat::new(t, n).unwrap());
        assert_eq!(f(ChannelType::UnsignedInt8, 1).as_raw(), R::CU_RES_VIEW_FORMAT_UINT_1X8);
        assert_eq!(f(ChannelType::SignedInt16, 2).as_raw(), R::CU_RES_VIEW_FORMAT_SINT_2X16);
        assert_eq!(f(ChannelType::Half, 4).as_raw(), R::CU_RES_VIEW_FORMAT_FLOAT_4X16);
        assert_eq!(f(ChannelType::Float, 4).as_raw(), R::CU_RES_VIEW_FORMAT_FLOAT_4X32);
        assert_eq!(ResourceViewFormat::UnsignedBc1.as_raw(), R::CU_RES_VIEW_FORMAT_UNSIGNED_BC1);
        assert_eq!(ResourceViewFormat::SignedBc6h.as_raw(), R::CU_RES_VIEW_FORMAT_SIGNED_BC6H);
        assert_eq!(ResourceViewFormat::UnsignedBc7.as_raw(), R::CU_RES_VIEW_FORMAT_UNSIGNED_BC7);
        for v in 0..=34 {
            assert_eq!(ResourceViewFormat::try_from(R(v)).unwrap().as_raw(), R(v));
        }
        assert!(ResourceViewFormat::try_from(R(35)).is_err());
    }
}
