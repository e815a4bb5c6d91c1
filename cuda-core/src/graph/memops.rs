//! Batch memory-operation nodes: waits on and writes of 32- and 64-bit values in device
//! memory, as [`Stream::batch_mem_ops`](crate::Stream::batch_mem_ops) queues them.

use super::{Graph, GraphNode};
use crate::error::{Error, Result};
use crate::stream::{MAX_BATCH_MEM_OPS, StreamMemOp};
use cuda_driver_sys as sys;
use std::sync::Arc;

/// The raw operations of a batch, which the graph keeps with the node.
struct RawOps(Vec<sys::CUstreamBatchMemOpParams>);

// SAFETY: plain data (device addresses and values), never written after creation.
unsafe impl Send for RawOps {}
// SAFETY: as above.
unsafe impl Sync for RawOps {}

impl Graph {
    /// Adds a node that runs `ops` in order, at most [`MAX_BATCH_MEM_OPS`]
    /// ([`cuGraphAddBatchMemOpNode`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// No operations, or more than [`MAX_BATCH_MEM_OPS`], is an [`Error::InvalidArgument`]; a
    /// device without stream memory operations fails with the driver's status.
    ///
    /// # Safety
    ///
    /// Every address must satisfy the contract of
    /// [`Stream::wait_value_32`](crate::Stream::wait_value_32) or
    /// [`Stream::write_value_32`](crate::Stream::write_value_32) (or their 64-bit forms) for its
    /// operation, at every launch of the graph: the memory stays allocated as long as the graph
    /// and its executable graphs may run, and a wait is eventually satisfied.
    pub unsafe fn add_batch_mem_op_node(
        &self,
        dependencies: &[GraphNode<'_>],
        ops: &[StreamMemOp],
    ) -> Result<GraphNode<'_>> {
        if ops.is_empty() || ops.len() > MAX_BATCH_MEM_OPS {
            return Err(Error::invalid(
                "Graph::add_batch_mem_op_node",
                format!("{} operations; give between 1 and {MAX_BATCH_MEM_OPS}", ops.len()),
            ));
        }
        let mut raw = RawOps(ops.iter().map(|op| op.to_raw()).collect());
        let params = sys::CUDA_BATCH_MEM_OP_NODE_PARAMS {
            ctx: self.ctx.as_raw(),
            // The length was checked against MAX_BATCH_MEM_OPS above.
            count: raw.0.len() as u32,
            paramArray: raw.0.as_mut_ptr(),
            flags: 0,
            ..Default::default()
        };
        let graph = self.raw;
        // SAFETY: the graph is live; `params` names `count` initialised operations, kept with the
        // graph below; the caller vouches for the addresses.
        let node = self.add_with("cuGraphAddBatchMemOpNode", dependencies, |out, deps, n| unsafe {
            sys::cuGraphAddBatchMemOpNode(out, graph, deps, n, &params)
        })?;
        self.keep.push(Arc::new(raw));
        Ok(node)
    }
}
