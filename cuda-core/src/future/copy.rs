//! Copies to the host as futures: [`ToVec`] resolves to the data, [`ToPinned`] to a filled
//! pinned buffer.

#![forbid(unsafe_code)]

use super::completion::Completion;
use crate::error::{Error, Result};
use crate::memory::{DeviceBuffer, DeviceView, MemorySpace, PinnedBuffer, PinnedSlice};
use crate::stream::Stream;
use bytemuck::Pod;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll, ready};

/// Resolves to the elements of a device view, copied to the host on a stream
/// ([`DeviceView::to_vec_async`]).
///
/// It borrows the device memory until it resolves or is dropped, and owns the pinned staging
/// buffer the copy writes: dropped while the copy runs, the staging memory goes back to its
/// pinned allocator only after the copy (see the [module documentation](super)).
#[must_use = "a future does nothing unless awaited; dropping it cancels the wait, not the copy"]
#[derive(Debug)]
pub struct ToVec<'a, T: Pod> {
    /// The copy's destination; `None` for an empty view, or once resolved.
    staging: Option<PinnedBuffer<T>>,
    done: Option<Completion>,
    /// Whether the future resolved (a later poll is an error, also for an empty view).
    resolved: bool,
    _source: PhantomData<&'a [T]>,
}

// Nothing of it is pinned: the staging buffer's memory is on the heap and moves with nothing.
impl<T: Pod> Unpin for ToVec<'_, T> {}

impl<T: Pod> Future for ToVec<'_, T> {
    type Output = Result<Vec<T>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Result<Vec<T>>> {
        if self.resolved {
            return Poll::Ready(Err(super::slot::polled_after_completion()));
        }
        if let Some(done) = self.done.as_mut() {
            ready!(Pin::new(done).poll(cx))?;
        }
        self.resolved = true;
        // An empty view copied nothing.
        let Some(staging) = self.staging.take() else { return Poll::Ready(Ok(Vec::new())) };
        // The copy is done: `to_vec` finds its event complete and waits no more.
        Poll::Ready(staging.to_vec())
    }
}

/// Resolves to the elements of a pinned buffer that a copy from a device view filled
/// ([`DeviceView::to_pinned_async`]), as a guard over them.
///
/// It borrows the pinned buffer mutably, and the device memory, until it resolves or is
/// dropped. Dropped while the copy runs, the buffer still records the copy: reading it
/// ([`PinnedBuffer::as_slice`]) waits for it, and dropping the buffer defers its release.
#[must_use = "a future does nothing unless awaited; dropping it cancels the wait, not the copy"]
#[derive(Debug)]
pub struct ToPinned<'b, T: Pod> {
    dst: Option<&'b mut PinnedBuffer<T>>,
    done: Completion,
}

impl<'b, T: Pod> Future for ToPinned<'b, T> {
    type Output = Result<PinnedSlice<'b, T>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Result<PinnedSlice<'b, T>>> {
        ready!(Pin::new(&mut self.done).poll(cx))?;
        let dst: &'b PinnedBuffer<T> = self.dst.take().ok_or_else(super::slot::polled_after_completion)?;
        Poll::Ready(dst.as_slice())
    }
}

impl<'a, T: Pod> DeviceView<'a, T> {
    /// A future that resolves to the view's elements, copied to the host on `stream`: the
    /// async form of [`to_vec`](Self::to_vec). Feature `async`; see [`future`](crate::future).
    ///
    /// Queues the copy now, into a pinned staging buffer from the thread's pinned allocator
    /// (by default the [`PinnedMemoryPool`](crate::pool::PinnedMemoryPool)), and a marker
    /// after it; the future copies the staging buffer into the `Vec` once the GPU is past the
    /// marker. On a stream other than the view's own, the copy first waits for the work queued
    /// so far on the view's stream, and the view's buffer is given back only after the copy
    /// (the stream rule, see [`DeviceBuffer`]); work queued afterwards on the view's own
    /// stream is not ordered with the copy.
    ///
    /// A default stream of another context or thread, or a stream being captured, is an
    /// [`Error::InvalidArgument`]; the allocation's, the copy's and the wait's errors are
    /// returned or resolved with. The staging buffer is zeroed first: should another thread
    /// join the stream into its capture while the call runs (see
    /// [`begin_capture`](crate::Stream::begin_capture)), the copy runs only in that graph and
    /// the future resolves to zeros, never to uninitialised memory.
    pub fn to_vec_async(&self, stream: &Stream) -> Result<ToVec<'a, T>> {
        if self.is_empty() {
            return Ok(ToVec { staging: None, done: None, resolved: false, _source: PhantomData });
        }
        refuse_capture(stream)?;
        // Zeroed, not left uninitialised: another thread may join the stream into its capture
        // between the check above and the copy, and end the capture before the marker's own
        // check; the copy then runs only in that graph, and the marker completes without it.
        let mut staging = PinnedBuffer::<T>::new(self.len())?;
        self.copy_to_pinned_async(&mut staging, stream)?;
        let done = Completion::after(stream)?;
        Ok(ToVec { staging: Some(staging), done: Some(done), resolved: false, _source: PhantomData })
    }

    /// A future that resolves to `dst`'s elements once a copy of the view into it, queued now
    /// on `stream`, is done: [`copy_to_pinned_async`](Self::copy_to_pinned_async) and a wait,
    /// without blocking. Feature `async`; see [`future`](crate::future).
    ///
    /// `dst` is borrowed until the future resolves or is dropped; after a drop the copy is
    /// still recorded on it (see [`ToPinned`]). Fails as `copy_to_pinned_async` does, and
    /// with an [`Error::InvalidArgument`] on a stream being captured.
    pub fn to_pinned_async<'b>(
        &self,
        dst: &'b mut PinnedBuffer<T>,
        stream: &Stream,
    ) -> Result<ToPinned<'b, T>>
    where
        'a: 'b,
    {
        refuse_capture(stream)?;
        self.copy_to_pinned_async(dst, stream)?;
        let done = Completion::after(stream)?;
        Ok(ToPinned { dst: Some(dst), done })
    }
}

impl<T: Pod, S: MemorySpace> DeviceBuffer<T, S> {
    /// [`DeviceView::to_vec_async`] of the whole buffer. Feature `async`.
    ///
    /// Fails as [`DeviceView::to_vec_async`] does (an [`Error::InvalidArgument`](crate::error::Error)
    /// on a capturing stream, or the driver's status of the copy).
    pub fn to_vec_async(&self, stream: &Stream) -> Result<ToVec<'_, T>> {
        self.view().to_vec_async(stream)
    }

    /// [`DeviceView::to_pinned_async`] of the whole buffer. Feature `async`.
    ///
    /// Fails as [`DeviceView::to_pinned_async`] does (an
    /// [`Error::InvalidArgument`](crate::error::Error) for lengths that differ or a capturing
    /// stream, or the driver's status of the copy).
    pub fn to_pinned_async<'b>(
        &'b self,
        dst: &'b mut PinnedBuffer<T>,
        stream: &Stream,
    ) -> Result<ToPinned<'b, T>> {
        self.view().to_pinned_async(dst, stream)
    }
}

fn refuse_capture(stream: &Stream) -> Result<()> {
    if crate::stream::capture_of(stream)?.is_some() {
        return Err(Error::refused(
            crate::error::Reason::DURING_CAPTURE,
            "DeviceView::to_vec_async",
            "the stream is being captured into a graph, where the copy would run only at its launches; \
             queue the copy outside the capture",
        ));
    }
    Ok(())
}
