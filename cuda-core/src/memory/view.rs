//! Borrowed views of device memory: [`DeviceView`] (shared) and [`DeviceViewMut`] (exclusive).

use crate::context::Context;
use crate::error::{Error, Result};
use crate::stream::{Stream, other_threads_stream};
use crate::track::{Access, StreamUses};
use bytemuck::Pod;
use cuhost_driver_sys as sys;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};

/// A shared view of `len` elements of `T` in device memory, borrowed from a buffer.
///
/// Its synchronous copies run in the order of the stream the buffer is ordered on (the default
/// stream for a view made with [`from_raw`](Self::from_raw)) and return when they are done.
#[derive(Debug)]
pub struct DeviceView<'a, T> {
    /// The device address of the first element; a kernel argument points at this field.
    pub(crate) ptr: sys::CUdeviceptr,
    pub(crate) len: usize,
    pub(crate) ctx: &'a Context,
    /// The stream the viewed buffer is ordered on (none: the default stream), where the
    /// view's synchronous copies and memsets run.
    pub(crate) stream: Option<&'a Stream>,
    /// Where work queued on other streams is noted, for the owner's release to wait for it.
    pub(crate) track: Option<Track<'a>>,
    pub(crate) _marker: PhantomData<&'a [T]>,
}

impl<T> Clone for DeviceView<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for DeviceView<'_, T> {}

/// An exclusive view of `len` elements of `T` in device memory, borrowed from a buffer.
///
/// Its synchronous copies and memsets run as [`DeviceView`]'s do.
#[derive(Debug)]
pub struct DeviceViewMut<'a, T> {
    /// The device address of the first element; a kernel argument points at this field.
    pub(crate) ptr: sys::CUdeviceptr,
    pub(crate) len: usize,
    pub(crate) ctx: &'a Context,
    /// The stream the viewed buffer is ordered on (none: the default stream), where the
    /// view's synchronous copies and memsets run.
    pub(crate) stream: Option<&'a Stream>,
    /// Where work queued on other streams is noted, for the owner's release to wait for it.
    pub(crate) track: Option<Track<'a>>,
    pub(crate) _marker: PhantomData<&'a mut [T]>,
}

/// The owner's side of a view: the stream its memory is ordered on (none for memory that is not
/// stream-ordered), and the list of other streams that work touching the memory was queued on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Track<'a> {
    pub(crate) own: Option<&'a Stream>,
    pub(crate) uses: &'a StreamUses,
}

impl Track<'_> {
    #[cfg(feature = "texture")]
    /// Notes that a kernel reading or writing the memory through another handle (a texture, a
    /// tensor map) is about to be launched on `stream`, with `stream`'s context current.
    #[inline]
    pub(crate) fn note_launch(&self, stream: &Stream) -> Result<()> {
        self.uses.note(stream.context(), self.own, stream, Access::Write)
    }
}

// SAFETY: a view is an address, a length, a context reference and a stream handle that the
// borrowed buffer keeps alive; the driver may be called with them from any thread.
unsafe impl<T: Sync> Send for DeviceView<'_, T> {}
// SAFETY: as above; shared access only reads the fields.
unsafe impl<T: Sync> Sync for DeviceView<'_, T> {}
// SAFETY: as for `DeviceView`; the exclusive borrow moves with the value.
unsafe impl<T: Send> Send for DeviceViewMut<'_, T> {}
// SAFETY: as for `DeviceView`.
unsafe impl<T: Sync> Sync for DeviceViewMut<'_, T> {}

pub(crate) fn range_of(
    operation: &'static str,
    range: impl RangeBounds<usize>,
    len: usize,
) -> Result<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => len,
    };
    if start > end || end > len {
        return Err(Error::refused(
            crate::error::Reason::OUT_OF_BOUNDS,
            operation,
            format!("range {start}..{end} is out of bounds of a view of {len} elements"),
        ));
    }
    Ok((start, end))
}

pub(crate) fn cast_check<T, U>(operation: &'static str, ptr: sys::CUdeviceptr, len: usize) -> Result<usize> {
    let bytes = len * std::mem::size_of::<T>();
    let (size, align) = (std::mem::size_of::<U>(), std::mem::align_of::<U>());
    if size == 0 {
        return Err(Error::invalid(operation, "cannot view device memory as a zero-sized type"));
    }
    if ptr % align as u64 != 0 {
        return Err(Error::invalid(
            operation,
            format!("device address {ptr:#x} is not aligned to {align} bytes, as the target type needs"),
        ));
    }
    if bytes % size != 0 {
        return Err(Error::invalid(
            operation,
            format!("{bytes} bytes are not a whole number of {size}-byte elements"),
        ));
    }
    Ok(bytes / size)
}

macro_rules! common {
    ($name:ident) => {
        impl<'a, T: Pod> $name<'a, T> {
            /// Wraps a device address.
            ///
            /// # Safety
            ///
            /// `ptr` must be `len` elements of `T` of device memory of `ctx`, valid (and, for
            /// a mutable view, not accessed through anything else) for `'a` and until the work
            /// queued through the view (its `_async` operations, kernels it is passed to) on
            /// any stream has completed: a view made this way has no owner that would wait
            /// for that work.
            pub unsafe fn from_raw(ctx: &'a Context, ptr: sys::CUdeviceptr, len: usize) -> Self {
                $name { ptr, len, ctx, stream: None, track: None, _marker: PhantomData }
            }

            /// A view of memory ordered on `stream` whose owner notes other streams in `uses`
            /// and waits for them before it gives the memory back.
            #[inline]
            pub(crate) fn tracked(
                ptr: sys::CUdeviceptr,
                len: usize,
                stream: &'a Stream,
                own: Option<&'a Stream>,
                uses: &'a StreamUses,
            ) -> Self {
                let track = Some(Track { own, uses });
                $name { ptr, len, ctx: stream.context(), stream: Some(stream), track, _marker: PhantomData }
            }

            /// A view of `len` elements at `ptr` in `ctx`, of memory that is not ordered on a
            /// stream: its owner notes every stream work through the view is queued on in
            /// `uses` (`sync_on` included), and waits for them before it gives the memory
            /// back. Its synchronous copies run on `sync_on`, or on the default stream, as
            /// [`from_raw`](Self::from_raw)'s do.
            #[inline]
            pub(crate) fn unordered(
                ctx: &'a Context,
                ptr: sys::CUdeviceptr,
                len: usize,
                sync_on: Option<&'a Stream>,
                uses: &'a StreamUses,
            ) -> Self {
                let track = Some(Track { own: None, uses });
                $name { ptr, len, ctx, stream: sync_on, track, _marker: PhantomData }
            }

            /// Notes that work touching the view (`access`) is about to be queued on
            /// `stream` with `current` made current, so that the owner's release waits for
            /// it: nothing to do on the owner's stream. A default stream that would not name
            /// `stream` there is an [`Error::InvalidArgument`].
            #[inline]
            pub(crate) fn used_on(&self, current: &Context, stream: &Stream, access: Access) -> Result<()> {
                match self.track {
                    Some(t) => t.uses.note(current, t.own, stream, access),
                    None => Ok(()),
                }
            }

            /// Refuses a synchronous copy or memset of memory that exists only inside a
            /// graph's launches (allocated in a stream capture, see
            /// [the rule](crate::track)); free for memory ordered on a stream. While the
            /// process orders uses itself ([`StreamOrdering::Implicit`](crate::stream::StreamOrdering)),
            /// notes the use (`access`) on the view's stream, with the view's context current.
            #[inline]
            pub(crate) fn check_sync(&self, access: Access) -> Result<()> {
                let Some(t) = self.track else { return Ok(()) };
                if t.own.is_none() {
                    t.uses.check_sync()?;
                }
                if crate::track::ordering::implicit() {
                    self.note_sync(t, access)?;
                }
                Ok(())
            }

            /// Notes a synchronous use on the view's stream (for a view without one, the
            /// default stream synchronous calls run on), for
            /// [`StreamOrdering::Implicit`](crate::stream::StreamOrdering).
            #[cold]
            fn note_sync(&self, t: Track<'_>, access: Access) -> Result<()> {
                self.ctx.enter()?;
                match self.stream {
                    Some(s) => t.uses.note(self.ctx, t.own, s, access),
                    None => t.uses.note(self.ctx, t.own, &Stream::synchronous(self.ctx), access),
                }
            }

            /// Readies the view for a synchronous copy made on the raw stream `on` (null: the
            /// legacy default stream) that reads it or writes it (`access`): as
            /// [`check_sync`](Self::check_sync), then, where `on` is not the view's stream,
            /// waits on the host for the work queued on the view's stream (its owner's, and
            /// that of the block's earlier owners).
            pub(crate) fn settle_for_sync(&self, on: sys::CUstream, access: Access) -> Result<()> {
                self.check_sync(access)?;
                if self.sync_stream()? != on {
                    self.ctx.enter()?;
                    self.synchronize_stream()?;
                }
                Ok(())
            }

            #[cfg(feature = "nccl")]
            /// Notes that a call inside the open NCCL group `group` uses the view's memory
            /// (see [`DeviceBuffer::taken_by_group`](crate::memory::DeviceBuffer)).
            #[inline]
            pub(crate) fn taken_by_group(&self, group: u64) {
                if let Some(t) = self.track {
                    t.uses.note_group(group);
                }
            }

            /// The handle of the view's stream, for its synchronous copies and memsets (null:
            /// the current context's default stream). A per-thread default stream made on
            /// another thread is refused: its handle would name this thread's stream, which
            /// is not ordered after the work the buffer's owner queued.
            #[inline]
            pub(crate) fn sync_stream(&self) -> Result<sys::CUstream> {
                match self.stream {
                    Some(s) if s.is_other_threads() => Err(other_threads_stream()),
                    Some(s) => Ok(s.as_raw()),
                    None => Ok(std::ptr::null_mut()),
                }
            }

            /// Waits for the work queued so far on the view's stream, with the view's context
            /// current.
            #[inline]
            pub(crate) fn synchronize_stream(&self) -> Result<()> {
                let raw = self.sync_stream()?;
                // SAFETY: the stream outlives the view (the buffer holds it), or is the default
                // stream of the current context, which the caller made current.
                unsafe { driver!(cuStreamSynchronize(raw)) }
            }

            /// The device address of the first element.
            #[inline]
            pub fn as_raw(&self) -> sys::CUdeviceptr {
                self.ptr
            }

            super::element_count!();

            /// The context the memory belongs to.
            #[inline]
            pub fn context(&self) -> &'a Context {
                self.ctx
            }

            /// A shared sub-view; a range past the end is an [`Error::InvalidArgument`].
            pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceView<'_, T>> {
                let (start, end) = range_of("slice", range, self.len)?;
                Ok(DeviceView {
                    ptr: self.ptr + (start * std::mem::size_of::<T>()) as u64,
                    len: end - start,
                    ctx: self.ctx,
                    stream: self.stream,
                    track: self.track,
                    _marker: PhantomData,
                })
            }

            /// The same memory as elements of `U`; an address not aligned for `U` or a size that
            /// is not a whole number of `U`s is an [`Error::InvalidArgument`].
            pub fn cast<U: Pod>(&self) -> Result<DeviceView<'_, U>> {
                let len = cast_check::<T, U>("cast", self.ptr, self.len)?;
                Ok(DeviceView {
                    ptr: self.ptr,
                    len,
                    ctx: self.ctx,
                    stream: self.stream,
                    track: self.track,
                    _marker: PhantomData,
                })
            }
        }
    };
}

common!(DeviceView);
common!(DeviceViewMut);

impl<'a, T: Pod> DeviceViewMut<'a, T> {
    /// A shorter-lived shared view of the same memory.
    pub fn as_view(&self) -> DeviceView<'_, T> {
        DeviceView {
            ptr: self.ptr,
            len: self.len,
            ctx: self.ctx,
            stream: self.stream,
            track: self.track,
            _marker: PhantomData,
        }
    }

    /// A shorter-lived exclusive view of the same memory.
    pub fn reborrow(&mut self) -> DeviceViewMut<'_, T> {
        DeviceViewMut {
            ptr: self.ptr,
            len: self.len,
            ctx: self.ctx,
            stream: self.stream,
            track: self.track,
            _marker: PhantomData,
        }
    }

    /// An exclusive sub-view; a range past the end is an [`Error::InvalidArgument`].
    pub fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> Result<DeviceViewMut<'_, T>> {
        let (start, end) = range_of("slice_mut", range, self.len)?;
        Ok(DeviceViewMut {
            ptr: self.ptr + (start * std::mem::size_of::<T>()) as u64,
            len: end - start,
            ctx: self.ctx,
            stream: self.stream,
            track: self.track,
            _marker: PhantomData,
        })
    }

    /// Splits into two exclusive views at element `mid`; a `mid` past the end is an
    /// [`Error::InvalidArgument`].
    pub fn split_at_mut(&mut self, mid: usize) -> Result<(DeviceViewMut<'_, T>, DeviceViewMut<'_, T>)> {
        if mid > self.len {
            return Err(Error::refused(
                crate::error::Reason::OUT_OF_BOUNDS,
                "split_at_mut",
                format!("split point {mid} is past the end of a view of {} elements", self.len),
            ));
        }
        let second = self.ptr + (mid * std::mem::size_of::<T>()) as u64;
        Ok((
            DeviceViewMut {
                ptr: self.ptr,
                len: mid,
                ctx: self.ctx,
                stream: self.stream,
                track: self.track,
                _marker: PhantomData,
            },
            DeviceViewMut {
                ptr: second,
                len: self.len - mid,
                ctx: self.ctx,
                stream: self.stream,
                track: self.track,
                _marker: PhantomData,
            },
        ))
    }

    /// The same memory as elements of `U`, exclusively; an address not aligned for `U` or a
    /// size that is not a whole number of `U`s is an [`Error::InvalidArgument`], as for
    /// [`DeviceView::cast`].
    pub fn cast_mut<U: Pod>(&mut self) -> Result<DeviceViewMut<'_, U>> {
        let len = cast_check::<T, U>("cast_mut", self.ptr, self.len)?;
        Ok(DeviceViewMut {
            ptr: self.ptr,
            len,
            ctx: self.ctx,
            stream: self.stream,
            track: self.track,
            _marker: PhantomData,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_bounds_checked() {
        assert_eq!(range_of("t", .., 10).ok(), Some((0, 10)));
        assert_eq!(range_of("t", 2..=4, 10).ok(), Some((2, 5)));
        assert_eq!(range_of("t", 10..10, 10).ok(), Some((10, 10)));
        assert!(range_of("t", 5..11, 10).is_err());
        let (a, b) = (6, 5);
        assert!(range_of("t", a..b, 10).is_err());
        assert!(range_of("t", usize::MAX.., 10).is_err());
    }

    #[test]
    fn casts_check_alignment_and_whole_elements() {
        assert_eq!(cast_check::<u8, u32>("t", 0x1000, 8).ok(), Some(2));
        assert!(cast_check::<u8, u32>("t", 0x1001, 8).is_err());
        assert!(cast_check::<u8, u32>("t", 0x1000, 6).is_err());
        assert_eq!(cast_check::<u64, u16>("t", 0x1000, 3).ok(), Some(12));
        assert!(cast_check::<u8, ()>("t", 0x1000, 4).is_err());
    }
}
