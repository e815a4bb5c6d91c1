//! The NCCL calls that queue work on a stream, each made in one place: a [`Call`] names the call
//! and carries what is its own (memory, operation, root or peer); the communicator, the element
//! type, the count and the stream are the same for all of them.

use super::comm::Communicator;
use super::datatype::DataType;
use crate::error::Result;
use crate::stream::Stream;
use cuhost_nccl_sys as nccl;
use std::ffi::c_void;

/// One stream-ordered NCCL call and the arguments that are its own.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Call {
    /// `ncclAllReduce`.
    AllReduce { send: *const c_void, recv: *mut c_void, op: nccl::ncclRedOp_t },
    /// `ncclBroadcast`.
    Broadcast { send: *const c_void, recv: *mut c_void, root: i32 },
    /// `ncclReduce`.
    Reduce { send: *const c_void, recv: *mut c_void, op: nccl::ncclRedOp_t, root: i32 },
    /// `ncclAllGather`.
    AllGather { send: *const c_void, recv: *mut c_void },
    /// `ncclReduceScatter`.
    ReduceScatter { send: *const c_void, recv: *mut c_void, op: nccl::ncclRedOp_t },
    /// `ncclAlltoAll`.
    AllToAll { send: *const c_void, recv: *mut c_void },
    /// `ncclGather`.
    Gather { send: *const c_void, recv: *mut c_void, root: i32 },
    /// `ncclScatter`.
    Scatter { send: *const c_void, recv: *mut c_void, root: i32 },
    /// `ncclSend`.
    Send { send: *const c_void, peer: i32 },
    /// `ncclRecv`.
    Recv { recv: *mut c_void, peer: i32 },
}

impl Call {
    /// The name of the NCCL function, as errors report it.
    fn name(self) -> &'static str {
        match self {
            Call::AllReduce { .. } => "ncclAllReduce",
            Call::Broadcast { .. } => "ncclBroadcast",
            Call::Reduce { .. } => "ncclReduce",
            Call::AllGather { .. } => "ncclAllGather",
            Call::ReduceScatter { .. } => "ncclReduceScatter",
            Call::AllToAll { .. } => "ncclAlltoAll",
            Call::Gather { .. } => "ncclGather",
            Call::Scatter { .. } => "ncclScatter",
            Call::Send { .. } => "ncclSend",
            Call::Recv { .. } => "ncclRecv",
        }
    }
}

/// Refuses a stream being captured (by a capture of this crate): the graph's launches would run
/// the call with a communicator that nothing keeps alive for them.
#[inline]
fn refuse_capture(call: Call, stream: &Stream) -> Result<()> {
    if crate::stream::capture_of(stream)?.is_some() {
        return Err(crate::Error::refused(
            crate::error::Reason::DURING_CAPTURE,
            call.name(),
            "the stream is being captured into a graph, whose launches would use the communicator after it \
             may be gone; make the call outside the capture",
        ));
    }
    Ok(())
}

impl Communicator {
    /// Makes `call` with `count` elements of `T` on `stream` and reads NCCL's answer with
    /// [`status`](Self::status): for a call inside a group, whose end waits for it.
    ///
    /// # Safety
    ///
    /// The memory of `call` (null where NCCL reads none, as on a non-root rank of a gather or
    /// scatter) is device memory of the communicator's device, as long as the call reads or
    /// writes there (`count` elements of `T`, or one block per rank for the calls that
    /// gather, scatter or exchange blocks), and is kept alive until the work is queued.
    pub(crate) unsafe fn issue<T: DataType>(&self, call: Call, count: usize, stream: &Stream) -> Result<()> {
        refuse_capture(call, stream)?;
        // SAFETY: the caller's contract.
        let status = unsafe { self.raw_call::<T>(call, count, stream) };
        self.status(call.name(), status)
    }

    /// Makes `call` as [`issue`](Self::issue) does and, outside a group, waits for a
    /// non-blocking communicator to have queued it ([`queued`](Self::queued)).
    ///
    /// # Safety
    ///
    /// As for [`issue`](Self::issue).
    pub(crate) unsafe fn enqueue<T: DataType>(
        &self,
        call: Call,
        count: usize,
        stream: &Stream,
    ) -> Result<()> {
        refuse_capture(call, stream)?;
        // SAFETY: the caller's contract.
        let status = unsafe { self.raw_call::<T>(call, count, stream) };
        self.queued(call.name(), status)
    }

    /// The NCCL function of `call`, with the arguments every call shares.
    ///
    /// # Safety
    ///
    /// As for [`issue`](Self::issue).
    unsafe fn raw_call<T: DataType>(&self, call: Call, count: usize, stream: &Stream) -> nccl::ncclResult_t {
        let (comm, s, ty) = (self.as_raw(), stream.as_raw().cast(), T::RAW);
        // SAFETY: the caller's contract; the communicator and the stream are live.
        unsafe {
            match call {
                Call::AllReduce { send, recv, op } => nccl::ncclAllReduce(send, recv, count, ty, op, comm, s),
                Call::Broadcast { send, recv, root } => {
                    nccl::ncclBroadcast(send, recv, count, ty, root, comm, s)
                }
                Call::Reduce { send, recv, op, root } => {
                    nccl::ncclReduce(send, recv, count, ty, op, root, comm, s)
                }
                Call::AllGather { send, recv } => nccl::ncclAllGather(send, recv, count, ty, comm, s),
                Call::ReduceScatter { send, recv, op } => {
                    nccl::ncclReduceScatter(send, recv, count, ty, op, comm, s)
                }
                Call::AllToAll { send, recv } => nccl::ncclAlltoAll(send, recv, count, ty, comm, s),
                Call::Gather { send, recv, root } => nccl::ncclGather(send, recv, count, ty, root, comm, s),
                Call::Scatter { send, recv, root } => nccl::ncclScatter(send, recv, count, ty, root, comm, s),
                Call::Send { send, peer } => nccl::ncclSend(send, count, ty, peer, comm, s),
                Call::Recv { recv, peer } => nccl::ncclRecv(recv, count, ty, peer, comm, s),
            }
        }
    }
}
