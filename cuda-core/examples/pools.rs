//! Memory pools and allocators: a CuPy-style `MemoryPool` rounds requests up to 512 bytes,
//! keeps freed blocks and hands the same block to the next request of its size on the same
//! stream, and refuses to pass its limit; `using_allocator` and `set_allocator` choose where
//! `DeviceBuffer::new` takes its memory from; the driver's stream-ordered `MemPool` keeps what
//! it reserved below its release threshold until it is trimmed.
//!
//! ```sh
//! cargo run --example pools
//! ```

use cuhost::alloc;
use cuhost::alloc::DeviceAllocator;
use cuhost::mempool::{MemPool, MemPoolProps};
use cuhost::pool::{self, MemoryPool, PoolLimit};
use cuhost::{Context, Device, DeviceBuffer, Error, Stream, StreamFlags};
use std::process::ExitCode;
use std::sync::Arc;

const MIB: usize = 1 << 20;

fn main() -> ExitCode {
    // The default pools cache freed blocks for reuse: give them back before exiting, so
    // that a leak checker (compute-sanitizer --leak-check full) sees only real leaks.
    match run().and_then(|r| cuhost::pool::release_default_pools().map(|()| r)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pools: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Fails the example with `message` unless `ok`.
fn check(ok: bool, message: impl Into<String>) -> cuhost::Result<()> {
    if ok { Ok(()) } else { Err(Error::invalid("pools example", message)) }
}

fn run() -> cuhost::Result<()> {
    let device = Device::get(0)?;
    let ctx = Context::primary(&device)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;

    // A pool of our own: 1000 floats (4000 bytes) take 4096, 1 MiB takes 1 MiB.
    let pool = Arc::new(MemoryPool::new(&ctx)?);
    let small = DeviceBuffer::<f32>::new_in(&stream, 1000, pool.clone())?;
    let mut large = DeviceBuffer::<f32>::new_in(&stream, MIB / 4, pool.clone())?;
    large.copy_from(&vec![1.5; MIB / 4])?;
    check(small.allocation().size == 4096, format!("4000 bytes reserved {}", small.allocation().size))?;
    check(pool.used_bytes() == 4096 + MIB, format!("used {} bytes", pool.used_bytes()))?;
    check(pool.total_bytes() == pool.used_bytes(), "the pool holds more than it handed out")?;
    println!("MemoryPool: 2 buffers, used {} bytes of {} held", pool.used_bytes(), pool.total_bytes());

    // Dropped, the block stays in the pool; the next request of its size gets it back.
    let address = small.as_raw();
    drop(small);
    check(pool.used_bytes() == MIB && pool.free_bytes() == 4096, "the freed block is not free in the pool")?;
    check(pool.n_free_blocks() == 1, format!("{} free blocks", pool.n_free_blocks()))?;
    let again = DeviceBuffer::<f32>::new_in(&stream, 1000, pool.clone())?;
    check(again.as_raw() == address, format!("reused {:#x}, freed {address:#x}", again.as_raw()))?;
    check(pool.total_bytes() == 4096 + MIB, "the pool asked the driver for more memory")?;
    println!("freed {address:#x} and allocated the same size again: same address, no new memory");

    // A limit: a request that would pass it fails, after the pool has given back its cache.
    pool.set_limit(PoolLimit::Bytes(8 * MIB))?;
    check(pool.limit() == Some(8 * MIB), format!("limit {:?}", pool.limit()))?;
    match DeviceBuffer::<u8>::new_in(&stream, 16 * MIB, pool.clone()) {
        Err(Error::OutOfMemory { .. }) => println!("limit 8 MiB: a 16 MiB request is refused (OutOfMemory)"),
        other => {
            return Err(Error::invalid("pools example", format!("16 MiB past an 8 MiB limit: {other:?}")));
        }
    }
    pool.set_limit(PoolLimit::None)?;
    check(large.to_vec()? == vec![1.5; MIB / 4], "a live buffer changed")?;
    drop((again, large));
    pool.free_all_blocks(None)?;
    check(pool.total_bytes() == 0, format!("{} bytes held after free_all_blocks", pool.total_bytes()))?;
    println!("all buffers dropped and free_all_blocks: the pool holds 0 bytes");

    // The thread's allocator: `using_allocator` for a scope (scopes nest), then the default.
    let default = pool::default_memory_pool(&device)?;
    let default_before = default.used_bytes();
    {
        let _pool_scope = alloc::using_allocator(pool.clone());
        let a = DeviceBuffer::<u8>::new(&stream, 1000)?;
        check(pool.used_bytes() == 1024, format!("our pool uses {} bytes", pool.used_bytes()))?;
        let inner = {
            let _plain_scope = alloc::using_allocator(Arc::new(DeviceAllocator::new(&ctx)));
            let b = DeviceBuffer::<u8>::new(&stream, 1000)?;
            check(b.allocator_name() == "cuMemAlloc", format!("inner scope: {}", b.allocator_name()))?;
            check(pool.used_bytes() == 1024, "the inner scope allocated from the pool")?;
            b.allocator_name()
        };
        let c = DeviceBuffer::<u8>::new(&stream, 1000)?;
        check(pool.used_bytes() == 2048, "the outer scope was not restored")?;
        println!(
            "using_allocator: {} (1024 bytes), {inner} in a nested scope, {} again after it",
            a.allocator_name(),
            c.allocator_name()
        );
    }
    let d = DeviceBuffer::<u8>::new(&stream, 1000)?;
    check(pool.used_bytes() == 0, "our pool still holds the scope's buffers")?;
    check(default.used_bytes() == default_before + 1024, "after the scopes, not from the default pool")?;
    println!("after the scopes: {} from the device's default pool", d.allocator_name());
    drop(d);

    // The driver's stream-ordered pool, made the thread's allocator with `set_allocator`.
    let mempool = MemPool::create(&MemPoolProps::device(device))?;
    mempool.set_release_threshold(u64::MAX)?;
    check(mempool.release_threshold()? == u64::MAX, "the release threshold did not stick")?;
    alloc::set_allocator(Some(mempool.allocator(&ctx)));
    let buffer = DeviceBuffer::<f32>::new(&stream, MIB);
    alloc::set_allocator(None);
    let buffer = buffer?;
    check(
        buffer.allocator_name() == "cuMemAllocAsync",
        format!("set_allocator: {}", buffer.allocator_name()),
    )?;
    stream.synchronize()?;
    let (used, reserved) = (mempool.used_mem_current()?, mempool.reserved_mem_current()?);
    check(used >= 4 * MIB as u64 && reserved >= used, format!("used {used}, reserved {reserved}"))?;
    println!("MemPool: a 4 MiB buffer from cuMemAllocAsync, used {used} bytes, reserved {reserved}");
    drop(buffer); // cuMemFreeAsync on `stream`
    stream.synchronize()?;
    let (used, kept) = (mempool.used_mem_current()?, mempool.reserved_mem_current()?);
    check(used == 0, format!("{used} bytes still used after the free"))?;
    check(kept >= 4 * MIB as u64, format!("only {kept} bytes kept under an unlimited release threshold"))?;
    check(mempool.used_mem_high()? >= 4 * MIB as u64, "the used high-water mark missed the buffer")?;
    mempool.trim_to(0)?;
    let trimmed = mempool.reserved_mem_current()?;
    check(trimmed == 0, format!("{trimmed} bytes reserved after trim_to(0)"))?;
    println!("freed and synchronized: used 0, {kept} bytes kept reserved; trim_to(0) released them");

    let deferred = ctx.take_deferred_errors();
    check(deferred.is_empty(), format!("errors kept from drops: {deferred:?}"))?;
    Ok(())
}
