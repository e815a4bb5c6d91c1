//! `cuda_core::memory`: device buffers and views, copies, memset, pinned, registered and
//! managed memory, pitched 2D, arrays, pointer attributes, peer copies.

use cuda_core::memory::{
    Array, ArrayDescriptor, ArrayFlags, HostAllocFlags, HostRegisterFlags, ManagedBuffer, MemAdvice,
    MemAttach, MemLocation, MemoryType, MipmappedArray, PinnedHostBuffer, PitchedBuffer,
    RegisteredHostMemory, address_range, pointer_attributes,
};
use cuda_core::{Context, Device, DeviceBuffer, DeviceViewMut, Error, Stream, StreamFlags};
use cuda_driver_sys as sys;
use cuda_tests::{TestResult, ensure, ensure_eq, gpu, multi_gpu};

fn main() {
    cuda_tests::run(&[
        gpu("bad_sizes_are_refused_and_context_stays_usable", bad_sizes_are_refused_and_context_stays_usable),
        gpu("round_trip_and_views", round_trip_and_views),
        gpu(
            "mismatched_and_out_of_bounds_copies_are_refused",
            mismatched_and_out_of_bounds_copies_are_refused,
        ),
        gpu("misaligned_views_are_refused", misaligned_views_are_refused),
        gpu("memset_widths", memset_widths),
        gpu("async_copies_through_pinned_memory", async_copies_through_pinned_memory),
        gpu("stream_ordered_allocation_and_free", stream_ordered_allocation_and_free),
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
        gpu("pointer_attributes_and_address_ranges", pointer_attributes_and_address_ranges),
        multi_gpu("peer_copies_between_devices", 2, peer_copies_between_devices),
    ]);
}

fn ctx() -> Result<Context, Error> {
    Context::primary(&Device::get(0)?)
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
    invalid(DeviceBuffer::<u32>::new(&ctx, 0), "zero length")?;
    invalid(DeviceBuffer::<u64>::new(&ctx, usize::MAX / 4), "overflowing length")?;
    match DeviceBuffer::<u8>::new(&ctx, 1 << 52) {
        Err(e) => ensure_eq!(e.driver_status(), Some(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY)),
        Ok(_) => return Err("a 4 PiB allocation succeeded".into()),
    }
    invalid(PinnedHostBuffer::<u8>::new(&ctx, 0, HostAllocFlags::empty()), "zero pinned")?;
    invalid(PitchedBuffer::<u32>::new(&ctx, 16, 0), "zero height")?;
    let b = DeviceBuffer::from_slice(&ctx, &[1u16, 2, 3])?;
    ensure_eq!(b.to_vec()?, vec![1, 2, 3]);
    Ok(())
}

fn round_trip_and_views() -> TestResult {
    let ctx = ctx()?;
    let host: Vec<u32> = (0..10_000).map(|i| i * 3 + 1).collect();
    let mut b = DeviceBuffer::new(&ctx, host.len())?;
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
    let mut c = DeviceBuffer::<u32>::zeroed(&ctx, host.len())?;
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
    let mut a = DeviceBuffer::<f32>::new(&ctx, 100)?;
    let b = DeviceBuffer::<f32>::new(&ctx, 99)?;
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
    let mut bytes = DeviceBuffer::<u8>::from_slice(&ctx, &[1, 0, 0, 0, 2, 0, 0, 0, 3])?;
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
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let mut b = DeviceBuffer::<u8>::new(&ctx, 64)?;
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
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let n = 1 << 20;
    let src =
        PinnedHostBuffer::from_slice(&ctx, &(0..n as u32).collect::<Vec<_>>(), HostAllocFlags::PORTABLE)?;
    let mut dst = PinnedHostBuffer::<u32>::new(&ctx, n, HostAllocFlags::empty())?;
    let mut a = DeviceBuffer::<u32>::new(&ctx, n)?;
    let mut b = DeviceBuffer::<u32>::new(&ctx, n)?;
    // SAFETY: `src` and `dst` outlive the synchronization below and are not touched before it.
    unsafe {
        a.copy_from_async(&src, &s)?;
        b.copy_from_device_async(&a, &s)?;
        b.copy_to_async(&mut dst, &s)?;
    }
    s.synchronize()?;
    ensure!(dst[..] == src[..], "pinned round trip differs");
    // Pageable memory through the same calls.
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

fn stream_ordered_allocation_and_free() -> TestResult {
    let ctx = ctx()?;
    if !ctx.device().memory_pools_supported()? {
        return Err("the device has no memory pools".into());
    }
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    for round in 0..4u32 {
        let mut b = DeviceBuffer::<u32>::new_async(&s, 4096)?;
        ensure!(b.free_stream().is_some(), "stream-ordered buffer has no free stream");
        b.view_mut().memset_d32_async(round, &s)?;
        let mut out = vec![0u32; 4096];
        // SAFETY: `out` outlives the synchronization below.
        unsafe { b.copy_to_async(&mut out, &s)? };
        drop(b);
        s.synchronize()?;
        ensure_eq!(out, vec![round; 4096]);
    }
    // A buffer allocated normally can be freed in stream order too.
    let mut c = DeviceBuffer::<u8>::new(&ctx, 100)?;
    c.set_free_stream(&s);
    drop(c);
    s.synchronize()?;
    ensure!(ctx.take_deferred_errors().is_empty(), "a stream-ordered free failed");
    Ok(())
}

fn mapped_pinned_memory_is_reachable_from_the_device() -> TestResult {
    let ctx = ctx()?;
    let mut p =
        PinnedHostBuffer::<u32>::new(&ctx, 256, HostAllocFlags::DEVICEMAP | HostAllocFlags::PORTABLE)?;
    ensure!(p.iter().all(|&x| x == 0), "pinned memory is not zeroed");
    ensure!(p.driver_flags()?.contains(HostAllocFlags::DEVICEMAP), "flags {:?}", p.driver_flags()?);
    let d = p.device_ptr()?;
    ensure!(d != 0, "null device pointer");
    // SAFETY: `d` maps the 256 words of `p`, which outlives the view and is not accessed meanwhile.
    let mut view: DeviceViewMut<'_, u32> = unsafe { DeviceViewMut::from_raw(&ctx, d, 256) };
    view.memset_d32(0x55)?;
    ctx.synchronize()?;
    ensure!(p.iter().all(|&x| x == 0x55), "a device memset did not reach mapped host memory");
    p[0] = 1;
    ensure_eq!(pointer_attributes(d)?.memory_type, Some(MemoryType::Host));
    Ok(())
}

fn registered_host_memory() -> TestResult {
    let ctx = ctx()?;
    let mut host: Vec<u64> = (0..8192).collect();
    let dev = {
        let reg = RegisteredHostMemory::register(&ctx, &mut host, HostRegisterFlags::PORTABLE)?;
        ensure!(reg.device_ptr()? != 0, "no device address for registered memory");
        DeviceBuffer::from_slice(&ctx, &reg)?
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
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let mut m = ManagedBuffer::<u32>::new(&ctx, 1 << 16, MemAttach::Global)?;
    ctx.synchronize()?;
    // SAFETY: no device work uses the buffer now.
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
    invalid(ManagedBuffer::<u8>::new(&ctx, 16, MemAttach::Single), "single-stream allocation")?;
    Ok(())
}

fn pitched_2d_copies_and_memset() -> TestResult {
    let ctx = ctx()?;
    let (w, h) = (100usize, 7usize);
    let mut p = PitchedBuffer::<u32>::new(&ctx, w, h)?;
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
    if d.sparse_cuda_array_supported()? {
        let sparse = Array::new(&ctx, &desc(1024, 1024, 0, ArrayFlags::SPARSE))?;
        let p = sparse.sparse_properties()?;
        ensure!(p.tile_extent.0 > 0 && p.tile_extent.1 > 0, "tile extent {:?}", p.tile_extent);
    }
    if d.deferred_mapping_cuda_array_supported()? {
        let deferred = Array::new(&ctx, &desc(256, 256, 0, ArrayFlags::DEFERRED_MAPPING))?;
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
    let m = MipmappedArray::new(&ctx, &desc, 4)?;
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
    let s = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
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
    let dev = DeviceBuffer::from_slice(&ctx, &src)?;
    let mut a = Array::new(&ctx, &desc)?;
    a.copy_from_device(&dev.view())?;
    let mut b = Array::new(&ctx, &desc)?;
    b.copy_from_array(&a)?;
    let mut out = DeviceBuffer::<u32>::zeroed(&ctx, n)?;
    b.copy_to_device_async(&mut out.view_mut(), &s)?;
    s.synchronize()?;
    ensure_eq!(out.to_vec()?, src);
    invalid(a.copy_from_device(&dev.slice(1..)?), "short device source for an array")?;
    let other = Array::new(&ctx, &ArrayDescriptor { width: 23, ..desc })?;
    invalid(b.copy_from_array(&other), "arrays of different extents")?;
    // Dense device matrix -> pitched -> pitched -> dense.
    let (w, h) = (24usize, 30usize);
    let mut p = PitchedBuffer::<u32>::new(&ctx, w, h)?;
    p.copy_from_device(&dev.slice(0..w * h)?)?;
    let mut q = PitchedBuffer::<u32>::new(&ctx, w, h)?;
    q.copy_from_pitched(&p)?;
    let mut dense = DeviceBuffer::<u32>::zeroed(&ctx, w * h)?;
    q.copy_to_device_async(&mut dense.view_mut(), &s)?;
    s.synchronize()?;
    ensure_eq!(dense.to_vec()?, src[..w * h].to_vec());
    let narrow = PitchedBuffer::<u32>::new(&ctx, w - 1, h)?;
    invalid(q.copy_from_pitched(&narrow), "pitched buffers of different widths")?;
    Ok(())
}

fn pointer_attributes_and_address_ranges() -> TestResult {
    let ctx = ctx()?;
    let b = DeviceBuffer::<u32>::new(&ctx, 1000)?;
    let a = pointer_attributes(b.as_raw() + 40)?;
    ensure_eq!(a.memory_type, Some(MemoryType::Device));
    ensure_eq!(a.context, ctx.as_raw());
    ensure_eq!(a.device_ordinal, 0);
    ensure_eq!(a.range_start, b.as_raw());
    ensure!(a.range_size >= 4000, "range size {}", a.range_size);
    ensure!(!a.is_managed, "device memory reported managed");
    ensure!(a.buffer_id != 0, "no buffer id");
    let other = DeviceBuffer::<u32>::new(&ctx, 10)?;
    ensure!(pointer_attributes(other.as_raw())?.buffer_id != a.buffer_id, "two buffers share an id");
    ensure_eq!(address_range(b.as_raw() + 100)?.0, b.as_raw());
    let local = 0u64;
    let unknown = pointer_attributes(&raw const local as sys::CUdeviceptr)?;
    ensure_eq!(unknown.memory_type, None);
    cuda_core::memory::set_sync_memops(b.as_raw(), true)?;
    ensure!(pointer_attributes(b.as_raw())?.sync_memops, "sync_memops not set");
    Ok(())
}

fn peer_copies_between_devices() -> TestResult {
    let c0 = Context::primary(&Device::get(0)?)?;
    let c1 = Context::primary(&Device::get(1)?)?;
    let a = DeviceBuffer::from_slice(&c0, &(0..4096u32).collect::<Vec<_>>())?;
    let mut b = DeviceBuffer::<u32>::zeroed(&c1, 4096)?;
    b.copy_from_device(&a)?;
    ensure_eq!(b.to_vec()?, a.to_vec()?);
    let s = Stream::new(&c0, StreamFlags::NON_BLOCKING)?;
    let mut c = DeviceBuffer::<u32>::zeroed(&c0, 4096)?;
    c.copy_from_device_async(&b, &s)?;
    s.synchronize()?;
    ensure_eq!(c.to_vec()?, a.to_vec()?);
    Ok(())
}
