//! Texture descriptors: how a texture is sampled.

#![forbid(unsafe_code)]

use super::format::ChannelFormat;
use super::raw_enum;
use crate::error::{Error, Result};
use cuhost_driver_sys as sys;

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
/// use cuhost::texture::{AddressMode, FilterMode, TextureDescriptor};
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
            ..Default::default()
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
}
