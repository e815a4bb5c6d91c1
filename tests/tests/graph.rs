//! CUDA graphs: capture (one stream, two streams joined by events, invalidated), every node
//! kind with values read back, conditional WHILE, SWITCH and IF nodes, node queries, updates of
//! the whole graph and of one node, enabling and disabling nodes, DOT output, and what a graph
//! keeps alive.

#[path = "kernels/graph.rs"]
mod kernels;

use cuda_tests::{TestResult, ensure, ensure_eq, gpu, gpu_needing};
use cuhost::driver_sys as sys;
use cuhost::graph::{
    CaptureMode, ConditionalKind, DotFlags, EdgeKind, Graph, GraphNode, GraphSlice, InstantiateFlags,
    NodeType, exchange_capture_mode, memory_usage, reset_memory_high_watermarks, trim_memory,
};
use cuhost::module::{JitInputType, JitOptions, Library, Linker, Module};
use cuhost::stream::{CaptureStatus, StreamMemOp, StreamWaitValueFlags, StreamWriteValueFlags};
use cuhost::{
    Context, ContextFlags, Device, DeviceBuffer, Error, Event, EventFlags, LaunchConfig, Stream, StreamFlags,
};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

fn main() {
    cuda_tests::run(&[
        gpu("capture_records_work_that_each_launch_replays", capture_records_work_that_each_launch_replays),
        gpu("capture_from_a_struct_that_holds_its_stream", capture_from_a_struct_that_holds_its_stream),
        gpu("capture_across_two_streams_joined_by_events", capture_across_two_streams_joined_by_events),
        gpu(
            "invalidated_capture_is_an_error_and_the_context_stays_usable",
            invalidated_capture_is_an_error_and_the_context_stays_usable,
        ),
        gpu("capture_into_an_existing_graph_adds_its_nodes", capture_into_an_existing_graph_adds_its_nodes),
        gpu("capture_dependencies_are_added_and_replaced", capture_dependencies_are_added_and_replaced),
        gpu(
            "exchange_capture_mode_returns_the_previous_mode",
            exchange_capture_mode_returns_the_previous_mode,
        ),
        gpu("kernel_nodes_run_in_dependency_order", kernel_nodes_run_in_dependency_order),
        gpu("library_kernel_nodes_run_in_the_graphs_context", library_kernel_nodes_run_in_the_graphs_context),
        gpu("memset_and_memcpy_nodes_write_the_values", memset_and_memcpy_nodes_write_the_values),
        gpu("memcpy_3d_node_copies_a_rectangle", memcpy_3d_node_copies_a_rectangle),
        gpu("batch_mem_op_node_writes_and_waits", batch_mem_op_node_writes_and_waits),
        gpu(
            "host_node_runs_at_each_launch_and_its_panic_is_reported",
            host_node_runs_at_each_launch_and_its_panic_is_reported,
        ),
        gpu("child_graph_and_empty_nodes_run_the_child", child_graph_and_empty_nodes_run_the_child),
        gpu("event_record_and_wait_nodes", event_record_and_wait_nodes),
        gpu(
            "allocation_and_free_nodes_give_graph_owned_memory",
            allocation_and_free_nodes_give_graph_owned_memory,
        ),
        gpu("node_queries_and_dependencies", node_queries_and_dependencies),
        gpu("programmatic_edges_join_kernel_nodes", programmatic_edges_join_kernel_nodes),
        gpu(
            "kernel_node_arguments_are_updated_then_relaunched",
            kernel_node_arguments_are_updated_then_relaunched,
        ),
        gpu(
            "whole_graph_update_and_its_refusal_as_a_typed_error",
            whole_graph_update_and_its_refusal_as_a_typed_error,
        ),
        gpu("disabled_nodes_do_nothing_until_enabled", disabled_nodes_do_nothing_until_enabled),
        gpu("refused_instantiation_is_a_typed_error", refused_instantiation_is_a_typed_error),
        gpu("memset_memcpy_host_and_event_nodes_are_updated", memset_memcpy_host_and_event_nodes_are_updated),
        gpu("dot_output_names_every_node", dot_output_names_every_node),
        gpu("graphs_keep_buffers_and_modules_alive", graphs_keep_buffers_and_modules_alive),
        gpu_needing(
            "while_node_loops_a_kernel_n_times",
            conditional_kernels_available,
            while_node_loops_a_kernel_n_times,
        ),
        gpu_needing(
            "switch_node_picks_one_of_three_bodies",
            conditional_kernels_available,
            switch_node_picks_one_of_three_bodies,
        ),
        gpu_needing(
            "if_node_runs_its_body_when_set",
            conditional_kernels_available,
            if_node_runs_its_body_when_set,
        ),
    ]);
}

const N: u32 = 1000;

fn context() -> Result<Context, Error> {
    Context::primary(&Device::get(0)?)
}

fn stream(ctx: &Context) -> Result<Stream, Error> {
    Stream::new(ctx, StreamFlags::NON_BLOCKING)
}

fn range(n: u32) -> Vec<u32> {
    (0..n).collect()
}

/// The nodes of the captured work: the graph's nodes less the event waits a capture adds at
/// a buffer's first use on each stream (by which each launch waits for the buffer's earlier
/// work on its own stream).
fn work_nodes<'g>(graph: &'g Graph) -> Result<Vec<GraphNode<'g>>, cuda_tests::Failed> {
    let nodes = graph.nodes()?;
    let mut work = Vec::with_capacity(nodes.len());
    for n in nodes {
        if n.node_type()? != NodeType::EventWait {
            work.push(n);
        }
    }
    Ok(work)
}

fn capture_records_work_that_each_launch_replays() -> TestResult {
    let ctx = context()?;
    let module = Arc::new(Module::from_ptx(&ctx, kernels::PTX)?);
    let add = module.function("add_u32")?;
    let s = stream(&ctx)?;
    let mut data = DeviceBuffer::from_slice(&s, &range(N))?;
    let config = LaunchConfig::for_elements(N, 128);
    let (n, two) = (N, 2u32);
    let capture = s.begin_capture(CaptureMode::ThreadLocal)?;
    let info = s.capture_info()?;
    ensure_eq!(info.status, CaptureStatus::Active);
    ensure!(info.id.is_some(), "a capture has an id: {info:?}");
    ensure_eq!(s.capture_status()?, CaptureStatus::Active);
    // SAFETY: add_u32 takes (u32*, u32, u32) and `data` holds N words; the graph holds the
    // buffer, and the module outlives the graph and its executable (declared before them).
    unsafe { add.launch(&s, &config, (&mut data, &n, &two))? };
    // SAFETY: as above.
    unsafe { add.launch(&s, &config, (&mut data, &n, &two))? };
    let graph = capture.end()?;
    ensure_eq!(s.capture_status()?, CaptureStatus::None);
    ensure_eq!(s.capture_info()?.id, None);
    ensure_eq!(work_nodes(&graph)?.len(), 2);
    // Nothing ran while capturing.
    ensure_eq!(data.to_vec()?, range(N));
    let data = Arc::new(data);
    graph.keep(data.clone());
    graph.keep(module.clone());
    let exec = graph.instantiate_and_upload(InstantiateFlags::empty(), &s)?;
    for _ in 0..3 {
        exec.launch(&s)?;
    }
    s.synchronize()?;
    ensure_eq!(data.to_vec()?, (0..N).map(|i| i + 12).collect::<Vec<_>>());
    Ok(())
}

fn capture_across_two_streams_joined_by_events() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let (add, mul) = (module.function("add_u32")?, module.function("mul_u32")?);
    let (a, b) = (stream(&ctx)?, stream(&ctx)?);
    let mut left = DeviceBuffer::from_slice(&a, &range(N))?;
    let mut right = DeviceBuffer::from_slice(&a, &range(N))?;
    let (fork, join) =
        (Event::new(&ctx, EventFlags::DISABLE_TIMING)?, Event::new(&ctx, EventFlags::DISABLE_TIMING)?);
    let config = LaunchConfig::for_elements(N, 256);
    let (n, one, three) = (N, 1u32, 3u32);
    // SAFETY: the kernels take (u32*, u32, u32) and the buffers hold N words; they outlive
    // the executable graph, which is dropped first.
    let graph = unsafe {
        let capture = a.begin_capture(CaptureMode::ThreadLocal)?;
        add.launch(&a, &config, (&mut left, &n, &one))?;
        fork.record(&a)?;
        b.wait_event(&fork)?;
        ensure_eq!(b.capture_status()?, CaptureStatus::Active, "b joined the capture");
        mul.launch(&b, &config, (&mut right, &n, &three))?;
        join.record(&b)?;
        a.wait_event(&join)?;
        add.launch(&a, &config, (&mut left, &n, &one))?;
        capture.end()?
    };
    ensure_eq!(work_nodes(&graph)?.len(), 3);
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    exec.launch(&a)?;
    a.synchronize()?;
    drop(exec);
    ensure_eq!(left.to_vec()?, (0..N).map(|i| i + 2).collect::<Vec<_>>());
    ensure_eq!(right.to_vec()?, (0..N).map(|i| i * 3).collect::<Vec<_>>());
    Ok(())
}

fn invalidated_capture_is_an_error_and_the_context_stays_usable() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let add = module.function("add_u32")?;
    let s = stream(&ctx)?;
    let mut data = DeviceBuffer::from_slice(&s, &range(N))?;
    let config = LaunchConfig::for_elements(N, 256);
    let (n, one) = (N, 1u32);
    let capture = s.begin_capture(CaptureMode::ThreadLocal)?;
    // SAFETY: add_u32 takes (u32*, u32, u32) and `data` holds N words; nothing captured is
    // ever launched.
    unsafe { add.launch(&s, &config, (&mut data, &n, &one))? };
    // Waiting for a stream being captured is not allowed, and breaks the capture.
    let refused = s.synchronize();
    ensure!(refused.is_err(), "synchronizing a capturing stream was accepted");
    ensure_eq!(s.capture_status()?, CaptureStatus::Invalidated);
    let ended = capture.end();
    ensure!(
        matches!(&ended, Err(e) if e.driver_status() == Some(sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)),
        "{ended:?}"
    );
    ensure_eq!(s.capture_status()?, CaptureStatus::None);
    // The stream and context still work.
    // SAFETY: as in the capture tests.
    unsafe { add.launch(&s, &config, (&mut data, &n, &one))? };
    s.synchronize()?;
    ensure_eq!(data.to_vec()?, (0..N).map(|i| i + 1).collect::<Vec<_>>());
    // A capture dropped without `end` ends too.
    {
        let _dropped = s.begin_capture(CaptureMode::ThreadLocal)?;
    }
    ensure_eq!(s.capture_status()?, CaptureStatus::None);
    Ok(())
}

fn capture_into_an_existing_graph_adds_its_nodes() -> TestResult {
    let ctx = context()?;
    let s = stream(&ctx)?;
    let data = Arc::new(DeviceBuffer::<u32>::zeroed(&s, N as usize)?);
    let mut other = DeviceBuffer::<u32>::zeroed(&s, N as usize)?;
    s.synchronize()?;
    let graph = Graph::new(&ctx)?;
    let first = graph.add_memset_node(&[], &GraphSlice::whole(&data), 4u32)?;
    let capture = s.begin_capture_to_graph(&graph, &[first], CaptureMode::ThreadLocal)?;
    other.view_mut().memset_d32_async(5, &s)?;
    capture.end()?;
    ensure_eq!(work_nodes(&graph)?.len(), 2);
    let other = Arc::new(other);
    graph.keep(other.clone());
    graph.instantiate(InstantiateFlags::empty())?.launch(&s)?;
    s.synchronize()?;
    ensure_eq!(data.to_vec()?, vec![4; N as usize]);
    ensure_eq!(other.to_vec()?, vec![5; N as usize]);
    Ok(())
}

fn capture_dependencies_are_added_and_replaced() -> TestResult {
    let ctx = context()?;
    let s = stream(&ctx)?;
    let data = Arc::new(DeviceBuffer::<u32>::zeroed(&s, N as usize)?);
    let mut other = DeviceBuffer::<u32>::zeroed(&s, N as usize)?;
    s.synchronize()?;
    let graph = Graph::new(&ctx)?;
    let a = graph.add_memset_node(&[], &GraphSlice::whole(&data), 1u32)?;
    let b = graph.add_memset_node(&[], &GraphSlice::whole(&data), 2u32)?;
    let captured_after = |known: &[GraphNode<'_>]| -> Result<Vec<GraphNode<'_>>, cuda_tests::Failed> {
        let new: Vec<_> = work_nodes(&graph)?.into_iter().filter(|n| !known.contains(n)).collect();
        ensure_eq!(new.len(), 1, "one node captured");
        // The work it depends on, through the event waits the capture put before it.
        let (mut deps, mut open) = (Vec::new(), new[0].dependencies()?);
        while let Some(d) = open.pop() {
            if d.node_type()? == NodeType::EventWait {
                open.extend(d.dependencies()?);
            } else if !deps.contains(&d) {
                deps.push(d);
            }
        }
        deps.sort_by_key(|n| n.as_raw() as usize);
        Ok(deps)
    };
    let mut both = vec![a, b];
    both.sort_by_key(|n| n.as_raw() as usize);
    // Added: the captured memset depends on the node the capture began after, and on `b`.
    let capture = s.begin_capture_to_graph(&graph, &[a], CaptureMode::ThreadLocal)?;
    capture.add_dependencies(&[b])?;
    other.view_mut().memset_d32_async(5, &s)?;
    capture.end()?;
    ensure_eq!(captured_after(&[a, b])?, both);
    let known = graph.nodes()?;
    // Replaced: it depends on `b` only.
    let mut third = DeviceBuffer::<u32>::zeroed(&s, N as usize)?;
    s.synchronize()?;
    let capture = s.begin_capture_to_graph(&graph, &[a], CaptureMode::ThreadLocal)?;
    unsafe { capture.set_dependencies(&[b])? };
    third.view_mut().memset_d32_async(6, &s)?;
    capture.end()?;
    ensure_eq!(captured_after(&known)?, vec![b]);
    // A node of another graph is refused before the call, and the capture goes on.
    let stranger = Graph::new(&ctx)?;
    let foreign = stranger.add_memset_node(&[], &GraphSlice::whole(&data), 3u32)?;
    let capture = s.begin_capture_to_graph(&graph, &[], CaptureMode::ThreadLocal)?;
    match capture.add_dependencies(&[foreign]) {
        Err(Error::InvalidArgument { .. }) => {}
        other => return Err(format!("a node of another graph: {other:?}").into()),
    }
    capture.end()?;
    let (other, third) = (Arc::new(other), Arc::new(third));
    graph.keep(other.clone());
    graph.keep(third.clone());
    graph.instantiate(InstantiateFlags::empty())?.launch(&s)?;
    s.synchronize()?;
    ensure_eq!(other.to_vec()?, vec![5; N as usize]);
    ensure_eq!(third.to_vec()?, vec![6; N as usize]);
    Ok(())
}

fn exchange_capture_mode_returns_the_previous_mode() -> TestResult {
    let _ctx = context()?;
    let before = exchange_capture_mode(CaptureMode::Relaxed)?;
    ensure_eq!(before, CaptureMode::Global, "a thread starts in global mode");
    ensure_eq!(exchange_capture_mode(before)?, CaptureMode::Relaxed);
    Ok(())
}

fn kernel_nodes_run_in_dependency_order() -> TestResult {
    let ctx = context()?;
    let module = Arc::new(Module::from_ptx(&ctx, kernels::PTX)?);
    let (add, mul) = (module.function("add_u32")?, module.function("mul_u32")?);
    let s = stream(&ctx)?;
    let mut data = DeviceBuffer::from_slice(&s, &range(N))?;
    let graph = Graph::new(&ctx)?;
    let config = LaunchConfig::for_elements(N, 128).priority(0);
    let (n, one, two, half) = (N, 1u32, 2u32, N / 2);
    // SAFETY: the kernels take (u32*, u32, u32); `data` holds N words and a view of its second
    // half N/2; the graph keeps both.
    let (first, second) = unsafe {
        let first = graph.add_kernel_node(&[], &add, &config, (&mut data, &n, &one))?;
        let second = graph.add_kernel_node(&[first], &mul, &config, (&mut data, &n, &two))?;
        let view = data.slice_mut(half as usize..)?;
        graph.add_kernel_node(&[second], &add, &config, (view, &half, &one))?;
        (first, second)
    };
    ensure_eq!(first.node_type()?, NodeType::Kernel);
    ensure_eq!(second.dependencies()?, vec![first]);
    let data = Arc::new(data);
    graph.keep(data.clone());
    graph.keep(module.clone());
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    exec.launch(&s)?;
    s.synchronize()?;
    let expected: Vec<u32> = (0..N).map(|i| (i + 1) * 2 + u32::from(i >= half)).collect();
    ensure_eq!(data.to_vec()?, expected);
    // A launch whose arguments do not match the kernel is refused before any call.
    // SAFETY: refused before the driver sees it.
    let wrong = unsafe { graph.add_kernel_node(&[], &add, &config, (&n, &one)) };
    ensure!(matches!(wrong, Err(Error::InvalidArgument { .. })), "{wrong:?}");
    Ok(())
}

fn library_kernel_nodes_run_in_the_graphs_context() -> TestResult {
    let ctx = context()?;
    let library = Arc::new(Library::from_ptx(kernels::PTX, &JitOptions::new())?);
    let add = library.kernel("add_u32")?;
    let s = stream(&ctx)?;
    let mut data = DeviceBuffer::from_slice(&s, &range(N))?;
    let graph = Graph::new(&ctx)?;
    let config = LaunchConfig::for_elements(N, 256);
    let (n, four) = (N, 4u32);
    // SAFETY: add_u32 takes (u32*, u32, u32) and `data` holds N words; the graph keeps the
    // library and the buffer.
    let node = unsafe { graph.add_kernel_node(&[], &add, &config, (&mut data, &n, &four))? };
    ensure_eq!(node.node_type()?, NodeType::Kernel);
    // SAFETY: refused before the call: a 2-byte value where the kernel takes 4 bytes.
    let wrong = unsafe { graph.add_kernel_node(&[], &add, &config, (&mut data, &n, &1u16)) };
    ensure!(matches!(wrong, Err(Error::InvalidArgument { .. })), "{wrong:?}");
    let data = Arc::new(data);
    graph.keep(data.clone());
    graph.keep(library.clone());
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    exec.launch(&s)?;
    // SAFETY: as above.
    unsafe { exec.set_kernel_node_args(node, &add, &config, (&*data, &n, &(2 * four)))? };
    exec.launch(&s)?;
    s.synchronize()?;
    ensure_eq!(data.to_vec()?, (0..N).map(|i| i + 12).collect::<Vec<_>>());
    Ok(())
}

fn memset_and_memcpy_nodes_write_the_values() -> TestResult {
    let ctx = context()?;
    let s = stream(&ctx)?;
    let bytes = Arc::new(DeviceBuffer::<u8>::zeroed(&s, 64)?);
    let halves = Arc::new(DeviceBuffer::<u16>::zeroed(&s, 64)?);
    let words = Arc::new(DeviceBuffer::<u32>::zeroed(&s, 64)?);
    let copy = Arc::new(DeviceBuffer::<u32>::zeroed(&s, 64)?);
    s.synchronize()?;
    let graph = Graph::new(&ctx)?;
    let a = graph.add_memset_node(&[], &GraphSlice::new(&bytes, 8..16)?, 0xabu8)?;
    let b = graph.add_memset_node(&[], &GraphSlice::whole(&halves), 0x1234u16)?;
    let c = graph.add_memset_node(&[], &GraphSlice::whole(&words), 0xdead_beefu32)?;
    let d = graph.add_memcpy_node(&[c], &GraphSlice::new(&copy, 32..)?, &GraphSlice::new(&words, ..32)?)?;
    ensure_eq!(a.node_type()?, NodeType::Memset);
    ensure_eq!(d.node_type()?, NodeType::Memcpy);
    ensure_eq!(b.dependents()?.len(), 0);
    // Mismatched lengths and element sizes are refused before any call.
    let mismatch = graph.add_memcpy_node(&[], &GraphSlice::whole(&copy), &GraphSlice::new(&words, 1..)?);
    ensure!(matches!(mismatch, Err(Error::InvalidArgument { .. })), "{mismatch:?}");
    ensure!(GraphSlice::new(&words, 60..70).is_err(), "a slice past the end");
    graph.instantiate(InstantiateFlags::empty())?.launch(&s)?;
    s.synchronize()?;
    let expected: Vec<u8> = (0..64).map(|i| if (8..16).contains(&i) { 0xab } else { 0 }).collect();
    ensure_eq!(bytes.to_vec()?, expected);
    ensure_eq!(halves.to_vec()?, vec![0x1234; 64]);
    ensure_eq!(words.to_vec()?, vec![0xdead_beef; 64]);
    let expected: Vec<u32> = (0..64).map(|i| if i >= 32 { 0xdead_beef } else { 0 }).collect();
    ensure_eq!(copy.to_vec()?, expected);
    Ok(())
}

fn memcpy_3d_node_copies_a_rectangle() -> TestResult {
    let ctx = context()?;
    let s = stream(&ctx)?;
    // A rectangle of 4 rows by 16 words at row 2, column 8 of an 8 x 32 word image, into a
    // packed 4 x 16 image.
    let (rows, columns) = (8usize, 32usize);
    let image = DeviceBuffer::from_slice(&s, &range((rows * columns) as u32))?;
    let packed = DeviceBuffer::<u32>::zeroed(&s, 4 * 16)?;
    s.synchronize()?;
    // SAFETY: CUDA_MEMCPY3D is plain data; all-zero is "nothing set".
    let mut copy: sys::CUDA_MEMCPY3D = unsafe { std::mem::zeroed() };
    copy.srcMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
    copy.srcDevice = image.as_raw();
    copy.srcPitch = columns * 4;
    copy.srcXInBytes = 8 * 4;
    copy.srcY = 2;
    copy.dstMemoryType = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
    copy.dstDevice = packed.as_raw();
    copy.dstPitch = 16 * 4;
    copy.WidthInBytes = 16 * 4;
    copy.Height = 4;
    copy.Depth = 1;
    let (image, packed) = (Arc::new(image), Arc::new(packed));
    let graph = Graph::new(&ctx)?;
    // SAFETY: both buffers are kept by the graph; the rectangle lies within both.
    let node = unsafe { graph.add_memcpy_3d_node(&[], &copy)? };
    graph.keep(image.clone());
    graph.keep(packed.clone());
    ensure_eq!(node.node_type()?, NodeType::Memcpy);
    graph.instantiate(InstantiateFlags::empty())?.launch(&s)?;
    s.synchronize()?;
    let expected: Vec<u32> =
        (0..4).flat_map(|r| (0..16).map(move |c| ((2 + r) * columns + 8 + c) as u32)).collect();
    ensure_eq!(packed.to_vec()?, expected);
    Ok(())
}

fn batch_mem_op_node_writes_and_waits() -> TestResult {
    let ctx = context()?;
    let s = stream(&ctx)?;
    let flags = Arc::new(DeviceBuffer::<u32>::zeroed(&s, 4)?);
    let copy = Arc::new(DeviceBuffer::<u32>::zeroed(&s, 4)?);
    s.synchronize()?;
    let (first, last) = (flags.as_raw(), flags.as_raw() + 12);
    let graph = Graph::new(&ctx)?;
    // SAFETY: both addresses are 4-byte aligned words of `flags`, which the graph keeps; the
    // wait is satisfied by the write before it.
    let (write, wait) = unsafe {
        let write = graph.add_batch_mem_op_node(
            &[],
            &[
                StreamMemOp::WriteValue32 {
                    address: first,
                    value: 77,
                    flags: StreamWriteValueFlags::empty(),
                },
                StreamMemOp::WriteValue32 { address: last, value: 99, flags: StreamWriteValueFlags::empty() },
            ],
        )?;
        let wait = graph.add_batch_mem_op_node(
            &[write],
            &[StreamMemOp::WaitValue32 { address: last, value: 99, flags: StreamWaitValueFlags::EQ }],
        )?;
        (write, wait)
    };
    graph.keep(flags.clone());
    graph.add_memcpy_node(&[wait], &GraphSlice::whole(&copy), &GraphSlice::whole(&flags))?;
    ensure_eq!(write.node_type()?, NodeType::BatchMemOp);
    // SAFETY: refused before the call.
    let empty = unsafe { graph.add_batch_mem_op_node(&[], &[]) };
    ensure!(matches!(empty, Err(Error::InvalidArgument { .. })), "{empty:?}");
    let w32 =
        |address, value| StreamMemOp::WriteValue32 { address, value, flags: StreamWriteValueFlags::empty() };
    ensure_eq!(write.batch_mem_op_params()?, vec![w32(first, 77), w32(last, 99)]);
    ensure_eq!(
        wait.batch_mem_op_params()?,
        vec![StreamMemOp::WaitValue32 { address: last, value: 99, flags: StreamWaitValueFlags::EQ }]
    );
    // The graph's node gets new operations, read back as given.
    let more = [w32(first, 77), w32(first + 4, 55), w32(last, 99)];
    // SAFETY: as above; `first + 4` is a word of `flags` too.
    unsafe { graph.set_batch_mem_op_node(write, &more)? };
    ensure_eq!(write.batch_mem_op_params()?, more.to_vec());
    // SAFETY: refused before the call.
    let empty = unsafe { graph.set_batch_mem_op_node(write, &[]) };
    ensure!(matches!(empty, Err(Error::InvalidArgument { .. })), "{empty:?}");
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    exec.launch(&s)?;
    s.synchronize()?;
    ensure_eq!(copy.to_vec()?, vec![77, 55, 0, 99]);
    // The executable graph's node too, for the next launch.
    // SAFETY: as above; `first + 8` is a word of `flags`.
    // The number and kinds of operations stay as instantiated; addresses and values change.
    unsafe { exec.set_batch_mem_op_node(write, &[w32(first, 77), w32(first + 8, 33), w32(last, 99)])? };
    exec.launch(&s)?;
    s.synchronize()?;
    ensure_eq!(copy.to_vec()?, vec![77, 55, 33, 99]);
    Ok(())
}

#[allow(clippy::panic)]
fn host_node_runs_at_each_launch_and_its_panic_is_reported() -> TestResult {
    let ctx = context()?;
    let s = stream(&ctx)?;
    let runs = Arc::new(AtomicU32::new(0));
    let graph = Graph::new(&ctx)?;
    let counted = runs.clone();
    let node = graph.add_host_node(&[], move || {
        counted.fetch_add(1, Ordering::SeqCst);
    })?;
    ensure_eq!(node.node_type()?, NodeType::Host);
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    for _ in 0..3 {
        exec.launch(&s)?;
    }
    s.synchronize()?;
    ensure_eq!(runs.load(Ordering::SeqCst), 3);
    // The graph owns the closure: the count is held by it and by this test.
    ensure_eq!(Arc::strong_count(&runs), 2);
    drop(exec);
    drop(graph);
    ensure_eq!(Arc::strong_count(&runs), 1, "the closure was dropped with the last graph");

    // A context of its own, so that no other test running meanwhile takes the report.
    let own = Context::create(&Device::get(0)?, ContextFlags::empty())?;
    let s = stream(&own)?;
    let panicking = Graph::new(&own)?;
    panicking.add_host_node(&[], || panic!("host node failed on purpose"))?;
    let exec = panicking.instantiate(InstantiateFlags::empty())?;
    exec.launch(&s)?;
    let reported = s.synchronize();
    ensure!(
        matches!(&reported, Err(Error::CallbackPanicked { message }) if message.contains("on purpose")),
        "{reported:?}"
    );
    s.synchronize()?;
    Ok(())
}

fn child_graph_and_empty_nodes_run_the_child() -> TestResult {
    let ctx = context()?;
    let s = stream(&ctx)?;
    let data = Arc::new(DeviceBuffer::<u32>::zeroed(&s, 256)?);
    let copy = Arc::new(DeviceBuffer::<u32>::zeroed(&s, 256)?);
    s.synchronize()?;
    let child = Graph::new(&ctx)?;
    child.add_memset_node(&[], &GraphSlice::whole(&data), 9u32)?;
    let parent = Graph::new(&ctx)?;
    let start = parent.add_empty_node(&[])?;
    let run_child = parent.add_child_graph_node(&[start], &child)?;
    parent.add_memcpy_node(&[run_child], &GraphSlice::whole(&copy), &GraphSlice::whole(&data))?;
    ensure_eq!(start.node_type()?, NodeType::Empty);
    ensure_eq!(run_child.node_type()?, NodeType::ChildGraph);
    drop(child);
    // The child's memory is kept by the parent through the child's list.
    let exec = parent.instantiate(InstantiateFlags::empty())?;
    exec.launch(&s)?;
    s.synchronize()?;
    ensure_eq!(copy.to_vec()?, vec![9; 256]);
    // The child's parameters change in place: a child of the same shape with another value.
    let other = Graph::new(&ctx)?;
    other.add_memset_node(&[], &GraphSlice::whole(&data), 21u32)?;
    exec.set_child_graph_node(run_child, &other)?;
    exec.launch(&s)?;
    s.synchronize()?;
    ensure_eq!(copy.to_vec()?, vec![21; 256]);
    // A clone runs the same nodes.
    let clone = parent.try_clone()?;
    ensure_eq!(clone.nodes()?.len(), 3);
    let found = clone.find_in_clone(run_child)?;
    ensure_eq!(found.node_type()?, NodeType::ChildGraph);
    Ok(())
}

fn event_record_and_wait_nodes() -> TestResult {
    let ctx = context()?;
    let (s1, s2) = (stream(&ctx)?, stream(&ctx)?);
    let data = Arc::new(DeviceBuffer::<u32>::zeroed(&s1, 256)?);
    let copy = Arc::new(DeviceBuffer::<u32>::zeroed(&s1, 256)?);
    s1.synchronize()?;
    let done = Arc::new(Event::new(&ctx, EventFlags::DISABLE_TIMING)?);
    let recorder = Graph::new(&ctx)?;
    let fill = recorder.add_memset_node(&[], &GraphSlice::whole(&data), 5u32)?;
    let record = recorder.add_event_record_node(&[fill], &done)?;
    ensure_eq!(record.node_type()?, NodeType::EventRecord);
    recorder.instantiate(InstantiateFlags::empty())?.launch(&s1)?;
    done.synchronize()?;
    ensure!(done.query()?, "the recorded event completed");
    ensure_eq!(data.to_vec()?, vec![5; 256]);

    // A wait node orders the copy after work recorded on another stream.
    let ready = Arc::new(Event::new(&ctx, EventFlags::DISABLE_TIMING)?);
    let mut source = DeviceBuffer::<u32>::zeroed(&s1, 256)?;
    source.view_mut().memset_d32_async(8, &s1)?;
    ready.record(&s1)?;
    let source = Arc::new(source);
    let waiter = Graph::new(&ctx)?;
    let wait = waiter.add_event_wait_node(&[], &ready)?;
    ensure_eq!(wait.node_type()?, NodeType::EventWait);
    waiter.add_memcpy_node(&[wait], &GraphSlice::whole(&copy), &GraphSlice::whole(&source))?;
    waiter.instantiate(InstantiateFlags::empty())?.launch(&s2)?;
    s2.synchronize()?;
    ensure_eq!(copy.to_vec()?, vec![8; 256]);
    Ok(())
}

fn allocation_and_free_nodes_give_graph_owned_memory() -> TestResult {
    let ctx = context()?;
    let s = stream(&ctx)?;
    let out = Arc::new(DeviceBuffer::<u32>::zeroed(&s, 512)?);
    s.synchronize()?;
    let graph = Graph::new(&ctx)?;
    let (alloc, ptr) = graph.add_mem_alloc_node(&[], 512 * 4)?;
    ensure!(ptr != 0, "the allocation node has an address");
    // SAFETY: the graph's own allocation, used only between its allocation and free nodes.
    let scratch = unsafe { GraphSlice::<u32>::from_raw(ptr, 512) };
    let fill = graph.add_memset_node(&[alloc], &scratch, 11u32)?;
    let copy = graph.add_memcpy_node(&[fill], &GraphSlice::whole(&out), &scratch)?;
    // SAFETY: the graph's own allocation, not a `GraphBuffer`, freed by this node only, after
    // the nodes that use it.
    let free = unsafe { graph.add_mem_free_node(&[copy], ptr) }?;
    ensure_eq!(alloc.node_type()?, NodeType::MemAlloc);
    ensure_eq!(free.node_type()?, NodeType::MemFree);
    let exec = graph.instantiate(InstantiateFlags::AUTO_FREE_ON_LAUNCH)?;
    ensure_eq!(exec.flags()?, InstantiateFlags::AUTO_FREE_ON_LAUNCH);
    for _ in 0..2 {
        exec.launch(&s)?;
    }
    s.synchronize()?;
    ensure_eq!(out.to_vec()?, vec![11; 512]);
    ensure!(graph.add_mem_alloc_node(&[], 0).is_err(), "zero bytes are refused");
    // The graph allocator reserved at least the allocation while the graph ran.
    let device = ctx.device();
    let usage = memory_usage(&device)?;
    ensure!(usage.reserved_high >= 512 * 4 && usage.used_high >= 512 * 4, "{usage:?}");
    drop(exec);
    trim_memory(&device)?;
    reset_memory_high_watermarks(&device)?;
    Ok(())
}

fn node_queries_and_dependencies() -> TestResult {
    let ctx = context()?;
    let graph = Graph::new(&ctx)?;
    let a = graph.add_empty_node(&[])?;
    let b = graph.add_empty_node(&[a])?;
    let c = graph.add_empty_node(&[a])?;
    let d = graph.add_empty_node(&[b, c])?;
    ensure_eq!(graph.nodes()?.len(), 4);
    ensure_eq!(graph.root_nodes()?, vec![a]);
    ensure_eq!(a.dependents()?.len(), 2);
    ensure_eq!(d.dependencies()?.len(), 2);
    graph.remove_dependency(b, d, EdgeKind::Full)?;
    ensure_eq!(d.dependencies()?, vec![c]);
    ensure_eq!(b.dependents()?, Vec::new());
    graph.add_dependency(b, d, EdgeKind::Full)?;
    ensure_eq!(d.dependencies()?.len(), 2);
    ensure_eq!(d.node_type()?, NodeType::Empty);
    Ok(())
}

fn programmatic_edges_join_kernel_nodes() -> TestResult {
    let ctx = context()?;
    let major =
        ctx.device().attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    if major < 9 {
        return Ok(()); // programmatic dependencies need compute capability 9.0
    }
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let add = module.function("add_u32")?;
    let s = stream(&ctx)?;
    let mut first = DeviceBuffer::<u32>::zeroed(&s, N as usize)?;
    let mut second = DeviceBuffer::<u32>::zeroed(&s, N as usize)?;
    let mut third = DeviceBuffer::<u32>::zeroed(&s, N as usize)?;
    s.synchronize()?;
    let config = LaunchConfig::for_elements(N, 256);
    let (n, one, two, three) = (N, 1u32, 2u32, 3u32);
    let graph = Graph::new(&ctx)?;
    // SAFETY: add_u32 takes (u32*, u32, u32); the buffers hold N words each and outlive the
    // executable graph. The kernels touch different buffers, so early starts are harmless.
    let (a, b, c) = unsafe {
        (
            graph.add_kernel_node(&[], &add, &config, (&mut first, &n, &one))?,
            graph.add_kernel_node(&[], &add, &config, (&mut second, &n, &two))?,
            graph.add_kernel_node(&[], &add, &config, (&mut third, &n, &three))?,
        )
    };
    graph.add_dependency(a, b, EdgeKind::Programmatic)?;
    graph.add_dependency(b, c, EdgeKind::LaunchOrder)?;
    ensure_eq!(b.dependencies()?, vec![a]);
    ensure_eq!(c.dependencies()?, vec![b]);
    ensure_eq!(b.dependency_edges()?, vec![(a, EdgeKind::Programmatic)]);
    ensure_eq!(b.dependent_edges()?, vec![(c, EdgeKind::LaunchOrder)]);
    ensure_eq!(graph.root_nodes()?, vec![a]);
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    exec.launch(&s)?;
    s.synchronize()?;
    drop(exec);
    ensure_eq!(first.to_vec()?, vec![1; N as usize]);
    ensure_eq!(second.to_vec()?, vec![2; N as usize]);
    ensure_eq!(third.to_vec()?, vec![3; N as usize]);
    Ok(())
}

fn kernel_node_arguments_are_updated_then_relaunched() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let add = module.function("add_u32")?;
    let s = stream(&ctx)?;
    let mut first = DeviceBuffer::from_slice(&s, &range(N))?;
    let mut second = DeviceBuffer::<u32>::zeroed(&s, N as usize)?;
    s.synchronize()?;
    let config = LaunchConfig::for_elements(N, 256);
    let (n, one, ten) = (N, 1u32, 10u32);
    let graph = Graph::new(&ctx)?;
    // SAFETY: add_u32 takes (u32*, u32, u32); both buffers hold N words and outlive `exec`.
    let node = unsafe { graph.add_kernel_node(&[], &add, &config, (&mut first, &n, &one))? };
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    exec.launch(&s)?;
    // SAFETY: as above.
    unsafe { exec.set_kernel_node_args(node, &add, &config, (&mut second, &n, &ten))? };
    exec.launch(&s)?;
    exec.launch(&s)?;
    s.synchronize()?;
    // SAFETY: refused before the call: one argument too few.
    let wrong = unsafe { exec.set_kernel_node_args(node, &add, &config, (&mut second, &n)) };
    ensure!(matches!(wrong, Err(Error::InvalidArgument { .. })), "{wrong:?}");
    drop(exec);
    ensure_eq!(first.to_vec()?, (0..N).map(|i| i + 1).collect::<Vec<_>>());
    ensure_eq!(second.to_vec()?, vec![20; N as usize]);
    Ok(())
}

fn whole_graph_update_and_its_refusal_as_a_typed_error() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let add = module.function("add_u32")?;
    let s = stream(&ctx)?;
    let mut data = DeviceBuffer::<u32>::zeroed(&s, N as usize)?;
    s.synchronize()?;
    let config = LaunchConfig::for_elements(N, 256);
    let (n, one, seven) = (N, 1u32, 7u32);
    let build = |values: &[&u32], data: &mut DeviceBuffer<u32>| -> Result<Graph, Error> {
        let graph = Graph::new(&ctx)?;
        let mut previous = Vec::new();
        for value in values {
            // SAFETY: add_u32 takes (u32*, u32, u32); `data` holds N words and outlives the
            // executable graph.
            let node = unsafe { graph.add_kernel_node(&previous, &add, &config, (&mut *data, &n, *value))? };
            previous = vec![node];
        }
        drop(previous);
        Ok(graph)
    };
    let original = build(&[&one], &mut data)?;
    let exec = original.instantiate(InstantiateFlags::empty())?;
    exec.launch(&s)?;
    let same_shape = build(&[&seven], &mut data)?;
    exec.update(&same_shape)?;
    exec.launch(&s)?;
    let two_nodes = build(&[&one, &one], &mut data)?;
    let refused = exec.update(&two_nodes);
    ensure!(
        matches!(
            refused,
            Err(Error::GraphUpdate { result, .. })
                if result == sys::CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED
        ),
        "{refused:?}"
    );
    // Unchanged by the refusal: still adds 7.
    exec.launch(&s)?;
    s.synchronize()?;
    drop(exec);
    ensure_eq!(data.to_vec()?, vec![15; N as usize]);
    Ok(())
}

fn refused_instantiation_is_a_typed_error() -> TestResult {
    let ctx = context()?;
    let graph = Graph::new(&ctx)?;
    graph.add_empty_node(&[])?;
    // A conditional handle that no conditional node uses.
    graph.conditional_handle(None)?;
    let refused = graph.instantiate(InstantiateFlags::empty());
    ensure!(
        matches!(
            refused,
            Err(Error::GraphInstantiate { result, .. })
                if result == sys::CUgraphInstantiateResult::CUDA_GRAPH_INSTANTIATE_CONDITIONAL_HANDLE_UNUSED
        ),
        "{refused:?}"
    );
    // The context stays usable.
    let fine = Graph::new(&ctx)?;
    fine.add_empty_node(&[])?;
    fine.instantiate(InstantiateFlags::empty())?.launch(&stream(&ctx)?)?;
    ctx.synchronize()?;
    Ok(())
}

fn disabled_nodes_do_nothing_until_enabled() -> TestResult {
    let ctx = context()?;
    let s = stream(&ctx)?;
    let data = Arc::new(DeviceBuffer::<u32>::zeroed(&s, 128)?);
    s.synchronize()?;
    let graph = Graph::new(&ctx)?;
    let fill = graph.add_memset_node(&[], &GraphSlice::whole(&data), 3u32)?;
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    ensure!(exec.is_node_enabled(fill)?, "nodes start enabled");
    exec.set_node_enabled(fill, false)?;
    ensure!(!exec.is_node_enabled(fill)?, "disabled");
    exec.launch(&s)?;
    s.synchronize()?;
    ensure_eq!(data.to_vec()?, vec![0; 128]);
    exec.set_node_enabled(fill, true)?;
    exec.launch(&s)?;
    s.synchronize()?;
    ensure_eq!(data.to_vec()?, vec![3; 128]);
    Ok(())
}

fn memset_memcpy_host_and_event_nodes_are_updated() -> TestResult {
    let ctx = context()?;
    let s = stream(&ctx)?;
    let a = Arc::new(DeviceBuffer::<u32>::zeroed(&s, 64)?);
    let b = Arc::new(DeviceBuffer::<u32>::zeroed(&s, 64)?);
    let copy = Arc::new(DeviceBuffer::<u32>::zeroed(&s, 64)?);
    s.synchronize()?;
    let (first_event, second_event) = (
        Arc::new(Event::new(&ctx, EventFlags::DISABLE_TIMING)?),
        Arc::new(Event::new(&ctx, EventFlags::DISABLE_TIMING)?),
    );
    let hits = Arc::new(AtomicU32::new(0));
    let graph = Graph::new(&ctx)?;
    let fill = graph.add_memset_node(&[], &GraphSlice::whole(&a), 1u32)?;
    let copy_node = graph.add_memcpy_node(&[fill], &GraphSlice::whole(&copy), &GraphSlice::whole(&a))?;
    let counted = hits.clone();
    let host = graph.add_host_node(&[copy_node], move || {
        counted.fetch_add(1, Ordering::SeqCst);
    })?;
    let record = graph.add_event_record_node(&[host], &first_event)?;
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    exec.set_memset_node(fill, &GraphSlice::whole(&b), 6u32)?;
    exec.set_memcpy_node(copy_node, &GraphSlice::whole(&copy), &GraphSlice::whole(&b))?;
    let counted = hits.clone();
    exec.set_host_node(host, move || {
        counted.fetch_add(100, Ordering::SeqCst);
    })?;
    exec.set_event_record_node(record, &second_event)?;
    exec.launch(&s)?;
    s.synchronize()?;
    ensure_eq!(a.to_vec()?, vec![0; 64], "the old memset destination is untouched");
    ensure_eq!(b.to_vec()?, vec![6; 64]);
    ensure_eq!(copy.to_vec()?, vec![6; 64]);
    ensure_eq!(hits.load(Ordering::SeqCst), 100);
    ensure!(second_event.query()?, "the new event was recorded");
    Ok(())
}

fn dot_output_names_every_node() -> TestResult {
    let ctx = context()?;
    let module = Arc::new(Module::from_ptx(&ctx, kernels::PTX)?);
    let nothing = module.function("nothing")?;
    let s = stream(&ctx)?;
    let data = Arc::new(DeviceBuffer::<u32>::zeroed(&s, 16)?);
    s.synchronize()?;
    let graph = Graph::new(&ctx)?;
    let start = graph.add_empty_node(&[])?;
    let fill = graph.add_memset_node(&[start], &GraphSlice::whole(&data), 1u32)?;
    // SAFETY: `nothing` takes no parameters.
    let kernel = unsafe { graph.add_kernel_node(&[start], &nothing, &LaunchConfig::new(1, 1), ())? };
    graph.add_host_node(&[fill, kernel], || {})?;
    graph.keep(module.clone());
    let dot = graph.to_dot(DotFlags::VERBOSE)?;
    ensure!(dot.contains("digraph"), "{dot}");
    ensure!(dot.contains("nothing"), "the kernel node names its function: {dot}");
    for i in 0..4 {
        ensure!(dot.contains(&format!("node_{i}")), "node {i} is missing: {dot}");
    }
    ensure!(dot.matches("->").count() >= 4, "four edges: {dot}");
    let path = std::env::temp_dir().join(format!("cuda-core-graph-test-{}.dot", std::process::id()));
    graph.write_dot(&path, DotFlags::empty())?;
    let written = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&path);
    ensure!(written.contains("digraph"), "{written}");
    Ok(())
}

fn graphs_keep_buffers_and_modules_alive() -> TestResult {
    let ctx = context()?;
    let s = stream(&ctx)?;
    let source = Arc::new(DeviceBuffer::from_slice(&s, &range(256))?);
    let out = Arc::new(DeviceBuffer::<u32>::zeroed(&s, 256)?);
    s.synchronize()?;
    let module = Arc::new(Module::from_ptx(&ctx, kernels::PTX)?);
    let exec = {
        let graph = Graph::new(&ctx)?;
        graph.add_memcpy_node(&[], &GraphSlice::whole(&out), &GraphSlice::whole(&source))?;
        graph.keep(module.clone());
        ensure_eq!(Arc::strong_count(&source), 2);
        graph.instantiate(InstantiateFlags::empty())?
    };
    // The graph is gone and this test lets go of the source: the executable graph keeps it.
    let weak = Arc::downgrade(&source);
    drop(source);
    ensure!(weak.upgrade().is_some(), "the executable graph keeps the source buffer");
    ensure_eq!(Arc::strong_count(&module), 2);
    exec.launch(&s)?;
    exec.launch(&s)?;
    drop(exec);
    // Dropping a launched executable graph waits for its work before letting go.
    ensure!(weak.upgrade().is_none(), "the buffer is released with the last executable graph");
    ensure_eq!(Arc::strong_count(&module), 1);
    ensure_eq!(out.to_vec()?, range(256));
    Ok(())
}

/// Where the device runtime library may be, for kernels whose PTX the JIT alone cannot link.
fn cudadevrt() -> Option<PathBuf> {
    let mut roots: Vec<PathBuf> =
        ["CUDA_HOME", "CUDA_PATH"].iter().filter_map(std::env::var_os).map(PathBuf::from).collect();
    roots.push(PathBuf::from("/usr/local/cuda"));
    roots.into_iter().map(|r| r.join("lib64").join("libcudadevrt.a")).find(|p| p.exists())
}

/// The conditional kernels: loaded directly when the JIT resolves `cudaGraphSetConditional`
/// itself, else linked with the device runtime library (`libcudadevrt.a`).
fn conditional_module(ctx: &Context) -> Result<Module, String> {
    let direct = match Module::from_ptx(ctx, kernels::PTX_CONDITIONAL) {
        Ok(module) => return Ok(module),
        Err(e) => e,
    };
    let Some(library) = cudadevrt() else {
        return Err(format!(
            "the JIT did not link cudaGraphSetConditional ({direct}) and libcudadevrt.a was not found under $CUDA_HOME, $CUDA_PATH or /usr/local/cuda"
        ));
    };
    let linked = || -> Result<Module, Error> {
        let mut linker = Linker::new(ctx, &JitOptions::new())?;
        linker.add_ptx("conditional", kernels::PTX_CONDITIONAL)?;
        linker.add_file(JitInputType::Library, &library)?;
        let cubin = linker.complete()?.to_vec();
        Module::from_cubin(ctx, &cubin)
    };
    linked().map_err(|e| {
        format!(
            "loading the conditional kernels failed ({direct}), and linking them with {} too: {e}",
            library.display()
        )
    })
}

fn conditional_kernels_available() -> Result<(), String> {
    let ctx = context().map_err(|e| e.to_string())?;
    conditional_module(&ctx).map(|_| ())
}

fn while_node_loops_a_kernel_n_times() -> TestResult {
    let ctx = context()?;
    let module = conditional_module(&ctx)?;
    let count_below = module.function("count_below")?;
    let s = stream(&ctx)?;
    let counter = Arc::new(DeviceBuffer::<u32>::zeroed(&s, 1)?);
    s.synchronize()?;
    let graph = Graph::new(&ctx)?;
    let reset = graph.add_memset_node(&[], &GraphSlice::whole(&counter), 0u32)?;
    // Start each launch with the loop condition set, so the body runs at least once.
    let handle = graph.conditional_handle(Some(1))?;
    let loop_node = graph.add_conditional_node(&[reset], handle, ConditionalKind::While)?;
    ensure_eq!(loop_node.node.node_type()?, NodeType::Conditional);
    ensure_eq!(loop_node.bodies.len(), 1);
    let limit = 17u32;
    let counter_ptr = counter.as_raw();
    // SAFETY: count_below takes (u64 handle, u32* counter, u32 limit); `counter` is kept by
    // the graph (through the memset node) and the module outlives the executable graph.
    unsafe {
        loop_node.bodies[0].add_kernel_node(
            &[],
            &count_below,
            &LaunchConfig::new(1, 1),
            (&handle, &counter_ptr, &limit),
        )?
    };
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    for _ in 0..2 {
        exec.launch(&s)?;
        s.synchronize()?;
        ensure_eq!(counter.to_vec()?, vec![limit], "the body ran once per iteration");
    }
    drop(exec);
    Ok(())
}

fn switch_node_picks_one_of_three_bodies() -> TestResult {
    let ctx = context()?;
    let module = conditional_module(&ctx)?;
    let set_from = module.function("set_from")?;
    let s = stream(&ctx)?;
    let out = Arc::new(DeviceBuffer::<u32>::zeroed(&s, 4)?);
    let mut selector = DeviceBuffer::<u32>::zeroed(&s, 1)?;
    s.synchronize()?;
    let graph = Graph::new(&ctx)?;
    let clear = graph.add_memset_node(&[], &GraphSlice::whole(&out), 0u32)?;
    let handle = graph.conditional_handle(None)?;
    // SAFETY: set_from takes (u64 handle, const u32* value); `selector` outlives the
    // executable graph and the module too.
    let choose = unsafe {
        graph.add_kernel_node(&[clear], &set_from, &LaunchConfig::new(1, 1), (&handle, &selector))?
    };
    let switch = graph.add_conditional_node(&[choose], handle, ConditionalKind::Switch(3))?;
    ensure_eq!(switch.bodies.len(), 3);
    for (case, body) in switch.bodies.iter().enumerate() {
        body.add_memset_node(&[], &GraphSlice::whole(&out), 100 + case as u32)?;
    }
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    for case in 0..4u32 {
        selector.copy_from(&[case])?;
        exec.launch(&s)?;
        s.synchronize()?;
        let expected = if case < 3 { 100 + case } else { 0 };
        ensure_eq!(out.to_vec()?, vec![expected; 4], "selector {case}");
    }
    drop(exec);
    Ok(())
}

fn if_node_runs_its_body_when_set() -> TestResult {
    let ctx = context()?;
    let module = conditional_module(&ctx)?;
    let set_from = module.function("set_from")?;
    let s = stream(&ctx)?;
    let out = Arc::new(DeviceBuffer::<u32>::zeroed(&s, 4)?);
    let mut flag = DeviceBuffer::<u32>::zeroed(&s, 1)?;
    s.synchronize()?;
    let graph = Graph::new(&ctx)?;
    let clear = graph.add_memset_node(&[], &GraphSlice::whole(&out), 0u32)?;
    let handle = graph.conditional_handle(Some(0))?;
    // SAFETY: as in the SWITCH test.
    let set =
        unsafe { graph.add_kernel_node(&[clear], &set_from, &LaunchConfig::new(1, 1), (&handle, &flag))? };
    let branch = graph.add_conditional_node(&[set], handle, ConditionalKind::If)?;
    branch.bodies[0].add_memset_node(&[], &GraphSlice::whole(&out), 42u32)?;
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    for value in [0u32, 1, 0] {
        flag.copy_from(&[value])?;
        exec.launch(&s)?;
        s.synchronize()?;
        ensure_eq!(out.to_vec()?, vec![if value != 0 { 42 } else { 0 }; 4], "flag {value}");
    }
    drop(exec);
    Ok(())
}

/// A struct that holds its stream and buffer records its own work into a graph: the capture
/// borrows nothing, so `&mut self` methods queue the work while it runs.
struct Step {
    stream: Stream,
    data: DeviceBuffer<u32>,
}

impl Step {
    fn enqueue(&mut self, value: u32) -> Result<(), Error> {
        self.data.view_mut().memset_d32_async(value, &self.stream)
    }

    fn record(&mut self) -> Result<Graph, Error> {
        let capture = self.stream.begin_capture(CaptureMode::ThreadLocal)?;
        self.enqueue(9)?;
        capture.end()
    }
}

fn capture_from_a_struct_that_holds_its_stream() -> TestResult {
    let ctx = Context::primary(&Device::get(0)?)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let mut step = Step { data: DeviceBuffer::zeroed(&stream, 1024)?, stream };
    let graph = step.record()?;
    ensure_eq!(step.data.to_vec()?, vec![0u32; 1024], "the captured memset ran at capture");
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    exec.launch(&step.stream)?;
    ensure_eq!(step.data.to_vec()?, vec![9u32; 1024]);
    step.enqueue(3)?;
    exec.launch(&step.stream)?;
    ensure_eq!(step.data.to_vec()?, vec![9u32; 1024], "the replay did not run after the new memset");
    drop((exec, graph));
    Ok(())
}
