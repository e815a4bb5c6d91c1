//! The one buffer type over every allocator: a buffer from each allocator is written by a kernel
//! that takes it as an argument and read back; the default and the current allocator; a user's
//! allocator; buffers used across streams whatever the allocator.

#[path = "kernels/mod.rs"]
mod kernels;

use cuda_tests::{TestResult, ensure, ensure_eq, gpu};
use cuhost::alloc::MemAttach;
use cuhost::alloc::{
    Allocator, DeviceAllocation, DeviceAllocator, ManagedAllocator, StreamRef, using_allocator,
};
use cuhost::memory::ManagedBuffer;
use cuhost::mempool::AsyncAllocator;
use cuhost::mempool::{MemPool, MemPoolProps};
use cuhost::module::Module;
use cuhost::pool::MemoryPool;
use cuhost::{Context, Device, DeviceBuffer, LaunchConfig, Stream, StreamFlags};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

fn main() {
    cuda_tests::run(&[
        gpu("a_kernel_writes_a_buffer_from_every_allocator", a_kernel_writes_a_buffer_from_every_allocator),
        gpu(
            "managed_buffers_are_kernel_arguments_and_host_slices",
            managed_buffers_are_kernel_arguments_and_host_slices,
        ),
        gpu(
            "new_uses_the_default_pool_or_the_current_allocator",
            new_uses_the_default_pool_or_the_current_allocator,
        ),
        gpu(
            "a_users_allocator_sees_every_allocation_and_free",
            a_users_allocator_sees_every_allocation_and_free,
        ),
        gpu(
            "recorded_streams_delay_the_free_for_every_allocator",
            recorded_streams_delay_the_free_for_every_allocator,
        ),
    ]);
}

const N: usize = 1 << 16;

fn setup() -> Result<(Context, Stream), cuhost::Error> {
    let ctx = Context::primary(&Device::get(0)?)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    Ok((ctx, stream))
}

fn inputs() -> (Vec<f32>, Vec<f32>) {
    let x: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let y: Vec<f32> = (0..N).map(|i| (N - i) as f32 * 0.5).collect();
    (x, y)
}

/// Runs `y = 2x + y` with both buffers from `allocator` (the current one when `None`) and
/// checks every element.
fn saxpy_in(ctx: &Context, stream: &Stream, allocator: Option<Arc<dyn Allocator>>) -> TestResult {
    let module = Module::from_ptx(ctx, kernels::PTX)?;
    let saxpy = module.function("saxpy")?;
    let (x, y) = inputs();
    let (mut dx, mut dy) = match &allocator {
        Some(a) => (
            DeviceBuffer::<f32>::new_in(stream, N, a.clone())?,
            DeviceBuffer::<f32>::new_in(stream, N, a.clone())?,
        ),
        None => (DeviceBuffer::<f32>::new(stream, N)?, DeviceBuffer::<f32>::new(stream, N)?),
    };
    dx.copy_from(&x)?;
    dy.copy_from(&y)?;
    let (n, a) = (N as u32, 2.0f32);
    // SAFETY: saxpy takes (u32 n, f32 a, const f32* x, f32* y); both buffers hold n floats.
    unsafe { saxpy.launch(stream, &LaunchConfig::for_elements(n, 256), (&n, &a, &dx, &mut dy))? };
    let out = dy.to_vec()?;
    let name = dy.allocator_name();
    for i in 0..N {
        ensure_eq!(out[i], 2.0 * x[i] + y[i], "element {i} from {name}");
    }
    Ok(())
}

fn a_kernel_writes_a_buffer_from_every_allocator() -> TestResult {
    let (ctx, stream) = setup()?;
    saxpy_in(&ctx, &stream, None)?;
    saxpy_in(&ctx, &stream, Some(Arc::new(MemoryPool::new(&ctx)?)))?;
    saxpy_in(&ctx, &stream, Some(Arc::new(DeviceAllocator::new(&ctx))))?;
    saxpy_in(&ctx, &stream, Some(Arc::new(AsyncAllocator::new(&ctx))))?;
    saxpy_in(&ctx, &stream, Some(Arc::new(ManagedAllocator::new(&ctx))))?;
    let created = MemPool::create(&MemPoolProps::device(ctx.device()))?;
    saxpy_in(&ctx, &stream, Some(Arc::new(AsyncAllocator::from_pool(&ctx, created))))?;
    let pool_over_async = MemoryPool::with_allocator(&ctx, Arc::new(AsyncAllocator::new(&ctx)))?;
    saxpy_in(&ctx, &stream, Some(Arc::new(pool_over_async)))?;
    saxpy_in(&ctx, &stream, Some(Arc::new(Counting::new(&ctx))))?;
    stream.synchronize()?;
    Ok(())
}

fn managed_buffers_are_kernel_arguments_and_host_slices() -> TestResult {
    let (ctx, stream) = setup()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let saxpy = module.function("saxpy")?;
    let (x, y) = inputs();
    let mut mx = ManagedBuffer::<f32>::new_managed(&stream, N, MemAttach::Global)?;
    let mut my = ManagedBuffer::<f32>::new_managed(&stream, N, MemAttach::Global)?;
    // SAFETY: nothing runs on the device yet (new_managed returned after zeroing).
    unsafe {
        mx.as_host_slice_mut().copy_from_slice(&x);
        my.as_host_slice_mut().copy_from_slice(&y);
    }
    let (n, a) = (N as u32, 3.0f32);
    // SAFETY: as in saxpy_in.
    unsafe { saxpy.launch(&stream, &LaunchConfig::for_elements(n, 256), (&n, &a, &mx, &mut my))? };
    stream.synchronize()?;
    // SAFETY: the stream is idle; nothing else uses the memory.
    let host = unsafe { my.as_host_slice() };
    for i in 0..N {
        ensure_eq!(host[i], 3.0 * x[i] + y[i], "managed element {i}");
    }
    ensure_eq!(my.allocator_name(), "cuMemAllocManaged");
    Ok(())
}

fn new_uses_the_default_pool_or_the_current_allocator() -> TestResult {
    let (ctx, stream) = setup()?;
    let default = cuhost::pool::default_memory_pool(&ctx.device())?;
    let before = default.used_bytes();
    let b = DeviceBuffer::<u32>::new(&stream, 1000)?;
    ensure_eq!(b.allocator_name(), "MemoryPool");
    ensure!(default.used_bytes() >= before + 4000, "the default pool did not serve DeviceBuffer::new");
    drop(b);
    ensure_eq!(default.used_bytes(), before, "the block went back to the default pool");

    let mine = Arc::new(MemoryPool::new(&ctx)?);
    {
        let _scope = using_allocator(mine.clone());
        let c = DeviceBuffer::<u32>::new(&stream, 1024)?;
        ensure_eq!(mine.used_bytes(), 4096, "using_allocator: DeviceBuffer::new allocates from it");
        ensure_eq!(default.used_bytes(), before, "and not from the default pool");
        drop(c);
        ensure_eq!(mine.used_bytes(), 0);
    }
    let d = DeviceBuffer::<u32>::new(&stream, 1024)?;
    ensure_eq!(mine.total_bytes(), mine.free_bytes(), "after the scope, not from `mine`");
    ensure!(mine.used_bytes() == 0, "the scope ended: nothing new from `mine`");
    drop(d);
    stream.synchronize()?;
    Ok(())
}

/// A user's allocator: plain `cuMemAlloc`, counting what is outstanding.
struct Counting {
    inner: DeviceAllocator,
    live: AtomicUsize,
    calls: AtomicUsize,
}

impl Counting {
    fn new(ctx: &Context) -> Counting {
        Counting { inner: DeviceAllocator::new(ctx), live: AtomicUsize::new(0), calls: AtomicUsize::new(0) }
    }
}

// SAFETY: forwards to `DeviceAllocator` (which keeps the contract of `Allocator`), only
// counting the calls.
unsafe impl Allocator for Counting {
    fn allocate(&self, size: usize, stream: StreamRef<'_>) -> cuhost::Result<DeviceAllocation> {
        let a = self.inner.allocate(size, stream)?;
        self.live.fetch_add(1, Ordering::SeqCst);
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(a)
    }

    unsafe fn deallocate(&self, allocation: DeviceAllocation, stream: StreamRef<'_>) -> cuhost::Result<()> {
        self.live.fetch_sub(1, Ordering::SeqCst);
        // SAFETY: forwarded under the caller's contract.
        unsafe { self.inner.deallocate(allocation, stream) }
    }

    fn name(&self) -> &'static str {
        "counting"
    }
}

fn a_users_allocator_sees_every_allocation_and_free() -> TestResult {
    let (ctx, stream) = setup()?;
    let counting = Arc::new(Counting::new(&ctx));
    {
        let _scope = using_allocator(counting.clone());
        let a = DeviceBuffer::<u64>::from_slice(&stream, &[1, 2, 3])?;
        let b = DeviceBuffer::<u8>::new(&stream, 100)?;
        ensure_eq!(counting.live.load(Ordering::SeqCst), 2);
        ensure_eq!(a.allocator_name(), "counting");
        ensure_eq!(a.to_vec()?, vec![1, 2, 3]);
        drop((a, b));
    }
    ensure_eq!(counting.live.load(Ordering::SeqCst), 0, "every buffer gave its memory back");
    ensure_eq!(counting.calls.load(Ordering::SeqCst), 2);
    Ok(())
}

/// A buffer copied on a second stream, recorded there and dropped at once: the memory must not
/// be reused (for the pool) or freed (for the driver's allocators) before that copy has run.
fn recorded_streams_delay_the_free_for_every_allocator() -> TestResult {
    let (ctx, s1) = setup()?;
    let s2 = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let spin = module.function("saxpy")?;
    let allocators: Vec<Arc<dyn Allocator>> = vec![
        Arc::new(MemoryPool::new(&ctx)?),
        Arc::new(AsyncAllocator::new(&ctx)),
        Arc::new(DeviceAllocator::new(&ctx)),
    ];
    for allocator in allocators {
        let name = allocator.name();
        let data: Vec<u32> = (0..N as u32).collect();
        let mut src = DeviceBuffer::<u32>::new_in(&s1, N, allocator.clone())?;
        src.copy_from(&data)?;
        let mut dst = DeviceBuffer::<u32>::zeroed(&s2, N)?;
        // Keep s2 busy, then copy from `src` on s2 behind that work.
        let mut busy = DeviceBuffer::<f32>::zeroed(&s2, 1 << 22)?;
        let (n, a) = ((1u32 << 22), 1.0f32);
        for _ in 0..20 {
            // SAFETY: saxpy over `busy` with itself as x and y: n floats each.
            unsafe {
                let x = busy.as_raw();
                spin.launch(&s2, &LaunchConfig::for_elements(n, 256), (&n, &a, &x, &mut busy))?
            };
        }
        dst.view_mut().copy_from_device_async(&src.view(), &s2)?;
        src.record_stream(&s2)?;
        drop(src);
        // New memory on s1 from the same allocator, overwritten at once.
        let mut reuse = DeviceBuffer::<u32>::new_in(&s1, N, allocator)?;
        reuse.view_mut().memset_d32_async(0xdead_beef, &s1)?;
        s1.synchronize()?;
        s2.synchronize()?;
        ensure_eq!(dst.to_vec()?, data, "the copy on s2 read its source intact ({name})");
    }
    Ok(())
}
