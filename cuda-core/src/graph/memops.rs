//! Batch memory-operation nodes: waits on and writes of 32- and 64-bit values in device
//! memory, as [`Stream::batch_mem_ops`](crate::stream::Stream::batch_mem_ops) queues them.

use super::{Graph, GraphExec, GraphNode};
use crate::error::{Error, Result};
use crate::stream::{MAX_BATCH_MEM_OPS, StreamMemOp};
use cuhost_driver_sys as sys;
use std::sync::Arc;

/// The raw operations of a batch, which the graph keeps with the node.
struct RawOps(Vec<sys::CUstreamBatchMemOpParams>);

// SAFETY: plain data (device addresses and values), never written after creation.
unsafe impl Send for RawOps {}
// SAFETY: as above.
unsafe impl Sync for RawOps {}

/// The operations in C form, with their count; none, or more than [`MAX_BATCH_MEM_OPS`], is
/// an [`Error::InvalidArgument`].
fn raw_ops(operation: &'static str, ops: &[StreamMemOp]) -> Result<(RawOps, u32)> {
    match u32::try_from(ops.len()) {
        Ok(count) if count > 0 && ops.len() <= MAX_BATCH_MEM_OPS => {
            Ok((RawOps(ops.iter().map(|op| op.to_raw()).collect()), count))
        }
        _ => Err(Error::invalid(
            operation,
            format!("{} operations; give between 1 and {MAX_BATCH_MEM_OPS}", ops.len()),
        )),
    }
}

fn node_params(ctx: sys::CUcontext, raw: &mut RawOps, count: u32) -> sys::CUDA_BATCH_MEM_OP_NODE_PARAMS {
    sys::CUDA_BATCH_MEM_OP_NODE_PARAMS {
        ctx,
        count,
        paramArray: raw.0.as_mut_ptr(),
        flags: 0,
        ..Default::default()
    }
}

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
    /// [`Stream::wait_value_32`](crate::stream::Stream::wait_value_32) or
    /// [`Stream::write_value_32`](crate::stream::Stream::write_value_32) (or their 64-bit forms) for its
    /// operation, at every launch of the graph: the memory stays allocated as long as the graph
    /// and its executable graphs may run, and a wait is eventually satisfied.
    pub unsafe fn add_batch_mem_op_node(
        &self,
        dependencies: &[GraphNode<'_>],
        ops: &[StreamMemOp],
    ) -> Result<GraphNode<'_>> {
        let (mut raw, count) = raw_ops("Graph::add_batch_mem_op_node", ops)?;
        let params = node_params(self.ctx.as_raw(), &mut raw, count);
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

impl Graph {
    /// Gives a batch memory-operation node of this graph new operations
    /// ([`cuGraphBatchMemOpNodeSetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// A node of another graph, no operations or more than [`MAX_BATCH_MEM_OPS`] is an
    /// [`Error::InvalidArgument`], checked before the call; a node of another kind fails with
    /// the driver's status.
    ///
    /// # Safety
    ///
    /// As for [`add_batch_mem_op_node`](Self::add_batch_mem_op_node), for the new operations.
    pub unsafe fn set_batch_mem_op_node(&self, node: GraphNode<'_>, ops: &[StreamMemOp]) -> Result<()> {
        let operation = "Graph::set_batch_mem_op_node";
        let (mut raw, count) = raw_ops(operation, ops)?;
        self.check_nodes(operation, &[node])?;
        let params = node_params(self.ctx.as_raw(), &mut raw, count);
        // SAFETY: the node is a live node of this graph; `params` names `count` initialised
        // operations, kept with the graph below; the caller vouches for the addresses.
        unsafe { driver!(cuGraphBatchMemOpNodeSetParams(node.as_raw(), &params)) }?;
        self.keep.push(Arc::new(raw));
        Ok(())
    }
}

impl GraphNode<'_> {
    /// The operations of a batch memory-operation node
    /// ([`cuGraphBatchMemOpNodeGetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// A node of another kind fails with the driver's status; an operation kind this crate
    /// does not know (from a newer driver) is an [`Error::InvalidArgument`].
    pub fn batch_mem_op_params(&self) -> Result<Vec<StreamMemOp>> {
        // SAFETY: a C struct of integers and pointers, for which all zeroes is valid.
        let mut params: sys::CUDA_BATCH_MEM_OP_NODE_PARAMS = unsafe { std::mem::zeroed() };
        // SAFETY: the node is live (its graph is borrowed); one out-parameter.
        unsafe { driver!(cuGraphBatchMemOpNodeGetParams(self.as_raw(), &mut params)) }?;
        if params.count == 0 || params.paramArray.is_null() {
            return Ok(Vec::new());
        }
        // SAFETY: the driver points at the node's `count` operations, which live as long as
        // the node; they are copied out here.
        let raw = unsafe { std::slice::from_raw_parts(params.paramArray, params.count as usize) };
        raw.iter().map(StreamMemOp::from_raw).collect()
    }
}

impl GraphExec {
    /// Gives a batch memory-operation node of this executable graph new operations, for
    /// launches from now on
    /// ([`cuGraphExecBatchMemOpNodeSetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// Addresses, values and flags may change; the number of operations and the kind of
    /// each stay as instantiated, and the driver refuses others (`CUDA_ERROR_INVALID_VALUE`).
    /// No operations or more than [`MAX_BATCH_MEM_OPS`] is an [`Error::InvalidArgument`]; a
    /// node that is not a batch node of the graph this was instantiated from fails with the
    /// driver's status. The driver copies the operations.
    ///
    /// # Safety
    ///
    /// As for [`Graph::add_batch_mem_op_node`], for the new operations and every later launch
    /// of this executable graph.
    pub unsafe fn set_batch_mem_op_node(&self, node: GraphNode<'_>, ops: &[StreamMemOp]) -> Result<()> {
        let (mut raw, count) = raw_ops("GraphExec::set_batch_mem_op_node", ops)?;
        let ctx = self.context();
        ctx.enter()?;
        let params = node_params(ctx.as_raw(), &mut raw, count);
        // SAFETY: both handles are live; `params` names `count` initialised operations for the
        // call, which copies them; the caller vouches for the addresses.
        unsafe { driver!(cuGraphExecBatchMemOpNodeSetParams(self.as_raw(), node.as_raw(), &params)) }
    }
}
