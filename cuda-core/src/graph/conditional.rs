//! Conditional nodes: bodies run once (IF), once of two (IF/ELSE), while a value is non-zero
//! (WHILE), or one of several (SWITCH), chosen on the device through a conditional handle.

use super::{BodyGraph, Graph, GraphNode};
use crate::error::{Error, Result};
use cuhost_driver_sys as sys;
use std::marker::PhantomData;

/// The value a conditional node reads (`CUgraphConditionalHandle`), set on the device by a
/// kernel that calls `cudaGraphSetConditional(handle, value)` and passed to it as an ordinary
/// kernel argument (`&handle`, 8 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct ConditionalHandle(sys::CUgraphConditionalHandle);

// SAFETY: a transparent wrapper of the driver's 64-bit integer handle: no padding, every bit
// pattern a value (the driver checks handles it is given).
unsafe impl bytemuck::Zeroable for ConditionalHandle {}
unsafe impl bytemuck::Pod for ConditionalHandle {}

impl ConditionalHandle {
    /// The raw handle.
    pub fn as_raw(&self) -> sys::CUgraphConditionalHandle {
        self.0
    }
}

/// What a conditional node does with its handle's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConditionalKind {
    /// `CU_GRAPH_COND_TYPE_IF` with one body: runs it once when the value is non-zero.
    If,
    /// `CU_GRAPH_COND_TYPE_IF` with two bodies: the first when the value is non-zero, the
    /// second when it is zero (driver 12.8 or later).
    IfElse,
    /// `CU_GRAPH_COND_TYPE_WHILE`: runs its body while the value is non-zero, checking before
    /// each run; the body (or a node before the conditional) sets the value.
    While,
    /// `CU_GRAPH_COND_TYPE_SWITCH` with this many bodies: runs body `value`, none when the
    /// value is out of range (driver 12.8 or later).
    Switch(u32),
}

impl ConditionalKind {
    fn raw(self) -> Result<(sys::CUgraphConditionalNodeType, u32)> {
        use sys::CUgraphConditionalNodeType as T;
        Ok(match self {
            ConditionalKind::If => (T::CU_GRAPH_COND_TYPE_IF, 1),
            ConditionalKind::IfElse => (T::CU_GRAPH_COND_TYPE_IF, 2),
            ConditionalKind::While => (T::CU_GRAPH_COND_TYPE_WHILE, 1),
            ConditionalKind::Switch(0) => {
                return Err(Error::invalid(
                    "Graph::add_conditional_node",
                    "a SWITCH needs at least one body",
                ));
            }
            ConditionalKind::Switch(n) => (T::CU_GRAPH_COND_TYPE_SWITCH, n),
        })
    }
}

/// A conditional node and its body graphs, which belong to the node: fill them with the
/// same node-adding methods as any graph.
#[derive(Debug)]
pub struct ConditionalNode<'g> {
    /// The node, for dependencies and queries.
    pub node: GraphNode<'g>,
    /// The bodies: one for IF and WHILE, two for IF/ELSE (then, else), one per case for
    /// SWITCH.
    pub bodies: Vec<BodyGraph<'g>>,
}

impl Graph {
    /// Creates a conditional handle for the conditional nodes of this graph
    /// ([`cuGraphConditionalHandleCreate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    /// With `default` set, each launch of the graph starts with the handle at that value
    /// (`CU_GRAPH_COND_ASSIGN_DEFAULT`); without, the value at the start of a launch is
    /// whatever the last launch left.
    pub fn conditional_handle(&self, default: Option<u32>) -> Result<ConditionalHandle> {
        self.ctx.enter()?;
        let (value, flags) = match default {
            Some(v) => (v, sys::CU_GRAPH_COND_ASSIGN_DEFAULT),
            None => (0, 0),
        };
        let mut raw = 0;
        // SAFETY: the graph and context are live; one out-parameter.
        unsafe {
            driver!(cuGraphConditionalHandleCreate(&mut raw, self.raw, self.ctx.as_raw(), value, flags))
        }?;
        Ok(ConditionalHandle(raw))
    }

    /// Adds a conditional node of `kind` on `handle` (made by
    /// [`conditional_handle`](Self::conditional_handle) on this graph) and returns it with its
    /// empty bodies ([`cuGraphAddNode`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)
    /// with `CU_GRAPH_NODE_TYPE_CONDITIONAL`; driver 12.3 or later, IF/ELSE and SWITCH 12.8).
    ///
    /// Bodies hold kernel, memcpy, memset, empty, child-graph and conditional nodes; the
    /// driver refuses other kinds when the graph is instantiated. What the bodies' nodes refer
    /// to is kept alive by this graph.
    pub fn add_conditional_node(
        &self,
        dependencies: &[GraphNode<'_>],
        handle: ConditionalHandle,
        kind: ConditionalKind,
    ) -> Result<ConditionalNode<'_>> {
        let (type_, size) = kind.raw()?;
        // SAFETY: CUgraphNodeParams is plain C data; all-zero is "nothing set".
        let mut params: sys::CUgraphNodeParams = unsafe { std::mem::zeroed() };
        params.type_ = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL;
        params.__bindgen_anon_1.conditional = sys::CUDA_CONDITIONAL_NODE_PARAMS {
            handle: handle.0,
            type_,
            size,
            phGraph_out: std::ptr::null_mut(),
            ctx: self.ctx.as_raw(),
            ..Default::default()
        };
        let graph = self.raw;
        let params_ptr: *mut sys::CUgraphNodeParams = &mut params;
        // SAFETY: the graph is live; the driver fills `phGraph_out` with `size` body graphs
        // that it owns. The 12.3 ABI is named: it reads conditional nodes as every later one
        // does, and CUDA 13.4 headers point `cuGraphAddNode` at an ABI 13.0 drivers lack.
        let node = self.add_with("cuGraphAddNode", dependencies, |out, deps, n| unsafe {
            sys::cuGraphAddNode_v12030(out, graph, deps, std::ptr::null(), n, params_ptr)
        })?;
        // SAFETY: the conditional variant was written above and by the driver.
        let out = unsafe { params.__bindgen_anon_1.conditional.phGraph_out };
        if out.is_null() {
            return Err(Error::invalid("Graph::add_conditional_node", "the driver returned no body graphs"));
        }
        // SAFETY: the driver returned an array of `size` graphs, alive as long as the node.
        let raw_bodies = unsafe { std::slice::from_raw_parts(out, size as usize) };
        let bodies = raw_bodies
            .iter()
            .map(|&raw| BodyGraph {
                graph: Graph::borrowed(&self.ctx, raw, self.keep.clone()),
                _parent: PhantomData,
            })
            .collect();
        Ok(ConditionalNode { node, bodies })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_map_to_a_type_and_a_body_count() {
        use sys::CUgraphConditionalNodeType as T;
        assert_eq!(ConditionalKind::If.raw().ok(), Some((T::CU_GRAPH_COND_TYPE_IF, 1)));
        assert_eq!(ConditionalKind::IfElse.raw().ok(), Some((T::CU_GRAPH_COND_TYPE_IF, 2)));
        assert_eq!(ConditionalKind::While.raw().ok(), Some((T::CU_GRAPH_COND_TYPE_WHILE, 1)));
        assert_eq!(ConditionalKind::Switch(3).raw().ok(), Some((T::CU_GRAPH_COND_TYPE_SWITCH, 3)));
        assert!(ConditionalKind::Switch(0).raw().is_err());
    }

    #[test]
    fn a_handle_passes_to_a_kernel_as_eight_bytes() {
        use crate::launch::KernelArgs;
        let handle = ConditionalHandle(0x1234);
        assert_eq!((&handle,).sizes(), [8]);
        assert_eq!(handle.as_raw(), 0x1234);
    }
}
