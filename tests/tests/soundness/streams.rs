//! The cross-stream rule (review findings F5, F6, F7, F9, F10): work queued on a buffer's memory
//! on another stream than its own, or inside an NCCL group, keeps the memory from reuse until
//! it has run, with nothing declared by hand.
//!
//! Each test has the shape a user hits: a stream held back by a sleeping host function, so that
//! the work queued behind it runs late every time; the buffer dropped meanwhile; a new buffer
//! of the same size taken on the owner's stream (the pool would hand back the same block: the
//! first test shows it does) and filled; then, once the late work has run, the new buffer must
//! still hold what was written into it. Before the rule, the late work landed in the new buffer.

use super::kernels;
use cuda_tests::{
    Test, TestResult, device_zero, ensure, ensure_eq, gpu, hold, multi_gpu, no_deferred, still_usable,
};
use cuhost::graph::{CaptureMode, Graph, GraphSlice, InstantiateFlags};
use cuhost::mempool::Access;
use cuhost::module::Module;
use cuhost::nccl::{Communicator, Group, ReduceOp};
use cuhost::vmm::{
    AccessGrant, AddressRange, AllocationProperties, Granularity, MappedSpan, PhysicalMemory, VmmAllocator,
};
use cuhost::{
    Context, ContextFlags, Device, DeviceBuffer, Error, Event, EventFlags, LaunchConfig, PinnedBuffer,
    Stream, StreamFlags,
};
use std::sync::Arc;
use std::time::Duration;

/// The tests of this module.
pub const TESTS: &[Test] = &[
    gpu("cross_stream_copy_into_a_dropped_buffer_spares_its_successor", cross_stream_copy),
    gpu("cross_stream_memset_into_a_dropped_buffer_spares_its_successor", cross_stream_memset),
    gpu("cross_stream_kernel_argument_spares_the_successor_buffer", cross_stream_kernel),
    gpu("runtime_memset_async_on_another_stream_spares_the_successor", cross_stream_runtime_memset),
    gpu("nccl_group_recv_into_a_buffer_dropped_inside_the_group", nccl_group_one_rank),
    gpu("nccl_group_recv_into_a_span_handed_back_and_dropped_inside_the_group", nccl_group_span_one_rank),
    multi_gpu("nccl_group_all_reduce_into_buffers_dropped_inside_the_group", 2, nccl_group_two_ranks),
    gpu("vmm_mapping_drop_waits_for_work_queued_through_its_views", mapping_drop_waits),
    gpu("vmm_allocator_release_waits_even_with_a_deferred_error_pending", vmm_release_with_deferred_error),
    gpu("default_streams_of_two_contexts_are_different_streams", default_streams_differ_by_context),
    gpu("a_per_thread_stream_is_refused_on_another_thread", per_thread_stream_on_another_thread),
    gpu("graph_memset_on_another_stream_spares_the_successor", graph_launch_on_another_stream),
    gpu("peer_copy_on_a_stream_of_another_context_spares_the_successor", cross_context_copy),
    gpu("a_buffer_moved_to_another_stream_is_freed_after_it", moved_buffer),
    gpu("an_allocator_refuses_a_default_stream_of_another_context", allocator_refuses_foreign_default_stream),
    gpu("pinned_buffers_captured_on_three_streams_replay_100_times", pinned_buffers_in_a_replayed_graph),
];

/// Elements of the buffers: 64 MiB of `u32`, so that a late copy is plainly visible.
const N: usize = 1 << 24;

/// The pool hands a dropped block straight back on its stream (what makes a late write land in
/// the next buffer); returns that block's address.
fn pool_reuses_blocks(stream: &Stream) -> Result<u64, cuda_tests::Failed> {
    let first = DeviceBuffer::<u32>::new(stream, N)?;
    let address = first.as_raw();
    drop(first);
    let again = DeviceBuffer::<u32>::new(stream, N)?;
    ensure_eq!(again.as_raw(), address, "the pool did not hand the same block back");
    Ok(address)
}

/// Takes a new buffer of `N` sevens on `owner`, waits for `late` (where work on the dropped
/// buffer was queued), and checks that the sevens are intact.
fn successor_keeps_its_contents(owner: &Stream, late: &Stream) -> TestResult {
    let successor = DeviceBuffer::<u32>::from_slice(owner, &vec![7; N])?;
    late.synchronize()?;
    let seen = successor.to_vec()?;
    let wrong = seen.iter().filter(|&&v| v != 7).count();
    ensure_eq!(wrong, 0, "words of the new buffer overwritten by work queued on the dropped one");
    Ok(())
}

/// The shape every test of the rule shares: `queue` queues work touching `target` (a buffer of
/// the owner's stream) on `late`, a stream held back; the buffer is dropped, and its successor
/// must keep its contents once the late work has run.
fn late_work_on_a_dropped_buffer(
    queue: impl FnOnce(&mut DeviceBuffer<u32>, &Stream) -> Result<(), cuda_tests::Failed>,
) -> TestResult {
    let (_device, ctx, owner) = device_zero()?;
    let late = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    pool_reuses_blocks(&owner)?;
    let mut target = DeviceBuffer::<u32>::new(&owner, N)?;
    hold(&late, 300)?;
    queue(&mut target, &late)?;
    drop(target);
    successor_keeps_its_contents(&owner, &late)?;
    no_deferred(&ctx)
}

fn cross_stream_copy() -> TestResult {
    late_work_on_a_dropped_buffer(|target, late| {
        let source = DeviceBuffer::<u32>::from_slice(target.stream(), &vec![5; N])?;
        target.view_mut().copy_from_device_async(&source.view(), late)?;
        ensure_eq!(target.recorded_streams().len(), 1, "the copy did not note its stream");
        Ok(())
    })
}

fn cross_stream_memset() -> TestResult {
    late_work_on_a_dropped_buffer(|target, late| Ok(target.slice_mut(..)?.memset_d32_async(9, late)?))
}

fn cross_stream_kernel() -> TestResult {
    late_work_on_a_dropped_buffer(|target, late| {
        let module = Module::from_ptx(target.context(), kernels::PTX)?;
        let saxpy = module.function("saxpy")?;
        let n = N as u32;
        let x = DeviceBuffer::<u32>::from_slice(target.stream(), &vec![1.0f32.to_bits(); N])?;
        // y = 1 * x + y on the words as floats, late: before the rule it changed the next
        // buffer's words.
        // SAFETY: saxpy(u32 n, f32 a, const f32* x, f32* y) over `n` 4-byte elements of both.
        unsafe { saxpy.launch(late, &LaunchConfig::for_elements(n, 256), (&n, &1.0f32, &x, &mut *target))? };
        Ok(())
    })
}

fn cross_stream_runtime_memset() -> TestResult {
    late_work_on_a_dropped_buffer(|target, late| {
        Ok(cuhost::runtime::memset_async::<u32, _>(target, 0xff, late)?)
    })
}

/// A buffer moved with `set_stream` to the stream its late work is queued on (its own stream
/// now, so nothing is noted): the release is ordered after that stream explicitly, so the
/// late memset never reaches the next buffer taken on the stream it was allocated on, whose
/// arena the block belongs to.
fn moved_buffer() -> TestResult {
    late_work_on_a_dropped_buffer(|target, late| {
        target.set_stream(late)?;
        target.view_mut().memset_d32_async(9, late)?;
        Ok(())
    })
}

/// One rank receiving from itself inside a group: NCCL queues the pair only when the group
/// ends, so the receive buffer, dropped inside the group, must not go back before then.
fn nccl_group_one_rank() -> TestResult {
    let device = Device::get(0)?;
    let comm = Communicator::init_all(&[device])?.pop().ok_or("no communicator")?;
    let stream = Stream::new(comm.context(), StreamFlags::NON_BLOCKING)?;
    pool_reuses_blocks(&stream)?;
    let source = DeviceBuffer::<u32>::from_slice(&stream, &vec![3; N])?;
    let group = Group::start()?;
    comm.send(&source, 0, &stream)?;
    {
        let mut target = DeviceBuffer::<u32>::new(&stream, N)?;
        comm.recv(&mut target, 0, &stream)?;
    }
    let successor = DeviceBuffer::<u32>::from_slice(&stream, &vec![7; N])?;
    group.end()?;
    stream.synchronize()?;
    let wrong = successor.to_vec()?.iter().filter(|&&v| v != 7).count();
    ensure_eq!(wrong, 0, "words of the new buffer written by the group's receive");
    no_deferred(comm.context())
}

/// A VMM span received into inside an NCCL group, handed back as its mappings and those
/// dropped, all before the group ends (and so before NCCL queues the receive): the mappings
/// carry the group over from the span, so they are unmapped only after the group has queued
/// the receive, in its stream's order, instead of leaving it to write unmapped memory.
fn nccl_group_span_one_rank() -> TestResult {
    let device = Device::get(0)?;
    let comm = Communicator::init_all(&[device])?.pop().ok_or("no communicator")?;
    let ctx = comm.context().clone();
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let props = AllocationProperties::device(device);
    let size = (N * 4).next_multiple_of(props.granularity(Granularity::Minimum)?);
    let range = AddressRange::reserve(&ctx, size, 0)?;
    let memory = PhysicalMemory::new(&ctx, size, &props)?;
    let mut span = MappedSpan::new(vec![range.map(0, &memory)?])?;
    span.set_access(&[AccessGrant::device(device, Access::ReadWrite)])?;
    let source = DeviceBuffer::<u32>::from_slice(&stream, &vec![3; N])?;
    stream.synchronize()?;
    let group = Group::start()?;
    comm.send(&source, 0, &stream)?;
    comm.recv(span.view_mut::<u32>(&stream)?.slice_mut(..N)?, 0, &stream)?;
    drop(span.into_mappings());
    group.end()?;
    // The receive wrote memory that was still mapped: no fault, and nothing kept.
    stream.synchronize()?;
    still_usable(&stream)?;
    no_deferred(&ctx)?;
    // The unmap is done: the range takes a new mapping of the same memory.
    drop(range.map(0, &memory)?);
    Ok(())
}

/// Two ranks driven from one thread: each rank's all-reduce buffer is dropped inside the group,
/// before NCCL has queued the all-reduce.
fn nccl_group_two_ranks() -> TestResult {
    let devices = [Device::get(0)?, Device::get(1)?];
    let comms = Communicator::init_all(&devices)?;
    let streams = comms
        .iter()
        .map(|c| Stream::new(c.context(), StreamFlags::NON_BLOCKING))
        .collect::<Result<Vec<_>, _>>()?;
    for s in &streams {
        pool_reuses_blocks(s)?;
    }
    let group = Group::start()?;
    for (comm, stream) in comms.iter().zip(&streams) {
        let mut buffer = DeviceBuffer::<u32>::from_slice(stream, &vec![1; N])?;
        comm.all_reduce_in_place(&mut buffer, ReduceOp::Sum, stream)?;
    }
    let successors = streams
        .iter()
        .map(|s| DeviceBuffer::<u32>::from_slice(s, &vec![7; N]))
        .collect::<Result<Vec<_>, _>>()?;
    group.end()?;
    for (successor, stream) in successors.iter().zip(&streams) {
        stream.synchronize()?;
        let wrong = successor.to_vec()?.iter().filter(|&&v| v != 7).count();
        ensure_eq!(wrong, 0, "words of a new buffer written by the group's all-reduce");
    }
    Ok(())
}

/// A memset queued through a mapping's view, late; the mapping dropped; other physical memory
/// mapped at the same addresses. Before the rule the memset landed in the new memory.
fn mapping_drop_waits() -> TestResult {
    let (device, ctx, owner) = device_zero()?;
    let late = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let props = AllocationProperties::device(device);
    let size = (N * 4).next_multiple_of(props.granularity(Granularity::Minimum)?);
    let grant = [AccessGrant::device(device, Access::ReadWrite)];
    let range = AddressRange::reserve(&ctx, size, 0)?;
    let (first, second) =
        (PhysicalMemory::new(&ctx, size, &props)?, PhysicalMemory::new(&ctx, size, &props)?);
    let mut mapping = range.map(0, &first)?;
    mapping.set_access(&grant)?;
    hold(&late, 300)?;
    mapping.view_mut::<u32>(&late)?.memset_d32_async(1, &late)?;
    drop(mapping);
    let mut again = range.map(0, &second)?;
    again.set_access(&grant)?;
    again.view_mut::<u32>(&owner)?.memset_d32(7)?;
    late.synchronize()?;
    let wrong = again.view::<u32>(&owner)?.to_vec()?.iter().filter(|&&v| v != 7).count();
    ensure_eq!(wrong, 0, "words of the memory mapped later written by the memset");
    no_deferred(&ctx)
}

/// A deferred error (a panicking host function) is pending while a VMM buffer with work in
/// flight is dropped: the release must still wait before it unmaps. Before, it unmapped under
/// the queued memsets and the context faulted (`CUDA_ERROR_ILLEGAL_ADDRESS`).
// The panic is the point: it is caught and kept as the context's deferred error.
#[allow(clippy::panic)]
fn vmm_release_with_deferred_error() -> TestResult {
    let (_device, ctx, stream) = device_zero()?;
    let other = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let allocator = Arc::new(VmmAllocator::new(&ctx)?);
    let mut buffer = DeviceBuffer::<u32>::new_in(&stream, N, allocator)?;
    hold(&stream, 300)?;
    for _ in 0..64 {
        buffer.view_mut().memset_d32_async(1, &stream)?;
    }
    other.launch_host_func(|| panic!("a host function that panics, for a deferred error"))?;
    while ctx.deferred_error().is_none() {
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(buffer);
    let deferred = ctx.take_deferred_errors();
    ensure!(
        deferred.iter().all(|e| matches!(e, Error::CallbackPanicked { .. })),
        "the release reported more than the panic: {deferred:?}"
    );
    stream.synchronize()?;
    still_usable(&stream)
}

/// `legacy(c1) == legacy(c2)` made the pinned-copy tracker and `record_stream` skip the wait
/// on the second context's stream (F5).
fn default_streams_differ_by_context() -> TestResult {
    let device = Device::get(0)?;
    let primary = Context::primary(&device)?;
    let created = Context::create(&device, ContextFlags::empty())?;
    ensure!(
        Stream::legacy(&primary) != Stream::legacy(&created),
        "legacy streams of two contexts compare equal"
    );
    ensure!(Stream::legacy(&primary) == Stream::legacy(&primary), "a legacy stream differs from itself");
    ensure!(
        Stream::per_thread(&primary) == Stream::per_thread(&primary),
        "a thread's per-thread stream differs from itself"
    );
    primary.bind_to_thread()?;
    let buffer = DeviceBuffer::<u32>::zeroed(&Stream::legacy(&primary), 16)?;
    let refused = buffer.record_stream(&Stream::legacy(&created));
    ensure!(
        matches!(refused, Err(Error::InvalidArgument { .. })),
        "the default stream of another context was accepted: {refused:?}"
    );
    Ok(())
}

/// A per-thread default stream names the stream of the thread that made it; elsewhere its
/// handle would name another stream, so work through it there is refused, and equality says so.
fn per_thread_stream_on_another_thread() -> TestResult {
    let (_device, ctx, _stream) = device_zero()?;
    let mine = Stream::per_thread(&ctx);
    let mut buffer = DeviceBuffer::<u32>::zeroed(&Stream::new(&ctx, StreamFlags::NON_BLOCKING)?, 16)?;
    let (theirs, refused) = std::thread::scope(|s| {
        s.spawn(|| {
            let theirs = Stream::per_thread(&ctx);
            let refused = buffer.view_mut().memset_d32_async(1, &mine);
            (theirs, refused)
        })
        .join()
        .map_err(|_| "the thread panicked")
    })?;
    ensure!(theirs != mine, "per-thread streams of two threads compare equal");
    ensure!(
        matches!(refused, Err(Error::InvalidArgument { .. })),
        "work through another thread's per-thread stream was queued: {refused:?}"
    );
    buffer.view_mut().memset_d32_async(2, &mine)?;
    mine.synchronize()?;
    ensure_eq!(buffer.to_vec()?, vec![2; 16]);
    Ok(())
}

/// A graph that sets a buffer, launched late on another stream; the graph, its executable and
/// the caller's handle dropped; a new buffer of the same size taken on the buffer's stream. The
/// graph holds the buffer and its executable waits for its context when dropped, so the memset
/// never reaches the new buffer.
fn graph_launch_on_another_stream() -> TestResult {
    let (_device, ctx, owner) = device_zero()?;
    let other = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    pool_reuses_blocks(&owner)?;
    let target = Arc::new(DeviceBuffer::<u32>::new(&owner, N)?);
    let graph = Graph::new(&ctx)?;
    graph.add_memset_node(&[], &GraphSlice::whole(&target), 9u32)?;
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    hold(&other, 300)?;
    exec.launch(&other)?;
    drop((target, graph, exec));
    successor_keeps_its_contents(&owner, &other)?;
    no_deferred(&ctx)
}

/// What a pinned buffer captured into a graph means (issue item 5): copies between pinned and
/// device buffers captured on three streams (fork and join through events); the graph
/// replayed 100 times, new inputs written between launches and every output read after its
/// launch. Before, reading the output failed (`cuEventSynchronize`: `CUDA_ERROR_INVALID_VALUE`,
/// the tracker waited on an event it had recorded during the capture), and where a read did
/// not fail it did not wait for the replay's DMA.
fn pinned_buffers_in_a_replayed_graph() -> TestResult {
    const LEN: usize = 1 << 22; // 16 MiB of f32: a copy that takes long enough to race
    let (_device, ctx, origin) = device_zero()?;
    let (b, c) =
        (Stream::new(&ctx, StreamFlags::NON_BLOCKING)?, Stream::new(&ctx, StreamFlags::NON_BLOCKING)?);
    let launcher = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let mut input = PinnedBuffer::<f32>::new(LEN)?;
    let mut output = PinnedBuffer::<f32>::new(LEN)?;
    input.as_mut_slice()?.fill(-1.0);
    let mut staged = DeviceBuffer::<f32>::zeroed(&origin, LEN)?;
    let mut copied = DeviceBuffer::<f32>::zeroed(&origin, LEN)?;
    origin.synchronize()?;
    let (fork, joined_b, joined_c) = (
        Event::new(&ctx, EventFlags::DISABLE_TIMING)?,
        Event::new(&ctx, EventFlags::DISABLE_TIMING)?,
        Event::new(&ctx, EventFlags::DISABLE_TIMING)?,
    );
    let capture = origin.begin_capture(CaptureMode::ThreadLocal)?;
    fork.record(&origin)?;
    b.wait_event(&fork)?;
    staged.copy_from_pinned_async(&input, &b)?; // host -> device on b
    joined_b.record(&b)?;
    c.wait_event(&joined_b)?;
    copied.view_mut().copy_from_device_async(&staged.view(), &c)?; // device -> device on c
    joined_c.record(&c)?;
    origin.wait_event(&joined_c)?;
    copied.copy_to_pinned_async(&mut output, &origin)?; // device -> host on the origin
    let graph = capture.end()?;
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    for i in 0..100u16 {
        let value = f32::from(i);
        // Waits for the previous launch, which reads `input`.
        input.as_mut_slice()?.fill(value);
        exec.launch(&launcher)?;
        // Waits for this launch, which writes `output`.
        let seen = output.as_slice()?;
        let wrong = seen.iter().filter(|&&v| v != value).count();
        ensure_eq!(wrong, 0, "replay {i}: elements of the output not from this replay");
    }
    drop((exec, graph));
    no_deferred(&ctx)
}

/// A copy out of a buffer of the primary context, queued late on a stream of a second context
/// of the same device (a peer copy between contexts), into a buffer of that context; the source
/// dropped; a new buffer taken on the source's stream. The pool cannot record its event on the
/// other context's stream, so the drop waits for that stream on the host: the copy reads the
/// fives it was given, and the new buffer keeps its sevens.
fn cross_context_copy() -> TestResult {
    let (device, primary, owner) = device_zero()?;
    pool_reuses_blocks(&owner)?;
    let source = DeviceBuffer::<u32>::from_slice(&owner, &vec![5; N])?;
    let second = Context::create(&device, ContextFlags::empty())?;
    let late = Stream::new(&second, StreamFlags::NON_BLOCKING)?;
    let mut target = DeviceBuffer::<u32>::zeroed(&late, N)?;
    late.synchronize()?;
    hold(&late, 300)?;
    target.view_mut().copy_from_device_async(&source.view(), &late)?;
    drop(source);
    primary.bind_to_thread()?;
    let successor = DeviceBuffer::<u32>::from_slice(&owner, &vec![7; N])?;
    late.synchronize()?;
    let wrong = successor.to_vec()?.iter().filter(|&&v| v != 7).count();
    ensure_eq!(wrong, 0, "words of the new buffer changed");
    let copied = target.to_vec()?.iter().filter(|&&v| v != 5).count();
    ensure_eq!(copied, 0, "the copy did not read the source it was given");
    no_deferred(&primary)?;
    no_deferred(&second)
}

/// An allocator that makes its own context current to allocate and free would read a default
/// stream of another context as its own context's default stream: the buffer would be freed in
/// the order of a stream it was never used on. Such a buffer is refused; a created stream of the
/// allocator's context works.
fn allocator_refuses_foreign_default_stream() -> TestResult {
    let (device, primary, stream) = device_zero()?;
    let allocator = Arc::new(cuhost::mempool::AsyncAllocator::new(&primary));
    let other = Context::create(&device, ContextFlags::empty())?;
    let refused = DeviceBuffer::<u32>::new_in(&Stream::legacy(&other), 16, allocator.clone());
    ensure!(
        matches!(refused, Err(Error::InvalidArgument { .. })),
        "a default stream of another context was accepted: {refused:?}"
    );
    primary.bind_to_thread()?;
    let fine = DeviceBuffer::<u32>::new_in(&stream, 16, allocator)?;
    drop(fine);
    stream.synchronize()?;
    no_deferred(&primary)
}
