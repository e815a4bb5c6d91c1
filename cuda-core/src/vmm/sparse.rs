//! Sparse CUDA arrays: [`SparseArray`] and [`SparseMipmappedArray`], whose tiles and mip tail
//! are backed by tile-pool [`PhysicalMemory`] mapped and unmapped in a stream's order
//! ([`cuMemMapArrayAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)).
//!
//! # Soundness
//!
//! A sparse array has no memory until tiles are mapped into it, and what a copy or a kernel
//! does with an unmapped tile is not defined. So [`Array::new`] and [`MipmappedArray::new`]
//! refuse [`ArrayFlags::SPARSE`], and the types here own the array they make and know, tile by
//! tile, what is mapped: they hand the array out to safe code ([`SparseArray::array`],
//! [`SparseMipmappedArray::level`], ...) only where every tile it can reach is mapped, after
//! waiting for the streams the mappings were queued on. While the array is lent, nothing can
//! be unmapped (unmapping takes `&mut self`); an unmap first waits for the work that was
//! queued through the array ([`Context::synchronize`] where any was), and is ordered after the
//! mappings and unmappings queued on other streams. Each mapping holds its physical memory
//! until the tiles are unmapped and that unmap has been waited for, or the array is destroyed.

mod ops;
mod tiles;

use super::physical::PhysicalMemory;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::memory::{Array, ArrayDescriptor, ArrayFlags, BorrowedArray, MipmappedArray, SparseProperties};
use crate::stream::Stream;
use cuhost_driver_sys as sys;
use std::mem::ManuallyDrop;
use tiles::{Handle, Tiles};

/// A part of a sparse array that [`SparseArray::map`] backs with memory and
/// [`SparseArray::unmap`] gives back (`CUarraySparseSubresourceType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SparseRegion {
    /// A box of whole tiles of a sparse level: one of the levels before
    /// [`SparseProperties::miptail_first_level`], which span a tile or more in every dimension
    /// (`CU_ARRAY_SPARSE_SUBRESOURCE_TYPE_SPARSE_LEVEL`).
    ///
    /// `offset` and `extent` are (x, y, z) in elements, inside the level. Each offset is a
    /// multiple of the tile extent; each extent is one too, or reaches the level's edge exactly:
    /// the last tile of a level that is not a whole number of tiles is named that way, not by an
    /// extent rounded up past the edge, which the driver refuses. A 2D array has offset z 0 and
    /// extent depth 1.
    Level {
        /// The mip level; 0 for a [`SparseArray`].
        level: u32,
        /// The layer of a layered array; 0 otherwise.
        layer: u32,
        /// The first element covered.
        offset: [u32; 3],
        /// The elements covered.
        extent: [u32; 3],
    },
    /// Bytes of the mip tail: the levels from [`SparseProperties::miptail_first_level`] on,
    /// packed in [`SparseProperties::miptail_size`] bytes
    /// (`CU_ARRAY_SPARSE_SUBRESOURCE_TYPE_MIPTAIL`). `offset` and `size` are multiples of
    /// the tile size in bytes ([`SparseArray::tile_bytes`]).
    MipTail {
        /// The layer, for a layered mipmapped array with a tail per layer (no
        /// `CU_ARRAY_SPARSE_PROPERTIES_SINGLE_MIPTAIL` flag); 0 otherwise.
        layer: u32,
        /// The first byte covered.
        offset: u64,
        /// The bytes covered.
        size: u64,
    },
}

/// Refuses what cannot be a sparse array before the driver is asked.
fn check_descriptor(operation: &'static str, ctx: &Context, d: &ArrayDescriptor) -> Result<ArrayDescriptor> {
    let device = ctx.device();
    let supported = match device.sparse_cuda_array_supported() {
        Ok(s) => s,
        Err(e) if e.driver_status() == Some(sys::CUresult::CUDA_ERROR_INVALID_VALUE) => false,
        Err(e) => return Err(e),
    };
    if !supported {
        return Err(Error::Unsupported {
            operation,
            message: format!(
                "device {} does not support sparse CUDA arrays \
                 (CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED is 0); use a dense Array",
                device.ordinal()
            ),
        });
    }
    let refused = ArrayFlags::CUBEMAP | ArrayFlags::DEFERRED_MAPPING | ArrayFlags::VIDEO_ENCODE_DECODE;
    if d.flags.intersects(refused) {
        return Err(Error::invalid(
            operation,
            format!("{:?} cannot be sparse; a sparse array is 2D, 2D layered or 3D", d.flags & refused),
        ));
    }
    if d.height == 0 {
        return Err(Error::invalid(operation, "a sparse array is 2D, 2D layered or 3D: give it a height"));
    }
    if d.flags.contains(ArrayFlags::LAYERED) && d.depth == 0 {
        return Err(Error::invalid(operation, "a layered array needs at least one layer (depth)"));
    }
    if d.element_bytes().is_none() {
        return Err(Error::invalid(
            operation,
            "sparse arrays are made of the plain integer and float formats here (the tile size in \
             bytes follows from the element size)",
        ));
    }
    Ok(ArrayDescriptor { flags: d.flags | ArrayFlags::SPARSE, ..*d })
}

macro_rules! common_methods {
    ($ty:ident, $name:literal) => {
        impl $ty {
            /// The tiling the driver reported when the array was made
            /// ([`cuArrayGetSparseProperties`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html),
            /// [`cuMipmappedArrayGetSparseProperties`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
            pub fn sparse_properties(&self) -> SparseProperties {
                self.tiles.properties
            }

            /// The bytes of tile pool one tile takes: tile width × height × depth × element size.
            /// Pool offsets and mip tail regions are multiples of it.
            pub fn tile_bytes(&self) -> usize {
                self.tiles.tile_bytes as usize
            }

            /// The bytes of tile pool `region` takes when mapped (whole tiles, also where the
            /// region ends at a level's edge inside a tile).
            ///
            /// A region this array does not have is an [`Error::InvalidArgument`], as in
            /// [`map`](Self::map).
            pub fn region_bytes(&self, region: &SparseRegion) -> Result<usize> {
                self.tiles.region_bytes(concat!($name, "::region_bytes"), region)
            }

            /// The whole of sparse level `level` of layer `layer`, as a region.
            ///
            /// A level that is not sparse (it lies in the mip tail, or does not exist) or a layer
            /// that does not exist is an [`Error::InvalidArgument`].
            pub fn level_region(&self, level: u32, layer: u32) -> Result<SparseRegion> {
                self.tiles.level_region(concat!($name, "::level_region"), level, layer)
            }

            /// The whole mip tail of layer `layer` (0 unless the array has a tail per layer), as
            /// a region.
            ///
            /// An array without a mip tail, or a layer it has no tail for, is an
            /// [`Error::InvalidArgument`].
            pub fn mip_tail_region(&self, layer: u32) -> Result<SparseRegion> {
                self.tiles.mip_tail_region(concat!($name, "::mip_tail_region"), layer)
            }

            /// Whether every tile and the whole mip tail are mapped (the maps may still be queued).
            pub fn is_backed(&self) -> bool {
                self.tiles.complete()
            }

            /// The context the array belongs to.
            pub fn context(&self) -> &Context {
                &self.tiles.ctx
            }
        }

        impl Drop for $ty {
            fn drop(&mut self) {
                if self.tiles.settle_for_release() {
                    // SAFETY: dropped once, here; the mapping operations are done. The array is
                    // destroyed (after the work queued through it) before the bindings release
                    // the memory it was mapped onto.
                    unsafe { ManuallyDrop::drop(&mut self.array) };
                }
            }
        }
    };
}

/// A sparse 2D, 2D layered or 3D CUDA array: an [`Array`] made with [`ArrayFlags::SPARSE`], whose
/// tiles and mip tail are backed by tile-pool [`PhysicalMemory`] that [`map`](Self::map) maps in
/// a stream's order ([`cuArray3DCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html),
/// [`cuMemMapArrayAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)).
///
/// # Soundness
///
/// What a copy or a kernel does with a tile that is not mapped is not defined, so
/// [`Array::new`] and [`MipmappedArray::new`] refuse [`ArrayFlags::SPARSE`], and this type owns
/// the array it makes and knows, tile by tile, what is mapped. It lends the array to safe code
/// ([`array`](Self::array), [`array_mut`](Self::array_mut)) only once every tile is mapped,
/// after waiting for the streams the maps were queued on. An unmap first waits for the work
/// queued through the array ([`Context::synchronize`] where there was any) and is ordered
/// after the maps and unmaps queued on other streams; each map holds its physical memory until
/// its tiles are unmapped and that unmap has been waited for, or the array is destroyed. While
/// the array is lent, its tiles cannot be unmapped:
///
/// ```compile_fail,E0502
/// # fn f(sparse: &mut cuhost::vmm::SparseArray, stream: &cuhost::Stream) -> cuhost::Result<()> {
/// let level = sparse.level_region(0, 0)?;
/// let array = sparse.array()?;
/// sparse.unmap(&level, stream)?; // the array is still borrowed
/// let mut out = vec![0f32; 16];
/// array.copy_to_host(&mut out)?;
/// # Ok(()) }
/// ```
///
/// and the array whatever is mapped is only reached with `unsafe`:
///
/// ```compile_fail,E0133
/// # fn f(sparse: &cuhost::vmm::SparseArray) {
/// let array = sparse.array_unchecked();
/// # }
/// ```
///
/// ```no_run
/// use cuhost::driver_sys::CUarray_format;
/// use cuhost::memory::{ArrayDescriptor, ArrayFlags};
/// use cuhost::vmm::{AllocationProperties, Granularity, PhysicalMemory, SparseArray};
/// use cuhost::{Context, Device, Stream, StreamFlags};
/// # fn main() -> cuhost::Result<()> {
/// let device = Device::get(0)?;
/// let ctx = Context::primary(&device)?;
/// let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
/// let desc = ArrayDescriptor {
///     width: 1024, height: 1024, depth: 0, format: CUarray_format::CU_AD_FORMAT_FLOAT,
///     num_channels: 1, flags: ArrayFlags::empty(),
/// };
/// let mut sparse = SparseArray::new(&ctx, &desc)?;
/// assert!(sparse.array().is_err()); // nothing is mapped yet
/// let level = sparse.level_region(0, 0)?;
/// let props = AllocationProperties::device(device).with_tile_pool(true);
/// let pool_size = sparse.region_bytes(&level)?.next_multiple_of(props.granularity(Granularity::Minimum)?);
/// let pool = PhysicalMemory::new(&ctx, pool_size, &props)?;
/// sparse.map(&level, &pool, 0, &stream)?;
/// sparse.array_mut()?.copy_from_host(&vec![1.0f32; 1024 * 1024])?;
/// sparse.unmap(&level, &stream)?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct SparseArray {
    array: ManuallyDrop<Array>,
    tiles: Tiles,
}

common_methods!(SparseArray, "SparseArray");

impl SparseArray {
    /// Makes a sparse array as described, with no tile mapped
    /// ([`cuArray3DCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)
    /// with `CUDA_ARRAY3D_SPARSE`, then
    /// [`cuArrayGetSparseProperties`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    /// [`ArrayFlags::SPARSE`] is added to the descriptor's flags.
    ///
    /// A device without sparse arrays (`CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED`) is an
    /// [`Error::Unsupported`]. A 1D array, a cubemap, [`ArrayFlags::DEFERRED_MAPPING`], or a
    /// format other than the plain integer and float ones is an [`Error::InvalidArgument`];
    /// what else the driver refuses is its status.
    pub fn new(ctx: &Context, descriptor: &ArrayDescriptor) -> Result<SparseArray> {
        const OP: &str = "SparseArray::new";
        let d = check_descriptor(OP, ctx, descriptor)?;
        let array = Array::create(OP, ctx, &d)?;
        let properties = array.sparse_properties()?;
        let tiles = Tiles::new(OP, ctx, &d, properties, 1, false, |_| array.descriptor())?;
        Ok(SparseArray { array: ManuallyDrop::new(array), tiles })
    }

    /// The raw `CUarray`, valid while this value is; reaching an unmapped tile through it is
    /// undefined.
    pub fn as_raw(&self) -> sys::CUarray {
        self.array.as_raw()
    }

    /// Maps `region` onto the tile pool `physical` from byte `offset` on, in `stream`'s order
    /// ([`cuMemMapArrayAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)).
    /// The array holds `physical` for as long as any of its tiles is mapped onto it.
    ///
    /// The map is ordered after the maps and unmaps of this array queued on other streams;
    /// the array waits for it before it lends itself out ([`array`](Self::array)), so work on
    /// any stream sees the tiles mapped.
    ///
    /// Checked before the call, as [`Error::InvalidArgument`]s: a region this array does not
    /// have or that is not made of whole tiles (see [`SparseRegion`]), a region part of which
    /// is mapped already, an offset that is not a multiple of [`tile_bytes`](Self::tile_bytes)
    /// or that leaves too few bytes in `physical` ([`region_bytes`](Self::region_bytes)),
    /// memory that is not a tile pool of the array's device
    /// ([`AllocationProperties::with_tile_pool`](super::AllocationProperties::with_tile_pool)) or
    /// that a buffer maps as its own, a stream of another context or one being captured.
    pub fn map(
        &mut self,
        region: &SparseRegion,
        physical: &PhysicalMemory,
        offset: usize,
        stream: &Stream,
    ) -> Result<()> {
        let handle = Handle::Array(self.array.as_raw());
        self.tiles.map("SparseArray::map", handle, region, physical, offset, stream)
    }

    /// Unmaps `region` in `stream`'s order
    /// ([`cuMemMapArrayAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)).
    /// Tiles of the region that are not mapped stay so.
    ///
    /// The unmap is ordered after everything that may still use the tiles: the work queued
    /// through the array on any stream (the context is synchronized first, where there was
    /// such work since the last unmap) and the maps and unmaps queued on other streams. The
    /// memory of the tiles is released once the unmap has been waited for.
    ///
    /// A region this array does not have, or a stream as [`map`](Self::map) refuses, is an
    /// [`Error::InvalidArgument`].
    pub fn unmap(&mut self, region: &SparseRegion, stream: &Stream) -> Result<()> {
        let handle = Handle::Array(self.array.as_raw());
        let queued = self.array.queue_flag();
        self.tiles.unmap("SparseArray::unmap", handle, &queued, region, stream)
    }

    /// The array, for reading it (copies out, textures) once every tile is mapped; first waits
    /// for the streams the maps were queued on.
    ///
    /// An array not backed everywhere is an [`Error::InvalidArgument`]; a failed wait is the
    /// stream's error.
    pub fn array(&self) -> Result<&Array> {
        self.tiles.backed("SparseArray::array", "the sparse array", self.tiles.complete())?;
        self.tiles.settle()?;
        Ok(&self.array)
    }

    /// The array, for writing it too, as [`array`](Self::array); fails as it does.
    pub fn array_mut(&mut self) -> Result<BorrowedArray<'_>> {
        self.tiles.backed("SparseArray::array_mut", "the sparse array", self.tiles.complete())?;
        self.tiles.settle()?;
        Ok(Array::part(self.array.as_raw(), &self.tiles.ctx, self.array.queue_flag()))
    }

    /// The array, whatever is mapped, without waiting for the maps.
    ///
    /// # Safety
    ///
    /// Nothing queued through the result may reach a tile that is not mapped when it runs: a
    /// tile never mapped, one unmapped before, or one whose map has not run yet (queue the
    /// work on the stream of the map, or after it). Whether a texture fetch with a residency
    /// flag may touch unmapped tiles of a partly mapped array is the CUDA Programming Guide's
    /// to say (it documents such fetches as reading zeros); the caller takes that on.
    pub unsafe fn array_unchecked(&self) -> &Array {
        &self.array
    }
}

/// A sparse 2D, 2D layered or 3D mipmapped array: a [`MipmappedArray`] made with
/// [`ArrayFlags::SPARSE`], whose sparse levels are mapped tile by tile and whose smallest levels
/// share the mip tail ([`cuMipmappedArrayCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html),
/// [`cuMemMapArrayAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)).
///
/// A level is lent to safe code ([`level`](Self::level)) once every tile of it, or the whole mip
/// tail for a level inside it, is mapped, and the whole array
/// ([`mipmapped_array`](Self::mipmapped_array)) once everything is. The rules are those of
/// [`SparseArray`].
#[derive(Debug)]
pub struct SparseMipmappedArray {
    array: ManuallyDrop<MipmappedArray>,
    tiles: Tiles,
}

common_methods!(SparseMipmappedArray, "SparseMipmappedArray");

impl SparseMipmappedArray {
    /// Makes a sparse mipmapped array of `levels` levels whose level 0 is described by
    /// `descriptor`, with no tile mapped
    /// ([`cuMipmappedArrayCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)
    /// with `CUDA_ARRAY3D_SPARSE`, then
    /// [`cuMipmappedArrayGetSparseProperties`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// Fails as [`SparseArray::new`] does, and as [`MipmappedArray::new`] does for the levels.
    pub fn new(ctx: &Context, descriptor: &ArrayDescriptor, levels: u32) -> Result<SparseMipmappedArray> {
        const OP: &str = "SparseMipmappedArray::new";
        let d = check_descriptor(OP, ctx, descriptor)?;
        let array = MipmappedArray::create(OP, ctx, &d, levels)?;
        let properties = array.sparse_properties()?;
        let tiles = Tiles::new(OP, ctx, &d, properties, levels, true, |l| array.level_descriptor(l))?;
        Ok(SparseMipmappedArray { array: ManuallyDrop::new(array), tiles })
    }

    /// The raw `CUmipmappedArray`, valid while this value is; reaching an unmapped tile through
    /// it is undefined.
    pub fn as_raw(&self) -> sys::CUmipmappedArray {
        self.array.as_raw()
    }

    /// The number of levels.
    pub fn levels(&self) -> u32 {
        self.tiles.levels
    }

    /// Maps `region` onto the tile pool `physical` from byte `offset` on, in `stream`'s order,
    /// as [`SparseArray::map`]; fails as it does
    /// ([`cuMemMapArrayAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)).
    pub fn map(
        &mut self,
        region: &SparseRegion,
        physical: &PhysicalMemory,
        offset: usize,
        stream: &Stream,
    ) -> Result<()> {
        let handle = Handle::Mipmapped(self.array.as_raw());
        self.tiles.map("SparseMipmappedArray::map", handle, region, physical, offset, stream)
    }

    /// Unmaps `region` in `stream`'s order, as [`SparseArray::unmap`]; fails as it does
    /// ([`cuMemMapArrayAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__VA.html)).
    pub fn unmap(&mut self, region: &SparseRegion, stream: &Stream) -> Result<()> {
        let handle = Handle::Mipmapped(self.array.as_raw());
        let queued = self.array.queue_flag();
        self.tiles.unmap("SparseMipmappedArray::unmap", handle, &queued, region, stream)
    }

    /// Whether every tile of `level` is mapped, or the whole mip tail for a level in it (the
    /// maps may still be queued). A level past the last is not.
    pub fn is_level_backed(&self, level: u32) -> bool {
        level < self.tiles.levels && self.tiles.level_complete(level)
    }

    /// One level, as [`MipmappedArray::level`], once it is backed; first waits for the streams
    /// the maps were queued on.
    ///
    /// A level past the last or not backed everywhere is an [`Error::InvalidArgument`]; a
    /// failed wait is the stream's error.
    pub fn level(&mut self, level: u32) -> Result<BorrowedArray<'_>> {
        const OP: &str = "SparseMipmappedArray::level";
        if level >= self.tiles.levels {
            return Err(Error::invalid(
                OP,
                format!("level {level} does not exist; the array has {} levels", self.tiles.levels),
            ));
        }
        self.tiles.backed(OP, &format!("level {level}"), self.tiles.level_complete(level))?;
        self.tiles.settle()?;
        self.array.level(level)
    }

    /// The whole mipmapped array, for reading (level descriptors, textures), once every level
    /// is backed; fails as [`SparseArray::array`] does.
    pub fn mipmapped_array(&self) -> Result<&MipmappedArray> {
        const OP: &str = "SparseMipmappedArray::mipmapped_array";
        self.tiles.backed(OP, "the sparse mipmapped array", self.tiles.complete())?;
        self.tiles.settle()?;
        Ok(&self.array)
    }

    /// The mipmapped array, whatever is mapped, without waiting for the maps.
    ///
    /// # Safety
    ///
    /// As [`SparseArray::array_unchecked`].
    pub unsafe fn mipmapped_array_unchecked(&self) -> &MipmappedArray {
        &self.array
    }
}
