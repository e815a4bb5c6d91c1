//! Safe stream capture: what captured work uses is held by the graph and its executable
//! graphs, memory allocated on a capturing stream is graph memory (allocation and free nodes),
//! and releases inside a capture are ordered by graph edges (the rule's capture section in
//! `cuda-core/src/track/mod.rs`). Kernel launches are the only `unsafe` calls here.

#[path = "kernels/graph.rs"]
mod kernels;

use cuda_tests::{Test, TestResult, device_zero, ensure, ensure_eq, gpu, hold, no_deferred};
use cuhost::event::EventRecordFlags;
use cuhost::graph::{CaptureMode, Graph, GraphSlice, InstantiateFlags, NodeType, memory_usage, trim_memory};
use cuhost::mempool::AsyncAllocator;
use cuhost::module::Module;
use cuhost::{DeviceBuffer, Error, Event, EventFlags, LaunchConfig, PinnedBuffer, Stream, StreamFlags};
use std::sync::Arc;

const N: usize = 1 << 16;

fn main() {
    let tests: &[Test] = &[
        gpu(
            "graph_memory_nodes_across_two_streams_end_joined",
            graph_memory_nodes_across_two_streams_end_joined,
        ),
        gpu("releases_on_each_stream_of_a_capture", releases_on_each_stream_of_a_capture),
        gpu("graph_memory_is_at_one_address_across_replays", graph_memory_is_at_one_address_across_replays),
        gpu(
            "a_buffer_alive_at_the_end_is_freed_in_the_graph",
            a_buffer_alive_at_the_end_is_freed_in_the_graph,
        ),
        gpu("graph_memory_is_refused_in_another_capture", graph_memory_is_refused_in_another_capture),
        gpu(
            "a_dropped_buffer_lives_while_launches_are_queued",
            a_dropped_buffer_lives_while_launches_are_queued,
        ),
        gpu(
            "a_dropped_pinned_buffer_lives_while_its_graph_does",
            a_dropped_pinned_buffer_lives_while_its_graph_does,
        ),
        gpu("an_invalidated_capture_leaves_nothing_dangling", an_invalidated_capture_leaves_nothing_dangling),
        gpu("from_slice_in_a_capture_replays_its_input", from_slice_in_a_capture_replays_its_input),
        gpu(
            "what_a_graph_cannot_hold_is_refused_in_a_capture",
            what_a_graph_cannot_hold_is_refused_in_a_capture,
        ),
        gpu("a_graph_launched_into_a_capture_is_refused", a_graph_launched_into_a_capture_is_refused),
        gpu("a_captured_launch_holds_its_module", a_captured_launch_holds_its_module),
    ];
    cuda_tests::run(tests)
}

fn stream(ctx: &cuhost::Context) -> Result<Stream, Error> {
    Stream::new(ctx, StreamFlags::NON_BLOCKING)
}

fn count(graph: &Graph, kind: NodeType) -> Result<usize, Error> {
    Ok(graph
        .nodes()?
        .iter()
        .map(|n| n.node_type())
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .filter(|&k| k == kind)
        .count())
}

/// NVIDIA's graphMemoryNodes pattern, captured with the safe calls: a buffer allocated on the
/// first stream (through `AsyncAllocator`) is filled by a kernel there, copied out on the second
/// stream after it waits for an event of the first, and dropped there. Before, the drop was
/// refused ("the memory is given back while a stream that used it is being captured", the
/// memory leaked) and the capture ended with `CUDA_ERROR_STREAM_CAPTURE_UNJOINED`. Now the drop
/// is a free node after the copy (an edge from the second stream), which also joins the second
/// stream back: the capture ends, and every launch gives the right result.
fn graph_memory_nodes_across_two_streams_end_joined() -> TestResult {
    let (_, ctx, a) = device_zero()?;
    let b = stream(&ctx)?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let add = module.function("add_u32")?;
    let mut out = DeviceBuffer::<u32>::zeroed(&a, N)?;
    let fork = Event::new(&ctx, EventFlags::DISABLE_TIMING)?;
    let (n, two) = (N as u32, 2u32);
    let capture = a.begin_capture(CaptureMode::ThreadLocal)?;
    let mut scratch = DeviceBuffer::<u32>::new_in(&a, N, Arc::new(AsyncAllocator::new(&ctx)))?;
    scratch.view_mut().memset_d32_async(1, &a)?;
    // SAFETY: add_u32 takes (u32*, u32, u32) and `scratch` holds N words; the module outlives
    // the graph and its executable graph (declared before them).
    unsafe { add.launch(&a, &LaunchConfig::for_elements(n, 256), (&mut scratch, &n, &two))? };
    fork.record(&a)?;
    b.wait_event(&fork)?;
    out.view_mut().copy_from_device_async(&scratch.view(), &b)?;
    drop(scratch);
    let graph = capture.end()?;
    ensure_eq!(count(&graph, NodeType::MemAlloc)?, 1);
    ensure_eq!(count(&graph, NodeType::MemFree)?, 1);
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    for launch in 0..3 {
        out.view_mut().memset_d32_async(0, &a)?;
        exec.launch(&a)?;
        ensure_eq!(out.to_vec()?, vec![3; N], "launch {launch}");
    }
    drop((exec, graph));
    no_deferred(&ctx)
}

/// Three streams of one capture each allocate a temporary, use the others' through copies, and
/// drop theirs on their own stream: each release is a free node ordered after every stream of
/// the capture that used the memory (edges), and the capture ends joined.
fn releases_on_each_stream_of_a_capture() -> TestResult {
    let (_, ctx, a) = device_zero()?;
    let (b, c) = (stream(&ctx)?, stream(&ctx)?);
    let mut out = DeviceBuffer::<u32>::zeroed(&a, N)?;
    let fork = Event::new(&ctx, EventFlags::DISABLE_TIMING)?;
    let capture = a.begin_capture(CaptureMode::ThreadLocal)?;
    fork.record(&a)?;
    b.wait_event(&fork)?;
    c.wait_event(&fork)?;
    let mut ta = DeviceBuffer::<u32>::new(&a, N)?;
    ta.view_mut().memset_d32_async(7, &a)?;
    let mut tb = DeviceBuffer::<u32>::new(&b, N)?;
    tb.view_mut().copy_from_device_async(&ta.view(), &b)?; // ta used on b
    drop(ta); // freed on a, after b's copy
    let mut tc = DeviceBuffer::<u32>::new(&c, N)?;
    tc.view_mut().copy_from_device_async(&tb.view(), &c)?; // tb used on c
    drop(tb); // freed on b, after c's copy
    out.view_mut().copy_from_device_async(&tc.view(), &c)?;
    drop(tc); // freed on c
    let graph = capture.end()?;
    ensure_eq!(count(&graph, NodeType::MemFree)?, 3);
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    for launch in 0..5 {
        out.view_mut().memset_d32_async(0, &a)?;
        exec.launch(&a)?;
        ensure_eq!(out.to_vec()?, vec![7; N], "launch {launch}");
    }
    drop((exec, graph));
    no_deferred(&ctx)
}

/// A temporary allocated in a capture has one address, the allocation node's, at every launch,
/// and holds what each launch writes: new inputs written between launches come out right.
fn graph_memory_is_at_one_address_across_replays() -> TestResult {
    let (_, ctx, s) = device_zero()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let add = module.function("add_u32")?;
    let mut input = DeviceBuffer::<u32>::zeroed(&s, N)?;
    let mut out = DeviceBuffer::<u32>::zeroed(&s, N)?;
    let (n, ten) = (N as u32, 10u32);
    let capture = s.begin_capture(CaptureMode::ThreadLocal)?;
    let mut scratch = DeviceBuffer::<u32>::new(&s, N)?;
    let address = scratch.as_raw();
    scratch.view_mut().copy_from_device_async(&input.view(), &s)?;
    // SAFETY: add_u32 takes (u32*, u32, u32); `scratch` holds N words; the module outlives the
    // graph and its executable graph.
    unsafe { add.launch(&s, &LaunchConfig::for_elements(n, 256), (&mut scratch, &n, &ten))? };
    out.view_mut().copy_from_device_async(&scratch.view(), &s)?;
    drop(scratch);
    let graph = capture.end()?;
    let alloc = graph.nodes()?.into_iter().find(|n| n.node_type().is_ok_and(|k| k == NodeType::MemAlloc));
    let alloc = alloc.ok_or("no allocation node")?;
    ensure_eq!(alloc.mem_alloc_params()?.address, address, "the buffer's address is the node's");
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    for step in 0..8u32 {
        input.copy_from(&vec![step; N])?;
        exec.launch(&s)?;
        ensure_eq!(out.to_vec()?, vec![step + 10; N], "replay {step}");
    }
    drop((exec, graph));
    no_deferred(&ctx)
}

/// A buffer allocated in a capture and still alive when it ends is freed by a free node added
/// then: the graph is whole (launches do not fail for memory left allocated), and the buffer,
/// which has no memory outside the launches, refuses every use.
fn a_buffer_alive_at_the_end_is_freed_in_the_graph() -> TestResult {
    let (_, ctx, s) = device_zero()?;
    let capture = s.begin_capture(CaptureMode::ThreadLocal)?;
    let mut kept = DeviceBuffer::<u32>::zeroed(&s, N)?;
    let graph = capture.end()?;
    ensure_eq!(count(&graph, NodeType::MemFree)?, 1, "the end added the free node");
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    for _ in 0..3 {
        exec.launch(&s)?;
    }
    s.synchronize()?;
    let refusals = [
        kept.to_vec().err(),
        kept.copy_from(&vec![1; N]).err(),
        kept.view_mut().memset_d32_async(1, &s).err(),
        kept.record_stream(&stream(&ctx)?).err(),
        kept.set_stream(&stream(&ctx)?).err(),
    ];
    for (i, refusal) in refusals.iter().enumerate() {
        ensure!(
            matches!(refusal, Some(Error::InvalidArgument { .. })),
            "use {i} was not refused: {refusal:?}"
        );
    }
    // Nor can a node of another graph name it.
    let kept = Arc::new(kept);
    let other = Graph::new(&ctx)?;
    let node = other.add_memset_node(&[], &GraphSlice::whole(&kept), 0u32);
    ensure!(matches!(node, Err(Error::InvalidArgument { .. })), "a memset node of graph memory: {node:?}");
    drop(other);
    drop(kept);
    drop((exec, graph));
    no_deferred(&ctx)
}

/// Graph memory belongs to its capture: used in a capture of another stream it is refused
/// (that graph's launches would run where the memory does not exist).
fn graph_memory_is_refused_in_another_capture() -> TestResult {
    let (_, ctx, a) = device_zero()?;
    let b = stream(&ctx)?;
    let first = a.begin_capture(CaptureMode::ThreadLocal)?;
    let mut scratch = DeviceBuffer::<u32>::zeroed(&a, N)?;
    let second = b.begin_capture(CaptureMode::ThreadLocal)?;
    let refused = scratch.view_mut().memset_d32_async(3, &b);
    drop(second.end()?);
    drop(scratch);
    drop(first.end()?);
    ensure!(matches!(refused, Err(Error::InvalidArgument { .. })), "{refused:?}");
    no_deferred(&ctx)
}

/// A buffer that captured work uses, dropped while the graph lives and while launches are
/// queued behind a slow host function: its block is not handed out again until the graph and
/// its executable graph are gone (the executable graph's drop waits for its launches), and
/// every launch reads and writes the buffer's memory, not a new owner's.
fn a_dropped_buffer_lives_while_launches_are_queued() -> TestResult {
    let (_, ctx, s) = device_zero()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let add = module.function("add_u32")?;
    let mut data = DeviceBuffer::<u32>::zeroed(&s, N)?;
    let mut out = DeviceBuffer::<u32>::zeroed(&s, N)?;
    let address = data.as_raw();
    let (n, one) = (N as u32, 1u32);
    let capture = s.begin_capture(CaptureMode::ThreadLocal)?;
    // SAFETY: add_u32 takes (u32*, u32, u32); `data` holds N words; the module outlives the
    // graph and its executable graph.
    unsafe { add.launch(&s, &LaunchConfig::for_elements(n, 256), (&mut data, &n, &one))? };
    out.view_mut().copy_from_device_async(&data.view(), &s)?;
    let graph = capture.end()?;
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    drop(data);
    hold(&s, 200)?;
    for _ in 0..5 {
        exec.launch(&s)?;
    }
    let mut others = Vec::new();
    for _ in 0..4 {
        let other = DeviceBuffer::<u32>::from_slice(&s, &vec![9; N])?;
        ensure!(other.as_raw() != address, "the block of a buffer the graph holds was handed out again");
        others.push(other);
    }
    drop((exec, graph));
    ensure_eq!(out.to_vec()?, vec![5; N], "the launches added into the buffer's own memory");
    for other in &others {
        ensure_eq!(other.to_vec()?, vec![9; N]);
    }
    no_deferred(&ctx)
}

/// A pinned buffer that a captured copy writes, dropped while the graph lives: its memory is not
/// handed out again until the graph is gone, and the launches write it, not a new owner's.
fn a_dropped_pinned_buffer_lives_while_its_graph_does() -> TestResult {
    let (_, ctx, s) = device_zero()?;
    let dev = DeviceBuffer::<u32>::from_slice(&s, &vec![4; N])?;
    let mut host = PinnedBuffer::<u32>::new(N)?;
    let address = host.as_ptr() as usize;
    let capture = s.begin_capture(CaptureMode::ThreadLocal)?;
    dev.copy_to_pinned_async(&mut host, &s)?;
    let graph = capture.end()?;
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    drop(host);
    hold(&s, 200)?;
    exec.launch(&s)?;
    let mut fresh = PinnedBuffer::<u32>::new(N)?;
    ensure!(fresh.as_ptr() as usize != address, "the pinned block the graph writes was handed out again");
    fresh.as_mut_slice()?.fill(8);
    s.synchronize()?;
    ensure!(fresh.as_slice()?.iter().all(|&v| v == 8), "the launch wrote the new buffer");
    drop((exec, graph));
    no_deferred(&ctx)
}

/// A capture broken by a call the driver refuses while capturing (a synchronization) ends with
/// an error; its graph memory is gone (the buffer refuses every use, its drop frees nothing),
/// the buffer the captured work used goes back to its pool when dropped, and no graph memory is
/// left allocated.
fn an_invalidated_capture_leaves_nothing_dangling() -> TestResult {
    let (device, ctx, s) = device_zero()?;
    let mut outside = DeviceBuffer::<u32>::zeroed(&s, N)?;
    let address = outside.as_raw();
    s.synchronize()?;
    let capture = s.begin_capture(CaptureMode::ThreadLocal)?;
    outside.view_mut().memset_d32_async(3, &s)?;
    let inside = DeviceBuffer::<u32>::zeroed(&s, N)?;
    ensure!(s.synchronize().is_err(), "a synchronization of a capturing stream was accepted");
    ensure!(capture.end().is_err(), "the broken capture ended well");
    ensure!(
        matches!(
            inside.to_vec(),
            Err(Error::InvalidArgument { reason: cuhost::error::Reason::DURING_CAPTURE, .. })
        ),
        "graph memory of a broken capture was read"
    );
    drop(inside);
    drop(outside);
    let again = DeviceBuffer::<u32>::new(&s, N)?;
    ensure_eq!(again.as_raw(), address, "the discarded graph let go of the buffer");
    s.synchronize()?;
    trim_memory(&device)?;
    ensure_eq!(memory_usage(&device)?.used, 0, "graph memory left allocated");
    no_deferred(&ctx)
}

/// `from_slice` on a capturing stream: graph memory filled at every launch from a pinned copy
/// the graph holds.
fn from_slice_in_a_capture_replays_its_input() -> TestResult {
    let (_, ctx, s) = device_zero()?;
    let mut out = DeviceBuffer::<u32>::zeroed(&s, N)?;
    let capture = s.begin_capture(CaptureMode::ThreadLocal)?;
    let input = DeviceBuffer::from_slice(&s, &vec![6u32; N])?;
    out.view_mut().copy_from_device_async(&input.view(), &s)?;
    drop(input);
    let exec = capture.end()?.instantiate(InstantiateFlags::empty())?;
    for _ in 0..3 {
        out.view_mut().memset_d32_async(0, &s)?;
        exec.launch(&s)?;
        ensure_eq!(out.to_vec()?, vec![6; N]);
    }
    drop(exec);
    no_deferred(&ctx)
}

/// What a graph could not hold is refused on a capturing stream, and the capture goes on: an
/// external event record (the graph would name an event it does not own).
fn what_a_graph_cannot_hold_is_refused_in_a_capture() -> TestResult {
    let (_, ctx, s) = device_zero()?;
    let event = Event::new(&ctx, EventFlags::DISABLE_TIMING)?;
    let capture = s.begin_capture(CaptureMode::ThreadLocal)?;
    let refused = event.record_with_flags(&s, EventRecordFlags::EXTERNAL);
    let graph = capture.end()?;
    ensure_eq!(refused.err().and_then(|e| e.reason()), Some(cuhost::error::Reason::DURING_CAPTURE));
    drop(graph);
    no_deferred(&ctx)
}

/// A graph launched on a stream being captured: the driver captures no graph launch, so the
/// launch is refused before it reaches the driver (with the way out: a child graph node), the
/// capture still ends, and the graph launches afterwards.
fn a_graph_launched_into_a_capture_is_refused() -> TestResult {
    let (_, ctx, s) = device_zero()?;
    let mut data = DeviceBuffer::<u32>::zeroed(&s, N)?;
    let mut out = DeviceBuffer::<u32>::zeroed(&s, N)?;
    let capture = s.begin_capture(CaptureMode::ThreadLocal)?;
    data.view_mut().memset_d32_async(5, &s)?;
    out.view_mut().copy_from_device_async(&data.view(), &s)?;
    let inner = capture.end()?.instantiate(InstantiateFlags::empty())?;
    drop(data);
    let capture = s.begin_capture(CaptureMode::ThreadLocal)?;
    let refused = inner.launch(&s);
    ensure!(matches!(refused, Err(Error::InvalidArgument { .. })), "a launch into a capture: {refused:?}");
    let outer = capture.end()?;
    ensure_eq!(outer.nodes()?.len(), 0);
    inner.launch(&s)?;
    ensure_eq!(out.to_vec()?, vec![5; N]);
    no_deferred(&ctx)
}

/// A kernel launched on a capturing stream: the graph holds the module's code, so the module is
/// dropped before the launches and they still run its kernel.
fn a_captured_launch_holds_its_module() -> TestResult {
    let (_, ctx, s) = device_zero()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let add = module.function("add_u32")?;
    let mut data = DeviceBuffer::<u32>::zeroed(&s, N)?;
    let (n, three) = (N as u32, 3u32);
    let capture = s.begin_capture(CaptureMode::ThreadLocal)?;
    // SAFETY: add_u32 takes (u32*, u32, u32) and `data` holds N words; the graph holds the
    // buffer and the module.
    unsafe { add.launch(&s, &LaunchConfig::for_elements(n, 256), (&mut data, &n, &three))? };
    let exec = capture.end()?.instantiate(InstantiateFlags::empty())?;
    drop(module);
    for _ in 0..2 {
        exec.launch(&s)?;
    }
    ensure_eq!(data.to_vec()?, vec![6; N]);
    drop(exec);
    no_deferred(&ctx)
}
