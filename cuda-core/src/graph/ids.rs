//! The ids the driver gives graphs, executable graphs and nodes (CUDA 13.1): the numbers
//! [`Graph::to_dot`](crate::graph::Graph::to_dot) prints and profilers report.
//!
//! Built where the bindings come from CUDA 13.1 headers or newer. On a driver older than 13.1
//! each call is an [`Error::Load`](crate::error::Error::Load) naming the version needed and the one
//! installed.

use super::Graph;
use super::exec::GraphExec;
use super::node::GraphNode;
use crate::error::Result;

impl Graph {
    /// The graph's id, as [`to_dot`](Self::to_dot) prints it
    /// ([`cuGraphGetId`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html),
    /// CUDA 13.1).
    pub fn graph_id(&self) -> Result<u32> {
        let mut id = 0;
        // SAFETY: a live graph and one out-parameter.
        unsafe { driver!(cuGraphGetId(self.raw, &mut id)) }?;
        Ok(id)
    }
}

impl GraphExec {
    /// The executable graph's id
    /// ([`cuGraphExecGetId`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html),
    /// CUDA 13.1).
    pub fn graph_id(&self) -> Result<u32> {
        let mut id = 0;
        // SAFETY: a live executable graph and one out-parameter.
        unsafe { driver!(cuGraphExecGetId(self.as_raw(), &mut id)) }?;
        Ok(id)
    }
}

impl GraphNode<'_> {
    /// The node's id within its graph, as [`Graph::to_dot`] prints it; with the graph's
    /// [`graph_id`](Graph::graph_id) it names the node uniquely
    /// ([`cuGraphNodeGetLocalId`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html),
    /// CUDA 13.1).
    pub fn local_id(&self) -> Result<u32> {
        let mut id = 0;
        // SAFETY: the node is live while its graph is borrowed; one out-parameter.
        unsafe { driver!(cuGraphNodeGetLocalId(self.as_raw(), &mut id)) }?;
        Ok(id)
    }

    /// The id tools (profilers, debuggers) use for the node
    /// ([`cuGraphNodeGetToolsId`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html),
    /// CUDA 13.1).
    pub fn tools_id(&self) -> Result<u64> {
        let mut id = 0;
        // SAFETY: as for `local_id`.
        unsafe { driver!(cuGraphNodeGetToolsId(self.as_raw(), &mut id)) }?;
        Ok(id)
    }
}
