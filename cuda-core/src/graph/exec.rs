//! Executable graphs: instantiation, upload, launch, and updates of the whole graph or of one
//! node.

use super::host::HostFunction;
use super::keep::KeepAlive;
use super::kernel::{NodeKernel, kernel_params};
use super::memory::{GraphSlice, memcpy_params, memset_params};
use super::{Graph, GraphNode};
use crate::context::Context;
use crate::error::{Error, Result, check};
use crate::event::Event;
use crate::launch::{KernelArgs, LaunchConfig};
use crate::stream::Stream;
use bitflags::bitflags;
use bytemuck::Pod;
use cuda_driver_sys as sys;
use std::cell::Cell;
use std::sync::Arc;

bitflags! {
    /// How a graph is instantiated (`CUgraphInstantiate_flags`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct InstantiateFlags: u64 {
        /// `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH`: a launch first frees the memory
        /// that allocation nodes of the previous launch left allocated.
        const AUTO_FREE_ON_LAUNCH = 1;
        /// `CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH`: the graph may be launched from the
        /// device.
        const DEVICE_LAUNCH = 4;
        /// `CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY`: kernel nodes run at the priority
        /// of their launch attribute rather than their stream's.
        const USE_NODE_PRIORITY = 8;
    }
}

/// An executable graph (`CUgraphExec`), made from a [`Graph`] by [`Graph::instantiate`] and
/// destroyed on drop.
///
/// It keeps alive what the graph it was made from (and every graph it was updated from)
/// keeps alive. Once launched, dropping it waits for the work queued in its context before it
/// lets go of those values (when there are any: a graph that keeps nothing is dropped at once).
pub struct GraphExec {
    raw: sys::CUgraphExec,
    ctx: Context,
    keep: KeepAlive,
    launched: Cell<bool>,
}

// SAFETY: an executable graph may be used from any thread, one at a time (`GraphExec` is not
// `Sync`); the kept values are `Send + Sync`.
unsafe impl Send for GraphExec {}

impl std::fmt::Debug for GraphExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphExec").field("raw", &self.raw).field("keep", &self.keep).finish()
    }
}

impl Graph {
    /// Makes an executable graph of this graph's nodes as they are now
    /// ([`cuGraphInstantiateWithParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    /// Later changes to this graph do not reach it (see [`GraphExec::update`]).
    ///
    /// A graph the driver refuses is [`Error::GraphInstantiate`], with the driver's reason
    /// and the node it blames.
    pub fn instantiate(&self, flags: InstantiateFlags) -> Result<GraphExec> {
        self.instantiate_with(flags.bits(), std::ptr::null_mut())
    }

    /// Instantiates as [`instantiate`](Self::instantiate) does and uploads the executable
    /// graph on `stream` in the same call (`CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD`), as
    /// [`GraphExec::upload`] would.
    ///
    /// A graph the driver refuses is [`Error::GraphInstantiate`], as for
    /// [`instantiate`](Self::instantiate).
    pub fn instantiate_and_upload(&self, flags: InstantiateFlags, stream: &Stream) -> Result<GraphExec> {
        stream.bind_if_default()?;
        let upload = sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD.0 as u64;
        self.instantiate_with(flags.bits() | upload, stream.as_raw())
    }

    fn instantiate_with(&self, flags: u64, upload: sys::CUstream) -> Result<GraphExec> {
        self.ctx.enter()?;
        let mut raw = std::ptr::null_mut();
        let mut params = sys::CUDA_GRAPH_INSTANTIATE_PARAMS {
            flags,
            hUploadStream: upload,
            hErrNode_out: std::ptr::null_mut(),
            result_out: sys::CUgraphInstantiateResult::CUDA_GRAPH_INSTANTIATE_SUCCESS,
        };
        // SAFETY: the graph (and the stream, when given) are live; one out-parameter and the
        // in-out parameters.
        let status = unsafe { sys::cuGraphInstantiateWithParams(&mut raw, self.raw, &mut params) };
        if status != sys::CUresult::CUDA_SUCCESS {
            return Err(instantiate_refused(status, &params));
        }
        let keep = KeepAlive::default();
        keep.push(self.keep.clone());
        Ok(GraphExec { raw, ctx: self.ctx.clone(), keep, launched: Cell::new(false) })
    }
}

#[cold]
fn instantiate_refused(status: sys::CUresult, params: &sys::CUDA_GRAPH_INSTANTIATE_PARAMS) -> Error {
    let result = params.result_out;
    if result == sys::CUgraphInstantiateResult::CUDA_GRAPH_INSTANTIATE_SUCCESS {
        // Not a verdict on the graph: a load error, a bad context, ...
        return crate::error::driver_error("cuGraphInstantiateWithParams", status);
    }
    let node = if params.hErrNode_out.is_null() { None } else { Some(params.hErrNode_out as usize) };
    Error::GraphInstantiate { result, status, node }
}

impl GraphExec {
    /// The raw `CUgraphExec`.
    #[inline]
    pub fn as_raw(&self) -> sys::CUgraphExec {
        self.raw
    }

    /// The context the graph runs in.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The flags it was instantiated with
    /// ([`cuGraphExecGetFlags`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    pub fn flags(&self) -> Result<InstantiateFlags> {
        let mut flags = 0;
        // SAFETY: the executable graph is live; one out-parameter.
        check("cuGraphExecGetFlags", unsafe { sys::cuGraphExecGetFlags(self.raw, &mut flags) })?;
        Ok(InstantiateFlags::from_bits_retain(flags))
    }

    /// Queues the whole graph on `stream`, after the work queued there before and after any
    /// earlier launch of this executable graph
    /// ([`cuGraphLaunch`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    /// The stream must belong to the graph's context.
    #[inline]
    pub fn launch(&self, stream: &Stream) -> Result<()> {
        self.ctx.take_deferred()?;
        stream.bind_if_default()?;
        self.launched.set(true);
        // SAFETY: both handles are live; everything the graph refers to is kept alive.
        check("cuGraphLaunch", unsafe { sys::cuGraphLaunch(self.raw, stream.as_raw()) })
    }

    /// Prepares the graph's device resources on `stream`, so that the first launch does not
    /// pay for it ([`cuGraphUpload`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    pub fn upload(&self, stream: &Stream) -> Result<()> {
        self.ctx.take_deferred()?;
        stream.bind_if_default()?;
        // SAFETY: both handles are live.
        check("cuGraphUpload", unsafe { sys::cuGraphUpload(self.raw, stream.as_raw()) })
    }

    /// Takes the parameters of `graph`'s nodes, a graph of the same shape as the one this was
    /// made from (same nodes, kinds and dependencies, added in the same order)
    /// ([`cuGraphExecUpdate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// A refusal is [`Error::GraphUpdate`] with the driver's reason and the node it blames;
    /// the executable graph is then unchanged. On success it also keeps alive what `graph`
    /// keeps alive.
    pub fn update(&self, graph: &Graph) -> Result<()> {
        self.ctx.enter()?;
        let mut info = sys::CUgraphExecUpdateResultInfo {
            result: sys::CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_SUCCESS,
            errorNode: std::ptr::null_mut(),
            errorFromNode: std::ptr::null_mut(),
        };
        // SAFETY: both graphs are live; one out-parameter.
        let status = unsafe { sys::cuGraphExecUpdate(self.raw, graph.raw, &mut info) };
        if status == sys::CUresult::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE {
            return Err(update_refused(&info));
        }
        check("cuGraphExecUpdate", status)?;
        self.keep.push(graph.keep.clone());
        Ok(())
    }

    /// Gives a kernel node new arguments and launch configuration for later launches, as
    /// [`Graph::add_kernel_node`] takes them
    /// ([`cuGraphExecKernelNodeSetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    /// `node` is the node of the graph this was made from; the kernel must run in the same
    /// context as the node's. Launch attributes of `config` are not changed this way.
    ///
    /// # Safety
    ///
    /// As for [`Graph::add_kernel_node`].
    #[inline]
    pub unsafe fn set_kernel_node_args<A: KernelArgs>(
        &self,
        node: GraphNode<'_>,
        kernel: &impl NodeKernel,
        config: &LaunchConfig,
        args: A,
    ) -> Result<()> {
        let mut pointers = args.pointers();
        let params = kernel_params(
            "GraphExec::set_kernel_node_args",
            &self.ctx,
            kernel,
            config,
            &args,
            &mut pointers,
        )?;
        // SAFETY: both handles are live; the pointers stay valid during the call (the driver
        // copies the arguments).
        check("cuGraphExecKernelNodeSetParams", unsafe {
            sys::cuGraphExecKernelNodeSetParams(self.raw, node.as_raw(), &params)
        })
    }

    /// Gives a memset node a new destination and value, as [`Graph::add_memset_node`] takes
    /// them ([`cuGraphExecMemsetNodeSetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html));
    /// the memory is kept alive.
    pub fn set_memset_node<T: Pod>(&self, node: GraphNode<'_>, dst: &GraphSlice<T>, value: T) -> Result<()> {
        let params = memset_params("GraphExec::set_memset_node", dst, value)?;
        self.ctx.enter()?;
        // SAFETY: both handles are live; the memory stays allocated (kept below).
        check("cuGraphExecMemsetNodeSetParams", unsafe {
            sys::cuGraphExecMemsetNodeSetParams(self.raw, node.as_raw(), &params, self.ctx.as_raw())
        })?;
        self.keep_slice(dst);
        Ok(())
    }

    /// Gives a memcpy node new slices, as [`Graph::add_memcpy_node`] takes them
    /// ([`cuGraphExecMemcpyNodeSetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html));
    /// the memory is kept alive.
    pub fn set_memcpy_node<T: Pod>(
        &self,
        node: GraphNode<'_>,
        dst: &GraphSlice<T>,
        src: &GraphSlice<T>,
    ) -> Result<()> {
        let params = memcpy_params("GraphExec::set_memcpy_node", dst, src)?;
        self.ctx.enter()?;
        // SAFETY: as in `set_memset_node`.
        check("cuGraphExecMemcpyNodeSetParams", unsafe {
            sys::cuGraphExecMemcpyNodeSetParams(self.raw, node.as_raw(), &params, self.ctx.as_raw())
        })?;
        self.keep_slice(dst);
        self.keep_slice(src);
        Ok(())
    }

    fn keep_slice<T>(&self, slice: &GraphSlice<T>) {
        if let Some(owner) = slice.owner() {
            self.keep.push(owner);
        }
    }

    /// Gives a host node a new closure
    /// ([`cuGraphExecHostNodeSetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html));
    /// the closure is kept alive, as the old one stays.
    pub fn set_host_node(&self, node: GraphNode<'_>, f: impl Fn() + Send + Sync + 'static) -> Result<()> {
        let (host, params) = HostFunction::params(&self.ctx, f);
        // SAFETY: both handles are live; the user data stays alive in the keep-alive list.
        check("cuGraphExecHostNodeSetParams", unsafe {
            sys::cuGraphExecHostNodeSetParams(self.raw, node.as_raw(), &params)
        })?;
        self.keep.push(host);
        Ok(())
    }

    /// Gives a child-graph node the parameters of `child`, a graph of the same shape as the
    /// node's ([`cuGraphExecChildGraphNodeSetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html));
    /// what `child` keeps alive is kept alive too.
    pub fn set_child_graph_node(&self, node: GraphNode<'_>, child: &Graph) -> Result<()> {
        // SAFETY: the handles are live; the driver copies the child's parameters.
        check("cuGraphExecChildGraphNodeSetParams", unsafe {
            sys::cuGraphExecChildGraphNodeSetParams(self.raw, node.as_raw(), child.raw)
        })?;
        self.keep.push(child.keep.clone());
        Ok(())
    }

    /// Makes an event record node record `event`
    /// ([`cuGraphExecEventRecordNodeSetEvent`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    pub fn set_event_record_node(&self, node: GraphNode<'_>, event: &Arc<Event>) -> Result<()> {
        // SAFETY: the handles are live; the event is kept alive below.
        check("cuGraphExecEventRecordNodeSetEvent", unsafe {
            sys::cuGraphExecEventRecordNodeSetEvent(self.raw, node.as_raw(), event.as_raw())
        })?;
        self.keep.push(event.clone());
        Ok(())
    }

    /// Makes an event wait node wait for `event`
    /// ([`cuGraphExecEventWaitNodeSetEvent`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    pub fn set_event_wait_node(&self, node: GraphNode<'_>, event: &Arc<Event>) -> Result<()> {
        // SAFETY: as in `set_event_record_node`.
        check("cuGraphExecEventWaitNodeSetEvent", unsafe {
            sys::cuGraphExecEventWaitNodeSetEvent(self.raw, node.as_raw(), event.as_raw())
        })?;
        self.keep.push(event.clone());
        Ok(())
    }

    /// Turns a node off (it then does nothing, like an empty node) or back on for later
    /// launches; kernel, memcpy and memset nodes only
    /// ([`cuGraphNodeSetEnabled`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    pub fn set_node_enabled(&self, node: GraphNode<'_>, enabled: bool) -> Result<()> {
        // SAFETY: both handles are live.
        check("cuGraphNodeSetEnabled", unsafe {
            sys::cuGraphNodeSetEnabled(self.raw, node.as_raw(), u32::from(enabled))
        })
    }

    /// Whether a node is enabled
    /// ([`cuGraphNodeGetEnabled`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    pub fn is_node_enabled(&self, node: GraphNode<'_>) -> Result<bool> {
        let mut on = 0;
        // SAFETY: both handles are live; one out-parameter.
        check("cuGraphNodeGetEnabled", unsafe {
            sys::cuGraphNodeGetEnabled(self.raw, node.as_raw(), &mut on)
        })?;
        Ok(on != 0)
    }
}

#[cold]
fn update_refused(info: &sys::CUgraphExecUpdateResultInfo) -> Error {
    let node = if info.errorNode.is_null() { None } else { Some(info.errorNode as usize) };
    Error::GraphUpdate { result: info.result, node }
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        let raw = self.raw;
        // SAFETY: this value owns the executable graph; the driver lets a launch in flight
        // finish before it frees it.
        self.ctx.with_current_for_drop("cuGraphExecDestroy", || unsafe { sys::cuGraphExecDestroy(raw) });
        if self.launched.get() && !self.keep.is_empty() {
            // A launch may still use what the graph keeps; wait before letting go of it.
            // SAFETY: the context is current during the closure.
            self.ctx.with_current_for_drop("cuCtxSynchronize", || unsafe { sys::cuCtxSynchronize() });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_have_the_header_values() {
        use sys::CUgraphInstantiate_flags as F;
        let v = |f: F| u64::from(f.0);
        assert_eq!(
            InstantiateFlags::AUTO_FREE_ON_LAUNCH.bits(),
            v(F::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)
        );
        assert_eq!(InstantiateFlags::DEVICE_LAUNCH.bits(), v(F::CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH));
        assert_eq!(
            InstantiateFlags::USE_NODE_PRIORITY.bits(),
            v(F::CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY)
        );
    }

    #[test]
    fn a_refused_update_names_the_reason_and_the_node() {
        let info = sys::CUgraphExecUpdateResultInfo {
            result: sys::CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED,
            errorNode: 0x40 as sys::CUgraphNode,
            errorFromNode: std::ptr::null_mut(),
        };
        let e = update_refused(&info);
        assert_eq!(
            e,
            Error::GraphUpdate {
                result: sys::CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED,
                node: Some(0x40),
            }
        );
        let text = e.to_string();
        assert!(
            text.contains("CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED") && text.contains("0x40"),
            "{text}"
        );
    }

    #[test]
    fn a_refused_instantiation_names_the_reason_or_is_a_driver_error() {
        let mut params = sys::CUDA_GRAPH_INSTANTIATE_PARAMS {
            flags: 0,
            hUploadStream: std::ptr::null_mut(),
            hErrNode_out: std::ptr::null_mut(),
            result_out: sys::CUgraphInstantiateResult::CUDA_GRAPH_INSTANTIATE_CONDITIONAL_HANDLE_UNUSED,
        };
        let status = sys::CUresult::CUDA_ERROR_INVALID_VALUE;
        let e = instantiate_refused(status, &params);
        assert_eq!(
            e,
            Error::GraphInstantiate {
                result: sys::CUgraphInstantiateResult::CUDA_GRAPH_INSTANTIATE_CONDITIONAL_HANDLE_UNUSED,
                status,
                node: None,
            }
        );
        assert!(e.to_string().contains("CONDITIONAL_HANDLE_UNUSED"), "{e}");
        params.result_out = sys::CUgraphInstantiateResult::CUDA_GRAPH_INSTANTIATE_SUCCESS;
        assert!(matches!(instantiate_refused(status, &params), Error::Driver { .. }));
    }
}
