//! What the NCCL tests share: the two-rank clique, host reference values, and uploads and
//! downloads per rank.

use cuhost::nccl::{Communicator, DataType, ReduceOp, bf16, group};
use cuhost::{Device, DeviceBuffer, Error, Stream, StreamFlags};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Elements per rank in most tests: a multiple of the two ranks.
pub const LEN: usize = 64;

/// The tests share the two GPUs: they run one at a time.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One rank of the in-process clique: its communicator and a stream on its device.
pub struct Rank {
    pub comm: Communicator,
    pub stream: Stream,
}

/// A clique over devices 0 and 1 (`ncclCommInitAll`), with a stream per rank.
pub fn clique() -> Result<Vec<Rank>, Error> {
    let devices = [Device::get(0)?, Device::get(1)?];
    Communicator::init_all(&devices)?
        .into_iter()
        .map(|comm| {
            let stream = Stream::new(comm.context(), StreamFlags::NON_BLOCKING)?;
            Ok(Rank { comm, stream })
        })
        .collect()
}

/// Runs `f` for every rank inside one group, as one thread driving several ranks must.
pub fn each(ranks: &[Rank], mut f: impl FnMut(usize, &Rank) -> Result<(), Error>) -> Result<(), Error> {
    group(|| ranks.iter().enumerate().try_for_each(|(i, r)| f(i, r)))
}

/// An element type the tests check, made from small whole (or half) numbers that every type
/// holds exactly.
pub trait Elem: DataType + PartialEq + std::fmt::Debug {
    /// Whether NCCL's average truncates (integers).
    const INTEGER: bool;
    /// The value `v` in this type.
    fn of(v: f64) -> Self;
}

impl Elem for f32 {
    const INTEGER: bool = false;
    fn of(v: f64) -> f32 {
        v as f32
    }
}

impl Elem for i32 {
    const INTEGER: bool = true;
    fn of(v: f64) -> i32 {
        v as i32
    }
}

impl Elem for bf16 {
    const INTEGER: bool = false;
    fn of(v: f64) -> bf16 {
        bf16::from_f64(v)
    }
}

/// The value rank `rank` holds at index `i`: 1 to 4.
pub fn value(rank: usize, i: usize) -> f64 {
    (1 + (i + 3 * rank) % 4) as f64
}

/// Rank `rank`'s input of `len` elements.
pub fn input<T: Elem>(rank: usize, len: usize) -> Vec<T> {
    (0..len).map(|i| T::of(value(rank, i))).collect()
}

/// `op` over the values every rank holds at index `i` of the inputs, as the host computes it.
pub fn reduced(op: ReduceOp, ranks: usize, i: usize, integer: bool) -> f64 {
    let values: Vec<f64> = (0..ranks).map(|r| value(r, i)).collect();
    let sum: f64 = values.iter().sum();
    match op {
        ReduceOp::Sum => sum,
        ReduceOp::Prod => values.iter().product(),
        ReduceOp::Max => values.iter().copied().fold(f64::MIN, f64::max),
        ReduceOp::Min => values.iter().copied().fold(f64::MAX, f64::min),
        ReduceOp::Avg if integer => (sum / ranks as f64).trunc(),
        ReduceOp::Avg => sum / ranks as f64,
    }
}

/// One buffer per rank holding `data[rank]`.
pub fn upload<T: Elem>(
    ranks: &[Rank],
    data: impl Fn(usize) -> Vec<T>,
) -> Result<Vec<DeviceBuffer<T>>, Error> {
    ranks.iter().enumerate().map(|(i, r)| DeviceBuffer::from_slice(&r.stream, &data(i))).collect()
}

/// One zeroed buffer of `len` elements per rank.
pub fn zeros<T: Elem>(ranks: &[Rank], len: usize) -> Result<Vec<DeviceBuffer<T>>, Error> {
    ranks.iter().map(|r| DeviceBuffer::zeroed(&r.stream, len)).collect()
}

/// Waits for every rank's stream, then reads every buffer back.
pub fn download<T: Elem>(ranks: &[Rank], buffers: &[DeviceBuffer<T>]) -> Result<Vec<Vec<T>>, Error> {
    for r in ranks {
        r.stream.synchronize()?;
    }
    buffers.iter().map(DeviceBuffer::to_vec).collect()
}
