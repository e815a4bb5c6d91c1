//! Soundness regressions (see the parent module): graphs (host functions under capture,
//! keep-alive cycles and growth) and interop (external memory and semaphores released with a
//! deferred error pending, graphics mappings unmapped with one pending, read-only graphics
//! resources).
//!
//! The tests that leave a deferred error make a context of their own, so that no other test
//! of the binary (which share device 0's primary context) reads or consumes it.

#[path = "../peers/egl.rs"]
mod egl;
#[path = "../peers/vulkan.rs"]
mod vulkan;

use cuda_tests::{Test, TestResult, device_zero, ensure, ensure_eq, gpu, gpu_needing, no_deferred};
use cuhost::graph::{CaptureMode, Graph, GraphSlice, InstantiateFlags};
use cuhost::interop::external::{
    ExternalMemory, ExternalMemoryFlags, ExternalSemaphore, MemoryHandle, SemaphoreHandle, WaitParams,
};
use cuhost::interop::graphics::{GlImageTarget, GraphicsResource, MapFlags, RegisterFlags, map_all};
use cuhost::vmm::{AllocationProperties, Granularity, HandleTypes, PhysicalMemory};
use cuhost::{Context, ContextFlags, Device, DeviceBuffer, Error, Event, EventFlags, Stream, StreamFlags};
use cuhost_driver_sys as sys;
use egl::Gl;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vulkan::Vulkan;

/// The tests of this module.
pub const TESTS: &[Test] = &[
    gpu("f14_host_func_on_a_capturing_stream_is_refused", f14_host_func_on_a_capturing_stream_is_refused),
    gpu(
        "g6_graphs_made_children_of_each_other_free_their_buffers",
        g6_graphs_made_children_of_each_other_free_their_buffers,
    ),
    gpu("g6_exec_setters_let_replaced_buffers_go", g6_exec_setters_let_replaced_buffers_go),
    gpu("g2_external_mapping_waits_with_a_deferred_error", g2_external_mapping_waits_with_a_deferred_error),
    gpu_needing(
        "g2_semaphore_drop_waits_with_a_deferred_error",
        vulkan_present,
        g2_semaphore_drop_waits_with_a_deferred_error,
    ),
    gpu_needing(
        "f17_unmap_with_a_deferred_error_unmaps",
        egl_present,
        f17_unmap_with_a_deferred_error_unmaps,
    ),
    gpu_needing(
        "g5_read_only_resources_refuse_writable_access",
        egl_present,
        g5_read_only_resources_refuse_writable_access,
    ),
    gpu_needing(
        "g8_unmap_waits_for_work_on_another_stream",
        egl_present,
        g8_unmap_waits_for_work_on_another_stream,
    ),
];

fn vulkan_present() -> Result<(), String> {
    let device = Device::get(0).map_err(|e| e.to_string())?;
    Vulkan::new(device.uuid().map_err(|e| e.to_string())?.0).map(drop)
}

fn egl_present() -> Result<(), String> {
    Gl::new(0).map(drop)
}

/// A context of its own on device 0, bound to this thread, and a stream in it.
fn own_context() -> Result<(Device, Context, Stream), Error> {
    let device = Device::get(0)?;
    let ctx = Context::create(&device, ContextFlags::empty())?;
    ctx.bind_to_thread()?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    Ok((device, ctx, stream))
}

/// Leaves a deferred error in `ctx`: a host function that panics on a stream of its own, and
/// a wait until the panic is kept.
// The panic is the point: it is caught and kept as `Error::CallbackPanicked`.
#[allow(clippy::panic)]
fn defer_a_panic(ctx: &Context) -> TestResult {
    let side = Stream::new(ctx, StreamFlags::NON_BLOCKING)?;
    side.launch_host_func(|| panic!("a panic kept as a deferred error"))?;
    let start = Instant::now();
    while ctx.deferred_error().is_none() {
        ensure!(start.elapsed() < Duration::from_secs(10), "the panicking host function never ran");
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// Fails unless the one deferred error left in `ctx` is the panic of [`defer_a_panic`]: the
/// release paths neither consumed it nor added their own.
fn only_the_panic_is_deferred(ctx: &Context) -> TestResult {
    let deferred = ctx.take_deferred_errors();
    ensure!(
        matches!(&deferred[..], [Error::CallbackPanicked { .. }]),
        "the deferred errors are {deferred:?}, not the one panic"
    );
    Ok(())
}

// F14. On fa5afb9, `launch_host_func` on a capturing stream was captured as a host node whose
// trampoline freed the boxed `FnOnce` at the first graph launch and again at the second (a
// double free, then a call of a moved-from closure). It is now refused with a typed error, and
// the capture ends cleanly.
fn f14_host_func_on_a_capturing_stream_is_refused() -> TestResult {
    let (_, ctx, s) = device_zero()?;
    let side = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let capture = s.begin_capture(CaptureMode::ThreadLocal)?;
    let refused = s.launch_host_func(|| {});
    ensure!(
        matches!(&refused, Err(Error::InvalidArgument { message, .. }) if message.contains("add_host_node")),
        "a host function on the capturing stream: {refused:?}"
    );
    // A stream that joins the capture through an event is capturing too.
    let fork = Event::new(&ctx, EventFlags::DISABLE_TIMING)?;
    fork.record(&s)?;
    side.wait_event(&fork)?;
    let refused = side.launch_host_func(|| {});
    ensure!(matches!(refused, Err(Error::InvalidArgument { .. })), "on the joined stream: {refused:?}");
    let join = Event::new(&ctx, EventFlags::DISABLE_TIMING)?;
    join.record(&side)?;
    s.wait_event(&join)?;
    let graph = capture.end()?;
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    exec.launch(&s)?;
    exec.launch(&s)?;
    s.synchronize()?;
    // Outside a capture the call runs as before.
    let (tx, rx) = std::sync::mpsc::channel();
    s.launch_host_func(move || tx.send(1u8).unwrap_or(()))?;
    s.synchronize()?;
    ensure_eq!(rx.try_recv().ok(), Some(1));
    no_deferred(&ctx)
}

// G6 (a). On fa5afb9, `try_clone` and `add_child_graph_node` put the other graph's live
// keep-alive list on this one's, so two graphs made children of each other formed an `Arc`
// cycle and the buffer they kept was never freed. They now hold snapshots.
fn g6_graphs_made_children_of_each_other_free_their_buffers() -> TestResult {
    let (_, ctx, s) = device_zero()?;
    let big = Arc::new(DeviceBuffer::<u32>::zeroed(&s, 1 << 20)?);
    s.synchronize()?;
    let weak = Arc::downgrade(&big);
    let a = Graph::new(&ctx)?;
    a.add_memset_node(&[], &GraphSlice::whole(&big), 9u32)?;
    let b = a.try_clone()?;
    a.add_child_graph_node(&[], &b)?;
    b.add_child_graph_node(&[], &a)?;
    drop(big);
    // The graphs still run on what they keep.
    let exec = b.instantiate(InstantiateFlags::empty())?;
    exec.launch(&s)?;
    s.synchronize()?;
    let kept = weak.upgrade().ok_or("the graphs let go of the buffer while they live")?;
    ensure!(kept.to_vec()?.iter().all(|&v| v == 9), "the graph did not set the buffer");
    drop(kept);
    drop((exec, a, b));
    ensure!(weak.upgrade().is_none(), "the buffer outlived both graphs and their executable graph");
    no_deferred(&ctx)
}

// G6 (b). On fa5afb9, every `GraphExec` setter pushed the new value on the executable graph's
// list and never let go of the old one: a loop re-pointing a node at fresh buffers kept them
// all until the executable graph was dropped. A replaced buffer is now let go of once a later
// launch is complete (checked at the next launch or setter).
fn g6_exec_setters_let_replaced_buffers_go() -> TestResult {
    let (_, ctx, s) = device_zero()?;
    let n = 1 << 16;
    let first = Arc::new(DeviceBuffer::<u32>::zeroed(&s, n)?);
    s.synchronize()?;
    let graph = Graph::new(&ctx)?;
    let node = graph.add_memset_node(&[], &GraphSlice::whole(&first), 1u32)?;
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    let mut weaks = Vec::new();
    for i in 0..4u32 {
        let buffer = Arc::new(DeviceBuffer::<u32>::zeroed(&s, n)?);
        s.synchronize()?;
        weaks.push(Arc::downgrade(&buffer));
        exec.set_memset_node(node, &GraphSlice::whole(&buffer), 10 + i)?;
        exec.launch(&s)?;
    }
    s.synchronize()?;
    // The next launch finds the earlier launches complete and lets their buffers go.
    exec.launch(&s)?;
    s.synchronize()?;
    let alive: Vec<bool> = weaks.iter().map(|w| w.upgrade().is_some()).collect();
    ensure_eq!(alive, vec![false, false, false, true], "which replaced buffers are still kept");
    let last = weaks[3].upgrade().ok_or("the current buffer is gone")?;
    ensure!(last.to_vec()?.iter().all(|&v| v == 13), "the last setter's memset did not run");
    drop(last);
    // Replaced before any launch since it was given: let go of at once.
    let unused = Arc::new(DeviceBuffer::<u32>::zeroed(&s, n)?);
    s.synchronize()?;
    let unused_weak = Arc::downgrade(&unused);
    exec.set_memset_node(node, &GraphSlice::whole(&unused), 1)?;
    drop(unused);
    exec.set_memset_node(node, &GraphSlice::whole(&first), 1)?;
    ensure!(unused_weak.upgrade().is_none(), "a value no launch used is still kept");
    drop(exec);
    ensure!(weaks[3].upgrade().is_none(), "the executable graph's drop kept a buffer");
    no_deferred(&ctx)
}

// G2, external memory. On fa5afb9, a pending deferred error made the mapping's `deallocate`
// return at `enter()?` without waiting or freeing; the last handle of the imported object then
// destroyed it with work still queued on the mapping. The release now waits first.
fn g2_external_mapping_waits_with_a_deferred_error() -> TestResult {
    let (device, ctx, stream) = own_context()?;
    let props = AllocationProperties::device(device).with_handle_types(HandleTypes::POSIX_FILE_DESCRIPTOR);
    let size = props.granularity(Granularity::Recommended)?;
    let physical = PhysicalMemory::new(&ctx, size, &props)?;
    let memory = ExternalMemory::import(
        &ctx,
        MemoryHandle::OpaqueFd(physical.export_fd()?),
        size as u64,
        ExternalMemoryFlags::empty(),
    )?;
    // SAFETY: nothing else uses the allocation.
    let mut buffer = unsafe { memory.map_buffer::<u32>(0, size / 4, &stream)? };
    // Work that holds the stream for a while, then writes the mapping.
    stream.launch_host_func(|| std::thread::sleep(Duration::from_millis(300)))?;
    buffer.view_mut().memset_d32_async(7, &stream)?;
    defer_a_panic(&ctx)?;
    drop(memory); // the mapping still holds the object
    drop(buffer); // frees the mapping, then destroys the object
    // SAFETY: a live stream; the raw query leaves the deferred error alone.
    let status = unsafe { sys::cuStreamQuery(stream.as_raw()) };
    ensure_eq!(status, sys::CUresult::CUDA_SUCCESS, "the mapping was released under queued work");
    only_the_panic_is_deferred(&ctx)
}

// G2, semaphores. On fa5afb9, `ExternalSemaphore::drop` waited through `Stream::synchronize`,
// which returned the pending deferred error at once; the semaphore was then destroyed with a
// wait still outstanding, which the driver forbids. The drop now waits for the wait.
fn g2_semaphore_drop_waits_with_a_deferred_error() -> TestResult {
    let (device, ctx, stream) = own_context()?;
    let vk = Vulkan::new(device.uuid()?.0)?;
    let timeline = vk.timeline_semaphore(0)?;
    let handle = SemaphoreHandle::TimelineFd(vk.export_semaphore_fd(&timeline)?);
    let semaphore = ExternalSemaphore::import(&ctx, handle)?;
    semaphore.wait(&stream, WaitParams::value(1))?; // outstanding until Vulkan signals 1
    defer_a_panic(&ctx)?;
    let (tx, rx) = std::sync::mpsc::channel();
    let dropper = std::thread::spawn(move || {
        drop(semaphore);
        tx.send(()).unwrap_or(());
    });
    let early = rx.recv_timeout(Duration::from_millis(300));
    vk.signal_on_host(&timeline, 1)?;
    dropper.join().map_err(|_| "the dropping thread panicked")?;
    ensure!(early.is_err(), "the semaphore was destroyed while a wait on it was outstanding");
    raw_sync(&stream)?;
    only_the_panic_is_deferred(&ctx)
}

/// Waits for `stream` with the raw call, which leaves the context's deferred errors alone.
fn raw_sync(stream: &Stream) -> TestResult {
    // SAFETY: a live stream.
    cuda_tests::drv("cuStreamSynchronize", unsafe { sys::cuStreamSynchronize(stream.as_raw()) })
}

// F17. On fa5afb9, `Mapped::unmap` set its "unmapped" flag before `enter()?`: with a deferred
// error pending it returned that error, never unmapped, and its drop skipped the unmap too, so
// the next `map` was `CUDA_ERROR_ALREADY_MAPPED`. The unmap now always happens.
fn f17_unmap_with_a_deferred_error_unmaps() -> TestResult {
    let gl = Gl::new(0)?;
    let (_, ctx, stream) = own_context()?;
    let name = gl.create_buffer(&[0u8; 256])?;
    let outcome = (|| -> TestResult {
        let mut resource = GraphicsResource::gl_buffer(&ctx, name, RegisterFlags::empty())?;
        let mapped = resource.map(&stream)?;
        defer_a_panic(&ctx)?;
        mapped.unmap()?;
        // The unmap neither reported nor consumed the panic; mapping again (a call that does
        // report it) works once it has been taken.
        only_the_panic_is_deferred(&ctx)?;
        let again = resource.map(&stream);
        ensure!(again.is_ok(), "the resource stayed mapped: {:?}", again.map(drop));
        drop(again);
        drop(resource);
        raw_sync(&stream)
    })();
    gl.delete_buffer(name);
    outcome?;
    cuda_tests::no_deferred(&ctx)
}

// G5. On fa5afb9, a resource registered READ_ONLY or mapped with `MapFlags::ReadOnly` still
// gave `buffer_mut` views (and, through `BorrowedArray: DerefMut`, writable arrays), so safe
// code wrote memory the driver was promised CUDA would not write. The writable accessors now
// refuse such resources with a typed error; the readable ones still work.
fn g5_read_only_resources_refuse_writable_access() -> TestResult {
    let gl = Gl::new(0)?;
    let (_, ctx, stream) = device_zero()?;
    let buffer = gl.create_buffer(&[0u8; 256])?;
    let texture = gl.create_texture_r32f(8, 8, 1, &[1.5; 64])?;
    let outcome = (|| -> TestResult {
        let refused = |what: &str, r: Result<(), Error>| -> TestResult {
            ensure!(matches!(r, Err(Error::InvalidArgument { .. })), "{what} on a read-only resource: {r:?}");
            Ok(())
        };
        let mut ro_buffer = GraphicsResource::gl_buffer(&ctx, buffer, RegisterFlags::READ_ONLY)?;
        let mut ro_image =
            GraphicsResource::gl_image(&ctx, texture, GlImageTarget::Texture2D, RegisterFlags::READ_ONLY)?;
        ensure!(!ro_buffer.is_writable() && !ro_image.is_writable(), "READ_ONLY registrations are writable");
        {
            let mut mapped = map_all([&mut ro_buffer, &mut ro_image], &stream)?;
            ensure!(!mapped.is_writable(0) && !mapped.is_writable(1), "the mapping forgot the flags");
            refused("buffer_mut", mapped.buffer_mut::<u32>(0).map(drop))?;
            refused("array_mut", mapped.array_mut(1, 0, 0).map(drop))?;
            refused("mipmapped_array", mapped.mipmapped_array(1, 1).map(drop))?;
            // Reading still works.
            ensure_eq!(mapped.buffer::<u32>(0)?.to_vec()?, vec![0u32; 64]);
            mapped.stream().synchronize()?;
            let mut seen = vec![0f32; 64];
            mapped.array(1, 0, 0)?.copy_to_host(&mut seen)?;
            ensure!(seen.iter().all(|&v| v == 1.5), "the read-only level reads {seen:?}");
        }
        drop((ro_buffer, ro_image));
        // Registered for writing, mapped read-only: refused until the flags say otherwise.
        let mut resource = GraphicsResource::gl_buffer(&ctx, buffer, RegisterFlags::empty())?;
        resource.set_map_flags(MapFlags::ReadOnly)?;
        {
            let mut mapped = resource.map(&stream)?;
            refused("buffer_mut after set_map_flags(ReadOnly)", mapped.buffer_mut::<u32>(0).map(drop))?;
        }
        resource.set_map_flags(MapFlags::ReadWrite)?;
        {
            let mut mapped = resource.map(&stream)?;
            mapped.buffer_mut::<u32>(0)?.memset_d32_async(3, &stream)?;
        }
        stream.synchronize()?;
        drop(resource);
        let bytes = gl.read_buffer(buffer, 256)?;
        ensure!(bytes.chunks(4).all(|w| w == [3, 0, 0, 0]), "GL reads {:?}", &bytes[..8]);
        Ok(())
    })();
    gl.delete_buffer(buffer);
    gl.delete_texture(texture);
    outcome?;
    no_deferred(&ctx)
}

// G8. On fa5afb9, a graphics mapping was unmapped in its own stream's order only: a memset
// queued through a view of it on another stream could still run after OpenGL had the buffer
// back. The unmap is now ordered after the streams its views were used on: the memset, held
// back on a second stream, has landed by the time OpenGL reads the buffer.
fn g8_unmap_waits_for_work_on_another_stream() -> TestResult {
    const WORDS: usize = 1 << 16;
    let gl = Gl::new(0)?;
    let (_, ctx, stream) = own_context()?;
    let late = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let name = gl.create_buffer(&vec![0u8; WORDS * 4])?;
    let outcome = (|| -> TestResult {
        let mut resource = GraphicsResource::gl_buffer(&ctx, name, RegisterFlags::empty())?;
        {
            let mut mapped = resource.map(&stream)?;
            late.launch_host_func(|| std::thread::sleep(Duration::from_millis(300)))?;
            mapped.buffer_mut::<u32>(0)?.memset_d32_async(7, &late)?;
            mapped.unmap()?;
        }
        gl.make_current()?;
        let seen = gl.read_buffer(name, WORDS * 4)?;
        let words: Vec<u32> =
            seen.chunks_exact(4).map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect();
        let wrong = words.iter().filter(|&&w| w != 7).count();
        ensure_eq!(wrong, 0, "words OpenGL read before the memset queued through the mapping had run");
        drop(resource);
        raw_sync(&late)
    })();
    gl.delete_buffer(name);
    outcome?;
    no_deferred(&ctx)
}
