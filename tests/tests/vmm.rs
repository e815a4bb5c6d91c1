//! `cuhost::vmm` on a GPU: granularity and properties, mappings read and written after
//! their access is set, every drop order of range, physical memory and mapping, retained and
//! in-process imported handles, fabric handles (or the driver's refusal, by name), the
//! growable buffer (in place, as a kernel argument, shrinking), the VMM allocator under
//! `DeviceBuffer` and `MemoryPool`, bad input, a kernel on a second GPU writing memory
//! of the first, and sparse arrays and sparse mipmapped arrays whose tiles are mapped onto tile
//! pools (copied through once backed, refused before, bad regions refused before the call).

#[path = "kernels/mod.rs"]
mod kernels;

use cuda_tests::{TestResult, device_zero, ensure, ensure_eq, gpu, gpu_needing, multi_gpu, no_deferred};
use cuhost::driver_sys as sys;
use cuhost::memory::{Array, ArrayDescriptor, ArrayFlags, MemLocation, MipmappedArray};
use cuhost::mempool::Access;
use cuhost::module::Module;
use cuhost::pool::MemoryPool;
use cuhost::vmm::{
    AccessGrant, AddressRange, AllocationProperties, FabricHandle, Granularity, GrowableBuffer, HandleTypes,
    MappedSpan, PhysicalMemory, SparseArray, SparseMipmappedArray, SparseRegion, VmmAllocator, VmmSupport,
};
use cuhost::{Context, Device, DeviceBuffer, Error, LaunchConfig, Stream, StreamFlags};
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
        gpu_needing(
            "sparse_array_level_is_mapped_copied_and_unmapped",
            sparse_supported,
            sparse_array_level_is_mapped_copied_and_unmapped,
        ),
        gpu_needing(
            "sparse_mappings_of_bad_regions_are_refused_before_the_call",
            sparse_supported,
            sparse_mappings_of_bad_regions_are_refused_before_the_call,
        ),
        gpu_needing(
            "sparse_mipmapped_levels_and_mip_tail_are_mapped_and_copied",
            sparse_supported,
            sparse_mipmapped_levels_and_mip_tail_are_mapped_and_copied,
        ),
        gpu_needing(
            "sparse_layered_and_3d_arrays_are_mapped_per_layer_and_in_depth",
            sparse_supported,
            sparse_layered_and_3d_arrays_are_mapped_per_layer_and_in_depth,
        ),
        gpu(
            "sparse_arrays_without_support_are_a_typed_error",
            sparse_arrays_without_support_are_a_typed_error,
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
    let mut back = cuhost::PinnedBuffer::<u32>::new(gran)?;
    other.launch_host_func(|| std::thread::sleep(std::time::Duration::from_millis(100)))?;
    span.view::<u32>(&stream)?.slice(0..gran)?.copy_to_pinned_async(&mut back, &other)?;
    let mappings = span.into_mappings();
    ensure_eq!(mappings.len(), 3);
    drop(mappings);
    ensure!(back.as_slice()? == all[..gran], "the copy queued before the unmap read other values");
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
    ensure!(back.as_slice()? == all[..], "the copy queued before the span's drop read other values");
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

// Sparse arrays.

fn sparse_supported() -> Result<(), String> {
    match Device::get(0).and_then(|d| d.sparse_cuda_array_supported()) {
        Ok(true) => Ok(()),
        other => Err(format!("no sparse CUDA arrays: {other:?}")),
    }
}

fn float_2d(width: usize, height: usize) -> ArrayDescriptor {
    ArrayDescriptor {
        width,
        height,
        depth: 0,
        format: sys::CUarray_format::CU_AD_FORMAT_FLOAT,
        num_channels: 1,
        flags: ArrayFlags::empty(),
    }
}

/// The tile extent of a sparse 2D float array, from a probe array (the driver chooses it).
fn float_tile(ctx: &Context) -> Result<(usize, usize), Error> {
    let (w, h, _) = SparseArray::new(ctx, &float_2d(1024, 1024))?.sparse_properties().tile_extent;
    Ok((w as usize, h as usize))
}

/// A tile pool of device 0 holding at least `bytes`, rounded up to the granularity.
fn tile_pool(ctx: &Context, device: Device, bytes: usize) -> Result<PhysicalMemory, Error> {
    let props = AllocationProperties::device(device).with_tile_pool(true);
    PhysicalMemory::new(ctx, bytes.next_multiple_of(minimum(&props)?), &props)
}

fn floats(n: usize, seed: u32) -> Vec<f32> {
    pattern(n, seed).into_iter().map(|v| (v >> 8) as f32).collect()
}

/// The first index where two readings differ, with both values.
fn first_difference(got: &[f32], want: &[f32]) -> Option<(usize, f32, f32)> {
    if got.len() != want.len() {
        return Some((got.len().min(want.len()), f32::NAN, f32::NAN));
    }
    got.iter()
        .zip(want)
        .enumerate()
        .find(|(_, (g, w))| g.to_bits() != w.to_bits())
        .map(|(i, (g, w))| (i, *g, *w))
}

/// A sparse 2D array of 4 × 2 tiles: refused to safe code until level 0 is mapped, then written
/// and read back element by element through the array copies (host and device, sync and on a
/// stream), unmapped (refused again), and mapped once more from two pools at non-zero offsets.
fn sparse_array_level_is_mapped_copied_and_unmapped() -> TestResult {
    let _serial = serial();
    let (device, ctx, stream) = device_zero()?;
    let (tw, th) = float_tile(&ctx)?;
    ensure!(tw > 0 && th > 0, "tile extent {tw} × {th}");
    let (w, h) = (4 * tw, 2 * th);
    let mut sparse = SparseArray::new(&ctx, &float_2d(w, h))?;
    let props = sparse.sparse_properties();
    eprintln!("sparse {w} × {h} float array: {props:?}, tile {} bytes", sparse.tile_bytes());
    ensure_eq!(props.tile_extent, (tw as u32, th as u32, props.tile_extent.2));
    ensure_eq!(sparse.tile_bytes(), tw * th * props.tile_extent.2.max(1) as usize * 4);
    ensure_eq!(props.miptail_size, 0, "a plain array of whole tiles has no mip tail: {props:?}");
    ensure!(!sparse.is_backed(), "nothing is mapped yet");
    invalid(sparse.array(), "reading an unmapped sparse array")?;
    invalid(sparse.array_mut(), "writing an unmapped sparse array")?;

    let level = sparse.level_region(0, 0)?;
    ensure_eq!(
        level,
        SparseRegion::Level { level: 0, layer: 0, offset: [0; 3], extent: [w as u32, h as u32, 1] }
    );
    ensure_eq!(sparse.region_bytes(&level)?, 8 * sparse.tile_bytes());
    let pool = tile_pool(&ctx, device, sparse.region_bytes(&level)?)?;
    sparse.map(&level, &pool, 0, &stream)?;
    ensure!(sparse.is_backed(), "level 0 is mapped");
    drop(pool); // the caller's handle goes; the mapping keeps the memory

    let data = floats(w * h, 0x51);
    sparse.array_mut()?.copy_from_host(&data)?;
    ensure_eq!(sparse.array()?.descriptor()?.width, w);
    ensure!(sparse.array()?.descriptor()?.flags.contains(ArrayFlags::SPARSE), "the array is sparse");
    let mut out = vec![0f32; w * h];
    sparse.array()?.copy_to_host(&mut out)?;
    ensure!(first_difference(&out, &data).is_none(), "host round trip: {:?}", first_difference(&out, &data));
    // Through device memory, on the stream.
    let other = floats(w * h, 0x52);
    let src = DeviceBuffer::from_slice(&stream, &other)?;
    sparse.array_mut()?.copy_from_device(&src.view())?;
    let mut dst = DeviceBuffer::<f32>::zeroed(&stream, w * h)?;
    sparse.array()?.copy_to_device_async(&mut dst.view_mut(), &stream)?;
    stream.synchronize()?;
    let back = dst.to_vec()?;
    ensure!(
        first_difference(&back, &other).is_none(),
        "device round trip: {:?}",
        first_difference(&back, &other)
    );

    // A read held back on another stream: the unmap (on `stream`) returns only once it has
    // run, so the tiles are still mapped when it reads them.
    let work = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let mut late = DeviceBuffer::<f32>::zeroed(&work, w * h)?;
    work.synchronize()?;
    work.launch_host_func(|| std::thread::sleep(std::time::Duration::from_millis(300)))?;
    sparse.array()?.copy_to_device_async(&mut late.view_mut(), &work)?;
    ensure!(!work.query()?, "the read is held back behind the host function");
    sparse.unmap(&level, &stream)?;
    ensure!(work.query()?, "the unmap returned before the read it must wait for had run");
    ensure!(first_difference(&late.to_vec()?, &other).is_none(), "the held-back read saw unmapped tiles");
    ensure!(!sparse.is_backed(), "level 0 is unmapped");
    invalid(sparse.array(), "reading an unmapped sparse array after the unmap")?;

    // Tile by tile from two pools, each from its second tile on: the left half from `a`, the
    // right half from `b`.
    let tb = sparse.tile_bytes();
    let (a, b) = (tile_pool(&ctx, device, 5 * tb)?, tile_pool(&ctx, device, 5 * tb)?);
    let half = |x: usize| SparseRegion::Level {
        level: 0,
        layer: 0,
        offset: [x as u32, 0, 0],
        extent: [2 * tw as u32, h as u32, 1],
    };
    sparse.map(&half(0), &a, tb, &stream)?;
    ensure!(!sparse.is_backed(), "half of level 0 is mapped");
    invalid(sparse.array(), "reading a half-mapped sparse array")?;
    sparse.map(&half(2 * tw), &b, tb, &stream)?;
    let third = floats(w * h, 0x53);
    sparse.array_mut()?.copy_from_host(&third)?;
    sparse.array()?.copy_to_host(&mut out)?;
    ensure!(
        first_difference(&out, &third).is_none(),
        "two-pool round trip: {:?}",
        first_difference(&out, &third)
    );
    drop((a, b));
    drop(sparse); // tiles still mapped: the array is destroyed, then the pools released

    // An array smaller than a tile lies wholly in its mip tail.
    let (sw, sh) = (tw / 2, th / 2);
    let mut small = SparseArray::new(&ctx, &float_2d(sw, sh))?;
    ensure!(small.sparse_properties().miptail_size > 0, "{:?}", small.sparse_properties());
    invalid(small.level_region(0, 0), "a level region of an array inside its tail")?;
    let tail = small.mip_tail_region(0)?;
    let pool = tile_pool(&ctx, device, small.region_bytes(&tail)?)?;
    small.map(&tail, &pool, 0, &stream)?;
    let data = floats(sw * sh, 0x54);
    small.array_mut()?.copy_from_host(&data)?;
    let mut out = vec![0f32; sw * sh];
    small.array()?.copy_to_host(&mut out)?;
    ensure!(
        first_difference(&out, &data).is_none(),
        "mip tail round trip: {:?}",
        first_difference(&out, &data)
    );
    small.unmap(&tail, &stream)?;
    invalid(small.array(), "an array whose tail is unmapped")?;
    drop((small, pool));

    // A level that is not whole tiles: its last tiles are named by extents that reach the edge.
    let (rw, rh) = (2 * tw + tw / 2, th + 3);
    let mut ragged = SparseArray::new(&ctx, &float_2d(rw, rh))?;
    let rounded =
        SparseRegion::Level { level: 0, layer: 0, offset: [0; 3], extent: [3 * tw as u32, 2 * th as u32, 1] };
    invalid(ragged.region_bytes(&rounded), "an extent rounded up past the level's edge")?;
    let whole = ragged.level_region(0, 0)?;
    ensure_eq!(
        whole,
        SparseRegion::Level { level: 0, layer: 0, offset: [0; 3], extent: [rw as u32, rh as u32, 1] }
    );
    ensure_eq!(ragged.region_bytes(&whole)?, 6 * tb, "3 × 2 tiles");
    let pool = tile_pool(&ctx, device, 6 * tb)?;
    ragged.map(&whole, &pool, 0, &stream)?;
    let data = floats(rw * rh, 0x55);
    ragged.array_mut()?.copy_from_host(&data)?;
    let mut out = vec![0f32; rw * rh];
    ragged.array()?.copy_to_host(&mut out)?;
    ensure!(
        first_difference(&out, &data).is_none(),
        "ragged round trip: {:?}",
        first_difference(&out, &data)
    );
    drop((ragged, pool));
    no_deferred(&ctx)
}

/// Regions that are not whole tiles of the array, pool offsets and sizes that do not fit, memory
/// that is not a tile pool, and maps over mapped tiles are refused before the driver is asked,
/// and leave the array as it was; safe array constructors refuse the sparse flag.
fn sparse_mappings_of_bad_regions_are_refused_before_the_call() -> TestResult {
    let _serial = serial();
    let (device, ctx, stream) = device_zero()?;
    let (tw, th) = float_tile(&ctx)?;
    let (w, h) = (2 * tw, 2 * th);
    let mut sparse = SparseArray::new(&ctx, &float_2d(w, h))?;
    let tb = sparse.tile_bytes();
    let pool = tile_pool(&ctx, device, 4 * tb)?;
    let region = |offset: [usize; 3], extent: [usize; 3]| SparseRegion::Level {
        level: 0,
        layer: 0,
        offset: offset.map(|v| v as u32),
        extent: extent.map(|v| v as u32),
    };
    let message =
        invalid(sparse.map(&region([tw / 2, 0, 0], [tw, th, 1]), &pool, 0, &stream), "an unaligned offset")?;
    ensure!(message.contains(&tw.to_string()), "the message names the tile extent: {message}");
    invalid(sparse.map(&region([0, 0, 0], [tw / 2, th, 1]), &pool, 0, &stream), "an unaligned extent")?;
    invalid(sparse.map(&region([tw, 0, 0], [2 * tw, th, 1]), &pool, 0, &stream), "an extent past the level")?;
    invalid(sparse.map(&region([0, 0, 0], [0, th, 1]), &pool, 0, &stream), "an empty extent")?;
    invalid(sparse.map(&region([0, 0, 1], [tw, th, 1]), &pool, 0, &stream), "a z offset in a 2D array")?;
    let layer1 =
        SparseRegion::Level { level: 0, layer: 1, offset: [0; 3], extent: [tw as u32, th as u32, 1] };
    invalid(sparse.map(&layer1, &pool, 0, &stream), "a layer of an unlayered array")?;
    let level1 =
        SparseRegion::Level { level: 1, layer: 0, offset: [0; 3], extent: [tw as u32, th as u32, 1] };
    invalid(sparse.map(&level1, &pool, 0, &stream), "a level of a plain array")?;
    invalid(
        sparse.map(&SparseRegion::MipTail { layer: 0, offset: 0, size: tb as u64 }, &pool, 0, &stream),
        "the mip tail of an array without one",
    )?;
    let whole = sparse.level_region(0, 0)?;
    let message = invalid(sparse.map(&whole, &pool, tb / 2, &stream), "an unaligned pool offset")?;
    ensure!(message.contains(&tb.to_string()), "the message names the tile size: {message}");
    invalid(sparse.map(&whole, &pool, pool.size() - tb, &stream), "too few pool bytes left")?;
    let plain_props = AllocationProperties::device(device);
    let plain = PhysicalMemory::new(&ctx, minimum(&plain_props)?, &plain_props)?;
    let not_pool = sparse.map(&whole, &plain, 0, &stream);
    ensure!(matches!(not_pool, Err(Error::Driver { .. })), "memory that is not a tile pool: {not_pool:?}");
    // Nothing was mapped by any of these.
    ensure!(!sparse.is_backed(), "a refused map changed the array");
    invalid(sparse.array(), "an array after refused maps")?;
    // A good map, then one over it.
    sparse.map(&whole, &pool, 0, &stream)?;
    let corner = region([0, 0, 0], [tw, th, 1]);
    let message = invalid(sparse.map(&corner, &pool, 0, &stream), "a map over mapped tiles")?;
    ensure!(message.contains("unmap it first"), "{message}");
    ensure!(sparse.array().is_ok(), "the good map backs the array");
    // The safe constructors of dense arrays refuse the sparse flag.
    let flagged = ArrayDescriptor { flags: ArrayFlags::SPARSE, ..float_2d(w, h) };
    let message = invalid(Array::new(&ctx, &flagged), "Array::new with SPARSE")?;
    ensure!(message.contains("SparseArray"), "{message}");
    invalid(MipmappedArray::new(&ctx, &flagged, 2), "MipmappedArray::new with SPARSE")?;
    // Shapes a sparse array cannot have.
    invalid(SparseArray::new(&ctx, &float_2d(w, 0)), "a 1D sparse array")?;
    let cubemap = ArrayDescriptor { depth: 6, flags: ArrayFlags::CUBEMAP, ..float_2d(tw, tw) };
    invalid(SparseArray::new(&ctx, &cubemap), "a sparse cubemap")?;
    drop(sparse);
    no_deferred(&ctx)
}

/// A sparse mipmapped array of 4 × 4 tiles at level 0: each level is refused until it is backed
/// (its tiles, or the mip tail for the levels in it), then written and read back; the whole
/// array is lent once every level is; unmapping the tail takes the small levels away again.
fn sparse_mipmapped_levels_and_mip_tail_are_mapped_and_copied() -> TestResult {
    let _serial = serial();
    let (device, ctx, stream) = device_zero()?;
    let (tw, th) = float_tile(&ctx)?;
    let (w, h) = (4 * tw, 4 * th);
    let levels = w.max(h).ilog2() + 1;
    let mut sparse = SparseMipmappedArray::new(&ctx, &float_2d(w, h), levels)?;
    let props = sparse.sparse_properties();
    eprintln!("sparse mipmapped {w} × {h} float array of {levels} levels: {props:?}");
    ensure_eq!(sparse.levels(), levels);
    ensure!(props.miptail_first_level >= 1 && props.miptail_first_level < levels, "{props:?}");
    ensure!(props.miptail_size > 0, "a mip tail: {props:?}");
    let first_tail = props.miptail_first_level;
    invalid(sparse.level(0), "an unmapped level")?;
    invalid(sparse.mipmapped_array(), "an unmapped mipmapped array")?;
    invalid(sparse.level_region(first_tail, 0), "a level region inside the tail")?;

    let tb = sparse.tile_bytes();
    let tail = sparse.mip_tail_region(0)?;
    let mut regions: Vec<SparseRegion> =
        (0..first_tail).map(|l| sparse.level_region(l, 0)).collect::<Result<_, _>>()?;
    regions.push(tail);
    let sizes = regions.iter().map(|r| sparse.region_bytes(r)).collect::<Result<Vec<_>, _>>()?;
    let total: usize = sizes.iter().sum();
    let pool = tile_pool(&ctx, device, total)?;
    let mut offset = 0;
    for (region, size) in regions.iter().zip(&sizes) {
        ensure_eq!(size % tb, 0, "region {region:?} takes whole tiles");
        sparse.map(region, &pool, offset, &stream)?;
        offset += size;
        if let SparseRegion::Level { level, .. } = *region {
            ensure!(sparse.is_level_backed(level), "level {level} is backed once mapped");
        }
    }
    ensure!(sparse.is_backed(), "every level and the tail are mapped");
    for level in 0..levels {
        let d = sparse.mipmapped_array()?.level_descriptor(level)?;
        let n = d.width * d.height.max(1);
        let data = floats(n, 0x60 + level);
        let mut array = sparse.level(level)?;
        array.copy_from_host(&data)?;
        let mut out = vec![0f32; n];
        array.copy_to_host(&mut out)?;
        ensure!(
            first_difference(&out, &data).is_none(),
            "level {level}: {:?}",
            first_difference(&out, &data)
        );
    }
    // Level 0 again, after every other level was written: no level overlaps another.
    let d0 = floats(w * h, 0x60);
    let mut out = vec![0f32; w * h];
    sparse.level(0)?.copy_to_host(&mut out)?;
    ensure!(
        first_difference(&out, &d0).is_none(),
        "level 0 after the others: {:?}",
        first_difference(&out, &d0)
    );
    sparse.unmap(&tail, &stream)?;
    ensure!(!sparse.is_level_backed(first_tail), "the tail's levels are unmapped with it");
    invalid(sparse.level(levels - 1), "a level of the unmapped tail")?;
    ensure!(sparse.level(0).is_ok(), "level 0 stays mapped");
    drop((pool, sparse));
    no_deferred(&ctx)
}

/// A layered array is backed layer by layer (lent only once every layer is), a 3D array in
/// depth, and a layered mipmapped array per layer and per layer's mip tail (or its single
/// tail); each is written and read back whole.
fn sparse_layered_and_3d_arrays_are_mapped_per_layer_and_in_depth() -> TestResult {
    let _serial = serial();
    let (device, ctx, stream) = device_zero()?;
    let (tw, th) = float_tile(&ctx)?;

    // Layered: 2 × 1 tiles, 3 layers.
    let (w, h, layers) = (2 * tw, th, 3usize);
    let desc = ArrayDescriptor { depth: layers, flags: ArrayFlags::LAYERED, ..float_2d(w, h) };
    let mut layered = SparseArray::new(&ctx, &desc)?;
    let tb = layered.tile_bytes();
    let pool = tile_pool(&ctx, device, 2 * layers * tb)?;
    let regions = (0..layers as u32).map(|l| layered.level_region(0, l)).collect::<Result<Vec<_>, _>>()?;
    invalid(layered.level_region(0, layers as u32), "a layer past the last")?;
    for (i, region) in regions.iter().enumerate() {
        invalid(layered.array(), "a layered array with unmapped layers")?;
        layered.map(region, &pool, i * 2 * tb, &stream)?;
    }
    let data = floats(w * h * layers, 0x70);
    layered.array_mut()?.copy_from_host(&data)?;
    let mut out = vec![0f32; data.len()];
    layered.array()?.copy_to_host(&mut out)?;
    ensure!(first_difference(&out, &data).is_none(), "layered: {:?}", first_difference(&out, &data));
    layered.unmap(&regions[1], &stream)?;
    invalid(layered.array(), "a layered array with one layer unmapped")?;
    drop((layered, pool));

    // 3D: 2 × 1 × 2 tiles of the 3D tile extent.
    let probe = ArrayDescriptor { depth: 256, ..float_2d(256, 256) };
    let (tw3, th3, td3) = SparseArray::new(&ctx, &probe)?.sparse_properties().tile_extent;
    eprintln!("3D float tile extent {tw3} × {th3} × {td3}");
    ensure!(td3 >= 1, "tile depth {td3}");
    let (w3, h3, d3) = (2 * tw3 as usize, th3 as usize, 2 * td3 as usize);
    let mut volume = SparseArray::new(&ctx, &ArrayDescriptor { depth: d3, ..float_2d(w3, h3) })?;
    let whole = volume.level_region(0, 0)?;
    ensure_eq!(
        whole,
        SparseRegion::Level { level: 0, layer: 0, offset: [0; 3], extent: [w3 as u32, h3 as u32, d3 as u32] }
    );
    ensure_eq!(volume.region_bytes(&whole)?, 4 * volume.tile_bytes());
    let front =
        SparseRegion::Level { level: 0, layer: 0, offset: [0; 3], extent: [w3 as u32, h3 as u32, td3] };
    let back =
        SparseRegion::Level { level: 0, layer: 0, offset: [0, 0, td3], extent: [w3 as u32, h3 as u32, td3] };
    let pool = tile_pool(&ctx, device, 4 * volume.tile_bytes())?;
    volume.map(&back, &pool, 0, &stream)?;
    invalid(volume.array(), "a volume with its front unmapped")?;
    volume.map(&front, &pool, 2 * volume.tile_bytes(), &stream)?;
    let data = floats(w3 * h3 * d3, 0x71);
    volume.array_mut()?.copy_from_host(&data)?;
    let mut out = vec![0f32; data.len()];
    volume.array()?.copy_to_host(&mut out)?;
    ensure!(first_difference(&out, &data).is_none(), "3D: {:?}", first_difference(&out, &data));
    drop((volume, pool));

    // Layered mipmapped: 4 × 4 tiles, 2 layers, every level.
    let (w, h, layers) = (4 * tw, 4 * th, 2usize);
    let levels = w.max(h).ilog2() + 1;
    let desc = ArrayDescriptor { depth: layers, flags: ArrayFlags::LAYERED, ..float_2d(w, h) };
    let mut mip = SparseMipmappedArray::new(&ctx, &desc, levels)?;
    let props = mip.sparse_properties();
    eprintln!("layered sparse mipmapped array: {props:?}");
    let single = props.flags & sys::CU_ARRAY_SPARSE_PROPERTIES_SINGLE_MIPTAIL != 0;
    let tail_layers = if single { 1 } else { layers as u32 };
    let mut regions = Vec::new();
    for layer in 0..layers as u32 {
        for level in 0..props.miptail_first_level {
            regions.push(mip.level_region(level, layer)?);
        }
    }
    for layer in 0..tail_layers {
        regions.push(mip.mip_tail_region(layer)?);
    }
    if single {
        invalid(mip.mip_tail_region(1), "a second layer of a single mip tail")?;
    }
    let total = regions.iter().map(|r| mip.region_bytes(r)).sum::<Result<usize, _>>()?;
    let pool = tile_pool(&ctx, device, total)?;
    let mut offset = 0;
    for region in &regions {
        mip.map(region, &pool, offset, &stream)?;
        offset += mip.region_bytes(region)?;
    }
    ensure_eq!(offset, total);
    ensure!(mip.is_backed(), "every layer, level and tail is mapped");
    for level in 0..levels {
        let d = mip.mipmapped_array()?.level_descriptor(level)?;
        let n = d.width * d.height * layers;
        let data = floats(n, 0x80 + level);
        let mut array = mip.level(level)?;
        array.copy_from_host(&data)?;
        let mut out = vec![0f32; n];
        array.copy_to_host(&mut out)?;
        ensure!(
            first_difference(&out, &data).is_none(),
            "layered level {level}: {:?}",
            first_difference(&out, &data)
        );
    }
    drop((mip, pool));
    no_deferred(&ctx)
}

/// On a device without sparse arrays, making one is `Error::Unsupported`; on one with them it
/// succeeds.
fn sparse_arrays_without_support_are_a_typed_error() -> TestResult {
    let (device, ctx, _) = device_zero()?;
    let made = SparseArray::new(&ctx, &float_2d(512, 512));
    match device.sparse_cuda_array_supported()? {
        true => ensure!(made.is_ok(), "a supported device refused a sparse array: {made:?}"),
        false => ensure!(matches!(made, Err(Error::Unsupported { .. })), "expected Unsupported: {made:?}"),
    }
    Ok(())
}
