//! External-semaphore nodes: a graph that signals or waits on semaphores another API shares
//! (see [`crate::interop::external`]).

use super::{Graph, GraphNode};
use crate::error::Result;
use crate::interop::external::{Batch, ExternalSemaphore, SignalParams, WaitParams};
use cuhost_driver_sys as sys;
use std::sync::Arc;

impl Graph {
    /// Adds a node that signals each semaphore of `signals` with its parameters
    /// ([`cuGraphAddExternalSemaphoresSignalNode`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html));
    /// the graph keeps the semaphores alive.
    ///
    /// None, semaphores of another context, or parameters that do not fit a semaphore's kind
    /// are an [`Error::InvalidArgument`](crate::error::Error::InvalidArgument).
    pub fn add_external_signal_node(
        &self,
        dependencies: &[GraphNode<'_>],
        signals: &[(&Arc<ExternalSemaphore>, SignalParams)],
    ) -> Result<GraphNode<'_>> {
        let items = signals.iter().map(|(s, p)| (s.as_ref(), *p));
        let mut batch =
            Batch::new("Graph::add_external_signal_node", &self.ctx, items, SignalParams::to_raw)?;
        let node_params = sys::CUDA_EXT_SEM_SIGNAL_NODE_PARAMS {
            extSemArray: batch.handles.as_mut_ptr(),
            paramsArray: batch.params.as_ptr(),
            numExtSems: batch.count,
            ..Default::default()
        };
        let graph = self.raw;
        // SAFETY: the batch's arrays hold `count` elements and outlive the call, which copies them.
        let node =
            self.add_with("cuGraphAddExternalSemaphoresSignalNode", dependencies, |out, deps, n| unsafe {
                sys::cuGraphAddExternalSemaphoresSignalNode(out, graph, deps, n, &node_params)
            })?;
        signals.iter().for_each(|(s, _)| self.keep.push((*s).clone()));
        Ok(node)
    }

    /// Adds a node that waits for each semaphore of `waits`
    /// ([`cuGraphAddExternalSemaphoresWaitNode`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html));
    /// the graph keeps the semaphores alive.
    ///
    /// Errors as for [`add_external_signal_node`](Self::add_external_signal_node).
    pub fn add_external_wait_node(
        &self,
        dependencies: &[GraphNode<'_>],
        waits: &[(&Arc<ExternalSemaphore>, WaitParams)],
    ) -> Result<GraphNode<'_>> {
        let items = waits.iter().map(|(s, p)| (s.as_ref(), *p));
        let mut batch = Batch::new("Graph::add_external_wait_node", &self.ctx, items, WaitParams::to_raw)?;
        let node_params = sys::CUDA_EXT_SEM_WAIT_NODE_PARAMS {
            extSemArray: batch.handles.as_mut_ptr(),
            paramsArray: batch.params.as_ptr(),
            numExtSems: batch.count,
            ..Default::default()
        };
        let graph = self.raw;
        // SAFETY: as in `add_external_signal_node`.
        let node =
            self.add_with("cuGraphAddExternalSemaphoresWaitNode", dependencies, |out, deps, n| unsafe {
                sys::cuGraphAddExternalSemaphoresWaitNode(out, graph, deps, n, &node_params)
            })?;
        waits.iter().for_each(|(s, _)| self.keep.push((*s).clone()));
        Ok(node)
    }
}
