//! `cuhost::mempool` on a GPU: default and current pools, created pools, attributes, trim,
//! access, stream-ordered allocation, and export/import of a pool and a pointer between two
//! processes (this binary runs itself as the child).

use cuda_tests::{TestResult, drv, ensure, ensure_eq, gpu, multi_gpu};
use cuhost::mempool::AsyncAllocator;
use cuhost::mempool::ipc::PointerExportData;
use cuhost::mempool::{Access, MemPool, MemPoolProps, PoolKind, PoolLocation, ShareableHandle};
use cuhost::pool::MemoryPool;
use cuhost::{Context, Device, DeviceBuffer, Error, Stream, StreamFlags};
use cuhost_driver_sys as sys;
use std::process::{Command, Stdio};

/// Set in the child's environment: the hex of the pointer export data.
const CHILD_ENV: &str = "CUDA_CORE_MEMPOOL_IPC_CHILD";
const WORDS: usize = 1 << 16;

fn main() {
    if let Ok(hex) = std::env::var(CHILD_ENV) {
        let code = match child(&hex) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("ipc child: {e}");
                1
            }
        };
        std::process::exit(code);
    }
    cuda_tests::run(&[
        gpu("default_and_current_pools", default_and_current_pools),
        gpu("pools_by_location_and_kind", pools_by_location_and_kind),
        gpu("attributes_round_trip_and_track_use", attributes_round_trip_and_track_use),
        gpu("created_pool_allocates_and_trims", created_pool_allocates_and_trims),
        gpu("memory_pool_on_a_created_pool", memory_pool_on_a_created_pool),
        gpu("pool_and_pointer_shared_with_another_process", pool_and_pointer_shared_with_another_process),
        multi_gpu("another_device_gets_access_to_a_pool", 2, another_device_gets_access_to_a_pool),
    ]);
}

fn ctx() -> Result<Context, Error> {
    let ctx = Context::primary(&Device::get(0)?)?;
    ctx.bind_to_thread()?;
    Ok(ctx)
}

fn pattern(seed: u32) -> Vec<u32> {
    (0..WORDS as u32).map(|i| i.wrapping_mul(40_503) ^ seed).collect()
}

fn upload(dst: sys::CUdeviceptr, data: &[u32], stream: &Stream) -> TestResult {
    // SAFETY: `dst` holds `data.len() * 4` bytes; synchronized before `data` goes away.
    drv("cuMemcpyHtoDAsync", unsafe {
        sys::cuMemcpyHtoDAsync(dst, data.as_ptr().cast(), data.len() * 4, stream.as_raw())
    })?;
    stream.synchronize()?;
    Ok(())
}

fn download(src: sys::CUdeviceptr, stream: &Stream) -> Result<Vec<u32>, cuda_tests::Failed> {
    let mut out = vec![0u32; WORDS];
    // SAFETY: `src` holds WORDS words; synchronized before `out` is read.
    drv("cuMemcpyDtoHAsync", unsafe {
        sys::cuMemcpyDtoHAsync(out.as_mut_ptr().cast(), src, WORDS * 4, stream.as_raw())
    })?;
    stream.synchronize()?;
    Ok(out)
}

fn default_and_current_pools() -> TestResult {
    let ctx = ctx()?;
    let dev = ctx.device();
    let default = MemPool::device_default(&dev)?;
    let current = MemPool::current(&dev)?;
    ensure_eq!(default.as_raw(), current.as_raw());
    let created = MemPool::create(&MemPoolProps::device(dev))?;
    MemPool::set_current(&dev, &created)?;
    ensure_eq!(MemPool::current(&dev)?.as_raw(), created.as_raw());
    MemPool::set_current(&dev, &default)?;
    ensure_eq!(MemPool::current(&dev)?.as_raw(), default.as_raw());
    ensure_eq!(default.access(&dev)?, Access::ReadWrite);
    // Clones share the pool: an owned pool is destroyed with its last clone only.
    ensure!(!default.is_owned() && created.is_owned(), "borrowed and owned pools");
    let shared = created.clone();
    drop(created);
    ensure_eq!(shared.used_mem_current()?, 0);
    Ok(())
}

fn pools_by_location_and_kind() -> TestResult {
    let ctx = ctx()?;
    let dev = ctx.device();
    let here = PoolLocation::Device(dev);
    let default = MemPool::default_at(here, PoolKind::Pinned)?;
    ensure_eq!(default.as_raw(), MemPool::device_default(&dev)?.as_raw());
    ensure!(!default.is_owned(), "a default pool is borrowed");
    // The location calls and the device calls read and write one slot.
    let created = MemPool::create(&MemPoolProps::device(dev))?;
    MemPool::set_current_at(here, PoolKind::Pinned, &created)?;
    ensure_eq!(MemPool::current(&dev)?.as_raw(), created.as_raw());
    let raw = created.as_raw();
    drop(created);
    // The slot holds the pool: the value read back is alive and usable.
    let current = MemPool::current_at(here, PoolKind::Pinned)?;
    ensure_eq!(current.as_raw(), raw);
    ensure_eq!(current.used_mem_current()?, 0);
    drop(current);
    MemPool::set_current(&dev, &default)?;
    ensure_eq!(MemPool::current_at(here, PoolKind::Pinned)?.as_raw(), default.as_raw());
    // Host memory and managed memory have pools of their own.
    let host = MemPool::default_at(PoolLocation::Host, PoolKind::Pinned)?;
    ensure!(host.as_raw() != default.as_raw(), "the host's pinned pool is not the device's");
    ensure_eq!(MemPool::current_at(PoolLocation::Host, PoolKind::Pinned)?.as_raw(), host.as_raw());
    let managed = MemPool::default_at(here, PoolKind::Managed)?;
    ensure!(managed.as_raw() != default.as_raw(), "the managed pool is not the pinned one");
    // Their memory is not device memory: their allocators refuse device buffers.
    ensure!(default.holds_device_memory(), "a device's pinned pool holds device memory");
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    for other in [&host, &managed] {
        ensure!(!other.holds_device_memory(), "{other:?} holds device memory");
        match DeviceBuffer::<u32>::new_in(&s, 16, other.allocator(&ctx)) {
            Err(Error::InvalidArgument { .. }) => {}
            r => return Err(format!("a device buffer from {other:?}: {r:?}").into()),
        }
    }
    // A pool with no preferred location exists for managed memory only: refused before any call.
    match MemPool::default_at(PoolLocation::NoPreference, PoolKind::Pinned) {
        Err(Error::InvalidArgument { .. }) => {}
        other => return Err(format!("a pinned pool with no location: {other:?}").into()),
    }
    Ok(())
}

fn attributes_round_trip_and_track_use() -> TestResult {
    let ctx = ctx()?;
    let pool = MemPool::create(&MemPoolProps::device(ctx.device()))?;
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    pool.set_release_threshold(64 << 20)?;
    ensure_eq!(pool.release_threshold()?, 64 << 20);
    for on in [false, true] {
        pool.set_reuse_follow_event_dependencies(on)?;
        ensure_eq!(pool.reuse_follow_event_dependencies()?, on);
        pool.set_reuse_allow_opportunistic(on)?;
        ensure_eq!(pool.reuse_allow_opportunistic()?, on);
        pool.set_reuse_allow_internal_dependencies(on)?;
        ensure_eq!(pool.reuse_allow_internal_dependencies()?, on);
    }
    ensure_eq!(pool.used_mem_current()?, 0);
    let a = DeviceBuffer::<u8>::new_in(&s, 8 << 20, pool.allocator(&ctx))?;
    ensure_eq!(a.allocator_name(), "cuMemAllocAsync");
    s.synchronize()?;
    ensure!(
        pool.used_mem_current()? >= 8 << 20,
        "used {} after an 8 MiB allocation",
        pool.used_mem_current()?
    );
    ensure!(pool.reserved_mem_current()? >= 8 << 20, "reserved too little");
    drop(a);
    s.synchronize()?;
    ensure_eq!(pool.used_mem_current()?, 0);
    ensure!(pool.used_mem_high()? >= 8 << 20, "the high-water mark forgot the allocation");
    pool.reset_used_mem_high()?;
    ensure_eq!(pool.used_mem_high()?, 0);
    pool.trim_to(0)?;
    ensure_eq!(pool.reserved_mem_current()?, 0);
    pool.reset_reserved_mem_high()?;
    ensure_eq!(pool.reserved_mem_high()?, 0);
    Ok(())
}

fn created_pool_allocates_and_trims() -> TestResult {
    let ctx = ctx()?;
    let props = MemPoolProps { max_size: 64 << 20, ..MemPoolProps::device(ctx.device()) };
    let pool = MemPool::create(&props)?;
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let b = DeviceBuffer::<u32>::new_in(&s, WORDS, pool.allocator(&ctx))?;
    let data = pattern(1);
    upload(b.as_raw(), &data, &s)?;
    ensure!(download(b.as_raw(), &s)? == data, "data read back differs");
    drop(b);
    // Past max_size the pool refuses.
    match DeviceBuffer::<u8>::new_in(&s, 128 << 20, pool.allocator(&ctx)) {
        Err(e) => ensure_eq!(e.driver_status(), Some(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY)),
        Ok(_) => return Err("a pool of 64 MiB gave 128 MiB".into()),
    }
    s.synchronize()?;
    pool.trim_to(0)?;
    ensure_eq!(pool.reserved_mem_current()?, 0);
    Ok(())
}

fn memory_pool_on_a_created_pool() -> TestResult {
    let ctx = ctx()?;
    let raw = MemPool::create(&MemPoolProps::device(ctx.device()))?;
    let upstream = std::sync::Arc::new(AsyncAllocator::from_pool(&ctx, raw.clone()));
    let pool = std::sync::Arc::new(MemoryPool::with_allocator(&ctx, upstream)?);
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let b = DeviceBuffer::<u32>::new_in(&s, WORDS, pool.clone())?;
    let data = pattern(2);
    upload(b.as_raw(), &data, &s)?;
    ensure!(download(b.as_raw(), &s)? == data, "data read back differs");
    // The allocator holds a clone of the pool, so `raw` is the same, live pool.
    ensure!(raw.used_mem_current()? >= (WORDS * 4) as u64, "the upstream pool does not show the block");
    Ok(())
}

fn another_device_gets_access_to_a_pool() -> TestResult {
    let ctx = ctx()?;
    let other = Device::get(1)?;
    let pool = MemPool::create(&MemPoolProps::device(ctx.device()))?;
    ensure_eq!(pool.access(&other)?, Access::None);
    pool.set_access(&other, Access::ReadWrite)?;
    ensure_eq!(pool.access(&other)?, Access::ReadWrite);
    // The second device reads what the first wrote, through its own context.
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let b = DeviceBuffer::<u32>::new_in(&s, WORDS, pool.allocator(&ctx))?;
    upload(b.as_raw(), &pattern(3), &s)?;
    let ctx1 = Context::primary(&other)?;
    ctx1.bind_to_thread()?;
    let s1 = Stream::new(&ctx1, StreamFlags::NON_BLOCKING)?;
    let got = download(b.as_raw(), &s1)?;
    ctx.bind_to_thread()?;
    ensure!(got == pattern(3), "the other device read different data");
    pool.set_access(&other, Access::None)?;
    ensure_eq!(pool.access(&other)?, Access::None);
    Ok(())
}

fn to_hex(data: &PointerExportData) -> String {
    data.0.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(hex: &str) -> Result<PointerExportData, String> {
    let mut out = [0u8; 64];
    if hex.len() != 128 {
        return Err(format!("export data of {} hex digits, expected 128", hex.len()));
    }
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|e| e.to_string())?;
    }
    Ok(PointerExportData(out))
}

fn pool_and_pointer_shared_with_another_process() -> TestResult {
    let ctx = ctx()?;
    let props =
        MemPoolProps { handle: ShareableHandle::PosixFileDescriptor, ..MemPoolProps::device(ctx.device()) };
    let pool = match MemPool::create(&props) {
        Err(e) if e.driver_status() == Some(sys::CUresult::CUDA_ERROR_NOT_SUPPORTED) => {
            return Err(format!("IPC pools not supported here: {e}").into());
        }
        r => r?,
    };
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let b = DeviceBuffer::<u32>::new_in(&s, WORDS, pool.allocator(&ctx))?;
    upload(b.as_raw(), &pattern(10), &s)?;
    // The pool is exported before its allocations, as the driver expects.
    let fd = pool.export_to_fd()?;
    let data = match pool.export_pointer(b.as_raw()) {
        Ok(d) => d,
        Err(e) => return Err(format!("{e}; {}", ipc_diagnosis(&ctx, &pool, b.as_raw())).into()),
    };
    // The child gets the pool's descriptor as its standard input.
    let out = Command::new(std::env::current_exe()?)
        .env(CHILD_ENV, to_hex(&data))
        .env_remove("CUDA_TEST_REQUIRE_GPU")
        .stdin(Stdio::from(fd))
        .output()?;
    ensure!(
        out.status.success(),
        "child failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The child read our pattern and wrote its own.
    ensure!(download(b.as_raw(), &s)? == pattern(20), "the child's write did not arrive");
    Ok(())
}

/// What the driver says about IPC support and the pointer, for a failure message.
fn ipc_diagnosis(ctx: &Context, pool: &MemPool, ptr: sys::CUdeviceptr) -> String {
    let types =
        ctx.device().attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES);
    let mut owner: sys::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: this attribute is a CUmemoryPool written through the pointer.
    let status = unsafe {
        sys::cuPointerGetAttribute(
            (&mut owner as *mut sys::CUmemoryPool).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
            ptr,
        )
    };
    format!(
        "supported handle types {types:?}; pointer's pool {owner:?} ({}) vs {:?}",
        status.name().unwrap_or("?"),
        pool.as_raw()
    )
}

fn child(hex: &str) -> Result<(), String> {
    use std::os::fd::AsFd;
    let data = from_hex(hex)?;
    let ctx = ctx().map_err(|e| e.to_string())?;
    let stdin = std::io::stdin();
    let pool = MemPool::import_from_fd(stdin.as_fd()).map_err(|e| e.to_string())?;
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING).map_err(|e| e.to_string())?;
    // Access for this process's device; the resident device may already have it.
    let _ = pool.set_access(&ctx.device(), Access::ReadWrite);
    // SAFETY: the parent exported an allocation of WORDS words, and frees it only after this
    // process has exited (having freed its import below).
    let mut imported = unsafe { pool.import_pointer::<u32>(&s, &data, WORDS) }.map_err(|e| e.to_string())?;
    if imported.allocator_name() != "cuMemPoolImportPointer" {
        return Err(format!("the import is given back by {}", imported.allocator_name()));
    }
    let got = imported.to_vec().map_err(|e| e.to_string())?;
    if got != pattern(10) {
        return Err("the parent's data differs in the child".into());
    }
    imported.copy_from(&pattern(20)).map_err(|e| e.to_string())?;
    // Unmapped with cuMemFreeAsync on `s`; the error of that free is reported by `free`.
    imported.free().map_err(|e| e.to_string())?;
    ctx.synchronize().map_err(|e| e.to_string())?;
    Ok(())
}
