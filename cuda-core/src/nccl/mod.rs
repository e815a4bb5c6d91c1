//! NCCL: collective and point-to-point communication between GPUs, in one process or many, on
//! one host or several.
//!
//! Built with the `nccl` feature, which is on by default.
//!
//! See the [NCCL user guide](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/index.html)
//! and its [API reference](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api.html).
//! NCCL (`libnccl.so.2`) is loaded on first use, like the other libraries of this crate.
//!
//! # The pieces
//!
//! * [`UniqueId`]: made by one rank ([`UniqueId::new`]) and handed to the others as 128 bytes
//!   over any transport (a socket, a file, MPI, a pipe).
//! * [`Bootstrap`]: a rank's place in a job as cluster launchers describe it (`torchrun`'s
//!   `RANK`/`WORLD_SIZE`/`LOCAL_RANK`/`MASTER_ADDR`/`MASTER_PORT`, Slurm's `SLURM_PROCID`/
//!   `SLURM_NTASKS`/`SLURM_LOCALID`, Open MPI's, or explicit numbers and an address), which
//!   exchanges the unique id over TCP and forms the communicator, every wait with a deadline.
//! * [`Communicator`]: one rank of a clique on one device. [`Communicator::init_all`] makes a
//!   clique over several devices of this process; [`Communicator::init_rank`] makes one rank
//!   (one per process or thread) with a [`Config`] (blocking or not, CTA counts, network,
//!   resource sharing, ...); [`Communicator::split`] makes sub-cliques by colour and key.
//!   Dropping one destroys it; [`Communicator::finalize`] flushes and destroys it and returns
//!   what failed; [`Communicator::abort`] stops it at once, also while its work hangs.
//! * Collectives ([`Communicator::all_reduce`], [`broadcast`](Communicator::broadcast),
//!   [`reduce`](Communicator::reduce), [`all_gather`](Communicator::all_gather),
//!   [`reduce_scatter`](Communicator::reduce_scatter), [`all_to_all`](Communicator::all_to_all))
//!   and point-to-point calls ([`send`](Communicator::send), [`recv`](Communicator::recv)) over
//!   the crate's buffers and views, on an explicit [`Stream`](crate::stream::Stream). The element type
//!   is the NCCL datatype ([`DataType`]); the operation is a [`ReduceOp`] or a [`PreMulSum`].
//! * [`Group`]: `ncclGroupStart`/`ncclGroupEnd` as a guard, and [`group`] for a closure. One
//!   thread that drives several communicators (as after `init_all`) must issue their calls in
//!   a group, or the first call blocks waiting for the others.
//! * [`Registration`] (`ncclCommRegister`), [`Window`] (`ncclCommWindowRegister`) and
//!   [`NcclAllocator`] (`ncclMemAlloc` as a [`alloc::Allocator`](crate::alloc::Allocator)).
//!
//! # What is checked before a call
//!
//! Element counts (equal, or a multiple of the number of ranks where the collective says so),
//! overlap of the send and receive memory other than the in-place forms NCCL defines, that
//! buffers and stream belong to the communicator's device, root and peer ranks, and that the
//! loaded NCCL is new enough for the function (an [`Error::Load`](crate::error::Error::Load) that names
//! the version needed and the one installed). These are [`Error::InvalidArgument`](crate::error::Error::InvalidArgument)s, made
//! before NCCL is called.
//!
//! # Non-blocking communicators
//!
//! A communicator made with [`Config::blocking`]`(false)` returns from its calls while NCCL
//! still works in the background. [`Communicator::poll`] says whether it is done and
//! [`Communicator::wait`] waits for it with a timeout, sleeping between queries. Wait before
//! reading results or issuing the next call on such a communicator.
//!
//! # When a rank fails
//!
//! A rank that dies or never comes leaves NCCL's work on the others waiting without end. Every
//! wait of [`Bootstrap`] and [`Communicator::init_rank_within`] has a deadline, and
//! [`Communicator::synchronize`] waits for a stream while watching the communicator's errors,
//! up to a deadline; each ends in an [`Error::Timeout`](crate::Error::Timeout) or NCCL's error,
//! and marks the communicator [faulted](Communicator::is_faulted). The crate's own waits for a
//! non-blocking communicator's background work (a call, or a group's end, that NCCL answers
//! `ncclInProgress`; a split, a flush) last at most the communicator's
//! [time limit](Communicator::timeout), which `init_rank_within` and [`Bootstrap`] set, and
//! fail the same way. Dropping a communicator that is not faulted destroys it, which waits
//! for its work: for as long as a peer is stuck. Then:
//!
//! 1. Learn which ranks are gone (from the launcher, or a side channel of the job's own).
//! 2. Where NCCL has it (2.27+), [`shrink`](Communicator::shrink) to the others with
//!    [`ShrinkMode::Abort`]; every remaining rank makes the same call, with a deadline.
//! 3. [`abort`](Communicator::abort) the failed communicator (dropping a faulted one aborts
//!    it too). Its kernels end and its streams move on.
//! 4. Drop the buffers and streams the failed work used: they are given back in stream order
//!    after that work, as always, so this is safe before or after the abort, but memory whose
//!    release waits on the host (an [`NcclAllocator`] buffer) waits for the work to end: abort
//!    first. What the aborted collectives wrote is undefined: redo the step from data that
//!    was complete before it.
//! 5. If the shrink failed (NCCL older than 2.27, or it refused a communicator that reported an
//!    error) or ran out of time, make a new communicator of the remaining ranks: a new
//!    [`Bootstrap`] with their new numbers ([`rank_after_shrink`]) and a new port.
//!
//! # NVLink SHARP
//!
//! Nothing here creates multicast objects itself. Programs that share GPU hosts with others
//! may keep NCCL's NVLink SHARP off with `NCCL_NVLS_ENABLE=0` in the environment; the tests,
//! benchmark and example of this crate do.
//!
//! # Example
//!
//! ```no_run
//! use cuhost::nccl::{Communicator, ReduceOp, group};
//! use cuhost::{Device, DeviceBuffer, Stream, StreamFlags};
//! # fn main() -> cuhost::Result<()> {
//! let devices = Device::all()?;
//! let comms = Communicator::init_all(&devices)?;
//! let mut work = Vec::new();
//! for comm in &comms {
//!     let stream = Stream::new(comm.context(), StreamFlags::NON_BLOCKING)?;
//!     let send = DeviceBuffer::from_slice(&stream, &[1.0f32; 1024])?;
//!     let recv = DeviceBuffer::<f32>::zeroed(&stream, 1024)?;
//!     work.push((stream, send, recv));
//! }
//! // One thread drives every rank: issue their calls in one group.
//! group(|| {
//!     for (comm, (stream, send, recv)) in comms.iter().zip(&mut work) {
//!         comm.all_reduce(&*send, &mut *recv, ReduceOp::Sum, stream)?;
//!     }
//!     Ok(())
//! })?;
//! for (stream, _, recv) in &work {
//!     stream.synchronize()?;
//!     assert_eq!(recv.to_vec()?[0], devices.len() as f32);
//! }
//! # Ok(()) }
//! ```

mod alloc;
mod bootstrap;
mod buffers;
mod call;
mod collective;
mod comm;
mod config;
mod datatype;
mod fault;
mod group;
mod handle;
mod id;
mod op;
mod p2p;
mod register;
mod rendezvous;
mod version;

pub use alloc::NcclAllocator;
pub use bootstrap::{Bootstrap, DEFAULT_TIMEOUT, Launcher};
pub use buffers::{Input, Output};
pub use comm::Communicator;
pub use config::{Config, CtaPolicy};
pub use datatype::{DataType, Float8E4M3, Float8E5M2};
pub use fault::{ShrinkMode, rank_after_shrink};
pub(crate) use group::current_group;
pub use group::{Group, group, take_deferred_group_error};
#[cfg(feature = "half")]
#[cfg_attr(docsrs, doc(cfg(feature = "half")))]
pub use half::{bf16, f16};
pub use handle::Progress;
pub use id::UniqueId;
pub use op::{PreMulSum, ReduceOp, Reduction};
pub use register::{Registration, Window, WindowFlags};
pub use version::{Version, version};

#[cfg(test)]
mod tests;
