//! Soundness regressions (see the parent module): graph-owned memory freed by a free node is
//! freed once (H3).

use cuda_tests::{Test, TestResult, device_zero, ensure, ensure_eq, gpu, no_deferred};
use cuhost::graph::{Graph, GraphSlice, InstantiateFlags};
use cuhost::{DeviceBuffer, Error};
use std::sync::Arc;

/// The tests of this module.
pub const TESTS: &[Test] = &[gpu(
    "h3_a_graph_buffer_freed_by_a_free_node_is_never_freed_again",
    h3_a_graph_buffer_freed_by_a_free_node_is_never_freed_again,
)];

const N: usize = 4096;

// H3. On 86252fa, `Graph::add_mem_free_node` was safe and took any address: given a
// `GraphBuffer`'s, it freed the memory without the buffer knowing, and `free_async` freed it
// again after the launch (a double free of graph memory, which another graph's allocation may
// reuse). It is now `unsafe` (the `compile_fail,E0133` doctest on it), and the safe free node,
// `add_buffer_free_node`, tells the buffer: after each launch, which allocates and frees the
// memory, `free_async` is refused before any call and the buffer is not allocated, a second
// free node is refused, and the relaunches need no free.
fn h3_a_graph_buffer_freed_by_a_free_node_is_never_freed_again() -> TestResult {
    let (_, ctx, s) = device_zero()?;
    let out = Arc::new(DeviceBuffer::<u32>::zeroed(&s, N)?);
    s.synchronize()?;
    let graph = Graph::new(&ctx)?;
    let (alloc, scratch) = graph.add_buffer_alloc_node::<u32>(&[], N)?;
    // SAFETY: the allocation node's memory, used by nodes that depend on that node and that
    // the free node below depends on.
    let slice = unsafe { GraphSlice::<u32>::from_raw(scratch.as_raw(), N) };
    let fill = graph.add_memset_node(&[alloc], &slice, 5u32)?;
    let copy = graph.add_memcpy_node(&[fill], &GraphSlice::whole(&out), &slice)?;
    let free = graph.add_buffer_free_node(&[copy], &scratch)?;
    ensure_eq!(free.mem_free_address()?, scratch.as_raw());
    ensure!(
        matches!(graph.add_buffer_free_node(&[copy], &scratch), Err(Error::InvalidArgument { .. })),
        "a second free node of one allocation is refused"
    );
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    for launch in 0..3 {
        exec.launch(&s)?;
        ensure!(!scratch.is_allocated(), "launch {launch}: the free node freed the memory");
        ensure!(
            matches!(scratch.free_async(&s), Err(Error::InvalidArgument { .. })),
            "launch {launch}: memory a free node frees is not freed again outside the graph"
        );
    }
    s.synchronize()?;
    ensure_eq!(out.to_vec()?, vec![5; N]);
    no_deferred(&ctx)
}
