//! A simulated `libnccl` for checking `cuda-core`'s NCCL calls against the simulated `libcuda`
//! (`tests/sim-cuda-driver`) on machines without a GPU.
//!
//! Point `NCCL_LIBRARY_PATH` at the built library (`libsim_nccl.so`) and
//! `CUDA_DRIVER_LIBRARY_PATH` at the simulated driver before the first call:
//!
//! * **One rank per communicator**, on device 0: `ncclCommInitAll` with one device,
//!   `ncclCommInitRank` and `ncclCommInitRankConfig` with one rank (the configuration is not
//!   read: every communicator is blocking). Destroy, abort and finalize, the count, device and
//!   rank queries, `ncclCommGetAsyncError`, `ncclCommRegister` and `ncclCommDeregister` (which
//!   register nothing), `ncclGetUniqueId`, the error strings;
//!   `ncclGetVersion` says 2.28.0.
//! * **Calls are copies** queued on the simulated driver with `cuMemcpyDtoDAsync` (looked up
//!   through its `cuGetProcAddress_v2`), so that its checker sees them as work on the stream
//!   with their ranges: all-reduce, broadcast, reduce, all-gather, reduce-scatter, all-to-all,
//!   gather and scatter copy the send memory to the receive memory (onto itself in place);
//!   a receive takes the bytes of the send to the same rank in its group. Root and
//!   peer must be rank 0; the built-in reductions only (one rank reduces nothing).
//! * **Groups** (`ncclGroupStart` / `ncclGroupEnd`, nested) keep their calls until the
//!   outermost end queues them, as NCCL does. Each kept call carries the simulator's owner
//!   epoch of when it was made (`sim_owner_epoch`), and is queued as of that epoch
//!   (`sim_queue_as_of`): memory that had a new owner in between, as when a buffer dropped
//!   inside the group went back to its pool and was handed out again before the end, is a
//!   report of category (a).
//! * **Non-blocking ends** on request (`sim_nccl_set_in_progress(1)`): the outermost
//!   `ncclGroupEnd` keeps the group's calls and answers `ncclInProgress`, and
//!   `ncclCommGetAsyncError` of a communicator queues its kept calls (then says done), as NCCL
//!   queues a non-blocking group in the background; with `sim_nccl_set_in_progress(2)` it
//!   never does and says in progress, as for a peer that is stuck.
#![allow(non_snake_case, clippy::missing_safety_doc)]

mod comms;
mod driver;
mod group;

use group::{Call, Work};
use std::ffi::{c_char, c_int, c_void};

/// The version `ncclGetVersion` reports: 2.28.0.
pub const VERSION: c_int = 22800;

const SUCCESS: c_int = 0;
const UNHANDLED_CUDA_ERROR: c_int = 1;
const INVALID_ARGUMENT: c_int = 4;
const INVALID_USAGE: c_int = 5;
const IN_PROGRESS: c_int = 7;

/// Built-in reductions: sum, product, max, min, average.
const REDUCTIONS: u32 = 5;

/// `ncclUniqueId`: 128 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    internal: [c_char; 128],
}

type Comm = *mut c_void;
type Stream = *mut c_void;

/// Writes `value` through `out`; `false` when it is null.
fn put<T>(out: *mut T, value: T) -> bool {
    if out.is_null() {
        return false;
    }
    // SAFETY: the caller passes a valid out-pointer (checked non-null).
    unsafe { out.write(value) };
    true
}

fn status(ok: bool) -> c_int {
    if ok { SUCCESS } else { INVALID_ARGUMENT }
}

/// The size of an element of `datatype` (`ncclInt8` to `ncclFloat8e5m2`).
fn element_size(datatype: u32) -> Option<u64> {
    [1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1].get(datatype as usize).copied()
}

/// Checks a call and makes it ([`group::issue`]): a live communicator, rank 0 as the root or
/// peer, a known type, a built-in reduction, memory for a call that moves bytes.
fn call(comm: Comm, stream: Stream, count: usize, datatype: u32, rank: c_int, op: u32, work: Work) -> c_int {
    let Some(size) = element_size(datatype) else { return INVALID_ARGUMENT };
    let Some(bytes) = (count as u64).checked_mul(size) else { return INVALID_ARGUMENT };
    let null = match work {
        Work::Copy { dst, src } => dst == 0 || src == 0,
        Work::Send { src } => src == 0,
        Work::Recv { dst } => dst == 0,
    };
    if !comms::is_live(comm as usize) || rank != 0 || op >= REDUCTIONS || (bytes > 0 && null) {
        return INVALID_ARGUMENT;
    }
    group::issue(Call { comm: comm as usize, stream: stream as usize, work, bytes, issued: 0 })
}

fn copy(send: *const c_void, recv: *mut c_void) -> Work {
    Work::Copy { dst: recv as u64, src: send as u64 }
}

/// `ncclGetVersion`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGetVersion(version: *mut c_int) -> c_int {
    status(put(version, VERSION))
}

/// `ncclGetUniqueId`: bytes that name this library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGetUniqueId(id: *mut UniqueId) -> c_int {
    let mut internal = [0; 128];
    for (to, from) in internal.iter_mut().zip(b"sim-nccl") {
        *to = *from as c_char;
    }
    status(put(id, UniqueId { internal }))
}

/// `ncclCommInitAll`: one device, device 0 (or no list).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitAll(comms: *mut Comm, ndev: c_int, devices: *const c_int) -> c_int {
    // SAFETY: a list of `ndev` devices when not null, as the caller promises.
    if ndev != 1 || (!devices.is_null() && unsafe { *devices } != 0) {
        return INVALID_ARGUMENT;
    }
    init(comms)
}

fn init(comm: *mut Comm) -> c_int {
    if comm.is_null() {
        return INVALID_ARGUMENT;
    }
    status(put(comm, comms::create() as Comm))
}

/// `ncclCommInitRank`: rank 0 of one.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitRank(
    comm: *mut Comm,
    nranks: c_int,
    _id: UniqueId,
    rank: c_int,
) -> c_int {
    if nranks != 1 || rank != 0 {
        return INVALID_ARGUMENT;
    }
    init(comm)
}

/// `ncclCommInitRankConfig`: as `ncclCommInitRank`; the configuration is not read.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitRankConfig(
    comm: *mut Comm,
    nranks: c_int,
    id: UniqueId,
    rank: c_int,
    _config: *mut c_void,
) -> c_int {
    // SAFETY: forwards the caller's arguments.
    unsafe { ncclCommInitRank(comm, nranks, id, rank) }
}

/// `ncclCommDestroy`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommDestroy(comm: Comm) -> c_int {
    status(comms::destroy(comm as usize))
}

/// `ncclCommAbort`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommAbort(comm: Comm) -> c_int {
    status(comms::destroy(comm as usize))
}

/// `ncclCommFinalize`: nothing is in flight inside the library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommFinalize(comm: Comm) -> c_int {
    status(comms::is_live(comm as usize))
}

/// `ncclCommGetAsyncError`: queues the calls of groups that ended in progress, then says done
/// (or the error of queueing them).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommGetAsyncError(comm: Comm, state: *mut c_int) -> c_int {
    status(comms::is_live(comm as usize) && put(state, group::queue_pending(comm as usize)))
}

/// While `on` is non-zero, the outermost `ncclGroupEnd` of a group with calls keeps them and
/// answers `ncclInProgress`; `ncclCommGetAsyncError` queues them, or with `on` = 2 never does
/// and says in progress (a peer that is stuck).
#[unsafe(no_mangle)]
pub extern "C" fn sim_nccl_set_in_progress(on: c_int) {
    group::set_in_progress(on != 0, on == 2);
}

/// `ncclCommRegister`: nothing to register with one rank; a made-up handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommRegister(
    comm: Comm,
    buff: *mut c_void,
    _size: usize,
    handle: *mut *mut c_void,
) -> c_int {
    status(comms::is_live(comm as usize) && !buff.is_null() && put(handle, buff))
}

/// `ncclCommDeregister`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommDeregister(comm: Comm, handle: *mut c_void) -> c_int {
    status(comms::is_live(comm as usize) && !handle.is_null())
}

/// `ncclCommCount`: one rank.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommCount(comm: Comm, count: *mut c_int) -> c_int {
    status(comms::is_live(comm as usize) && put(count, 1))
}

/// `ncclCommCuDevice`: device 0.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommCuDevice(comm: Comm, device: *mut c_int) -> c_int {
    status(comms::is_live(comm as usize) && put(device, 0))
}

/// `ncclCommUserRank`: rank 0.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommUserRank(comm: Comm, rank: *mut c_int) -> c_int {
    status(comms::is_live(comm as usize) && put(rank, 0))
}

/// `ncclGetErrorString`.
#[unsafe(no_mangle)]
pub extern "C" fn ncclGetErrorString(result: c_int) -> *const c_char {
    let text = match result {
        0 => c"no error",
        1 => c"unhandled cuda error (the simulated driver refused a call)",
        4 => c"invalid argument (the simulated NCCL has one rank: root and peer 0, built-in reductions)",
        5 => c"invalid usage (a send or receive without its partner in the group, or a group end without a start)",
        _ => c"unknown result code",
    };
    text.as_ptr()
}

/// `ncclGetLastError`.
#[unsafe(no_mangle)]
pub extern "C" fn ncclGetLastError(_comm: Comm) -> *const c_char {
    c"".as_ptr()
}

/// `ncclGroupStart`.
#[unsafe(no_mangle)]
pub extern "C" fn ncclGroupStart() -> c_int {
    group::start()
}

/// `ncclGroupEnd`: the outermost end queues the group's calls.
#[unsafe(no_mangle)]
pub extern "C" fn ncclGroupEnd() -> c_int {
    group::end()
}

/// `ncclAllReduce`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclAllReduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: u32,
    op: u32,
    comm: Comm,
    stream: Stream,
) -> c_int {
    call(comm, stream, count, datatype, 0, op, copy(send, recv))
}

/// `ncclBroadcast`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclBroadcast(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: u32,
    root: c_int,
    comm: Comm,
    stream: Stream,
) -> c_int {
    call(comm, stream, count, datatype, root, 0, copy(send, recv))
}

/// `ncclReduce`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclReduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: u32,
    op: u32,
    root: c_int,
    comm: Comm,
    stream: Stream,
) -> c_int {
    call(comm, stream, count, datatype, root, op, copy(send, recv))
}

/// `ncclAllGather`: `count` elements per rank.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclAllGather(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: u32,
    comm: Comm,
    stream: Stream,
) -> c_int {
    call(comm, stream, count, datatype, 0, 0, copy(send, recv))
}

/// `ncclReduceScatter`: `count` elements per rank.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclReduceScatter(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: u32,
    op: u32,
    comm: Comm,
    stream: Stream,
) -> c_int {
    call(comm, stream, count, datatype, 0, op, copy(send, recv))
}

/// `ncclAlltoAll`: `count` elements per rank.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclAlltoAll(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: u32,
    comm: Comm,
    stream: Stream,
) -> c_int {
    call(comm, stream, count, datatype, 0, 0, copy(send, recv))
}

/// `ncclGather`: `count` elements per rank.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGather(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: u32,
    root: c_int,
    comm: Comm,
    stream: Stream,
) -> c_int {
    call(comm, stream, count, datatype, root, 0, copy(send, recv))
}

/// `ncclScatter`: `count` elements per rank.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclScatter(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: u32,
    root: c_int,
    comm: Comm,
    stream: Stream,
) -> c_int {
    call(comm, stream, count, datatype, root, 0, copy(send, recv))
}

/// `ncclSend` (to rank 0: this rank).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclSend(
    send: *const c_void,
    count: usize,
    datatype: u32,
    peer: c_int,
    comm: Comm,
    stream: Stream,
) -> c_int {
    call(comm, stream, count, datatype, peer, 0, Work::Send { src: send as u64 })
}

/// `ncclRecv` (from rank 0: this rank).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclRecv(
    recv: *mut c_void,
    count: usize,
    datatype: u32,
    peer: c_int,
    comm: Comm,
    stream: Stream,
) -> c_int {
    call(comm, stream, count, datatype, peer, 0, Work::Recv { dst: recv as u64 })
}
