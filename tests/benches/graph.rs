//! The host cost of graphs against the raw driver calls on the same graph, in the same run:
//! launching a graph of 100 empty kernels (`GraphExec::launch` vs `cuGraphLaunch`), building
//! and instantiating a 1000-node kernel graph (`Graph::add_kernel_node` + `instantiate` vs
//! `cuGraphAddKernelNode` + `cuGraphInstantiateWithParams`), and updating one kernel node's
//! arguments (`GraphExec::set_kernel_node_args` vs `cuGraphExecKernelNodeSetParams`); and safe
//! capture ([`capture`]): a decode step captured and instantiated, one captured safe call,
//! the launch of a captured graph that holds buffers, and the step's replay against running it
//! eagerly.

#[path = "graph/capture.rs"]
mod capture;
#[path = "../tests/kernels/graph.rs"]
mod kernels;

use cuda_tests::bench::{Row, compare, print_table};
use cuhost::graph::{Graph, GraphExec, InstantiateFlags};
use cuhost::module::{Function, Module};
use cuhost::{Context, Device, DeviceBuffer, LaunchConfig, Stream, StreamFlags};
use cuhost_driver_sys as sys;
use std::ffi::c_void;
use std::time::Instant;

/// Graph launches per timed batch; the stream is drained, untimed, after each batch.
const LAUNCH_BATCH: u32 = 8;
const LAUNCH_ROUNDS: usize = 201;
const KERNELS_PER_LAUNCH: usize = 100;
const BUILD_NODES: usize = 1000;

fn main() {
    if let Err(e) = run() {
        eprintln!("graph benchmark: {e}");
        std::process::exit(1);
    }
}

#[cold]
fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("{what} failed: {e}");
    std::process::exit(1)
}

fn check(call: &str, status: sys::CUresult) {
    if status != sys::CUresult::CUDA_SUCCESS {
        fail(call, status.name().unwrap_or("unknown status"));
    }
}

/// Median nanoseconds per graph launch of `ours` and `raw`, each timed over a batch of
/// launches, the stream drained between batches.
fn measure_launches(name: &str, stream: &Stream, ours: impl Fn(), raw: impl Fn()) -> cuhost::Result<Row> {
    let batch = |f: &dyn Fn()| -> cuhost::Result<f64> {
        let t = Instant::now();
        for _ in 0..LAUNCH_BATCH {
            f();
        }
        let ns = t.elapsed().as_nanos() as f64 / f64::from(LAUNCH_BATCH);
        stream.synchronize()?;
        Ok(ns)
    };
    for _ in 0..5 {
        batch(&ours)?;
        batch(&raw)?;
    }
    let (mut a, mut b) = (Vec::with_capacity(LAUNCH_ROUNDS), Vec::with_capacity(LAUNCH_ROUNDS));
    for r in 0..LAUNCH_ROUNDS {
        if r % 2 == 0 {
            a.push(batch(&ours)?);
            b.push(batch(&raw)?);
        } else {
            b.push(batch(&raw)?);
            a.push(batch(&ours)?);
        }
    }
    Ok(Row::from_rounds(name, a, b))
}

/// The raw parameters of a kernel node of `f` with one block of 32 threads and `params`.
fn raw_params(f: sys::CUfunction, params: *mut *mut c_void) -> sys::CUDA_KERNEL_NODE_PARAMS {
    sys::CUDA_KERNEL_NODE_PARAMS {
        func: f,
        gridDimX: 1,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: 32,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: 0,
        kernelParams: params,
        extra: std::ptr::null_mut(),
        kern: std::ptr::null_mut(),
        ctx: std::ptr::null_mut(),
    }
}

/// A chain of `count` launches of `nothing`, built through this crate.
fn chain(ctx: &Context, nothing: &Function<'_>, count: usize) -> cuhost::Result<Graph> {
    let graph = Graph::new(ctx)?;
    let config = LaunchConfig::new(1, 32);
    let mut previous = None;
    for _ in 0..count {
        let dependencies: &[_] = match &previous {
            Some(node) => std::slice::from_ref(node),
            None => &[],
        };
        // SAFETY: `nothing` takes no parameters; its module outlives the graph.
        previous = Some(unsafe { graph.add_kernel_node(dependencies, nothing, &config, ())? });
    }
    Ok(graph)
}

/// The same chain, built and instantiated with raw calls, then destroyed.
fn raw_chain(f: sys::CUfunction, count: usize) {
    let mut graph = std::ptr::null_mut();
    // SAFETY: one out-parameter.
    check("cuGraphCreate", unsafe { sys::cuGraphCreate(&mut graph, 0) });
    let params = raw_params(f, std::ptr::null_mut());
    let mut previous: sys::CUgraphNode = std::ptr::null_mut();
    for i in 0..count {
        let mut node = std::ptr::null_mut();
        let (deps, n) =
            if i == 0 { (std::ptr::null(), 0) } else { (&previous as *const sys::CUgraphNode, 1) };
        // SAFETY: the graph is live; `previous` is a node of it.
        check("cuGraphAddKernelNode", unsafe {
            sys::cuGraphAddKernelNode(&mut node, graph, deps, n, &params)
        });
        previous = node;
    }
    let mut exec = std::ptr::null_mut();
    let mut instantiate = sys::CUDA_GRAPH_INSTANTIATE_PARAMS {
        flags: 0,
        hUploadStream: std::ptr::null_mut(),
        hErrNode_out: std::ptr::null_mut(),
        result_out: sys::CUgraphInstantiateResult::CUDA_GRAPH_INSTANTIATE_SUCCESS,
    };
    // SAFETY: the graph is live; one out-parameter and the in-out parameters.
    check("cuGraphInstantiateWithParams", unsafe {
        sys::cuGraphInstantiateWithParams(&mut exec, graph, &mut instantiate)
    });
    // SAFETY: both were made above and are destroyed once.
    unsafe {
        check("cuGraphExecDestroy", sys::cuGraphExecDestroy(exec));
        check("cuGraphDestroy", sys::cuGraphDestroy(graph));
    }
}

fn run() -> cuhost::Result<()> {
    let ctx = Context::primary(&Device::get(0)?)?;
    ctx.bind_to_thread()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let nothing = module.function("nothing")?;
    let add = module.function("add_u32")?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let mut rows = Vec::new();

    // One executable graph, launched by both sides.
    let exec: GraphExec = chain(&ctx, &nothing, KERNELS_PER_LAUNCH)?.instantiate(InstantiateFlags::empty())?;
    exec.upload(&stream)?;
    let (raw_exec, raw_stream) = (exec.as_raw(), stream.as_raw());
    rows.push(measure_launches(
        "graph launch, 100 empty kernels",
        &stream,
        || exec.launch(&stream).unwrap_or_else(|e| fail("GraphExec::launch", e)),
        // SAFETY: both handles are live.
        || check("cuGraphLaunch", unsafe { sys::cuGraphLaunch(raw_exec, raw_stream) }),
    )?);

    let f = nothing.as_raw();
    let mut build = compare(
        "build + instantiate, 1000 kernel nodes",
        21,
        1,
        || {
            let graph =
                chain(&ctx, &nothing, BUILD_NODES).unwrap_or_else(|e| fail("Graph::add_kernel_node", e));
            let exec = graph
                .instantiate(InstantiateFlags::empty())
                .unwrap_or_else(|e| fail("Graph::instantiate", e));
            drop(exec);
            drop(graph);
        },
        || raw_chain(f, BUILD_NODES),
    );
    build.name = format!("{} (per graph)", build.name);
    rows.push(build);

    // One kernel node whose arguments both sides set, alternately.
    let n = 256u32;
    let data = DeviceBuffer::<u32>::zeroed(&stream, n as usize)?;
    stream.synchronize()?;
    let graph = Graph::new(&ctx)?;
    let value = 1u32;
    // SAFETY: add_u32 takes (u32*, u32, u32) and `data` holds n words; it outlives `update`.
    let node = unsafe { graph.add_kernel_node(&[], &add, &LaunchConfig::new(1, 256), (&data, &n, &value))? };
    let update = graph.instantiate(InstantiateFlags::empty())?;
    let (raw_update, raw_node, raw_add, ptr) = (update.as_raw(), node.as_raw(), add.as_raw(), data.as_raw());
    let config = LaunchConfig::new(1, 256);
    rows.push(compare(
        "kernel node argument update (3 args)",
        201,
        1000,
        || {
            // SAFETY: as above.
            unsafe { update.set_kernel_node_args(node, &add, &config, (&ptr, &n, &value)) }
                .unwrap_or_else(|e| fail("GraphExec::set_kernel_node_args", e))
        },
        || {
            let mut args: [*mut c_void; 3] = [
                (&ptr as *const u64).cast_mut().cast(),
                (&n as *const u32).cast_mut().cast(),
                (&value as *const u32).cast_mut().cast(),
            ];
            let mut params = raw_params(raw_add, args.as_mut_ptr());
            params.blockDimX = 256;
            // SAFETY: the executable graph and node are live; the arguments match add_u32.
            check("cuGraphExecKernelNodeSetParams", unsafe {
                sys::cuGraphExecKernelNodeSetParams(raw_update, raw_node, &params)
            });
        },
    ));

    let mul = module.function("mul_u32")?;
    let (capture_rows, replay) = capture::rows(&ctx, module.function("add_u32")?, mul)?;
    rows.extend(capture_rows);
    print_table("CUDA graphs, host cost (ours = cuhost::graph)", &rows);
    print_table("decode step, per step (ours = graph replay, raw = the same step run eagerly)", &replay);
    drop(update);
    drop(graph);
    drop(exec);
    Ok(())
}
