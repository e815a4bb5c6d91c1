//! The runtime calls of `cupy.cuda.runtime`: devices, versions, memory of every kind, copies
//! (1D, 2D, arrays, 3D, peer; sync and async), streams, events and callbacks, and sharing the
//! primary context with driver code.

use cuda_tests::{TestResult, ensure, ensure_eq, gpu};
use cuhost::memory::{HostAllocFlags, HostRegisterFlags};
use cuhost::runtime::{
    self as rt, Array, ChannelFormatDesc, ChannelFormatKind, Event, HostRegistration, ManagedAttach,
    MemLocation, MemoryAdvise, MemoryType, Stream,
};
use cuhost::{Context, Device, DeviceBuffer, DeviceView, Error, EventFlags, StreamFlags};
use std::sync::mpsc;

fn main() {
    cuda_tests::run(&[
        gpu("versions_and_devices_match_the_driver", versions_and_devices_match_the_driver),
        gpu("runtime_and_driver_share_the_primary_context", runtime_and_driver_share_the_primary_context),
        gpu("memory_of_every_kind_round_trips", memory_of_every_kind_round_trips),
        gpu("managed_memory_is_prefetched_and_advised", managed_memory_is_prefetched_and_advised),
        gpu("copies_2d_arrays_and_3d", copies_2d_arrays_and_3d),
        gpu("streams_events_and_callbacks", streams_events_and_callbacks),
        gpu("peer_calls_on_one_device", peer_calls_on_one_device),
    ]);
}

fn versions_and_devices_match_the_driver() -> TestResult {
    ensure_eq!(rt::driver_version()?, cuhost::device::driver_version()?);
    ensure!(rt::runtime_version()? >= 12000, "runtime version {}", rt::runtime_version()?);
    let count = rt::get_device_count()?;
    ensure_eq!(count, Device::count()?);
    rt::set_device(0)?;
    ensure_eq!(rt::get_device()?, 0);
    ensure!(matches!(rt::set_device(count), Err(Error::InvalidArgument { .. })), "ordinal past the end");
    let sms = rt::device_get_attribute(cuhost_cudart_sys::cudaDeviceAttr::cudaDevAttrMultiProcessorCount, 0)?;
    ensure_eq!(
        sms,
        Device::get(0)?
            .attribute(cuhost::driver_sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?
    );
    let bus = rt::device_get_pci_bus_id(0)?;
    ensure_eq!(bus.to_lowercase(), Device::get(0)?.pci_bus_id()?.to_lowercase());
    ensure_eq!(rt::device_get_by_pci_bus_id(&bus)?, 0);
    let (free, total) = rt::mem_get_info()?;
    ensure!(free > 0 && free <= total, "free {free} total {total}");
    rt::device_synchronize()?;
    Ok(())
}

fn runtime_and_driver_share_the_primary_context() -> TestResult {
    rt::set_device(0)?;
    // A runtime call that needs the device's context: the runtime makes it current.
    rt::device_synchronize()?;
    let ctx = Context::primary(&Device::get(0)?)?;
    let current = Context::current()?.ok_or("the runtime left no context current")?;
    ensure!(current == ctx, "the runtime's context is the primary context");
    let stream = Stream::create()?;
    ensure!(*stream.context() == ctx, "a runtime stream belongs to the primary context");
    let mut memory = rt::malloc::<u32>(&stream, 1000)?;
    ensure_eq!(memory.allocator_name(), "cudaMalloc");
    ensure!(*memory.context() == ctx, "cudaMalloc memory belongs to the primary context");
    let host: Vec<u32> = (0..1000).collect();
    rt::memcpy(&mut memory, host.as_slice())?;
    // SAFETY: the runtime allocation holds 1000 u32 in the primary context and outlives the view.
    let view = unsafe { DeviceView::<u32>::from_raw(&ctx, memory.as_raw(), 1000) };
    ensure_eq!(view.to_vec()?, host);
    // Memory of the driver's default pool, on the runtime stream.
    let buffer = DeviceBuffer::from_slice(&stream, &vec![7u32; 1000])?;
    rt::memcpy(&mut memory, &buffer)?;
    ensure_eq!(memory.to_vec()?, vec![7u32; 1000]);
    Ok(())
}

fn memory_of_every_kind_round_trips() -> TestResult {
    rt::set_device(0)?;
    let n = 1 << 16;
    let host: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let stream = Stream::with_flags(StreamFlags::NON_BLOCKING)?;
    let mut a = rt::malloc::<f32>(&stream, n)?;
    let mut b = rt::malloc::<f32>(&stream, n)?;
    ensure_eq!(
        (a.len(), a.size_in_bytes(), a.context().device().ordinal(), a.allocator_name()),
        (n, n * 4, 0, "cudaMalloc")
    );
    rt::memcpy(&mut a, host.as_slice())?;
    rt::memcpy_async(&mut b, &a, &stream)?;
    stream.synchronize()?;
    let mut pinned = rt::host_alloc::<f32>(n, HostAllocFlags::PORTABLE)?;
    ensure!(pinned.as_slice()?.iter().all(|x| *x == 0.0), "pinned memory starts zeroed");
    ensure!(pinned.driver_flags()?.contains(HostAllocFlags::PORTABLE), "cudaHostAlloc got the flags");
    rt::memcpy(&mut pinned, &b)?;
    ensure_eq!(pinned.as_slice()?, &host[..]);
    // Safe stream-ordered copies with pinned memory: the buffer records them, and reading it
    // waits for the copy that writes it.
    let mut back = rt::host_alloc::<f32>(n, HostAllocFlags::empty())?;
    rt::memcpy_async(&mut back, &a, &stream)?;
    ensure!(back.has_copies_in_flight(), "the pinned buffer recorded the copy");
    ensure_eq!(back.as_slice()?, &host[..]);
    let mut c = rt::malloc::<f32>(&stream, n)?;
    rt::memcpy_async(&mut c, &back, &stream)?;
    back.as_mut_slice()?.fill(-1.0); // waits for the copy that reads it
    ensure_eq!(c.to_vec()?, host);
    // Registered pageable memory, and async copies from and to pinned memory.
    let mut pageable = vec![0f32; n];
    {
        let mut registered = HostRegistration::register(&mut pageable, HostRegisterFlags::empty())?;
        // SAFETY: `registered` and `pinned` stay alive and untouched until the synchronize.
        unsafe { rt::memcpy_async_unchecked(&mut *registered, &pinned, &stream)? };
        stream.synchronize()?;
        let attributes = rt::pointer_get_attributes(registered.as_ptr() as u64)?;
        ensure_eq!(attributes.memory_type, MemoryType::Host);
    }
    ensure_eq!(pageable, host);
    ensure_eq!(rt::pointer_get_attributes(a.as_raw())?.memory_type, MemoryType::Device);
    ensure_eq!(rt::pointer_get_attributes(a.as_raw())?.device_pointer, a.as_raw());
    ensure_eq!(rt::pointer_get_attributes(pageable.as_ptr() as u64)?.memory_type, MemoryType::Unregistered);
    rt::memset(&mut a, 0)?;
    ensure!(a.to_vec()?.iter().all(|x| *x == 0.0), "memset cleared it");
    rt::memset_async(&mut b, 0xff, &stream)?;
    stream.synchronize()?;
    ensure!(b.to_vec()?.iter().all(|x| x.to_bits() == u32::MAX), "memset_async set every byte");
    // Views are copied and set too.
    rt::memset(&mut b.slice_mut(..n / 2)?, 0)?;
    let mut half = vec![1f32; n / 2];
    rt::memcpy(half.as_mut_slice(), &b.slice(..n / 2)?)?;
    ensure!(half.iter().all(|x| *x == 0.0), "memset of a view cleared it");
    // Different lengths are refused before the call.
    let short = rt::malloc::<f32>(&stream, n - 1)?;
    ensure!(matches!(rt::memcpy(&mut a, &short), Err(Error::InvalidArgument { .. })), "length mismatch");
    ensure!(
        matches!(rt::memcpy_async(&mut back, &short, &stream), Err(Error::InvalidArgument { .. })),
        "length mismatch, async"
    );
    ensure!(rt::take_deferred_errors().is_empty(), "no errors were kept");
    Ok(())
}

fn managed_memory_is_prefetched_and_advised() -> TestResult {
    rt::set_device(0)?;
    let n = 1 << 20;
    let stream = Stream::create()?;
    let mut managed = rt::malloc_managed::<u32>(&stream, n, ManagedAttach::Global)?;
    ensure_eq!(managed.allocator_name(), "cudaMallocManaged");
    let host: Vec<u32> = (0..n as u32).collect();
    rt::memcpy(&mut managed, host.as_slice())?;
    rt::mem_advise(&managed, MemoryAdvise::SetPreferredLocation, MemLocation::Device(0))?;
    rt::mem_advise(&managed, MemoryAdvise::SetAccessedBy, MemLocation::Device(0))?;
    rt::mem_advise(&managed, MemoryAdvise::SetReadMostly, MemLocation::Device(0))?;
    ensure!(managed.is_read_mostly()?, "the driver sees the runtime's advice");
    let concurrent =
        rt::device_get_attribute(cuhost_cudart_sys::cudaDeviceAttr::cudaDevAttrConcurrentManagedAccess, 0)?;
    if concurrent != 0 {
        rt::mem_prefetch_async(&managed, MemLocation::Device(0), &stream)?;
        rt::mem_prefetch_async(&managed, MemLocation::Host, &stream)?;
    }
    stream.synchronize()?;
    ensure_eq!(rt::pointer_get_attributes(managed.as_raw())?.memory_type, MemoryType::Managed);
    ensure_eq!(managed.to_vec()?, host);
    if concurrent != 0 {
        // SAFETY: nothing writes the memory (the stream is synchronized), and with concurrent
        // managed access the host may read it while other kernels run.
        ensure_eq!(unsafe { managed.as_host_slice() }, &host[..]);
    }
    // Advice and prefetching of memory that is not managed do not compile (the functions take
    // a ManagedBuffer): see the compile_fail examples of `mem_advise` and `mem_prefetch_async`.
    ensure!(
        matches!(
            rt::malloc_managed::<u32>(&stream, 0, ManagedAttach::Host),
            Err(Error::InvalidArgument { .. })
        ),
        "zero-size managed"
    );
    Ok(())
}

fn copies_2d_arrays_and_3d() -> TestResult {
    rt::set_device(0)?;
    let stream = Stream::create()?;
    // 8 rows of 16 floats, host pitch 64 bytes, device pitch 128 bytes.
    let (w, h) = (16usize, 8usize);
    let host: Vec<f32> = (0..w * h).map(|i| i as f32).collect();
    let mut pitched = rt::malloc::<f32>(&stream, 32 * h)?;
    rt::memcpy_2d(&mut pitched, 128, host.as_slice(), 64, 64, h)?;
    let mut copy = rt::malloc::<f32>(&stream, 32 * h)?;
    rt::memcpy_2d_async(&mut copy, 128, &pitched, 128, 64, h, &stream)?;
    stream.synchronize()?;
    let mut back = vec![0f32; w * h];
    rt::memcpy_2d(back.as_mut_slice(), 64, &copy, 128, 64, h)?;
    ensure_eq!(back, host);
    let too_far = rt::memcpy_2d(back.as_mut_slice(), 64, &copy, 128, 64, h + 1);
    ensure!(matches!(too_far, Err(Error::InvalidArgument { .. })), "rows past the end are refused");

    let desc = ChannelFormatDesc::new(1, 32, ChannelFormatKind::Float);
    let mut array = Array::malloc(desc, w, h)?;
    ensure_eq!((array.row_bytes(), array.extent()), (64, (w, h, 0)));
    rt::memcpy_2d_to_array(&mut array, 0, 0, host.as_slice(), 64, 64, h)?;
    let mut out = vec![0f32; w * h];
    rt::memcpy_2d_from_array(out.as_mut_slice(), 64, &array, 0, 0, 64, h)?;
    ensure_eq!(out, host);
    // A window: 4 floats of rows 2..5, starting at float 8.
    let mut window = vec![0f32; 12];
    rt::memcpy_2d_from_array(window.as_mut_slice(), 16, &array, 32, 2, 16, 3)?;
    ensure_eq!(window, [40., 41., 42., 43., 56., 57., 58., 59., 72., 73., 74., 75.]);
    ensure!(
        rt::memcpy_2d_from_array(window.as_mut_slice(), 16, &array, 56, 2, 16, 3).is_err(),
        "past the row end"
    );
    let mut from_device = rt::malloc::<f32>(&stream, w * h)?;
    rt::memcpy_2d_from_array_async(&mut from_device, 64, &array, 0, 0, 64, h, &stream)?;
    rt::memcpy_2d_to_array_async(&mut array, 0, 0, &copy, 128, 64, h, &stream)?;
    stream.synchronize()?;
    ensure_eq!(from_device.to_vec()?, host);

    let (x, y, z) = (4usize, 3usize, 2usize);
    let volume: Vec<f32> = (0..x * y * z).map(|i| i as f32 * 2.0).collect();
    let mut array3 = Array::malloc_3d(desc, x, y, z)?;
    rt::memcpy_3d_to_array(&mut array3, volume.as_slice())?;
    let mut linear = rt::malloc::<f32>(&stream, x * y * z)?;
    rt::memcpy_3d_from_array(&mut linear, &array3)?;
    ensure_eq!(linear.to_vec()?, volume);
    let mut array3b = Array::malloc_3d(desc, x, y, z)?;
    rt::memcpy_3d_to_array_async(&mut array3b, &linear, &stream)?;
    let mut linear_b = rt::malloc::<f32>(&stream, x * y * z)?;
    rt::memcpy_3d_from_array_async(&mut linear_b, &array3b, &stream)?;
    stream.synchronize()?;
    ensure_eq!(linear_b.to_vec()?, volume);
    let wrong = rt::memcpy_3d_to_array(&mut array3, &volume[1..]);
    ensure!(matches!(wrong, Err(Error::InvalidArgument { .. })), "a source of the wrong size is refused");
    ensure!(Array::malloc(desc, 0, 4).is_err(), "zero width");
    Ok(())
}

fn streams_events_and_callbacks() -> TestResult {
    rt::set_device(0)?;
    let stream = Stream::with_flags(StreamFlags::NON_BLOCKING)?;
    let other = Stream::create()?;
    let (start, end) = (Event::create()?, Event::create()?);
    let mut big = rt::malloc::<u8>(&stream, 256 << 20)?;
    start.record(&stream)?;
    rt::memset_async(&mut big, 1, &stream)?;
    end.record(&stream)?;
    other.wait_event(&end)?;
    let (tx, rx) = mpsc::channel();
    other.add_callback(move |status| {
        let _ = tx.send(status.is_ok());
    })?;
    end.synchronize()?;
    ensure!(end.query()?, "a synchronized event is complete");
    let ms = Event::elapsed_time(&start, &end)?;
    ensure!(ms > 0.0, "256 MiB memset took {ms} ms");
    other.synchronize()?;
    ensure!(other.query()?, "a synchronized stream is idle");
    ensure_eq!(rx.recv_timeout(std::time::Duration::from_secs(10))?, true);
    let untimed = Event::with_flags(EventFlags::DISABLE_TIMING)?;
    untimed.record(&stream)?;
    stream.synchronize()?;
    ensure!(Event::elapsed_time(&start, &untimed).is_err(), "no timing on a DISABLE_TIMING event");
    #[allow(clippy::panic)]
    other.add_callback(|_| std::panic::panic_any("callback failed on purpose"))?;
    other.synchronize()?;
    let kept = rt::take_deferred_errors();
    ensure!(
        kept.iter().any(
            |e| matches!(e, Error::CallbackPanicked { message } if message == "callback failed on purpose")
        ),
        "the callback's panic is kept: {kept:?}"
    );
    Ok(())
}

fn peer_calls_on_one_device() -> TestResult {
    rt::set_device(0)?;
    let stream = Stream::create()?;
    let mut a = rt::malloc::<u64>(&stream, 4096)?;
    let host: Vec<u64> = (0..4096).map(|i| i * 3).collect();
    rt::memcpy(&mut a, host.as_slice())?;
    let mut b = rt::malloc::<u64>(&stream, 4096)?;
    rt::memcpy_peer(&mut b, &a)?;
    ensure_eq!(b.to_vec()?, host);
    rt::memset(&mut b, 0)?;
    rt::memcpy_peer_async(&mut b, &a, &stream)?;
    stream.synchronize()?;
    ensure_eq!(b.to_vec()?, host);
    let count = rt::get_device_count()?;
    ensure!(rt::device_can_access_peer(0, count).is_err() || count > 1, "a missing peer is an error");
    ensure!(rt::device_enable_peer_access(0).is_err(), "a device is not its own peer");
    Ok(())
}
