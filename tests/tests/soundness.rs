//! Regression tests of the soundness review: each test is a call sequence that reached
//! undefined behaviour (or lost memory or an error) before it was fixed, in the shape a user hits
//! it, and checks that it no longer does. All are safe calls, except where a test plays another
//! library on the same stream (a capture begun with the raw driver call) or an allocator's user
//! (memory given back through the unsafe allocator interface), and says so. The compile-time holes are `compile_fail` doctests in
//! `cuda-core`; `docs/src/safety.md` says where each rule is tested.

#[path = "kernels/mod.rs"]
mod kernels;

#[path = "soundness/first_use.rs"]
mod first_use;
#[path = "soundness/graph_memory.rs"]
mod graph_memory;
#[path = "soundness/interop_graph.rs"]
mod interop_graph;
#[path = "soundness/local.rs"]
mod local;
#[path = "soundness/pinned_slices.rs"]
mod pinned_slices;
#[path = "soundness/pools.rs"]
mod pools;
#[path = "soundness/streams.rs"]
mod streams;

fn main() {
    let tests: Vec<cuda_tests::Test> = [
        streams::TESTS,
        pools::TESTS,
        local::TESTS,
        interop_graph::TESTS,
        first_use::TESTS,
        pinned_slices::TESTS,
        graph_memory::TESTS,
    ]
    .concat();
    cuda_tests::run(&tests)
}
