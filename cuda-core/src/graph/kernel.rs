//! Kernel nodes: the typed arguments and launch configuration of [`launch`](crate::launch),
//! checked the same way, recorded into a graph.

use super::{Graph, GraphNode};
use crate::error::{Result, check};
use crate::launch::{KernelArgs, LaunchConfig};
use crate::module::Function;
use cuda_driver_sys as sys;
use std::mem::MaybeUninit;

/// The raw parameters of a kernel node for `function`, `config` and the argument pointers
/// `pointers`, after the checks a launch makes.
#[inline]
pub(crate) fn kernel_params<A: KernelArgs>(
    operation: &'static str,
    function: &Function<'_>,
    config: &LaunchConfig,
    args: &A,
    pointers: &mut A::Pointers,
) -> Result<sys::CUDA_KERNEL_NODE_PARAMS> {
    config.check(operation, function.max_threads_per_block())?;
    function.param_layout().check(operation, args.sizes().as_ref())?;
    Ok(sys::CUDA_KERNEL_NODE_PARAMS {
        func: function.as_raw(),
        gridDimX: config.grid.x,
        gridDimY: config.grid.y,
        gridDimZ: config.grid.z,
        blockDimX: config.block.x,
        blockDimY: config.block.y,
        blockDimZ: config.block.z,
        sharedMemBytes: config.shared_mem_bytes,
        kernelParams: pointers.as_mut().as_mut_ptr(),
        extra: std::ptr::null_mut(),
        kern: std::ptr::null_mut(),
        ctx: std::ptr::null_mut(),
    })
}

impl Graph {
    /// Adds a node that launches `function` with `config` and `args`, as
    /// [`Function::launch`] would ([`cuGraphAddKernelNode`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html);
    /// the launch attributes of `config` — cluster, cooperative, priority, programmatic
    /// serialization — are set with
    /// [`cuGraphKernelNodeSetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// The arguments are copied into the node: later changes to `args` do not reach it. They
    /// are checked as a launch checks them (zero dimensions, block size, the kernel's parameter
    /// layout where the driver reports it): a mismatch is an
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) before any call.
    ///
    /// # Safety
    ///
    /// As for [`Function::launch`], for every launch of the graph: `args` match the kernel's
    /// parameters, and the memory they point to and the function's module stay alive as long
    /// as the graph and its executable graphs may run (hand them to [`Graph::keep`]).
    pub unsafe fn add_kernel_node<A: KernelArgs>(
        &self,
        dependencies: &[GraphNode<'_>],
        function: &Function<'_>,
        config: &LaunchConfig,
        args: A,
    ) -> Result<GraphNode<'_>> {
        let mut pointers = args.pointers();
        let params = kernel_params("Graph::add_kernel_node", function, config, &args, &mut pointers)?;
        let graph = self.raw;
        // SAFETY: the graph is live; `params` points at one pointer per argument, each to bytes
        // that live until `args` is dropped after the call (the driver copies them).
        let node = self.add_with("cuGraphAddKernelNode", dependencies, |out, deps, n| unsafe {
            sys::cuGraphAddKernelNode(out, graph, deps, n, &params)
        })?;
        set_launch_attributes(node, config)?;
        Ok(node)
    }
}

/// Sets on a kernel node the launch attributes `config` asks for beyond its dimensions.
fn set_launch_attributes(node: GraphNode<'_>, config: &LaunchConfig) -> Result<()> {
    let mut attrs = [const { MaybeUninit::uninit() }; 4];
    let raw = config.raw_config(std::ptr::null_mut(), &mut attrs);
    for attr in &attrs[..raw.numAttrs as usize] {
        // SAFETY: `raw_config` initialised the first `numAttrs` attributes.
        let attr = unsafe { attr.assume_init_ref() };
        // SAFETY: the node is live; the value is of the kind its id names.
        check("cuGraphKernelNodeSetAttribute", unsafe {
            sys::cuGraphKernelNodeSetAttribute(node.as_raw(), attr.id, &attr.value)
        })?;
    }
    Ok(())
}
