//! Which streams are being captured into a graph, and what copies captured there took: work
//! queued on a capturing stream runs at the graph's launches, not now, so what tracks work in
//! flight (pinned buffers, the cross-stream rule) must not record it as queued.

use super::Stream;
use crate::error::{Error, Result};
use cuda_driver_sys as sys;
use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Something captured work uses, handed to the capture's graph when the capture ends (the
/// graph keeps it, and looks into it at instantiation).
pub(crate) type Taken = Arc<dyn Any + Send + Sync>;

/// How many captures begun through this crate are under way: while none is, no stream is
/// asked whether it is capturing (one atomic load on the copy path).
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// What copies captured so far took, by capture id, until their capture ends.
static TAKEN: Mutex<Vec<(u64, Taken)>> = Mutex::new(Vec::new());

/// A capture under way, as work queued on one of its streams sees it.
pub(crate) struct CaptureRef(u64);

impl CaptureRef {
    /// Hands `item` to the graph the capture makes.
    pub(crate) fn note(&self, item: Taken) {
        TAKEN.lock().unwrap_or_else(PoisonError::into_inner).push((self.0, item));
    }
}

/// The capture `stream` takes part in, if any: one begun through this crate (captures begun
/// through raw calls are not seen). Costs one atomic load while no capture is under way.
#[inline]
pub(crate) fn capture_of(stream: &Stream) -> Result<Option<CaptureRef>> {
    if ACTIVE.load(Ordering::Acquire) == 0 {
        return Ok(None);
    }
    Ok(capture_id(stream)?.map(CaptureRef))
}

/// The id of the capture `stream` takes part in, if it is capturing.
#[cold]
fn capture_id(stream: &Stream) -> Result<Option<u64>> {
    stream.bind_if_default()?;
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut id = 0;
    // SAFETY: the stream is live; two out-parameters, null for what is not asked.
    unsafe {
        driver!(cuStreamGetCaptureInfo(
            stream.as_raw(),
            &mut status,
            &mut id,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        ))
    }?;
    Ok((status == sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE).then_some(id))
}

/// Begins a capture with `begin` (a `cuStreamBeginCapture` call on `stream`), counted as under
/// way from before the call, and returns its id. Each success is matched by one [`ended`].
pub(crate) fn begin(stream: &Stream, begin: impl FnOnce() -> Result<()>) -> Result<u64> {
    ACTIVE.fetch_add(1, Ordering::AcqRel);
    match begin().and_then(|()| capture_id(stream)) {
        Ok(Some(id)) => Ok(id),
        Ok(None) => {
            ACTIVE.fetch_sub(1, Ordering::AcqRel);
            Err(Error::invalid("begin_capture", "the stream is not capturing after cuStreamBeginCapture"))
        }
        Err(e) => {
            ACTIVE.fetch_sub(1, Ordering::AcqRel);
            Err(e)
        }
    }
}

/// The capture `id`, begun with [`begin`], has ended (or failed): returns what its copies took.
pub(crate) fn ended(id: u64) -> Vec<Taken> {
    ACTIVE.fetch_sub(1, Ordering::AcqRel);
    let mut taken = TAKEN.lock().unwrap_or_else(PoisonError::into_inner);
    let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut *taken).into_iter().partition(|(i, _)| *i == id);
    *taken = rest;
    mine.into_iter().map(|(_, item)| item).collect()
}
