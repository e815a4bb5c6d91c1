//! [`HeldStream`]: how an owner of memory holds the stream its memory is given back on.

#![forbid(unsafe_code)]

use super::{GraphAlloc, StreamUses};
use crate::stream::Stream;
use std::mem::ManuallyDrop;
use std::sync::Arc;

/// A buffer's hold on its stream.
pub(crate) enum HeldStream {
    /// A counted handle of its own.
    Counted(Stream),
    /// An uncounted copy of the handle that the default pool's arena of the stream holds while
    /// the buffer's allocation is in use: making and dropping the buffer costs no reference
    /// count. It must not be used once the allocation has been given back.
    Kept(ManuallyDrop<Stream>),
    /// Memory allocated while the stream was being captured: a graph memory node, which holds
    /// the stream (see [`captured`](super::captured)).
    Captured(Arc<GraphAlloc>),
}

impl HeldStream {
    /// Whether the buffer's release must look beyond its noted streams: a per-thread default
    /// stream (which another thread cannot name) or graph memory.
    #[inline]
    pub(crate) fn is_careful(&self) -> bool {
        matches!(self, HeldStream::Captured(_)) || self.is_per_thread()
    }

    /// The stream uses a buffer starts with: none noted, or for graph memory, its allocation.
    #[inline]
    pub(crate) fn uses(&self) -> StreamUses {
        match self {
            HeldStream::Captured(alloc) => StreamUses::graph(alloc.clone()),
            _ => StreamUses::new(),
        }
    }
}

/// The stream on which work on an owner's memory is ordered without being noted: none for
/// graph memory, each of whose uses is looked at (it exists only inside its capture).
pub(crate) trait OwnStream {
    /// The stream, if uses there need no note.
    fn own(&self) -> Option<&Stream>;
}

impl OwnStream for Stream {
    #[inline]
    fn own(&self) -> Option<&Stream> {
        Some(self)
    }
}

impl OwnStream for HeldStream {
    #[inline]
    fn own(&self) -> Option<&Stream> {
        match self {
            HeldStream::Captured(_) => None,
            _ => Some(self),
        }
    }
}

impl std::ops::Deref for HeldStream {
    type Target = Stream;

    #[inline]
    fn deref(&self) -> &Stream {
        match self {
            HeldStream::Counted(s) => s,
            HeldStream::Kept(s) => s,
            HeldStream::Captured(alloc) => alloc.stream(),
        }
    }
}
