//! Point-to-point calls (send, receive), the all-to-all exchange, gather and scatter.

use super::buffers::{Input, Output};
use super::call::Call;
use super::collective::{address, disjoint, valid_rank};
use super::comm::Communicator;
use super::datatype::DataType;
use super::group::Group;
use super::version::{at_least, require, since};
use crate::error::{Error, Result};
use crate::memory::same_len;
use crate::stream::Stream;
use std::ffi::c_void;

impl Communicator {
    /// Sends `buffer` to rank `peer`, which receives it with [`recv`](Self::recv) of the same
    /// length
    /// ([`ncclSend`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/p2p.html#ncclsend),
    /// NCCL 2.7). A send and its receive block each other unless both are issued in one
    /// [`Group`] (as a ring or an exchange must be).
    ///
    /// A `peer` past the last rank, or memory or a stream of another device, is an [`Error::InvalidArgument`]
    /// ([what is checked before a call](crate::nccl#what-is-checked-before-a-call)).
    pub fn send<T: DataType>(&self, buffer: impl Input<T>, peer: usize, stream: &Stream) -> Result<()> {
        const OP: &str = "Communicator::send";
        self.prologue::<T>(OP, stream)?;
        require("ncclSend", since::SEND_RECV)?;
        self.on_stream(OP, &buffer, stream)?;
        let peer = valid_rank(OP, "peer", peer, self.count()?)?;
        // SAFETY: device memory of the communicator's device, `count` elements long, kept
        // alive by the borrow until the work is queued.
        unsafe { self.enqueue::<T>(Call::Send { send: address(&buffer), peer }, buffer.count(), stream) }
    }

    /// Receives into `buffer` what rank `peer` sends with [`send`](Self::send)
    /// ([`ncclRecv`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/p2p.html#ncclrecv),
    /// NCCL 2.7).
    ///
    /// A `peer` past the last rank, or memory or a stream of another device, is an
    /// [`Error::InvalidArgument`], as for [`send`](Self::send).
    pub fn recv<T: DataType>(&self, buffer: impl Output<T>, peer: usize, stream: &Stream) -> Result<()> {
        const OP: &str = "Communicator::recv";
        self.prologue::<T>(OP, stream)?;
        require("ncclRecv", since::SEND_RECV)?;
        self.on_stream(OP, &buffer, stream)?;
        let peer = valid_rank(OP, "peer", peer, self.count()?)?;
        // SAFETY: as in `send`; the memory is written.
        unsafe { self.enqueue::<T>(Call::Recv { recv: address(&buffer), peer }, buffer.count(), stream) }
    }

    /// Exchanges blocks: `send` and `recv` hold one block per rank, and block `j` of this
    /// rank's `send` lands in block `i` (this rank's index) of rank `j`'s `recv`
    /// ([`ncclAlltoAll`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/colls.html#ncclalltoall)
    /// from NCCL 2.28; before, one send and one receive per rank in a group). Both have the
    /// same length, a multiple of the rank count, and do not overlap.
    ///
    /// Lengths that differ or are not a multiple of the rank count, overlapping memory, or memory of another
    /// device are an [`Error::InvalidArgument`] ([what is checked before a
    /// call](crate::nccl#what-is-checked-before-a-call)); before NCCL 2.28 the sends and receives of the
    /// group fail as [`send`](Self::send) does.
    pub fn all_to_all<T: DataType>(
        &self,
        send: impl Input<T>,
        recv: impl Output<T>,
        stream: &Stream,
    ) -> Result<()> {
        const OP: &str = "Communicator::all_to_all";
        self.prologue::<T>(OP, stream)?;
        self.on_stream(OP, &send, stream)?;
        self.on_stream(OP, &recv, stream)?;
        same_len(OP, recv.count(), send.count())?;
        disjoint(OP, &send, &recv)?;
        let ranks = self.count()?;
        if ranks == 0 || send.count() % ranks != 0 {
            return Err(Error::invalid(
                OP,
                format!("the buffers have {} elements, not a multiple of the {ranks} ranks", send.count()),
            ));
        }
        let block = send.count() / ranks;
        let (s, r) = (address(&send), address(&recv));
        if at_least(since::ALL_TO_ALL)? {
            // SAFETY: both are device memory of the communicator's device holding `ranks`
            // blocks of `block` elements, kept alive by the borrows until the work is queued.
            return unsafe { self.enqueue::<T>(Call::AllToAll { send: s, recv: r }, block, stream) };
        }
        require("ncclSend", since::SEND_RECV)?;
        let at =
            |base: *mut c_void, peer: usize| base.cast::<T>().wrapping_add(peer * block).cast::<c_void>();
        let group = Group::start()?;
        for peer in 0..ranks {
            let p = valid_rank(OP, "peer", peer, ranks)?;
            // SAFETY: block `peer` of each buffer, inside the checked lengths.
            unsafe { self.issue::<T>(Call::Send { send: at(s, peer), peer: p }, block, stream) }?;
            // SAFETY: as above.
            unsafe { self.issue::<T>(Call::Recv { recv: at(r, peer), peer: p }, block, stream) }?;
        }
        group.end()
    }

    /// Gathers `send` of every rank into `recv` on rank `root`: block `i` of the root's
    /// `recv` receives rank `i`'s `send`
    /// ([`ncclGather`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/colls.html#ncclgather),
    /// NCCL 2.28). Every rank sends the same length; the root's `recv` holds that times the
    /// rank count. Other ranks receive nothing and pass `None` (a buffer they pass is not
    /// touched).
    ///
    /// A `root` past the last rank, no `recv` on the root or one of another length, overlapping
    /// memory, or memory or a stream of another device is an [`Error::InvalidArgument`]
    /// ([what is checked before a call](crate::nccl#what-is-checked-before-a-call)); NCCL older
    /// than 2.28 is an [`Error::Load`] naming both versions.
    pub fn gather<T: DataType, R: Output<T>>(
        &self,
        send: impl Input<T>,
        recv: Option<R>,
        root: usize,
        stream: &Stream,
    ) -> Result<()> {
        const OP: &str = "Communicator::gather";
        self.prologue::<T>(OP, stream)?;
        require("ncclGather", since::ALL_TO_ALL)?;
        self.on_stream(OP, &send, stream)?;
        let ranks = self.count()?;
        let root = valid_rank(OP, "root", root, ranks)?;
        let recv = self.root_side(OP, recv, root, send.count(), ranks, stream)?;
        if let Some(recv) = &recv {
            disjoint(OP, &send, recv)?;
        }
        let r = recv.as_ref().map_or(std::ptr::null_mut(), address);
        let call = Call::Gather { send: address(&send), recv: r, root };
        // SAFETY: `send` is device memory of the communicator's device; on the root `recv`
        // holds `ranks` blocks of `send.count()` elements (checked above); both are kept alive
        // by the borrows until the work is queued.
        unsafe { self.enqueue::<T>(call, send.count(), stream) }
    }

    /// Scatters `send` of rank `root` to every rank: rank `i`'s `recv` receives block `i` of
    /// the root's `send`
    /// ([`ncclScatter`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/colls.html#ncclscatter),
    /// NCCL 2.28). Every rank receives the same length; the root's `send` holds that times the
    /// rank count. Other ranks send nothing and pass `None` (a buffer they pass is not read).
    ///
    /// Errors as for [`gather`](Self::gather), with the roles of the two buffers swapped.
    pub fn scatter<T: DataType, S: Input<T>>(
        &self,
        send: Option<S>,
        recv: impl Output<T>,
        root: usize,
        stream: &Stream,
    ) -> Result<()> {
        const OP: &str = "Communicator::scatter";
        self.prologue::<T>(OP, stream)?;
        require("ncclScatter", since::ALL_TO_ALL)?;
        self.on_stream(OP, &recv, stream)?;
        let ranks = self.count()?;
        let root = valid_rank(OP, "root", root, ranks)?;
        let send = self.root_side(OP, send, root, recv.count(), ranks, stream)?;
        if let Some(send) = &send {
            disjoint(OP, send, &recv)?;
        }
        let s = send.as_ref().map_or(std::ptr::null_mut(), address);
        let call = Call::Scatter { send: s, recv: address(&recv), root };
        // SAFETY: as in `gather`, with the roles swapped.
        unsafe { self.enqueue::<T>(call, recv.count(), stream) }
    }

    /// The root's whole buffer of a gather or scatter, checked: present on the root, on the
    /// communicator's device, `ranks` blocks of `block` elements; `None` on the other ranks.
    fn root_side<T, M: Input<T>>(
        &self,
        operation: &'static str,
        memory: Option<M>,
        root: i32,
        block: usize,
        ranks: usize,
        stream: &Stream,
    ) -> Result<Option<M>> {
        if usize::try_from(root).ok() != Some(self.rank()?) {
            return Ok(None);
        }
        let memory = memory.ok_or_else(|| {
            Error::invalid(operation, "the root needs the buffer of every rank's block; it was given None")
        })?;
        self.on_stream(operation, &memory, stream)?;
        let whole =
            block.checked_mul(ranks).ok_or_else(|| Error::invalid(operation, "the length overflows"))?;
        if memory.count() != whole {
            return Err(Error::refused(
                crate::error::Reason::LENGTH_MISMATCH,
                operation,
                format!(
                    "the root's buffer holds {} elements; it needs {ranks} blocks of {block}",
                    memory.count()
                ),
            ));
        }
        Ok(Some(memory))
    }
}
