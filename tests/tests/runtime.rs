//! The runtime calls of `cupy.cuda.runtime`: devices, versions, memory of every kind, copies
//! (1D, 2D, arrays, 3D, peer; sync and async), streams, events and callbacks, and sharing the
//! primary context with driver code.

use cuda_core::memory::{HostAllocFlags, HostRegisterFlags};
use cuda_core::runtime::{
    self as rt, Array, ChannelFormatDesc, ChannelFormatKind, DeviceMemory, Event, HostMemory,
    HostRegistration, ManagedAttach, MemLocation, MemoryAdvise, MemoryType, Stream,
};
use cuda_core::{Context, Device, DeviceBuffer, DeviceView, Error, EventFlags, StreamFlags};
use cuda_tests::{TestResult, ensure, ensure_eq, gpu};
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
    ensure_eq!(rt::driver_version()?, cuda_core::device::driver_version()?);
    ensure!(rt::runtime_version()? >= 12000, "runtime version {}", rt::runtime_version()?);
    let count = rt::get_device_count()?;
    ensure_eq!(count, Device::count()?);
    rt::set_device(0)?;
    ensure_eq!(rt::get_device()?, 0);
    ensure!(matches!(rt::set_device(count), Err(Error::InvalidArgument { .. })), "ordinal past the end");
    let sms = rt::device_get_attribute(cudart_sys::cudaDeviceAttr::cudaDevAttrMultiProcessorCount, 0)?;
    ensure_eq!(
        sms,
        Device::get(0)?
            .attribute(cuda_core::driver_sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?
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
    let mut memory = DeviceMemory::<u32>::malloc(1000)?;
    let ctx = Context::primary(&Device::get(0)?)?;
    let current = Context::current()?.ok_or("the runtime left no context current")?;
    ensure!(current == ctx, "the runtime's context is the primary context");
    let host: Vec<u32> = (0..1000).collect();
    memory.copy_from_host(&host)?;
    // SAFETY: the runtime allocation holds 1000 u32 in the primary context and outlives the view.
    let view = unsafe { DeviceView::<u32>::from_raw(&ctx, memory.device_ptr(), 1000) };
    ensure_eq!(view.to_vec()?, host);
    let buffer = DeviceBuffer::from_slice(&ctx, &vec![7u32; 1000])?;
    rt::memcpy(&mut memory, &buffer)?;
    ensure_eq!(memory.to_vec()?, vec![7u32; 1000]);
    Ok(())
}

fn memory_of_every_kind_round_trips() -> TestResult {
    rt::set_device(0)?;
    let n = 1 << 16;
    let host: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let mut a = DeviceMemory::<f32>::malloc(n)?;
    let mut b = DeviceMemory::<f32>::malloc(n)?;
    ensure_eq!((a.len(), a.size_in_bytes(), a.device(), a.is_managed()), (n, n * 4, 0, false));
    rt::memcpy(&mut a, host.as_slice())?;
    let stream = Stream::with_flags(StreamFlags::NON_BLOCKING)?;
    rt::memcpy_async(&mut b, &a, &stream)?;
    stream.synchronize()?;
    let mut pinned = HostMemory::<f32>::alloc(n, HostAllocFlags::PORTABLE)?;
    ensure!(pinned.iter().all(|x| *x == 0.0), "pinned memory starts zeroed");
    rt::memcpy(&mut pinned, &b)?;
    ensure_eq!(&pinned[..], &host[..]);
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
    ensure_eq!(rt::pointer_get_attributes(a.device_ptr())?.memory_type, MemoryType::Device);
    ensure_eq!(rt::pointer_get_attributes(a.device_ptr())?.device_pointer, a.device_ptr());
    ensure_eq!(rt::pointer_get_attributes(pageable.as_ptr() as u64)?.memory_type, MemoryType::Unregistered);
    rt::memset(&mut a, 0)?;
    ensure!(a.to_vec()?.iter().all(|x| *x == 0.0), "memset cleared it");
    rt::memset_async(&mut b, 0xff, &stream)?;
    stream.synchronize()?;
    ensure!(b.to_vec()?.iter().all(|x| x.to_bits() == u32::MAX), "memset_async set every byte");
    // Different lengths are refused before the call.
    let short = DeviceMemory::<f32>::malloc(n - 1)?;
    ensure!(matches!(rt::memcpy(&mut a, &short), Err(Error::InvalidArgument { .. })), "length mismatch");
    ensure!(rt::take_deferred_errors().is_empty(), "no errors were kept");
    Ok(())
}

fn managed_memory_is_prefetched_and_advised() -> TestResult {
    rt::set_device(0)?;
    let n = 1 << 20;
    let mut managed = DeviceMemory::<u32>::malloc_managed(n, ManagedAttach::Global)?;
    ensure!(managed.is_managed(), "managed");
    let host: Vec<u32> = (0..n as u32).collect();
    managed.copy_from_host(&host)?;
    let stream = Stream::create()?;
    rt::mem_advise(&managed, MemoryAdvise::SetPreferredLocation, MemLocation::Device(0))?;
    rt::mem_advise(&managed, MemoryAdvise::SetAccessedBy, MemLocation::Device(0))?;
    rt::mem_advise(&managed, MemoryAdvise::SetReadMostly, MemLocation::Device(0))?;
    let concurrent =
        rt::device_get_attribute(cudart_sys::cudaDeviceAttr::cudaDevAttrConcurrentManagedAccess, 0)?;
    if concurrent != 0 {
        rt::mem_prefetch_async(&managed, MemLocation::Device(0), &stream)?;
        rt::mem_prefetch_async(&managed, MemLocation::Host, &stream)?;
    }
    stream.synchronize()?;
    ensure_eq!(rt::pointer_get_attributes(managed.device_ptr())?.memory_type, MemoryType::Managed);
    ensure_eq!(managed.to_vec()?, host);
    let plain = DeviceMemory::<u32>::malloc(16)?;
    ensure!(
        matches!(
            rt::mem_advise(&plain, MemoryAdvise::SetReadMostly, MemLocation::Device(0)),
            Err(Error::InvalidArgument { .. })
        ),
        "advice on non-managed memory is refused"
    );
    ensure!(DeviceMemory::<u32>::malloc_managed(0, ManagedAttach::Host).is_err(), "zero-size managed");
    Ok(())
}

fn copies_2d_arrays_and_3d() -> TestResult {
    rt::set_device(0)?;
    let stream = Stream::create()?;
    // 8 rows of 16 floats, host pitch 64 bytes, device pitch 128 bytes.
    let (w, h) = (16usize, 8usize);
    let host: Vec<f32> = (0..w * h).map(|i| i as f32).collect();
    let mut pitched = DeviceMemory::<f32>::malloc(32 * h)?;
    rt::memcpy_2d(&mut pitched, 128, host.as_slice(), 64, 64, h)?;
    let mut copy = DeviceMemory::<f32>::malloc(32 * h)?;
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
    let mut from_device = DeviceMemory::<f32>::malloc(w * h)?;
    rt::memcpy_2d_from_array_async(&mut from_device, 64, &array, 0, 0, 64, h, &stream)?;
    rt::memcpy_2d_to_array_async(&mut array, 0, 0, &copy, 128, 64, h, &stream)?;
    stream.synchronize()?;
    ensure_eq!(from_device.to_vec()?, host);

    let (x, y, z) = (4usize, 3usize, 2usize);
    let volume: Vec<f32> = (0..x * y * z).map(|i| i as f32 * 2.0).collect();
    let mut array3 = Array::malloc_3d(desc, x, y, z)?;
    rt::memcpy_3d_to_array(&mut array3, volume.as_slice())?;
    let mut linear = DeviceMemory::<f32>::malloc(x * y * z)?;
    rt::memcpy_3d_from_array(&mut linear, &array3)?;
    ensure_eq!(linear.to_vec()?, volume);
    let mut array3b = Array::malloc_3d(desc, x, y, z)?;
    rt::memcpy_3d_to_array_async(&mut array3b, &linear, &stream)?;
    let mut linear_b = DeviceMemory::<f32>::malloc(x * y * z)?;
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
    let mut big = DeviceMemory::<u8>::malloc(256 << 20)?;
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
    let mut a = DeviceMemory::<u64>::malloc(4096)?;
    let host: Vec<u64> = (0..4096).map(|i| i * 3).collect();
    a.copy_from_host(&host)?;
    let mut b = DeviceMemory::<u64>::malloc(4096)?;
    rt::memcpy_peer(&mut b, &a)?;
    ensure_eq!(b.to_vec()?, host);
    let stream = Stream::create()?;
    rt::memset(&mut b, 0)?;
    rt::memcpy_peer_async(&mut b, &a, &stream)?;
    stream.synchronize()?;
    ensure_eq!(b.to_vec()?, host);
    let count = rt::get_device_count()?;
    ensure!(rt::device_can_access_peer(0, count).is_err() || count > 1, "a missing peer is an error");
    ensure!(rt::device_enable_peer_access(0).is_err(), "a device is not its own peer");
    Ok(())
}
