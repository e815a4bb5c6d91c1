//! [`PinnedSlice`] and [`PinnedSliceMut`]: the host's view of a pinned buffer's elements, as
//! guards that keep graph launches which would race with the host from being queued.

#![forbid(unsafe_code)]

use crate::track::{Uses, checker, end_borrow};
use bytemuck::Pod;
use std::sync::Mutex;

/// The elements of a pinned buffer for reading, from [`PinnedBuffer::as_slice`] or
/// [`SharedPinnedBuffer::as_slice`]; it dereferences to `[T]`.
///
/// Taking it waited for the copies in flight that write the buffer. While it lives, no copy
/// that writes the buffer can be queued: a stream-ordered one needs the buffer borrowed
/// mutably, and a launch of a graph whose captured copies or memcpy nodes write it is refused
/// with an [`Error::InvalidArgument`](crate::error::Error::InvalidArgument).
///
/// [`PinnedBuffer::as_slice`]: super::PinnedBuffer::as_slice
/// [`SharedPinnedBuffer::as_slice`]: crate::graph::SharedPinnedBuffer::as_slice
pub struct PinnedSlice<'a, T: Pod> {
    slice: &'a [T],
    /// The tracker shared with graphs, held for reading until the guard drops; none for memory
    /// no graph uses.
    borrow: Option<&'a Mutex<Uses>>,
}

/// The elements of a pinned buffer for writing, from [`PinnedBuffer::as_mut_slice`] or
/// [`SharedPinnedBuffer::as_mut_slice`]; it dereferences to `[T]` mutably.
///
/// Taking it waited for every copy in flight that uses the buffer. While it lives, no copy
/// that uses the buffer can be queued: a stream-ordered one needs the buffer borrowed, and a
/// launch of a graph whose captured copies or memcpy nodes use it is refused with an
/// [`Error::InvalidArgument`](crate::error::Error::InvalidArgument).
///
/// [`PinnedBuffer::as_mut_slice`]: super::PinnedBuffer::as_mut_slice
/// [`SharedPinnedBuffer::as_mut_slice`]: crate::graph::SharedPinnedBuffer::as_mut_slice
pub struct PinnedSliceMut<'a, T: Pod> {
    slice: &'a mut [T],
    /// As in [`PinnedSlice`], held for writing.
    borrow: Option<&'a Mutex<Uses>>,
}

impl<'a, T: Pod> PinnedSlice<'a, T> {
    /// The guard over `slice`, whose borrow of `borrow` (begun for reading) it ends when it
    /// drops.
    pub(crate) fn new(slice: &'a [T], borrow: Option<&'a Mutex<Uses>>) -> PinnedSlice<'a, T> {
        checker::host_access(slice, false);
        PinnedSlice { slice, borrow }
    }
}

impl<'a, T: Pod> PinnedSliceMut<'a, T> {
    /// The guard over `slice`, whose borrow of `borrow` (begun for writing) it ends when it
    /// drops.
    pub(crate) fn new(slice: &'a mut [T], borrow: Option<&'a Mutex<Uses>>) -> PinnedSliceMut<'a, T> {
        checker::host_access(slice, true);
        PinnedSliceMut { slice, borrow }
    }
}

impl<T: Pod> std::ops::Deref for PinnedSlice<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.slice
    }
}

impl<T: Pod> std::ops::Deref for PinnedSliceMut<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.slice
    }
}

impl<T: Pod> std::ops::DerefMut for PinnedSliceMut<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.slice
    }
}

impl<T: Pod> AsRef<[T]> for PinnedSlice<'_, T> {
    fn as_ref(&self) -> &[T] {
        self.slice
    }
}

impl<T: Pod> AsRef<[T]> for PinnedSliceMut<'_, T> {
    fn as_ref(&self) -> &[T] {
        self.slice
    }
}

impl<T: Pod> AsMut<[T]> for PinnedSliceMut<'_, T> {
    fn as_mut(&mut self) -> &mut [T] {
        self.slice
    }
}

impl<T: Pod> Drop for PinnedSlice<'_, T> {
    fn drop(&mut self) {
        // The guard's span ends: a copy queued while it lived and not ordered with it shows.
        checker::host_access(self.slice, false);
        if let Some(uses) = self.borrow {
            end_borrow(uses, false);
        }
    }
}

impl<T: Pod> Drop for PinnedSliceMut<'_, T> {
    fn drop(&mut self) {
        checker::host_access(self.slice, true);
        if let Some(uses) = self.borrow {
            end_borrow(uses, true);
        }
    }
}

impl<T: Pod + std::fmt::Debug> std::fmt::Debug for PinnedSlice<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.slice.fmt(f)
    }
}

impl<T: Pod + std::fmt::Debug> std::fmt::Debug for PinnedSliceMut<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.slice.fmt(f)
    }
}

/// Compares the elements, as slices compare.
macro_rules! slice_eq {
    ($guard:ident) => {
        impl<T: Pod + PartialEq> PartialEq<[T]> for $guard<'_, T> {
            fn eq(&self, other: &[T]) -> bool {
                *self.slice == *other
            }
        }
        impl<T: Pod + PartialEq> PartialEq<&[T]> for $guard<'_, T> {
            fn eq(&self, other: &&[T]) -> bool {
                *self.slice == **other
            }
        }
        impl<T: Pod + PartialEq> PartialEq<Vec<T>> for $guard<'_, T> {
            fn eq(&self, other: &Vec<T>) -> bool {
                *self.slice == **other
            }
        }
        impl<T: Pod + PartialEq, const N: usize> PartialEq<[T; N]> for $guard<'_, T> {
            fn eq(&self, other: &[T; N]) -> bool {
                *self.slice == *other
            }
        }
        impl<T: Pod + PartialEq> PartialEq<PinnedSlice<'_, T>> for $guard<'_, T> {
            fn eq(&self, other: &PinnedSlice<'_, T>) -> bool {
                *self.slice == *other.slice
            }
        }
        impl<T: Pod + PartialEq> PartialEq<PinnedSliceMut<'_, T>> for $guard<'_, T> {
            fn eq(&self, other: &PinnedSliceMut<'_, T>) -> bool {
                *self.slice == *other.slice
            }
        }
    };
}

slice_eq!(PinnedSlice);
slice_eq!(PinnedSliceMut);
