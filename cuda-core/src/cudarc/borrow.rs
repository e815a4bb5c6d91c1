//! cudarc slices and views borrowed as this crate's device views: [`CudarcSlice`] (shared) and
//! [`CudarcSliceMut`] (exclusive). Who waits for whom is in [the module's doc](super).

use super::{cudarc_errors, defer_cudarc_errors};
use crate::error::Result;
use crate::memory::{DeviceView, DeviceViewMut};
use crate::stream::Stream;
use crate::track::{StreamUses, order_after};
use ::cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut};
use bytemuck::Pod;
use cuhost_driver_sys as sys;
use std::sync::Arc;

/// A cudarc slice or view (`CudaSlice<T>`, `CudaView<T>`, `CudaViewMut<T>`) read through this
/// crate, for as long as this value lives: [`view`](Self::view) gives a [`DeviceView`] for
/// copies and kernel arguments, on any stream of the slice's context.
///
/// The views are ordered on the cudarc stream the slice was allocated on ([`stream`](Self::stream));
/// when this value is dropped, that stream waits for every other stream the views were used
/// on, and the slice's read event is recorded there for cudarc's later uses (see
/// [the module](super)).
pub struct CudarcSlice<'a, T: Pod> {
    source: &'a dyn DevicePtr<T>,
    side: Side,
}

/// A cudarc slice or mutable view (`CudaSlice<T>`, `CudaViewMut<T>`) read and written through
/// this crate, for as long as this value lives: [`view_mut`](Self::view_mut) gives a
/// [`DeviceViewMut`].
///
/// As [`CudarcSlice`], but the borrow waits for cudarc's earlier reads as well as its writes,
/// and its end records the slice's write event.
pub struct CudarcSliceMut<'a, T: Pod> {
    source: &'a mut dyn DevicePtrMut<T>,
    side: Side,
}

/// This crate's side of a borrow: the slice's memory, its stream (cudarc's and this crate's
/// value for it), and the other streams the views were used on.
struct Side {
    ptr: sys::CUdeviceptr,
    len: usize,
    cudarc_stream: Arc<CudaStream>,
    stream: Stream,
    uses: StreamUses,
}

impl Side {
    fn new(ptr: ::cudarc::driver::sys::CUdeviceptr, len: usize, cudarc_stream: Arc<CudaStream>) -> Side {
        let stream = Stream::from_cudarc(&cudarc_stream);
        Side { ptr, len, cudarc_stream, stream, uses: StreamUses::new() }
    }

    /// A view of the slice, ordered on its stream, its other uses noted here.
    fn view<T: Pod>(&self) -> DeviceView<'_, T> {
        DeviceView::tracked(self.ptr, self.len, &self.stream, Some(&self.stream), &self.uses)
    }

    /// An exclusive view of the slice (the caller holds the borrow exclusively), as
    /// [`view`](Self::view).
    fn view_mut<T: Pod>(&mut self) -> DeviceViewMut<'_, T> {
        DeviceViewMut::tracked(self.ptr, self.len, &self.stream, Some(&self.stream), &self.uses)
    }

    /// Makes the slice's stream wait for every stream of this crate the views were used on,
    /// before cudarc's event is recorded there. Where that cannot be done on the device (a
    /// stream being captured), waits for the whole context on the host, so that cudarc never
    /// frees the memory under work queued here; errors are kept in the context.
    fn join(&mut self) {
        let ctx = self.stream.context().clone();
        let joined = self.uses.take_for_release(&ctx).and_then(|noted| order_after(&self.stream, &noted));
        if let Err(e) = joined {
            ctx.defer(e.dropping("BorrowedView", None));
            if let Err(e) = ctx.with_current(|| {
                // SAFETY: no arguments; the context is current.
                unsafe { driver!(cuCtxSynchronize()) }
            }) {
                ctx.defer(e.dropping("BorrowedView", None));
            }
        }
    }
}

impl<'a, T: Pod> CudarcSlice<'a, T> {
    /// Borrows `source` (a `CudaSlice<T>` or a cudarc view): its stream waits for cudarc's
    /// earlier writes of it on other streams (cudarc's `DevicePtr::device_ptr`).
    ///
    /// # Errors
    ///
    /// An error cudarc stored in its context from that wait (or from an earlier call that
    /// could not return it), as an [`Error::Driver`](crate::Error::Driver).
    pub fn new<S: DevicePtr<T>>(source: &'a S) -> Result<CudarcSlice<'a, T>> {
        let cudarc_stream = source.stream().clone();
        let (ptr, recorded) = source.device_ptr(&cudarc_stream);
        drop(recorded);
        cudarc_errors(cudarc_stream.context(), "DevicePtr::device_ptr")?;
        Ok(CudarcSlice { source, side: Side::new(ptr, source.len(), cudarc_stream) })
    }

    /// A view of the whole slice, ordered on [`stream`](Self::stream).
    pub fn view(&self) -> DeviceView<'_, T> {
        self.side.view()
    }

    /// The stream the slice was allocated on, as this crate's value: the views' own stream.
    pub fn stream(&self) -> &Stream {
        &self.side.stream
    }
}

impl<T: Pod> Drop for CudarcSlice<'_, T> {
    fn drop(&mut self) {
        self.side.join();
        // Recorded now, after the joins: cudarc's later writes wait for every read made here.
        drop(self.source.device_ptr(&self.side.cudarc_stream));
        defer_cudarc_errors(
            self.side.cudarc_stream.context(),
            self.side.stream.context(),
            "DevicePtr::device_ptr",
        );
    }
}

impl<'a, T: Pod> CudarcSliceMut<'a, T> {
    /// Borrows `source` (a `CudaSlice<T>` or a `CudaViewMut<T>`) exclusively: its stream waits
    /// for cudarc's earlier reads and writes of it on other streams (cudarc's
    /// `DevicePtrMut::device_ptr_mut`).
    ///
    /// # Errors
    ///
    /// An error cudarc stored in its context from those waits (or from an earlier call that
    /// could not return it), as an [`Error::Driver`](crate::Error::Driver).
    pub fn new<S: DevicePtrMut<T>>(source: &'a mut S) -> Result<CudarcSliceMut<'a, T>> {
        let cudarc_stream = source.stream().clone();
        let len = source.len();
        let (ptr, recorded) = source.device_ptr_mut(&cudarc_stream);
        drop(recorded);
        cudarc_errors(cudarc_stream.context(), "DevicePtrMut::device_ptr_mut")?;
        Ok(CudarcSliceMut { source, side: Side::new(ptr, len, cudarc_stream) })
    }

    /// An exclusive view of the whole slice, ordered on [`stream`](Self::stream).
    pub fn view_mut(&mut self) -> DeviceViewMut<'_, T> {
        self.side.view_mut()
    }

    /// A shared view of the whole slice, ordered on [`stream`](Self::stream).
    pub fn view(&self) -> DeviceView<'_, T> {
        self.side.view()
    }

    /// The stream the slice was allocated on, as this crate's value: the views' own stream.
    pub fn stream(&self) -> &Stream {
        &self.side.stream
    }
}

impl<T: Pod> Drop for CudarcSliceMut<'_, T> {
    fn drop(&mut self) {
        self.side.join();
        // Recorded now, after the joins: cudarc's later uses wait for every write made here.
        drop(self.source.device_ptr_mut(&self.side.cudarc_stream));
        defer_cudarc_errors(
            self.side.cudarc_stream.context(),
            self.side.stream.context(),
            "DevicePtrMut::device_ptr_mut",
        );
    }
}

impl<T: Pod> std::fmt::Debug for CudarcSlice<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudarcSlice")
            .field("ptr", &format_args!("{:#x}", self.side.ptr))
            .field("len", &self.side.len)
            .finish()
    }
}

impl<T: Pod> std::fmt::Debug for CudarcSliceMut<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudarcSliceMut")
            .field("ptr", &format_args!("{:#x}", self.side.ptr))
            .field("len", &self.side.len)
            .finish()
    }
}
