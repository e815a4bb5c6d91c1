//! cudarc 0.19 and this crate in one process: cudarc's contexts, streams and slices used as this
//! crate's, and this crate's streams and buffers handed to cudarc, so that a project on cudarc
//! can move over one piece at a time (with the `cudarc` feature).
//!
//! ```no_run
//! # fn main() -> cuhost::Result<()> {
//! use cuhost::cudarc::CudarcSlice;
//! use cuhost::{Context, Stream};
//! # let cudarc_ctx = cudarc::driver::CudaContext::new(0).expect("a GPU");
//! # let cudarc_stream = cudarc_ctx.default_stream();
//! # let mut cudarc_slice = cudarc_stream.alloc_zeros::<f32>(1024).expect("memory");
//! let ctx = Context::from_cudarc(&cudarc_ctx); // the same primary context, kept alive
//! let stream = Stream::from_cudarc(&cudarc_stream); // the same stream, kept alive
//! {
//!     // cudarc's slice as this crate's view, for as long as `borrowed` lives.
//!     let borrowed = CudarcSlice::new(&cudarc_slice)?;
//!     let on_host = borrowed.view().to_vec()?;
//!     # let _ = on_host;
//! }
//! // this crate's buffer as cudarc's slice, for as long as `lent` lives.
//! let buffer = cuhost::DeviceBuffer::from_slice(&stream, &[1.0f32; 1024])?;
//! let lent = buffer.lend_to_cudarc(&cudarc_stream)?;
//! let back: Vec<f32> = cudarc_stream.clone_dtoh(lent.slice()).expect("a copy");
//! # let _ = (ctx, back, &mut cudarc_slice); Ok(()) }
//! ```
//!
//! # Who waits for whom
//!
//! cudarc orders each slice's uses on several streams with two events per slice (a read and a
//! write event, recorded after each use and waited for before the next conflicting one) once
//! its context has more than one stream (`CudaContext::is_managing_stream_synchronization`).
//! This crate orders memory by its stream rule (the crate documentation, *Streams*): uses on the memory's own stream
//! need nothing, the first use on another stream waits for the own stream, and the release
//! waits for every stream that used it. The bridge joins the two at its edges:
//!
//! * **A cudarc slice borrowed here** ([`CudarcSlice`], [`CudarcSliceMut`]) is ordered on the
//!   cudarc stream the slice was allocated on, as this crate's [`Stream`]: that is the views'
//!   own stream. When the borrow begins, that stream waits for cudarc's earlier uses of the
//!   slice on other streams (its write event; for a mutable borrow also its read event), as a
//!   cudarc use there would. Views used on other streams of this crate note them, as any
//!   view's owner does (the first such use waits for the own stream). When the borrow ends,
//!   the own stream waits for every noted stream, and then the slice's cudarc event is recorded
//!   there (its read event, or its write event for a mutable borrow): cudarc's later uses on
//!   any stream wait for everything done through the borrow, and cudarc frees the slice on
//!   that stream, after it. Without cudarc's tracking (one stream, or tracking switched off)
//!   cudarc orders nothing itself, and the bridge orders this crate's work against the slice's
//!   stream only, as cudarc would.
//! * **A buffer of this crate lent to cudarc** ([`DeviceBuffer::lend_to_cudarc`](crate::DeviceBuffer::lend_to_cudarc),
//!   [`lend_to_cudarc_mut`](crate::DeviceBuffer::lend_to_cudarc_mut)) is a cudarc slice on
//!   the cudarc stream named when lending. That stream first waits for the work queued so far
//!   on the buffer's own stream, and the slice's write event is recorded there, so cudarc's
//!   uses on its other streams wait for it too. When the loan ends, the cudarc stream waits for
//!   the slice's events (every cudarc use, on any stream), and the buffer's own stream waits
//!   for the cudarc stream: work queued on the buffer afterwards, and its release, come after
//!   everything cudarc did with it. Where cudarc does not track the slice (one stream, or
//!   tracking switched off), its uses on other streams cannot be seen: the loan then waits on
//!   the host when it begins (for the buffer's stream) and when it ends (for the whole
//!   context). The slice is never freed by cudarc: it is given back with `CudaSlice::leak`.
//! * **Contexts and streams** ([`Context::from_cudarc`], [`Stream::from_cudarc`]) are the same
//!   driver handles, kept alive by a clone of cudarc's `Arc`; they order nothing by
//!   themselves. [`Context::to_cudarc`] retains the primary context through cudarc.
//!   [`Stream::lend_to_cudarc`] gives cudarc a borrowed stream; a cudarc value that still holds
//!   it when the loan ends keeps this crate's stream alive for the rest of the process.
//!
//! Between the edges each side keeps its own rules: cudarc's implicit ordering does not reach
//! work queued through this crate, and this crate's views of a borrowed slice order their
//! other streams only by the stream rule (see the guide's chapter on coming from cudarc).
//!
//! An NCCL group of this crate that takes a borrowed cudarc slice must end before the borrow
//! does: the group's work is queued only when it ends, and cudarc may free the slice once the
//! borrow has ended.

mod borrow;
mod lend;

pub use borrow::{CudarcSlice, CudarcSliceMut};
pub use lend::{LentSlice, LentSliceMut, LentStream};

use crate::context::Context;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::stream::Stream;
use ::cudarc::driver::{CudaContext, CudaStream, DriverError};
use cuhost_driver_sys as sys;
use std::sync::Arc;

impl Context {
    /// This crate's value for a cudarc context: the same `CUcontext` (primary or not), kept
    /// alive by a clone of cudarc's `Arc` for as long as this value and its clones live. No
    /// driver call is made.
    pub fn from_cudarc(ctx: &Arc<CudaContext>) -> Context {
        let raw: sys::CUcontext = ctx.cu_ctx().cast();
        Context::kept_by(raw, Device::from_raw(ctx.cu_device()), ctx.clone())
    }

    /// cudarc's value for this context, which must be the device's primary context: cudarc
    /// retains it (`CudaContext::new`) and makes it current on the calling thread.
    ///
    /// # Errors
    ///
    /// A context other than the device's primary one is an [`Error::InvalidArgument`]
    /// (cudarc could only own such a context, and destroy it on drop); cudarc's failures come
    /// back as [`Error::Driver`] naming `CudaContext::new`.
    pub fn to_cudarc(&self) -> Result<Arc<CudaContext>> {
        let theirs = CudaContext::new(self.device().ordinal())
            .map_err(|e| from_cudarc_error("CudaContext::new", e))?;
        if theirs.cu_ctx().cast::<std::ffi::c_void>() != self.as_raw().cast::<std::ffi::c_void>() {
            return Err(Error::invalid(
                "Context::to_cudarc",
                "cudarc can share only the device's primary context, and this is another one; use \
                 Context::primary, or make the context with cudarc and bring it here with Context::from_cudarc",
            ));
        }
        Ok(theirs)
    }
}

impl Stream {
    /// This crate's value for a cudarc stream: the same `CUstream`, kept alive by a clone of
    /// cudarc's `Arc`, in [`Context::from_cudarc`] of its context. cudarc's default stream
    /// (the null handle, which cudarc's calls read as the legacy default stream) becomes
    /// [`Stream::legacy`]'s handle; its per-thread stream, [`Stream::per_thread`]'s. No driver
    /// call is made.
    ///
    /// Work queued through the value and through cudarc on the stream runs in the stream's
    /// order; nothing else is ordered (see [the module](crate::cudarc)).
    pub fn from_cudarc(stream: &Arc<CudaStream>) -> Stream {
        let ctx = Context::from_cudarc(stream.context());
        let raw: sys::CUstream = stream.cu_stream().cast();
        let raw = if raw.is_null() { sys::CU_STREAM_LEGACY } else { raw };
        Stream::kept_by(&ctx, raw, stream.clone())
    }
}

/// A cudarc error as this crate's, naming the cudarc call.
fn from_cudarc_error(call: &'static str, error: DriverError) -> Error {
    match crate::error::check(call, sys::CUresult(error.0 as u32)) {
        Err(e) => e,
        Ok(()) => Error::invalid(call, "cudarc reported success as an error"),
    }
}

/// Keeps the error cudarc stored in `ctx` from a call that could not return it (its events'
/// record and wait), if any, in this crate's context `ours`, as `Drop`s here do.
fn defer_cudarc_errors(theirs: &CudaContext, ours: &Context, call: &'static str) {
    if let Err(e) = theirs.check_err() {
        ours.defer(from_cudarc_error(call, e));
    }
}

/// cudarc's errors stored from calls that could not return them, as this crate's error.
fn cudarc_errors(theirs: &CudaContext, call: &'static str) -> Result<()> {
    theirs.check_err().map_err(|e| from_cudarc_error(call, e))
}
