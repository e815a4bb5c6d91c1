//! External-semaphore nodes: a graph that signals or waits on semaphores another API shares
//! (see [`crate::interop::external`]).

use super::{Graph, GraphNode};
use crate::error::{Error, Result};
use crate::interop::external::{ExternalSemaphore, SignalParams, WaitParams};
use cuda_driver_sys as sys;
use std::sync::Arc;

/// The semaphore handles of a node, checked: some, all of the graph's context.
fn handles<P>(
    graph: &Graph,
    operation: &'static str,
    items: &[(&Arc<ExternalSemaphore>, P)],
) -> Result<(Vec<sys::CUexternalSemaphore>, u32)> {
    if items.is_empty() {
        return Err(Error::invalid(operation, "no semaphores given"));
    }
    if items.iter().any(|(s, _)| s.context() != &graph.ctx) {
        return Err(Error::invalid(operation, "a semaphore of another context than the graph's"));
    }
    let count = u32::try_from(items.len()).map_err(|_| Error::invalid(operation, "too many semaphores"))?;
    Ok((items.iter().map(|(s, _)| s.as_raw()).collect(), count))
}

impl Graph {
    /// Adds a node that signals each semaphore of `signals` with its parameters
    /// ([`cuGraphAddExternalSemaphoresSignalNode`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html));
    /// the graph keeps the semaphores alive.
    ///
    /// None, semaphores of another context, or parameters that do not fit a semaphore's kind
    /// are an [`Error::InvalidArgument`].
    pub fn add_external_signal_node(
        &self,
        dependencies: &[GraphNode<'_>],
        signals: &[(&Arc<ExternalSemaphore>, SignalParams)],
    ) -> Result<GraphNode<'_>> {
        let (mut semaphores, count) = handles(self, "Graph::add_external_signal_node", signals)?;
        let params = signals.iter().map(|(s, p)| p.to_raw(s.kind())).collect::<Result<Vec<_>>>()?;
        let node_params = sys::CUDA_EXT_SEM_SIGNAL_NODE_PARAMS {
            extSemArray: semaphores.as_mut_ptr(),
            paramsArray: params.as_ptr(),
            numExtSems: count,
        };
        let graph = self.raw;
        // SAFETY: the arrays hold `count` elements and outlive the call, which copies them.
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
        let (mut semaphores, count) = handles(self, "Graph::add_external_wait_node", waits)?;
        let params = waits.iter().map(|(s, p)| p.to_raw(s.kind())).collect::<Result<Vec<_>>>()?;
        let node_params = sys::CUDA_EXT_SEM_WAIT_NODE_PARAMS {
            extSemArray: semaphores.as_mut_ptr(),
            paramsArray: params.as_ptr(),
            numExtSems: count,
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
