//! Ordering on request: [`StreamOrdering::Implicit`] orders every use of a piece of memory after
//! the last write on another stream, and every write after the reads since, as cudarc does with a
//! read and a write event per slice.
//!
//! The rule of [this room](super) never needs it: it keeps memory from being given back, or
//! handed to a next owner, under queued work, whatever the program does. What it leaves to the
//! program is the order of the program's own work on one piece of memory from two streams (a
//! kernel that writes a buffer on one stream and a copy that reads it on another). That is a
//! race of the program's own, category (d) of the checker; this mode makes the crate order such
//! work itself.
//!
//! It costs nothing while it is off: the same-stream path reads one more flag. While it is on,
//! every use takes the memory's lock; a use on the stream that wrote last, or a read on a
//! stream that is already ordered after the last write, queues nothing; any other use records
//! one event on each stream it must come after (at the moment of the use, so the event covers
//! the write and whatever that stream queued before it) and waits for it on its own stream.

use super::stream_uses::wait_for;
use crate::error::Result;
use crate::stream::Stream;
use std::sync::atomic::{AtomicBool, Ordering};

/// How work that touches one piece of memory from several streams is ordered: set for the
/// whole process with [`set_stream_ordering`].
///
/// Whichever is chosen, memory is never given back, nor handed to its next owner, while work
/// queued on any stream may still use it (the guide's `safety.md` states that rule).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum StreamOrdering {
    /// The program orders its own work on one piece of memory across streams (with events,
    /// [`Stream::wait_event`], or one stream): nothing is added on any stream for it. The
    /// default, and the fastest.
    #[default]
    Explicit,
    /// The crate orders it: a safe call that queues work reading memory on a stream first makes
    /// that stream wait for the last write to it queued on another stream, and one that queues
    /// a write waits for that write and for every read since, as cudarc's per-slice events do.
    ///
    /// What counts as a read: the source of a copy, a collective's send buffer, a kernel
    /// argument passed as a shared borrow (`&buffer`, `&view`, a [`DeviceView`](crate::DeviceView)
    /// by value). Everything else a call touches is a write, kernel arguments passed as
    /// `&mut buffer` or [`DeviceViewMut`](crate::DeviceViewMut) included. Synchronous copies
    /// and memsets count on the stream they run on.
    ///
    /// Uses made while the mode is on are ordered; memory whose last write was made before it
    /// was turned on counts as written on its own stream. Work captured into a graph is not
    /// ordered by it (a capture cannot wait for work outside it), nor work reached only
    /// through raw addresses, nor copies between pinned host buffers and the host (their
    /// trackers order those anyway).
    Implicit,
}

static IMPLICIT: AtomicBool = AtomicBool::new(false);

/// Chooses how the process orders work that touches one piece of memory from several streams
/// (see [`StreamOrdering`]); takes effect for the uses that follow, on every thread.
pub fn set_stream_ordering(ordering: StreamOrdering) {
    IMPLICIT.store(ordering == StreamOrdering::Implicit, Ordering::SeqCst);
}

/// How the process orders work that touches one piece of memory from several streams now.
pub fn stream_ordering() -> StreamOrdering {
    match implicit() {
        true => StreamOrdering::Implicit,
        false => StreamOrdering::Explicit,
    }
}

/// Whether [`StreamOrdering::Implicit`] is on.
#[inline]
pub(crate) fn implicit() -> bool {
    IMPLICIT.load(Ordering::Relaxed)
}

/// What queued work does to memory: the mode orders writes after reads, and every use after a
/// write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// The work only reads the memory.
    Read,
    /// The work may write it (and read it).
    Write,
}

impl Access {
    /// A write where `writes`, else a read.
    #[inline]
    pub(crate) fn of(writes: bool) -> Access {
        match writes {
            true => Access::Write,
            false => Access::Read,
        }
    }
}

/// The order of one piece of memory's uses so far, in the mode: which stream wrote it last and
/// which streams read it since.
#[derive(Debug, Default)]
pub(crate) struct LastUses {
    /// The stream of the last write; none: the memory's own stream (or, for memory without
    /// one, nothing to wait for).
    writer: Option<Stream>,
    /// The streams other than the writer's that read the memory since the last write, each
    /// made to wait for it.
    readers: Vec<Stream>,
}

impl LastUses {
    /// The streams that work of `access` on `stream` must wait for first, `own` being the
    /// memory's own stream. The caller makes the waits outside the memory's lock (one may be a
    /// host wait) and then [`commit`](Self::commit)s the use.
    pub(crate) fn plan(&self, own: Option<&Stream>, stream: &Stream, access: Access) -> Vec<Stream> {
        let writer = self.writer.as_ref().or(own).filter(|w| *w != stream);
        match access {
            Access::Read if self.readers.contains(stream) => Vec::new(),
            Access::Read => writer.cloned().into_iter().collect(),
            Access::Write => {
                let mut waits: Vec<Stream> = writer.cloned().into_iter().collect();
                for reader in self.readers.iter().filter(|r| *r != stream) {
                    if !waits.contains(reader) {
                        waits.push(reader.clone());
                    }
                }
                waits
            }
        }
    }

    /// Notes a use whose waits ([`plan`](Self::plan)) were made: a read on a stream other than
    /// the writer's (any stream, while nothing wrote memory without an own stream) joins the
    /// readers; a write makes `stream` the writer, with no reader since.
    pub(crate) fn commit(&mut self, own: Option<&Stream>, stream: &Stream, access: Access) {
        match access {
            Access::Read => {
                let writer = self.writer.as_ref().or(own);
                if writer.is_none_or(|w| w != stream) && !self.readers.contains(stream) {
                    self.readers.push(stream.clone());
                }
            }
            Access::Write => {
                self.readers.clear();
                self.writer = match own {
                    Some(own) if own == stream => None,
                    _ => Some(stream.clone()),
                };
            }
        }
    }
}

/// Makes `stream` wait for the work queued so far on each of `earlier` (see [`wait_for`]).
pub(crate) fn wait_all(stream: &Stream, earlier: &[Stream]) -> Result<()> {
    earlier.iter().try_for_each(|e| wait_for(stream, e).map(drop))
}
