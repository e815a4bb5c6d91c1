//! CUDA arrays: opaque 1D, 2D and 3D layouts for textures and surfaces, layered, cubemap and
//! mipmapped; descriptors, planes, sparse properties, memory requirements, and copies.

use crate::context::Context;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::flags::flags;
use crate::stream::Stream;
use bytemuck::Pod;
use cuhost_driver_sys as sys;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

flags! {
    /// Array creation flags (`CUDA_ARRAY3D_*`).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct ArrayFlags: u32 {
        /// `CUDA_ARRAY3D_LAYERED`: a layered array; `depth` is the number of layers.
        const LAYERED = 0x01;
        /// `CUDA_ARRAY3D_SURFACE_LDST`: may be bound as a surface.
        const SURFACE_LDST = 0x02;
        /// `CUDA_ARRAY3D_CUBEMAP`: a cubemap; `depth` is 6 (or a multiple, when layered).
        const CUBEMAP = 0x04;
        /// `CUDA_ARRAY3D_TEXTURE_GATHER`: for texture gather.
        const TEXTURE_GATHER = 0x08;
        /// `CUDA_ARRAY3D_DEPTH_TEXTURE`: a depth texture.
        const DEPTH_TEXTURE = 0x10;
        /// `CUDA_ARRAY3D_COLOR_ATTACHMENT`: usable as a render target.
        const COLOR_ATTACHMENT = 0x20;
        /// `CUDA_ARRAY3D_SPARSE`: sparse; backing memory is mapped separately, so only
        /// [`SparseArray`](crate::vmm::SparseArray) and
        /// [`SparseMipmappedArray`](crate::vmm::SparseMipmappedArray) make such arrays.
        const SPARSE = 0x40;
        /// `CUDA_ARRAY3D_DEFERRED_MAPPING`: memory is mapped later; such an array has none
        /// until then, so only the `unsafe` [`Array::new_unbacked`] makes it.
        const DEFERRED_MAPPING = 0x80;
        /// `CUDA_ARRAY3D_VIDEO_ENCODE_DECODE`: for video encode/decode.
        const VIDEO_ENCODE_DECODE = 0x100;
    }
}

/// A descriptor of an array: extent, element format and flags (`CUDA_ARRAY3D_DESCRIPTOR`).
///
/// A 1D array has `height == 0 && depth == 0`, a 2D array `depth == 0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArrayDescriptor {
    /// Width in elements.
    pub width: usize,
    /// Height in elements (0 for 1D).
    pub height: usize,
    /// Depth in elements, or layers (0 for 1D and 2D).
    pub depth: usize,
    /// Channel format (`CU_AD_FORMAT_*`).
    pub format: sys::CUarray_format,
    /// Channels per element: 1, 2 or 4.
    pub num_channels: u32,
    /// Flags.
    pub flags: ArrayFlags,
}

impl ArrayDescriptor {
    /// The raw descriptor.
    pub fn as_raw(&self) -> sys::CUDA_ARRAY3D_DESCRIPTOR {
        sys::CUDA_ARRAY3D_DESCRIPTOR {
            Width: self.width,
            Height: self.height,
            Depth: self.depth,
            Format: self.format,
            NumChannels: self.num_channels,
            Flags: self.flags.bits(),
            ..Default::default()
        }
    }

    /// A descriptor from its raw form.
    pub fn from_raw(d: &sys::CUDA_ARRAY3D_DESCRIPTOR) -> ArrayDescriptor {
        ArrayDescriptor {
            width: d.Width,
            height: d.Height,
            depth: d.Depth,
            format: d.Format,
            num_channels: d.NumChannels,
            flags: ArrayFlags::from_bits_retain(d.Flags),
        }
    }

    /// Bytes of one element (all channels), for the plain integer and float formats.
    pub fn element_bytes(&self) -> Option<usize> {
        use sys::CUarray_format as F;
        let channel = match self.format {
            F::CU_AD_FORMAT_UNSIGNED_INT8 | F::CU_AD_FORMAT_SIGNED_INT8 => 1,
            F::CU_AD_FORMAT_UNSIGNED_INT16 | F::CU_AD_FORMAT_SIGNED_INT16 | F::CU_AD_FORMAT_HALF => 2,
            F::CU_AD_FORMAT_UNSIGNED_INT32 | F::CU_AD_FORMAT_SIGNED_INT32 | F::CU_AD_FORMAT_FLOAT => 4,
            _ => return None,
        };
        Some(channel * self.num_channels as usize)
    }
}

/// Sparse-array tiling (`CUDA_ARRAY_SPARSE_PROPERTIES`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SparseProperties {
    /// Tile extent (width, height, depth) in elements.
    pub tile_extent: (u32, u32, u32),
    /// First mip level of the mip tail.
    pub miptail_first_level: u32,
    /// Size of the mip tail in bytes.
    pub miptail_size: u64,
    /// `CU_ARRAY_SPARSE_PROPERTIES_*` flags.
    pub flags: u32,
}

impl SparseProperties {
    fn from_raw(p: &sys::CUDA_ARRAY_SPARSE_PROPERTIES) -> SparseProperties {
        SparseProperties {
            tile_extent: (p.tileExtent.width, p.tileExtent.height, p.tileExtent.depth),
            miptail_first_level: p.miptailFirstLevel,
            miptail_size: p.miptailSize,
            flags: p.flags,
        }
    }
}

/// Memory a deferred-mapping array needs (`CUDA_ARRAY_MEMORY_REQUIREMENTS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArrayMemoryRequirements {
    /// Bytes.
    pub size: usize,
    /// Alignment in bytes.
    pub alignment: usize,
}

/// A CUDA array, destroyed on drop
/// ([`cuArray3DCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
#[derive(Debug)]
pub struct Array {
    raw: sys::CUarray,
    ctx: Context,
    owned: bool,
    /// Set once work that uses the array was queued on a stream (an `_async` copy, a kernel
    /// through a texture or surface): its owner then waits for its context before it destroys
    /// it. Shared by an array and its planes, a mipmapped array and its levels.
    queued: Arc<AtomicBool>,
}

// SAFETY: a CUarray may be used from any thread.
unsafe impl Send for Array {}
// SAFETY: shared access only reads through driver calls.
unsafe impl Sync for Array {}

/// An array owned by another (a plane of a multi-planar array, a level of a mipmapped array,
/// a mapped graphics resource); it lives no longer than its owner.
///
/// It dereferences to a shared [`Array`], for the reads (`descriptor`, `copy_to_host`,
/// `copy_to_device`, ...) and for texture and surface objects that borrow it; the writes are
/// its own `&mut self` methods below. There is no `&mut Array`: with one, the borrowed array
/// could be moved out of this value (`std::mem::replace`) and outlive its owner (G1 of the
/// soundness review):
///
/// ```compile_fail,E0596
/// # fn main() -> cuhost::Result<()> {
/// use cuhost::{Context, Device, memory::{Array, ArrayDescriptor, ArrayFlags, MipmappedArray}};
/// use cuhost::driver_sys::CUarray_format;
/// let ctx = Context::primary(&Device::get(0)?)?;
/// let desc = ArrayDescriptor {
///     width: 64, height: 64, depth: 0, format: CUarray_format::CU_AD_FORMAT_FLOAT,
///     num_channels: 1, flags: ArrayFlags::empty(),
/// };
/// let mut mip = MipmappedArray::new(&ctx, &desc, 3)?;
/// let mut level = mip.level(0)?;
/// let stolen: Array = std::mem::replace(&mut *level, Array::new(&ctx, &desc)?);
/// # drop(stolen); Ok(()) }
/// ```
///
/// A level is taken with `&mut` access to its mipmapped array, so two live handles to one
/// level, both able to write, cannot exist:
///
/// ```compile_fail,E0499
/// # fn main() -> cuhost::Result<()> {
/// use cuhost::{Context, Device, memory::{ArrayDescriptor, ArrayFlags, MipmappedArray}};
/// use cuhost::driver_sys::CUarray_format;
/// let ctx = Context::primary(&Device::get(0)?)?;
/// let desc = ArrayDescriptor {
///     width: 64, height: 64, depth: 0, format: CUarray_format::CU_AD_FORMAT_FLOAT,
///     num_channels: 1, flags: ArrayFlags::empty(),
/// };
/// let mut mip = MipmappedArray::new(&ctx, &desc, 3)?;
/// let (mut a, mut b) = (mip.level(0)?, mip.level(0)?);
/// a.copy_from_host(&vec![1f32; 64 * 64])?;
/// b.copy_from_host(&vec![2f32; 64 * 64])?;
/// # Ok(()) }
/// ```
///
/// The sound way: one level at a time, written through its own methods.
///
/// ```no_run
/// # fn main() -> cuhost::Result<()> {
/// use cuhost::{Context, Device, memory::{ArrayDescriptor, ArrayFlags, MipmappedArray}};
/// use cuhost::driver_sys::CUarray_format;
/// let ctx = Context::primary(&Device::get(0)?)?;
/// let desc = ArrayDescriptor {
///     width: 64, height: 64, depth: 0, format: CUarray_format::CU_AD_FORMAT_FLOAT,
///     num_channels: 1, flags: ArrayFlags::empty(),
/// };
/// let mut mip = MipmappedArray::new(&ctx, &desc, 3)?;
/// for n in 0..3u32 {
///     let side = 64 >> n;
///     let mut level = mip.level(n)?;
///     level.copy_from_host(&vec![n as f32; side * side])?;
///     assert_eq!(level.descriptor()?.width, side);
/// }
/// assert_eq!(mip.level_descriptor(2)?.width, 16);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct BorrowedArray<'a> {
    array: Array,
    _owner: PhantomData<&'a ()>,
}

impl std::ops::Deref for BorrowedArray<'_> {
    type Target = Array;
    fn deref(&self) -> &Array {
        &self.array
    }
}

impl BorrowedArray<'_> {
    /// Copies densely packed host data into the whole array, as [`Array::copy_from_host`];
    /// fails as it does.
    pub fn copy_from_host<T: Pod>(&mut self, src: &[T]) -> Result<()> {
        self.array.copy_from_host(src)
    }

    /// [`BorrowedArray::copy_from_host`] in `stream`'s order, as
    /// [`Array::copy_from_host_async`]; fails as it does.
    ///
    /// # Safety
    ///
    /// `src` must stay alive and unmodified until `stream` has passed the copy, and the owner
    /// of the array (mipmapped array, mapping, frame) must not give it up before then either.
    pub unsafe fn copy_from_host_async<T: Pod>(&mut self, src: &[T], stream: &Stream) -> Result<()> {
        // SAFETY: the caller's contract is the one of Array::copy_from_host_async.
        unsafe { self.array.copy_from_host_async(src, stream) }
    }

    /// Copies densely packed device data into the whole array, as [`Array::copy_from_device`];
    /// fails as it does.
    pub fn copy_from_device<T: Pod>(&mut self, src: &crate::memory::DeviceView<'_, T>) -> Result<()> {
        self.array.copy_from_device(src)
    }

    /// [`BorrowedArray::copy_from_device`] in `stream`'s order, as
    /// [`Array::copy_from_device_async`]; fails as it does.
    pub fn copy_from_device_async<T: Pod>(
        &mut self,
        src: &crate::memory::DeviceView<'_, T>,
        stream: &Stream,
    ) -> Result<()> {
        self.array.copy_from_device_async(src, stream)
    }

    /// Copies the whole of `src`, of the same extent and format, as [`Array::copy_from_array`];
    /// fails as it does.
    pub fn copy_from_array(&mut self, src: &Array) -> Result<()> {
        self.array.copy_from_array(src)
    }

    /// A plane of this array, as [`Array::plane`]: it borrows this value exclusively, so one
    /// plane at a time; fails as it does.
    pub fn plane(&mut self, index: u32) -> Result<BorrowedArray<'_>> {
        self.array.plane(index)
    }
}

/// Refuses a deferred-mapping descriptor in a constructor whose array would be usable at once.
fn refuse_deferred(operation: &'static str, d: &ArrayDescriptor) -> Result<()> {
    if d.flags.contains(ArrayFlags::DEFERRED_MAPPING) {
        return Err(Error::invalid(
            operation,
            "an array with deferred mapping has no memory until it is mapped, and reaching it \
             before is undefined; make it with the unsafe Array::new_unbacked",
        ));
    }
    Ok(())
}

/// Refuses a sparse descriptor in a constructor whose array would be usable at once.
fn refuse_sparse(operation: &'static str, d: &ArrayDescriptor, instead: &str) -> Result<()> {
    if d.flags.contains(ArrayFlags::SPARSE) {
        return Err(Error::invalid(
            operation,
            format!(
                "a sparse array has no memory until tiles are mapped into it, and reaching an unmapped \
                 tile is undefined; make it with {instead}, which hands it out once it is backed"
            ),
        ));
    }
    Ok(())
}

fn check_extent(operation: &'static str, d: &ArrayDescriptor) -> Result<()> {
    if d.width == 0 {
        return Err(Error::invalid(operation, "an array needs a width of at least 1"));
    }
    if d.height == 0 && d.depth != 0 && !d.flags.contains(ArrayFlags::LAYERED) {
        return Err(Error::invalid(operation, "a 3D array needs a height; set height or clear depth"));
    }
    if !matches!(d.num_channels, 1 | 2 | 4) {
        return Err(Error::invalid(operation, format!("{} channels; use 1, 2 or 4", d.num_channels)));
    }
    Ok(())
}

impl Array {
    /// Creates an array as described
    /// ([`cuArray3DCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// [`ArrayFlags::SPARSE`] is an [`Error::InvalidArgument`]: a sparse array has no memory
    /// until tiles are mapped into it, so it is made by
    /// [`SparseArray::new`](crate::vmm::SparseArray::new), which hands the array out only
    /// once it is backed. So is [`ArrayFlags::DEFERRED_MAPPING`], for the same reason: see
    /// the `unsafe` [`Array::new_unbacked`].
    pub fn new(ctx: &Context, descriptor: &ArrayDescriptor) -> Result<Array> {
        refuse_sparse("Array::new", descriptor, "vmm::SparseArray::new")?;
        refuse_deferred("Array::new", descriptor)?;
        Array::create("Array::new", ctx, descriptor)
    }

    /// Creates an array as described, [`ArrayFlags::DEFERRED_MAPPING`] allowed: an array with
    /// no memory until it is mapped
    /// ([`cuArray3DCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    /// Its [`memory_requirements`](Self::memory_requirements) say what to map.
    /// [`ArrayFlags::SPARSE`] is refused as by [`Array::new`].
    ///
    /// # Safety
    ///
    /// With [`ArrayFlags::DEFERRED_MAPPING`], no copy, texture, surface or kernel may reach the
    /// array before memory is mapped into it (by raw calls), nor after that memory is unmapped
    /// or freed.
    pub unsafe fn new_unbacked(ctx: &Context, descriptor: &ArrayDescriptor) -> Result<Array> {
        refuse_sparse("Array::new_unbacked", descriptor, "vmm::SparseArray::new")?;
        Array::create("Array::new_unbacked", ctx, descriptor)
    }

    /// [`Array::new`] without the refusal of sparse arrays, for their owner.
    pub(crate) fn create(
        operation: &'static str,
        ctx: &Context,
        descriptor: &ArrayDescriptor,
    ) -> Result<Array> {
        check_extent(operation, descriptor)?;
        ctx.enter()?;
        let d = descriptor.as_raw();
        let mut raw = std::ptr::null_mut();
        // SAFETY: one out-parameter and a valid descriptor; the context is current.
        unsafe { driver!(cuArray3DCreate(&mut raw, &d)) }?;
        Ok(Array { raw, ctx: ctx.clone(), owned: true, queued: Arc::default() })
    }

    #[cfg(feature = "interop")]
    /// An array that `owner` keeps alive, borrowed for `'a`.
    pub(crate) fn borrowed<'a>(raw: sys::CUarray, ctx: &Context) -> BorrowedArray<'a> {
        Array::part(raw, ctx, Arc::default())
    }

    /// A part (plane, level) of an array whose queued work is tracked by `queued`.
    pub(crate) fn part<'a>(raw: sys::CUarray, ctx: &Context, queued: Arc<AtomicBool>) -> BorrowedArray<'a> {
        BorrowedArray { array: Array { raw, ctx: ctx.clone(), owned: false, queued }, _owner: PhantomData }
    }

    /// The flag that, once set, makes the array's owner wait for its context before it
    /// destroys it: for objects that queue work on the array later (textures, surfaces).
    pub(crate) fn queue_flag(&self) -> Arc<AtomicBool> {
        self.queued.clone()
    }

    /// Notes that work using the array is about to be queued on a stream: the array is then
    /// destroyed only after its context has finished its work.
    #[inline]
    pub(crate) fn queued_async(&self) {
        self.queued.store(true, Ordering::Relaxed);
    }

    /// The raw `CUarray`. Work queued on it through raw calls is not seen by its owner: for
    /// an array of a [`SparseArray`](crate::vmm::SparseArray), such work must have run before
    /// a tile it reaches is unmapped.
    pub fn as_raw(&self) -> sys::CUarray {
        self.raw
    }

    /// The context the array belongs to.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The array's descriptor
    /// ([`cuArray3DGetDescriptor`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn descriptor(&self) -> Result<ArrayDescriptor> {
        self.ctx.enter()?;
        // SAFETY: a plain C struct; all zeroes is a valid value.
        let mut d: sys::CUDA_ARRAY3D_DESCRIPTOR = unsafe { std::mem::zeroed() };
        // SAFETY: the array is alive; one out-parameter.
        unsafe { driver!(cuArray3DGetDescriptor(&mut d, self.raw)) }?;
        Ok(ArrayDescriptor::from_raw(&d))
    }

    /// A plane of a multi-planar array (NV12 and the like)
    /// ([`cuArrayGetPlane`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// It borrows this array exclusively, as a writer of part of it: one plane at a time.
    /// An index the array does not have is the driver's error.
    pub fn plane(&mut self, index: u32) -> Result<BorrowedArray<'_>> {
        self.ctx.enter()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: the array is alive; one out-parameter.
        unsafe { driver!(cuArrayGetPlane(&mut raw, self.raw, index)) }?;
        Ok(Array::part(raw, &self.ctx, self.queued.clone()))
    }

    /// The tiling of a sparse array
    /// ([`cuArrayGetSparseProperties`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn sparse_properties(&self) -> Result<SparseProperties> {
        self.ctx.enter()?;
        // SAFETY: a plain C struct; all zeroes is a valid value.
        let mut p: sys::CUDA_ARRAY_SPARSE_PROPERTIES = unsafe { std::mem::zeroed() };
        // SAFETY: the array is alive; one out-parameter.
        unsafe { driver!(cuArrayGetSparseProperties(&mut p, self.raw)) }?;
        Ok(SparseProperties::from_raw(&p))
    }

    /// The memory a deferred-mapping array needs on `device`
    /// ([`cuArrayGetMemoryRequirements`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn memory_requirements(&self, device: &Device) -> Result<ArrayMemoryRequirements> {
        self.ctx.enter()?;
        // SAFETY: a plain C struct; all zeroes is a valid value.
        let mut r: sys::CUDA_ARRAY_MEMORY_REQUIREMENTS = unsafe { std::mem::zeroed() };
        // SAFETY: the array is alive; one out-parameter.
        unsafe { driver!(cuArrayGetMemoryRequirements(&mut r, self.raw, device.as_raw())) }?;
        Ok(ArrayMemoryRequirements { size: r.size, alignment: r.alignment })
    }

    /// A whole-array copy descriptor, checking that the other side holds `len` elements of `T`.
    pub(crate) fn whole_copy<T: Pod>(
        &self,
        operation: &'static str,
        host_len: usize,
    ) -> Result<sys::CUDA_MEMCPY3D> {
        let d = self.descriptor()?;
        let element = d.element_bytes().ok_or_else(|| {
            Error::invalid(operation, "whole-array copies support the plain integer and float formats only")
        })?;
        let (h, z) = (d.height.max(1), d.depth.max(1));
        let bytes = d.width * h * z * element;
        if host_len * std::mem::size_of::<T>() != bytes {
            return Err(Error::refused(
                crate::error::Reason::LENGTH_MISMATCH,
                operation,
                format!(
                    "the other side holds {} bytes but the array {bytes}",
                    host_len * std::mem::size_of::<T>()
                ),
            ));
        }
        // SAFETY: a plain C struct; all zeroes is a valid value.
        let mut c: sys::CUDA_MEMCPY3D = unsafe { std::mem::zeroed() };
        c.WidthInBytes = d.width * element;
        c.Height = h;
        c.Depth = z;
        Ok(c)
    }

    fn h2a<T: Pod>(&self, operation: &'static str, src: &[T]) -> Result<sys::CUDA_MEMCPY3D> {
        let mut c = self.whole_copy::<T>(operation, src.len())?;
        c.srcMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_HOST;
        c.srcHost = src.as_ptr().cast();
        c.srcPitch = c.WidthInBytes;
        c.srcHeight = c.Height;
        c.dstMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_ARRAY;
        c.dstArray = self.raw;
        Ok(c)
    }

    fn a2h<T: Pod>(&self, operation: &'static str, dst: &mut [T]) -> Result<sys::CUDA_MEMCPY3D> {
        let mut c = self.whole_copy::<T>(operation, dst.len())?;
        c.srcMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_ARRAY;
        c.srcArray = self.raw;
        c.dstMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_HOST;
        c.dstHost = dst.as_mut_ptr().cast();
        c.dstPitch = c.WidthInBytes;
        c.dstHeight = c.Height;
        Ok(c)
    }

    /// Copies densely packed host data (x fastest, then y, then z or layer) into the whole array
    /// ([`cuMemcpy3D`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_from_host<T: Pod>(&mut self, src: &[T]) -> Result<()> {
        let c = self.h2a("Array::copy_from_host", src)?;
        // SAFETY: the descriptor names `src` and this array with matching sizes.
        super::finished(unsafe { driver!(cuMemcpy3D(&c)) })
    }

    /// Copies the whole array into densely packed host data
    /// ([`cuMemcpy3D`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_to_host<T: Pod>(&self, dst: &mut [T]) -> Result<()> {
        let c = self.a2h("Array::copy_to_host", dst)?;
        // SAFETY: the descriptor names this array and `dst` with matching sizes.
        unsafe { driver!(cuMemcpy3D(&c)) }
    }

    /// [`Array::copy_from_host`] in `stream`'s order
    /// ([`cuMemcpy3DAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// A stream of another context than the array's is an [`Error::InvalidArgument`]: the
    /// array's drop waits for its own context only.
    ///
    /// # Safety
    ///
    /// `src` must stay alive and unmodified until `stream` has passed the copy.
    pub unsafe fn copy_from_host_async<T: Pod>(&mut self, src: &[T], stream: &Stream) -> Result<()> {
        let c = self.h2a("Array::copy_from_host_async", src)?;
        self.on_own_stream("Array::copy_from_host_async", stream)?;
        self.queued_async();
        // SAFETY: as copy_from_host; the caller keeps `src` alive.
        unsafe { driver!(cuMemcpy3DAsync(&c, stream.as_raw())) }
    }

    /// [`Array::copy_to_host`] in `stream`'s order
    /// ([`cuMemcpy3DAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// A stream of another context than the array's is an [`Error::InvalidArgument`]: the
    /// array's drop waits for its own context only.
    ///
    /// # Safety
    ///
    /// `dst` must stay alive and untouched until `stream` has passed the copy.
    pub unsafe fn copy_to_host_async<T: Pod>(&self, dst: &mut [T], stream: &Stream) -> Result<()> {
        let c = self.a2h("Array::copy_to_host_async", dst)?;
        self.on_own_stream("Array::copy_to_host_async", stream)?;
        self.queued_async();
        // SAFETY: as copy_to_host; the caller keeps `dst` alive.
        unsafe { driver!(cuMemcpy3DAsync(&c, stream.as_raw())) }
    }
}

impl Drop for Array {
    fn drop(&mut self) {
        if self.owned {
            let raw = self.raw;
            let queued = self.queued.load(Ordering::Relaxed);
            // SAFETY: this value created the array and destroys it once, after the work queued
            // on it (or never, when that wait fails: a leak, not a destroy under running work).
            self.ctx.with_current_for_drop("Array", || unsafe {
                wait_if(queued, || driver!(cuArrayDestroy(raw)))
            });
        }
    }
}

/// With `queued`, waits for the current context first (release-style: no deferred error is
/// consumed), and does `destroy` only when that wait succeeded; returns the status of what
/// failed.
fn wait_if(queued: bool, destroy: impl FnOnce() -> Result<()>) -> Result<()> {
    if queued {
        // SAFETY: no arguments; the caller made the owner's context current.
        unsafe { driver!(cuCtxSynchronize()) }?;
    }
    destroy()
}

/// A mipmapped array: a chain of levels, each an [`Array`] half the size of the last,
/// destroyed on drop
/// ([`cuMipmappedArrayCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
#[derive(Debug)]
pub struct MipmappedArray {
    raw: sys::CUmipmappedArray,
    ctx: Context,
    levels: u32,
    /// Whether dropping this value destroys the array.
    owned: bool,
    /// As [`Array`]'s, shared with its levels.
    queued: Arc<AtomicBool>,
    /// What must outlive the array (the external memory it is mapped from).
    _owner: Option<Arc<dyn std::fmt::Debug + Send + Sync>>,
}

/// A mipmapped array owned by another (a mapped graphics resource); it dereferences to
/// [`MipmappedArray`] and lives no longer than its owner.
#[derive(Debug)]
pub struct BorrowedMipmappedArray<'a> {
    array: MipmappedArray,
    _owner: PhantomData<&'a ()>,
}

impl std::ops::Deref for BorrowedMipmappedArray<'_> {
    type Target = MipmappedArray;
    fn deref(&self) -> &MipmappedArray {
        &self.array
    }
}

impl BorrowedMipmappedArray<'_> {
    /// One level, as [`MipmappedArray::level`]: it borrows this value exclusively, so one
    /// level at a time; fails as it does.
    pub fn level(&mut self, level: u32) -> Result<BorrowedArray<'_>> {
        self.array.level(level)
    }
}

// SAFETY: a CUmipmappedArray may be used from any thread.
unsafe impl Send for MipmappedArray {}
// SAFETY: shared access only reads through driver calls.
unsafe impl Sync for MipmappedArray {}

impl MipmappedArray {
    /// Creates a mipmapped array of `levels` levels whose level 0 is described by `descriptor`
    /// ([`cuMipmappedArrayCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// An extent the descriptor cannot have or zero levels is an [`Error::InvalidArgument`];
    /// more levels than the extent allows, or a format the device refuses, fails with the
    /// driver's status. [`ArrayFlags::DEFERRED_MAPPING`] is an [`Error::InvalidArgument`], as
    /// for [`Array::new`]. [`ArrayFlags::SPARSE`] is an [`Error::InvalidArgument`] too: use
    /// [`SparseMipmappedArray::new`](crate::vmm::SparseMipmappedArray::new), as for
    /// [`Array::new`].
    pub fn new(ctx: &Context, descriptor: &ArrayDescriptor, levels: u32) -> Result<MipmappedArray> {
        refuse_sparse("MipmappedArray::new", descriptor, "vmm::SparseMipmappedArray::new")?;
        refuse_deferred("MipmappedArray::new", descriptor)?;
        MipmappedArray::create("MipmappedArray::new", ctx, descriptor, levels)
    }

    /// [`MipmappedArray::new`] without the refusal of sparse arrays, for their owner.
    pub(crate) fn create(
        operation: &'static str,
        ctx: &Context,
        descriptor: &ArrayDescriptor,
        levels: u32,
    ) -> Result<MipmappedArray> {
        check_extent(operation, descriptor)?;
        if levels == 0 {
            return Err(Error::invalid(operation, "a mipmapped array needs at least one level"));
        }
        ctx.enter()?;
        let d = descriptor.as_raw();
        let mut raw = std::ptr::null_mut();
        // SAFETY: one out-parameter and a valid descriptor; the context is current.
        unsafe { driver!(cuMipmappedArrayCreate(&mut raw, &d, levels)) }?;
        Ok(MipmappedArray {
            raw,
            ctx: ctx.clone(),
            levels,
            owned: true,
            queued: Arc::default(),
            _owner: None,
        })
    }

    #[cfg(feature = "interop")]
    /// Takes ownership of `raw`, which has `levels` levels and is destroyed on drop before
    /// `owner` is released.
    pub(crate) fn adopt(
        raw: sys::CUmipmappedArray,
        ctx: &Context,
        levels: u32,
        owner: Arc<dyn std::fmt::Debug + Send + Sync>,
    ) -> MipmappedArray {
        MipmappedArray {
            raw,
            ctx: ctx.clone(),
            levels,
            owned: true,
            queued: Arc::default(),
            _owner: Some(owner),
        }
    }

    #[cfg(feature = "interop")]
    /// Borrows `raw`, of `levels` levels, which something else destroys.
    pub(crate) fn borrowed<'a>(
        raw: sys::CUmipmappedArray,
        ctx: &Context,
        levels: u32,
    ) -> BorrowedMipmappedArray<'a> {
        let array = MipmappedArray {
            raw,
            ctx: ctx.clone(),
            levels,
            owned: false,
            queued: Arc::default(),
            _owner: None,
        };
        BorrowedMipmappedArray { array, _owner: PhantomData }
    }

    /// The raw `CUmipmappedArray`.
    pub fn as_raw(&self) -> sys::CUmipmappedArray {
        self.raw
    }

    /// The context the array belongs to.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The number of levels it was created with.
    pub fn levels(&self) -> u32 {
        self.levels
    }

    /// The flag [`Array::queue_flag`] gives, for the whole chain.
    pub(crate) fn queue_flag(&self) -> Arc<AtomicBool> {
        self.queued.clone()
    }

    /// One level, as an array owned by this one
    /// ([`cuMipmappedArrayGetLevel`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// It borrows this array exclusively, as a writer of part of it: one level at a time (see
    /// [`BorrowedArray`]). [`level_descriptor`](Self::level_descriptor) reads a level's shape
    /// through `&self`.
    ///
    /// A level past the last is an [`Error::InvalidArgument`] naming how many there are.
    pub fn level(&mut self, level: u32) -> Result<BorrowedArray<'_>> {
        let raw = self.level_raw("MipmappedArray::level", level)?;
        Ok(Array::part(raw, &self.ctx, self.queued.clone()))
    }

    /// The descriptor of one level: its extent, format and flags
    /// ([`cuMipmappedArrayGetLevel`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html),
    /// [`cuArray3DGetDescriptor`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// Fails as [`level`](Self::level) does, and with the driver's status when it refuses to
    /// describe the level.
    pub fn level_descriptor(&self, level: u32) -> Result<ArrayDescriptor> {
        let raw = self.level_raw("MipmappedArray::level_descriptor", level)?;
        // SAFETY: a plain C struct; all zeroes is a valid value.
        let mut d: sys::CUDA_ARRAY3D_DESCRIPTOR = unsafe { std::mem::zeroed() };
        // SAFETY: the level lives as long as this array; one out-parameter.
        unsafe { driver!(cuArray3DGetDescriptor(&mut d, raw)) }?;
        Ok(ArrayDescriptor::from_raw(&d))
    }

    fn level_raw(&self, operation: &'static str, level: u32) -> Result<sys::CUarray> {
        if level >= self.levels {
            return Err(Error::refused(
                crate::error::Reason::OUT_OF_BOUNDS,
                operation,
                format!("level {level} does not exist; the array has {} levels", self.levels),
            ));
        }
        self.ctx.enter()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: the array is alive; one out-parameter.
        unsafe { driver!(cuMipmappedArrayGetLevel(&mut raw, self.raw, level)) }?;
        Ok(raw)
    }

    /// The tiling of a sparse mipmapped array
    /// ([`cuMipmappedArrayGetSparseProperties`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn sparse_properties(&self) -> Result<SparseProperties> {
        self.ctx.enter()?;
        // SAFETY: a plain C struct; all zeroes is a valid value.
        let mut p: sys::CUDA_ARRAY_SPARSE_PROPERTIES = unsafe { std::mem::zeroed() };
        // SAFETY: the array is alive; one out-parameter.
        unsafe { driver!(cuMipmappedArrayGetSparseProperties(&mut p, self.raw)) }?;
        Ok(SparseProperties::from_raw(&p))
    }

    /// The memory a deferred-mapping mipmapped array needs on `device`
    /// ([`cuMipmappedArrayGetMemoryRequirements`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn memory_requirements(&self, device: &Device) -> Result<ArrayMemoryRequirements> {
        self.ctx.enter()?;
        // SAFETY: a plain C struct; all zeroes is a valid value.
        let mut r: sys::CUDA_ARRAY_MEMORY_REQUIREMENTS = unsafe { std::mem::zeroed() };
        // SAFETY: the array is alive; one out-parameter.
        unsafe { driver!(cuMipmappedArrayGetMemoryRequirements(&mut r, self.raw, device.as_raw())) }?;
        Ok(ArrayMemoryRequirements { size: r.size, alignment: r.alignment })
    }
}

impl Drop for MipmappedArray {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let raw = self.raw;
        let queued = self.queued.load(Ordering::Relaxed);
        // SAFETY: as for `Array`.
        self.ctx.with_current_for_drop("MipmappedArray", || unsafe {
            wait_if(queued, || driver!(cuMipmappedArrayDestroy(raw)))
        });
    }
}
