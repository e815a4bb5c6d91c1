//! `cuhost::memory`: device buffers and views, copies, memset, pinned, registered and
//! managed memory, pitched 2D, arrays, pointer attributes, peer copies; buffers on streams
//! (`record_stream`, `set_stream`) and the allocator they come from.

use cuda_tests::{TestResult, ensure, ensure_eq, gpu, multi_gpu};
use cuhost::alloc::MemAttach;
use cuhost::alloc::{Allocator, DeviceAllocator, using_allocator};
use cuhost::copy::{
    CopyRegion3D, Volume, memcpy_2d, memcpy_2d_async, memcpy_3d, memcpy_3d_async, memcpy_3d_peer,
    memcpy_3d_peer_async,
};
use cuhost::memory::{
    Array, ArrayDescriptor, ArrayFlags, HostAllocFlags, HostRegisterFlags, ManagedBuffer, MemAdvice,
    MemLocation, MemoryType, MipmappedArray, PinnedBuffer, PitchedBuffer, RegisteredHostMemory,
    address_range, pointer_attributes,
};
use cuhost::mempool::AsyncAllocator;
use cuhost::pool::MemoryPool;
use cuhost::{
    Context, ContextFlags, Device, DeviceBuffer, DeviceViewMut, Error, Event, EventFlags, Stream, StreamFlags,
};
use cuhost_driver_sys as sys;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

/// `from_slice` and `from_fn` write each element once; `new_uninit` writes none, and a copy from
/// the device that covers it makes every element the device's.
fn pinned_buffers_written_once_and_filled_by_the_device() -> TestResult {
    let (_device, _ctx, s) = cuda_tests::device_zero()?;
    let input: Vec<u32> = (0..(1u32 << 18)).map(|i| i.wrapping_mul(2654435761)).collect();
    let copied = PinnedBuffer::from_slice(&input)?;
    ensure!(copied.as_slice()? == input.as_slice(), "from_slice holds the slice");
    let computed = PinnedBuffer::from_fn(input.len(), |i| input[i] ^ 1)?;
    ensure!(computed.as_slice()?.iter().zip(&input).all(|(c, i)| *c == i ^ 1), "from_fn holds f(i)");
    // A staging buffer: taken from the pool unwritten, then filled by the device. Dirty the
    // pool's memory first, so that stale bytes would show.
    drop(PinnedBuffer::from_fn(input.len(), |_| 0xdead_beef_u32)?);
    let on_device = DeviceBuffer::from_slice(&s, &input)?;
    // SAFETY: the copy below writes every element before any is read (as_slice waits for it).
    let mut staging = unsafe { PinnedBuffer::<u32>::new_uninit(input.len())? };
    on_device.copy_to_pinned_async(&mut staging, &s)?;
    ensure!(staging.as_slice()? == input.as_slice(), "the staging buffer holds the device's data");
    Ok(())
}

/// Chunks of one pinned buffer copy on different streams: a chunk waits for its own copies only,
/// the buffer for all of them once the chunks are gone, and its memory is not reused while a
/// chunk's copy is in flight, even when the chunk was forgotten.
fn pinned_chunks_copy_on_their_own_streams() -> TestResult {
    use cuhost::graph::CaptureMode;
    use std::sync::atomic::{AtomicBool, Ordering};
    let ctx = ctx()?;
    let (a, b) = (stream(&ctx)?, stream(&ctx)?);
    let n = 1 << 20;
    let input: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2_654_435_761) ^ 0xa5a5).collect();
    let device = DeviceBuffer::from_slice(&a, &input)?;
    let mut staging = PinnedBuffer::<u32>::new(n)?;
    ensure!(
        matches!(staging.chunks_mut(0), Err(Error::InvalidArgument { .. })),
        "a chunk length of 0 is refused"
    );
    {
        let mut chunks = staging.chunks_mut(300_000)?;
        ensure_eq!(chunks.len(), 4);
        ensure_eq!(
            chunks.iter().map(|c| (c.offset(), c.len())).collect::<Vec<_>>(),
            vec![(0, 300_000), (300_000, 300_000), (600_000, 300_000), (900_000, n - 900_000)]
        );
        // Stream b is held for a while; the chunks copied on a do not wait for it.
        let b_done = Arc::new(AtomicBool::new(false));
        let flag = b_done.clone();
        b.launch_host_func(move || {
            std::thread::sleep(Duration::from_millis(300));
            flag.store(true, Ordering::SeqCst);
        })?;
        for (i, chunk) in chunks.iter_mut().enumerate() {
            let range = chunk.offset()..chunk.offset() + chunk.len();
            device.slice(range)?.copy_to_pinned_async(chunk, if i % 2 == 0 { &a } else { &b })?;
        }
        ensure!(
            chunks[1].has_copies_in_flight() && chunks[3].has_copies_in_flight(),
            "copies on b not recorded"
        );
        let held = !b_done.load(Ordering::SeqCst);
        ensure!(chunks[0].as_slice()? == &input[..300_000], "chunk 0 holds the device's data");
        ensure!(chunks[2].as_slice()? == &input[600_000..900_000], "chunk 2 holds the device's data");
        if held {
            // (A tool that runs host functions when they are queued has already run it.)
            ensure!(!b_done.load(Ordering::SeqCst), "reading the chunks copied on a waited for stream b");
        }
        ensure!(chunks[3].as_slice()? == &input[900_000..], "chunk 3 holds the device's data");
        // Chunk 1 is dropped with its copy possibly in flight: the buffer covers it.
    }
    ensure!(staging.as_slice()? == input.as_slice(), "the whole buffer waits for every chunk's copy");
    ensure!(!staging.has_copies_in_flight(), "copies in flight after as_slice waited for them");
    // Host-to-device from chunks, then a whole-buffer copy back on another stream.
    {
        let mut back = DeviceBuffer::<u32>::zeroed(&a, n)?;
        // The zeroing is queued on a; the chunks copied on b must not race it.
        a.synchronize()?;
        for (i, chunk) in staging.chunks_mut(1 << 18)?.iter().enumerate() {
            let range = chunk.offset()..chunk.offset() + chunk.len();
            back.slice_mut(range)?.copy_from_pinned_async(chunk, if i % 2 == 0 { &a } else { &b })?;
        }
        a.synchronize()?;
        b.synchronize()?;
        ensure!(back.to_vec()? == input, "the chunks' host-to-device copies landed");
    }
    // A chunk's copy in flight keeps the memory from reuse after the chunk and the buffer are
    // gone (a chunk has no drop code to forget: the buffer holds its tracker).
    let mut doomed = PinnedBuffer::<u32>::new(n)?;
    {
        let mut chunks = doomed.chunks_mut(n / 2)?;
        b.launch_host_func(|| std::thread::sleep(Duration::from_millis(200)))?;
        device.slice(n / 2..n)?.copy_to_pinned_async(&mut chunks[1], &b)?;
    }
    drop(doomed);
    let mut other = PinnedBuffer::<u32>::new(n)?;
    other.as_mut_slice()?.fill(0xdead_beef);
    b.synchronize()?;
    ensure!(other.as_slice()?.iter().all(|&x| x == 0xdead_beef), "a chunk's copy wrote reused memory");
    // Chunks refuse captured copies, and a buffer captured into a graph refuses to split.
    let mut captured = PinnedBuffer::<u32>::new(1024)?;
    {
        let mut chunks = captured.chunks_mut(512)?;
        let capture = a.begin_capture(CaptureMode::ThreadLocal)?;
        let refused = device.slice(0..512)?.copy_to_pinned_async(&mut chunks[0], &a);
        drop(capture.end()?);
        ensure!(
            matches!(refused, Err(Error::InvalidArgument { .. })),
            "a chunk's captured copy: {refused:?}"
        );
    }
    let capture = a.begin_capture(CaptureMode::ThreadLocal)?;
    device.slice(0..1024)?.copy_to_pinned_async(&mut captured, &a)?;
    drop(capture.end()?);
    ensure!(
        matches!(captured.chunks_mut(512), Err(Error::InvalidArgument { .. })),
        "a buffer captured into a graph splits"
    );
    Ok(())
}

/// A page-aligned view exports as a dma-buf descriptor where the device supports it; an
/// unaligned one is refused by the driver.
fn device_memory_exports_as_a_dma_buf() -> TestResult {
    use cuhost::memory::DmaBufMapping;
    let ctx = ctx()?;
    let s = stream(&ctx)?;
    let buffer =
        DeviceBuffer::<u8>::new_in(&s, 4 << 20, Arc::new(cuhost::alloc::DeviceAllocator::new(&ctx)))?;
    let exported = buffer.view().export_dma_buf(DmaBufMapping::Default);
    if !ctx.device().dma_buf_supported()? {
        ensure!(exported.is_err(), "a device without dma-buf support exported one");
        return Ok(());
    }
    let fd = exported?;
    let link = std::fs::read_link(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd)))?;
    ensure!(link.to_string_lossy().contains("dmabuf"), "the descriptor is not a dma-buf: {}", link.display());
    let unaligned = buffer.view().slice(1..4097)?.export_dma_buf(DmaBufMapping::Default);
    ensure!(matches!(unaligned, Err(Error::Driver { .. })), "an unaligned range was exported: {unaligned:?}");
    Ok(())
}

fn main() {
    cuda_tests::run(&[
        gpu("bad_sizes_are_refused_and_context_stays_usable", bad_sizes_are_refused_and_context_stays_usable),
        gpu("round_trip_and_views", round_trip_and_views),
        gpu(
            "pinned_buffers_written_once_and_filled_by_the_device",
            pinned_buffers_written_once_and_filled_by_the_device,
        ),
        gpu(
            "mismatched_and_out_of_bounds_copies_are_refused",
            mismatched_and_out_of_bounds_copies_are_refused,
        ),
        gpu("misaligned_views_are_refused", misaligned_views_are_refused),
        gpu("pinned_chunks_copy_on_their_own_streams", pinned_chunks_copy_on_their_own_streams),
        gpu("device_memory_exports_as_a_dma_buf", device_memory_exports_as_a_dma_buf),
        gpu("memset_widths", memset_widths),
        gpu("async_copies_through_pinned_memory", async_copies_through_pinned_memory),
        gpu("safe_pinned_pipeline_across_two_streams", safe_pinned_pipeline_across_two_streams),
        gpu("stream_ordered_allocation_and_free", stream_ordered_allocation_and_free),
        gpu(
            "record_stream_keeps_memory_of_any_allocator_from_reuse",
            record_stream_keeps_memory_of_any_allocator_from_reuse,
        ),
        gpu("set_stream_moves_a_buffer_to_another_stream", set_stream_moves_a_buffer_to_another_stream),
        gpu("buffers_outlive_the_handles_of_their_stream", buffers_outlive_the_handles_of_their_stream),
        gpu("using_allocator_chooses_where_new_allocates", using_allocator_chooses_where_new_allocates),
        gpu(
            "mapped_pinned_memory_is_reachable_from_the_device",
            mapped_pinned_memory_is_reachable_from_the_device,
        ),
        gpu("registered_host_memory", registered_host_memory),
        gpu("managed_memory_advice_and_prefetch", managed_memory_advice_and_prefetch),
        gpu("pitched_2d_copies_and_memset", pitched_2d_copies_and_memset),
        gpu("arrays_1d_2d_3d_layered_cubemap", arrays_1d_2d_3d_layered_cubemap),
        gpu("mipmapped_arrays", mipmapped_arrays),
        gpu("device_array_and_pitched_copies", device_array_and_pitched_copies),
        gpu("raw_2d_copies_of_sub_rectangles", raw_2d_copies_of_sub_rectangles),
        gpu("raw_3d_and_peer_copies_of_sub_boxes", raw_3d_and_peer_copies_of_sub_boxes),
        gpu("checked_3d_copies_between_two_contexts", checked_3d_copies_between_two_contexts),
        gpu("pointer_attributes_and_address_ranges", pointer_attributes_and_address_ranges),
        multi_gpu("peer_copies_between_devices", 2, peer_copies_between_devices),
        gpu("clone_on_another_stream_copies_what_the_owner_wrote", clone_on_another_stream),
    ]);
}

fn ctx() -> Result<Context, Error> {
    Context::primary(&Device::get(0)?)
}

fn stream(ctx: &Context) -> Result<Stream, Error> {
    Stream::new(ctx, StreamFlags::NON_BLOCKING)
}

/// The index of the first element where `got` and `want` differ, if any (lengths included).
fn first_difference(got: &[u32], want: &[u32]) -> Option<usize> {
    if got.len() != want.len() {
        return Some(got.len().min(want.len()));
    }
    got.iter().zip(want).position(|(g, w)| g != w)
}

fn invalid<T: std::fmt::Debug>(r: Result<T, Error>, what: &str) -> TestResult {
    match r {
        Err(Error::InvalidArgument { message, .. }) => {
            ensure!(!message.is_empty(), "{what}: empty message");
            Ok(())
        }
        other => Err(format!("{what}: expected InvalidArgument, got {other:?}").into()),
    }
}

fn bad_sizes_are_refused_and_context_stays_usable() -> TestResult {
    let ctx = ctx()?;
    let s = stream(&ctx)?;
    let plain: Arc<dyn Allocator> = Arc::new(DeviceAllocator::new(&ctx));
    invalid(DeviceBuffer::<u32>::new(&s, 0), "zero length")?;
    invalid(DeviceBuffer::<u64>::new(&s, usize::MAX / 4), "overflowing length")?;
    invalid(DeviceBuffer::<u32>::new_in(&s, 0, plain.clone()), "zero length from cuMemAlloc")?;
    // Straight from the driver: its status.
    match DeviceBuffer::<u8>::new_in(&s, 1 << 52, plain) {
        Err(e) => ensure_eq!(e.driver_status(), Some(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY)),
        Ok(_) => return Err("a 4 PiB allocation succeeded".into()),
    }
    // Through the default pool, which gives back its cache and retries before it gives up.
    match DeviceBuffer::<u8>::new(&s, 1 << 52) {
        Err(Error::OutOfMemory { requested, .. }) => ensure_eq!(requested, 1usize << 52),
        other => return Err(format!("a 4 PiB allocation from the default pool: {other:?}").into()),
    }
    invalid(PinnedBuffer::<u8>::new(0), "zero pinned")?;
    invalid(PinnedBuffer::<u8>::with_flags(&ctx, 0, HostAllocFlags::empty()), "zero pinned with flags")?;
    invalid(PitchedBuffer::<u32>::new(&s, 16, 0), "zero height")?;
    let b = DeviceBuffer::from_slice(&s, &[1u16, 2, 3])?;
    ensure_eq!(b.to_vec()?, vec![1, 2, 3]);
    Ok(())
}

fn round_trip_and_views() -> TestResult {
    let ctx = ctx()?;
    let s = stream(&ctx)?;
    let host: Vec<u32> = (0..10_000).map(|i| i * 3 + 1).collect();
    let mut b = DeviceBuffer::new(&s, host.len())?;
    ensure_eq!(b.len(), host.len());
    ensure_eq!(b.size_in_bytes(), host.len() * 4);
    b.copy_from(&host)?;
    let mut back = vec![0u32; host.len()];
    b.copy_to(&mut back)?;
    ensure_eq!(back, host);
    // Write through a sub-view and a split, read the whole.
    b.slice_mut(10..20)?.copy_from_host(&[7; 10])?;
    {
        let mut all = b.view_mut();
        let (_, mut tail) = all.split_at_mut(9_990)?;
        tail.memset_d32(5)?;
    }
    let v = b.to_vec()?;
    ensure_eq!(v[9], host[9]);
    ensure_eq!(v[10..20], [7; 10]);
    ensure_eq!(v[20], host[20]);
    ensure_eq!(v[9_990..], [5; 10]);
    // Device to device, whole and sliced.
    // Zeroed in `s`'s order, which the synchronous copies below follow.
    let mut c = DeviceBuffer::<u32>::zeroed(&s, host.len())?;
    ensure_eq!(c.to_vec()?, vec![0; host.len()]);
    c.copy_from_device(&b)?;
    ensure_eq!(c.to_vec()?, v);
    c.slice_mut(0..5)?.copy_from_device(&b.slice(100..105)?)?;
    ensure_eq!(c.slice(0..5)?.to_vec()?, host[100..105].to_vec());
    ensure_eq!(b.slice(3..3)?.len(), 0);
    Ok(())
}

fn mismatched_and_out_of_bounds_copies_are_refused() -> TestResult {
    let ctx = ctx()?;
    let s = stream(&ctx)?;
    let mut a = DeviceBuffer::<f32>::new(&s, 100)?;
    let b = DeviceBuffer::<f32>::new(&s, 99)?;
    invalid(a.copy_from(&[0.0; 101]), "longer host source")?;
    invalid(b.copy_to(&mut [0.0; 100]), "longer host destination")?;
    invalid(a.copy_from_device(&b), "device buffers of different lengths")?;
    invalid(a.slice(50..101), "slice past the end")?;
    let (start, end) = (60, 50);
    invalid(a.slice_mut(start..end), "reversed range")?;
    a.copy_from(&[1.5; 100])?;
    ensure_eq!(a.to_vec()?, vec![1.5f32; 100]);
    Ok(())
}

fn misaligned_views_are_refused() -> TestResult {
    let ctx = ctx()?;
    let s = stream(&ctx)?;
    let mut bytes = DeviceBuffer::<u8>::from_slice(&s, &[1, 0, 0, 0, 2, 0, 0, 0, 3])?;
    invalid(bytes.slice(1..5)?.cast::<u32>(), "cast of a misaligned view")?;
    invalid(bytes.slice(0..6)?.cast::<u32>(), "cast of a ragged view")?;
    let words = bytes.slice(0..8)?.cast::<u32>()?.to_vec()?;
    ensure_eq!(words, vec![1, 2]);
    invalid(bytes.slice_mut(1..5)?.memset_d32(0), "memset_d32 of a misaligned view")?;
    invalid(bytes.slice_mut(0..5)?.memset_d16(0), "memset_d16 of a ragged view")?;
    bytes.slice_mut(0..6)?.memset_d16(0x0909)?;
    ensure_eq!(bytes.to_vec()?, vec![9, 9, 9, 9, 9, 9, 0, 0, 3]);
    Ok(())
}

fn memset_widths() -> TestResult {
    let ctx = ctx()?;
    let s = stream(&ctx)?;
    let mut b = DeviceBuffer::<u8>::new(&s, 64)?;
    b.view_mut().memset_d8(0xab)?;
    ensure_eq!(b.to_vec()?, vec![0xab; 64]);
    b.view_mut().memset_d16(0x1234)?;
    ensure_eq!(b.slice(0..4)?.to_vec()?, vec![0x34, 0x12, 0x34, 0x12]);
    b.view_mut().memset_d32_async(0xdead_beef, &s)?;
    b.slice_mut(60..64)?.memset_d8_async(1, &s)?;
    s.synchronize()?;
    let v = b.to_vec()?;
    ensure_eq!(v[0..4], [0xef, 0xbe, 0xad, 0xde]);
    ensure_eq!(v[60..64], [1, 1, 1, 1]);
    Ok(())
}

fn async_copies_through_pinned_memory() -> TestResult {
    let ctx = ctx()?;
    let s = stream(&ctx)?;
    let n = 1 << 20;
    let input: Vec<u32> = (0..n as u32).collect();
    // One buffer straight from cuMemHostAlloc with flags, one from the default pinned pool.
    let mut src = PinnedBuffer::<u32>::with_flags(&ctx, n, HostAllocFlags::PORTABLE)?;
    ensure!(src.driver_flags()?.contains(HostAllocFlags::PORTABLE), "flags {:?}", src.driver_flags()?);
    src.copy_from_slice(&input)?;
    let mut dst = PinnedBuffer::<u32>::new(n)?;
    ensure!(dst.as_slice()?.iter().all(|&x| x == 0), "new pinned memory is not zeroed");
    let mut a = DeviceBuffer::<u32>::new(&s, n)?;
    let mut b = DeviceBuffer::<u32>::new(&s, n)?;
    // No `unsafe`: the pinned buffers record the copies.
    a.copy_from_pinned_async(&src, &s)?;
    b.view_mut().copy_from_device_async(&a.view(), &s)?;
    b.copy_to_pinned_async(&mut dst, &s)?;
    ensure!(dst.has_copies_in_flight(), "a queued copy into pinned memory is not recorded");
    // `as_slice` waits for the copy that writes `dst`; the stream is not synchronized here.
    ensure!(dst.as_slice()? == src.as_slice()?, "pinned round trip differs");
    ensure!(!dst.has_copies_in_flight(), "copies still in flight after as_slice waited for them");
    ensure_eq!(dst.to_vec()?, input);
    // The views' forms, on parts of the buffers.
    let part = PinnedBuffer::from_slice(&input[..1000].iter().map(|x| x ^ 0xffff).collect::<Vec<_>>())?;
    let mut back = PinnedBuffer::<u32>::new(1000)?;
    a.slice_mut(5000..6000)?.copy_from_pinned_async(&part, &s)?;
    a.slice(5000..6000)?.copy_to_pinned_async(&mut back, &s)?;
    ensure!(back.as_slice()? == part.as_slice()?, "pinned round trip through views differs");
    invalid(a.slice_mut(0..999)?.copy_from_pinned_async(&part, &s), "short view from pinned memory")?;
    invalid(a.slice(0..1001)?.copy_to_pinned_async(&mut back, &s), "long view into pinned memory")?;
    // Pageable memory through the unsafe stream-ordered calls.
    let page: Vec<u32> = (0..1000).rev().collect();
    let mut out = vec![0u32; 1000];
    // SAFETY: both vectors outlive the synchronization below.
    unsafe {
        a.slice_mut(0..1000)?.copy_from_host_async(&page, &s)?;
        a.slice(0..1000)?.copy_to_host_async(&mut out, &s)?;
    }
    s.synchronize()?;
    ensure_eq!(out, page);
    Ok(())
}

/// A pipeline without `unsafe`: host to device from pinned memory on stream `a`, device to
/// device on `a`, device to host into other pinned memory on stream `b` after an event of `a`.
/// The source is dropped as soon as everything is queued (while `a` is held back, so its copy
/// has not run) and pinned memory of the same size is allocated and written at once: the
/// dropped source must not be handed out again before the copy that reads it is done. The
/// destination's `as_slice` waits for the copies.
fn safe_pinned_pipeline_across_two_streams() -> TestResult {
    let ctx = ctx()?;
    let a = stream(&ctx)?;
    let b = stream(&ctx)?;
    let n = 1 << 20;
    let input: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2_654_435_761) ^ 0x5a5a).collect();
    let src = PinnedBuffer::from_slice(&input)?;
    let mut dst = PinnedBuffer::<u32>::new(n)?;
    let mut d1 = DeviceBuffer::<u32>::new(&a, n)?;
    let mut d2 = DeviceBuffer::<u32>::new(&a, n)?;
    a.launch_host_func(|| std::thread::sleep(Duration::from_millis(200)))?;
    d1.copy_from_pinned_async(&src, &a)?;
    d2.view_mut().copy_from_device_async(&d1.view(), &a)?;
    let copied = Event::new(&ctx, EventFlags::DISABLE_TIMING)?;
    copied.record(&a)?;
    b.wait_event(&copied)?;
    d2.copy_to_pinned_async(&mut dst, &b)?;
    d2.record_stream(&b)?;
    ensure!(src.has_copies_in_flight(), "the copy reading the source is not recorded");
    drop(src);
    let mut other = PinnedBuffer::<u32>::new(n)?;
    other.as_mut_slice()?.fill(0xdead_beef);
    let got = dst.as_slice()?;
    if let Some(i) = first_difference(&got, &input) {
        return Err(format!("element {i}: {:#x} instead of {:#x}", got[i], input[i]).into());
    }
    ensure!(!dst.has_copies_in_flight(), "copies still in flight after as_slice waited for them");
    ensure!(other.as_slice()?.iter().all(|&x| x == 0xdead_beef), "the new pinned buffer changed");
    Ok(())
}

fn stream_ordered_allocation_and_free() -> TestResult {
    let ctx = ctx()?;
    if !ctx.device().memory_pools_supported()? {
        return Err("the device has no memory pools".into());
    }
    let s = stream(&ctx)?;
    let driver_pool: Arc<dyn Allocator> = Arc::new(AsyncAllocator::new(&ctx));
    let mut out = PinnedBuffer::<u32>::new(4096)?;
    for round in 0..4u32 {
        let mut b = DeviceBuffer::<u32>::new_in(&s, 4096, driver_pool.clone())?;
        ensure_eq!(b.allocator_name(), "cuMemAllocAsync");
        ensure!(*b.stream() == s, "a buffer allocated on a stream is ordered on another");
        b.view_mut().memset_d32_async(round, &s)?;
        b.copy_to_pinned_async(&mut out, &s)?;
        // Freed in `s`'s order (cuMemFreeAsync), after the copy.
        drop(b);
        ensure_eq!(out.to_vec()?, vec![round; 4096]);
    }
    // A buffer of plain cuMemAlloc memory, moved to `s`, is freed after `s`'s work too.
    let other = stream(&ctx)?;
    let mut c = DeviceBuffer::<u8>::new_in(&other, 100, Arc::new(DeviceAllocator::new(&ctx)))?;
    ensure_eq!(c.allocator_name(), "cuMemAlloc");
    c.set_stream(&s)?;
    c.view_mut().memset_d8_async(1, &s)?;
    drop(c);
    s.synchronize()?;
    other.synchronize()?;
    ensure!(ctx.take_deferred_errors().is_empty(), "a stream-ordered free failed");
    Ok(())
}

/// `record_stream` with memory of the driver's stream-ordered allocator, not a pool of this
/// crate: a buffer of stream `s1` read by a copy queued on `s2` (held back by a host function)
/// is recorded on `s2` and dropped; memory allocated next on `s1` and overwritten there must not
/// change what the copy reads.
fn record_stream_keeps_memory_of_any_allocator_from_reuse() -> TestResult {
    let ctx = ctx()?;
    if !ctx.device().memory_pools_supported()? {
        return Err("the device has no memory pools".into());
    }
    let s1 = stream(&ctx)?;
    let s2 = stream(&ctx)?;
    let driver_pool: Arc<dyn Allocator> = Arc::new(AsyncAllocator::new(&ctx));
    let n = 1 << 20;
    let data: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    let mut a = DeviceBuffer::<u32>::new_in(&s1, n, driver_pool.clone())?;
    a.copy_from(&data)?;
    let mut b = DeviceBuffer::<u32>::new_in(&s2, n, driver_pool.clone())?;
    // Hold `s2` back until the test lets it go (or returns: the sender is dropped).
    let (go, wait) = mpsc::channel::<()>();
    s2.launch_host_func(move || {
        let _ = wait.recv();
    })?;
    b.view_mut().copy_from_device_async(&a.view(), &s2)?;
    a.record_stream(&s2)?;
    a.record_stream(&s1)?;
    ensure!(
        a.recorded_streams().len() == 1 && a.recorded_streams()[0] == s2,
        "recorded streams: {:?}",
        a.recorded_streams()
    );
    drop(a);
    // Likely the same memory, handed out again on `s1` and overwritten in `s1`'s order.
    let mut c = DeviceBuffer::<u32>::new_in(&s1, n, driver_pool)?;
    c.view_mut().memset_d32_async(0xdead_beef, &s1)?;
    go.send(())?;
    let got = b.to_vec()?;
    if let Some(i) = first_difference(&got, &data) {
        return Err(format!("element {i} of the copy: {:#x} instead of {:#x}", got[i], data[i]).into());
    }
    ensure!(c.to_vec()?.iter().all(|&x| x == 0xdead_beef), "the memset of the new buffer was lost");
    s1.synchronize()?;
    s2.synchronize()?;
    ensure!(ctx.take_deferred_errors().is_empty(), "a stream-ordered free failed");
    Ok(())
}

/// `set_stream` orders a buffer on another stream: `stream()` says so, the synchronous copies
/// run there (after work queued there before them), and the data stays right.
/// A buffer keeps its stream usable after the program dropped every handle of it: work queued
/// before still runs in order, copies still wait for it, and the memory goes back to the pool.
fn buffers_outlive_the_handles_of_their_stream() -> TestResult {
    let ctx = ctx()?;
    let data: Vec<u32> = (0..(1 << 16)).collect();
    let (mut b, c) = {
        let s = stream(&ctx)?;
        let b = DeviceBuffer::from_slice(&s, &data)?;
        let mut c = DeviceBuffer::<u32>::zeroed(&s, data.len())?;
        // Behind a sleeping host function, a memset that a copy must wait for.
        s.launch_host_func(|| std::thread::sleep(Duration::from_millis(100)))?;
        c.view_mut().memset_d32_async(9, &s)?;
        (b, c)
    };
    ensure_eq!(c.to_vec()?, vec![9u32; data.len()], "a copy on a stream with no handle left");
    ensure!(b.stream().query().is_ok(), "the stream of a live buffer is gone");
    b.copy_from_device(&c)?;
    ensure_eq!(b.to_vec()?, vec![9u32; data.len()]);
    drop((b, c));
    // New streams, each going upstream once, let go of the streams nobody holds.
    for i in 1..=8usize {
        let s = stream(&ctx)?;
        let big = DeviceBuffer::<u8>::new(&s, (3 << 20) + i * 4096)?;
        ensure_eq!(big.len(), (3 << 20) + i * 4096);
    }
    ctx.synchronize()?;
    ensure!(ctx.take_deferred_errors().is_empty(), "giving memory back failed");
    Ok(())
}

fn set_stream_moves_a_buffer_to_another_stream() -> TestResult {
    let ctx = ctx()?;
    let s1 = stream(&ctx)?;
    let s2 = stream(&ctx)?;
    let data: Vec<u32> = (0..4096).map(|i| i * 7 + 3).collect();
    let mut b = DeviceBuffer::from_slice(&s1, &data)?;
    ensure!(*b.stream() == s1, "the buffer is not on the stream it was allocated on");
    b.set_stream(&s1)?;
    ensure!(b.recorded_streams().is_empty(), "moving a buffer to its own stream recorded it");
    b.set_stream(&s2)?;
    ensure!(*b.stream() == s2, "set_stream did not move the buffer");
    ensure!(
        b.recorded_streams().len() == 1 && b.recorded_streams()[0] == s1,
        "the previous stream is not kept for the free: {:?}",
        b.recorded_streams()
    );
    ensure_eq!(b.to_vec()?, data);
    // Behind a sleeping host function on `s2`, a memset queued there lands before a synchronous
    // copy reads the buffer: the copy runs in `s2`'s order.
    s2.launch_host_func(|| std::thread::sleep(Duration::from_millis(200)))?;
    b.view_mut().memset_d32_async(7, &s2)?;
    ensure_eq!(b.to_vec()?, vec![7u32; data.len()]);
    b.copy_from(&data)?;
    ensure_eq!(b.slice(100..200)?.to_vec()?, data[100..200].to_vec());
    let mut c = DeviceBuffer::<u32>::zeroed(&s1, data.len())?;
    c.copy_from_device(&b)?;
    ensure_eq!(c.to_vec()?, data);
    drop(b);
    s1.synchronize()?;
    s2.synchronize()?;
    ensure!(ctx.take_deferred_errors().is_empty(), "freeing a moved buffer failed");
    Ok(())
}

/// `using_allocator` changes where `DeviceBuffer::new` allocates, on this thread, until the
/// guard is dropped; then the previous allocator is current again.
fn using_allocator_chooses_where_new_allocates() -> TestResult {
    let ctx = ctx()?;
    let s = stream(&ctx)?;
    let pool = Arc::new(MemoryPool::new(&ctx)?);
    let data: Vec<u32> = (0..1024).map(|i| i ^ 0x0f0f).collect();
    {
        let _plain = using_allocator(Arc::new(DeviceAllocator::new(&ctx)));
        {
            let _pool = using_allocator(pool.clone());
            let mut b = DeviceBuffer::<u32>::new(&s, 1024)?;
            ensure_eq!(pool.used_bytes(), 4096);
            ensure_eq!(b.allocator_name(), "MemoryPool");
            b.copy_from(&data)?;
            ensure_eq!(b.to_vec()?, data);
            drop(b);
            s.synchronize()?;
            ensure_eq!(pool.used_bytes(), 0);
            ensure_eq!(pool.total_bytes(), 4096);
        }
        // The outer guard's allocator again.
        let c = DeviceBuffer::<u32>::new(&s, 1024)?;
        ensure_eq!(c.allocator_name(), "cuMemAlloc");
        ensure_eq!(pool.used_bytes(), 0);
    }
    // No guard: the default pool of the device, not `pool`.
    let d = DeviceBuffer::<u32>::new(&s, 1024)?;
    ensure_eq!(d.allocator_name(), "MemoryPool");
    ensure_eq!(pool.used_bytes(), 0);
    ensure_eq!(pool.total_bytes(), 4096);
    drop(d);
    s.synchronize()?;
    pool.check_invariants()?;
    Ok(())
}

fn mapped_pinned_memory_is_reachable_from_the_device() -> TestResult {
    let ctx = ctx()?;
    let mut p =
        PinnedBuffer::<u32>::with_flags(&ctx, 256, HostAllocFlags::DEVICEMAP | HostAllocFlags::PORTABLE)?;
    ensure!(p.as_slice()?.iter().all(|&x| x == 0), "pinned memory is not zeroed");
    ensure!(p.driver_flags()?.contains(HostAllocFlags::DEVICEMAP), "flags {:?}", p.driver_flags()?);
    let d = p.device_ptr(&ctx)?;
    ensure!(d != 0, "null device pointer");
    // SAFETY: `d` maps the 256 words of `p`, which outlives the view and is not accessed meanwhile.
    let mut view: DeviceViewMut<'_, u32> = unsafe { DeviceViewMut::from_raw(&ctx, d, 256) };
    view.memset_d32(0x55)?;
    ctx.synchronize()?;
    ensure!(p.as_slice()?.iter().all(|&x| x == 0x55), "a device memset did not reach mapped host memory");
    p.as_mut_slice()?[0] = 1;
    ensure_eq!(p.to_vec()?[..2], [1, 0x55]);
    ensure_eq!(pointer_attributes(d)?.memory_type, Some(MemoryType::Host));
    Ok(())
}

fn registered_host_memory() -> TestResult {
    let ctx = ctx()?;
    let s = stream(&ctx)?;
    let mut host: Vec<u64> = (0..8192).collect();
    let dev = {
        let reg = RegisteredHostMemory::register(&ctx, &mut host, HostRegisterFlags::PORTABLE)?;
        ensure!(reg.device_ptr()? != 0, "no device address for registered memory");
        DeviceBuffer::from_slice(&s, &reg)?
    };
    ensure_eq!(dev.to_vec()?, host);
    invalid(
        RegisteredHostMemory::register(&ctx, &mut host[..0], HostRegisterFlags::empty()),
        "empty registration",
    )?;
    Ok(())
}

fn managed_memory_advice_and_prefetch() -> TestResult {
    let ctx = ctx()?;
    let d = ctx.device();
    let s = stream(&ctx)?;
    let mut m = ManagedBuffer::<u32>::new_managed(&s, 1 << 16, MemAttach::Global)?;
    ensure!(*m.stream() == s, "the managed buffer is not on its stream");
    ctx.synchronize()?;
    // SAFETY: no device work uses the buffer now.
    ensure!(unsafe { m.as_host_slice() }.iter().all(|&x| x == 0), "new managed memory is not zeroed");
    // SAFETY: as above.
    unsafe { m.as_host_slice_mut() }.iter_mut().enumerate().for_each(|(i, x)| *x = i as u32);
    m.advise(MemAdvice::SetReadMostly, MemLocation::Device(d))?;
    ensure!(m.is_read_mostly()?, "read-mostly advice not reported");
    m.advise(MemAdvice::SetPreferredLocation, MemLocation::Device(d))?;
    ensure_eq!(m.preferred_location()?, Some(MemLocation::Device(d)));
    m.advise(MemAdvice::SetAccessedBy, MemLocation::Device(d))?;
    ensure_eq!(m.accessed_by()?, vec![d]);
    if d.concurrent_managed_access()? {
        m.prefetch_async(MemLocation::Device(d), &s)?;
        s.synchronize()?;
        ensure_eq!(m.last_prefetch_location()?, Some(MemLocation::Device(d)));
    }
    m.attach_async(&s, MemAttach::Single)?;
    s.synchronize()?;
    let copy = m.view().to_vec()?;
    ensure_eq!(copy.len(), 1 << 16);
    ensure!(copy.iter().enumerate().all(|(i, &x)| x == i as u32), "managed contents differ");
    ensure!(pointer_attributes(m.as_raw())?.is_managed, "not reported as managed");
    invalid(ManagedBuffer::<u8>::new_managed(&s, 16, MemAttach::Single), "single-stream allocation")?;
    Ok(())
}

fn pitched_2d_copies_and_memset() -> TestResult {
    let ctx = ctx()?;
    let (w, h) = (100usize, 7usize);
    let s = stream(&ctx)?;
    let mut p = PitchedBuffer::<u32>::new(&s, w, h)?;
    ensure!(p.pitch() >= w * 4, "pitch {} for rows of {} bytes", p.pitch(), w * 4);
    p.memset_d32(0xfeed)?;
    let mut out = vec![0u32; w * h];
    p.copy_to_host(&mut out)?;
    ensure!(out.iter().all(|&x| x == 0xfeed), "2D memset did not fill every row");
    let src: Vec<u32> = (0..(w * h) as u32).collect();
    p.copy_from_host(&src)?;
    p.copy_to_host(&mut out)?;
    ensure_eq!(out, src);
    p.memset_d8(0)?;
    p.copy_to_host(&mut out)?;
    ensure!(out.iter().all(|&x| x == 0), "2D memset_d8 left data");
    invalid(p.copy_from_host(&src[1..]), "short 2D source")?;
    Ok(())
}

fn array_round_trip(ctx: &Context, d: ArrayDescriptor, elements: usize) -> TestResult {
    let mut a = Array::new(ctx, &d)?;
    let got = a.descriptor()?;
    ensure_eq!(
        (got.width, got.height, got.depth, got.num_channels),
        (d.width, d.height, d.depth, d.num_channels)
    );
    ensure_eq!(got.format, d.format);
    let src: Vec<f32> = (0..elements).map(|i| i as f32 * 0.5).collect();
    a.copy_from_host(&src)?;
    let mut out = vec![0f32; elements];
    a.copy_to_host(&mut out)?;
    ensure_eq!(out, src);
    invalid(a.copy_to_host(&mut out[1..]), "short array destination")?;
    Ok(())
}

fn arrays_1d_2d_3d_layered_cubemap() -> TestResult {
    let ctx = ctx()?;
    let f = sys::CUarray_format::CU_AD_FORMAT_FLOAT;
    let desc = |width, height, depth, flags| ArrayDescriptor {
        width,
        height,
        depth,
        format: f,
        num_channels: 1,
        flags,
    };
    array_round_trip(&ctx, desc(1000, 0, 0, ArrayFlags::empty()), 1000)?;
    array_round_trip(&ctx, desc(64, 32, 0, ArrayFlags::SURFACE_LDST), 64 * 32)?;
    array_round_trip(&ctx, desc(16, 8, 4, ArrayFlags::empty()), 16 * 8 * 4)?;
    array_round_trip(&ctx, desc(32, 16, 3, ArrayFlags::LAYERED), 32 * 16 * 3)?;
    array_round_trip(&ctx, desc(16, 16, 6, ArrayFlags::CUBEMAP), 16 * 16 * 6)?;
    let two = ArrayDescriptor { num_channels: 2, ..desc(8, 8, 0, ArrayFlags::empty()) };
    array_round_trip(&ctx, two, 8 * 8 * 2)?;
    invalid(Array::new(&ctx, &desc(0, 4, 0, ArrayFlags::empty())), "zero-width array")?;
    invalid(
        Array::new(&ctx, &ArrayDescriptor { num_channels: 3, ..desc(4, 4, 0, ArrayFlags::empty()) }),
        "3 channels",
    )?;
    let d = ctx.device();
    // Sparse arrays are made (and lent out once backed) by `vmm::SparseArray`.
    invalid(Array::new(&ctx, &desc(1024, 1024, 0, ArrayFlags::SPARSE)), "Array::new with SPARSE")?;
    if d.sparse_cuda_array_supported()? {
        let sparse = cuhost::vmm::SparseArray::new(&ctx, &desc(1024, 1024, 0, ArrayFlags::empty()))?;
        let p = sparse.sparse_properties();
        ensure!(p.tile_extent.0 > 0 && p.tile_extent.1 > 0, "tile extent {:?}", p.tile_extent);
    }
    // So are arrays with deferred mapping, which have no memory until mapped.
    invalid(
        Array::new(&ctx, &desc(256, 256, 0, ArrayFlags::DEFERRED_MAPPING)),
        "Array::new with DEFERRED_MAPPING",
    )?;
    if d.deferred_mapping_cuda_array_supported()? {
        // SAFETY: nothing reaches the array; only its requirements are read.
        let deferred =
            unsafe { Array::new_unbacked(&ctx, &desc(256, 256, 0, ArrayFlags::DEFERRED_MAPPING))? };
        let r = deferred.memory_requirements(&d)?;
        ensure!(r.size >= 256 * 256 * 4 && r.alignment > 0, "requirements {r:?}");
    }
    Ok(())
}

fn mipmapped_arrays() -> TestResult {
    let ctx = ctx()?;
    let desc = ArrayDescriptor {
        width: 64,
        height: 64,
        depth: 0,
        format: sys::CUarray_format::CU_AD_FORMAT_UNSIGNED_INT8,
        num_channels: 4,
        flags: ArrayFlags::empty(),
    };
    let mut m = MipmappedArray::new(&ctx, &desc, 4)?;
    for level in 0..4u32 {
        let mut a = m.level(level)?;
        let d = a.descriptor()?;
        ensure_eq!((d.width, d.height), (64 >> level, 64 >> level));
        let n = (64usize >> level) * (64usize >> level) * 4;
        let src: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        a.copy_from_host(&src)?;
        let mut out = vec![0u8; n];
        a.copy_to_host(&mut out)?;
        ensure_eq!(out, src);
    }
    invalid(m.level(4), "level past the last")?;
    invalid(MipmappedArray::new(&ctx, &desc, 0), "zero levels")?;
    Ok(())
}

fn device_array_and_pitched_copies() -> TestResult {
    let ctx = ctx()?;
    let s = stream(&ctx)?;
    let desc = ArrayDescriptor {
        width: 24,
        height: 10,
        depth: 3,
        format: sys::CUarray_format::CU_AD_FORMAT_UNSIGNED_INT32,
        num_channels: 1,
        flags: ArrayFlags::empty(),
    };
    let n = 24 * 10 * 3;
    let src: Vec<u32> = (0..n as u32).map(|i| i ^ 0x5a5a).collect();
    let dev = DeviceBuffer::from_slice(&s, &src)?;
    let mut a = Array::new(&ctx, &desc)?;
    a.copy_from_device(&dev.view())?;
    let mut b = Array::new(&ctx, &desc)?;
    b.copy_from_array(&a)?;
    // Zeroed in `s`'s order, before the copy queued there.
    let mut out = DeviceBuffer::<u32>::zeroed(&s, n)?;
    b.copy_to_device_async(&mut out.view_mut(), &s)?;
    s.synchronize()?;
    ensure_eq!(out.to_vec()?, src);
    invalid(a.copy_from_device(&dev.slice(1..)?), "short device source for an array")?;
    let other = Array::new(&ctx, &ArrayDescriptor { width: 23, ..desc })?;
    invalid(b.copy_from_array(&other), "arrays of different extents")?;
    // Dense device matrix -> pitched -> pitched -> dense.
    let (w, h) = (24usize, 30usize);
    let mut p = PitchedBuffer::<u32>::new(&s, w, h)?;
    p.copy_from_device(&dev.slice(0..w * h)?)?;
    let mut q = PitchedBuffer::<u32>::new(&s, w, h)?;
    q.copy_from_pitched(&p)?;
    let mut dense = DeviceBuffer::<u32>::zeroed(&s, w * h)?;
    q.copy_to_device_async(&mut dense.view_mut(), &s)?;
    s.synchronize()?;
    ensure_eq!(dense.to_vec()?, src[..w * h].to_vec());
    let narrow = PitchedBuffer::<u32>::new(&s, w - 1, h)?;
    invalid(q.copy_from_pitched(&narrow), "pitched buffers of different widths")?;
    Ok(())
}

/// What the driver is asked to do, on host models of both sides: copy a box of `extent`
/// (elements, rows, slices) from `src` at `from` to `dst` at `to`, where each side has rows of
/// `layout.0` elements and slices of `layout.1` rows. Everything else in `dst` is kept.
fn place(
    dst: &mut [u32],
    dst_layout: (usize, usize),
    to: (usize, usize, usize),
    src: &[u32],
    src_layout: (usize, usize),
    from: (usize, usize, usize),
    extent: (usize, usize, usize),
) {
    let index = |layout: (usize, usize), (x, y, z): (usize, usize, usize)| (z * layout.1 + y) * layout.0 + x;
    for z in 0..extent.2 {
        for y in 0..extent.1 {
            for x in 0..extent.0 {
                dst[index(dst_layout, (to.0 + x, to.1 + y, to.2 + z))] =
                    src[index(src_layout, (from.0 + x, from.1 + y, from.2 + z))];
            }
        }
    }
}

fn zeroed_2d() -> sys::CUDA_MEMCPY2D {
    // SAFETY: a plain C struct of integers, enums and pointers; all zeroes is a valid value.
    unsafe { std::mem::zeroed() }
}

fn zeroed_3d() -> sys::CUDA_MEMCPY3D {
    // SAFETY: as above; the reserved pointers must be null.
    unsafe { std::mem::zeroed() }
}

const DEVICE: sys::CUmemorytype = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
const HOST: sys::CUmemorytype = sys::CUmemorytype::CU_MEMORYTYPE_HOST;
const ARRAY: sys::CUmemorytype = sys::CUmemorytype::CU_MEMORYTYPE_ARRAY;

fn u32_array(width: usize, height: usize, depth: usize) -> ArrayDescriptor {
    ArrayDescriptor {
        width,
        height,
        depth,
        format: sys::CUarray_format::CU_AD_FORMAT_UNSIGNED_INT32,
        num_channels: 1,
        flags: ArrayFlags::empty(),
    }
}

/// Sub-rectangles through `memcpy_2d`/`memcpy_2d_async`: device -> pitched -> host (a row
/// length of its own) and host -> array -> device, each landing exactly where asked and
/// leaving everything around it as it was.
fn raw_2d_copies_of_sub_rectangles() -> TestResult {
    const W: usize = 16;
    const H: usize = 8;
    let ctx = ctx()?;
    let stream = stream(&ctx)?;
    let src: Vec<u32> = (0..(W * H) as u32).map(|i| i * 3 + 1).collect();
    // `from_slice` returns once the copy is done, so the raw calls (which are not ordered on
    // the buffers' stream) see the data.
    let dev = DeviceBuffer::from_slice(&stream, &src)?;
    let mut p = PitchedBuffer::<u32>::new(&stream, W, H)?;
    p.memset_d32(0xdead_beef)?;
    // The raw calls act on the current context.
    ctx.bind_to_thread()?;

    // Device (rows of W) -> pitched: 5 × 4 elements from (3, 2) to (6, 1).
    let mut c = zeroed_2d();
    (c.srcXInBytes, c.srcY, c.srcMemoryType, c.srcDevice, c.srcPitch) =
        (3 * 4, 2, DEVICE, dev.as_raw(), W * 4);
    (c.dstXInBytes, c.dstY, c.dstMemoryType, c.dstDevice, c.dstPitch) =
        (6 * 4, 1, DEVICE, p.as_raw(), p.pitch());
    (c.WidthInBytes, c.Height) = (5 * 4, 4);
    // SAFETY: both sides are live and the rectangle lies within each.
    unsafe { memcpy_2d(&c)? };
    ctx.synchronize()?;
    let mut want = vec![0xdead_beef; W * H];
    place(&mut want, (W, H), (6, 1, 0), &src, (W, H), (3, 2, 0), (5, 4, 1));
    let mut out = vec![0u32; W * H];
    p.copy_to_host(&mut out)?;
    ensure_eq!(out, want);

    // Pitched -> host rows of 10: the same block, from (6, 1) to (2, 3).
    const HW: usize = 10;
    const HH: usize = 8;
    let mut host = vec![0x5555_5555u32; HW * HH];
    let mut c = zeroed_2d();
    (c.srcXInBytes, c.srcY, c.srcMemoryType, c.srcDevice, c.srcPitch) =
        (6 * 4, 1, DEVICE, p.as_raw(), p.pitch());
    (c.dstXInBytes, c.dstY, c.dstMemoryType, c.dstPitch) = (2 * 4, 3, HOST, HW * 4);
    c.dstHost = host.as_mut_ptr().cast();
    (c.WidthInBytes, c.Height) = (5 * 4, 4);
    // SAFETY: as above; `host` holds HH rows of HW elements and outlives the synchronous copy.
    unsafe { memcpy_2d(&c)? };
    ctx.synchronize()?;
    let mut want = vec![0x5555_5555u32; HW * HH];
    place(&mut want, (HW, HH), (2, 3, 0), &src, (W, H), (3, 2, 0), (5, 4, 1));
    ensure_eq!(host, want);

    // Host (rows of W) -> a W × H array of 7s: 3 × 2 from (4, 3) to (1, 5).
    let mut a = Array::new(&ctx, &u32_array(W, H, 0))?;
    a.copy_from_host(&vec![7u32; W * H])?;
    ctx.bind_to_thread()?;
    let mut c = zeroed_2d();
    (c.srcXInBytes, c.srcY, c.srcMemoryType, c.srcPitch) = (4 * 4, 3, HOST, W * 4);
    c.srcHost = src.as_ptr().cast();
    (c.dstXInBytes, c.dstY, c.dstMemoryType, c.dstArray) = (4, 5, ARRAY, a.as_raw());
    (c.WidthInBytes, c.Height) = (3 * 4, 2);
    // SAFETY: as above; the array is W × H elements of 4 bytes.
    unsafe { memcpy_2d(&c)? };
    ctx.synchronize()?;
    let mut in_array = vec![7u32; W * H];
    place(&mut in_array, (W, H), (1, 5, 0), &src, (W, H), (4, 3, 0), (3, 2, 1));
    a.copy_to_host(&mut out)?;
    ensure_eq!(out, in_array);

    // Array -> device rows of W, stream-ordered: the 3 × 2 block from (1, 5) to (0, 0).
    let back = DeviceBuffer::from_slice(&stream, &vec![9u32; W * H])?;
    let mut c = zeroed_2d();
    (c.srcXInBytes, c.srcY, c.srcMemoryType, c.srcArray) = (4, 5, ARRAY, a.as_raw());
    (c.dstMemoryType, c.dstDevice, c.dstPitch) = (DEVICE, back.as_raw(), W * 4);
    (c.WidthInBytes, c.Height) = (3 * 4, 2);
    // SAFETY: as above; both sides outlive the synchronization below.
    unsafe { memcpy_2d_async(&c, &stream)? };
    stream.synchronize()?;
    let mut want = vec![9u32; W * H];
    place(&mut want, (W, H), (0, 0, 0), &src, (W, H), (4, 3, 0), (3, 2, 1));
    ensure_eq!(back.to_vec()?, want);
    Ok(())
}

/// Sub-boxes through `memcpy_3d`/`memcpy_3d_async`/`memcpy_3d_peer`: a 3D array -> dense
/// device memory -> host memory of another pitch and height -> back into the array, and
/// device memory of one context into device memory of another.
fn raw_3d_and_peer_copies_of_sub_boxes() -> TestResult {
    const X: usize = 8;
    const Y: usize = 6;
    const Z: usize = 4;
    let ctx = ctx()?;
    let stream = stream(&ctx)?;
    let values: Vec<u32> = (0..(X * Y * Z) as u32).map(|i| i ^ 0xa5a5_0000).collect();
    let mut a = Array::new(&ctx, &u32_array(X, Y, Z))?;
    a.copy_from_host(&values)?;
    let dev = DeviceBuffer::from_slice(&stream, &vec![u32::MAX; X * Y * Z])?;
    ctx.bind_to_thread()?;

    // Array -> device (rows of X, slices of Y rows): 3 × 2 × 2 from (2, 1, 1) to (4, 3, 2).
    let mut c = zeroed_3d();
    (c.srcXInBytes, c.srcY, c.srcZ, c.srcMemoryType, c.srcArray) = (2 * 4, 1, 1, ARRAY, a.as_raw());
    (c.dstXInBytes, c.dstY, c.dstZ, c.dstMemoryType, c.dstDevice) = (4 * 4, 3, 2, DEVICE, dev.as_raw());
    (c.dstPitch, c.dstHeight) = (X * 4, Y);
    (c.WidthInBytes, c.Height, c.Depth) = (3 * 4, 2, 2);
    // SAFETY: both sides are live and the box lies within each.
    unsafe { memcpy_3d(&c)? };
    ctx.synchronize()?;
    let mut in_dev = vec![u32::MAX; X * Y * Z];
    place(&mut in_dev, (X, Y), (4, 3, 2), &values, (X, Y), (2, 1, 1), (3, 2, 2));
    ensure_eq!(dev.to_vec()?, in_dev);

    // Device -> host rows of 5, slices of 4 rows: the box from (4, 3, 2) to (1, 1, 1).
    const HX: usize = 5;
    const HY: usize = 4;
    const HZ: usize = 3;
    let mut host = vec![0u32; HX * HY * HZ];
    let mut c = zeroed_3d();
    (c.srcXInBytes, c.srcY, c.srcZ, c.srcMemoryType, c.srcDevice) = (4 * 4, 3, 2, DEVICE, dev.as_raw());
    (c.srcPitch, c.srcHeight) = (X * 4, Y);
    (c.dstXInBytes, c.dstY, c.dstZ, c.dstMemoryType) = (4, 1, 1, HOST);
    c.dstHost = host.as_mut_ptr().cast();
    (c.dstPitch, c.dstHeight) = (HX * 4, HY);
    (c.WidthInBytes, c.Height, c.Depth) = (3 * 4, 2, 2);
    // SAFETY: as above; `host` holds HZ slices of HY rows of HX elements.
    unsafe { memcpy_3d(&c)? };
    ctx.synchronize()?;
    let mut in_host = vec![0u32; HX * HY * HZ];
    place(&mut in_host, (HX, HY), (1, 1, 1), &values, (X, Y), (2, 1, 1), (3, 2, 2));
    ensure_eq!(host, in_host);

    // Host -> array, stream-ordered: the box from (1, 1, 1) of the host copy to (0, 0, 0).
    let mut c = zeroed_3d();
    (c.srcXInBytes, c.srcY, c.srcZ, c.srcMemoryType) = (4, 1, 1, HOST);
    c.srcHost = host.as_ptr().cast();
    (c.srcPitch, c.srcHeight) = (HX * 4, HY);
    (c.dstMemoryType, c.dstArray) = (ARRAY, a.as_raw());
    (c.WidthInBytes, c.Height, c.Depth) = (3 * 4, 2, 2);
    // SAFETY: as above; `host` is neither dropped nor written before the stream is synchronized.
    unsafe { memcpy_3d_async(&c, &stream)? };
    stream.synchronize()?;
    let mut in_array = values.clone();
    place(&mut in_array, (X, Y), (0, 0, 0), &values, (X, Y), (2, 1, 1), (3, 2, 2));
    let mut out = vec![0u32; X * Y * Z];
    a.copy_to_host(&mut out)?;
    ensure_eq!(out, in_array);

    // Between contexts (a second one on the same device): the box from (4, 3, 2) of `dev` to
    // (0, 2, 1) of memory in the other context.
    let other = Context::create(&ctx.device(), ContextFlags::empty())?;
    let other_stream = Stream::new(&other, StreamFlags::NON_BLOCKING)?;
    let far = DeviceBuffer::from_slice(&other_stream, &vec![0u32; X * Y * Z])?;
    // SAFETY: a plain C struct of integers, enums and pointers; all zeroes is a valid value.
    let mut c: sys::CUDA_MEMCPY3D_PEER = unsafe { std::mem::zeroed() };
    (c.srcXInBytes, c.srcY, c.srcZ, c.srcMemoryType, c.srcDevice) = (4 * 4, 3, 2, DEVICE, dev.as_raw());
    (c.srcContext, c.srcPitch, c.srcHeight) = (ctx.as_raw(), X * 4, Y);
    (c.dstXInBytes, c.dstY, c.dstZ, c.dstMemoryType, c.dstDevice) = (0, 2, 1, DEVICE, far.as_raw());
    (c.dstContext, c.dstPitch, c.dstHeight) = (other.as_raw(), X * 4, Y);
    (c.WidthInBytes, c.Height, c.Depth) = (3 * 4, 2, 2);
    // SAFETY: both sides are live in the contexts named, and the box lies within each.
    unsafe { memcpy_3d_peer(&c)? };
    ctx.synchronize()?;
    other.synchronize()?;
    let mut in_far = vec![0u32; X * Y * Z];
    place(&mut in_far, (X, Y), (0, 2, 1), &values, (X, Y), (2, 1, 1), (3, 2, 2));
    ensure_eq!(far.to_vec()?, in_far);
    Ok(())
}

/// `Stream::copy_3d_peer` (`cuMemcpy3DPeerAsync`) between two contexts of one device, and the
/// raw `memcpy_3d_peer_async`: a box of dense device memory of one context into a pitched
/// buffer of the other, on a stream of the first; then, on a stream of the second, that buffer
/// whole into an array of the second, a box of it into pinned memory and a box of the array
/// back into device memory of the first. Every element lands where the boxes say, the memory
/// of the other context notes the stream, and bad boxes and an array of another context than
/// the stream are refused before any call.
fn checked_3d_copies_between_two_contexts() -> TestResult {
    const X: usize = 8;
    const Y: usize = 6;
    const Z: usize = 4;
    let whole = [X, Y, Z];
    let ctx = ctx()?;
    let here = stream(&ctx)?;
    let other = Context::create(&ctx.device(), ContextFlags::empty())?;
    let there = stream(&other)?;
    let values: Vec<u32> = (0..(X * Y * Z) as u32).map(|i| i.wrapping_mul(2_654_435_761) ^ 0x5a5a).collect();
    let near = DeviceBuffer::from_slice(&here, &values)?;
    let mut far = PitchedBuffer::<u32>::new(&there, X, Y * Z)?;
    far.copy_from_host(&vec![0u32; X * Y * Z])?;

    // On a stream of the first context: the box (2, 1, 1) of 3 × 2 × 2 to (4, 3, 2) of `far`.
    let across = CopyRegion3D::of([3, 2, 2]).from([2, 1, 1]).to([4, 3, 2]);
    here.copy_3d_peer(Volume::new(&mut far, whole), Volume::new(&near, whole), across)?;
    ensure!(
        far.storage().recorded_streams().contains(&here),
        "the other context's buffer did not note the stream"
    );
    here.synchronize()?;
    let mut in_far = vec![0u32; X * Y * Z];
    place(&mut in_far, (X, Y), (4, 3, 2), &values, (X, Y), (2, 1, 1), (3, 2, 2));
    let mut seen = vec![0u32; X * Y * Z];
    far.copy_to_host(&mut seen)?;
    ensure_eq!(seen, in_far);

    // On a stream of the second: `far` whole into an array of the second, the box into pinned
    // memory, and the box of the array back into device memory of the first.
    let mut array = Array::new(&other, &u32_array(X, Y, Z))?;
    there.copy_3d_peer(
        &mut array,
        Volume::new(&far, whole),
        CopyRegion3D::of(whole).from([0; 3]).to([0; 3]),
    )?;
    let mut pinned = PinnedBuffer::<u32>::new(3 * 2 * 2)?;
    let to_pinned = CopyRegion3D::of([3, 2, 2]).from([4, 3, 2]).to([0; 3]);
    there.copy_3d_peer(Volume::new(&mut pinned, [3, 2, 2]), Volume::new(&far, whole), to_pinned)?;
    let mut back = DeviceBuffer::<u32>::zeroed(&here, X * Y * Z)?;
    here.synchronize()?;
    there.copy_3d_peer(
        Volume::new(&mut back, whole),
        &array,
        CopyRegion3D::of([3, 2, 2]).from([4, 3, 2]).to([1, 0, 0]),
    )?;
    let mut in_pinned = vec![0u32; 3 * 2 * 2];
    place(&mut in_pinned, (3, 2), (0, 0, 0), &values, (X, Y), (2, 1, 1), (3, 2, 2));
    // Waits for the copy that writes it.
    ensure_eq!(pinned.as_slice()?, in_pinned.as_slice());
    ensure!(back.recorded_streams().contains(&there), "the first context's buffer did not note the stream");
    there.synchronize()?;
    array.copy_to_host(&mut seen)?;
    ensure_eq!(seen, in_far);
    let mut in_back = vec![0u32; X * Y * Z];
    place(&mut in_back, (X, Y), (1, 0, 0), &values, (X, Y), (2, 1, 1), (3, 2, 2));
    ensure_eq!(back.to_vec()?, in_back);

    // The raw form: the box (1, 0, 0) of `back` (first context) to the corner of `far`.
    // SAFETY: a plain C struct of integers, enums and pointers; all zeroes is a valid value.
    let mut c: sys::CUDA_MEMCPY3D_PEER = unsafe { std::mem::zeroed() };
    (c.srcXInBytes, c.srcMemoryType, c.srcDevice, c.srcContext) = (4, DEVICE, back.as_raw(), ctx.as_raw());
    (c.srcPitch, c.srcHeight) = (X * 4, Y);
    (c.dstMemoryType, c.dstDevice, c.dstContext) = (DEVICE, far.as_raw(), other.as_raw());
    (c.dstPitch, c.dstHeight) = (far.pitch(), Y);
    (c.WidthInBytes, c.Height, c.Depth) = (3 * 4, 2, 2);
    // SAFETY: both sides are live in the contexts named, the box lies within each, and both
    // outlive the synchronization below.
    unsafe { memcpy_3d_peer_async(&c, &there)? };
    there.synchronize()?;
    far.copy_to_host(&mut seen)?;
    place(&mut in_far, (X, Y), (0, 0, 0), &values, (X, Y), (2, 1, 1), (3, 2, 2));
    ensure_eq!(seen, in_far);

    // Refused before any call: an array of another context than the stream, boxes past either
    // side, a volume whose extent is not its memory's. A box with a zero extent copies nothing.
    let refused = |r: cuhost::Result<()>, what: &str| -> TestResult {
        ensure!(matches!(r, Err(Error::InvalidArgument { .. })), "{what}: {r:?}");
        Ok(())
    };
    let everything = CopyRegion3D::of(whole).from([0; 3]).to([0; 3]);
    refused(
        here.copy_3d_peer(&mut array, Volume::new(&near, whole), everything),
        "an array of the other context",
    )?;
    // The array's own whole copies on a stream of another context, which its drop would not
    // wait for.
    refused(array.copy_from_device_async(&near.view(), &here), "an array copy on another context's stream")?;
    refused(
        array.copy_to_device_async(&mut back.view_mut(), &here),
        "an array copy on another context's stream",
    )?;
    refused(
        here.copy_3d_peer(
            Volume::new(&mut back, whole),
            Volume::new(&near, whole),
            CopyRegion3D::of([3, 1, 1]).from([0; 3]).to([6, 0, 0]),
        ),
        "a destination box past the width",
    )?;
    refused(
        here.copy_3d_peer(
            Volume::new(&mut far, whole),
            Volume::new(&near, whole),
            CopyRegion3D::of([1, 1, 3]).from([0, 0, 2]).to([0; 3]),
        ),
        "a source box past the depth",
    )?;
    refused(
        here.copy_3d_peer(Volume::new(&mut back, [X, Y, Z - 1]), Volume::new(&near, whole), everything),
        "a volume smaller than its memory",
    )?;
    let before = back.to_vec()?;
    here.copy_3d_peer(
        Volume::new(&mut back, whole),
        Volume::new(&near, whole),
        CopyRegion3D::of([X, 0, Z]).from([0; 3]).to([0; 3]),
    )?;
    here.synchronize()?;
    ensure!(back.to_vec()? == before, "a box of no height copied something");
    ctx.synchronize()?;
    other.synchronize()?;
    Ok(())
}

fn pointer_attributes_and_address_ranges() -> TestResult {
    let ctx = ctx()?;
    let s = stream(&ctx)?;
    // Plain cuMemAlloc memory: each buffer is an allocation of its own (a pool's buffers may
    // share one, and with it a range and a buffer id).
    let plain: Arc<dyn Allocator> = Arc::new(DeviceAllocator::new(&ctx));
    let b = DeviceBuffer::<u32>::new_in(&s, 1000, plain.clone())?;
    let a = pointer_attributes(b.as_raw() + 40)?;
    ensure_eq!(a.memory_type, Some(MemoryType::Device));
    ensure_eq!(a.context, ctx.as_raw());
    ensure_eq!(a.device_ordinal, 0);
    ensure_eq!(a.range_start, b.as_raw());
    ensure!(a.range_size >= 4000, "range size {}", a.range_size);
    ensure!(!a.is_managed, "device memory reported managed");
    ensure!(a.buffer_id != 0, "no buffer id");
    let other = DeviceBuffer::<u32>::new_in(&s, 10, plain)?;
    ensure!(pointer_attributes(other.as_raw())?.buffer_id != a.buffer_id, "two buffers share an id");
    // Memory of the default pool is device memory of the context too.
    let pooled = DeviceBuffer::<u32>::new(&s, 10)?;
    let p = pointer_attributes(pooled.as_raw())?;
    ensure_eq!((p.memory_type, p.context), (Some(MemoryType::Device), ctx.as_raw()));
    ensure_eq!(address_range(b.as_raw() + 100)?.0, b.as_raw());
    let local = 0u64;
    let unknown = pointer_attributes(&raw const local as sys::CUdeviceptr)?;
    ensure_eq!(unknown.memory_type, None);
    cuhost::memory::set_sync_memops(b.as_raw(), true)?;
    ensure!(pointer_attributes(b.as_raw())?.sync_memops, "sync_memops not set");
    Ok(())
}

fn peer_copies_between_devices() -> TestResult {
    let c0 = Context::primary(&Device::get(0)?)?;
    let c1 = Context::primary(&Device::get(1)?)?;
    let (s0, s1) = (stream(&c0)?, stream(&c1)?);
    let a = DeviceBuffer::from_slice(&s0, &(0..4096u32).collect::<Vec<_>>())?;
    // Zeroed in `s1`'s order; the copy into it runs there too. Plain `cuMemAlloc` on device 1,
    // so that its primary context (with the driver's peer staging memory) goes at the end.
    let mut b = DeviceBuffer::<u32>::new_in(&s1, 4096, Arc::new(DeviceAllocator::new(&c1)))?;
    b.view_mut().memset_d32_async(0, &s1)?;
    b.copy_from_device(&a)?;
    ensure_eq!(b.to_vec()?, a.to_vec()?);
    let s = stream(&c0)?;
    let mut c = DeviceBuffer::<u32>::zeroed(&s, 4096)?;
    c.view_mut().copy_from_device_async(&b.view(), &s)?;
    s.synchronize()?;
    ensure_eq!(c.to_vec()?, a.to_vec()?);
    Ok(())
}

/// `DeviceBuffer::clone_on` on a stream other than the source's. First, the copy waits for a
/// write queued late on the source's stream (it holds fives, not the threes the memory held
/// before). Then, with the copy's stream held back, the source is dropped at once and a
/// successor of sevens taken on its stream: the late copy still reads the fives (the release
/// waited for it), and the successor keeps its sevens.
fn clone_on_another_stream() -> TestResult {
    const N: usize = 1 << 22;
    let (_device, ctx, owner) = cuda_tests::device_zero()?;
    let other = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let mut source = DeviceBuffer::<u32>::from_slice(&owner, &vec![3; N])?;
    cuda_tests::hold(&owner, 300)?;
    source.view_mut().memset_d32_async(5, &owner)?;
    let first = source.clone_on(&other)?;
    ensure!(first.stream() == &other, "the clone belongs to the stream it was made on");
    other.synchronize()?;
    ensure_eq!(first.to_vec()?.iter().filter(|&&v| v != 5).count(), 0, "words of the clone not written");
    cuda_tests::hold(&other, 300)?;
    let late = source.clone_on(&other)?;
    drop(source);
    let successor = DeviceBuffer::<u32>::from_slice(&owner, &vec![7; N])?;
    other.synchronize()?;
    ensure_eq!(late.to_vec()?.iter().filter(|&&v| v != 5).count(), 0, "words of the late clone not fives");
    ensure_eq!(successor.to_vec()?.iter().filter(|&&v| v != 7).count(), 0, "words of the successor changed");
    cuda_tests::no_deferred(&ctx)
}
