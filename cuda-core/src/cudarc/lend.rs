//! This crate's buffers and streams handed to cudarc for a while: [`LentSlice`],
//! [`LentSliceMut`] and [`LentStream`]. Who waits for whom is in [the module's doc](super).

use super::{cudarc_errors, defer_cudarc_errors, from_cudarc_error};
use crate::error::{Error, Result};
use crate::memory::{DeviceBuffer, MemorySpace};
use crate::stream::Stream;
use crate::track::{Ordered, order_after, wait_for};
use ::cudarc::driver::{CudaContext, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtrMut};
use bytemuck::Pod;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::Arc;

/// A buffer of this crate lent to cudarc as a `CudaSlice<T>` ([`slice`](Self::slice)) while
/// this value lives, made by [`DeviceBuffer::lend_to_cudarc`]. cudarc may read it on any of its
/// streams; the buffer cannot be written, moved or dropped meanwhile.
///
/// When this value is dropped, the buffer's own stream waits for everything cudarc did with
/// the slice, and the slice is given back without being freed (see [the module](super)).
pub struct LentSlice<'a, T: Pod> {
    loan: Loan<T>,
    _buffer: PhantomData<&'a [T]>,
}

/// A buffer of this crate lent to cudarc for reading and writing while this value lives, made
/// by [`DeviceBuffer::lend_to_cudarc_mut`]: [`view_mut`](Self::view_mut) gives a
/// `CudaViewMut<T>` for cudarc's copies and kernels. The slice itself is never handed out
/// mutably (cudarc could swap it for one it would free).
///
/// Dropping it orders the buffer after cudarc's work as [`LentSlice`] does.
pub struct LentSliceMut<'a, T: Pod> {
    loan: Loan<T>,
    _buffer: PhantomData<&'a mut [T]>,
}

/// The state of a loan: the slice cudarc sees (taken and leaked at the end, never freed by
/// cudarc), the buffer's own stream, and the cudarc stream it was lent on.
struct Loan<T> {
    slice: ManuallyDrop<CudaSlice<T>>,
    owner: Stream,
    stream: Stream,
    /// Whether cudarc tracked the slice's uses with its events when the loan began.
    tracked: bool,
}

impl<T: Pod, S: MemorySpace> DeviceBuffer<T, S> {
    /// Lends the buffer to cudarc for reading, as a `CudaSlice<T>` on `stream` (a cudarc stream
    /// of the buffer's context), while the returned value lives.
    ///
    /// `stream` first waits for the work queued so far on the buffer's own stream, and cudarc's
    /// other streams wait for `stream` through the slice's write event; where cudarc does not
    /// track slices (its context has one stream), the buffer's stream is waited for on the host
    /// instead. See [the module](crate::cudarc) for the end of the loan.
    ///
    /// ```no_run
    /// # fn main() -> cuhost::Result<()> {
    /// # let ctx = cudarc::driver::CudaContext::new(0).expect("a GPU");
    /// # let cudarc_stream = ctx.new_stream().expect("a stream");
    /// let stream = cuhost::Stream::from_cudarc(&cudarc_stream);
    /// let ours = cuhost::DeviceBuffer::from_slice(&stream, &[1u32, 2, 3])?;
    /// let lent = ours.lend_to_cudarc(&cudarc_stream)?;
    /// let copy: Vec<u32> = cudarc_stream.clone_dtoh(lent.slice()).expect("a copy");
    /// # let _ = copy; Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// A stream of another context than the buffer's is an [`Error::InvalidArgument`]; the
    /// waits' statuses, and errors cudarc stored in its context, come back as
    /// [`Error::Driver`]. cudarc's own allocation of the slice's events panics where the driver
    /// refuses them (cudarc's `upgrade_device_ptr`).
    pub fn lend_to_cudarc(&self, stream: &Arc<CudaStream>) -> Result<LentSlice<'_, T>> {
        let note = |s: &Stream| self.used_on(s.context(), s, crate::track::Access::Read);
        let loan = Loan::begin(self.stream(), self.as_raw(), self.len(), stream, note)?;
        Ok(LentSlice { loan, _buffer: PhantomData })
    }

    /// Lends the buffer to cudarc for reading and writing, as [`lend_to_cudarc`](Self::lend_to_cudarc)
    /// does for reading; fails as it does.
    pub fn lend_to_cudarc_mut(&mut self, stream: &Arc<CudaStream>) -> Result<LentSliceMut<'_, T>> {
        let note = |s: &Stream| self.used_on(s.context(), s, crate::track::Access::Write);
        let loan = Loan::begin(self.stream(), self.as_raw(), self.len(), stream, note)?;
        Ok(LentSliceMut { loan, _buffer: PhantomData })
    }
}

impl<T> Loan<T> {
    fn begin(
        owner: &Stream,
        ptr: u64,
        len: usize,
        cudarc_stream: &Arc<CudaStream>,
        note: impl FnOnce(&Stream) -> Result<()>,
    ) -> Result<Loan<T>> {
        let theirs = cudarc_stream.context();
        if theirs.cu_ctx().cast::<std::ffi::c_void>() != owner.context().as_raw().cast::<std::ffi::c_void>() {
            return Err(Error::refused(
                crate::error::Reason::WRONG_CONTEXT,
                "DeviceBuffer::lend_to_cudarc",
                "the cudarc stream belongs to another context than the buffer; lend the buffer on a stream of \
                 its own context",
            ));
        }
        let stream = Stream::from_cudarc(cudarc_stream);
        // Every loan waits for the owner's work so far (not only the first use on `stream`);
        // the note makes the buffer's release wait for `stream` too.
        let ordered = wait_for(&stream, owner)?;
        note(&stream)?;
        let tracked = theirs.is_managing_stream_synchronization();
        if !tracked {
            // cudarc will not make its other streams wait for `stream`: be done on the host.
            if ordered == Ordered::Captured {
                return Err(Error::refused(
                    crate::error::Reason::DURING_CAPTURE,
                    "DeviceBuffer::lend_to_cudarc",
                    "the cudarc stream is being captured, and cudarc does not order its other streams after it \
                     (its context has one stream); lend the buffer before or after the capture",
                ));
            }
            stream.synchronize()?;
        }
        // SAFETY: `ptr` is `len` elements of `T` of device memory of this context, which the
        // loan's borrow of the buffer keeps allocated; the slice is never freed by cudarc (it is
        // taken back with `leak` when the loan ends).
        let mut slice = unsafe { cudarc_stream.upgrade_device_ptr::<T>(ptr, len) };
        // The write event recorded on `stream` after its wait: cudarc's uses on other streams
        // wait for it.
        drop(slice.device_ptr_mut(cudarc_stream));
        let loan = Loan { slice: ManuallyDrop::new(slice), owner: owner.clone(), stream, tracked };
        cudarc_errors(theirs, "CudaStream::upgrade_device_ptr")?;
        Ok(loan)
    }
}

impl<T> Drop for Loan<T> {
    fn drop(&mut self) {
        // SAFETY: taken once, here; the field is not used again.
        let slice = unsafe { ManuallyDrop::take(&mut self.slice) };
        let theirs = slice.context().clone();
        let ours = self.owner.context().clone();
        let tracked = self.tracked && theirs.is_managing_stream_synchronization();
        // With cudarc's tracking, `leak` makes the slice's stream wait for its read and write
        // events: every cudarc use, on any stream.
        let _ = slice.leak();
        if !tracked {
            if let Err(e) = theirs.synchronize() {
                ours.defer(from_cudarc_error("CudaContext::synchronize", e).dropping("LentSlice", None));
            }
        }
        defer_cudarc_errors(&theirs, &ours, "CudaSlice::leak");
        if let Err(e) = order_after(&self.owner, std::slice::from_ref(&self.stream)) {
            ours.defer(e.dropping("LentSlice", None));
            if let Err(e) = self.stream.synchronize_for_release() {
                ours.defer(e.dropping("LentSlice", None));
            }
        }
    }
}

impl<T: Pod> LentSlice<'_, T> {
    /// The lent buffer as cudarc's slice, for cudarc's copies and as a kernel argument.
    pub fn slice(&self) -> &CudaSlice<T> {
        &self.loan.slice
    }

    /// A cudarc view of the whole buffer.
    pub fn view(&self) -> CudaView<'_, T> {
        self.loan.slice.as_view()
    }
}

impl<T: Pod> LentSliceMut<'_, T> {
    /// The lent buffer as cudarc's slice, for reading.
    pub fn slice(&self) -> &CudaSlice<T> {
        &self.loan.slice
    }

    /// A cudarc view of the whole buffer, for reading.
    pub fn view(&self) -> CudaView<'_, T> {
        self.loan.slice.as_view()
    }

    /// A cudarc view of the whole buffer, for writing (cudarc's `memcpy_htod`, `memset_zeros`,
    /// kernel arguments).
    pub fn view_mut(&mut self) -> CudaViewMut<'_, T> {
        self.loan.slice.as_view_mut()
    }
}

/// A stream of this crate lent to cudarc as a borrowed `CudaStream` (cudarc's
/// `wrap_borrowed_stream`), made by [`Stream::lend_to_cudarc`]; dereferences to cudarc's
/// `Arc<CudaStream>`.
///
/// cudarc values made on it (a slice allocated on it holds the stream) may outlive the loan:
/// if any does when this value is dropped, this crate's stream is kept alive for the rest of
/// the process (one handle leaked), so that cudarc never uses a destroyed stream. Allocate
/// cudarc's slices on cudarc's own streams to avoid that.
pub struct LentStream<'a> {
    cudarc: ManuallyDrop<Arc<CudaStream>>,
    stream: &'a Stream,
}

impl Stream {
    /// Lends this stream to cudarc, in `ctx` (the cudarc context of the stream's context), while
    /// the returned value lives; work cudarc queues on it runs in the stream's order.
    ///
    /// # Errors
    ///
    /// A context other than the stream's, or a per-thread default stream (whose handle names
    /// whichever thread cudarc would use it from), is an [`Error::InvalidArgument`].
    pub fn lend_to_cudarc(&self, ctx: &Arc<CudaContext>) -> Result<LentStream<'_>> {
        if ctx.cu_ctx().cast::<std::ffi::c_void>() != self.context().as_raw().cast::<std::ffi::c_void>() {
            return Err(Error::refused(
                crate::error::Reason::WRONG_CONTEXT,
                "Stream::lend_to_cudarc",
                "the cudarc context is another context than the stream's; use Context::to_cudarc of the stream's context",
            ));
        }
        if self.is_per_thread() {
            return Err(Error::refused(
                crate::error::Reason::WRONG_STREAM,
                "Stream::lend_to_cudarc",
                "a per-thread default stream names the stream of whichever thread uses it; lend a created stream \
                 or Stream::legacy",
            ));
        }
        // SAFETY: the handle is a stream of `ctx` (checked above), alive while `self` is; the
        // drop below keeps `self` alive for good if cudarc still holds the stream then.
        let cudarc = unsafe { ctx.wrap_borrowed_stream(self.as_raw().cast()) };
        Ok(LentStream { cudarc: ManuallyDrop::new(cudarc), stream: self })
    }
}

impl std::ops::Deref for LentStream<'_> {
    type Target = Arc<CudaStream>;

    fn deref(&self) -> &Arc<CudaStream> {
        &self.cudarc
    }
}

impl Drop for LentStream<'_> {
    fn drop(&mut self) {
        // SAFETY: taken once, here; the field is not used again.
        let cudarc = unsafe { ManuallyDrop::take(&mut self.cudarc) };
        // The last holder takes the value out, so no weak reference can bring it back; any
        // other holder keeps using the handle, which must then stay valid.
        if let Err(still_held) = Arc::try_unwrap(cudarc) {
            std::mem::forget(self.stream.clone());
            drop(still_held);
        }
    }
}

impl<T: Pod> std::fmt::Debug for LentSlice<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LentSlice").field("stream", &self.loan.stream.as_raw()).finish()
    }
}

impl<T: Pod> std::fmt::Debug for LentSliceMut<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LentSliceMut").field("stream", &self.loan.stream.as_raw()).finish()
    }
}

impl std::fmt::Debug for LentStream<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LentStream").field("stream", &self.stream.as_raw()).finish()
    }
}
