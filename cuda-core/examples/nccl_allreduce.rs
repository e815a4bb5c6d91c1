//! An all-reduce with one rank per process, on one host or several.
//!
//! ```text
//! cargo run --example nccl_allreduce -- RANK NRANKS ADDRESS
//! ```
//!
//! Rank 0 makes the NCCL unique id and serves it at ADDRESS (`host:port`) over TCP; the other
//! ranks connect there and read it. Each rank then uses GPU `RANK % (GPUs on its host)`, sums a
//! buffer across all ranks and checks the result. On one host with two GPUs:
//!
//! ```text
//! cargo run --example nccl_allreduce -- 0 2 127.0.0.1:29500 &
//! cargo run --example nccl_allreduce -- 1 2 127.0.0.1:29500
//! ```

use cuhost::nccl::{Communicator, Config, ReduceOp, UniqueId};
use cuhost::{Context, Device, DeviceBuffer, Stream, StreamFlags};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

type Failure = Box<dyn std::error::Error>;

const ELEMENTS: usize = 1 << 20;

fn main() {
    // As in the other examples: the default pools' cache goes back before exiting.
    if let Err(e) = run().and_then(|r| Ok(cuhost::pool::release_default_pools().map(|()| r)?)) {
        eprintln!("nccl_allreduce: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Failure> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [rank, ranks, address] = args.as_slice() else {
        return Err("usage: nccl_allreduce RANK NRANKS HOST:PORT".into());
    };
    let (rank, ranks): (usize, usize) = (rank.parse()?, ranks.parse()?);
    if ranks == 0 || rank >= ranks {
        return Err(format!("rank {rank} is not below the rank count {ranks}").into());
    }
    // This example keeps NCCL's NVLink SHARP off (it needs multicast objects, which hosts
    // shared with other jobs may not offer).
    // SAFETY: no other thread runs yet, so nothing reads the environment meanwhile.
    unsafe { std::env::set_var("NCCL_NVLS_ENABLE", "0") };

    let id = if rank == 0 { serve_id(address, ranks)? } else { fetch_id(address)? };

    let gpus = Device::count()?;
    if gpus == 0 {
        return Err("this host has no CUDA device".into());
    }
    let device = Device::get(rank % gpus)?;
    let ctx = Context::primary(&device)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let comm = Communicator::init_rank(&ctx, &id, ranks, rank, &Config::new())?;
    println!("rank {rank}/{ranks} on {} ({})", device.name()?, device.ordinal());

    // Rank r contributes r + 1 everywhere; every rank ends with 1 + 2 + ... + ranks.
    let send = DeviceBuffer::from_slice(&stream, &vec![(rank + 1) as f32; ELEMENTS])?;
    let mut recv = DeviceBuffer::<f32>::zeroed(&stream, ELEMENTS)?;
    let start = Instant::now();
    comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &stream)?;
    stream.synchronize()?;
    let elapsed = start.elapsed();

    let want = (ranks * (ranks + 1) / 2) as f32;
    let got = recv.to_vec()?;
    if let Some((i, v)) = got.iter().enumerate().find(|(_, v)| **v != want) {
        return Err(format!("element {i} is {v}, expected {want}").into());
    }
    println!("rank {rank}: all {ELEMENTS} elements are {want} ({elapsed:?} including connection setup)");
    comm.finalize()?;
    Ok(())
}

/// Rank 0: makes the id and sends it to each of the other ranks as they connect.
fn serve_id(address: &str, ranks: usize) -> Result<UniqueId, Failure> {
    let id = UniqueId::new()?;
    let listener = TcpListener::bind(address)?;
    println!("rank 0: serving the unique id at {address} to {} ranks", ranks - 1);
    for _ in 1..ranks {
        let (mut peer, from) = listener.accept()?;
        peer.write_all(id.as_bytes())?;
        println!("rank 0: sent the id to {from}");
    }
    Ok(id)
}

/// The other ranks: connect to rank 0 (retrying while it starts) and read the id.
fn fetch_id(address: &str) -> Result<UniqueId, Failure> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut peer = loop {
        match TcpStream::connect(address) {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                eprintln!("waiting for rank 0 at {address}: {e}");
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => return Err(format!("rank 0 did not answer at {address}: {e}").into()),
        }
    };
    let mut bytes = [0u8; UniqueId::BYTES];
    peer.read_exact(&mut bytes)?;
    Ok(UniqueId::from_bytes(&bytes)?)
}
