//! Texture descriptors (how a texture is sampled) and resource view descriptors (how an
//! array is reinterpreted).

use super::format::{ChannelFormat, ChannelType};
use super::raw_enum;
use super::resource::Resource;
use crate::error::{Error, Result};
use cuda_driver_sys as sys;

raw_enum! {
    /// What a fetch outside `[0, size)` reads, per dimension (`CUaddress_mode`).
    AddressMode: sys::CUaddress_mode {
        /// `CU_TR_ADDRESS_MODE_WRAP`: the coordinate wraps around (normalized coordinates only).
        Wrap = CU_TR_ADDRESS_MODE_WRAP,
        /// `CU_TR_ADDRESS_MODE_CLAMP`: the edge texel.
        Clamp = CU_TR_ADDRESS_MODE_CLAMP,
        /// `CU_TR_ADDRESS_MODE_MIRROR`: the texture is mirrored at every edge (normalized
        /// coordinates only).
        Mirror = CU_TR_ADDRESS_MODE_MIRROR,
        /// `CU_TR_ADDRESS_MODE_BORDER`: the border colour.
        Border = CU_TR_ADDRESS_MODE_BORDER,
    }
}

raw_enum! {
    /// How texels are combined (`CUfilter_mode`).
    FilterMode: sys::CUfilter_mode {
        /// `CU_TR_FILTER_MODE_POINT`: the nearest texel.
        Point = CU_TR_FILTER_MODE_POINT,
        /// `CU_TR_FILTER_MODE_LINEAR`: linear interpolation of the nearest texels (2 in 1D, 4 in
        /// 2D, 8 in 3D); the texture must return floats.
        Linear = CU_TR_FILTER_MODE_LINEAR,
    }
}

/// What a fetch of integer texels returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum ReadMode {
    /// The texel as stored (`CU_TRSF_READ_AS_INTEGER`): integers stay integers.
    #[default]
    Element,
    /// 8- and 16-bit integers mapped to `[0, 1]` (unsigned) or `[-1, 1]` (signed) floats.
    NormalizedFloat,
}

/// How a texture is sampled (`CUDA_TEXTURE_DESC`): address modes, filtering, read mode,
/// coordinates, mipmap and anisotropy settings and the border colour.
///
/// Build it from [`Default`] (clamp, point filtering, elements as stored, unnormalized
/// coordinates) with struct update syntax:
///
/// ```
/// use cuda_core::texture::{AddressMode, FilterMode, TextureDescriptor};
/// let d = TextureDescriptor {
///     address_mode: [AddressMode::Wrap; 3],
///     filter_mode: FilterMode::Linear,
///     normalized_coordinates: true,
///     ..Default::default()
/// };
/// assert_eq!(TextureDescriptor::from_raw(&d.as_raw()).ok(), Some(d));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TextureDescriptor {
    /// Address mode of x, y and z.
    pub address_mode: [AddressMode; 3],
    /// Filtering within a level.
    pub filter_mode: FilterMode,
    /// What fetches of integer texels return.
    pub read_mode: ReadMode,
    /// Coordinates in `[0, 1)` rather than `[0, size)` (`CU_TRSF_NORMALIZED_COORDINATES`).
    pub normalized_coordinates: bool,
    /// sRGB to linear conversion of 8-bit texels (`CU_TRSF_SRGB`).
    pub srgb: bool,
    /// Disables the trilinear optimization (`CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION`).
    pub disable_trilinear_optimization: bool,
    /// Filtering across cubemap faces (`CU_TRSF_SEAMLESS_CUBEMAP`).
    pub seamless_cubemap: bool,
    /// Maximum anisotropy ratio, 0 to 16 (0 and 1 turn anisotropic filtering off).
    pub max_anisotropy: u32,
    /// Filtering between mipmap levels.
    pub mipmap_filter_mode: FilterMode,
    /// Offset added to the mipmap level the hardware selects.
    pub mipmap_level_bias: f32,
    /// Lowest mipmap level used.
    pub min_mipmap_level_clamp: f32,
    /// Highest mipmap level used.
    pub max_mipmap_level_clamp: f32,
    /// The colour read outside the texture where the address mode is [`AddressMode::Border`].
    pub border_color: [f32; 4],
}

impl Default for TextureDescriptor {
    fn default() -> TextureDescriptor {
        TextureDescriptor {
            address_mode: [AddressMode::Clamp; 3],
            filter_mode: FilterMode::Point,
            read_mode: ReadMode::Element,
            normalized_coordinates: false,
            srgb: false,
            disable_trilinear_optimization: false,
            seamless_cubemap: false,
            max_anisotropy: 0,
            mipmap_filter_mode: FilterMode::Point,
            mipmap_level_bias: 0.0,
            min_mipmap_level_clamp: 0.0,
            max_mipmap_level_clamp: 0.0,
            border_color: [0.0; 4],
        }
    }
}

impl TextureDescriptor {
    /// The raw descriptor.
    pub fn as_raw(&self) -> sys::CUDA_TEXTURE_DESC {
        let mut flags = 0;
        for (set, flag) in [
            (self.read_mode == ReadMode::Element, sys::CU_TRSF_READ_AS_INTEGER),
            (self.normalized_coordinates, sys::CU_TRSF_NORMALIZED_COORDINATES),
            (self.srgb, sys::CU_TRSF_SRGB),
            (self.disable_trilinear_optimization, sys::CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION),
            (self.seamless_cubemap, sys::CU_TRSF_SEAMLESS_CUBEMAP),
        ] {
            if set {
                flags |= flag;
            }
        }
        sys::CUDA_TEXTURE_DESC {
            addressMode: self.address_mode.map(AddressMode::as_raw),
            filterMode: self.filter_mode.as_raw(),
            flags,
            maxAnisotropy: self.max_anisotropy,
            mipmapFilterMode: self.mipmap_filter_mode.as_raw(),
            mipmapLevelBias: self.mipmap_level_bias,
            minMipmapLevelClamp: self.min_mipmap_level_clamp,
            maxMipmapLevelClamp: self.max_mipmap_level_clamp,
            borderColor: self.border_color,
            reserved: [0; 12],
        }
    }

    /// A descriptor from its raw form; an address or filter mode this crate does not know is
    /// an [`Error::InvalidArgument`].
    pub fn from_raw(raw: &sys::CUDA_TEXTURE_DESC) -> Result<TextureDescriptor> {
        let [x, y, z] = raw.addressMode;
        let has = |flag: u32| raw.flags & flag != 0;
        Ok(TextureDescriptor {
            address_mode: [AddressMode::try_from(x)?, AddressMode::try_from(y)?, AddressMode::try_from(z)?],
            filter_mode: FilterMode::try_from(raw.filterMode)?,
            read_mode: if has(sys::CU_TRSF_READ_AS_INTEGER) {
                ReadMode::Element
            } else {
                ReadMode::NormalizedFloat
            },
            normalized_coordinates: has(sys::CU_TRSF_NORMALIZED_COORDINATES),
            srgb: has(sys::CU_TRSF_SRGB),
            disable_trilinear_optimization: has(sys::CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION),
            seamless_cubemap: has(sys::CU_TRSF_SEAMLESS_CUBEMAP),
            max_anisotropy: raw.maxAnisotropy,
            mipmap_filter_mode: FilterMode::try_from(raw.mipmapFilterMode)?,
            mipmap_level_bias: raw.mipmapLevelBias,
            min_mipmap_level_clamp: raw.minMipmapLevelClamp,
            max_mipmap_level_clamp: raw.maxMipmapLevelClamp,
            border_color: raw.borderColor,
        })
    }

    /// Checks the descriptor on its own and against the format of the texels (where known);
    /// the error names the field at fault.
    pub(super) fn check(&self, operation: &'static str, format: Option<ChannelFormat>) -> Result<()> {
        for (axis, mode) in ["x", "y", "z"].into_iter().zip(self.address_mode) {
            if matches!(mode, AddressMode::Wrap | AddressMode::Mirror) && !self.normalized_coordinates {
                return Err(Error::invalid(
                    operation,
                    format!(
                        "`address_mode` of {axis} is {mode:?}, which works with normalized coordinates only; set `normalized_coordinates` or use Clamp or Border"
                    ),
                ));
            }
        }
        if self.max_anisotropy > 16 {
            return Err(Error::invalid(
                operation,
                format!("`max_anisotropy` is {}; the hardware takes 0 to 16", self.max_anisotropy),
            ));
        }
        let clamps = [self.mipmap_level_bias, self.min_mipmap_level_clamp, self.max_mipmap_level_clamp];
        if clamps.iter().any(|v| !v.is_finite()) {
            return Err(Error::invalid(
                operation,
                "`mipmap_level_bias` and the mipmap level clamps must be finite",
            ));
        }
        if self.min_mipmap_level_clamp > self.max_mipmap_level_clamp {
            return Err(Error::invalid(
                operation,
                format!(
                    "`min_mipmap_level_clamp` ({}) is above `max_mipmap_level_clamp` ({})",
                    self.min_mipmap_level_clamp, self.max_mipmap_level_clamp
                ),
            ));
        }
        let Some(format) = format else { return Ok(()) };
        let kind = format.channel_type();
        if self.read_mode == ReadMode::NormalizedFloat && kind.is_integer() && kind.bytes() == 4 {
            return Err(Error::invalid(
                operation,
                format!(
                    "`read_mode`: {kind:?} texels cannot be read as normalized floats (8- and 16-bit integers can)"
                ),
            ));
        }
        let returns_integers = kind.is_integer() && self.read_mode == ReadMode::Element;
        if returns_integers
            && (self.filter_mode == FilterMode::Linear || self.mipmap_filter_mode == FilterMode::Linear)
        {
            return Err(Error::invalid(
                operation,
                format!(
                    "`filter_mode`: linear filtering needs a texture that returns floats, but {kind:?} texels are read as integers; use ReadMode::NormalizedFloat or point filtering"
                ),
            ));
        }
        Ok(())
    }
}

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
        }
    }

    /// A descriptor from its raw form.
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
    fn texture_descriptors_round_trip_with_every_flag() {
        let d = TextureDescriptor {
            address_mode: [AddressMode::Wrap, AddressMode::Mirror, AddressMode::Border],
            filter_mode: FilterMode::Linear,
            read_mode: ReadMode::NormalizedFloat,
            normalized_coordinates: true,
            srgb: true,
            disable_trilinear_optimization: true,
            seamless_cubemap: true,
            max_anisotropy: 8,
            mipmap_filter_mode: FilterMode::Linear,
            mipmap_level_bias: 0.5,
            min_mipmap_level_clamp: 0.0,
            max_mipmap_level_clamp: 3.0,
            border_color: [1.0, 2.0, 3.0, 4.0],
        };
        let raw = d.as_raw();
        assert_eq!(raw.flags, 0x02 | 0x10 | 0x20 | 0x40);
        assert_eq!(TextureDescriptor::from_raw(&raw).unwrap(), d);
        let plain = TextureDescriptor::default().as_raw();
        assert_eq!(plain.flags, sys::CU_TRSF_READ_AS_INTEGER);
        let mut unknown = plain;
        unknown.addressMode[1] = sys::CUaddress_mode(9);
        assert!(TextureDescriptor::from_raw(&unknown).is_err());
    }

    fn message(r: Result<()>) -> String {
        r.err().map(|e| e.to_string()).unwrap_or_default()
    }

    #[test]
    fn bad_texture_descriptors_name_the_field() {
        let wrap = TextureDescriptor { address_mode: [AddressMode::Wrap; 3], ..Default::default() };
        assert!(message(wrap.check("t", None)).contains("`address_mode` of x is Wrap"));
        assert!(TextureDescriptor { normalized_coordinates: true, ..wrap }.check("t", None).is_ok());
        let aniso = TextureDescriptor { max_anisotropy: 17, ..Default::default() };
        assert!(message(aniso.check("t", None)).contains("`max_anisotropy` is 17"));
        let clamp = TextureDescriptor { min_mipmap_level_clamp: 2.0, ..Default::default() };
        assert!(message(clamp.check("t", None)).contains("`min_mipmap_level_clamp`"));
        let u32s = Some(ChannelFormat::of::<u32>());
        let normalized = TextureDescriptor { read_mode: ReadMode::NormalizedFloat, ..Default::default() };
        assert!(message(normalized.check("t", u32s)).contains("`read_mode`"));
        assert!(normalized.check("t", Some(ChannelFormat::of::<[u8; 4]>())).is_ok());
        let linear = TextureDescriptor { filter_mode: FilterMode::Linear, ..Default::default() };
        assert!(message(linear.check("t", Some(ChannelFormat::of::<u8>()))).contains("`filter_mode`"));
        assert!(linear.check("t", Some(ChannelFormat::of::<f32>())).is_ok());
        assert!(
            TextureDescriptor { read_mode: ReadMode::NormalizedFloat, ..linear }
                .check("t", Some(ChannelFormat::of::<u16>()))
                .is_ok()
        );
    }

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
