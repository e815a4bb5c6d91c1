//! Collectives: all-reduce, broadcast, reduce, all-gather and reduce-scatter, out of place and
//! in place, with their arguments checked before NCCL is called.

use super::buffers::{Input, Output};
use super::call::Call;
use super::comm::Communicator;
use super::comm::same_device;
use super::datatype::DataType;
use super::op::Reduction;
use super::version::require;
use crate::error::{Error, Result};
use crate::memory::same_len;
use crate::stream::Stream;
use std::ffi::c_void;

/// The raw device address of `memory`, as NCCL takes it.
#[inline]
pub(crate) fn address<T>(memory: &impl Input<T>) -> *mut c_void {
    memory.device_ptr() as usize as *mut c_void
}

/// An [`Error::InvalidArgument`] if the two ranges of memory overlap.
#[inline]
pub(crate) fn disjoint<T>(operation: &'static str, a: &impl Input<T>, b: &impl Input<T>) -> Result<()> {
    let size = std::mem::size_of::<T>() as u64;
    let (a0, b0) = (a.device_ptr(), b.device_ptr());
    let (a1, b1) = (a0 + a.count() as u64 * size, b0 + b.count() as u64 * size);
    if a0 < b1 && b0 < a1 {
        Err(Error::invalid(
            operation,
            "the send and receive memory overlap; use separate memory, or the call's in-place form",
        ))
    } else {
        Ok(())
    }
}

/// An [`Error::InvalidArgument`] unless `peer` is a rank of a clique of `ranks`.
#[inline]
pub(crate) fn valid_rank(operation: &'static str, what: &str, peer: usize, ranks: usize) -> Result<i32> {
    match i32::try_from(peer) {
        Ok(p) if peer < ranks => Ok(p),
        _ => Err(Error::invalid(operation, format!("{what} {peer} is not a rank of this clique of {ranks}"))),
    }
}

#[cold]
fn not_a_multiple(operation: &'static str, what: &str, len: usize, ranks: usize) -> Error {
    Error::invalid(operation, format!("{what} has {len} elements, not a multiple of the {ranks} ranks"))
}

impl Communicator {
    /// The checks every call on a stream makes: a kept error, the datatype's NCCL version, the
    /// stream's device.
    #[inline]
    pub(crate) fn prologue<T: DataType>(&self, operation: &'static str, stream: &Stream) -> Result<()> {
        self.context().take_deferred()?;
        if T::SINCE > 0 {
            require(operation, T::SINCE)?;
        }
        same_device(operation, self, stream.context())
    }

    /// The checks of a call with separate send and receive memory: the [`prologue`](Self::prologue),
    /// both on the communicator's device, and not overlapping.
    #[inline]
    fn out_of_place<T: DataType>(
        &self,
        operation: &'static str,
        stream: &Stream,
        send: &impl Input<T>,
        recv: &impl Input<T>,
    ) -> Result<()> {
        self.prologue::<T>(operation, stream)?;
        self.on_stream(operation, send, stream)?;
        self.on_stream(operation, recv, stream)?;
        disjoint(operation, send, recv)
    }

    /// The checks of a call whose send and receive memory is one buffer: the
    /// [`prologue`](Self::prologue) and the buffer on the communicator's device.
    #[inline]
    fn in_place<T: DataType>(
        &self,
        operation: &'static str,
        stream: &Stream,
        buffer: &impl Input<T>,
    ) -> Result<()> {
        self.prologue::<T>(operation, stream)?;
        self.on_stream(operation, buffer, stream)
    }

    /// The layout of an in-place gather or scatter, where `buffer` holds one block per rank:
    /// the length of a block, the address of the buffer and that of this rank's block. A length
    /// that is not a multiple of the rank count is an [`Error::InvalidArgument`].
    fn own_block<T>(
        &self,
        operation: &'static str,
        buffer: &impl Input<T>,
    ) -> Result<(usize, *mut c_void, *mut c_void)> {
        let (ranks, rank) = (self.count()?, self.rank()?);
        if ranks == 0 || buffer.count() % ranks != 0 {
            return Err(not_a_multiple(operation, "the buffer", buffer.count(), ranks));
        }
        let block = buffer.count() / ranks;
        let whole = address(buffer);
        Ok((block, whole, whole.cast::<T>().wrapping_add(rank * block).cast::<c_void>()))
    }

    /// Checks that `memory` is on the communicator's device.
    #[inline]
    pub(crate) fn on_device<T>(&self, operation: &'static str, memory: &impl Input<T>) -> Result<()> {
        same_device(operation, self, memory.memory_context())
    }

    /// Checks that `memory` is on the communicator's device and notes that the call uses it on
    /// `stream` (and, inside a group, that the group does), so that its owner does not give it
    /// back before the call has run.
    #[inline]
    pub(crate) fn on_stream<T>(
        &self,
        operation: &'static str,
        memory: &impl Input<T>,
        stream: &Stream,
    ) -> Result<()> {
        self.on_device(operation, memory)?;
        memory.note_use(stream.context(), stream)?;
        if let Some(group) = super::current_group() {
            memory.note_group(group);
        }
        Ok(())
    }

    /// Reduces `send` across the ranks with `op` and writes the result to `recv` on every rank
    /// ([`ncclAllReduce`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/colls.html#ncclallreduce)).
    /// The two must have the same length and must not overlap (see
    /// [`all_reduce_in_place`](Self::all_reduce_in_place)).
    ///
    /// Lengths that differ, overlapping memory, or memory or a stream of another device are an
    /// [`Error::InvalidArgument`](crate::error::Error::InvalidArgument) ([what is checked before a
    /// call](crate::nccl#what-is-checked-before-a-call)); what NCCL itself refuses is an
    /// [`Error::Nccl`](crate::error::Error::Nccl).
    pub fn all_reduce<T: DataType>(
        &self,
        send: impl Input<T>,
        recv: impl Output<T>,
        op: impl Reduction<T>,
        stream: &Stream,
    ) -> Result<()> {
        const OP: &str = "Communicator::all_reduce";
        self.out_of_place::<T>(OP, stream, &send, &recv)?;
        same_len(OP, recv.count(), send.count())?;
        let call = Call::AllReduce { send: address(&send), recv: address(&recv), op: op.raw_for(self)? };
        // SAFETY: both ranges are device memory of the communicator's device, `count`
        // elements of `T` long, kept alive by the borrows until the call has queued the work
        // (later frees are ordered after it on the stream or wait for the device).
        unsafe { self.enqueue::<T>(call, send.count(), stream) }
    }

    /// [`all_reduce`](Self::all_reduce) with `buffer` as both send and receive memory.
    ///
    /// A buffer or stream of another device, or an element type or operation the loaded NCCL is too old for,
    /// fails before NCCL is called ([what is checked before a
    /// call](crate::nccl#what-is-checked-before-a-call)).
    pub fn all_reduce_in_place<T: DataType>(
        &self,
        buffer: impl Output<T>,
        op: impl Reduction<T>,
        stream: &Stream,
    ) -> Result<()> {
        const OP: &str = "Communicator::all_reduce_in_place";
        self.in_place::<T>(OP, stream, &buffer)?;
        let p = address(&buffer);
        let call = Call::AllReduce { send: p, recv: p, op: op.raw_for(self)? };
        // SAFETY: as in `all_reduce`; NCCL allows the same address for both.
        unsafe { self.enqueue::<T>(call, buffer.count(), stream) }
    }

    /// Copies `send` of rank `root` into `recv` of every rank
    /// ([`ncclBroadcast`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/colls.html#ncclbroadcast));
    /// `send` is read on the root only. The two have the same length and do not overlap; ranks
    /// with nothing to send use [`broadcast_in_place`](Self::broadcast_in_place).
    ///
    /// A `root` past the last rank, lengths that differ, overlapping memory, or memory of
    /// another device are an [`Error::InvalidArgument`](crate::error::Error::InvalidArgument)
    /// ([what is checked before a call](crate::nccl#what-is-checked-before-a-call)).
    pub fn broadcast<T: DataType>(
        &self,
        send: impl Input<T>,
        recv: impl Output<T>,
        root: usize,
        stream: &Stream,
    ) -> Result<()> {
        const OP: &str = "Communicator::broadcast";
        self.out_of_place::<T>(OP, stream, &send, &recv)?;
        same_len(OP, recv.count(), send.count())?;
        let root = valid_rank(OP, "root", root, self.count()?)?;
        let call = Call::Broadcast { send: address(&send), recv: address(&recv), root };
        // SAFETY: as in `all_reduce`.
        unsafe { self.enqueue::<T>(call, send.count(), stream) }
    }

    /// [`broadcast`](Self::broadcast) with `buffer` as both memories: the root sends it, the
    /// others receive into it.
    ///
    /// A `root` past the last rank, or a buffer or stream of another device, is an
    /// [`Error::InvalidArgument`](crate::error::Error::InvalidArgument) ([what is checked before a
    /// call](crate::nccl#what-is-checked-before-a-call)).
    pub fn broadcast_in_place<T: DataType>(
        &self,
        buffer: impl Output<T>,
        root: usize,
        stream: &Stream,
    ) -> Result<()> {
        const OP: &str = "Communicator::broadcast_in_place";
        self.in_place::<T>(OP, stream, &buffer)?;
        let root = valid_rank(OP, "root", root, self.count()?)?;
        let p = address(&buffer);
        // SAFETY: as in `all_reduce`; NCCL allows the same address for both.
        unsafe { self.enqueue::<T>(Call::Broadcast { send: p, recv: p, root }, buffer.count(), stream) }
    }

    /// Reduces `send` across the ranks with `op` into `recv` of rank `root`
    /// ([`ncclReduce`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/colls.html#ncclreduce));
    /// `recv` is written on the root only. Same length, no overlap.
    ///
    /// A `root` past the last rank, lengths that differ, overlapping memory, or memory of
    /// another device are an [`Error::InvalidArgument`](crate::error::Error::InvalidArgument)
    /// ([what is checked before a call](crate::nccl#what-is-checked-before-a-call)).
    pub fn reduce<T: DataType>(
        &self,
        send: impl Input<T>,
        recv: impl Output<T>,
        op: impl Reduction<T>,
        root: usize,
        stream: &Stream,
    ) -> Result<()> {
        const OP: &str = "Communicator::reduce";
        self.out_of_place::<T>(OP, stream, &send, &recv)?;
        same_len(OP, recv.count(), send.count())?;
        let root = valid_rank(OP, "root", root, self.count()?)?;
        let call = Call::Reduce { send: address(&send), recv: address(&recv), op: op.raw_for(self)?, root };
        // SAFETY: as in `all_reduce`.
        unsafe { self.enqueue::<T>(call, send.count(), stream) }
    }

    /// [`reduce`](Self::reduce) with `buffer` as both memories (the root's holds the result).
    ///
    /// A `root` past the last rank, a buffer or stream of another device, or an operation of
    /// another communicator is an [`Error::InvalidArgument`](crate::error::Error::InvalidArgument)
    /// ([what is checked before a call](crate::nccl#what-is-checked-before-a-call)).
    pub fn reduce_in_place<T: DataType>(
        &self,
        buffer: impl Output<T>,
        op: impl Reduction<T>,
        root: usize,
        stream: &Stream,
    ) -> Result<()> {
        const OP: &str = "Communicator::reduce_in_place";
        self.in_place::<T>(OP, stream, &buffer)?;
        let root = valid_rank(OP, "root", root, self.count()?)?;
        let p = address(&buffer);
        let call = Call::Reduce { send: p, recv: p, op: op.raw_for(self)?, root };
        // SAFETY: as in `all_reduce`; NCCL allows the same address for both.
        unsafe { self.enqueue::<T>(call, buffer.count(), stream) }
    }

    /// Gathers `send` of every rank into `recv` of every rank, in rank order
    /// ([`ncclAllGather`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/colls.html#ncclallgather)):
    /// `recv` holds `send.len() * ranks` elements and does not overlap `send` (see
    /// [`all_gather_in_place`](Self::all_gather_in_place)).
    ///
    /// A `recv` of another length, overlapping memory, or memory of another device is an
    /// [`Error::InvalidArgument`](crate::error::Error::InvalidArgument) ([what is checked before a
    /// call](crate::nccl#what-is-checked-before-a-call)).
    pub fn all_gather<T: DataType>(
        &self,
        send: impl Input<T>,
        recv: impl Output<T>,
        stream: &Stream,
    ) -> Result<()> {
        const OP: &str = "Communicator::all_gather";
        self.out_of_place::<T>(OP, stream, &send, &recv)?;
        let ranks = self.count()?;
        same_len(OP, recv.count(), send.count().saturating_mul(ranks))?;
        let call = Call::AllGather { send: address(&send), recv: address(&recv) };
        // SAFETY: as in `all_reduce`; `recv` holds `ranks` blocks of `send.count()`.
        unsafe { self.enqueue::<T>(call, send.count(), stream) }
    }

    /// [`all_gather`](Self::all_gather) in place: `buffer` holds one block per rank, and this
    /// rank's block (at `rank * buffer.len() / ranks`) is what it sends. A length that is not a
    /// multiple of the rank count is an [`Error::InvalidArgument`].
    pub fn all_gather_in_place<T: DataType>(&self, buffer: impl Output<T>, stream: &Stream) -> Result<()> {
        const OP: &str = "Communicator::all_gather_in_place";
        self.in_place::<T>(OP, stream, &buffer)?;
        let (block, recv, send) = self.own_block(OP, &buffer)?;
        // SAFETY: as in `all_reduce`; the send block is this rank's block of `buffer`, the
        // in-place layout NCCL defines.
        unsafe { self.enqueue::<T>(Call::AllGather { send, recv }, block, stream) }
    }

    /// Reduces `send` across the ranks with `op` and scatters the result: rank `r` gets block
    /// `r` in `recv`
    /// ([`ncclReduceScatter`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/colls.html#ncclreducescatter)).
    /// `send` holds `recv.len() * ranks` elements and does not overlap `recv` (see
    /// [`reduce_scatter_in_place`](Self::reduce_scatter_in_place)).
    ///
    /// A `send` of another length, overlapping memory, or memory of another device is an
    /// [`Error::InvalidArgument`](crate::error::Error::InvalidArgument) ([what is checked before a
    /// call](crate::nccl#what-is-checked-before-a-call)).
    pub fn reduce_scatter<T: DataType>(
        &self,
        send: impl Input<T>,
        recv: impl Output<T>,
        op: impl Reduction<T>,
        stream: &Stream,
    ) -> Result<()> {
        const OP: &str = "Communicator::reduce_scatter";
        self.out_of_place::<T>(OP, stream, &send, &recv)?;
        let ranks = self.count()?;
        same_len(OP, send.count(), recv.count().saturating_mul(ranks))?;
        let call = Call::ReduceScatter { send: address(&send), recv: address(&recv), op: op.raw_for(self)? };
        // SAFETY: as in `all_reduce`; `send` holds `ranks` blocks of `recv.count()`.
        unsafe { self.enqueue::<T>(call, recv.count(), stream) }
    }

    /// [`reduce_scatter`](Self::reduce_scatter) in place: `buffer` holds one block per rank,
    /// and this rank's result lands in its own block (at `rank * buffer.len() / ranks`). A
    /// length that is not a multiple of the rank count is an [`Error::InvalidArgument`].
    pub fn reduce_scatter_in_place<T: DataType>(
        &self,
        buffer: impl Output<T>,
        op: impl Reduction<T>,
        stream: &Stream,
    ) -> Result<()> {
        const OP: &str = "Communicator::reduce_scatter_in_place";
        self.in_place::<T>(OP, stream, &buffer)?;
        let (block, send, recv) = self.own_block(OP, &buffer)?;
        let op = op.raw_for(self)?;
        // SAFETY: as in `all_reduce`; the receive block is this rank's block of `buffer`, the
        // in-place layout NCCL defines.
        unsafe { self.enqueue::<T>(Call::ReduceScatter { send, recv, op }, block, stream) }
    }
}
