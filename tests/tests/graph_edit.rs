//! Editing CUDA graphs: node parameters read back for every kind, new parameters set on a
//! graph's nodes (and on an executable graph's), nodes and edges removed, edge data round
//! trips, and user objects whose values live exactly as long as the graphs that hold them.

#[path = "kernels/graph.rs"]
mod kernels;

use cuda_tests::{TestResult, ensure, ensure_eq, gpu};
use cuhost::driver_sys as sys;
use cuhost::graph::{EdgeKind, Graph, GraphSlice, InstantiateFlags, NodeType, UserObject};
use cuhost::module::Module;
use cuhost::{Context, Device, DeviceBuffer, Error, Event, EventFlags, LaunchConfig, Stream, StreamFlags};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

fn main() {
    cuda_tests::run(&[
        gpu("every_node_kind_reads_back_its_parameters", every_node_kind_reads_back_its_parameters),
        gpu("graph_setters_change_later_instantiations_only", graph_setters_change_later_instantiations_only),
        gpu("a_kernel_node_of_the_graph_gets_new_arguments", a_kernel_node_of_the_graph_gets_new_arguments),
        gpu("setters_refuse_nodes_of_another_graph", setters_refuse_nodes_of_another_graph),
        gpu("a_child_graph_is_edited_through_its_node", a_child_graph_is_edited_through_its_node),
        gpu(
            "destroyed_nodes_and_removed_edges_leave_the_graph",
            destroyed_nodes_and_removed_edges_leave_the_graph,
        ),
        gpu("edge_data_round_trips", edge_data_round_trips),
        gpu("user_object_outlives_graph_exec_and_clone", user_object_outlives_graph_exec_and_clone),
        gpu(
            "values_kept_as_user_objects_follow_child_graphs",
            values_kept_as_user_objects_follow_child_graphs,
        ),
    ]);
}

const N: u32 = 256;

fn context() -> Result<Context, Error> {
    Context::primary(&Device::get(0)?)
}

fn stream(ctx: &Context) -> Result<Stream, Error> {
    Stream::new(ctx, StreamFlags::NON_BLOCKING)
}

/// Counts its drops.
struct Counted(Arc<AtomicU32>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Waits up to ten seconds for `count` to reach `value` (user objects' values are dropped on
/// another thread, soon after their last reference goes).
fn reaches(count: &AtomicU32, value: u32) -> bool {
    let start = Instant::now();
    while count.load(Ordering::SeqCst) != value {
        if start.elapsed() > Duration::from_secs(10) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    true
}

/// Whether `count` stays at `value` for a while: what a value still alive looks like.
fn stays(count: &AtomicU32, value: u32) -> bool {
    std::thread::sleep(Duration::from_millis(100));
    count.load(Ordering::SeqCst) == value
}

fn every_node_kind_reads_back_its_parameters() -> TestResult {
    let ctx = context()?;
    let module = Arc::new(Module::from_ptx(&ctx, kernels::PTX)?);
    let add = module.function("add_u32")?;
    let s = stream(&ctx)?;
    let mut data = DeviceBuffer::<u32>::zeroed(&s, N as usize)?;
    let a = Arc::new(DeviceBuffer::<u32>::zeroed(&s, N as usize)?);
    let b = Arc::new(DeviceBuffer::<u32>::zeroed(&s, N as usize)?);
    s.synchronize()?;
    let graph = Graph::new(&ctx)?;
    let config = LaunchConfig::new(2u32, 128u32).shared_mem_bytes(64).priority(0);
    let (n, one) = (N, 1u32);
    // SAFETY: add_u32 takes (u32*, u32, u32); `data` holds N words and outlives the graph,
    // which is never launched.
    let kernel = unsafe { graph.add_kernel_node(&[], &add, &config, (&mut data, &n, &one))? };
    let k = kernel.kernel_params()?;
    ensure_eq!(
        (k.function, k.grid, k.block, k.shared_mem_bytes),
        (add.as_raw(), config.grid, config.block, 64)
    );
    ensure_eq!(kernel.kernel_priority()?, 0);
    ensure!(!kernel.kernel_cooperative()?, "not cooperative");

    let memset = graph.add_memset_node(&[kernel], &GraphSlice::new(&a, 16..80)?, 0xabcd_u16 as u32)?;
    let m = memset.memset_params()?;
    ensure_eq!((m.dst, m.value, m.element_size, m.width, m.height), (a.as_raw() + 64, 0xabcd, 4, 64, 1));

    let memcpy = graph.add_memcpy_node(&[memset], &GraphSlice::whole(&b), &GraphSlice::whole(&a))?;
    let c = memcpy.memcpy_params()?;
    ensure_eq!((c.src_device(), c.dst_device()), (Some(a.as_raw()), Some(b.as_raw())));
    ensure_eq!((c.width_in_bytes(), c.height(), c.depth()), (N as usize * 4, 1, 1));
    ensure_eq!(c.src_memory_type(), sys::CUmemorytype::CU_MEMORYTYPE_DEVICE);

    let host = graph.add_host_node(&[memcpy], || {})?;
    let h = host.host_params()?;
    ensure!(h.function.is_some() && !h.user_data.is_null(), "{h:?}");

    let event = Arc::new(Event::new(&ctx, EventFlags::DISABLE_TIMING)?);
    let record = graph.add_event_record_node(&[host], &event)?;
    let wait = graph.add_event_wait_node(&[record], &event)?;
    ensure_eq!(record.recorded_event()?, event.as_raw());
    ensure_eq!(wait.awaited_event()?, event.as_raw());

    let (alloc, ptr) = graph.add_mem_alloc_node(&[wait], 4096)?;
    // SAFETY: the graph's own allocation, not a `GraphBuffer`, freed by this node only; the
    // graph is never launched.
    let free = unsafe { graph.add_mem_free_node(&[alloc], ptr) }?;
    let p = alloc.mem_alloc_params()?;
    ensure_eq!((p.address, p.bytes, p.device), (ptr, 4096, ctx.device().ordinal() as i32));
    ensure_eq!(free.mem_free_address()?, ptr);

    let child = Graph::new(&ctx)?;
    child.add_empty_node(&[])?;
    child.add_empty_node(&[])?;
    let child_node = graph.add_child_graph_node(&[free], &child)?;
    ensure_eq!(graph.child_graph(child_node)?.nodes()?.len(), 2);
    let empty = graph.add_empty_node(&[child_node])?;
    ensure_eq!(empty.node_type()?, NodeType::Empty);

    // A getter of another kind is the driver's refusal, not a wrong value.
    ensure!(matches!(empty.memset_params(), Err(Error::Driver { .. })), "an empty node has no memset");
    ensure!(matches!(memset.kernel_params(), Err(Error::Driver { .. })), "a memset node has no kernel");
    Ok(())
}

fn graph_setters_change_later_instantiations_only() -> TestResult {
    let ctx = context()?;
    let s = stream(&ctx)?;
    let (a, b, copy) = (
        Arc::new(DeviceBuffer::<u32>::zeroed(&s, N as usize)?),
        Arc::new(DeviceBuffer::<u32>::zeroed(&s, N as usize)?),
        Arc::new(DeviceBuffer::<u32>::zeroed(&s, N as usize)?),
    );
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
    let before = graph.instantiate(InstantiateFlags::empty())?;

    // New parameters on the graph's nodes; the new buffer is held only by the graph.
    let fresh = Arc::new(DeviceBuffer::<u32>::zeroed(&s, N as usize)?);
    s.synchronize()?;
    graph.set_memset_node(fill, &GraphSlice::whole(&b), 6u32)?;
    graph.set_memcpy_node(copy_node, &GraphSlice::whole(&fresh), &GraphSlice::whole(&b))?;
    let fresh_weak = Arc::downgrade(&fresh);
    drop(fresh);
    let counted = hits.clone();
    graph.set_host_node(host, move || {
        counted.fetch_add(100, Ordering::SeqCst);
    })?;
    graph.set_event_record_node(record, &second_event)?;
    ensure_eq!(fill.memset_params()?.value, 6);
    ensure_eq!(fill.memset_params()?.dst, b.as_raw());
    ensure_eq!(record.recorded_event()?, second_event.as_raw());

    let after = graph.instantiate(InstantiateFlags::empty())?;
    after.launch(&s)?;
    s.synchronize()?;
    ensure_eq!(b.to_vec()?, vec![6; N as usize]);
    let Some(fresh) = fresh_weak.upgrade() else {
        return Err("the graph let go of the buffer a setter gave it".into());
    };
    ensure_eq!(fresh.to_vec()?, vec![6; N as usize]);
    ensure_eq!(a.to_vec()?, vec![0; N as usize], "the old memset destination is untouched");
    ensure_eq!(hits.load(Ordering::SeqCst), 100);
    ensure!(second_event.query()?, "the new event was recorded");

    // The executable graph made before still runs the old parameters.
    before.launch(&s)?;
    s.synchronize()?;
    ensure_eq!(a.to_vec()?, vec![1; N as usize]);
    ensure_eq!(copy.to_vec()?, vec![1; N as usize]);
    ensure_eq!(hits.load(Ordering::SeqCst), 101);
    drop(fresh);
    drop((before, after, graph));
    ensure!(fresh_weak.upgrade().is_none(), "the buffer is let go of with the graph");
    Ok(())
}

fn a_kernel_node_of_the_graph_gets_new_arguments() -> TestResult {
    let ctx = context()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let add = module.function("add_u32")?;
    let s = stream(&ctx)?;
    let mut first = DeviceBuffer::<u32>::zeroed(&s, N as usize)?;
    let mut second = DeviceBuffer::<u32>::zeroed(&s, N as usize)?;
    s.synchronize()?;
    let config = LaunchConfig::for_elements(N, 128);
    let (n, one, ten) = (N, 1u32, 10u32);
    let graph = Graph::new(&ctx)?;
    // SAFETY: add_u32 takes (u32*, u32, u32); both buffers hold N words and outlive the graph
    // and its executable graphs.
    let node = unsafe { graph.add_kernel_node(&[], &add, &config, (&mut first, &n, &one))? };
    let other = unsafe { graph.add_kernel_node(&[node], &add, &config, (&mut first, &n, &one))? };
    // SAFETY: as above.
    unsafe { graph.set_kernel_node_args(node, &add, &config.priority(0), (&mut second, &n, &ten))? };
    graph.copy_kernel_node_attributes(other, node)?;
    ensure_eq!(other.kernel_priority()?, 0);
    // SAFETY: refused before the call: one argument too few.
    let wrong = unsafe { graph.set_kernel_node_args(node, &add, &config, (&mut second, &n)) };
    ensure!(matches!(wrong, Err(Error::InvalidArgument { .. })), "{wrong:?}");
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    exec.launch(&s)?;
    s.synchronize()?;
    drop(exec);
    ensure_eq!(first.to_vec()?, vec![1; N as usize], "only the second node still adds to `first`");
    ensure_eq!(second.to_vec()?, vec![10; N as usize]);
    Ok(())
}

fn setters_refuse_nodes_of_another_graph() -> TestResult {
    let ctx = context()?;
    let s = stream(&ctx)?;
    let a = Arc::new(DeviceBuffer::<u32>::zeroed(&s, N as usize)?);
    s.synchronize()?;
    let (one, two) = (Graph::new(&ctx)?, Graph::new(&ctx)?);
    let foreign = two.add_memset_node(&[], &GraphSlice::whole(&a), 1u32)?;
    let host = two.add_host_node(&[], || {})?;
    let kept = one.kept_count();
    let refused = one.set_memset_node(foreign, &GraphSlice::whole(&a), 2u32);
    ensure!(matches!(refused, Err(Error::InvalidArgument { .. })), "{refused:?}");
    let refused = one.set_host_node(host, || {});
    ensure!(matches!(refused, Err(Error::InvalidArgument { .. })), "{refused:?}");
    ensure_eq!(one.kept_count(), kept, "nothing was kept for a foreign node");
    ensure_eq!(foreign.memset_params()?.value, 1, "the foreign node is unchanged");
    Ok(())
}

fn a_child_graph_is_edited_through_its_node() -> TestResult {
    let ctx = context()?;
    let s = stream(&ctx)?;
    let a = Arc::new(DeviceBuffer::<u32>::zeroed(&s, N as usize)?);
    s.synchronize()?;
    let child = Graph::new(&ctx)?;
    child.add_empty_node(&[])?;
    let parent = Graph::new(&ctx)?;
    let node = parent.add_child_graph_node(&[], &child)?;
    drop(child);
    {
        let embedded = parent.child_graph(node)?;
        let root = embedded.root_nodes()?;
        let weak = Arc::downgrade(&a);
        let fill = embedded.add_memset_node(&root, &GraphSlice::whole(&a), 9u32)?;
        ensure_eq!(fill.memset_params()?.value, 9);
        drop(a);
        ensure!(weak.upgrade().is_some(), "the parent keeps what its child's new node uses");
        let exec = parent.instantiate(InstantiateFlags::empty())?;
        exec.launch(&s)?;
        s.synchronize()?;
        let Some(a) = weak.upgrade() else { return Err("the buffer is gone".into()) };
        ensure_eq!(a.to_vec()?, vec![9; N as usize]);
    }
    Ok(())
}

fn destroyed_nodes_and_removed_edges_leave_the_graph() -> TestResult {
    let ctx = context()?;
    let s = stream(&ctx)?;
    let (a, b, c) = (
        Arc::new(DeviceBuffer::<u32>::zeroed(&s, N as usize)?),
        Arc::new(DeviceBuffer::<u32>::zeroed(&s, N as usize)?),
        Arc::new(DeviceBuffer::<u32>::zeroed(&s, N as usize)?),
    );
    s.synchronize()?;
    let mut graph = Graph::new(&ctx)?;
    let (fill_a, fill_b, copy) = {
        let fill_a = graph.add_memset_node(&[], &GraphSlice::whole(&a), 1u32)?;
        let fill_b = graph.add_memset_node(&[fill_a], &GraphSlice::whole(&b), 2u32)?;
        let copy = graph.add_memcpy_node(&[fill_b], &GraphSlice::whole(&c), &GraphSlice::whole(&a))?;
        ensure_eq!(graph.edges()?.len(), 2);
        // The edge fill_a -> fill_b goes; copy must then wait for fill_a itself.
        graph.remove_dependency(fill_a, fill_b, EdgeKind::Full)?;
        graph.add_dependency(fill_a, copy, EdgeKind::Full)?;
        let mut edges = graph.edges()?;
        edges.sort_by_key(|(from, _, _)| from.id());
        let mut expected = vec![(fill_a, copy, EdgeKind::Full), (fill_b, copy, EdgeKind::Full)];
        expected.sort_by_key(|(from, _, _)| from.id());
        ensure_eq!(edges, expected);
        (fill_a.key(), fill_b.key(), copy.key())
    };
    let before = graph.instantiate(InstantiateFlags::empty())?;
    graph.destroy_node(fill_b)?;
    ensure_eq!(graph.node(fill_b)?, None);
    let refused = graph.destroy_node(fill_b);
    ensure!(matches!(refused, Err(Error::InvalidArgument { .. })), "{refused:?}");
    ensure_eq!(graph.nodes()?.len(), 2);
    let (Some(fill_a), Some(copy)) = (graph.node(fill_a)?, graph.node(copy)?) else {
        return Err("the other nodes are gone".into());
    };
    ensure_eq!(graph.edges()?, vec![(fill_a, copy, EdgeKind::Full)]);
    ensure_eq!(copy.dependencies()?, vec![fill_a]);
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    exec.launch(&s)?;
    s.synchronize()?;
    ensure_eq!(a.to_vec()?, vec![1; N as usize]);
    ensure_eq!(c.to_vec()?, vec![1; N as usize]);
    ensure_eq!(b.to_vec()?, vec![0; N as usize], "the destroyed node did not run");
    // The executable graph made before still has it, and what it uses is still kept.
    drop((exec, graph));
    before.launch(&s)?;
    s.synchronize()?;
    ensure_eq!(b.to_vec()?, vec![2; N as usize]);
    Ok(())
}

fn edge_data_round_trips() -> TestResult {
    let ctx = context()?;
    let major =
        ctx.device().attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let nothing = module.function("nothing")?;
    let config = LaunchConfig::new(1u32, 32u32);
    let graph = Graph::new(&ctx)?;
    // SAFETY: `nothing` takes no arguments and touches no memory.
    let (a, b, c) = unsafe {
        (
            graph.add_kernel_node(&[], &nothing, &config, ())?,
            graph.add_kernel_node(&[], &nothing, &config, ())?,
            graph.add_kernel_node(&[], &nothing, &config, ())?,
        )
    };
    // Programmatic edges need compute capability 9.0; full edges work everywhere.
    let (first, second) = if major >= 9 {
        (EdgeKind::Programmatic, EdgeKind::LaunchOrder)
    } else {
        (EdgeKind::Full, EdgeKind::Full)
    };
    graph.add_dependencies(&[(a, b, first), (b, c, second)])?;
    let mut edges = graph.edges()?;
    edges.sort_by_key(|(from, to, _)| (from.id() == b.id(), to.id()));
    // The 580 driver reports a launch-order edge back as a programmatic one (the port of a
    // launch-order edge is a stronger programmatic edge's): accept either for the second.
    let read_second = edges.get(1).map_or(second, |e| e.2);
    let second_ok =
        read_second == second || (second == EdgeKind::LaunchOrder && read_second == EdgeKind::Programmatic);
    ensure!(second_ok, "the second edge reads back as {read_second:?}, not {second:?}");
    ensure_eq!(edges, vec![(a, b, first), (b, c, read_second)]);
    ensure_eq!(b.dependency_edges()?, vec![(a, first)]);
    ensure_eq!(b.dependent_edges()?, vec![(c, read_second)]);
    let s = stream(&ctx)?;
    graph.instantiate(InstantiateFlags::empty())?.launch(&s)?;
    s.synchronize()?;
    graph.remove_dependencies(&[(a, b, first), (b, c, read_second)])?;
    ensure_eq!(graph.edges()?, vec![]);
    ensure_eq!(graph.root_nodes()?.len(), 3);
    // Removing an edge that is not there is the driver's refusal.
    ensure!(graph.remove_dependencies(&[(a, c, EdgeKind::Full)]).is_err(), "no such edge");
    Ok(())
}

fn user_object_outlives_graph_exec_and_clone() -> TestResult {
    let ctx = context()?;
    let s = stream(&ctx)?;
    let drops = Arc::new(AtomicU32::new(0));
    let object = UserObject::new(&ctx, Counted(drops.clone()))?;
    let graph = Graph::new(&ctx)?;
    graph.add_empty_node(&[])?;
    graph.retain_user_object(&object)?;
    let second = object.try_clone()?;
    drop(object);
    drop(second);
    ensure!(stays(&drops, 0), "the graph holds a reference");
    let clone = graph.try_clone()?;
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    exec.launch(&s)?;
    drop(graph);
    ensure!(stays(&drops, 0), "the clone and the executable graph hold references");
    s.synchronize()?;
    drop(exec);
    ensure!(stays(&drops, 0), "the clone holds a reference");
    drop(clone);
    ensure!(reaches(&drops, 1), "the value was not dropped after the last graph went");
    ensure!(stays(&drops, 1), "dropped once");
    Ok(())
}

fn values_kept_as_user_objects_follow_child_graphs() -> TestResult {
    let ctx = context()?;
    let s = stream(&ctx)?;
    let drops = Arc::new(AtomicU32::new(0));
    let buffer = Arc::new(DeviceBuffer::<u32>::zeroed(&s, N as usize)?);
    s.synchronize()?;
    let weak = Arc::downgrade(&buffer);
    let child = Graph::new(&ctx)?;
    child.add_empty_node(&[])?;
    child.keep_as_user_object(Counted(drops.clone()))?;
    // A buffer whose drop frees device memory: dropped on the crate's thread, not the driver's.
    child.keep_as_user_object(buffer)?;
    let parent = Graph::new(&ctx)?;
    parent.add_child_graph_node(&[], &child)?;
    drop(child);
    ensure!(stays(&drops, 0), "the parent's child node holds the child's references");
    let exec = parent.instantiate(InstantiateFlags::empty())?;
    drop(parent);
    exec.launch(&s)?;
    s.synchronize()?;
    ensure!(stays(&drops, 0) && weak.upgrade().is_some(), "the executable graph holds them");
    drop(exec);
    ensure!(reaches(&drops, 1), "the value was not dropped after the executable graph");
    let start = Instant::now();
    while weak.upgrade().is_some() {
        ensure!(start.elapsed() < Duration::from_secs(10), "the buffer was not dropped");
        std::thread::sleep(Duration::from_millis(2));
    }
    ctx.synchronize()?;
    Ok(())
}
