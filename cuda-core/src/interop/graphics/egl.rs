//! EGL images as [`GraphicsResource`]s, EGL frames, EGL stream connections and events from
//! EGL syncs.

use super::{GraphicsResource, MapFlags, ReadOnlyArray};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::event::{Event, EventFlags};
use crate::memory::{Array, ArrayDescriptor, ArrayFlags, BorrowedArray, DeviceView};
use crate::stream::Stream;
use bytemuck::Pod;
use cuhost_driver_sys as sys;
use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// A frame of an EGL image or stream (`CUeglFrame`): up to three planes, each a CUDA array or
/// pitched device memory, with their extent and formats. It lives no longer than what holds
/// its planes (a mapping, an acquired stream frame, the buffer it was made of).
#[derive(Clone, Copy)]
pub struct EglFrame<'a> {
    raw: sys::CUeglFrame,
    /// The context of the resource the frame came from (for its array planes); it also ties
    /// the frame to what holds its planes.
    context: Option<&'a Context>,
    /// The flag of the registered resource the frame came from, set when work is queued on its
    /// arrays, so that the resource waits for that work before it is unregistered.
    queued: Option<&'a Arc<AtomicBool>>,
}

impl std::fmt::Debug for EglFrame<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EglFrame")
            .field("width", &self.raw.width)
            .field("height", &self.raw.height)
            .field("depth", &self.raw.depth)
            .field("pitch", &self.raw.pitch)
            .field("planes", &self.raw.planeCount)
            .field("channels", &self.raw.numChannels)
            .field("pitched", &self.is_pitched())
            .field("color_format", &self.raw.eglColorFormat)
            .field("format", &self.raw.cuFormat)
            .finish()
    }
}

impl<'a> EglFrame<'a> {
    /// A one-plane pitched frame over `memory`: `height` rows of `pitch` bytes, each holding
    /// `width` elements of `channels` channels of `format`, in EGL colour format
    /// `color_format`; for [`EglStreamProducer::present`].
    ///
    /// Rows that do not fit in `pitch` bytes (for the plain integer and float formats), or
    /// more rows than `memory` holds, are an [`Error::InvalidArgument`].
    pub fn pitched<T: Pod>(
        memory: DeviceView<'a, T>,
        width: u32,
        height: u32,
        pitch: u32,
        channels: u32,
        format: sys::CUarray_format,
        color_format: sys::CUeglColorFormat,
    ) -> Result<EglFrame<'a>> {
        const OP: &str = "EglFrame::pitched";
        let descriptor = ArrayDescriptor {
            width: width as usize,
            height: height as usize,
            depth: 0,
            format,
            num_channels: channels,
            flags: ArrayFlags::empty(),
        };
        let row = descriptor.element_bytes().map_or(0, |bytes| u64::from(width) * bytes as u64);
        if width == 0 || height == 0 || row > u64::from(pitch) {
            return Err(Error::invalid(
                OP,
                format!("{width} elements of {channels} channels do not fit a pitch of {pitch} bytes"),
            ));
        }
        if u64::from(pitch) * u64::from(height) > memory.size_in_bytes() as u64 {
            return Err(Error::invalid(
                OP,
                format!(
                    "{height} rows of {pitch} bytes do not fit the {} bytes given",
                    memory.size_in_bytes()
                ),
            ));
        }
        // SAFETY: a plain C struct; all zeroes is a valid value.
        let mut raw: sys::CUeglFrame = unsafe { std::mem::zeroed() };
        let mut planes = [std::ptr::null_mut(); 3];
        planes[0] = memory.as_raw() as *mut c_void;
        raw.frame = sys::CUeglFrame_st__bindgen_ty_1 { pPitch: planes };
        raw.width = width;
        raw.height = height;
        raw.depth = 1;
        raw.pitch = pitch;
        raw.planeCount = 1;
        raw.numChannels = channels;
        raw.frameType = sys::CUeglFrameType::CU_EGL_FRAME_TYPE_PITCH;
        raw.eglColorFormat = color_format;
        raw.cuFormat = format;
        Ok(EglFrame { raw, context: None, queued: None })
    }

    /// Wraps a raw frame.
    ///
    /// # Safety
    ///
    /// Its planes stay valid for `'a`.
    pub unsafe fn from_raw(raw: sys::CUeglFrame) -> EglFrame<'a> {
        EglFrame { raw, context: None, queued: None }
    }

    /// The raw `CUeglFrame`.
    pub fn as_raw(&self) -> sys::CUeglFrame {
        self.raw
    }

    /// Width in elements.
    pub fn width(&self) -> u32 {
        self.raw.width
    }

    /// Height in elements.
    pub fn height(&self) -> u32 {
        self.raw.height
    }

    /// Depth in elements.
    pub fn depth(&self) -> u32 {
        self.raw.depth
    }

    /// Bytes per row of a pitched frame.
    pub fn pitch(&self) -> u32 {
        self.raw.pitch
    }

    /// The number of planes (1 to 3).
    pub fn plane_count(&self) -> u32 {
        self.raw.planeCount
    }

    /// Channels per element.
    pub fn channels(&self) -> u32 {
        self.raw.numChannels
    }

    /// Whether the planes are pitched device memory (else CUDA arrays).
    pub fn is_pitched(&self) -> bool {
        self.raw.frameType == sys::CUeglFrameType::CU_EGL_FRAME_TYPE_PITCH
    }

    /// The EGL colour format.
    pub fn color_format(&self) -> sys::CUeglColorFormat {
        self.raw.eglColorFormat
    }

    /// The element format of each channel.
    pub fn format(&self) -> sys::CUarray_format {
        self.raw.cuFormat
    }

    /// The device address of pitched plane `plane`, if the frame is pitched and has it.
    pub fn plane_pointer(&self, plane: usize) -> Option<sys::CUdeviceptr> {
        if !self.is_pitched() || plane >= self.raw.planeCount as usize {
            return None;
        }
        // SAFETY: a pitched frame's union holds plane pointers.
        unsafe { self.raw.frame.pPitch }.get(plane).map(|p| *p as sys::CUdeviceptr)
    }

    /// Plane `plane` as an [`Array`] to read (copy from, sample), if the frame is made of
    /// arrays, has the plane, and came from a registered resource or an acquired stream frame.
    /// A frame is a plain copyable description, so its arrays cannot be written: write an EGL
    /// image's planes through [`GraphicsResource::egl_array_mut`].
    ///
    /// ```compile_fail,E0596
    /// # use cuhost::interop::graphics::GraphicsResource;
    /// # fn f(resource: &GraphicsResource) -> cuhost::Result<()> {
    /// let frame = resource.egl_frame(0, 0)?;
    /// if let Some(mut plane) = frame.array(0) {
    ///     plane.copy_from_host(&[0u32; 16])?; // refused: a frame's arrays are read-only
    /// }
    /// # Ok(()) }
    /// ```
    pub fn array(&self, plane: usize) -> Option<ReadOnlyArray<'a>> {
        let context = self.context?;
        self.plane_array(plane).map(|raw| ReadOnlyArray {
            array: match self.queued {
                Some(queued) => Array::part(raw, context, queued.clone()),
                None => Array::borrowed(raw, context),
            },
        })
    }

    /// The raw CUDA array of plane `plane`, if the frame is made of arrays and has it.
    pub fn plane_array(&self, plane: usize) -> Option<sys::CUarray> {
        if self.is_pitched() || plane >= self.raw.planeCount as usize {
            return None;
        }
        // SAFETY: an array frame's union holds plane arrays.
        unsafe { self.raw.frame.pArray }.get(plane).copied()
    }
}

fn mapped_egl_frame<'a>(
    context: &'a Context,
    queued: Option<&'a Arc<AtomicBool>>,
    resource: sys::CUgraphicsResource,
    index: u32,
    mip_level: u32,
) -> Result<EglFrame<'a>> {
    // SAFETY: a plain C struct; all zeroes is a valid value.
    let mut raw: sys::CUeglFrame = unsafe { std::mem::zeroed() };
    // SAFETY: one out-parameter; the caller's resource is mapped or acquired.
    unsafe { driver!(cuGraphicsResourceGetMappedEglFrame(&mut raw, resource, index, mip_level)) }?;
    Ok(EglFrame { raw, context: Some(context), queued })
}

impl GraphicsResource {
    /// Registers EGL image `image` for CUDA, which will use it as `usage` says
    /// ([`cuGraphicsEGLRegisterImage`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EGL.html)).
    /// An EGL image is not mapped: [`egl_frame`](Self::egl_frame) reaches it while it is
    /// registered.
    ///
    /// A null image is an [`Error::InvalidArgument`]; one CUDA cannot use, the driver's error.
    ///
    /// # Safety
    ///
    /// `image` is a live `EGLImageKHR` that stays alive while the resource is registered.
    pub unsafe fn egl_image(
        context: &Context,
        image: *mut c_void,
        usage: MapFlags,
    ) -> Result<GraphicsResource> {
        if image.is_null() {
            return Err(Error::invalid("GraphicsResource::egl_image", "a null EGLImage"));
        }
        let flags = usage.as_raw();
        let read_only = usage == MapFlags::ReadOnly;
        // SAFETY: one out-parameter; the caller vouches for the image.
        GraphicsResource::register(context, "cuGraphicsEGLRegisterImage", read_only, |raw| unsafe {
            sys::cuGraphicsEGLRegisterImage(raw, image, flags)
        })
    }

    /// Layer `index`, level `mip_level` of a registered EGL image as an EGL frame
    /// ([`cuGraphicsResourceGetMappedEglFrame`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EGL.html)).
    ///
    /// Nothing orders CUDA's access with the other API's: finish its work first (`glFinish`),
    /// and finish CUDA's (synchronize the stream or an event) before it goes on. A resource
    /// that is no EGL image is the driver's error.
    pub fn egl_frame(&self, index: u32, mip_level: u32) -> Result<EglFrame<'_>> {
        self.context.enter()?;
        mapped_egl_frame(&self.context, Some(&self.arrays_queued), self.raw, index, mip_level)
    }

    /// Plane `plane` of layer `index`, level `mip_level` of a registered EGL image, as an
    /// array to write, which borrows the resource exclusively: no frame or other array of it
    /// is live meanwhile
    /// ([`cuGraphicsResourceGetMappedEglFrame`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EGL.html)).
    /// Order the two APIs' work as for [`egl_frame`](Self::egl_frame).
    ///
    /// An image registered for [`MapFlags::ReadOnly`] use, a frame of pitched memory or one
    /// without that plane is an [`Error::InvalidArgument`]; a resource that is no EGL image
    /// the driver's error.
    ///
    /// ```compile_fail,E0499
    /// # use cuhost::interop::graphics::GraphicsResource;
    /// # fn f(resource: &mut GraphicsResource) -> cuhost::Result<()> {
    /// let first = resource.egl_array_mut(0, 0, 0)?;
    /// let second = resource.egl_array_mut(0, 0, 0)?; // refused: two writable arrays of a plane
    /// drop(first);
    /// # Ok(()) }
    /// ```
    pub fn egl_array_mut(&mut self, index: u32, mip_level: u32, plane: usize) -> Result<BorrowedArray<'_>> {
        const OP: &str = "GraphicsResource::egl_array_mut";
        if !self.is_writable() {
            return Err(GraphicsResource::refuse_write(OP, "the EGL image"));
        }
        self.context.enter()?;
        let frame = mapped_egl_frame(&self.context, None, self.raw, index, mip_level)?;
        let raw = frame.plane_array(plane).ok_or_else(|| {
            Error::invalid(
                OP,
                format!(
                    "the frame has no array plane {plane} ({} planes, {}); use plane_pointer for pitched frames",
                    frame.plane_count(),
                    if frame.is_pitched() { "pitched" } else { "arrays" }
                ),
            )
        })?;
        Ok(Array::part(raw, &self.context, self.arrays_queued.clone()))
    }
}

/// Where an EGL stream consumer wants its frames (`CUeglResourceLocationFlags`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EglResourceLocation {
    /// In system memory.
    SystemMemory,
    /// In video memory.
    VideoMemory,
}

fn stream_handle(stream: Option<&Stream>) -> sys::CUstream {
    stream.map_or(std::ptr::null_mut(), Stream::as_raw)
}

fn timeout_ms(timeout: Option<Duration>) -> u32 {
    timeout.map_or(sys::CUDA_EGL_INFINITE_TIMEOUT, |t| u32::try_from(t.as_millis()).unwrap_or(u32::MAX - 1))
}

/// CUDA connected to an EGL stream as its consumer; disconnected on drop
/// ([`cuEGLStreamConsumerConnect`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EGL.html)).
#[derive(Debug)]
pub struct EglStreamConsumer {
    conn: sys::CUeglStreamConnection,
    context: Context,
}

// SAFETY: the connection is used through `&mut self` only.
unsafe impl Send for EglStreamConsumer {}

impl EglStreamConsumer {
    /// Connects CUDA, in `context`, as the consumer of EGL stream `stream`, with frames where
    /// `location` says (or where the driver chooses)
    /// ([`cuEGLStreamConsumerConnect`, `cuEGLStreamConsumerConnectWithFlags`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EGL.html)).
    /// A stream in the wrong state, or a display without CUDA consumers, is the driver's error.
    ///
    /// # Safety
    ///
    /// `stream` is a live `EGLStreamKHR` that outlives the connection.
    pub unsafe fn connect(
        context: &Context,
        stream: *mut c_void,
        location: Option<EglResourceLocation>,
    ) -> Result<EglStreamConsumer> {
        context.enter()?;
        let mut conn = std::ptr::null_mut();
        match location {
            // SAFETY: one out-parameter; the caller vouches for the stream.
            None => unsafe { driver!(cuEGLStreamConsumerConnect(&mut conn, stream)) }?,
            Some(location) => {
                let flags = match location {
                    EglResourceLocation::SystemMemory => {
                        sys::CUeglResourceLocationFlags::CU_EGL_RESOURCE_LOCATION_SYSMEM
                    }
                    EglResourceLocation::VideoMemory => {
                        sys::CUeglResourceLocationFlags::CU_EGL_RESOURCE_LOCATION_VIDMEM
                    }
                };
                // SAFETY: as above.
                unsafe { driver!(cuEGLStreamConsumerConnectWithFlags(&mut conn, stream, flags.0)) }?
            }
        }
        Ok(EglStreamConsumer { conn, context: context.clone() })
    }

    /// Takes the next frame the producer presented, ordered on `stream` (`None`: the default
    /// stream), waiting at most `timeout` (`None`: for ever); the guard gives it back
    /// ([`cuEGLStreamConsumerAcquireFrame`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EGL.html)).
    /// No frame in time is the driver's `CUDA_ERROR_LAUNCH_TIMEOUT`.
    pub fn acquire(
        &mut self,
        stream: Option<&Stream>,
        timeout: Option<Duration>,
    ) -> Result<AcquiredFrame<'_>> {
        self.context.enter()?;
        let mut resource = std::ptr::null_mut();
        let mut raw_stream = stream_handle(stream);
        // SAFETY: out-parameters and a live connection.
        unsafe {
            driver!(cuEGLStreamConsumerAcquireFrame(
                &mut self.conn,
                &mut resource,
                &mut raw_stream,
                timeout_ms(timeout),
            ))
        }?;
        Ok(AcquiredFrame { consumer: self, resource, stream: stream.cloned(), released: false })
    }
}

impl Drop for EglStreamConsumer {
    fn drop(&mut self) {
        let conn = &mut self.conn as *mut sys::CUeglStreamConnection;
        // SAFETY: connected once and disconnected once; no frame is held (it borrows `self`).
        self.context.with_current_for_drop("EglStreamConsumer", || unsafe {
            driver!(cuEGLStreamConsumerDisconnect(conn))
        });
    }
}

/// A frame a consumer holds; released back to the stream when dropped
/// ([`cuEGLStreamConsumerReleaseFrame`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EGL.html)).
#[derive(Debug)]
pub struct AcquiredFrame<'a> {
    consumer: &'a mut EglStreamConsumer,
    resource: sys::CUgraphicsResource,
    stream: Option<Stream>,
    released: bool,
}

impl AcquiredFrame<'_> {
    /// The frame's planes and formats
    /// ([`cuGraphicsResourceGetMappedEglFrame`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EGL.html)).
    /// A deferred error of the context, or the driver's refusal, is returned.
    pub fn frame(&self) -> Result<EglFrame<'_>> {
        self.consumer.context.enter()?;
        mapped_egl_frame(&self.consumer.context, None, self.resource, 0, 0)
    }

    /// Gives the frame back to the stream now, after the work enqueued on its stream
    /// ([`cuEGLStreamConsumerReleaseFrame`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EGL.html));
    /// the driver's error if the connection is gone.
    ///
    /// The frame is released whatever happens: an error kept from elsewhere in the context is
    /// neither reported nor a reason to keep the frame, and if the context cannot be made
    /// current here, the guard still releases it as its drop does.
    pub fn release(mut self) -> Result<()> {
        // On failure `self` drops with `released` unset, and the drop releases the frame.
        self.consumer.context.make_current()?;
        self.released = true;
        self.release_raw()
    }

    fn release_raw(&mut self) -> Result<()> {
        let mut stream = stream_handle(self.stream.as_ref());
        // SAFETY: the frame was acquired from this connection and is released once.
        unsafe {
            driver!(cuEGLStreamConsumerReleaseFrame(&mut self.consumer.conn, self.resource, &mut stream))
        }
    }
}

impl Drop for AcquiredFrame<'_> {
    fn drop(&mut self) {
        if !self.released {
            let context = self.consumer.context.clone();
            context.with_current_for_drop("AcquiredFrame", || self.release_raw());
        }
    }
}

/// CUDA connected to an EGL stream as its producer; disconnected on drop
/// ([`cuEGLStreamProducerConnect`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EGL.html)).
#[derive(Debug)]
pub struct EglStreamProducer {
    conn: sys::CUeglStreamConnection,
    context: Context,
}

// SAFETY: the connection is used through `&mut self` only.
unsafe impl Send for EglStreamProducer {}

impl EglStreamProducer {
    /// Connects CUDA, in `context`, as the producer of EGL stream `stream`, whose frames are
    /// `width` by `height`; a consumer must be connected first
    /// ([`cuEGLStreamProducerConnect`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EGL.html)).
    /// Sides that do not fit an `EGLint` are an [`Error::InvalidArgument`]; a stream with no
    /// consumer, the driver's error.
    ///
    /// # Safety
    ///
    /// `stream` is a live `EGLStreamKHR` that outlives the connection.
    pub unsafe fn connect(
        context: &Context,
        stream: *mut c_void,
        width: u32,
        height: u32,
    ) -> Result<EglStreamProducer> {
        const OP: &str = "EglStreamProducer::connect";
        let w = i32::try_from(width).map_err(|_| Error::invalid(OP, "the width does not fit an EGLint"))?;
        let h = i32::try_from(height).map_err(|_| Error::invalid(OP, "the height does not fit an EGLint"))?;
        context.enter()?;
        let mut conn = std::ptr::null_mut();
        // SAFETY: one out-parameter; the caller vouches for the stream.
        unsafe { driver!(cuEGLStreamProducerConnect(&mut conn, stream, w, h)) }?;
        Ok(EglStreamProducer { conn, context: context.clone() })
    }

    /// Presents `frame` to the consumer after the work enqueued on `stream`
    /// ([`cuEGLStreamProducerPresentFrame`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EGL.html)).
    ///
    /// # Safety
    ///
    /// The frame's planes stay allocated, and are not written, until
    /// [`return_frame`](Self::return_frame) gives the frame back.
    pub unsafe fn present(&mut self, frame: &EglFrame<'_>, stream: Option<&Stream>) -> Result<()> {
        self.context.enter()?;
        let mut raw_stream = stream_handle(stream);
        // SAFETY: a live connection; the caller keeps the planes.
        unsafe { driver!(cuEGLStreamProducerPresentFrame(&mut self.conn, frame.raw, &mut raw_stream)) }
    }

    /// Takes back a frame the consumer has released, ordered on `stream`; its planes are the
    /// caller's again
    /// ([`cuEGLStreamProducerReturnFrame`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EGL.html)).
    /// While the stream has none to give back (the consumer holds it, or keeps the latest frame
    /// until a newer one arrives) the driver says `CUDA_ERROR_LAUNCH_TIMEOUT`: call again later.
    pub fn return_frame(&mut self, stream: Option<&Stream>) -> Result<EglFrame<'static>> {
        self.context.enter()?;
        let mut raw_stream = stream_handle(stream);
        // SAFETY: a plain C struct; all zeroes is a valid value.
        let mut raw: sys::CUeglFrame = unsafe { std::mem::zeroed() };
        // SAFETY: one out-parameter and a live connection.
        unsafe { driver!(cuEGLStreamProducerReturnFrame(&mut self.conn, &mut raw, &mut raw_stream)) }?;
        Ok(EglFrame { raw, context: None, queued: None })
    }
}

impl Drop for EglStreamProducer {
    fn drop(&mut self) {
        let conn = &mut self.conn as *mut sys::CUeglStreamConnection;
        // SAFETY: connected once and disconnected once.
        self.context.with_current_for_drop("EglStreamProducer", || unsafe {
            driver!(cuEGLStreamProducerDisconnect(conn))
        });
    }
}

/// An event, in `context`, that completes when EGL sync object `sync` is signalled; streams
/// can wait on it ([`cuEventCreateFromEGLSync`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EGL.html)).
/// Only `BLOCKING_SYNC` of `flags` applies; the event cannot be recorded again. Drivers that
/// lack the call (NVIDIA's drivers for discrete GPUs provide it on Tegra only) make it an
/// [`Error::Load`].
///
/// # Safety
///
/// `sync` is a live `EGLSyncKHR` (a fence sync) that stays alive while the event is used.
pub unsafe fn event_from_egl_sync(context: &Context, sync: *mut c_void, flags: EventFlags) -> Result<Event> {
    if sync.is_null() {
        return Err(Error::invalid("event_from_egl_sync", "a null EGLSync"));
    }
    context.enter()?;
    let mut raw = std::ptr::null_mut();
    let flags = flags & EventFlags::BLOCKING_SYNC;
    // SAFETY: one out-parameter; the caller vouches for the sync object.
    unsafe { driver!(cuEventCreateFromEGLSync(&mut raw, sync, flags.bits())) }?;
    // SAFETY: created above in `context` with `flags`, owned by nothing else.
    Ok(unsafe { Event::from_raw(context, raw, flags) })
}
