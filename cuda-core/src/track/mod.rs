//! The stream rule: which streams may touch a piece of memory, who waits for whom, and when the
//! memory may be given back. This module is its one statement; the rooms that own memory
//! (`memory`, `vmm`, `graph`, `interop`, `nccl`, `runtime`) follow it through the types here,
//! and their documentation links here rather than restating it.
//!
//! # The rule
//!
//! Device memory belongs to one stream, its *own* stream: the stream it was allocated on (or
//! moved to with `set_stream`). Work on it is ordered three ways:
//!
//! 1. **On its own stream**, by stream order: nothing is recorded, nothing is waited for, and
//!    the memory is given back in that stream's order, so work queued there before the release
//!    may still use it. A block given back on a stream is free at once for the next owner *on
//!    that stream*.
//! 2. **On another stream** (a copy, a memset, a kernel argument, a collective, a prefetch),
//!    every safe operation notes that stream on the memory's [`StreamUses`] before it queues
//!    the work. The first time a stream is noted, it is made to wait (one event recorded on
//!    the own stream, one `cuStreamWaitEvent`) for the work queued so far on the own stream:
//!    the memory's own earlier work, and that of the block's earlier owners, given back there.
//!    When the memory is given back, its release is ordered after every noted stream (one
//!    event recorded on each and waited for on the own stream, or, for releases that are not
//!    stream-ordered, a host wait for each). Streams that cannot be ordered from the memory's
//!    context (another thread's per-thread stream, a stream of another context) are waited for
//!    on the host. So between two uses there are at most two events per memory and foreign
//!    stream, however many operations ran there.
//! 3. **Later, when a scope ends**: an NCCL group queues its calls only at `ncclGroupEnd`.
//!    Memory such a call uses is noted with the scope ([`scopes`]); given back while the scope
//!    is open, its release waits until the scope has queued its work.
//!
//! # Capture
//!
//! Work queued on a stream being captured into a graph (by a capture begun through this crate,
//! [`Stream::begin_capture`](crate::Stream::begin_capture), or a stream that joined one) runs at
//! the graph's launches, not now, on whatever stream they are made on. The rule follows it
//! there ([`captured`]):
//!
//! 4. **Memory used by captured work belongs to the graph too.** The first captured use of a
//!    piece of memory hands the capture a cell that the graph, its clones and child copies and
//!    its executable graphs hold; the memory's release, whenever it is dropped, is handed to
//!    that cell and runs once the last of them is gone (an executable graph that was launched
//!    waits for its launches first). The first captured use on each stream also waits, at
//!    every launch, for the work queued on the memory's own stream before the capture (an
//!    external event wait node on an event recorded there, or on the one recorded on the
//!    capture's first stream as it began), so a launch on any stream comes after the memory's
//!    earlier owners. Memory whose own stream joined the capture later, or is in another
//!    capture, cannot be ordered so: its captured use is refused.
//! 5. **Memory allocated on a capturing stream is graph memory**, whatever the allocator: an
//!    allocation node (`cuMemAllocAsync`, which the driver records). It exists only inside the
//!    graph's launches, so it may be used only by work captured in that capture, on any of its
//!    streams (the first use on another stream is ordered after the allocation by a graph
//!    edge). Dropped inside the capture, it becomes a free node, ordered after every stream of
//!    the capture that used it (events recorded there and waited for on its stream, both
//!    captured: graph edges, which also join those streams back), and the stream of the free
//!    node is joined back into the capture's first stream when the capture ends. Still alive
//!    when the capture ends, it is freed by a free node added then; every launch allocates and
//!    frees it, at the same address each time. Outside its capture the buffer has no memory:
//!    every safe use of it (a copy, a memset, a kernel argument, `record_stream`,
//!    `set_stream`) is an [`Error::InvalidArgument`](crate::Error::InvalidArgument), and
//!    dropping it does nothing.
//! 6. **A release on a capturing stream** of memory the capture did not allocate cannot be
//!    queued there now: the capture's graph holds it, and it runs once the graph is gone (at
//!    once if the capture is discarded). A release that would have to wait for a stream being
//!    captured by another capture, or by one this crate did not begin, keeps the memory (a
//!    leak, reported) instead.
//!
//! Pinned buffers follow the same rule through their trackers ([`HostUses`]: dropped while a
//! graph holds the tracker's shared state, a buffer hands its release to it). What a graph
//! cannot hold is refused on a capturing stream (chunks of pinned buffers, arrays, owners that
//! give memory back by waiting for streams, external semaphores, `EXTERNAL` events, NCCL
//! calls). A captured launch of a function of a module hands the capture the module's loaded
//! code; what an `unsafe` kernel launch refers to beyond that and the crate's buffers and
//! views is the launch's contract. [`Stream::begin_capture`](crate::Stream::begin_capture) lists the
//! whole.
//!
//! # Ordering on request
//!
//! The rule keeps memory from being given back or handed on under queued work; it does not order
//! a program's own uses of one piece of memory on two streams (a race of the program's own).
//! [`StreamOrdering::Implicit`](crate::StreamOrdering), chosen for the process, makes the
//! crate order those too, as cudarc does: each use after the last write on another stream, each
//! write after the reads since ([`ordering`]). The uses are noted where the rule notes them, with
//! whether the work reads or writes.
//!
//! # Pinned host memory
//!
//! Page-locked host memory is touched by the host as well as by copies. [`HostUses`] tracks
//! the copies in flight on a pinned buffer with one event: the host waits for the copies that
//! write (to read) or use (to write) the memory before it hands out a slice, and a slice is a
//! guard: while the host holds one, a launch of a graph whose captured copies would race with
//! it is refused ([`launch_tracked`]).
//!
//! # Futures
//!
//! A future of `crate::future` (feature `async`) that waits for queued work owns or
//! borrows only values that follow this rule by themselves (a pinned staging buffer records its
//! copy; a device buffer notes the copy's stream): dropping it while the work runs cancels the
//! wait, never the rule, so nothing is freed or handed back early.
//!
//! # Where it is checked
//!
//! The GPU suite's soundness tests (`tests/tests/soundness.rs`) hold each case in the shape a
//! user meets it, and the simulated driver (`tests/sim-cuda-driver`) runs random safe programs
//! under a happens-before checker on every CI run, with streams run in any order the rule
//! allows. The same checker runs on a GPU: the checking driver of `tests/checked-cuda-driver`
//! sits between the program and NVIDIA's driver, and the crate tells it what no driver call
//! shows ([`checker`]).

mod captured;
pub(crate) mod checker;
mod held;
mod host_uses;
pub(crate) mod ordering;
pub(crate) mod scopes;
mod stream_uses;

pub(crate) use captured::{GraphAlloc, Retained, join};
pub(crate) use held::{HeldStream, OwnStream};
pub(crate) use host_uses::{HostAccess, HostUses, Uses, begin_borrow, end_borrow, launch_tracked};
pub(crate) use ordering::Access;
pub(crate) use stream_uses::{Ordered, StreamUses, nameable, order_after, wait_for};
