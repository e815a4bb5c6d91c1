//! Point-to-point calls (send, receive) and the all-to-all exchange.

use super::buffers::{Input, Output};
use super::collective::{address, disjoint, valid_rank};
use super::comm::Communicator;
use super::datatype::DataType;
use super::group::Group;
use super::version::{at_least, require, since};
use crate::error::{Error, Result};
use crate::memory::same_len;
use crate::stream::Stream;
use nccl_sys as nccl;
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
        self.on_device(OP, &buffer)?;
        let peer = valid_rank(OP, "peer", peer, self.count()?)?;
        // SAFETY: device memory of the communicator's device, `count` elements long, kept
        // alive by the borrow until the work is queued.
        let status = unsafe {
            nccl::ncclSend(
                address(&buffer),
                buffer.count(),
                T::RAW,
                peer,
                self.as_raw(),
                stream.as_raw().cast(),
            )
        };
        self.status("ncclSend", status)
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
        self.on_device(OP, &buffer)?;
        let peer = valid_rank(OP, "peer", peer, self.count()?)?;
        // SAFETY: as in `send`; the memory is written.
        let status = unsafe {
            nccl::ncclRecv(
                address(&buffer),
                buffer.count(),
                T::RAW,
                peer,
                self.as_raw(),
                stream.as_raw().cast(),
            )
        };
        self.status("ncclRecv", status)
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
        self.on_device(OP, &send)?;
        self.on_device(OP, &recv)?;
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
            let status =
                unsafe { nccl::ncclAlltoAll(s, r, block, T::RAW, self.as_raw(), stream.as_raw().cast()) };
            return self.status("ncclAlltoAll", status);
        }
        require("ncclSend", since::SEND_RECV)?;
        let at =
            |base: *mut c_void, peer: usize| base.cast::<T>().wrapping_add(peer * block).cast::<c_void>();
        let group = Group::start()?;
        for peer in 0..ranks {
            let p = valid_rank(OP, "peer", peer, ranks)?;
            // SAFETY: block `peer` of each buffer, inside the checked lengths.
            let sent = unsafe {
                nccl::ncclSend(at(s, peer), block, T::RAW, p, self.as_raw(), stream.as_raw().cast())
            };
            self.status("ncclSend", sent)?;
            // SAFETY: as above.
            let got = unsafe {
                nccl::ncclRecv(at(r, peer), block, T::RAW, p, self.as_raw(), stream.as_raw().cast())
            };
            self.status("ncclRecv", got)?;
        }
        group.end()
    }
}
