//! `cuda_core::vmm` on a GPU: granularity and properties, mappings read and written after
//! their access is set, every drop order of range, physical memory and mapping, retained and
//! in-process imported handles, fabric handles (or the driver's refusal, by name), the
//! growable buffer (in place, as a kernel argument, shrinking), the VMM allocator under
//! `DeviceBuffer` and `MemoryPool`, bad input, and a kernel on a second GPU writing memory
//! of the first.

#[path = "kernels/mod.rs"]
mod kernels;

use cuda_core::driver_sys as sys;
use cuda_core::memory::MemLocation;
use cuda_core::mempool::Access;
use cuda_core::module::Module;
use cuda_core::pool::MemoryPool;
use cuda_core::vmm::{
    AccessGrant, AddressRange, AllocationProperties, FabricHandle, Granularity, GrowableBuffer, HandleTypes,
    MappedSpan, PhysicalMemory, VmmAllocator, VmmSupport,
};
use cuda_core::{Context, Device, DeviceBuffer, Error, LaunchConfig, Stream, StreamFlags};
use cuda_tests::{TestResult, device_zero, ensure, ensure_eq, gpu, gpu_needing, multi_gpu, no_deferred};
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

fn main() {
    cuda_tests::run(&[
        gpu("granularity_and_support", granularity_and_support),
        gpu("physical_memory_reports_its_properties", physical_memory_reports_its_properties),
        gpu(
            "mapped_memory_is_written_and_read_after_set_access",
            mapped_memory_is_written_and_read_after_set_access,
        ),
        gpu("any_drop_order_unmaps_releases_and_frees", any_drop_order_unmaps_releases_and_frees),
        gpu("a_span_views_mappings_end_to_end_as_one_memory", a_span_views_mappings_end_to_end_as_one_memory),
        gpu("a_retained_handle_keeps_the_memory", a_retained_handle_keeps_the_memory),
        gpu("a_posix_fd_export_imports_as_an_alias", a_posix_fd_export_imports_as_an_alias),
        gpu("fabric_handles_work_or_are_refused_by_name", fabric_handles_work_or_are_refused_by_name),
        gpu_needing(
            "host_numa_memory_is_mapped_for_the_device",
            host_numa_supported,
            host_numa_memory_is_mapped_for_the_device,
        ),
        gpu("growable_buffer_grows_in_place_and_shrinks", growable_buffer_grows_in_place_and_shrinks),
        gpu("growable_buffer_is_a_kernel_argument", growable_buffer_is_a_kernel_argument),
        gpu("vmm_allocator_backs_buffers_and_pools", vmm_allocator_backs_buffers_and_pools),
        gpu("bad_input_is_refused_with_typed_errors", bad_input_is_refused_with_typed_errors),
        multi_gpu(
            "a_kernel_on_gpu1_writes_vmm_memory_of_gpu0",
            2,
            a_kernel_on_gpu1_writes_vmm_memory_of_gpu0,
        ),
    ]);
}

/// The tests of this binary reserve and free address ranges, and one of them checks that
/// freed addresses can be reserved again: they run one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

fn minimum(props: &AllocationProperties) -> Result<usize, Error> {
    props.granularity(Granularity::Minimum)
}

fn pattern(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32).map(|i| i.wrapping_mul(2_654_435_761) ^ seed).collect()
}

/// The message of an `InvalidArgument`, or a failure saying what came instead.
fn invalid<T: std::fmt::Debug>(result: Result<T, Error>, what: &str) -> Result<String, cuda_tests::Failed> {
    match result {
        Err(e @ Error::InvalidArgument { .. }) => Ok(e.to_string()),
        other => Err(format!("{what}: expected an InvalidArgument, got {other:?}").into()),
    }
}

fn granularity_and_support() -> TestResult {
    let _serial = serial();
    let (device, _ctx, _) = device_zero()?;
    let support = VmmSupport::of(&device)?;
    ensure!(support.virtual_memory_management, "the device reports no VMM support: {support:?}");
    let props = AllocationProperties::device(device);
    let (min, rec) = (minimum(&props)?, props.granularity(Granularity::Recommended)?);
    ensure!(min.is_power_of_two(), "minimum granularity {min}");
    ensure!(rec >= min && rec % min == 0, "recommended {rec} against minimum {min}");
    let shareable = props.with_handle_types(HandleTypes::POSIX_FILE_DESCRIPTOR);
    ensure_eq!(minimum(&shareable)?, min, "a handle type does not change the granularity");
    Ok(())
}

fn physical_memory_reports_its_properties() -> TestResult {
    let _serial = serial();
    let (device, ctx, _) = device_zero()?;
    let props = AllocationProperties::device(device).with_handle_types(HandleTypes::POSIX_FILE_DESCRIPTOR);
    let gran = minimum(&props)?;
    let physical = PhysicalMemory::new(&ctx, 2 * gran, &props)?;
    ensure_eq!(physical.size(), 2 * gran);
    ensure_eq!(physical.granularity(), gran);
    let back = physical.properties()?;
    ensure_eq!(back.location, MemLocation::Device(device));
    ensure!(
        back.handle_types.contains(HandleTypes::POSIX_FILE_DESCRIPTOR),
        "handle types {:?}",
        back.handle_types
    );
    // Compression and RDMA where the device has them, each alone: the allocation is made.
    let support = VmmSupport::of(&device)?;
    let base = AllocationProperties::device(device);
    for (wanted, props) in [
        (support.compression, base.with_compression(true)),
        (support.gpu_direct_rdma, base.with_gpu_direct_rdma(true)),
    ] {
        if wanted {
            let made = PhysicalMemory::new(&ctx, minimum(&props)?, &props)?;
            eprintln!("asked for {props:?}, the driver reports {:?}", made.properties()?);
        }
    }
    drop(physical);
    no_deferred(&ctx)
}

fn mapped_memory_is_written_and_read_after_set_access() -> TestResult {
    let _serial = serial();
    let (device, ctx, stream) = device_zero()?;
    let props = AllocationProperties::device(device);
    let gran = minimum(&props)?;
    let range = AddressRange::reserve(&ctx, 5 * gran, 0)?;
    ensure_eq!(range.size(), 5 * gran);
    ensure_eq!(range.as_raw() % gran as u64, 0, "the range is aligned to the granularity");
    let physical = PhysicalMemory::new(&ctx, 2 * gran, &props)?;
    let mut mapping = range.map(gran, &physical)?;
    ensure_eq!(mapping.as_raw(), range.as_raw() + gran as u64);
    ensure_eq!(mapping.size(), 2 * gran);
    mapping.set_access(&[AccessGrant::device(device, Access::ReadWrite)])?;
    ensure_eq!(mapping.access(MemLocation::Device(device))?, Access::ReadWrite);
    let host = pattern(2 * gran / 4, 0x5a5a);
    mapping.view_mut::<u32>(&stream)?.copy_from_host(&host)?;
    ensure!(mapping.view::<u32>(&stream)?.to_vec()? == host, "the mapping read back other values");
    // A second mapping of the same memory, elsewhere in the range.
    let mut alias = range.map(3 * gran, &physical)?;
    alias.set_access(&[AccessGrant::device(device, Access::ReadWrite)])?;
    ensure!(alias.view::<u32>(&stream)?.to_vec()? == host, "the alias reads other values");
    alias.view_mut::<u32>(&stream)?.slice_mut(gran / 4..)?.memset_d32(7)?;
    ensure!(
        mapping.view::<u32>(&stream)?.to_vec()?[gran / 4..].iter().all(|&v| v == 7),
        "a write through one mapping is not seen through the other"
    );
    drop((alias, mapping));
    no_deferred(&ctx)
}

/// Mappings of one range end to end are one memory through a span: a copy across the seams
/// lands in each mapping, async work on another stream is waited for before the unmap, and
/// gaps, disorder and foreign ranges are refused.
fn a_span_views_mappings_end_to_end_as_one_memory() -> TestResult {
    let _serial = serial();
    let (device, ctx, stream) = device_zero()?;
    let props = AllocationProperties::device(device);
    let gran = minimum(&props)?;
    let range = AddressRange::reserve(&ctx, 4 * gran, 0)?;
    let pieces = [PhysicalMemory::new(&ctx, gran, &props)?, PhysicalMemory::new(&ctx, 2 * gran, &props)?];
    let map_all = || -> Result<Vec<_>, Error> {
        Ok(vec![range.map(0, &pieces[0])?, range.map(gran, &pieces[1])?, range.map(3 * gran, &pieces[0])?])
    };
    let mut span = MappedSpan::new(map_all()?)?;
    ensure_eq!((span.as_raw(), span.size(), span.mappings().len()), (range.as_raw(), 4 * gran, 3));
    span.set_access(&[AccessGrant::device(device, Access::ReadWrite)])?;
    // The last mapping aliases the first piece: write the span's first three quarters only.
    let host = pattern(3 * gran / 4, 0x1234);
    span.view_mut::<u32>(&stream)?.slice_mut(..3 * gran / 4)?.copy_from_host(&host)?;
    let all = span.view::<u32>(&stream)?.to_vec()?;
    ensure!(all[..3 * gran / 4] == host[..], "the span read back other values");
    ensure!(all[3 * gran / 4..] == host[..gran / 4], "the last mapping does not alias the first piece");
    ensure!(
        span.mappings()[1].view::<u32>(&stream)?.to_vec()? == host[gran / 4..],
        "the second mapping does not hold the part written across the seam"
    );
    // Work on another stream through the span: the drop waits for it before unmapping.
    let other = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let mut back = cuda_core::PinnedBuffer::<u32>::new(gran)?;
    other.launch_host_func(|| std::thread::sleep(std::time::Duration::from_millis(100)))?;
    span.view::<u32>(&stream)?.slice(0..gran)?.copy_to_pinned_async(&mut back, &other)?;
    let mappings = span.into_mappings();
    ensure_eq!(mappings.len(), 3);
    drop(mappings);
    ensure!(back.as_slice()? == &all[..gran], "the copy queued before the unmap read other values");
    // Refusals.
    let refused = |r: Result<MappedSpan, Error>| matches!(r, Err(Error::InvalidArgument { .. }));
    ensure!(refused(MappedSpan::new(Vec::new())), "an empty span");
    ensure!(
        refused(MappedSpan::new(vec![range.map(0, &pieces[0])?, range.map(3 * gran, &pieces[0])?])),
        "a gap"
    );
    ensure!(
        refused(MappedSpan::new(vec![range.map(gran, &pieces[1])?, range.map(0, &pieces[0])?])),
        "disorder"
    );
    let elsewhere = AddressRange::reserve(&ctx, gran, 0)?;
    ensure!(
        refused(MappedSpan::new(vec![range.map(0, &pieces[0])?, elsewhere.map(0, &pieces[0])?])),
        "two ranges"
    );
    // The span's own drop waits too.
    let span = MappedSpan::new(map_all()?)?;
    span.set_access(&[AccessGrant::device(device, Access::ReadWrite)])?;
    other.launch_host_func(|| std::thread::sleep(std::time::Duration::from_millis(100)))?;
    back.as_mut_slice()?.fill(0);
    span.view::<u32>(&stream)?.copy_to_pinned_async(&mut back, &other)?;
    drop(span);
    ensure!(back.as_slice()? == &all[..], "the copy queued before the span's drop read other values");
    no_deferred(&ctx)
}

fn any_drop_order_unmaps_releases_and_frees() -> TestResult {
    let _serial = serial();
    let (device, ctx, stream) = device_zero()?;
    let props = AllocationProperties::device(device);
    let gran = minimum(&props)?;
    for order in 0..3u32 {
        let range = AddressRange::reserve(&ctx, 2 * gran, 0)?;
        let address = range.as_raw();
        let physical = PhysicalMemory::new(&ctx, gran, &props)?;
        let mut mapping = range.map(0, &physical)?;
        mapping.set_access(&[AccessGrant::device(device, Access::ReadWrite)])?;
        let (mut range, mut physical) = (Some(range), Some(physical));
        match order {
            0 => drop((range.take(), physical.take())),
            1 => drop((physical.take(), range.take())),
            _ => {}
        }
        // The mapping alone keeps the memory usable.
        mapping.view_mut::<u32>(&stream)?.memset_d32(order + 1)?;
        ensure!(
            mapping.view::<u32>(&stream)?.to_vec()?.iter().all(|&v| v == order + 1),
            "order {order}: the mapping lost its memory"
        );
        drop(mapping);
        drop((physical, range));
        // Everything is gone: the same addresses can be reserved again.
        let again = AddressRange::reserve_at(&ctx, 2 * gran, 0, address)?;
        ensure_eq!(again.as_raw(), address, "order {order}");
        no_deferred(&ctx)?;
    }
    Ok(())
}

fn a_retained_handle_keeps_the_memory() -> TestResult {
    let _serial = serial();
    let (device, ctx, stream) = device_zero()?;
    let props = AllocationProperties::device(device);
    let gran = minimum(&props)?;
    let range = AddressRange::reserve(&ctx, gran, 0)?;
    let physical = PhysicalMemory::new(&ctx, gran, &props)?;
    let mut mapping = range.map(0, &physical)?;
    mapping.set_access(&[AccessGrant::device(device, Access::ReadWrite)])?;
    let host = pattern(gran / 4, 0x1234);
    mapping.view_mut::<u32>(&stream)?.copy_from_host(&host)?;
    // SAFETY: `mapping`, the only other way to the memory, is not used while `retained` is
    // mapped (it is dropped first).
    let retained = unsafe { PhysicalMemory::retain_from_address(&ctx, mapping.as_raw())? };
    ensure_eq!(retained.properties()?.location, MemLocation::Device(device));
    ensure!(retained.size() >= gran, "the retained allocation has {} bytes", retained.size());
    drop((mapping, range, physical));
    // Only the retained reference is left; the contents are still there.
    let range = AddressRange::reserve(&ctx, gran, 0)?;
    let mapping = range.map(0, &retained)?;
    mapping.set_access(&[AccessGrant::device(device, Access::ReadWrite)])?;
    ensure!(mapping.view::<u32>(&stream)?.to_vec()? == host, "the retained memory lost its contents");
    drop(mapping);
    // An address no mapping holds has no allocation to retain.
    let free = range.as_raw();
    // SAFETY: nothing is mapped there, so nothing comes back to alias.
    let refused = unsafe { PhysicalMemory::retain_from_address(&ctx, free) };
    ensure!(matches!(refused, Err(Error::Driver { .. })), "retained an unmapped address: {refused:?}");
    no_deferred(&ctx)
}

fn a_posix_fd_export_imports_as_an_alias() -> TestResult {
    let _serial = serial();
    let (device, ctx, stream) = device_zero()?;
    let props = AllocationProperties::device(device).with_handle_types(HandleTypes::POSIX_FILE_DESCRIPTOR);
    let gran = minimum(&props)?;
    let physical = PhysicalMemory::new(&ctx, gran, &props)?;
    let range = AddressRange::reserve(&ctx, gran, 0)?;
    let mut mapping = range.map(0, &physical)?;
    let access = [AccessGrant::device(device, Access::ReadWrite)];
    mapping.set_access(&access)?;
    let host = pattern(gran / 4, 0xfd);
    mapping.view_mut::<u32>(&stream)?.copy_from_host(&host)?;

    ensure!(
        physical.handle_types().contains(HandleTypes::POSIX_FILE_DESCRIPTOR),
        "{:?}",
        physical.handle_types()
    );
    let fd = physical.export_fd()?;
    // (The driver reports no handle types for memory it imported.)
    // SAFETY: nothing else uses the exported memory while this mapping of it is used.
    let imported = unsafe { PhysicalMemory::import_fd(&ctx, fd.as_fd(), gran) }?;
    drop(fd);
    let other = AddressRange::reserve(&ctx, gran, 0)?;
    let mut alias = other.map(0, &imported)?;
    alias.set_access(&access)?;
    ensure!(alias.view::<u32>(&stream)?.to_vec()? == host, "the imported memory reads other values");
    alias.view_mut::<u32>(&stream)?.memset_d32(0xabcd)?;
    ensure!(
        mapping.view::<u32>(&stream)?.to_vec()?.iter().all(|&v| v == 0xabcd),
        "a write through the import is not seen by the exporter's mapping"
    );
    no_deferred(&ctx)
}

fn fabric_handles_work_or_are_refused_by_name() -> TestResult {
    let _serial = serial();
    let (device, ctx, stream) = device_zero()?;
    let support = VmmSupport::of(&device)?;
    let props = AllocationProperties::device(device).with_handle_types(HandleTypes::FABRIC);
    // What the driver says where the system has no fabric: its status, by name.
    let refused = |e: &Error| matches!(e, Error::Driver { .. });
    let gran = minimum(&props).or_else(|_| minimum(&AllocationProperties::device(device)))?;
    let physical = match PhysicalMemory::new(&ctx, gran, &props) {
        Ok(p) => p,
        Err(e) => {
            ensure!(refused(&e), "a fabric allocation failed with an untyped error: {e}");
            eprintln!("fabric handles refused (device reports support: {}): {e}", support.fabric);
            return Ok(());
        }
    };
    let handle = match physical.export_fabric() {
        Ok(h) => h,
        Err(e) => {
            ensure!(refused(&e), "the fabric export failed with an untyped error: {e}");
            eprintln!("fabric export refused: {e}");
            return Ok(());
        }
    };
    ensure!(handle != FabricHandle([0; 64]), "the fabric handle is all zeroes");
    // SAFETY: nothing else uses the exported memory while this mapping of it is used.
    match unsafe { PhysicalMemory::import_fabric(&ctx, &handle, gran) } {
        Ok(imported) => {
            let range = AddressRange::reserve(&ctx, 2 * gran, 0)?;
            let mut original = range.map(0, &physical)?;
            let alias = range.map(gran, &imported)?;
            let access = [AccessGrant::device(device, Access::ReadWrite)];
            original.set_access(&access)?;
            alias.set_access(&access)?;
            original.view_mut::<u32>(&stream)?.memset_d32(0xfab)?;
            ensure!(alias.view::<u32>(&stream)?.to_vec()?.iter().all(|&v| v == 0xfab), "the fabric alias");
        }
        Err(e) => ensure!(refused(&e), "the fabric import failed with an untyped error: {e}"),
    }
    no_deferred(&ctx)
}

fn host_numa_id() -> Result<i32, Error> {
    Device::get(0)?.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID)
}

fn host_numa_supported() -> Result<(), String> {
    let device = Device::get(0).map_err(|e| e.to_string())?;
    let support = VmmSupport::of(&device).map_err(|e| e.to_string())?;
    match host_numa_id() {
        Ok(id) if support.host_numa && id >= 0 => Ok(()),
        other => Err(format!("no host-NUMA VMM: support {}, NUMA id {other:?}", support.host_numa)),
    }
}

fn host_numa_memory_is_mapped_for_the_device() -> TestResult {
    let _serial = serial();
    let (device, ctx, stream) = device_zero()?;
    let node = host_numa_id()?;
    let props = AllocationProperties::host_numa(node);
    let gran = minimum(&props)?;
    let physical = PhysicalMemory::new(&ctx, gran, &props)?;
    ensure_eq!(physical.properties()?.location, MemLocation::HostNuma(node));
    let range = AddressRange::reserve(&ctx, gran, 0)?;
    let mut mapping = range.map(0, &physical)?;
    mapping.set_access(&[AccessGrant::device(device, Access::ReadWrite)])?;
    let host = pattern(gran / 4, 0x90);
    mapping.view_mut::<u32>(&stream)?.copy_from_host(&host)?;
    ensure!(mapping.view::<u32>(&stream)?.to_vec()? == host, "host-NUMA memory read back other values");
    no_deferred(&ctx)
}

fn growable_buffer_grows_in_place_and_shrinks() -> TestResult {
    let _serial = serial();
    let (device, ctx, stream) = device_zero()?;
    let mut buffer = GrowableBuffer::<u32>::new(&stream, 256 << 20)?;
    ensure_eq!((buffer.len(), buffer.capacity(), buffer.chunks().len()), (0, 0, 0));
    ensure!(buffer.max_len() >= 256 << 20, "max_len {}", buffer.max_len());
    let address = buffer.as_raw();
    let first = pattern(1000, 1);
    buffer.extend_from_slice(&first)?;
    ensure_eq!(buffer.chunks().len(), 1);
    let chunk = buffer.capacity();
    let recommended = AllocationProperties::device(device).granularity(Granularity::Recommended)?;
    ensure_eq!(chunk * 4, recommended, "one chunk of the recommended granularity");
    // One element past the first chunk maps a second one behind it.
    buffer.resize(chunk + 1)?;
    ensure_eq!((buffer.chunks().len(), buffer.as_raw()), (2, address));
    buffer.slice_mut(chunk - 2..chunk + 1)?.copy_from_host(&[7, 8, 9])?;
    ensure_eq!(buffer.slice(chunk - 2..)?.to_vec()?, [7, 8, 9], "across the chunk boundary");
    // A large step is one more chunk of the size needed.
    buffer.resize(64 << 20)?;
    ensure_eq!((buffer.chunks().len(), buffer.as_raw()), (3, address));
    ensure!(buffer.capacity() >= 64 << 20, "capacity {}", buffer.capacity());
    ensure!(buffer.slice(..1000)?.to_vec()? == first, "growing changed the first elements");
    ensure_eq!(buffer.slice(chunk - 2..chunk + 1)?.to_vec()?, [7, 8, 9]);
    // Shrinking unmaps the chunks past the end: their addresses hold no memory any more.
    let past = address + (2 * chunk * 4) as u64 + 4096;
    buffer.resize(1000)?;
    ensure_eq!((buffer.chunks().len(), buffer.capacity(), buffer.len()), (1, chunk, 1000));
    ensure!(buffer.to_vec()? == first, "shrinking changed the elements kept");
    // SAFETY: nothing is mapped there, so nothing comes back to alias.
    let gone = unsafe { PhysicalMemory::retain_from_address(&ctx, past) };
    ensure!(matches!(gone, Err(Error::Driver { .. })), "memory past the end is still mapped: {gone:?}");
    // And it grows again, at the same address.
    buffer.resize(3 * chunk)?;
    ensure_eq!(buffer.as_raw(), address);
    let message = invalid(buffer.resize(buffer.max_len() + 1), "growing past max_len")?;
    ensure!(message.contains("max_len"), "{message}");
    drop(buffer);
    no_deferred(&ctx)
}

fn growable_buffer_is_a_kernel_argument() -> TestResult {
    let _serial = serial();
    let (_, ctx, stream) = device_zero()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let saxpy = module.function("saxpy")?;
    let mut y = GrowableBuffer::<f32>::new(&stream, 16 << 20)?;
    // Two appends: the second maps one chunk of two granules behind the first.
    let chunk = {
        y.extend_from_slice(&[1.0])?;
        y.capacity()
    };
    let n = 2 * chunk + 5;
    y.extend_from_slice(&vec![1.0f32; n - 1])?;
    ensure_eq!((y.len(), y.chunks().len()), (n, 2));
    let xs: Vec<f32> = (0..n).map(|i| (i % 1024) as f32).collect();
    let x = DeviceBuffer::from_slice(&stream, &xs)?;
    let (count, a) = (n as u32, 3.0f32);
    // SAFETY: saxpy takes (u32 n, f32 a, const f32* x, f32* y); x and y hold n floats.
    unsafe { saxpy.launch(&stream, &LaunchConfig::for_elements(count, 256), (&count, &a, &x, &mut y))? };
    stream.synchronize()?;
    let expected: Vec<f32> = xs.iter().map(|v| 3.0 * v + 1.0).collect();
    ensure!(y.to_vec()? == expected, "the kernel's writes through the growable buffer differ");
    // A view of a part passes too.
    let tail = n - chunk;
    let tail_count = tail as u32;
    // SAFETY: as above, over the last `tail` elements of both.
    unsafe {
        saxpy.launch(
            &stream,
            &LaunchConfig::for_elements(tail_count, 256),
            (&tail_count, &a, x.slice(chunk..)?, y.slice_mut(chunk..)?),
        )?
    };
    stream.synchronize()?;
    let got = y.to_vec()?;
    ensure!(got[..chunk] == expected[..chunk], "the first chunk changed");
    ensure!(got[chunk..].iter().zip(&xs[chunk..]).all(|(g, x)| *g == 6.0 * x + 1.0), "the view's elements");
    no_deferred(&ctx)
}

fn vmm_allocator_backs_buffers_and_pools() -> TestResult {
    let _serial = serial();
    let (device, ctx, stream) = device_zero()?;
    let vmm = Arc::new(VmmAllocator::new(&ctx)?);
    let gran = minimum(&AllocationProperties::device(device))?;
    let host: Vec<u64> = (0..100_000u64).map(|i| i * i).collect();
    let mut buffer = DeviceBuffer::<u64>::new_in(&stream, host.len(), vmm.clone())?;
    ensure_eq!(buffer.allocator_name(), "cuMemCreate");
    ensure_eq!(buffer.allocation().size % gran, 0, "sizes round up to the granularity");
    buffer.copy_from(&host)?;
    ensure!(buffer.to_vec()? == host, "a VMM-backed buffer read back other values");
    let ptr = buffer.as_raw();
    ensure_eq!(
        vmm.with_mapping(ptr, |m| m.access(MemLocation::Device(device))).transpose()?,
        Some(Access::ReadWrite)
    );
    drop(buffer);
    ensure!(vmm.with_mapping(ptr, |_| ()).is_none(), "the mapping outlived its buffer");
    // As the upstream of a MemoryPool.
    let pool = Arc::new(MemoryPool::with_allocator(&ctx, vmm.clone())?);
    let mut pooled = DeviceBuffer::<u64>::new_in(&stream, host.len(), pool.clone())?;
    pooled.copy_from(&host)?;
    ensure!(pooled.to_vec()? == host, "a pooled VMM buffer read back other values");
    drop(pooled);
    stream.synchronize()?;
    pool.free_all_blocks(None)?;
    // Exportable memory: the physical allocation behind a buffer, found by its address,
    // exported as a descriptor and imported again, reads what the buffer holds.
    let props = AllocationProperties::device(device).with_handle_types(HandleTypes::POSIX_FILE_DESCRIPTOR);
    let grants = [AccessGrant::device(device, Access::ReadWrite)];
    let shareable = Arc::new(VmmAllocator::with_properties(&ctx, props, &grants)?);
    let mut buffer = DeviceBuffer::<u64>::new_in(&stream, host.len(), shareable.clone())?;
    buffer.copy_from(&host)?;
    let size = buffer.allocation().size;
    let fd = shareable.with_mapping(buffer.as_raw(), |m| m.physical().export_fd()).ok_or("no mapping")??;
    // SAFETY: nothing else uses the exported memory while this mapping of it is used.
    let imported = unsafe { PhysicalMemory::import_fd(&ctx, fd.as_fd(), size) }?;
    let range = AddressRange::reserve(&ctx, size, 0)?;
    let alias = range.map(0, &imported)?;
    alias.set_access(&grants)?;
    ensure!(
        alias.view::<u64>(&stream)?.slice(..host.len())?.to_vec()? == host,
        "the buffer's exported memory reads other values"
    );
    drop((alias, buffer));
    no_deferred(&ctx)
}

fn bad_input_is_refused_with_typed_errors() -> TestResult {
    let _serial = serial();
    let (device, ctx, stream) = device_zero()?;
    let props = AllocationProperties::device(device);
    let gran = minimum(&props)?;
    // A size that is not a multiple of the granularity names it.
    let message = invalid(PhysicalMemory::new(&ctx, gran + gran / 2, &props), "an unaligned size")?;
    ensure!(message.contains(&gran.to_string()), "{message}");
    invalid(PhysicalMemory::new(&ctx, 0, &props), "a zero size")?;
    // Mapping past the reserved range, or at an unaligned offset.
    let range = AddressRange::reserve(&ctx, 2 * gran, 0)?;
    let physical = PhysicalMemory::new(&ctx, 2 * gran, &props)?;
    let message = invalid(range.map(gran, &physical), "a mapping past the range")?;
    ensure!(message.contains("past the reserved range"), "{message}");
    let small = PhysicalMemory::new(&ctx, gran, &props)?;
    let message = invalid(range.map(gran / 2, &small), "an unaligned offset")?;
    ensure!(message.contains(&gran.to_string()), "{message}");
    // Mapping over a mapping is the driver's error.
    let first = range.map(0, &small)?;
    let twice = range.map(0, &small);
    ensure!(matches!(twice, Err(Error::Driver { .. })), "a second mapping at the same address: {twice:?}");
    invalid(first.set_access(&[]), "no grants")?;
    drop(first);
    // Reservations: a bad alignment, an address that is taken.
    invalid(AddressRange::reserve(&ctx, gran, 3 * gran), "a non-power-of-two alignment")?;
    invalid(AddressRange::reserve(&ctx, 0, 0), "a zero-byte reservation")?;
    let taken = AddressRange::reserve_at(&ctx, gran, 0, range.as_raw());
    ensure!(
        matches!(taken, Err(Error::InvalidArgument { .. } | Error::Driver { .. })),
        "reserved taken addresses: {taken:?}"
    );
    // Exports as a handle type the allocation was not made with.
    let message = invalid(physical.export_fd(), "an fd export without the handle type")?;
    ensure!(message.contains("POSIX_FILE_DESCRIPTOR"), "{message}");
    invalid(physical.export_fabric(), "a fabric export without the handle type")?;
    // Imports of what is not an exported allocation: a file, a descriptor that is not open,
    // fabric bytes that name nothing.
    let file = std::fs::File::open("/dev/null").map_err(|e| e.to_string())?;
    // SAFETY: the import is refused; nothing is mapped.
    let not_cuda = unsafe { PhysicalMemory::import_fd(&ctx, file.as_fd(), gran) };
    ensure!(matches!(not_cuda, Err(Error::Driver { .. })), "imported /dev/null: {not_cuda:?}");
    // SAFETY: no descriptor of this process has this number (it is above any descriptor
    // limit); the driver only reads the number, and refusing it is what is tested.
    let closed = unsafe { std::os::fd::BorrowedFd::borrow_raw(1 << 24) };
    // SAFETY: the import is refused; nothing is mapped.
    let not_open = unsafe { PhysicalMemory::import_fd(&ctx, closed, gran) };
    ensure!(matches!(not_open, Err(Error::Driver { .. })), "imported a closed descriptor: {not_open:?}");
    // SAFETY: the import is refused; nothing is mapped.
    let garbage = unsafe { PhysicalMemory::import_fabric(&ctx, &FabricHandle([0x5a; 64]), gran) };
    ensure!(matches!(garbage, Err(Error::Driver { .. })), "imported garbage fabric bytes: {garbage:?}");
    // Growable buffers: nothing to grow into, no grants, views past the end.
    invalid(GrowableBuffer::<u32>::new(&stream, 0), "a zero max_len")?;
    invalid(GrowableBuffer::<u32>::with_properties(&stream, 16, props, &[]), "no grants")?;
    let buffer = GrowableBuffer::<u32>::new(&stream, 16)?;
    invalid(buffer.slice(0..1), "a view past the end")?;
    drop((buffer, range, physical));
    no_deferred(&ctx)
}

fn a_kernel_on_gpu1_writes_vmm_memory_of_gpu0() -> TestResult {
    let _serial = serial();
    let (d0, d1) = (Device::get(0)?, Device::get(1)?);
    if !d1.can_access_peer(&d0)? {
        eprintln!("device 1 cannot access device 0; nothing to test");
        return Ok(());
    }
    let (c0, c1) = (Context::primary(&d0)?, Context::primary(&d1)?);
    let props = AllocationProperties::device(d0);
    let gran = props.granularity(Granularity::Recommended)?;
    let range = AddressRange::reserve(&c0, gran, 0)?;
    let physical = PhysicalMemory::new(&c0, gran, &props)?;
    let mut mapping = range.map(0, &physical)?;
    mapping.set_access(&[
        AccessGrant::device(d0, Access::ReadWrite),
        AccessGrant::device(d1, Access::ReadWrite),
    ])?;
    ensure_eq!(mapping.access(MemLocation::Device(d1))?, Access::ReadWrite);
    let n = gran / 4;
    let s0 = Stream::new(&c0, StreamFlags::NON_BLOCKING)?;
    mapping.view_mut::<f32>(&s0)?.copy_from_host(&vec![1.0f32; n])?;

    let s1 = Stream::new(&c1, StreamFlags::NON_BLOCKING)?;
    let xs: Vec<f32> = (0..n).map(|i| (i % 4096) as f32).collect();
    let x = DeviceBuffer::from_slice(&s1, &xs)?;
    let module = Module::from_ptx(&c1, kernels::PTX)?;
    let (count, a, y) = (n as u32, 2.0f32, mapping.as_raw());
    // SAFETY: saxpy takes (u32, f32, const f32*, f32*); x (device 1) and y (memory of device 0,
    // read-write for device 1 through cuMemSetAccess) hold n floats.
    unsafe {
        module.function("saxpy")?.launch(
            &s1,
            &LaunchConfig::for_elements(count, 256),
            (&count, &a, &x, &y),
        )?
    };
    s1.synchronize()?;
    let got = mapping.view::<f32>(&s0)?.to_vec()?;
    ensure!(
        got.iter().zip(&xs).all(|(g, x)| *g == 2.0 * x + 1.0),
        "device 1's writes to device 0's memory are not all there"
    );

    // A growable buffer on device 0 that device 1 may use too.
    let grants = [AccessGrant::device(d0, Access::ReadWrite), AccessGrant::device(d1, Access::ReadWrite)];
    let mut shared = GrowableBuffer::<f32>::with_properties(&s0, 4 * n, props, &grants)?;
    shared.extend_from_slice(&vec![1.0f32; n])?;
    ensure_eq!(shared.chunks()[0].access(MemLocation::Device(d1))?, Access::ReadWrite);
    // SAFETY: as above; `shared` holds n floats, read-write for device 1.
    unsafe {
        module.function("saxpy")?.launch(
            &s1,
            &LaunchConfig::for_elements(count, 256),
            (&count, &a, &x, &mut shared),
        )?
    };
    s1.synchronize()?;
    let got = shared.to_vec()?;
    ensure!(
        got.iter().zip(&xs).all(|(g, x)| *g == 2.0 * x + 1.0),
        "device 1's writes to a growable buffer of device 0 are not all there"
    );
    drop(shared);
    no_deferred(&c0)?;
    no_deferred(&c1)
}
