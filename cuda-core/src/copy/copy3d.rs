//! 2D and 3D copies between device memory, pitched allocations and CUDA arrays, the checked
//! 3D copy between contexts ([`Stream::copy_3d_peer`]), and the raw descriptor calls for copies
//! of sub-regions.

use super::batch::around_pinned;
use super::batch::sealed::Memory;
use super::operand3d::sealed::{Operand3D, Place, Read3D, Write3D};
use super::operand3d::{CopyRegion3D, Destination3D, Source3D, array_on, box_in};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::memory::Array;
use crate::memory::PitchedBuffer;
use crate::memory::{DeviceView, DeviceViewMut};
use crate::stream::Stream;
use crate::track::Access;
use crate::track::HostUses;
use bytemuck::Pod;
use cuhost_driver_sys as sys;

/// Any 2D copy a `CUDA_MEMCPY2D` describes
/// ([`cuMemcpy2D`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
/// The checked methods of [`PitchedBuffer`] and [`Array`] cover whole objects; this covers
/// sub-regions. A context must be current.
///
/// # Safety
///
/// Every address and array named by `copy` must be live, and the rectangle must lie within
/// both sides.
/// An array of a [`SparseArray`](crate::vmm::SparseArray) or
/// [`SparseMipmappedArray`](crate::vmm::SparseMipmappedArray) counts as live only where its
/// tiles are mapped: every tile the copy reaches stays mapped until the copy has run (an
/// unmap waits only for work queued through the crate's safe calls).
pub unsafe fn memcpy_2d(copy: &sys::CUDA_MEMCPY2D) -> Result<()> {
    // SAFETY: the caller guarantees the descriptor.
    unsafe { driver!(cuMemcpy2D(copy)) }
}

/// [`memcpy_2d`] in `stream`'s order
/// ([`cuMemcpy2DAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
///
/// # Safety
///
/// As [`memcpy_2d`], and every side must stay live until the stream has passed the copy.
pub unsafe fn memcpy_2d_async(copy: &sys::CUDA_MEMCPY2D, stream: &Stream) -> Result<()> {
    // SAFETY: the caller guarantees the descriptor and lifetimes.
    unsafe { driver!(cuMemcpy2DAsync(copy, stream.as_raw())) }
}

/// Any 3D copy a `CUDA_MEMCPY3D` describes
/// ([`cuMemcpy3D`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
/// A context must be current.
///
/// # Safety
///
/// Every address and array named by `copy` must be live, and the box must lie within both
/// sides.
/// An array of a [`SparseArray`](crate::vmm::SparseArray) or
/// [`SparseMipmappedArray`](crate::vmm::SparseMipmappedArray) counts as live only where its
/// tiles are mapped: every tile the copy reaches stays mapped until the copy has run (an
/// unmap waits only for work queued through the crate's safe calls).
pub unsafe fn memcpy_3d(copy: &sys::CUDA_MEMCPY3D) -> Result<()> {
    // SAFETY: the caller guarantees the descriptor.
    unsafe { driver!(cuMemcpy3D(copy)) }
}

/// [`memcpy_3d`] in `stream`'s order
/// ([`cuMemcpy3DAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
///
/// # Safety
///
/// As [`memcpy_3d`], and every side must stay live until the stream has passed the copy.
pub unsafe fn memcpy_3d_async(copy: &sys::CUDA_MEMCPY3D, stream: &Stream) -> Result<()> {
    // SAFETY: the caller guarantees the descriptor and lifetimes.
    unsafe { driver!(cuMemcpy3DAsync(copy, stream.as_raw())) }
}

/// A 3D copy between contexts (`CUDA_MEMCPY3D_PEER`)
/// ([`cuMemcpy3DPeer`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
///
/// # Safety
///
/// As [`memcpy_3d`], with each side's context named in the descriptor.
pub unsafe fn memcpy_3d_peer(copy: &sys::CUDA_MEMCPY3D_PEER) -> Result<()> {
    // SAFETY: the caller guarantees the descriptor.
    unsafe { driver!(cuMemcpy3DPeer(copy)) }
}

/// [`memcpy_3d_peer`] in `stream`'s order
/// ([`cuMemcpy3DPeerAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
/// [`Stream::copy_3d_peer`] is the checked form, for the crate's arrays and memory.
///
/// # Safety
///
/// As [`memcpy_3d_peer`], and every side must stay live until the stream has passed the copy.
pub unsafe fn memcpy_3d_peer_async(copy: &sys::CUDA_MEMCPY3D_PEER, stream: &Stream) -> Result<()> {
    // SAFETY: the caller guarantees the descriptor and lifetimes.
    unsafe { driver!(cuMemcpy3DPeerAsync(copy, stream.as_raw())) }
}

/// One side of a `CUDA_MEMCPY3D_PEER`, in the order of its fields.
struct PeerSide {
    x_in_bytes: usize,
    y: usize,
    z: usize,
    memory_type: sys::CUmemorytype,
    host: *mut std::ffi::c_void,
    device: sys::CUdeviceptr,
    array: sys::CUarray,
    context: sys::CUcontext,
    pitch: usize,
    height: usize,
}

/// The fields of `side` at `at` for elements of `size` bytes; pinned memory, which no context
/// owns, names `stream_ctx`.
fn peer_side(side: &Operand3D<'_>, at: [usize; 3], size: usize, stream_ctx: &Context) -> PeerSide {
    let mut s = PeerSide {
        x_in_bytes: at[0] * size,
        y: at[1],
        z: at[2],
        memory_type: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
        host: std::ptr::null_mut(),
        device: 0,
        array: std::ptr::null_mut(),
        context: stream_ctx.as_raw(),
        pitch: 0,
        height: 0,
    };
    match side.place {
        Place::Pointer { address, pitch, ctx, .. } => {
            (s.pitch, s.height) = (pitch, side.extent[1]);
            match ctx {
                Some(ctx) => (s.device, s.context) = (address, ctx.as_raw()),
                None => (s.memory_type, s.host) = (sys::CUmemorytype::CU_MEMORYTYPE_HOST, address as *mut _),
            }
        }
        Place::Array(array) => {
            s.memory_type = sys::CUmemorytype::CU_MEMORYTYPE_ARRAY;
            (s.array, s.context) = (array.as_raw(), array.context().as_raw());
        }
    }
    s
}

/// The pinned tracker of `side`, with whether the copy writes it.
fn pinned_of<'a>(side: &Operand3D<'a>, writes: bool) -> Option<(&'a HostUses, bool)> {
    match side.place {
        Place::Pointer { memory: Memory::Pinned(uses), .. } => Some((uses, writes)),
        _ => None,
    }
}

impl Stream {
    /// Queues on this stream one copy of the box `region` from `src` to `dst`, whose memory
    /// may belong to different contexts (of one device or of two)
    /// ([`cuMemcpy3DPeerAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)):
    /// each side is named with its own context. The operands are those of
    /// [`CopyBatch3D`](super::CopyBatch3D): arrays, pitched buffers, and
    /// [`Volume`](super::Volume)s over device or pinned memory.
    ///
    /// It is checked and kept safe as the batch's copies are: the box must lie within both
    /// sides; the memory behind device operands notes this stream (its owner gives it back only
    /// after the stream has passed the copy); an array must belong to this stream's context
    /// (it is destroyed after its context's work only) and is marked as used by queued work;
    /// pinned memory records the copy. A box with a zero in its extent copies nothing. The copy
    /// is ordered only on this stream: order other work on either side after it with events or
    /// the same stream.
    ///
    /// ```no_run
    /// use cuhost::copy::{CopyRegion3D, Volume};
    /// use cuhost::memory::PitchedBuffer;
    /// use cuhost::{Context, ContextFlags, Device, DeviceBuffer, Stream, StreamFlags};
    /// # fn main() -> cuhost::Result<()> {
    /// let device = Device::get(0)?;
    /// let (a, b) = (Context::primary(&device)?, Context::create(&device, ContextFlags::empty())?);
    /// let (on_a, on_b) = (Stream::new(&a, StreamFlags::NON_BLOCKING)?, Stream::new(&b, StreamFlags::NON_BLOCKING)?);
    /// let here = DeviceBuffer::<f32>::zeroed(&on_a, 16 * 16 * 16)?;
    /// let mut there = PitchedBuffer::<f32>::new(&on_b, 8, 8 * 4)?; // 4 layers of 8 rows
    /// let region = CopyRegion3D::of([8, 8, 4]).from([4, 4, 4]).to([0, 0, 0]);
    /// on_b.copy_3d_peer(Volume::new(&mut there, [8, 8, 4]), Volume::new(&here, [16, 16, 16]), region)?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// An [`Error::InvalidArgument`], before any call, for a box that reaches past `dst` or
    /// `src`, a [`Volume`](super::Volume) whose extent does not match its memory, an element
    /// type whose size is not an array operand's element size, an array of another context
    /// than this stream, and a default stream that would not name this stream (another
    /// thread's per-thread default stream). Otherwise the driver's status.
    pub fn copy_3d_peer<'a, T: Pod>(
        &self,
        dst: impl Destination3D<'a, T>,
        src: impl Source3D<'a, T>,
        region: CopyRegion3D,
    ) -> Result<()> {
        const OPERATION: &str = "Stream::copy_3d_peer";
        let dst = Write3D::operand(dst, OPERATION)?;
        let src = Read3D::operand(src, OPERATION)?;
        box_in(OPERATION, "destination", region.dst_offset, region.extent, dst.extent)?;
        box_in(OPERATION, "source", region.src_offset, region.extent, src.extent)?;
        array_on(OPERATION, &dst, self)?;
        array_on(OPERATION, &src, self)?;
        let size = std::mem::size_of::<T>();
        if size == 0 || region.extent.contains(&0) {
            return Ok(());
        }
        let ctx = self.context();
        crate::track::nameable(ctx, self)?;
        for (side, access) in [(&dst, Access::Write), (&src, Access::Read)] {
            match side.place {
                Place::Pointer { memory: Memory::Device(Some(t)), .. } => {
                    t.uses.note(ctx, t.own, self, access)?
                }
                Place::Array(array) => array.queued_async(),
                Place::Pointer { .. } => {}
            }
        }
        let (d, s) =
            (peer_side(&dst, region.dst_offset, size, ctx), peer_side(&src, region.src_offset, size, ctx));
        let c = sys::CUDA_MEMCPY3D_PEER {
            srcXInBytes: s.x_in_bytes,
            srcY: s.y,
            srcZ: s.z,
            srcLOD: 0,
            srcMemoryType: s.memory_type,
            srcHost: s.host.cast_const(),
            srcDevice: s.device,
            srcArray: s.array,
            srcContext: s.context,
            srcPitch: s.pitch,
            srcHeight: s.height,
            dstXInBytes: d.x_in_bytes,
            dstY: d.y,
            dstZ: d.z,
            dstLOD: 0,
            dstMemoryType: d.memory_type,
            dstHost: d.host,
            dstDevice: d.device,
            dstArray: d.array,
            dstContext: d.context,
            dstPitch: d.pitch,
            dstHeight: d.height,
            // Fits: the box lies in a row of at least `extent[0]` elements of memory.
            WidthInBytes: region.extent[0] * size,
            Height: region.extent[1],
            Depth: region.extent[2],
            ..Default::default()
        };
        ctx.enter()?;
        let stream = self.as_raw();
        // SAFETY: the box lies within both sides, each named with its context; device memory
        // waits for this stream before its owner gives it back (noted above), an array is
        // destroyed only after its context (this stream's) has finished its work, and pinned
        // memory records the copy around the call; `dst` is borrowed exclusively, so the sides
        // do not overlap.
        let call = || unsafe { driver!(cuMemcpy3DPeerAsync(&c, stream)) };
        match (pinned_of(&dst, true), pinned_of(&src, false)) {
            (Some(a), Some(b)) => around_pinned(OPERATION, self, &mut [a, b], call),
            (Some(a), None) | (None, Some(a)) => around_pinned(OPERATION, self, &mut [a], call),
            (None, None) => call(),
        }
    }
}

fn dense(c: &mut sys::CUDA_MEMCPY3D, src: bool, ptr: sys::CUdeviceptr) {
    if src {
        c.srcMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
        c.srcDevice = ptr;
        c.srcPitch = c.WidthInBytes;
        c.srcHeight = c.Height;
    } else {
        c.dstMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
        c.dstDevice = ptr;
        c.dstPitch = c.WidthInBytes;
        c.dstHeight = c.Height;
    }
}

impl Array {
    /// Refuses a stream of another context than the array's: the array's drop waits for its
    /// own context only, so work queued elsewhere could still run when it is destroyed; and a
    /// stream being captured, whose graph could be launched after the drop.
    /// Another thread's per-thread default stream is refused too: the copy would run on this
    /// thread's, which that thread's waits do not see.
    pub(crate) fn on_own_stream(&self, operation: &'static str, stream: &Stream) -> Result<()> {
        if stream.capture_status()? != crate::stream::CaptureStatus::None {
            return Err(Error::refused(
                crate::error::Reason::DURING_CAPTURE,
                operation,
                "the stream is being captured into a graph, whose launches would use the array after its \
                 drop (which waits for its context's work, not for graphs); copy outside the capture",
            ));
        }
        if stream.context() != self.context() {
            return Err(Error::refused(
                crate::error::Reason::WRONG_CONTEXT,
                operation,
                "the stream belongs to another context than the array, whose drop waits for its own \
                 context only; queue the copy on a stream of the array's context",
            ));
        }
        crate::track::nameable(self.context(), stream)
    }

    fn d2a<T: Pod>(&self, operation: &'static str, src: &DeviceView<'_, T>) -> Result<sys::CUDA_MEMCPY3D> {
        let mut c = self.whole_copy::<T>(operation, src.len())?;
        dense(&mut c, true, src.as_raw());
        c.dstMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_ARRAY;
        c.dstArray = self.as_raw();
        Ok(c)
    }

    fn a2d<T: Pod>(&self, operation: &'static str, dst: &DeviceViewMut<'_, T>) -> Result<sys::CUDA_MEMCPY3D> {
        let mut c = self.whole_copy::<T>(operation, dst.len())?;
        c.srcMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_ARRAY;
        c.srcArray = self.as_raw();
        dense(&mut c, false, dst.as_raw());
        Ok(c)
    }

    /// Copies densely packed device data (x fastest, then y, then z or layer) into the whole
    /// array ([`cuMemcpy3D`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_from_device<T: Pod>(&mut self, src: &DeviceView<'_, T>) -> Result<()> {
        let c = self.d2a("Array::copy_from_device", src)?;
        src.settle_for_sync(std::ptr::null_mut(), Access::Read)?;
        // SAFETY: the descriptor names `src` and this array with matching sizes.
        crate::memory::finished(unsafe { driver!(cuMemcpy3D(&c)) })
    }

    /// Copies the whole array into densely packed device memory
    /// ([`cuMemcpy3D`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_to_device<T: Pod>(&self, dst: &mut DeviceViewMut<'_, T>) -> Result<()> {
        let c = self.a2d("Array::copy_to_device", dst)?;
        dst.settle_for_sync(std::ptr::null_mut(), Access::Write)?;
        // SAFETY: the descriptor names this array and `dst` with matching sizes.
        crate::memory::finished(unsafe { driver!(cuMemcpy3D(&c)) })
    }

    /// [`Array::copy_from_device`] in `stream`'s order
    /// ([`cuMemcpy3DAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_from_device_async<T: Pod>(&mut self, src: &DeviceView<'_, T>, stream: &Stream) -> Result<()> {
        let c = self.d2a("Array::copy_from_device_async", src)?;
        self.on_own_stream("Array::copy_from_device_async", stream)?;
        src.used_on(src.ctx, stream, Access::Read)?;
        self.queued_async();
        // SAFETY: as copy_from_device; `src`'s buffer waits for `stream` before it is given back.
        unsafe { driver!(cuMemcpy3DAsync(&c, stream.as_raw())) }
    }

    /// [`Array::copy_to_device`] in `stream`'s order
    /// ([`cuMemcpy3DAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_to_device_async<T: Pod>(
        &self,
        dst: &mut DeviceViewMut<'_, T>,
        stream: &Stream,
    ) -> Result<()> {
        let c = self.a2d("Array::copy_to_device_async", dst)?;
        self.on_own_stream("Array::copy_to_device_async", stream)?;
        dst.used_on(dst.ctx, stream, Access::Write)?;
        self.queued_async();
        // SAFETY: as copy_to_device; `dst`'s buffer waits for `stream` before it is given back.
        unsafe { driver!(cuMemcpy3DAsync(&c, stream.as_raw())) }
    }

    /// Copies the whole of `src`, which must have the same extent, format and channels
    /// ([`cuMemcpy3D`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// Arrays that differ in extent, format or channels, or a format other than the plain
    /// integer and float ones, are an [`Error::InvalidArgument`], checked before the copy.
    pub fn copy_from_array(&mut self, src: &Array) -> Result<()> {
        let (a, b) = (self.descriptor()?, src.descriptor()?);
        if (a.width, a.height, a.depth, a.format, a.num_channels)
            != (b.width, b.height, b.depth, b.format, b.num_channels)
        {
            return Err(Error::refused(
                crate::error::Reason::LENGTH_MISMATCH,
                "Array::copy_from_array",
                format!(
                    "the arrays differ: {}×{}×{} ×{} channels vs {}×{}×{} ×{} channels (or in format)",
                    a.width, a.height, a.depth, a.num_channels, b.width, b.height, b.depth, b.num_channels
                ),
            ));
        }
        let bytes = a.element_bytes().ok_or_else(|| {
            Error::invalid(
                "Array::copy_from_array",
                "whole-array copies support the plain integer and float formats only",
            )
        })?;
        // SAFETY: a plain C struct; all zeroes is a valid value.
        let mut c: sys::CUDA_MEMCPY3D = unsafe { std::mem::zeroed() };
        c.WidthInBytes = a.width * bytes;
        c.Height = a.height.max(1);
        c.Depth = a.depth.max(1);
        c.srcMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_ARRAY;
        c.srcArray = src.as_raw();
        c.dstMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_ARRAY;
        c.dstArray = self.as_raw();
        // SAFETY: both arrays are live and have the same extent.
        crate::memory::finished(unsafe { driver!(cuMemcpy3D(&c)) })
    }
}

impl<T: Pod> PitchedBuffer<T> {
    fn dense_copy(&self, operation: &'static str, len: usize) -> Result<sys::CUDA_MEMCPY2D> {
        let want = self.width() * self.height();
        if len != want {
            return Err(Error::refused(
                crate::error::Reason::LENGTH_MISMATCH,
                operation,
                format!(
                    "the dense side holds {len} elements but the matrix {} × {} = {want}",
                    self.width(),
                    self.height()
                ),
            ));
        }
        self.context().enter()?;
        // SAFETY: a plain C struct; all zeroes is a valid value.
        let mut c: sys::CUDA_MEMCPY2D = unsafe { std::mem::zeroed() };
        c.WidthInBytes = self.width() * std::mem::size_of::<T>();
        c.Height = self.height();
        Ok(c)
    }

    fn d2p(&self, operation: &'static str, src: &DeviceView<'_, T>) -> Result<sys::CUDA_MEMCPY2D> {
        let mut c = self.dense_copy(operation, src.len())?;
        c.srcMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
        c.srcDevice = src.as_raw();
        c.srcPitch = c.WidthInBytes;
        c.dstMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
        c.dstDevice = self.as_raw();
        c.dstPitch = self.pitch();
        Ok(c)
    }

    fn p2d(&self, operation: &'static str, dst: &DeviceViewMut<'_, T>) -> Result<sys::CUDA_MEMCPY2D> {
        let mut c = self.dense_copy(operation, dst.len())?;
        c.srcMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
        c.srcDevice = self.as_raw();
        c.srcPitch = self.pitch();
        c.dstMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
        c.dstDevice = dst.as_raw();
        c.dstPitch = c.WidthInBytes;
        Ok(c)
    }

    /// Copies a densely packed row-major device matrix into the buffer, on the storage's stream,
    /// and returns when it is done ([`cuMemcpy2DAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_from_device(&mut self, src: &DeviceView<'_, T>) -> Result<()> {
        let c = self.d2p("PitchedBuffer::copy_from_device", src)?;
        src.settle_for_sync(self.storage().view().sync_stream()?, Access::Read)?;
        // SAFETY: both sides are live with matching sizes.
        self.run_sync("cuMemcpy2DAsync", crate::track::Access::Write, |s| unsafe {
            sys::cuMemcpy2DAsync(&c, s)
        })
    }

    /// Copies the buffer into a densely packed row-major device matrix, on the storage's stream,
    /// and returns when it is done ([`cuMemcpy2DAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_to_device(&self, dst: &mut DeviceViewMut<'_, T>) -> Result<()> {
        let c = self.p2d("PitchedBuffer::copy_to_device", dst)?;
        dst.settle_for_sync(self.storage().view().sync_stream()?, Access::Write)?;
        // SAFETY: both sides are live with matching sizes.
        self.run_sync("cuMemcpy2DAsync", crate::track::Access::Read, |s| unsafe {
            sys::cuMemcpy2DAsync(&c, s)
        })
    }

    /// [`PitchedBuffer::copy_from_device`] in `stream`'s order
    /// ([`cuMemcpy2DAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_from_device_async(&mut self, src: &DeviceView<'_, T>, stream: &Stream) -> Result<()> {
        let c = self.d2p("PitchedBuffer::copy_from_device_async", src)?;
        self.record_stream(stream)?;
        src.used_on(src.ctx, stream, Access::Read)?;
        // SAFETY: as copy_from_device; both buffers wait for `stream` before they are given back.
        unsafe { driver!(cuMemcpy2DAsync(&c, stream.as_raw())) }
    }

    /// [`PitchedBuffer::copy_to_device`] in `stream`'s order
    /// ([`cuMemcpy2DAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_to_device_async(&self, dst: &mut DeviceViewMut<'_, T>, stream: &Stream) -> Result<()> {
        let c = self.p2d("PitchedBuffer::copy_to_device_async", dst)?;
        self.record_stream(stream)?;
        dst.used_on(dst.ctx, stream, Access::Write)?;
        // SAFETY: as copy_to_device; both buffers wait for `stream` before they are given back.
        unsafe { driver!(cuMemcpy2DAsync(&c, stream.as_raw())) }
    }

    /// Copies another pitched buffer of the same width and height, whatever its pitch, on this
    /// buffer's storage's stream, and returns when it is done ([`cuMemcpy2DAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// A width or height that differs is an [`Error::InvalidArgument`], checked before the copy.
    pub fn copy_from_pitched(&mut self, src: &PitchedBuffer<T>) -> Result<()> {
        if (self.width(), self.height()) != (src.width(), src.height()) {
            return Err(Error::refused(
                crate::error::Reason::LENGTH_MISMATCH,
                "PitchedBuffer::copy_from_pitched",
                format!(
                    "the matrices differ: {} × {} vs {} × {}",
                    self.width(),
                    self.height(),
                    src.width(),
                    src.height()
                ),
            ));
        }
        src.storage().view().settle_for_sync(self.storage().view().sync_stream()?, Access::Read)?;
        let mut c = self.dense_copy("PitchedBuffer::copy_from_pitched", src.width() * src.height())?;
        c.srcMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
        c.srcDevice = src.as_raw();
        c.srcPitch = src.pitch();
        c.dstMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
        c.dstDevice = self.as_raw();
        c.dstPitch = self.pitch();
        // SAFETY: both sides are live with the same extent.
        self.run_sync("cuMemcpy2DAsync", crate::track::Access::Write, |s| unsafe {
            sys::cuMemcpy2DAsync(&c, s)
        })
    }
}
