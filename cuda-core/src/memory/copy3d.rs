//! 2D and 3D copies between device memory, pitched allocations and CUDA arrays, and the raw
//! descriptor calls for copies of sub-regions.

use super::array::Array;
use super::pitched::PitchedBuffer;
use super::view::{DeviceView, DeviceViewMut};
use crate::error::{Error, Result, check};
use crate::stream::Stream;
use bytemuck::Pod;
use cuda_driver_sys as sys;

/// Any 2D copy a `CUDA_MEMCPY2D` describes
/// ([`cuMemcpy2D`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
/// The checked methods of [`PitchedBuffer`] and [`Array`] cover whole objects; this covers
/// sub-regions. A context must be current.
///
/// # Safety
///
/// Every address and array named by `copy` must be live, and the rectangle must lie within
/// both sides.
pub unsafe fn memcpy_2d(copy: &sys::CUDA_MEMCPY2D) -> Result<()> {
    // SAFETY: the caller guarantees the descriptor.
    check("cuMemcpy2D", unsafe { sys::cuMemcpy2D(copy) })
}

/// [`memcpy_2d`] in `stream`'s order
/// ([`cuMemcpy2DAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
///
/// # Safety
///
/// As [`memcpy_2d`], and every side must stay live until the stream has passed the copy.
pub unsafe fn memcpy_2d_async(copy: &sys::CUDA_MEMCPY2D, stream: &Stream) -> Result<()> {
    // SAFETY: the caller guarantees the descriptor and lifetimes.
    check("cuMemcpy2DAsync", unsafe { sys::cuMemcpy2DAsync(copy, stream.as_raw()) })
}

/// Any 3D copy a `CUDA_MEMCPY3D` describes
/// ([`cuMemcpy3D`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
/// A context must be current.
///
/// # Safety
///
/// Every address and array named by `copy` must be live, and the box must lie within both
/// sides.
pub unsafe fn memcpy_3d(copy: &sys::CUDA_MEMCPY3D) -> Result<()> {
    // SAFETY: the caller guarantees the descriptor.
    check("cuMemcpy3D", unsafe { sys::cuMemcpy3D(copy) })
}

/// [`memcpy_3d`] in `stream`'s order
/// ([`cuMemcpy3DAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
///
/// # Safety
///
/// As [`memcpy_3d`], and every side must stay live until the stream has passed the copy.
pub unsafe fn memcpy_3d_async(copy: &sys::CUDA_MEMCPY3D, stream: &Stream) -> Result<()> {
    // SAFETY: the caller guarantees the descriptor and lifetimes.
    check("cuMemcpy3DAsync", unsafe { sys::cuMemcpy3DAsync(copy, stream.as_raw()) })
}

/// A 3D copy between contexts (`CUDA_MEMCPY3D_PEER`)
/// ([`cuMemcpy3DPeer`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
///
/// # Safety
///
/// As [`memcpy_3d`], with each side's context named in the descriptor.
pub unsafe fn memcpy_3d_peer(copy: &sys::CUDA_MEMCPY3D_PEER) -> Result<()> {
    // SAFETY: the caller guarantees the descriptor.
    check("cuMemcpy3DPeer", unsafe { sys::cuMemcpy3DPeer(copy) })
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
        // SAFETY: the descriptor names `src` and this array with matching sizes.
        super::finished(check("cuMemcpy3D", unsafe { sys::cuMemcpy3D(&c) }))
    }

    /// Copies the whole array into densely packed device memory
    /// ([`cuMemcpy3D`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_to_device<T: Pod>(&self, dst: &mut DeviceViewMut<'_, T>) -> Result<()> {
        let c = self.a2d("Array::copy_to_device", dst)?;
        // SAFETY: the descriptor names this array and `dst` with matching sizes.
        super::finished(check("cuMemcpy3D", unsafe { sys::cuMemcpy3D(&c) }))
    }

    /// [`Array::copy_from_device`] in `stream`'s order
    /// ([`cuMemcpy3DAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_from_device_async<T: Pod>(&mut self, src: &DeviceView<'_, T>, stream: &Stream) -> Result<()> {
        let c = self.d2a("Array::copy_from_device_async", src)?;
        src.used_on(src.ctx, stream)?;
        self.queued_async();
        // SAFETY: as copy_from_device; `src`'s buffer waits for `stream` before it is given back.
        check("cuMemcpy3DAsync", unsafe { sys::cuMemcpy3DAsync(&c, stream.as_raw()) })
    }

    /// [`Array::copy_to_device`] in `stream`'s order
    /// ([`cuMemcpy3DAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_to_device_async<T: Pod>(
        &self,
        dst: &mut DeviceViewMut<'_, T>,
        stream: &Stream,
    ) -> Result<()> {
        let c = self.a2d("Array::copy_to_device_async", dst)?;
        dst.used_on(dst.ctx, stream)?;
        self.queued_async();
        // SAFETY: as copy_to_device; `dst`'s buffer waits for `stream` before it is given back.
        check("cuMemcpy3DAsync", unsafe { sys::cuMemcpy3DAsync(&c, stream.as_raw()) })
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
            return Err(Error::invalid(
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
        super::finished(check("cuMemcpy3D", unsafe { sys::cuMemcpy3D(&c) }))
    }
}

impl<T: Pod> PitchedBuffer<T> {
    fn dense_copy(&self, operation: &'static str, len: usize) -> Result<sys::CUDA_MEMCPY2D> {
        let want = self.width() * self.height();
        if len != want {
            return Err(Error::invalid(
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
        // SAFETY: both sides are live with matching sizes.
        self.run_sync("cuMemcpy2DAsync", |s| unsafe { sys::cuMemcpy2DAsync(&c, s) })
    }

    /// Copies the buffer into a densely packed row-major device matrix, on the storage's stream,
    /// and returns when it is done ([`cuMemcpy2DAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_to_device(&self, dst: &mut DeviceViewMut<'_, T>) -> Result<()> {
        let c = self.p2d("PitchedBuffer::copy_to_device", dst)?;
        // SAFETY: both sides are live with matching sizes.
        self.run_sync("cuMemcpy2DAsync", |s| unsafe { sys::cuMemcpy2DAsync(&c, s) })
    }

    /// [`PitchedBuffer::copy_from_device`] in `stream`'s order
    /// ([`cuMemcpy2DAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_from_device_async(&mut self, src: &DeviceView<'_, T>, stream: &Stream) -> Result<()> {
        let c = self.d2p("PitchedBuffer::copy_from_device_async", src)?;
        self.record_stream(stream)?;
        src.used_on(src.ctx, stream)?;
        // SAFETY: as copy_from_device; both buffers wait for `stream` before they are given back.
        check("cuMemcpy2DAsync", unsafe { sys::cuMemcpy2DAsync(&c, stream.as_raw()) })
    }

    /// [`PitchedBuffer::copy_to_device`] in `stream`'s order
    /// ([`cuMemcpy2DAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    pub fn copy_to_device_async(&self, dst: &mut DeviceViewMut<'_, T>, stream: &Stream) -> Result<()> {
        let c = self.p2d("PitchedBuffer::copy_to_device_async", dst)?;
        self.record_stream(stream)?;
        dst.used_on(dst.ctx, stream)?;
        // SAFETY: as copy_to_device; both buffers wait for `stream` before they are given back.
        check("cuMemcpy2DAsync", unsafe { sys::cuMemcpy2DAsync(&c, stream.as_raw()) })
    }

    /// Copies another pitched buffer of the same width and height, whatever its pitch, on this
    /// buffer's storage's stream, and returns when it is done ([`cuMemcpy2DAsync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
    ///
    /// A width or height that differs is an [`Error::InvalidArgument`], checked before the copy.
    pub fn copy_from_pitched(&mut self, src: &PitchedBuffer<T>) -> Result<()> {
        if (self.width(), self.height()) != (src.width(), src.height()) {
            return Err(Error::invalid(
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
        if src.storage().stream() != self.storage().stream() {
            src.storage().view().synchronize_stream()?;
        }
        let mut c = self.dense_copy("PitchedBuffer::copy_from_pitched", src.width() * src.height())?;
        c.srcMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
        c.srcDevice = src.as_raw();
        c.srcPitch = src.pitch();
        c.dstMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
        c.dstDevice = self.as_raw();
        c.dstPitch = self.pitch();
        // SAFETY: both sides are live with the same extent.
        self.run_sync("cuMemcpy2DAsync", |s| unsafe { sys::cuMemcpy2DAsync(&c, s) })
    }
}
