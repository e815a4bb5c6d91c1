//! OpenGL and EGL resources registered with CUDA: OpenGL buffers and images mapped on a stream
//! while a guard lives, EGL images reached while registered, and EGL stream connections.
//!
//! A [`GraphicsResource`] is an OpenGL buffer or image ([`GraphicsResource::gl_buffer`],
//! [`GraphicsResource::gl_image`]) or an EGL image ([`GraphicsResource::egl_image`])
//! registered once; it is unregistered on drop. [`GraphicsResource::map`] (or [`map_all`] for
//! several at once) maps an OpenGL resource for CUDA in a stream's order and returns a
//! [`Mapped`] guard: while it lives, the resource's memory is a device view, a CUDA array or a
//! mipmapped array, and the graphics API must leave it alone; dropping the guard (or
//! [`Mapped::unmap`]) hands it back, ordered after the stream's work. The borrow checker keeps
//! a resource from being mapped twice, used after it is unmapped, or unmapped twice.
//!
//! An EGL image is not mapped: [`GraphicsResource::egl_frame`] reaches it while it is
//! registered, and the application orders the two APIs' work itself. EGL streams connect
//! CUDA as a frame consumer ([`EglStreamConsumer`]) or producer
//! ([`EglStreamProducer`]). VDPAU stays with the raw `cuhost_driver_sys` calls.
//!
//! The calls need the graphics context current on the calling thread (OpenGL) or a valid
//! display (EGL); the driver says when it is not. See
//! [Graphics Interoperability](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPHICS.html),
//! [OpenGL Interoperability](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GL.html) and
//! [EGL Interoperability](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__EGL.html).
//!
//! ```compile_fail,E0505
//! # use cuhost::interop::graphics::GraphicsResource;
//! # fn f(resource: &mut GraphicsResource, stream: &cuhost::Stream) -> cuhost::Result<()> {
//! let mapped = resource.map(stream)?;
//! let view = mapped.buffer::<f32>(0)?;
//! mapped.unmap()?; // refused: `view` still borrows the mapping
//! drop(view);
//! # Ok(()) }
//! ```
//!
//! ```compile_fail,E0499
//! # use cuhost::interop::graphics::GraphicsResource;
//! # fn f(resource: &mut GraphicsResource, stream: &cuhost::Stream) -> cuhost::Result<()> {
//! let first = resource.map(stream)?;
//! let second = resource.map(stream)?; // refused: the resource is mapped already
//! drop(first);
//! # Ok(()) }
//! ```
//!
//! # Read-only resources
//!
//! A resource registered with [`RegisterFlags::READ_ONLY`], or mapped after
//! [`set_map_flags`](GraphicsResource::set_map_flags)`(`[`MapFlags::ReadOnly`]`)` (an EGL
//! image registered for [`MapFlags::ReadOnly`] use), is one CUDA promised the driver not to
//! write. The writable accessors ([`Mapped::buffer_mut`], [`Mapped::array_mut`],
//! [`Mapped::mipmapped_array`], [`GraphicsResource::egl_array_mut`]) refuse it with an
//! [`Error::InvalidArgument`]; the readable ones ([`Mapped::buffer`], [`Mapped::array`],
//! [`EglFrame::array`]) hand out views and [`ReadOnlyArray`]s that have no way to write.

mod egl;
mod gl;

pub use egl::{
    AcquiredFrame, EglFrame, EglResourceLocation, EglStreamConsumer, EglStreamProducer, event_from_egl_sync,
};
pub use gl::{GlDeviceList, GlImageTarget, gl_devices};

use crate::context::Context;
use crate::error::{Error, Result, check};
use crate::flags::flags;
use crate::memory::{
    Array, BorrowedArray, BorrowedMipmappedArray, DeviceView, DeviceViewMut, MipmappedArray,
};
use crate::stream::Stream;
use crate::track::{StreamUses, order_after};
use bytemuck::Pod;
use cuhost_driver_sys as sys;
use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

flags! {
    /// How CUDA will use a resource, given when it is registered (`CU_GRAPHICS_REGISTER_FLAGS_*`).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct RegisterFlags: u32 {
        /// CUDA only reads it.
        const READ_ONLY = 0x1;
        /// CUDA writes all of it and does not read what was there.
        const WRITE_DISCARD = 0x2;
        /// CUDA binds it as a surface.
        const SURFACE_LDST = 0x4;
        /// CUDA samples it with texture gather.
        const TEXTURE_GATHER = 0x8;
    }
}

/// How CUDA will use a resource while mapped, or an EGL image while registered
/// (`CU_GRAPHICS_MAP_RESOURCE_FLAGS_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum MapFlags {
    /// Reads and writes.
    #[default]
    ReadWrite,
    /// CUDA only reads it.
    ReadOnly,
    /// CUDA writes all of it and does not read what was there.
    WriteDiscard,
}

impl MapFlags {
    fn as_raw(self) -> u32 {
        use sys::CUgraphicsMapResourceFlags as F;
        match self {
            MapFlags::ReadWrite => F::CU_GRAPHICS_MAP_RESOURCE_FLAGS_NONE.0,
            MapFlags::ReadOnly => F::CU_GRAPHICS_MAP_RESOURCE_FLAGS_READ_ONLY.0,
            MapFlags::WriteDiscard => F::CU_GRAPHICS_MAP_RESOURCE_FLAGS_WRITE_DISCARD.0,
        }
    }
}

/// A graphics resource registered with CUDA, unregistered on drop
/// ([`cuGraphicsUnregisterResource`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPHICS.html)).
#[derive(Debug)]
pub struct GraphicsResource {
    raw: sys::CUgraphicsResource,
    context: Context,
    /// Registered for reading only (`READ_ONLY`, or an EGL image for `ReadOnly` use).
    registered_read_only: bool,
    /// The flags of the next mappings.
    map_flags: MapFlags,
    /// Set once work is queued on an array of the registered EGL image: the resource then
    /// waits for its context before it is unregistered (after which the image may go).
    arrays_queued: Arc<AtomicBool>,
}

// SAFETY: a CUgraphicsResource may be used from any thread that has the graphics context.
unsafe impl Send for GraphicsResource {}

impl GraphicsResource {
    /// Registers with `register` (one driver call writing the handle), in `context`.
    fn register(
        context: &Context,
        call: &'static str,
        read_only: bool,
        register: impl FnOnce(*mut sys::CUgraphicsResource) -> sys::CUresult,
    ) -> Result<GraphicsResource> {
        context.enter()?;
        let mut raw = std::ptr::null_mut();
        check(call, register(&mut raw))?;
        Ok(GraphicsResource::new(context, raw, read_only))
    }

    fn new(context: &Context, raw: sys::CUgraphicsResource, read_only: bool) -> GraphicsResource {
        GraphicsResource {
            raw,
            context: context.clone(),
            registered_read_only: read_only,
            map_flags: MapFlags::ReadWrite,
            arrays_queued: Arc::default(),
        }
    }

    /// Wraps a registered resource and takes ownership: it is unregistered on drop. `flags`
    /// are those it was registered with: [`RegisterFlags::READ_ONLY`] makes its mappings
    /// read-only (see [Read-only resources](self#read-only-resources)).
    ///
    /// # Safety
    ///
    /// `raw` is a live resource registered in `context` that nothing else unregisters, with
    /// `READ_ONLY` among `flags` if it was registered so (an EGL image registered for
    /// read-only use counts as `READ_ONLY`), and map flags other than read-only (none set
    /// since registration, or [`MapFlags::ReadWrite`] or [`MapFlags::WriteDiscard`]).
    pub unsafe fn from_raw(
        context: &Context,
        raw: sys::CUgraphicsResource,
        flags: RegisterFlags,
    ) -> GraphicsResource {
        GraphicsResource::new(context, raw, flags.contains(RegisterFlags::READ_ONLY))
    }

    /// Whether CUDA may write the resource: it was not registered read-only and its map flags
    /// are not [`MapFlags::ReadOnly`]. The writable accessors refuse it otherwise.
    pub fn is_writable(&self) -> bool {
        !self.registered_read_only && self.map_flags != MapFlags::ReadOnly
    }

    /// The refusal of a write to a resource CUDA promised not to write.
    fn refuse_write(operation: &'static str, what: &str) -> Error {
        Error::invalid(
            operation,
            format!(
                "{what} is read-only for CUDA (registered READ_ONLY, or mapped with MapFlags::ReadOnly): \
                 the driver was promised CUDA would not write it; read it with the read-only accessors, \
                 or register it without READ_ONLY and set_map_flags(MapFlags::ReadWrite) to write it"
            ),
        )
    }

    /// The raw `CUgraphicsResource`.
    pub fn as_raw(&self) -> sys::CUgraphicsResource {
        self.raw
    }

    /// The context it is registered in.
    pub fn context(&self) -> &Context {
        &self.context
    }

    /// Says how the next mappings will be used
    /// ([`cuGraphicsResourceSetMapFlags`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPHICS.html)).
    ///
    /// With [`MapFlags::ReadOnly`], the writable accessors of the next mappings refuse the
    /// resource (see [Read-only resources](self#read-only-resources)).
    pub fn set_map_flags(&mut self, flags: MapFlags) -> Result<()> {
        self.context.enter()?;
        // SAFETY: the resource is registered and not mapped (mapping borrows it).
        unsafe { driver!(cuGraphicsResourceSetMapFlags(self.raw, flags.as_raw())) }?;
        self.map_flags = flags;
        Ok(())
    }

    /// Maps the resource for CUDA, ordered after the graphics API's work and before `stream`'s
    /// later work, until the guard is dropped
    /// ([`cuGraphicsMapResources`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPHICS.html)).
    /// It is the guard's resource 0.
    ///
    /// A stream of another context is an [`Error::InvalidArgument`]; a resource the driver
    /// finds mapped already (through its raw handle) is `CUDA_ERROR_ALREADY_MAPPED`. EGL images
    /// are not mapped (read them with [`egl_frame`](Self::egl_frame)); the driver refuses them.
    pub fn map<'a>(&'a mut self, stream: &Stream) -> Result<Mapped<'a>> {
        map_all([self], stream)
    }
}

impl Drop for GraphicsResource {
    fn drop(&mut self) {
        let raw = self.raw;
        let queued = self.arrays_queued.load(Ordering::Relaxed);
        // SAFETY: registered once and unregistered once; no guard maps it (it would borrow it).
        // Work queued on its EGL arrays is waited for first; when that wait fails the resource
        // stays registered (a leak, not an image released under running work).
        self.context.with_current_for_drop("GraphicsResource", || unsafe {
            if queued {
                driver!(cuCtxSynchronize())?;
            }
            driver!(cuGraphicsUnregisterResource(raw))
        });
    }
}

/// Maps several resources for CUDA in one call, in `stream`'s order; the guard's resource `i`
/// is the `i`-th given
/// ([`cuGraphicsMapResources`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPHICS.html)).
///
/// None, or resources of another context than the stream's, are an [`Error::InvalidArgument`].
pub fn map_all<'a>(
    resources: impl IntoIterator<Item = &'a mut GraphicsResource>,
    stream: &Stream,
) -> Result<Mapped<'a>> {
    const OP: &str = "graphics::map_all";
    let (mut raw, mut writable) = (Vec::new(), Vec::new());
    for resource in resources {
        if resource.context != *stream.context() {
            return Err(Error::refused(
                crate::error::Reason::WRONG_CONTEXT,
                OP,
                "a resource registered in another context than the stream's",
            ));
        }
        raw.push(resource.raw);
        writable.push(resource.is_writable());
    }
    if raw.is_empty() {
        return Err(Error::invalid(OP, "no resources to map"));
    }
    let count = u32::try_from(raw.len()).map_err(|_| Error::invalid(OP, "too many resources"))?;
    stream.context().enter()?;
    // SAFETY: `count` live resources, exclusively borrowed, and a live stream.
    unsafe { driver!(cuGraphicsMapResources(count, raw.as_mut_ptr(), stream.as_raw())) }?;
    Ok(Mapped {
        raw,
        writable,
        stream: stream.clone(),
        uses: StreamUses::unretained(),
        arrays_lent: AtomicBool::new(false),
        unmapped: false,
        _resources: PhantomData,
    })
}

/// Resources mapped for CUDA; they are unmapped when the guard is dropped, ordered after the
/// work enqueued on its stream by then
/// ([`cuGraphicsUnmapResources`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPHICS.html)).
/// An error while unmapping on drop is kept by the context (see
/// [`Context::deferred_error`](crate::context::Context::deferred_error)); [`unmap`](Self::unmap) returns it.
#[derive(Debug)]
pub struct Mapped<'a> {
    raw: Vec<sys::CUgraphicsResource>,
    /// Whether CUDA may write each resource (see `GraphicsResource::is_writable`).
    writable: Vec<bool>,
    stream: Stream,
    /// The other streams the buffer views were used on: the unmap is ordered after them.
    uses: StreamUses,
    /// Whether an array of the mapping was handed out: arrays note no streams, so the unmap
    /// then waits for the whole context.
    arrays_lent: AtomicBool,
    unmapped: bool,
    _resources: PhantomData<&'a mut GraphicsResource>,
}

impl Mapped<'_> {
    /// How many resources are mapped.
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// Whether none are (never: mapping needs one).
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// The stream the mapping is ordered on, which views of it use.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    fn resource(&self, operation: &'static str, index: usize) -> Result<sys::CUgraphicsResource> {
        self.raw.get(index).copied().ok_or_else(|| {
            Error::refused(
                crate::error::Reason::OUT_OF_BOUNDS,
                operation,
                format!("resource {index} does not exist; {} are mapped", self.raw.len()),
            )
        })
    }

    /// Resource `index`, which CUDA is about to be allowed to write.
    fn writable_resource(&self, operation: &'static str, index: usize) -> Result<sys::CUgraphicsResource> {
        let resource = self.resource(operation, index)?;
        if !self.is_writable(index) {
            return Err(GraphicsResource::refuse_write(operation, &format!("mapped resource {index}")));
        }
        Ok(resource)
    }

    /// Whether CUDA may write resource `index` (false for one that does not exist): it was not
    /// registered or mapped read-only. The writable accessors refuse it otherwise.
    pub fn is_writable(&self, index: usize) -> bool {
        self.writable.get(index).copied().unwrap_or(false)
    }

    /// The device address and size in bytes of mapped buffer `index`
    /// ([`cuGraphicsResourceGetMappedPointer`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPHICS.html)).
    /// An image has no address: the driver says `CUDA_ERROR_NOT_MAPPED_AS_POINTER`.
    pub fn pointer(&self, index: usize) -> Result<(sys::CUdeviceptr, usize)> {
        let resource = self.resource("Mapped::pointer", index)?;
        self.stream.context().enter()?;
        let (mut ptr, mut size) = (0, 0);
        // SAFETY: two out-parameters; the resource is mapped while `self` lives.
        unsafe { driver!(cuGraphicsResourceGetMappedPointer(&mut ptr, &mut size, resource)) }?;
        Ok((ptr, size))
    }

    fn elements<T: Pod>(&self, operation: &'static str, index: usize) -> Result<(sys::CUdeviceptr, usize)> {
        let (ptr, bytes) = self.pointer(index)?;
        let size = std::mem::size_of::<T>();
        if size == 0 || bytes % size != 0 || ptr % std::mem::align_of::<T>() as u64 != 0 {
            return Err(Error::invalid(
                operation,
                format!(
                    "{bytes} mapped bytes at {ptr:#x} are not a whole, aligned number of {size}-byte elements"
                ),
            ));
        }
        Ok((ptr, bytes / size))
    }

    /// Mapped buffer `index` as a view of `T`s, ordered on the guard's stream.
    ///
    /// A size that is not a whole number of `T`s is an [`Error::InvalidArgument`]; an image
    /// the driver's `CUDA_ERROR_NOT_MAPPED_AS_POINTER`.
    pub fn buffer<T: Pod>(&self, index: usize) -> Result<DeviceView<'_, T>> {
        let (ptr, len) = self.elements::<T>("Mapped::buffer", index)?;
        Ok(DeviceView::tracked(ptr, len, &self.stream, Some(&self.stream), &self.uses))
    }

    /// Mapped buffer `index` as an exclusive view of `T`s (for kernels that write it).
    ///
    /// Errors as for [`buffer`](Self::buffer); a resource registered or mapped read-only is
    /// an [`Error::InvalidArgument`] (see [Read-only resources](self#read-only-resources)).
    pub fn buffer_mut<T: Pod>(&mut self, index: usize) -> Result<DeviceViewMut<'_, T>> {
        self.writable_resource("Mapped::buffer_mut", index)?;
        let (ptr, len) = self.elements::<T>("Mapped::buffer_mut", index)?;
        Ok(DeviceViewMut::tracked(ptr, len, &self.stream, Some(&self.stream), &self.uses))
    }

    fn raw_array(
        &self,
        resource: sys::CUgraphicsResource,
        array_index: u32,
        mip_level: u32,
    ) -> Result<BorrowedArray<'_>> {
        self.stream.context().enter()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: one out-parameter; the resource is mapped while `self` lives.
        unsafe { driver!(cuGraphicsSubResourceGetMappedArray(&mut raw, resource, array_index, mip_level)) }?;
        self.arrays_lent.store(true, Ordering::Relaxed);
        Ok(Array::borrowed(raw, self.stream.context()))
    }

    /// Layer or cube face `array_index`, level `mip_level` of mapped image `index`, as a CUDA
    /// array to read: copy from it, sample it ([`Resource::borrowed_array`](crate::texture::Resource::borrowed_array))
    /// ([`cuGraphicsSubResourceGetMappedArray`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPHICS.html)).
    /// [`array_mut`](Self::array_mut) gives one to write. A buffer is
    /// `CUDA_ERROR_NOT_MAPPED_AS_ARRAY`.
    ///
    /// The mapping is ordered on the guard's [`stream`](Self::stream): synchronize it before
    /// the synchronous copies (which run on the default stream). Work on the array queued on
    /// any stream is done before the resources are unmapped: a guard that handed out an array
    /// waits for its whole context before it unmaps.
    ///
    /// ```compile_fail,E0596
    /// # use cuhost::interop::graphics::GraphicsResource;
    /// # fn f(resource: &mut GraphicsResource, stream: &cuhost::Stream) -> cuhost::Result<()> {
    /// let mapped = resource.map(stream)?;
    /// let mut level = mapped.array(0, 0, 0)?;
    /// level.copy_from_host(&[0f32; 16])?; // refused: a read-only array cannot be written
    /// # Ok(()) }
    /// ```
    pub fn array(&self, index: usize, array_index: u32, mip_level: u32) -> Result<ReadOnlyArray<'_>> {
        let resource = self.resource("Mapped::array", index)?;
        self.raw_array(resource, array_index, mip_level).map(|array| ReadOnlyArray { array })
    }

    /// As [`array`](Self::array), an array to write (copy into, or a kernel's output), which
    /// borrows the guard exclusively: no other array, view or mipmapped array of the mapping is
    /// live meanwhile.
    ///
    /// Errors as for [`array`](Self::array); a resource registered or mapped read-only is an
    /// [`Error::InvalidArgument`] (see [Read-only resources](self#read-only-resources)).
    ///
    /// ```compile_fail,E0499
    /// # use cuhost::interop::graphics::GraphicsResource;
    /// # fn f(resource: &mut GraphicsResource, stream: &cuhost::Stream) -> cuhost::Result<()> {
    /// let mut mapped = resource.map(stream)?;
    /// let first = mapped.array_mut(0, 0, 0)?;
    /// let second = mapped.array_mut(0, 0, 0)?; // refused: two writable arrays of one level
    /// drop(first);
    /// # Ok(()) }
    /// ```
    pub fn array_mut(&mut self, index: usize, array_index: u32, mip_level: u32) -> Result<BorrowedArray<'_>> {
        let resource = self.writable_resource("Mapped::array_mut", index)?;
        self.raw_array(resource, array_index, mip_level)
    }

    /// Mapped image `index` as a mipmapped array of `levels` levels
    /// ([`cuGraphicsResourceGetMappedMipmappedArray`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPHICS.html)).
    /// The driver does not say how many levels the graphics API allocated: pass that number,
    /// which [`MipmappedArray::level`] then checks. A buffer is the driver's error.
    ///
    /// Its levels can be written, so it borrows the guard exclusively, and a resource
    /// registered or mapped read-only is an [`Error::InvalidArgument`]: read such a
    /// resource's levels with [`array`](Self::array).
    pub fn mipmapped_array(&mut self, index: usize, levels: u32) -> Result<BorrowedMipmappedArray<'_>> {
        let resource = self.writable_resource("Mapped::mipmapped_array", index)?;
        self.stream.context().enter()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: one out-parameter; the resource is mapped while `self` lives.
        unsafe { driver!(cuGraphicsResourceGetMappedMipmappedArray(&mut raw, resource)) }?;
        self.arrays_lent.store(true, Ordering::Relaxed);
        Ok(MipmappedArray::borrowed(raw, self.stream.context(), levels))
    }

    /// Unmaps now, returning the driver's answer
    /// ([`cuGraphicsUnmapResources`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPHICS.html)):
    /// an error of the work on the stream, or of the graphics context, comes back here instead
    /// of being deferred.
    ///
    /// An error kept from elsewhere in the context (see
    /// [`Context::deferred_error`](crate::context::Context::deferred_error)) is neither reported nor a
    /// reason to skip the unmap, and if the context cannot be made current here, the guard
    /// still unmaps as its drop does (that error is kept by the context). Only when the work
    /// queued through the mapping cannot be waited for at all (a failed context) do the
    /// resources stay mapped, rather than go back to the graphics API under that work; the
    /// error says why.
    pub fn unmap(mut self) -> Result<()> {
        // On failure `self` drops with `unmapped` unset, and the drop unmaps.
        self.stream.context().make_current()?;
        self.unmapped = true;
        self.order_unmap()?;
        self.unmap_raw()
    }

    /// Orders the unmap after the work queued through the mapping on other streams: the
    /// guard's stream waits for the streams its views noted, or, where an array was handed
    /// out (arrays note no streams), the host waits for the whole context, as it also does
    /// when the ordering fails. Fails when even that wait fails: then the caller must not
    /// unmap.
    fn order_unmap(&mut self) -> Result<()> {
        let ordered = !self.arrays_lent.load(Ordering::Relaxed)
            && self
                .uses
                .take_for_release(self.stream.context())
                .and_then(|others| order_after(&self.stream, &others))
                .is_ok();
        if ordered {
            return Ok(());
        }
        // SAFETY: no arguments; the guard's context is current (the callers make it so).
        unsafe { driver!(cuCtxSynchronize()) }
    }

    fn unmap_raw(&mut self) -> Result<()> {
        let count = self.raw.len() as u32;
        // SAFETY: the resources were mapped together on this stream and are unmapped once.
        unsafe { driver!(cuGraphicsUnmapResources(count, self.raw.as_mut_ptr(), self.stream.as_raw())) }
    }
}

impl Drop for Mapped<'_> {
    fn drop(&mut self) {
        if !self.unmapped {
            let context = self.stream.context().clone();
            context.with_current_for_drop("Mapped", || {
                // Kept mapped (a leak) when the work through it cannot be waited for.
                if let Err(e) = self.order_unmap() {
                    context.defer(e.dropping("Mapped", None));
                    return Ok(());
                }
                self.unmap_raw()
            });
        }
    }
}

/// A CUDA array of a graphics resource that CUDA only reads: a level or layer of a mapped
/// image ([`Mapped::array`]) or a plane of an EGL frame ([`EglFrame::array`]). It lives no
/// longer than the mapping or frame, and dereferences to [`Array`] for reading only:
/// descriptors, copies out, textures ([`Resource::borrowed_array`](crate::texture::Resource::borrowed_array)).
/// Several may be live at once, and none gives a way to write.
#[derive(Debug)]
pub struct ReadOnlyArray<'a> {
    array: BorrowedArray<'a>,
}

impl Deref for ReadOnlyArray<'_> {
    type Target = Array;
    fn deref(&self) -> &Array {
        &self.array
    }
}
