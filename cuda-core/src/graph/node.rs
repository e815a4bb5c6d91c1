//! Nodes: handles, kinds, dependencies, and the nodes that refer to no memory (empty, child
//! graph, event record and wait).

use super::Graph;
use crate::error::{Error, Result, check};
use crate::event::Event;
use cuhost_driver_sys as sys;
use std::marker::PhantomData;
use std::sync::Arc;

/// A node of a graph (`CUgraphNode`), valid while the graph it belongs to is borrowed.
///
/// Nodes are passed as the dependencies of the nodes added after them, and name the node
/// whose parameters an [`GraphExec`](super::GraphExec) update changes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct GraphNode<'g> {
    raw: sys::CUgraphNode,
    _graph: PhantomData<&'g Graph>,
}

impl std::fmt::Debug for GraphNode<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("GraphNode").field(&self.raw).finish()
    }
}

/// The kind of a node (`CUgraphNodeType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeType {
    /// `CU_GRAPH_NODE_TYPE_KERNEL`.
    Kernel,
    /// `CU_GRAPH_NODE_TYPE_MEMCPY`.
    Memcpy,
    /// `CU_GRAPH_NODE_TYPE_MEMSET`.
    Memset,
    /// `CU_GRAPH_NODE_TYPE_HOST`.
    Host,
    /// `CU_GRAPH_NODE_TYPE_GRAPH`: a child graph.
    ChildGraph,
    /// `CU_GRAPH_NODE_TYPE_EMPTY`.
    Empty,
    /// `CU_GRAPH_NODE_TYPE_WAIT_EVENT`.
    EventWait,
    /// `CU_GRAPH_NODE_TYPE_EVENT_RECORD`.
    EventRecord,
    /// `CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL`.
    ExternalSemaphoreSignal,
    /// `CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT`.
    ExternalSemaphoreWait,
    /// `CU_GRAPH_NODE_TYPE_MEM_ALLOC`.
    MemAlloc,
    /// `CU_GRAPH_NODE_TYPE_MEM_FREE`.
    MemFree,
    /// `CU_GRAPH_NODE_TYPE_BATCH_MEM_OP`.
    BatchMemOp,
    /// `CU_GRAPH_NODE_TYPE_CONDITIONAL`.
    Conditional,
}

impl TryFrom<sys::CUgraphNodeType> for NodeType {
    type Error = Error;
    fn try_from(raw: sys::CUgraphNodeType) -> Result<NodeType> {
        use sys::CUgraphNodeType as T;
        Ok(match raw {
            T::CU_GRAPH_NODE_TYPE_KERNEL => NodeType::Kernel,
            T::CU_GRAPH_NODE_TYPE_MEMCPY => NodeType::Memcpy,
            T::CU_GRAPH_NODE_TYPE_MEMSET => NodeType::Memset,
            T::CU_GRAPH_NODE_TYPE_HOST => NodeType::Host,
            T::CU_GRAPH_NODE_TYPE_GRAPH => NodeType::ChildGraph,
            T::CU_GRAPH_NODE_TYPE_EMPTY => NodeType::Empty,
            T::CU_GRAPH_NODE_TYPE_WAIT_EVENT => NodeType::EventWait,
            T::CU_GRAPH_NODE_TYPE_EVENT_RECORD => NodeType::EventRecord,
            T::CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL => NodeType::ExternalSemaphoreSignal,
            T::CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT => NodeType::ExternalSemaphoreWait,
            T::CU_GRAPH_NODE_TYPE_MEM_ALLOC => NodeType::MemAlloc,
            T::CU_GRAPH_NODE_TYPE_MEM_FREE => NodeType::MemFree,
            T::CU_GRAPH_NODE_TYPE_BATCH_MEM_OP => NodeType::BatchMemOp,
            T::CU_GRAPH_NODE_TYPE_CONDITIONAL => NodeType::Conditional,
            other => {
                return Err(Error::invalid(
                    "NodeType::try_from",
                    format!("unknown CUgraphNodeType {}; a newer driver added a node kind", other.0),
                ));
            }
        })
    }
}

/// What an edge between two nodes waits for (`CUgraphEdgeData`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum EdgeKind {
    /// The dependent node starts once the other has finished and its writes are visible.
    #[default]
    Full,
    /// Between kernel nodes: the dependent kernel may start once every block of the other has
    /// triggered programmatic completion (`cudaTriggerProgrammaticLaunchCompletion`, or its
    /// end); it waits for the other's results with `cudaGridDependencySynchronize`
    /// (`CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC` from `CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC`;
    /// compute capability 9.0 and later).
    Programmatic,
    /// Between kernel nodes: the dependent kernel may start once every block of the other has
    /// started (`CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC` from
    /// `CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER`).
    LaunchOrder,
}

impl EdgeKind {
    /// The raw edge data.
    pub fn as_raw(self) -> sys::CUgraphEdgeData {
        use sys::CUgraphDependencyType as T;
        let (port, type_) = match self {
            EdgeKind::Full => (sys::CU_GRAPH_KERNEL_NODE_PORT_DEFAULT, T::CU_GRAPH_DEPENDENCY_TYPE_DEFAULT),
            EdgeKind::Programmatic => {
                (sys::CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC, T::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC)
            }
            EdgeKind::LaunchOrder => {
                (sys::CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER, T::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC)
            }
        };
        sys::CUgraphEdgeData {
            from_port: port as u8,
            to_port: 0,
            type_: type_.0 as u8,
            reserved: [0; 5],
            ..Default::default()
        }
    }

    /// The kind of raw edge data, where it is one of these.
    pub fn from_raw(raw: &sys::CUgraphEdgeData) -> Option<EdgeKind> {
        [EdgeKind::Full, EdgeKind::Programmatic, EdgeKind::LaunchOrder].into_iter().find(|kind| {
            let k = kind.as_raw();
            (k.from_port, k.to_port, k.type_) == (raw.from_port, raw.to_port, raw.type_)
        })
    }
}

impl<'g> GraphNode<'g> {
    pub(crate) fn wrap(raw: sys::CUgraphNode) -> GraphNode<'g> {
        GraphNode { raw, _graph: PhantomData }
    }

    /// The raw `CUgraphNode`.
    #[inline]
    pub fn as_raw(&self) -> sys::CUgraphNode {
        self.raw
    }

    /// The address of the node's handle: what [`Error::GraphUpdate`] names.
    pub fn id(&self) -> usize {
        self.raw as usize
    }

    /// The node's kind
    /// ([`cuGraphNodeGetType`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    pub fn node_type(&self) -> Result<NodeType> {
        let mut raw = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
        // SAFETY: the node is live while its graph is borrowed; one out-parameter.
        unsafe { driver!(cuGraphNodeGetType(self.raw, &mut raw)) }?;
        NodeType::try_from(raw)
    }

    /// The nodes this one depends on
    /// ([`cuGraphNodeGetDependencies`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// Fails as [`dependency_edges`](Self::dependency_edges) does.
    pub fn dependencies(&self) -> Result<Vec<GraphNode<'g>>> {
        Ok(self.dependency_edges()?.into_iter().map(|(node, _)| node).collect())
    }

    /// The nodes this one depends on, with the kind of each edge
    /// ([`cuGraphNodeGetDependencies`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// Fails with the driver's status when it refuses the query, and with an
    /// [`Error::InvalidArgument`] for an edge kind this crate does not know (from a driver
    /// newer than its headers).
    pub fn dependency_edges(&self) -> Result<Vec<(GraphNode<'g>, EdgeKind)>> {
        edge_list("cuGraphNodeGetDependencies", |nodes, edges, count| {
            // SAFETY: the node is live; `nodes` and `edges` are null or have room for `*count`.
            unsafe { sys::cuGraphNodeGetDependencies(self.raw, nodes, edges, count) }
        })
    }

    /// The nodes that depend on this one
    /// ([`cuGraphNodeGetDependentNodes`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// Fails as [`dependent_edges`](Self::dependent_edges) does.
    pub fn dependents(&self) -> Result<Vec<GraphNode<'g>>> {
        Ok(self.dependent_edges()?.into_iter().map(|(node, _)| node).collect())
    }

    /// The nodes that depend on this one, with the kind of each edge
    /// ([`cuGraphNodeGetDependentNodes`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// Fails as [`dependency_edges`](Self::dependency_edges) does.
    pub fn dependent_edges(&self) -> Result<Vec<(GraphNode<'g>, EdgeKind)>> {
        edge_list("cuGraphNodeGetDependentNodes", |nodes, edges, count| {
            // SAFETY: as in `dependency_edges`.
            unsafe { sys::cuGraphNodeGetDependentNodes(self.raw, nodes, edges, count) }
        })
    }
}

/// Asks `query(null, null, &mut count)` for the number of edges, then
/// `query(nodes, edges, &mut count)` for them. The edge data is always asked for: without it the
/// driver refuses graphs whose edges carry any (`CUDA_ERROR_LOSSY_QUERY`).
fn edge_list<'g>(
    call: &'static str,
    mut query: impl FnMut(*mut sys::CUgraphNode, *mut sys::CUgraphEdgeData, *mut usize) -> sys::CUresult,
) -> Result<Vec<(GraphNode<'g>, EdgeKind)>> {
    let mut count = 0;
    check(call, query(std::ptr::null_mut(), std::ptr::null_mut(), &mut count))?;
    let mut raw = vec![std::ptr::null_mut(); count];
    let mut edges = vec![EdgeKind::Full.as_raw(); count];
    if count > 0 {
        check(call, query(raw.as_mut_ptr(), edges.as_mut_ptr(), &mut count))?;
        raw.truncate(count);
        edges.truncate(count);
    }
    raw.into_iter()
        .zip(&edges)
        .map(|(node, edge)| {
            let kind = EdgeKind::from_raw(edge).ok_or_else(|| {
                Error::invalid(
                    call,
                    format!(
                        "an edge of a kind this crate does not know (ports {} -> {}, type {})",
                        edge.from_port, edge.to_port, edge.type_
                    ),
                )
            })?;
            Ok((GraphNode::wrap(node), kind))
        })
        .collect()
}

/// Asks `query(null, &mut count)` for the number of nodes, then `query(buffer, &mut count)`
/// for them.
fn node_list<'g>(
    call: &'static str,
    mut query: impl FnMut(*mut sys::CUgraphNode, *mut usize) -> sys::CUresult,
) -> Result<Vec<GraphNode<'g>>> {
    let mut count = 0;
    check(call, query(std::ptr::null_mut(), &mut count))?;
    let mut raw = vec![std::ptr::null_mut(); count];
    if count > 0 {
        check(call, query(raw.as_mut_ptr(), &mut count))?;
        raw.truncate(count);
    }
    Ok(raw.into_iter().map(GraphNode::wrap).collect())
}

/// The raw handles of `nodes`, as the driver's `dependencies` arrays take them.
#[inline]
pub(crate) fn raw_nodes(nodes: &[GraphNode<'_>]) -> *const sys::CUgraphNode {
    if nodes.is_empty() { std::ptr::null() } else { nodes.as_ptr().cast() }
}

impl Graph {
    /// Adds a node by `add(out, dependencies, count)`, one driver call, with the graph's
    /// context current.
    pub(crate) fn add_with(
        &self,
        call: &'static str,
        dependencies: &[GraphNode<'_>],
        add: impl FnOnce(*mut sys::CUgraphNode, *const sys::CUgraphNode, usize) -> sys::CUresult,
    ) -> Result<GraphNode<'_>> {
        self.ctx.enter()?;
        let mut raw = std::ptr::null_mut();
        check(call, add(&mut raw, raw_nodes(dependencies), dependencies.len()))?;
        Ok(GraphNode::wrap(raw))
    }

    /// Every node of the graph
    /// ([`cuGraphGetNodes`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    pub fn nodes(&self) -> Result<Vec<GraphNode<'_>>> {
        node_list("cuGraphGetNodes", |nodes, count| {
            // SAFETY: the graph is live; `nodes` is null or has room for `*count` handles.
            unsafe { sys::cuGraphGetNodes(self.raw, nodes, count) }
        })
    }

    /// The nodes that depend on no other
    /// ([`cuGraphGetRootNodes`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    pub fn root_nodes(&self) -> Result<Vec<GraphNode<'_>>> {
        node_list("cuGraphGetRootNodes", |nodes, count| {
            // SAFETY: as in `nodes`.
            unsafe { sys::cuGraphGetRootNodes(self.raw, nodes, count) }
        })
    }

    /// Makes `to` depend on `from` through an edge of `kind`
    /// ([`cuGraphAddDependencies`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    pub fn add_dependency(&self, from: GraphNode<'_>, to: GraphNode<'_>, kind: EdgeKind) -> Result<()> {
        let edge = kind.as_raw();
        // SAFETY: the graph and both nodes are live; one edge with its data.
        unsafe { driver!(cuGraphAddDependencies(self.raw, &from.raw, &to.raw, &edge, 1)) }
    }

    /// Removes the edge of `kind` from `from` to `to`
    /// ([`cuGraphRemoveDependencies`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    pub fn remove_dependency(&self, from: GraphNode<'_>, to: GraphNode<'_>, kind: EdgeKind) -> Result<()> {
        let edge = kind.as_raw();
        // SAFETY: as in `add_dependency`.
        unsafe { driver!(cuGraphRemoveDependencies(self.raw, &from.raw, &to.raw, &edge, 1)) }
    }

    /// Adds a node that does nothing: a join point for dependencies
    /// ([`cuGraphAddEmptyNode`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    pub fn add_empty_node(&self, dependencies: &[GraphNode<'_>]) -> Result<GraphNode<'_>> {
        let graph = self.raw;
        // SAFETY: the graph is live; the dependencies are nodes of it (the driver checks).
        self.add_with("cuGraphAddEmptyNode", dependencies, |out, deps, n| unsafe {
            sys::cuGraphAddEmptyNode(out, graph, deps, n)
        })
    }

    /// Adds a node that runs a copy of `child`
    /// ([`cuGraphAddChildGraphNode`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    /// Later changes to `child` do not reach the copy; what `child` keeps alive now, this
    /// graph keeps alive too (a snapshot: the two graphs can hold each other without keeping
    /// each other alive).
    pub fn add_child_graph_node(
        &self,
        dependencies: &[GraphNode<'_>],
        child: &Graph,
    ) -> Result<GraphNode<'_>> {
        let (graph, child_raw) = (self.raw, child.raw);
        // SAFETY: both graphs are live; the driver clones the child.
        let node = self.add_with("cuGraphAddChildGraphNode", dependencies, |out, deps, n| unsafe {
            sys::cuGraphAddChildGraphNode(out, graph, deps, n, child_raw)
        })?;
        self.keep.push(child.keep.snapshot());
        Ok(node)
    }

    /// Adds a node that records `event` when its dependencies are done
    /// ([`cuGraphAddEventRecordNode`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html));
    /// the graph keeps the event alive.
    pub fn add_event_record_node(
        &self,
        dependencies: &[GraphNode<'_>],
        event: &Arc<Event>,
    ) -> Result<GraphNode<'_>> {
        let (graph, raw_event) = (self.raw, event.as_raw());
        // SAFETY: the graph and the event are live, and the event stays alive with the graph.
        let node = self.add_with("cuGraphAddEventRecordNode", dependencies, |out, deps, n| unsafe {
            sys::cuGraphAddEventRecordNode(out, graph, deps, n, raw_event)
        })?;
        self.keep.push(event.clone());
        Ok(node)
    }

    /// Adds a node that waits for `event` (its most recent record when the node runs)
    /// ([`cuGraphAddEventWaitNode`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html));
    /// the graph keeps the event alive.
    pub fn add_event_wait_node(
        &self,
        dependencies: &[GraphNode<'_>],
        event: &Arc<Event>,
    ) -> Result<GraphNode<'_>> {
        let (graph, raw_event) = (self.raw, event.as_raw());
        // SAFETY: as in `add_event_record_node`.
        let node = self.add_with("cuGraphAddEventWaitNode", dependencies, |out, deps, n| unsafe {
            sys::cuGraphAddEventWaitNode(out, graph, deps, n, raw_event)
        })?;
        self.keep.push(event.clone());
        Ok(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_kinds_convert_from_the_raw_values_and_unknown_ones_are_errors() {
        use sys::CUgraphNodeType as T;
        assert_eq!(NodeType::try_from(T::CU_GRAPH_NODE_TYPE_KERNEL).ok(), Some(NodeType::Kernel));
        assert_eq!(NodeType::try_from(T::CU_GRAPH_NODE_TYPE_CONDITIONAL).ok(), Some(NodeType::Conditional));
        assert_eq!(NodeType::try_from(T::CU_GRAPH_NODE_TYPE_GRAPH).ok(), Some(NodeType::ChildGraph));
        assert!(NodeType::try_from(T(999)).is_err());
    }

    #[test]
    fn nodes_pass_to_the_driver_as_an_array_of_handles() {
        let a = GraphNode::wrap(0x10 as sys::CUgraphNode);
        let b = GraphNode::wrap(0x20 as sys::CUgraphNode);
        let nodes = [a, b];
        let p = raw_nodes(&nodes);
        // SAFETY: two handles of a live array.
        let read = unsafe { [p.read(), p.add(1).read()] };
        assert_eq!(read, [a.as_raw(), b.as_raw()]);
        assert!(raw_nodes(&[]).is_null());
        assert_eq!(a.id(), 0x10);
    }

    #[test]
    fn edge_kinds_round_trip_through_the_raw_edge_data() {
        for kind in [EdgeKind::Full, EdgeKind::Programmatic, EdgeKind::LaunchOrder] {
            assert_eq!(EdgeKind::from_raw(&kind.as_raw()), Some(kind));
        }
        let raw = EdgeKind::LaunchOrder.as_raw();
        assert_eq!((raw.from_port, raw.type_), (2, 1));
        let odd = sys::CUgraphEdgeData {
            from_port: 9,
            to_port: 0,
            type_: 0,
            reserved: [0; 5],
            ..Default::default()
        };
        assert_eq!(EdgeKind::from_raw(&odd), None);
    }
}
