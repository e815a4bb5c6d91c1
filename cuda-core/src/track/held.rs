//! [`HeldStream`]: how an owner of memory holds the stream its memory is given back on.

#![forbid(unsafe_code)]

use crate::stream::Stream;
use std::mem::ManuallyDrop;

/// A buffer's hold on its stream.
pub(crate) enum HeldStream {
    /// A counted handle of its own.
    Counted(Stream),
    /// An uncounted copy of the handle that the default pool's arena of the stream holds while
    /// the buffer's allocation is in use: making and dropping the buffer costs no reference
    /// count. It must not be used once the allocation has been given back.
    Kept(ManuallyDrop<Stream>),
}

impl std::ops::Deref for HeldStream {
    type Target = Stream;

    #[inline]
    fn deref(&self) -> &Stream {
        match self {
            HeldStream::Counted(s) => s,
            HeldStream::Kept(s) => s,
        }
    }
}
