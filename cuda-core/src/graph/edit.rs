//! Editing a graph in place: new parameters for its nodes, nodes destroyed, edges listed,
//! added and removed in batches.
//!
//! A setter keeps what the new parameters use exactly as the `add_*_node` method of the same
//! kind does: the graph's keep-alive list gets the new buffer, closure or event. The values
//! the node used before stay on the list (executable graphs and clones made earlier still run
//! the old parameters), so they live until the graph and everything made from it are gone.

use super::kernel::{NodeKernel, kernel_params, set_launch_attributes};
use super::memory::{GraphSlice, memcpy_params, memset_params};
use super::{EdgeKind, Graph, GraphNode};
use crate::error::{Error, Result, check};
use crate::event::Event;
use crate::launch::{KernelArgs, LaunchConfig};
use bytemuck::Pod;
use cuhost_driver_sys as sys;
use std::sync::Arc;

/// A node named without borrowing its graph: what [`Graph::destroy_node`], which takes the
/// graph mutably, is given. Made by [`GraphNode::key`]; turned back into a node by
/// [`Graph::node`].
///
/// A key is only a number (the node's handle as an address). Once its node is destroyed a
/// later node may be given the same handle, and the key then names that node: like an index
/// into a vector after a removal, a stale key names the wrong node or none, never freed memory,
/// because every use of a key first looks it up among the graph's live nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NodeKey(usize);

impl GraphNode<'_> {
    /// The node's key, which outlives the borrow of the graph (see [`NodeKey`]).
    pub fn key(&self) -> NodeKey {
        NodeKey(self.id())
    }
}

/// One edge: the node depended on, the dependent node, and what the edge waits for.
pub type Edge<'g> = (GraphNode<'g>, GraphNode<'g>, EdgeKind);

impl Graph {
    /// The live node of this graph that `key` names, if any (a lookup among
    /// [`nodes`](Self::nodes)); fails as `nodes` does, with the driver's status.
    pub fn node(&self, key: NodeKey) -> Result<Option<GraphNode<'_>>> {
        Ok(self.nodes()?.into_iter().find(|n| n.key() == key))
    }

    /// Destroys the node `key` names, with its edges
    /// ([`cuGraphDestroyNode`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// # Why a key and `&mut self`
    ///
    /// A [`GraphNode`] is a copyable handle that borrows its graph. Taking the graph mutably
    /// ends every such borrow, so no `GraphNode` of this graph — of the destroyed node or any
    /// other — is alive when the node goes, and none can reach it afterwards: nodes obtained
    /// later come from the driver's list of live nodes. The same borrow keeps a conditional
    /// node's bodies and a child graph taken with [`child_graph`](Self::child_graph) (which
    /// belong to their node) from outliving it. The node to destroy is therefore named by a
    /// [`NodeKey`], which borrows nothing and is looked up among the live nodes first.
    ///
    /// ```compile_fail,E0502
    /// # fn f(mut graph: cuhost::graph::Graph) -> cuhost::Result<()> {
    /// let node = graph.add_empty_node(&[])?;
    /// graph.destroy_node(node.key())?;
    /// node.node_type()?; // the handle cannot be used after its node is destroyed
    /// # Ok(()) }
    /// ```
    ///
    /// What the node referred to (buffers, closures, events) stays on the keep-alive list:
    /// executable graphs and clones made earlier still hold the node's copy. Memory an
    /// `unsafe` contract ties to the node's place in the graph is the caller's to keep right:
    /// destroying an allocation node, or a node that orders a
    /// [`GraphSlice::from_raw`] user after its allocation, breaks the promise given to
    /// `from_raw` (as removing the edge would).
    ///
    /// A key that names no node of this graph is an [`Error::InvalidArgument`].
    pub fn destroy_node(&mut self, key: NodeKey) -> Result<()> {
        let Some(node) = self.node(key)? else {
            return Err(Error::invalid(
                "Graph::destroy_node",
                format!("{:#x} names no node of this graph", key.0),
            ));
        };
        let raw = node.as_raw();
        self.ctx.enter()?;
        // SAFETY: the node is a live node of this graph, and no `GraphNode` of the graph is
        // alive (`&mut self`): nothing can name it after the call.
        unsafe { driver!(cuGraphDestroyNode(raw)) }
    }

    /// Every edge of the graph, with what it waits for
    /// ([`cuGraphGetEdges`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// An edge of a kind this crate does not know (from a driver newer than its headers) is an
    /// [`Error::InvalidArgument`].
    pub fn edges(&self) -> Result<Vec<Edge<'_>>> {
        const CALL: &str = "cuGraphGetEdges";
        let (no_nodes, no_data) = (std::ptr::null_mut(), std::ptr::null_mut());
        let mut count = 0;
        // SAFETY: the graph is live; null arrays ask for the count.
        check(CALL, unsafe { sys::cuGraphGetEdges(self.raw, no_nodes, no_nodes, no_data, &mut count) })?;
        let mut from: Vec<sys::CUgraphNode> = vec![std::ptr::null_mut(); count];
        let mut to: Vec<sys::CUgraphNode> = vec![std::ptr::null_mut(); count];
        let mut data = vec![EdgeKind::Full.as_raw(); count];
        if count > 0 {
            // SAFETY: the three arrays have room for `count` entries each.
            check(CALL, unsafe {
                sys::cuGraphGetEdges(
                    self.raw,
                    from.as_mut_ptr(),
                    to.as_mut_ptr(),
                    data.as_mut_ptr(),
                    &mut count,
                )
            })?;
        }
        from.into_iter()
            .zip(to)
            .zip(&data)
            .take(count)
            .map(|((from, to), edge)| {
                let kind = EdgeKind::from_raw(edge).ok_or_else(|| unknown_edge(CALL, edge))?;
                Ok((GraphNode::wrap(from), GraphNode::wrap(to), kind))
            })
            .collect()
    }

    /// Adds every edge of `edges` in one call
    /// ([`cuGraphAddDependencies`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html));
    /// the driver refuses the whole batch when one is invalid (a node of another graph, an
    /// edge that exists, a cycle, an edge kind the nodes cannot have).
    pub fn add_dependencies(&self, edges: &[Edge<'_>]) -> Result<()> {
        let (from, to, data) = split_edges(edges);
        self.ctx.enter()?;
        // SAFETY: the graph is live; three arrays of `edges.len()` entries.
        unsafe {
            driver!(cuGraphAddDependencies(self.raw, from.as_ptr(), to.as_ptr(), data.as_ptr(), edges.len()))
        }
    }

    /// Removes every edge of `edges` in one call
    /// ([`cuGraphRemoveDependencies`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html));
    /// an edge is named by its two nodes and its kind. The driver refuses the whole batch when
    /// one does not exist.
    pub fn remove_dependencies(&self, edges: &[Edge<'_>]) -> Result<()> {
        let (from, to, data) = split_edges(edges);
        self.ctx.enter()?;
        // SAFETY: as in `add_dependencies`.
        unsafe {
            driver!(cuGraphRemoveDependencies(
                self.raw,
                from.as_ptr(),
                to.as_ptr(),
                data.as_ptr(),
                edges.len()
            ))
        }
    }

    /// Gives a kernel node of this graph a new kernel, launch configuration and arguments, as
    /// [`add_kernel_node`](Self::add_kernel_node) takes them
    /// ([`cuGraphKernelNodeSetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html);
    /// the launch attributes `config` asks for are set with
    /// [`cuGraphKernelNodeSetAttribute`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html),
    /// those it does not ask for keep their values). Executable graphs made earlier are not
    /// changed ([`GraphExec::set_kernel_node_args`](super::GraphExec::set_kernel_node_args)
    /// changes one).
    ///
    /// The arguments are checked as [`add_kernel_node`](Self::add_kernel_node) checks them; a
    /// node of another graph is an [`Error::InvalidArgument`], a node of another kind the
    /// driver's status.
    ///
    /// # Safety
    ///
    /// As for [`add_kernel_node`](Self::add_kernel_node): `args` match the kernel's
    /// parameters, and what they point to and the kernel's module or library stay alive as
    /// long as the graph, its clones and the executable graphs made from them may run (hand
    /// them to [`Graph::keep`]).
    pub unsafe fn set_kernel_node_args<A: KernelArgs>(
        &self,
        node: GraphNode<'_>,
        kernel: &impl NodeKernel,
        config: &LaunchConfig,
        args: A,
    ) -> Result<()> {
        const OP: &str = "Graph::set_kernel_node_args";
        let mut pointers = args.pointers();
        let params = kernel_params(OP, &self.ctx, kernel, config, &args, &mut pointers)?;
        self.check_nodes(OP, &[node])?;
        // SAFETY: the node is a live node of this graph; `params` points at one pointer per
        // argument, valid until `args` is dropped after the call (the driver copies them).
        unsafe { driver!(cuGraphKernelNodeSetParams(node.as_raw(), &params)) }?;
        set_launch_attributes(node, config)
    }

    /// Gives a memset node of this graph a new destination and value, as
    /// [`add_memset_node`](Self::add_memset_node) takes them
    /// ([`cuGraphMemsetNodeSetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html));
    /// the graph keeps the new memory alive.
    ///
    /// Bad lengths or element sizes, and a node of another graph, are an
    /// [`Error::InvalidArgument`]; a node of another kind fails with the driver's status.
    pub fn set_memset_node<T: Pod>(&self, node: GraphNode<'_>, dst: &GraphSlice<T>, value: T) -> Result<()> {
        const OP: &str = "Graph::set_memset_node";
        let params = memset_params(OP, dst, value)?;
        self.check_nodes(OP, &[node])?;
        // SAFETY: the node is a live node of this graph; the memory stays allocated (kept
        // below, before any launch can use it, or vouched for by `GraphSlice::from_raw`).
        unsafe { driver!(cuGraphMemsetNodeSetParams(node.as_raw(), &params)) }?;
        if let Some(owner) = dst.owner() {
            self.keep.push(owner);
        }
        Ok(())
    }

    /// Gives a memcpy node of this graph new slices, as
    /// [`add_memcpy_node`](Self::add_memcpy_node) takes them
    /// ([`cuGraphMemcpyNodeSetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html));
    /// the graph keeps both alive.
    ///
    /// Errors as for [`set_memset_node`](Self::set_memset_node).
    pub fn set_memcpy_node<T: Pod>(
        &self,
        node: GraphNode<'_>,
        dst: &GraphSlice<T>,
        src: &GraphSlice<T>,
    ) -> Result<()> {
        const OP: &str = "Graph::set_memcpy_node";
        let params = memcpy_params(OP, dst, src)?;
        self.check_nodes(OP, &[node])?;
        // SAFETY: as in `set_memset_node`.
        unsafe { driver!(cuGraphMemcpyNodeSetParams(node.as_raw(), &params)) }?;
        for owner in [dst.owner(), src.owner()].into_iter().flatten() {
            self.keep.push(owner);
        }
        Ok(())
    }

    /// Gives a host node of this graph a new closure, as
    /// [`add_host_node`](Self::add_host_node) takes it
    /// ([`cuGraphHostNodeSetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html));
    /// the graph keeps it alive, and the old one too (earlier executable graphs still run it).
    ///
    /// A node of another graph is an [`Error::InvalidArgument`]; a node of another kind fails
    /// with the driver's status.
    pub fn set_host_node(&self, node: GraphNode<'_>, f: impl Fn() + Send + Sync + 'static) -> Result<()> {
        self.check_nodes("Graph::set_host_node", &[node])?;
        let (host, params) = super::host::HostFunction::params(&self.ctx, f);
        // SAFETY: the node is a live node of this graph; the closure is kept below, and a
        // launch can only begin after this call returns.
        unsafe { driver!(cuGraphHostNodeSetParams(node.as_raw(), &params)) }?;
        self.keep.push(host);
        Ok(())
    }

    /// Makes an event record node of this graph record `event`
    /// ([`cuGraphEventRecordNodeSetEvent`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html));
    /// the graph keeps it alive.
    ///
    /// Errors as for [`set_host_node`](Self::set_host_node).
    pub fn set_event_record_node(&self, node: GraphNode<'_>, event: &Arc<Event>) -> Result<()> {
        self.check_nodes("Graph::set_event_record_node", &[node])?;
        // SAFETY: the node is a live node of this graph; the event is kept below.
        unsafe { driver!(cuGraphEventRecordNodeSetEvent(node.as_raw(), event.as_raw())) }?;
        self.keep.push(event.clone());
        Ok(())
    }

    /// Makes an event wait node of this graph wait for `event`
    /// ([`cuGraphEventWaitNodeSetEvent`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html));
    /// the graph keeps it alive.
    ///
    /// Errors as for [`set_host_node`](Self::set_host_node).
    pub fn set_event_wait_node(&self, node: GraphNode<'_>, event: &Arc<Event>) -> Result<()> {
        self.check_nodes("Graph::set_event_wait_node", &[node])?;
        // SAFETY: as in `set_event_record_node`.
        unsafe { driver!(cuGraphEventWaitNodeSetEvent(node.as_raw(), event.as_raw())) }?;
        self.keep.push(event.clone());
        Ok(())
    }

    /// Copies every launch attribute (priority, cluster, cooperative, ...) of kernel node `src`
    /// to kernel node `dst`, both of this graph
    /// ([`cuGraphKernelNodeCopyAttributes`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    /// Both must be of this graph because an attribute may name a handle (an event) that
    /// this graph's owner vouched for only for this graph.
    ///
    /// A node of another graph is an [`Error::InvalidArgument`]; nodes of other kinds or
    /// contexts fail with the driver's status.
    pub fn copy_kernel_node_attributes(&self, dst: GraphNode<'_>, src: GraphNode<'_>) -> Result<()> {
        self.check_nodes("Graph::copy_kernel_node_attributes", &[dst, src])?;
        // SAFETY: both nodes are live nodes of this graph.
        unsafe { driver!(cuGraphKernelNodeCopyAttributes(dst.as_raw(), src.as_raw())) }
    }
}

/// The three arrays the driver's edge calls take.
#[allow(clippy::type_complexity)]
fn split_edges(
    edges: &[Edge<'_>],
) -> (Vec<sys::CUgraphNode>, Vec<sys::CUgraphNode>, Vec<sys::CUgraphEdgeData>) {
    let from = edges.iter().map(|(f, _, _)| f.as_raw()).collect();
    let to = edges.iter().map(|(_, t, _)| t.as_raw()).collect();
    let data = edges.iter().map(|(_, _, k)| k.as_raw()).collect();
    (from, to, data)
}

#[cold]
fn unknown_edge(call: &'static str, edge: &sys::CUgraphEdgeData) -> Error {
    Error::invalid(
        call,
        format!(
            "an edge of a kind this crate does not know (ports {} -> {}, type {})",
            edge.from_port, edge.to_port, edge.type_
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edges_split_into_the_drivers_three_arrays() {
        let a = GraphNode::wrap(0x10 as sys::CUgraphNode);
        let b = GraphNode::wrap(0x20 as sys::CUgraphNode);
        let (from, to, data) = split_edges(&[(a, b, EdgeKind::Full), (b, a, EdgeKind::LaunchOrder)]);
        assert_eq!(from, vec![a.as_raw(), b.as_raw()]);
        assert_eq!(to, vec![b.as_raw(), a.as_raw()]);
        let kinds: Vec<_> = data.iter().map(EdgeKind::from_raw).collect();
        assert_eq!(kinds, vec![Some(EdgeKind::Full), Some(EdgeKind::LaunchOrder)]);
    }

    #[test]
    fn keys_are_the_node_handles() {
        let a = GraphNode::wrap(0x30 as sys::CUgraphNode);
        assert_eq!(a.key(), NodeKey(0x30));
        assert_ne!(a.key(), GraphNode::wrap(0x40 as sys::CUgraphNode).key());
        let text =
            unknown_edge("t", &sys::CUgraphEdgeData { from_port: 7, ..EdgeKind::Full.as_raw() }).to_string();
        assert!(text.contains("ports 7 -> 0"), "{text}");
    }
}
