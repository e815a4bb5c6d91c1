//! The graph patterns of NVIDIA's cuda-samples (simpleCudaGraphs, graphMemoryNodes) through
//! safe API: memcpy nodes between pinned host buffers and the device, a memset through a cast
//! slice, graph-allocated memory freed by a free node and outside the graph, and a host
//! function captured from a stream.

#[path = "kernels/graph.rs"]
mod kernels;

use cuda_tests::{TestResult, ensure, ensure_eq, gpu};
use cuhost::graph::{CaptureMode, Graph, GraphSlice, InstantiateFlags, SharedPinnedBuffer};
use cuhost::{Context, Device, DeviceBuffer, Error, LaunchConfig, Module, PinnedBuffer, Stream, StreamFlags};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

const N: u32 = 1000;

fn main() {
    cuda_tests::run(&[
        gpu(
            "pinned_memcpy_nodes_carry_new_inputs_at_each_launch",
            pinned_memcpy_nodes_carry_new_inputs_at_each_launch,
        ),
        gpu(
            "launches_are_refused_while_the_host_holds_a_pinned_slice",
            launches_are_refused_while_the_host_holds_a_pinned_slice,
        ),
        gpu("memset_node_through_a_cast_slice", memset_node_through_a_cast_slice),
        gpu("graph_buffer_freed_by_a_free_node", graph_buffer_freed_by_a_free_node),
        gpu(
            "graph_buffer_freed_outside_the_graph_after_each_launch",
            graph_buffer_freed_outside_the_graph_after_each_launch,
        ),
        gpu(
            "captured_host_function_runs_at_each_launch_and_lives_with_the_graph",
            captured_host_function_runs_at_each_launch_and_lives_with_the_graph,
        ),
    ]);
}

fn context() -> Result<Context, Error> {
    Context::primary(&Device::get(0)?)
}

fn stream(ctx: &Context) -> Result<Stream, Error> {
    Stream::new(ctx, StreamFlags::NON_BLOCKING)
}

fn is_invalid_argument<T>(r: &Result<T, Error>) -> bool {
    matches!(r, Err(Error::InvalidArgument { .. }))
}

/// simpleCudaGraphs' shape: host to device, a kernel, device to host, launched again with new
/// inputs written between launches through the guards (which wait for the previous launch).
fn pinned_memcpy_nodes_carry_new_inputs_at_each_launch() -> TestResult {
    let ctx = context()?;
    let s = stream(&ctx)?;
    let module = Arc::new(Module::from_ptx(&ctx, kernels::PTX)?);
    let add = module.function("add_u32")?;
    let mut input = SharedPinnedBuffer::new(PinnedBuffer::<u32>::new(N as usize)?)?;
    let output = SharedPinnedBuffer::new(PinnedBuffer::<u32>::new(N as usize)?)?;
    let device = Arc::new(DeviceBuffer::<u32>::zeroed(&s, N as usize)?);
    s.synchronize()?;
    let graph = Graph::new(&ctx)?;
    let up = graph.add_memcpy_from_pinned_node(&[], &GraphSlice::whole(&device), &input)?;
    let (n, five) = (N, 5u32);
    // SAFETY: add_u32 takes (u32*, u32, u32); `device` holds N words and the graph keeps it and
    // the module.
    let kernel = unsafe {
        graph.add_kernel_node(
            &[up],
            &add,
            &LaunchConfig::for_elements(N, 256),
            (&device.as_raw(), &n, &five),
        )?
    };
    graph.add_memcpy_to_pinned_node(&[kernel], &output, &GraphSlice::whole(&device))?;
    graph.keep(module.clone());
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    // A second stream for odd launches: the tracker orders them after the other stream's.
    let other = stream(&ctx)?;
    for step in 0..6u32 {
        {
            let mut slice = input.as_mut_slice()?;
            for (i, v) in slice.iter_mut().enumerate() {
                *v = i as u32 * step;
            }
        }
        exec.launch(if step % 2 == 0 { &s } else { &other })?;
        let result = output.as_slice()?;
        for (i, &v) in result.iter().enumerate() {
            ensure_eq!(v, i as u32 * step + 5, "element {i} of launch {step}");
        }
    }
    drop(exec);
    drop(graph);
    // The graph and executable graph are gone: the buffers are the handles' alone again.
    ensure_eq!(input.as_slice()?.len(), N as usize);
    Ok(())
}

/// The guards keep launches that would race with the host from being queued.
fn launches_are_refused_while_the_host_holds_a_pinned_slice() -> TestResult {
    let ctx = context()?;
    let s = stream(&ctx)?;
    let mut input = SharedPinnedBuffer::new(PinnedBuffer::<u32>::from_fn(64, |i| i as u32)?)?;
    let output = SharedPinnedBuffer::new(PinnedBuffer::<u32>::new(64)?)?;
    let device = Arc::new(DeviceBuffer::<u32>::zeroed(&s, 64)?);
    s.synchronize()?;
    let graph = Graph::new(&ctx)?;
    let up = graph.add_memcpy_from_pinned_node(&[], &GraphSlice::whole(&device), &input)?;
    graph.add_memcpy_to_pinned_node(&[up], &output, &GraphSlice::whole(&device))?;
    let short = Arc::new(DeviceBuffer::<u32>::zeroed(&s, 63)?);
    s.synchronize()?;
    ensure!(
        is_invalid_argument(&graph.add_memcpy_to_pinned_node(&[], &output, &GraphSlice::whole(&short))),
        "lengths that differ are refused"
    );
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    {
        let writing = input.as_mut_slice()?;
        ensure!(is_invalid_argument(&exec.launch(&s)), "a launch reading what the host writes is refused");
        drop(writing);
    }
    {
        let reading = output.as_slice()?;
        ensure!(is_invalid_argument(&exec.launch(&s)), "a launch writing what the host reads is refused");
        drop(reading);
    }
    {
        // Reading an input is no race: the launch only reads it too.
        let reading = input.as_slice()?;
        exec.launch(&s)?;
        ensure_eq!(reading[3], 3);
    }
    ensure_eq!(output.as_slice()?.to_vec(), (0..64).collect::<Vec<u32>>());
    Ok(())
}

/// A memset of bytes over a buffer of words, without `from_raw`.
fn memset_node_through_a_cast_slice() -> TestResult {
    let ctx = context()?;
    let s = stream(&ctx)?;
    let words = Arc::new(DeviceBuffer::<u32>::zeroed(&s, 256)?);
    s.synchronize()?;
    let graph = Graph::new(&ctx)?;
    let bytes = GraphSlice::whole(&words).cast::<u8>()?;
    ensure_eq!(bytes.len(), 1024);
    graph.add_memset_node(&[], &bytes, 0xabu8)?;
    let odd = GraphSlice::new(&words, 0..3)?.cast::<u8>()?;
    ensure!(is_invalid_argument(&odd.cast::<u64>()), "12 bytes are not whole u64s");
    drop(bytes);
    ensure!(Arc::strong_count(&words) >= 2, "the graph keeps the buffer through the cast slice");
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    exec.launch(&s)?;
    s.synchronize()?;
    ensure_eq!(words.to_vec()?, vec![0xabab_abab; 256]);
    Ok(())
}

/// graphMemoryNodes' first half: memory allocated, used by kernels and freed inside the graph.
fn graph_buffer_freed_by_a_free_node() -> TestResult {
    let ctx = context()?;
    let s = stream(&ctx)?;
    let module = Arc::new(Module::from_ptx(&ctx, kernels::PTX)?);
    let add = module.function("add_u32")?;
    let out = Arc::new(DeviceBuffer::<u32>::zeroed(&s, N as usize)?);
    s.synchronize()?;
    let graph = Graph::new(&ctx)?;
    let (alloc, scratch) = graph.add_buffer_alloc_node::<u32>(&[], N as usize)?;
    ensure_eq!(scratch.len(), N as usize);
    let config = LaunchConfig::for_elements(N, 256);
    let (n, seven) = (N, 7u32);
    // The allocation is not zeroed: zero it with a memset first. SAFETY: the slice is the
    // node's memory, used by a node that depends on the allocation node and that the free node
    // below depends on.
    let zero = graph.add_memset_node(
        &[alloc],
        &unsafe { GraphSlice::<u32>::from_raw(scratch.as_raw(), N as usize) },
        0u32,
    )?;
    // SAFETY: add_u32 takes (u32*, u32, u32); the node runs between the allocation and the free
    // node (which depends on the copy below); the module is kept by the graph.
    let fill = unsafe { graph.add_kernel_node(&[zero], &add, &config, (&scratch, &n, &seven))? };
    // SAFETY: the graph memory is read by this node, before the free node.
    let read = graph.add_memcpy_node(&[fill], &GraphSlice::whole(&out), &unsafe {
        GraphSlice::<u32>::from_raw(scratch.as_raw(), N as usize)
    })?;
    graph.add_buffer_free_node(&[read], &scratch)?;
    graph.keep(module.clone());
    graph.keep(out.clone());
    ensure!(
        is_invalid_argument(&scratch.free_async(&s)),
        "memory a free node frees cannot be freed outside the graph"
    );
    let other = Graph::new(&ctx)?;
    ensure!(
        is_invalid_argument(&other.add_buffer_free_node(&[], &scratch)),
        "a free node of another graph is refused"
    );
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    for _ in 0..3 {
        exec.launch(&s)?; // allocates and frees at every launch: relaunching needs no free
    }
    s.synchronize()?;
    ensure_eq!(out.to_vec()?, vec![7; N as usize]);
    ensure!(!scratch.is_allocated(), "a free node's memory is never allocated outside a launch");
    Ok(())
}

/// graphMemoryNodes' second half: memory allocated by the graph, used after the launch and
/// freed outside it; a free before the allocation and a second free are refused, and so is a
/// relaunch before the free.
fn graph_buffer_freed_outside_the_graph_after_each_launch() -> TestResult {
    let ctx = context()?;
    let s = stream(&ctx)?;
    let other = stream(&ctx)?;
    let module = Arc::new(Module::from_ptx(&ctx, kernels::PTX)?);
    let add = module.function("add_u32")?;
    let mul = module.function("mul_u32")?;
    let mut out = DeviceBuffer::<u32>::zeroed(&s, N as usize)?;
    s.synchronize()?;
    let graph = Graph::new(&ctx)?;
    let (alloc, scratch) = graph.add_buffer_alloc_node::<u32>(&[], N as usize)?;
    // SAFETY: the graph's own memory, used after its allocation node and freed outside the
    // graph after the launch.
    let zero = graph.add_memset_node(
        &[alloc],
        &unsafe { GraphSlice::<u32>::from_raw(scratch.as_raw(), N as usize) },
        0u32,
    )?;
    let config = LaunchConfig::for_elements(N, 256);
    let (n, three) = (N, 3u32);
    // SAFETY: add_u32 takes (u32*, u32, u32); the node runs after the allocation, and the
    // memory is freed after the launch; the module is kept by the graph.
    unsafe { graph.add_kernel_node(&[zero], &add, &config, (&scratch, &n, &three))? };
    graph.keep(module.clone());
    ensure!(is_invalid_argument(&scratch.free_async(&s)), "a free before any launch is refused");
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    ensure!(is_invalid_argument(&scratch.free_async(&s)), "a free before the first launch is refused");
    for round in 0..3u32 {
        let launch_on = if round % 2 == 0 { &s } else { &other };
        exec.launch(launch_on)?;
        ensure!(scratch.is_allocated(), "the launch allocated the memory");
        ensure!(
            is_invalid_argument(&exec.launch(launch_on)),
            "a relaunch while the allocation is unfreed is refused"
        );
        // Use the memory after the launch, in stream order on `s`: the free below is queued
        // after this kernel on the same stream. SAFETY: mul_u32 takes (u32*, u32, u32); `s`
        // is ordered after the launch (same stream, or the wait below).
        if launch_on != &s {
            let event = cuhost::Event::new(&ctx, cuhost::EventFlags::DISABLE_TIMING)?;
            event.record(launch_on)?;
            s.wait_event(&event)?;
        }
        let factor = round + 1;
        // SAFETY: see above.
        unsafe { mul.launch(&s, &config, (&scratch, &n, &factor))? };
        // Copy the result out before the free.
        // SAFETY: the memory is allocated until the free queued after this copy on `s`.
        let view = unsafe { cuhost::DeviceView::<u32>::from_raw(&ctx, scratch.as_raw(), N as usize) };
        out.view_mut().copy_from_device_async(&view, &s)?;
        scratch.free_async(&s)?;
        ensure!(!scratch.is_allocated(), "freed");
        ensure!(is_invalid_argument(&scratch.free_async(&s)), "a second free of one allocation is refused");
        s.synchronize()?;
        ensure_eq!(out.to_vec()?, vec![3 * factor; N as usize], "round {round}");
    }
    // With AUTO_FREE_ON_LAUNCH, the executable graph frees its own earlier allocation.
    drop(exec);
    let exec = graph.instantiate(InstantiateFlags::AUTO_FREE_ON_LAUNCH)?;
    exec.launch(&s)?;
    exec.launch(&s)?;
    ensure!(
        is_invalid_argument(&exec.update(&graph)),
        "updating an executable graph with such memory is refused"
    );
    scratch.free_async(&s)?;
    s.synchronize()?;
    Ok(())
}

/// A host function captured from a stream is owned by the graph, runs once per launch, and is
/// dropped with the last graph or executable graph.
#[allow(clippy::panic)] // the host function panics on purpose
fn captured_host_function_runs_at_each_launch_and_lives_with_the_graph() -> TestResult {
    let ctx = context()?;
    let s = stream(&ctx)?;
    let runs = Arc::new(AtomicU32::new(0));
    let counter = runs.clone();
    ensure!(
        is_invalid_argument(&s.launch_replayable_host_func(|| {})),
        "a stream that is not capturing is refused"
    );
    let capture = s.begin_capture(CaptureMode::ThreadLocal)?;
    s.launch_replayable_host_func(move || {
        counter.fetch_add(1, Ordering::SeqCst);
    })?;
    let graph = capture.end()?;
    ensure_eq!(runs.load(Ordering::SeqCst), 0, "capture runs nothing");
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    let second = graph.instantiate(InstantiateFlags::empty())?;
    for _ in 0..4 {
        exec.launch(&s)?;
    }
    second.launch(&s)?;
    s.synchronize()?;
    ensure_eq!(runs.load(Ordering::SeqCst), 5, "once per launch");
    ensure_eq!(Arc::strong_count(&runs), 2, "the closure is alive");
    drop(graph);
    ensure_eq!(Arc::strong_count(&runs), 2, "the executable graphs keep the closure");
    drop(exec);
    ensure_eq!(Arc::strong_count(&runs), 2, "one executable graph still keeps it");
    second.launch(&s)?;
    s.synchronize()?;
    ensure_eq!(runs.load(Ordering::SeqCst), 6);
    drop(second);
    ensure_eq!(Arc::strong_count(&runs), 1, "dropped with the last executable graph");

    // A panic is reported by the next call through the context, and later launches run again.
    let ran = Arc::new(AtomicU32::new(0));
    let seen = ran.clone();
    let capture = s.begin_capture(CaptureMode::ThreadLocal)?;
    s.launch_replayable_host_func(move || {
        if seen.fetch_add(1, Ordering::SeqCst) == 0 {
            panic!("first run fails");
        }
    })?;
    let exec = capture.end()?.instantiate(InstantiateFlags::empty())?;
    exec.launch(&s)?;
    let reported = s.synchronize();
    ensure!(matches!(reported, Err(Error::CallbackPanicked { .. })), "{reported:?}");
    exec.launch(&s)?;
    s.synchronize()?;
    ensure_eq!(ran.load(Ordering::SeqCst), 2);
    Ok(())
}
