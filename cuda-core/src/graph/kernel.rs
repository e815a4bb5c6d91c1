//! Kernel nodes: the typed arguments and launch configuration of [`launch`](crate::launch),
//! checked the same way, recorded into a graph.

use super::{Graph, GraphNode};
use crate::context::Context;
use crate::error::Result;
use crate::launch::{KernelArgs, LaunchConfig};
use crate::module::{Function, Kernel};
use cuhost_driver_sys as sys;
use std::mem::MaybeUninit;

/// What a kernel node launches: a module's [`Function`] or a library's [`Kernel`] (run in the
/// graph's context).
pub trait NodeKernel: sealed::Sealed {}

impl NodeKernel for Function<'_> {}
impl NodeKernel for Kernel<'_> {}

mod sealed {
    use crate::context::Context;
    use crate::error::Result;
    use crate::module::ParamLayout;
    use crate::module::{Function, Kernel};
    use cuhost_driver_sys as sys;

    /// What a kernel node needs to know about its kernel.
    pub struct Target {
        pub(crate) func: sys::CUfunction,
        pub(crate) kern: sys::CUkernel,
        pub(crate) ctx: sys::CUcontext,
        pub(crate) max_threads: u32,
        pub(crate) params: ParamLayout,
    }

    pub trait Sealed {
        /// The kernel as a node in `ctx` launches it.
        fn target(&self, ctx: &Context) -> Result<Target>;
    }

    impl Sealed for Function<'_> {
        #[inline]
        fn target(&self, _: &Context) -> Result<Target> {
            Ok(Target {
                func: self.as_raw(),
                kern: std::ptr::null_mut(),
                ctx: std::ptr::null_mut(),
                max_threads: self.launch_limit(),
                params: *self.param_layout(),
            })
        }
    }

    impl Sealed for Kernel<'_> {
        #[inline]
        fn target(&self, ctx: &Context) -> Result<Target> {
            let device = ctx.device();
            let max_threads = match self.cached_max_threads(&device) {
                Some(max) => max,
                None => {
                    // The driver answers from the kernel as loaded in the current context.
                    ctx.make_current()?;
                    self.query_max_threads(&device)?
                }
            };
            let params = match self.cached_param_layout() {
                Some(params) => *params,
                None => {
                    ctx.make_current()?;
                    *self.query_param_layout()
                }
            };
            Ok(Target {
                func: std::ptr::null_mut(),
                kern: self.as_raw(),
                ctx: ctx.as_raw(),
                max_threads,
                params,
            })
        }
    }
}

/// The raw parameters of a kernel node for `kernel`, `config` and the argument pointers
/// `pointers`, after the checks a launch makes.
#[inline]
pub(crate) fn kernel_params<A: KernelArgs>(
    operation: &'static str,
    ctx: &Context,
    kernel: &impl NodeKernel,
    config: &LaunchConfig,
    args: &A,
    pointers: &mut A::Pointers,
) -> Result<sys::CUDA_KERNEL_NODE_PARAMS> {
    let target = kernel.target(ctx)?;
    config.check(operation, target.max_threads)?;
    target.params.check(operation, args.sizes().as_ref())?;
    Ok(sys::CUDA_KERNEL_NODE_PARAMS {
        func: target.func,
        gridDimX: config.grid.x,
        gridDimY: config.grid.y,
        gridDimZ: config.grid.z,
        blockDimX: config.block.x,
        blockDimY: config.block.y,
        blockDimZ: config.block.z,
        sharedMemBytes: config.shared_mem_bytes,
        kernelParams: pointers.as_mut().as_mut_ptr(),
        extra: std::ptr::null_mut(),
        kern: target.kern,
        ctx: target.ctx,
        ..Default::default()
    })
}

impl Graph {
    /// Adds a node that launches `kernel` (a [`Function`] or a library [`Kernel`]) with
    /// `config` and `args`, as [`Function::launch`] would ([`cuGraphAddKernelNode`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html);
    /// the launch attributes of `config` — cluster, cooperative, priority, programmatic
    /// serialization — are set with
    /// [`cuGraphKernelNodeSetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// The arguments are copied into the node: later changes to `args` do not reach it. They
    /// are checked as a launch checks them (zero dimensions, block size, the kernel's parameter
    /// layout where the driver reports it): a mismatch is an
    /// [`Error::InvalidArgument`](crate::error::Error::InvalidArgument) before any call.
    ///
    /// # Safety
    ///
    /// As for [`Function::launch`], for every launch of the graph: `args` match the kernel's
    /// parameters, and the memory they point to and the kernel's module or library stay alive as long
    /// as the graph and its executable graphs may run (hand them to [`Graph::keep`]).
    pub unsafe fn add_kernel_node<A: KernelArgs>(
        &self,
        dependencies: &[GraphNode<'_>],
        kernel: &impl NodeKernel,
        config: &LaunchConfig,
        args: A,
    ) -> Result<GraphNode<'_>> {
        let mut pointers = args.pointers();
        let params =
            kernel_params("Graph::add_kernel_node", &self.ctx, kernel, config, &args, &mut pointers)?;
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
pub(super) fn set_launch_attributes(node: GraphNode<'_>, config: &LaunchConfig) -> Result<()> {
    let mut attrs = [const { MaybeUninit::uninit() }; crate::launch::MAX_ATTRIBUTES];
    let raw = config.raw_config(std::ptr::null_mut(), &mut attrs);
    for attr in &attrs[..raw.numAttrs as usize] {
        // SAFETY: `raw_config` initialised the first `numAttrs` attributes.
        let attr = unsafe { attr.assume_init_ref() };
        // SAFETY: the node is live; the value is of the kind its id names.
        unsafe { driver!(cuGraphKernelNodeSetAttribute(node.as_raw(), attr.id, &attr.value)) }?;
    }
    Ok(())
}
