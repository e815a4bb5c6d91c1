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

#![forbid(unsafe_code)]

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
    /// was last turned on counts as written on its own stream. Calls made on two threads at once
    /// (a surface or texture used on both, say) keep the record whole: a use noted while
    /// another was being ordered orders itself again. Which of two such calls comes first is
    /// the program's to say, as it is on the host: a write whose call has not returned may be
    /// queued after a read made meanwhile on another thread. A use of memory that an NCCL group still open on another
    /// thread uses is refused with [`Error::InvalidArgument`](crate::Error::InvalidArgument):
    /// the group's calls are queued only when it ends.
    ///
    /// Not ordered by it: work captured into a graph (a capture cannot wait for work outside
    /// it), work reached only through raw addresses, the pinned host side of copies (the
    /// buffers' trackers order the host with the copies, not copies with each other), and the
    /// runtime module's synchronous `memcpy`, `memcpy_peer` and `memset`, which keep
    /// `cudaMemcpy`'s semantics (the legacy default stream), and uses that are all inside one
    /// NCCL [group](crate::nccl::group) on the thread that opened it: NCCL queues a group as one
    /// operation that waits for the work before it on every stream of the group, and that
    /// work after it on any of those streams waits for (NCCL's stream semantics), so the mode
    /// orders the group with what comes before and after it, and the calls inside it follow
    /// NCCL's rules for a group.
    Implicit,
}

static IMPLICIT: AtomicBool = AtomicBool::new(false);

/// Chooses how the process orders work that touches one piece of memory from several streams
/// (see [`StreamOrdering`]); takes effect for the uses that follow, on every thread.
pub fn set_stream_ordering(ordering: StreamOrdering) {
    let on = ordering == StreamOrdering::Implicit;
    if on && !IMPLICIT.load(Ordering::SeqCst) {
        EPOCH.fetch_add(1, Ordering::SeqCst);
    }
    IMPLICIT.store(on, Ordering::SeqCst);
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

/// The order of one piece of memory's uses so far, in the mode: which streams wrote it last and
/// which streams read it since.
#[derive(Debug)]
pub(crate) struct LastUses<S = Stream> {
    /// The streams of the last write; empty: the memory's own stream (or, for memory without
    /// one, nothing to wait for). More than one only where memory of several owners was joined
    /// into one ([`merge`](Self::merge)).
    writers: Vec<S>,
    /// The streams other than the writers' that read the memory since the last write, each
    /// made to wait for it.
    readers: Vec<S>,
    /// Counts the commits, so that a use planned before another thread's commit plans again.
    version: u64,
    /// The [`epoch`] these uses were noted in: uses from before the mode was last turned on
    /// are forgotten.
    epoch: u64,
}

/// A use planned: what to wait for, and the state it was planned against.
pub(crate) struct Plan<S = Stream> {
    /// The streams to wait for first.
    pub(crate) waits: Vec<S>,
    version: u64,
}

impl<S> Default for LastUses<S> {
    fn default() -> Self {
        LastUses { writers: Vec::new(), readers: Vec::new(), version: 0, epoch: 0 }
    }
}

/// Generic over the stream type for the unit tests; the crate uses [`Stream`].
impl<S: Clone + PartialEq> LastUses<S> {
    /// Forgets uses noted before the mode was last turned on.
    fn current(&mut self) -> &mut LastUses<S> {
        let now = epoch();
        if self.epoch != now {
            *self = LastUses { epoch: now, ..LastUses::default() };
        }
        self
    }

    /// The writers, the own stream standing for none.
    fn writers<'a>(&'a self, own: Option<&'a S>) -> impl Iterator<Item = &'a S> {
        let own = own.filter(|_| self.writers.is_empty());
        self.writers.iter().chain(own)
    }

    /// What work of `access` on `stream` must wait for first, `own` being the memory's own
    /// stream: the caller makes the waits outside the memory's lock (one may be a host wait)
    /// and then [`commit`](Self::commit)s the plan, or plans again if another use came between.
    pub(crate) fn plan(&mut self, own: Option<&S>, stream: &S, access: Access) -> Plan<S> {
        let this = self.current();
        let mut waits: Vec<S> = Vec::new();
        let mut add = |s: &S| {
            if s != stream && !waits.contains(s) {
                waits.push(s.clone());
            }
        };
        match access {
            Access::Read if this.readers.contains(stream) => {}
            Access::Read => this.writers(own).for_each(&mut add),
            Access::Write => {
                this.writers(own).for_each(&mut add);
                this.readers.iter().for_each(&mut add);
            }
        }
        Plan { waits, version: this.version }
    }

    /// Notes a use whose waits were made, when no other use was committed since it was
    /// planned (else `false`: plan again). A read on a stream that is not a writer's (any
    /// stream, while nothing wrote memory without an own stream) joins the readers; a write
    /// makes `stream` the writer, with no reader since.
    pub(crate) fn commit(&mut self, plan: &Plan<S>, own: Option<&S>, stream: &S, access: Access) -> bool {
        let this = self.current();
        if this.version != plan.version {
            return false;
        }
        this.version += 1;
        match access {
            Access::Read => {
                if !this.writers(own).any(|w| w == stream) && !this.readers.contains(stream) {
                    this.readers.push(stream.clone());
                }
            }
            Access::Write => {
                this.readers.clear();
                this.writers.clear();
                if own != Some(stream) {
                    this.writers.push(stream.clone());
                }
            }
        }
        true
    }

    /// Adds the uses of `other`, memory without an own stream joined into this memory (also
    /// without one): every use after the join waits for the writers of both.
    pub(crate) fn merge(&mut self, other: &mut LastUses<S>) {
        let (this, other) = (self.current(), other.current());
        this.version += 1;
        for (to, from) in [(&mut this.writers, &other.writers), (&mut this.readers, &other.readers)] {
            for s in from {
                if !to.contains(s) {
                    to.push(s.clone());
                }
            }
        }
    }
}

/// Counts the times the mode was turned on.
static EPOCH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn epoch() -> u64 {
    EPOCH.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::Access::{Read, Write};
    use super::*;

    /// Streams as numbers: 0 is the memory's own stream.
    const OWN: Option<&u32> = Some(&0);

    /// Plans and commits a use, as `order_use` does when no other use comes between; the
    /// streams waited for.
    fn use_on(last: &mut LastUses<u32>, own: Option<&u32>, stream: u32, access: Access) -> Vec<u32> {
        let plan = last.plan(own, &stream, access);
        assert!(last.commit(&plan, own, &stream, access));
        plan.waits
    }

    #[test]
    fn a_read_waits_for_the_last_write_on_another_stream_once() {
        let mut last = LastUses::default();
        assert_eq!(use_on(&mut last, OWN, 0, Write), Vec::<u32>::new());
        assert_eq!(use_on(&mut last, OWN, 1, Read), [0]);
        assert_eq!(use_on(&mut last, OWN, 1, Read), Vec::<u32>::new());
        assert_eq!(use_on(&mut last, OWN, 2, Write), [0, 1]);
        assert_eq!(use_on(&mut last, OWN, 0, Read), [2]);
        assert_eq!(use_on(&mut last, OWN, 2, Read), Vec::<u32>::new(), "the writer's own stream");
    }

    #[test]
    fn a_write_waits_for_every_read_since_and_the_writer() {
        let mut last = LastUses::default();
        use_on(&mut last, OWN, 1, Write);
        use_on(&mut last, OWN, 2, Read);
        use_on(&mut last, OWN, 3, Read);
        let mut waits = use_on(&mut last, OWN, 0, Write);
        waits.sort_unstable();
        assert_eq!(waits, [1, 2, 3]);
        // Back on the own stream: nothing to wait for on it.
        assert_eq!(use_on(&mut last, OWN, 0, Write), Vec::<u32>::new());
    }

    #[test]
    fn memory_without_an_own_stream_orders_writes_after_first_reads() {
        let mut last = LastUses::default();
        assert_eq!(use_on(&mut last, None, 1, Read), Vec::<u32>::new());
        assert_eq!(use_on(&mut last, None, 2, Write), [1]);
        assert_eq!(use_on(&mut last, None, 1, Read), [2]);
    }

    #[test]
    fn a_use_planned_before_another_commit_plans_again() {
        let mut last = LastUses::default();
        let read = last.plan(OWN, &1, Read);
        use_on(&mut last, OWN, 2, Write);
        assert!(!last.commit(&read, OWN, &1, Read), "planned against a write that was replaced");
        assert_eq!(use_on(&mut last, OWN, 1, Read), [2]);
    }

    #[test]
    fn merged_uses_wait_for_the_writers_of_both() {
        let (mut a, mut b) = (LastUses::default(), LastUses::default());
        use_on(&mut a, None, 1, Write);
        use_on(&mut b, None, 2, Write);
        a.merge(&mut b);
        let mut waits = use_on(&mut a, None, 3, Read);
        waits.sort_unstable();
        assert_eq!(waits, [1, 2]);
    }
}
