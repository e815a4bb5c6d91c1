//! External memory and semaphores: memory another CUDA allocation exported as a file
//! descriptor, and a real Vulkan device's buffer, image and semaphores, imported into CUDA.
//! Vulkan writes a buffer and signals a timeline semaphore; a kernel waits for it, computes in
//! place and signals again; Vulkan waits on the GPU and reads the result back. Bad handles and
//! ranges are refused with typed errors, the descriptor is given back, and the context goes on.

#[path = "kernels/mod.rs"]
mod kernels;
#[path = "peers/vulkan.rs"]
mod vulkan;

use cuda_tests::{
    Failed, TestResult, device_zero, ensure, ensure_eq, gpu, gpu_needing, no_deferred, still_usable,
};
use cuhost::graph::{Graph, InstantiateFlags};
use cuhost::interop::external::{
    ExternalMemory, ExternalMemoryFlags, ExternalSemaphore, MemoryHandle, SemaphoreHandle, SemaphoreKind,
    SignalParams, WaitParams, signal_all,
};
use cuhost::memory::{ArrayDescriptor, ArrayFlags};
use cuhost::module::Module;
use cuhost::vmm::{AllocationProperties, Granularity, HandleTypes, PhysicalMemory};
use cuhost::{Context, Device, DeviceBuffer, Error, LaunchConfig, Stream};
use cuhost_driver_sys as sys;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;
use vulkan::Vulkan;

fn main() {
    cuda_tests::run(&[
        gpu("cuda_memory_exported_as_an_fd_imports_twice", cuda_memory_exported_as_an_fd_imports_twice),
        gpu(
            "handles_that_are_not_memory_are_refused_and_given_back",
            handles_that_are_not_memory_are_refused_and_given_back,
        ),
        gpu("ranges_past_the_object_are_refused", ranges_past_the_object_are_refused),
        gpu_needing(
            "vulkan_buffer_is_computed_on_between_timeline_signals",
            vulkan_present,
            vulkan_buffer_is_computed_on_between_timeline_signals,
        ),
        gpu_needing(
            "vulkan_binary_semaphore_orders_a_read",
            vulkan_present,
            vulkan_binary_semaphore_orders_a_read,
        ),
        gpu_needing(
            "vulkan_timeline_is_waited_on_and_signalled_by_a_graph",
            vulkan_present,
            vulkan_timeline_is_waited_on_and_signalled_by_a_graph,
        ),
        gpu_needing(
            "vulkan_image_maps_as_a_mipmapped_array",
            vulkan_present,
            vulkan_image_maps_as_a_mipmapped_array,
        ),
        gpu_needing(
            "vulkan_size_larger_than_the_object_is_refused",
            vulkan_present,
            vulkan_size_larger_than_the_object_is_refused,
        ),
        gpu_needing(
            "semaphore_parameters_must_fit_the_kind",
            vulkan_present,
            semaphore_parameters_must_fit_the_kind,
        ),
        gpu_needing(
            "semaphore_refuses_another_threads_per_thread_stream",
            vulkan_present,
            semaphore_refuses_another_threads_per_thread_stream,
        ),
    ]);
}

fn vulkan_for(device: &Device) -> Result<Vulkan, String> {
    let uuid = device.uuid().map_err(|e| e.to_string())?;
    Vulkan::new(uuid.0)
}

fn vulkan_present() -> Result<(), String> {
    let device = Device::get(0).map_err(|e| e.to_string())?;
    vulkan_for(&device).map(drop)
}

/// Imports the dedicated memory of a Vulkan buffer.
fn import_buffer(
    vk: &Vulkan,
    ctx: &Context,
    buffer: &vulkan::SharedBuffer,
) -> Result<ExternalMemory, Failed> {
    let fd = MemoryHandle::OpaqueFd(vk.export_memory_fd(buffer)?);
    Ok(ExternalMemory::import(ctx, fd, buffer.allocation_size(), ExternalMemoryFlags::DEDICATED)?)
}

/// Imports a Vulkan semaphore, binary or timeline as it was made.
fn import_semaphore(
    vk: &Vulkan,
    ctx: &Context,
    semaphore: &vulkan::SharedSemaphore,
) -> Result<ExternalSemaphore, Failed> {
    let fd = vk.export_semaphore_fd(semaphore)?;
    let handle =
        if semaphore.is_timeline() { SemaphoreHandle::TimelineFd(fd) } else { SemaphoreHandle::OpaqueFd(fd) };
    Ok(ExternalSemaphore::import(ctx, handle)?)
}

fn is_open(fd: &OwnedFd) -> bool {
    // SAFETY: F_GETFD only reads the descriptor's flags.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) != -1 }
}

fn cuda_memory_exported_as_an_fd_imports_twice() -> TestResult {
    let (device, ctx, stream) = device_zero()?;
    let props = AllocationProperties::device(device).with_handle_types(HandleTypes::POSIX_FILE_DESCRIPTOR);
    let size = props.granularity(Granularity::Recommended)?;
    let physical = PhysicalMemory::new(&ctx, size, &props)?;
    let flags = ExternalMemoryFlags::empty();
    let first =
        ExternalMemory::import(&ctx, MemoryHandle::OpaqueFd(physical.export_fd()?), size as u64, flags)?;
    let second =
        ExternalMemory::import(&ctx, MemoryHandle::OpaqueFd(physical.export_fd()?), size as u64, flags)?;
    ensure_eq!(first.size(), size as u64);
    let n = size / 4;
    let data: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    // SAFETY: nothing else uses the allocation; the copies are ordered on one stream.
    let (mut writer, reader) =
        unsafe { (first.map_buffer::<u32>(0, n, &stream)?, second.map_buffer::<u32>(0, n, &stream)?) };
    writer.copy_from(&data)?;
    ensure!(reader.to_vec()? == data, "the second import does not see what the first wrote");
    // A range at an offset maps the same bytes.
    // SAFETY: as above.
    let tail = unsafe { second.map_buffer::<u32>(4096, 16, &stream)? };
    ensure_eq!(tail.to_vec()?, data[1024..1040].to_vec());
    // The objects outlive their mappings whatever the drop order.
    drop(first);
    drop(second);
    ensure!(reader.to_vec()? == data, "a mapping died with its object");
    drop((writer, reader, tail));
    no_deferred(&ctx)
}

fn handles_that_are_not_memory_are_refused_and_given_back() -> TestResult {
    let (_, ctx, stream) = device_zero()?;
    let file = std::fs::File::open("/dev/null").map_err(|e| e.to_string())?;
    let refused = ExternalMemory::import(
        &ctx,
        MemoryHandle::OpaqueFd(file.into()),
        1 << 20,
        ExternalMemoryFlags::empty(),
    );
    let refused = match refused {
        Ok(_) => return Err("/dev/null was imported as memory".into()),
        Err(r) => r,
    };
    ensure!(
        matches!(refused.error(), Error::Driver { call: "cuImportExternalMemory", .. }),
        "{}",
        refused.error()
    );
    match refused.into_handle() {
        MemoryHandle::OpaqueFd(fd) => ensure!(is_open(&fd), "the refused descriptor was closed"),
        other => return Err(format!("another handle came back: {other:?}").into()),
    }
    // The same for a semaphore.
    let file = std::fs::File::open("/dev/null").map_err(|e| e.to_string())?;
    let refused = match ExternalSemaphore::import(&ctx, SemaphoreHandle::TimelineFd(file.into())) {
        Ok(_) => return Err("/dev/null was imported as a semaphore".into()),
        Err(r) => r,
    };
    let (error, handle) = refused.into_parts();
    ensure!(matches!(error, Error::Driver { call: "cuImportExternalSemaphore", .. }), "{error}");
    ensure!(matches!(&handle, SemaphoreHandle::TimelineFd(fd) if is_open(fd)), "the semaphore's descriptor");
    // Windows handles do not exist here, and nothing is called for them.
    let win32 = cuhost::interop::external::Win32Handle::Handle(std::ptr::null_mut());
    let refused =
        ExternalMemory::import(&ctx, MemoryHandle::OpaqueWin32(win32), 4096, ExternalMemoryFlags::empty());
    ensure!(
        matches!(refused.as_ref().err().map(|r| r.error()), Some(Error::Unsupported { .. })),
        "{refused:?}"
    );
    let refused =
        ExternalMemory::import(&ctx, MemoryHandle::OpaqueFd(dev_null()?), 0, ExternalMemoryFlags::empty());
    ensure!(matches!(refused.err().map(|r| r.into_parts().0), Some(Error::InvalidArgument { .. })), "size 0");
    still_usable(&stream)?;
    no_deferred(&ctx)
}

fn dev_null() -> Result<OwnedFd, String> {
    std::fs::File::open("/dev/null").map(OwnedFd::from).map_err(|e| e.to_string())
}

fn ranges_past_the_object_are_refused() -> TestResult {
    let (device, ctx, stream) = device_zero()?;
    let props = AllocationProperties::device(device).with_handle_types(HandleTypes::POSIX_FILE_DESCRIPTOR);
    let size = props.granularity(Granularity::Recommended)?;
    let physical = PhysicalMemory::new(&ctx, size, &props)?;
    let memory = ExternalMemory::import(
        &ctx,
        MemoryHandle::OpaqueFd(physical.export_fd()?),
        size as u64,
        ExternalMemoryFlags::empty(),
    )?;
    let n = size / 4;
    // SAFETY: nothing else uses the allocation.
    let past = unsafe { memory.map_buffer::<u32>(4, n, &stream) };
    let message = match past {
        Err(Error::InvalidArgument { message, .. }) => message,
        other => return Err(format!("a range past the end: {other:?}").into()),
    };
    ensure!(message.contains("past the"), "{message}");
    // SAFETY: as above.
    let misaligned = unsafe { memory.map_buffer::<u64>(4, 2, &stream) };
    ensure!(matches!(misaligned, Err(Error::InvalidArgument { .. })), "{misaligned:?}");
    // SAFETY: as above.
    let empty = unsafe { memory.map_buffer::<u32>(0, 0, &stream) };
    ensure!(matches!(empty, Err(Error::InvalidArgument { .. })), "{empty:?}");
    still_usable(&stream)?;
    drop(memory);
    no_deferred(&ctx)
}

fn vulkan_buffer_is_computed_on_between_timeline_signals() -> TestResult {
    let (device, ctx, stream) = device_zero()?;
    let vk = vulkan_for(&device)?;
    let n = 1 << 16;
    let buffer = vk.exportable_buffer((n * 4) as u64)?;
    let timeline = vk.timeline_semaphore(0)?;
    let memory = import_buffer(&vk, &ctx, &buffer)?;
    let semaphore = import_semaphore(&vk, &ctx, &timeline)?;
    ensure_eq!(semaphore.kind(), SemaphoreKind::Timeline);
    // SAFETY: Vulkan writes the buffer only before value 1 and reads it after value 2.
    let mut y = unsafe { memory.map_buffer::<f32>(0, n, &stream)? };
    let xs: Vec<f32> = (0..n).map(|i| (i % 977) as f32).collect();
    let x = DeviceBuffer::from_slice(&stream, &xs)?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let saxpy = module.function("saxpy")?;

    // CUDA's work waits for value 1, then computes y = 3x + y and sets value 2.
    semaphore.wait(&stream, WaitParams::value(1))?;
    let (count, a) = (n as u32, 3.0f32);
    // SAFETY: saxpy takes (u32 n, f32 a, const f32* x, f32* y); x and y hold n floats.
    unsafe { saxpy.launch(&stream, &LaunchConfig::for_elements(count, 256), (&count, &a, &x, &mut y))? };
    semaphore.signal(&stream, SignalParams::value(2))?;
    ensure!(!stream.query()?, "the stream ran ahead of the semaphore");
    ensure_eq!(vk.semaphore_value(&timeline)?, 0, "CUDA signalled before its wait was satisfied");

    // Vulkan writes y and signals 1 on its queue; it then waits for 2 on the GPU and reads y.
    let ys: Vec<f32> = (0..n).map(|i| (i % 13) as f32 - 6.0).collect();
    vk.write_buffer_then_signal(&buffer, bytemuck::cast_slice(&ys), Some((&timeline, 1)))?;
    let bytes = vk.read_buffer_after(&buffer, Some((&timeline, 2)), None)?;
    let got: &[f32] = bytemuck::try_cast_slice(&bytes[..n * 4]).map_err(|e| e.to_string())?;
    let wrong = (0..n).find(|&i| got[i] != 3.0 * xs[i] + ys[i]);
    ensure!(wrong.is_none(), "element {wrong:?}: Vulkan read {:?}", wrong.map(|i| got[i]));
    vk.wait_on_host(&timeline, 2, Duration::from_secs(5))?;
    ensure_eq!(vk.semaphore_value(&timeline)?, 2);
    stream.synchronize()?;
    drop((y, memory, semaphore));
    no_deferred(&ctx)
}

fn vulkan_binary_semaphore_orders_a_read() -> TestResult {
    let (device, ctx, stream) = device_zero()?;
    let vk = vulkan_for(&device)?;
    let n = 4096;
    let buffer = vk.exportable_buffer((n * 4) as u64)?;
    let binary = vk.binary_semaphore()?;
    let memory = import_buffer(&vk, &ctx, &buffer)?;
    let semaphore = import_semaphore(&vk, &ctx, &binary)?;
    ensure_eq!(semaphore.kind(), SemaphoreKind::Binary);
    // SAFETY: Vulkan reads the buffer only after the semaphore's signal.
    let mut y = unsafe { memory.map_buffer::<u32>(0, n, &stream)? };
    y.view_mut().memset_d32_async(0x5eed_f00d, &stream)?;
    signal_all(&stream, &[(&semaphore, SignalParams::new())])?;
    let bytes = vk.read_buffer_after(&buffer, Some((&binary, 0)), None)?;
    let got: &[u32] = bytemuck::try_cast_slice(&bytes[..n * 4]).map_err(|e| e.to_string())?;
    ensure!(got.iter().all(|&v| v == 0x5eed_f00d), "Vulkan read before CUDA's memset: {:#x}", got[0]);
    stream.synchronize()?;
    drop((y, memory, semaphore));
    no_deferred(&ctx)
}

fn vulkan_image_maps_as_a_mipmapped_array() -> TestResult {
    let (device, ctx, stream) = device_zero()?;
    let vk = vulkan_for(&device)?;
    let (width, height, levels) = (64u32, 32u32, 2u32);
    let image = vk.exportable_image(width, height, levels)?;
    let timeline = vk.timeline_semaphore(0)?;
    let memory = ExternalMemory::import(
        &ctx,
        MemoryHandle::OpaqueFd(vk.export_image_fd(&image)?),
        image.allocation_size(),
        ExternalMemoryFlags::DEDICATED,
    )?;
    let semaphore = import_semaphore(&vk, &ctx, &timeline)?;
    let descriptor = ArrayDescriptor {
        width: width as usize,
        height: height as usize,
        depth: 0,
        format: sys::CUarray_format::CU_AD_FORMAT_FLOAT,
        num_channels: 1,
        flags: ArrayFlags::SURFACE_LDST,
    };
    // SAFETY: Vulkan reads the image only after the semaphore's value 1.
    let mut array = unsafe { memory.map_mipmapped_array(0, &descriptor, levels)? };
    ensure_eq!(array.levels(), levels);
    let level0: Vec<f32> = (0..width * height).map(|i| i as f32 * 0.5).collect();
    let level1: Vec<f32> = (0..(width / 2) * (height / 2)).map(|i| -(i as f32)).collect();
    array.level(0)?.copy_from_host(&level0)?;
    array.level(1)?.copy_from_host(&level1)?;
    let level = array.level(1)?.descriptor()?;
    ensure_eq!((level.width, level.height), ((width / 2) as usize, (height / 2) as usize));
    semaphore.signal(&stream, SignalParams::value(1))?;
    let got0 = vk.read_image_after(&image, 0, Some((&timeline, 1)))?;
    let got1 = vk.read_image_after(&image, 1, Some((&timeline, 1)))?;
    ensure!(got0 == level0, "level 0 as Vulkan reads it differs (first {:?})", got0.first());
    ensure!(got1 == level1, "level 1 as Vulkan reads it differs (first {:?})", got1.first());
    // Mapping with no levels is refused before the driver.
    // SAFETY: nothing is mapped.
    let none = unsafe { memory.map_mipmapped_array(0, &descriptor, 0) };
    ensure!(matches!(none, Err(Error::InvalidArgument { .. })), "{none:?}");
    stream.synchronize()?;
    drop((array, memory, semaphore));
    no_deferred(&ctx)
}

fn vulkan_size_larger_than_the_object_is_refused() -> TestResult {
    let (device, ctx, stream) = device_zero()?;
    let vk = vulkan_for(&device)?;
    let buffer = vk.exportable_buffer(1 << 20)?;
    let real = buffer.allocation_size();
    let too_big = real * 4;
    let imported = ExternalMemory::import(
        &ctx,
        MemoryHandle::OpaqueFd(vk.export_memory_fd(&buffer)?),
        too_big,
        ExternalMemoryFlags::DEDICATED,
    );
    match imported {
        Err(refused) => {
            let (error, handle) = refused.into_parts();
            ensure!(matches!(error, Error::Driver { .. }), "{error}");
            ensure!(
                matches!(&handle, MemoryHandle::OpaqueFd(fd) if is_open(fd)),
                "the descriptor came back closed"
            );
        }
        Ok(memory) => {
            // The driver took the size on trust: the bytes past the object cannot be mapped.
            // SAFETY: Vulkan does not touch the buffer.
            let past = unsafe { memory.map_buffer::<u8>(real, real as usize, &stream) };
            ensure!(
                matches!(past, Err(Error::Driver { call: "cuExternalMemoryGetMappedBuffer", .. })),
                "{too_big} bytes of a {real}-byte object were imported, and its bytes past {real} mapped: {:?}",
                past.map(|b| b.len())
            );
        }
    }
    // The right size imports and maps.
    let memory = import_buffer(&vk, &ctx, &buffer)?;
    // SAFETY: Vulkan does not touch the buffer.
    let mut view = unsafe { memory.map_buffer::<u8>(0, 1 << 20, &stream)? };
    view.view_mut().memset_d8(7)?;
    ensure!(view.to_vec()?.iter().all(|&b| b == 7), "the imported buffer does not hold what was written");
    still_usable(&stream)?;
    drop((view, memory));
    no_deferred(&ctx)
}

fn semaphore_parameters_must_fit_the_kind() -> TestResult {
    let (device, ctx, stream) = device_zero()?;
    let vk = vulkan_for(&device)?;
    let binary = vk.binary_semaphore()?;
    let semaphore = import_semaphore(&vk, &ctx, &binary)?;
    let with_value = semaphore.signal(&stream, SignalParams::value(3));
    let message = match with_value {
        Err(Error::InvalidArgument { message, .. }) => message,
        other => return Err(format!("a value for a binary semaphore: {other:?}").into()),
    };
    ensure!(message.contains("use new()"), "{message}");
    let keyed = semaphore.wait(&stream, WaitParams::keyed_mutex(1, 10));
    ensure!(matches!(keyed, Err(Error::InvalidArgument { .. })), "{keyed:?}");
    ensure!(stream.query()?, "a refused signal or wait reached the stream");
    still_usable(&stream)?;
    drop(semaphore);
    no_deferred(&ctx)
}

/// A per-thread default stream made on one thread and used on another names the other
/// thread's stream there; the semaphore's drop, which waits for the streams it was used on,
/// could not wait for that one, so the signal and the wait are refused before any call.
fn semaphore_refuses_another_threads_per_thread_stream() -> TestResult {
    let (device, ctx, _stream) = device_zero()?;
    let vk = vulkan_for(&device)?;
    let timeline = vk.timeline_semaphore(0)?;
    let semaphore = import_semaphore(&vk, &ctx, &timeline)?;
    let theirs = std::thread::scope(|s| s.spawn(|| Stream::per_thread(&ctx)).join())
        .map_err(|_| "the thread making its per-thread stream panicked")?;
    let signal = semaphore.signal(&theirs, SignalParams::value(1));
    ensure!(
        matches!(signal, Err(Error::InvalidArgument { .. })),
        "signal on another thread's stream: {signal:?}"
    );
    let wait = semaphore.wait(&theirs, WaitParams::value(0));
    ensure!(matches!(wait, Err(Error::InvalidArgument { .. })), "wait on another thread's stream: {wait:?}");
    // This thread's own per-thread stream is accepted.
    let mine = Stream::per_thread(&ctx);
    semaphore.signal(&mine, SignalParams::value(1))?;
    mine.synchronize()?;
    ensure_eq!(vk.semaphore_value(&timeline)?, 1);
    drop(semaphore);
    no_deferred(&ctx)
}

fn vulkan_timeline_is_waited_on_and_signalled_by_a_graph() -> TestResult {
    let (device, ctx, stream) = device_zero()?;
    let vk = vulkan_for(&device)?;
    let timeline = vk.timeline_semaphore(0)?;
    let semaphore = Arc::new(import_semaphore(&vk, &ctx, &timeline)?);
    // Parameters of another kind are refused; a timeline signal without a value sets 0.
    {
        let graph = Graph::new(&ctx)?;
        let zero = graph.add_external_signal_node(&[], &[(&semaphore, SignalParams::new())]);
        ensure!(zero.is_ok(), "a timeline signal without a value (value 0) was refused: {zero:?}");
        let bad = graph.add_external_wait_node(&[], &[(&semaphore, WaitParams::keyed_mutex(0, 1))]);
        ensure!(
            matches!(bad, Err(Error::InvalidArgument { .. })),
            "a keyed-mutex wait on a timeline: {bad:?}"
        );
        let none = graph.add_external_wait_node(&[], &[]);
        ensure!(matches!(none, Err(Error::InvalidArgument { .. })), "a node of no semaphores: {none:?}");
    }
    // A launch waits for Vulkan's value 1 and answers with 2.
    let graph = Graph::new(&ctx)?;
    let wait = graph.add_external_wait_node(&[], &[(&semaphore, WaitParams::value(1))])?;
    graph.add_external_signal_node(&[wait], &[(&semaphore, SignalParams::value(2))])?;
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    drop(graph);
    exec.launch(&stream)?;
    std::thread::sleep(Duration::from_millis(20));
    ensure_eq!(vk.semaphore_value(&timeline)?, 0, "the graph signalled before its wait was satisfied");
    vk.signal_on_host(&timeline, 1)?;
    vk.wait_on_host(&timeline, 2, Duration::from_secs(5))?;
    stream.synchronize()?;
    drop(exec);
    // The graph kept the semaphore alive; this is the last handle.
    ensure_eq!(Arc::strong_count(&semaphore), 1);
    drop(semaphore);
    no_deferred(&ctx)
}
