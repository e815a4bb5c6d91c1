//! The bookkeeping of a sparse array: its tiling, which tiles and mip tail chunks are mapped
//! and onto which memory, and the mapping operations not waited for yet.

#![forbid(unsafe_code)]

use super::super::physical::PhysicalMemory;
use super::SparseRegion;
use crate::context::Context;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::memory::{ArrayDescriptor, ArrayFlags, SparseProperties};
use crate::stream::Stream;
use cuhost_driver_sys as sys;
use std::sync::Mutex;

/// A tile not mapped, in the state tables.
pub(super) const UNMAPPED: u32 = u32::MAX;

/// The tiles of one sparse level, per layer.
#[derive(Debug)]
pub(super) struct LevelTiles {
    /// The level's extent in elements (z is 1 for 2D and layered arrays).
    pub(super) extent: [u32; 3],
    /// The level's extent in tiles.
    pub(super) grid: [u32; 3],
    /// Per layer and tile (x fastest), the binding backing it or `UNMAPPED`.
    pub(super) state: Vec<u32>,
    pub(super) mapped: usize,
}

/// The chunks (one tile in bytes each) of the mip tail, per tail layer.
#[derive(Debug)]
pub(super) struct TailChunks {
    pub(super) layers: u32,
    pub(super) chunks: u64,
    pub(super) state: Vec<u32>,
    pub(super) mapped: usize,
}

/// Physical memory that backs some tiles.
#[derive(Debug)]
pub(super) struct Binding {
    pub(super) physical: PhysicalMemory,
    pub(super) tiles: usize,
}

/// Work queued on the array's mappings that has not been waited for on the host.
#[derive(Debug, Default)]
pub(super) struct Pending {
    /// Streams holding mapping or unmapping operations queued after the last wait.
    pub(super) streams: Vec<Stream>,
    /// Memory whose last tile was unmapped by an operation not waited for yet.
    pub(super) retired: Vec<PhysicalMemory>,
}

/// Which driver handle the operations name.
#[derive(Clone, Copy)]
pub(super) enum Handle {
    Array(sys::CUarray),
    Mipmapped(sys::CUmipmappedArray),
}

/// The tiles of a region: which table, which entries, how many bytes of pool they take.
pub(super) struct Cover {
    pub(super) tail: bool,
    pub(super) level: usize,
    pub(super) indices: Vec<usize>,
    pub(super) bytes: u64,
}

/// What both sparse types share: the tiling, what is mapped, and the pending work.
#[derive(Debug)]
pub(super) struct Tiles {
    pub(super) ctx: Context,
    pub(super) device: Device,
    pub(super) properties: SparseProperties,
    pub(super) tile: [u32; 3],
    pub(super) tile_bytes: u64,
    pub(super) three_d: bool,
    pub(super) layers: u32,
    pub(super) levels: u32,
    /// The sparse levels (those before the mip tail).
    pub(super) sparse: Vec<LevelTiles>,
    pub(super) tail: Option<TailChunks>,
    pub(super) bindings: Vec<Option<Binding>>,
    pub(super) pending: Mutex<Pending>,
}

fn to_u32(operation: &'static str, value: usize) -> Result<u32> {
    u32::try_from(value).map_err(|_| {
        Error::invalid(operation, format!("an extent of {value} elements does not fit the driver's"))
    })
}

impl Tiles {
    /// The tables for an array of `levels` levels whose level `n` is described by
    /// `level_descriptor(n)`.
    pub(super) fn new(
        operation: &'static str,
        ctx: &Context,
        descriptor: &ArrayDescriptor,
        properties: SparseProperties,
        levels: u32,
        mipmapped: bool,
        level_descriptor: impl Fn(u32) -> Result<ArrayDescriptor>,
    ) -> Result<Tiles> {
        let (tw, th, td) = properties.tile_extent;
        let tile = [tw.max(1), th.max(1), td.max(1)];
        let element = descriptor.element_bytes().unwrap_or(0) as u64;
        let tile_bytes = u64::from(tile[0]) * u64::from(tile[1]) * u64::from(tile[2]) * element;
        if tw == 0 || th == 0 || tile_bytes == 0 {
            return Err(Error::invalid(
                operation,
                format!(
                    "the driver reported a tile extent of {:?}, which no region can be made of",
                    (tw, th, td)
                ),
            ));
        }
        let layered = descriptor.flags.contains(ArrayFlags::LAYERED);
        let three_d = !layered && descriptor.depth > 0;
        let layers = if layered { to_u32(operation, descriptor.depth)? } else { 1 };
        // Without a mip tail every level is sparse, whatever first level the driver names (it
        // reports 0 for a plain array whose level 0 is whole tiles).
        let first_tail =
            if properties.miptail_size > 0 { properties.miptail_first_level.min(levels) } else { levels };
        let mut sparse = Vec::with_capacity(first_tail as usize);
        for level in 0..first_tail {
            let d = level_descriptor(level)?;
            let extent = [
                to_u32(operation, d.width.max(1))?,
                to_u32(operation, d.height.max(1))?,
                if three_d { to_u32(operation, d.depth.max(1))? } else { 1 },
            ];
            let grid = [0, 1, 2].map(|i| extent[i].div_ceil(tile[i]));
            let count = grid.iter().map(|&g| g as usize).product::<usize>() * layers as usize;
            sparse.push(LevelTiles { extent, grid, state: vec![UNMAPPED; count], mapped: 0 });
        }
        let tail = (first_tail < levels).then(|| {
            let single = properties.flags & sys::CU_ARRAY_SPARSE_PROPERTIES_SINGLE_MIPTAIL != 0;
            let layers = if mipmapped && layered && !single { layers } else { 1 };
            let chunks = properties.miptail_size.div_ceil(tile_bytes);
            TailChunks { layers, chunks, state: vec![UNMAPPED; chunks as usize * layers as usize], mapped: 0 }
        });
        Ok(Tiles {
            ctx: ctx.clone(),
            device: ctx.device(),
            properties,
            tile,
            tile_bytes,
            three_d,
            layers,
            levels,
            sparse,
            tail,
            bindings: Vec::new(),
            pending: Mutex::default(),
        })
    }

    /// The tiles `region` covers, or an [`Error::InvalidArgument`] saying why it is not a
    /// region of this array.
    pub(super) fn cover(&self, operation: &'static str, region: &SparseRegion) -> Result<Cover> {
        match *region {
            SparseRegion::Level { level, layer, offset, extent } => {
                if level >= self.levels {
                    return Err(Error::invalid(
                        operation,
                        format!("level {level} does not exist; the array has {} levels", self.levels),
                    ));
                }
                let Some(tiles) = self.sparse.get(level as usize) else {
                    return Err(Error::invalid(
                        operation,
                        format!(
                            "level {level} lies in the mip tail, which starts at level {}; map it with \
                             SparseRegion::MipTail",
                            self.properties.miptail_first_level
                        ),
                    ));
                };
                if layer >= self.layers {
                    return Err(Error::invalid(
                        operation,
                        format!("layer {layer} does not exist; the array has {} layers", self.layers),
                    ));
                }
                if !self.three_d && (offset[2] != 0 || extent[2] != 1) {
                    return Err(Error::invalid(
                        operation,
                        "a 2D array's region has offset z 0 and extent depth 1 (layers are chosen by `layer`)",
                    ));
                }
                let mut range = [(0u32, 0u32); 3];
                for (axis, name) in ["x", "y", "z"].into_iter().enumerate() {
                    let (o, e, t, size) = (offset[axis], extent[axis], self.tile[axis], tiles.extent[axis]);
                    // The driver refuses an extent that rounds the level's edge up to a whole
                    // tile: the last tile of a ragged level is named by reaching the edge.
                    let end = o.checked_add(e).filter(|&end| e > 0 && end <= size);
                    let Some(end) = end else {
                        return Err(Error::invalid(
                            operation,
                            format!(
                                "the {name} range {o}..{o}+{e} is empty or leaves level {level}, which is \
                                 {size} elements wide there"
                            ),
                        ));
                    };
                    if o % t != 0 || (e % t != 0 && end != size) {
                        return Err(Error::invalid(
                            operation,
                            format!(
                                "the {name} offset {o} and extent {e} must be multiples of the tile extent \
                                 {t} (an extent may also end at the level's edge, {size})"
                            ),
                        ));
                    }
                    range[axis] = (o / t, end.div_ceil(t));
                }
                let [gx, gy, gz] = tiles.grid.map(|g| g as usize);
                let base = layer as usize * gx * gy * gz;
                let mut indices = Vec::new();
                for z in range[2].0..range[2].1 {
                    for y in range[1].0..range[1].1 {
                        let row = base + (z as usize * gy + y as usize) * gx;
                        indices.extend((range[0].0..range[0].1).map(|x| row + x as usize));
                    }
                }
                let bytes = indices.len() as u64 * self.tile_bytes;
                Ok(Cover { tail: false, level: level as usize, indices, bytes })
            }
            SparseRegion::MipTail { layer, offset, size } => {
                let Some(tail) = &self.tail else {
                    return Err(Error::invalid(
                        operation,
                        "this array has no mip tail: every level is sparse",
                    ));
                };
                if layer >= tail.layers {
                    return Err(Error::invalid(
                        operation,
                        format!(
                            "mip tail layer {layer} does not exist; the array has {} (one per layer only \
                             for a layered mipmapped array without a single mip tail)",
                            tail.layers
                        ),
                    ));
                }
                let tb = self.tile_bytes;
                let end = offset.checked_add(size).filter(|&end| size > 0 && end <= tail.chunks * tb);
                if end.is_none() || offset % tb != 0 || size % tb != 0 {
                    return Err(Error::invalid(
                        operation,
                        format!(
                            "a mip tail region of {size} bytes at {offset} must be a non-empty multiple of the \
                             tile size, {tb} bytes, inside the tail's {} bytes",
                            self.properties.miptail_size
                        ),
                    ));
                }
                let base = (u64::from(layer) * tail.chunks) as usize;
                let indices = (offset / tb..(offset + size) / tb).map(|c| base + c as usize).collect();
                Ok(Cover { tail: true, level: 0, indices, bytes: size })
            }
        }
    }

    pub(super) fn state_mut(&mut self, cover: &Cover) -> (&mut Vec<u32>, &mut usize) {
        match (&mut self.tail, cover.tail) {
            (Some(t), true) => (&mut t.state, &mut t.mapped),
            _ => {
                let l = &mut self.sparse[cover.level];
                (&mut l.state, &mut l.mapped)
            }
        }
    }

    pub(super) fn state(&self, cover: &Cover) -> &[u32] {
        match (&self.tail, cover.tail) {
            (Some(t), true) => &t.state,
            _ => &self.sparse[cover.level].state,
        }
    }

    /// An error naming what is not mapped, where `complete` says it all is.
    pub(super) fn backed(&self, operation: &'static str, what: &str, complete: bool) -> Result<()> {
        if complete {
            return Ok(());
        }
        Err(Error::invalid(
            operation,
            format!(
                "{what} is not backed everywhere: map every tile of it (and the mip tail, where it reaches \
                 into it) first; reaching an unmapped tile is undefined"
            ),
        ))
    }

    pub(super) fn level_complete(&self, level: u32) -> bool {
        match self.sparse.get(level as usize) {
            Some(l) => l.mapped == l.state.len(),
            None => self.tail.as_ref().is_none_or(|t| t.mapped == t.state.len()),
        }
    }

    pub(super) fn complete(&self) -> bool {
        (0..self.levels).all(|l| self.level_complete(l))
    }

    pub(super) fn region_bytes(&self, operation: &'static str, region: &SparseRegion) -> Result<usize> {
        let bytes = self.cover(operation, region)?.bytes;
        usize::try_from(bytes).map_err(|_| Error::invalid(operation, "the region's bytes overflow usize"))
    }

    pub(super) fn level_region(
        &self,
        operation: &'static str,
        level: u32,
        layer: u32,
    ) -> Result<SparseRegion> {
        let Some(l) = self.sparse.get(level as usize) else {
            return Err(Error::invalid(
                operation,
                format!(
                    "level {level} is not a sparse level of this array (it has {} levels, the mip tail from \
                     level {})",
                    self.levels, self.properties.miptail_first_level
                ),
            ));
        };
        let region = SparseRegion::Level { level, layer, offset: [0; 3], extent: l.extent };
        self.cover(operation, &region).map(|_| region)
    }

    pub(super) fn mip_tail_region(&self, operation: &'static str, layer: u32) -> Result<SparseRegion> {
        let size = self.tail.as_ref().map_or(0, |t| t.chunks * self.tile_bytes);
        let region = SparseRegion::MipTail { layer, offset: 0, size };
        self.cover(operation, &region).map(|_| region)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiles(width: u32, height: u32, depth: u32, layers: u32, tail: Option<u64>) -> Tiles {
        let properties = SparseProperties {
            tile_extent: (128, 128, 1),
            miptail_first_level: if tail.is_some() { 1 } else { 2 },
            miptail_size: tail.unwrap_or(0),
            flags: 0,
        };
        let d = ArrayDescriptor {
            width: width as usize,
            height: height as usize,
            depth: if layers > 1 { layers as usize } else { depth as usize },
            format: sys::CUarray_format::CU_AD_FORMAT_FLOAT,
            num_channels: 1,
            flags: if layers > 1 { ArrayFlags::LAYERED } else { ArrayFlags::empty() },
        };
        let ctx = Context::detached_for_tests();
        let levels = 2;
        let level = |l: u32| Ok(ArrayDescriptor { width: d.width >> l, height: d.height >> l, ..d });
        match Tiles::new("test", &ctx, &d, properties, levels, true, level) {
            Ok(t) => t,
            Err(e) => panic!("{e}"),
        }
    }

    fn level(level: u32, layer: u32, offset: [u32; 3], extent: [u32; 3]) -> SparseRegion {
        SparseRegion::Level { level, layer, offset, extent }
    }

    #[test]
    fn regions_are_whole_tiles_inside_the_level() {
        let t = tiles(512, 256, 0, 1, None);
        assert_eq!(t.tile_bytes, 128 * 128 * 4);
        let whole = t.cover("t", &level(0, 0, [0, 0, 0], [512, 256, 1])).ok().map(|c| c.indices.len());
        assert_eq!(whole, Some(8));
        let one = t.cover("t", &level(0, 0, [384, 128, 0], [128, 128, 1])).ok().map(|c| c.indices);
        assert_eq!(one, Some(vec![7]));
        // Level 1 is 256×128: two tiles.
        assert_eq!(t.cover("t", &level(1, 0, [0, 0, 0], [256, 128, 1])).ok().map(|c| c.bytes), Some(2 << 16));
        for bad in [
            level(0, 0, [64, 0, 0], [128, 128, 1]),             // unaligned offset
            level(0, 0, [0, 0, 0], [100, 128, 1]),              // unaligned extent, not at the edge
            level(0, 0, [0, 0, 0], [640, 128, 1]),              // past the level
            level(0, 0, [0, 0, 0], [0, 128, 1]),                // empty
            level(0, 1, [0, 0, 0], [128, 128, 1]),              // no such layer
            level(0, 0, [0, 0, 1], [128, 128, 1]),              // z in a 2D array
            level(2, 0, [0, 0, 0], [128, 128, 1]),              // no such level
            level(0, 0, [u32::MAX - 127, 0, 0], [128, 128, 1]), // overflow
        ] {
            assert!(matches!(t.cover("t", &bad), Err(Error::InvalidArgument { .. })), "{bad:?}");
        }
    }

    #[test]
    fn an_edge_tile_is_covered_by_an_extent_to_the_edge() {
        let t = tiles(200, 130, 0, 1, None);
        let to_edge = t.cover("t", &level(0, 0, [128, 0, 0], [72, 130, 1])).ok().map(|c| c.indices);
        assert_eq!(to_edge, Some(vec![1, 3]));
        let whole = t.cover("t", &level(0, 0, [0, 0, 0], [200, 130, 1])).ok().map(|c| c.indices.len());
        assert_eq!(whole, Some(4));
        // Rounded up past the edge: the driver refuses it, so does the check.
        assert!(t.cover("t", &level(0, 0, [0, 0, 0], [256, 256, 1])).is_err());
        assert_eq!(t.level_region("t", 0, 0).ok(), Some(level(0, 0, [0; 3], [200, 130, 1])));
    }

    #[test]
    fn layers_and_the_mip_tail_have_their_own_tiles() {
        let t = tiles(256, 256, 0, 3, Some(3 << 16));
        let layer2 = t.cover("t", &level(0, 2, [0, 0, 0], [256, 256, 1])).ok().map(|c| c.indices);
        assert_eq!(layer2, Some(vec![8, 9, 10, 11]));
        assert!(t.cover("t", &level(1, 0, [0, 0, 0], [128, 128, 1])).is_err(), "level 1 is in the tail");
        let tail = t.cover("t", &SparseRegion::MipTail { layer: 2, offset: 1 << 16, size: 2 << 16 });
        assert_eq!(tail.ok().map(|c| (c.tail, c.indices)), Some((true, vec![7, 8])));
        for bad in [
            SparseRegion::MipTail { layer: 0, offset: 100, size: 1 << 16 },
            SparseRegion::MipTail { layer: 0, offset: 0, size: 4 << 16 },
            SparseRegion::MipTail { layer: 3, offset: 0, size: 1 << 16 },
            SparseRegion::MipTail { layer: 0, offset: 0, size: 0 },
        ] {
            assert!(matches!(t.cover("t", &bad), Err(Error::InvalidArgument { .. })), "{bad:?}");
        }
        assert!(!t.complete());
        assert_eq!(
            t.mip_tail_region("t", 1).ok(),
            Some(SparseRegion::MipTail { layer: 1, offset: 0, size: 3 << 16 })
        );
    }
}
