//! Reading and setting the semaphores of external-semaphore signal and wait nodes, in a graph
//! and in an executable graph.

use super::exec::{GraphExec, Role};
use super::{Graph, GraphNode};
use crate::error::Result;
use crate::interop::external::{Batch, ExternalSemaphore, SignalParams, WaitParams};
use cuhost_driver_sys as sys;
use std::sync::Arc;

/// One semaphore of a signal or wait node, as the driver reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SemaphoreNodeEntry {
    /// The semaphore (compare with [`ExternalSemaphore::as_raw`]).
    pub semaphore: sys::CUexternalSemaphore,
    /// The fence value a timeline signal sets or a wait waits for (0 for others).
    pub value: u64,
    /// The keyed-mutex key (0 for other kinds).
    pub key: u64,
    /// The raw flags (`CUDA_EXTERNAL_SEMAPHORE_*_SKIP_NVSCIBUF_MEMSYNC`).
    pub flags: u32,
}

/// The semaphores a signal or wait node names, copied out of the driver's arrays (which the
/// node owns and the next change of its parameters frees).
fn entries<R>(
    handles: *const sys::CUexternalSemaphore,
    params: *const R,
    count: u32,
    read: impl Fn(&R) -> (u64, u64, u32),
) -> Vec<SemaphoreNodeEntry> {
    if handles.is_null() || params.is_null() || count == 0 {
        return Vec::new();
    }
    // SAFETY: the driver returned two arrays of `count` elements, valid until the node's
    // parameters change; the node is borrowed for this read, and they are copied at once.
    let (handles, params) = unsafe {
        (
            std::slice::from_raw_parts(handles, count as usize),
            std::slice::from_raw_parts(params, count as usize),
        )
    };
    handles
        .iter()
        .zip(params)
        .map(|(&semaphore, p)| {
            let (value, key, flags) = read(p);
            SemaphoreNodeEntry { semaphore, value, key, flags }
        })
        .collect()
}

impl GraphNode<'_> {
    /// The semaphores an external-semaphore signal node signals, with their parameters
    /// ([`cuGraphExternalSemaphoresSignalNodeGetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// Another kind of node fails with the driver's status.
    pub fn external_signal_params(&self) -> Result<Vec<SemaphoreNodeEntry>> {
        let mut raw = sys::CUDA_EXT_SEM_SIGNAL_NODE_PARAMS { ..Default::default() };
        // SAFETY: the node is live while its graph is borrowed; one out-parameter.
        unsafe { driver!(cuGraphExternalSemaphoresSignalNodeGetParams(self.as_raw(), &mut raw)) }?;
        Ok(entries(raw.extSemArray, raw.paramsArray, raw.numExtSems, |p| {
            (p.params.fence.value, p.params.keyedMutex.key, p.flags)
        }))
    }

    /// The semaphores an external-semaphore wait node waits for, with their parameters
    /// ([`cuGraphExternalSemaphoresWaitNodeGetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// Another kind of node fails with the driver's status.
    pub fn external_wait_params(&self) -> Result<Vec<SemaphoreNodeEntry>> {
        let mut raw = sys::CUDA_EXT_SEM_WAIT_NODE_PARAMS { ..Default::default() };
        // SAFETY: as in `external_signal_params`.
        unsafe { driver!(cuGraphExternalSemaphoresWaitNodeGetParams(self.as_raw(), &mut raw)) }?;
        Ok(entries(raw.extSemArray, raw.paramsArray, raw.numExtSems, |p| {
            (p.params.fence.value, p.params.keyedMutex.key, p.flags)
        }))
    }
}

/// The semaphores of a node, as one value to keep.
fn kept(semaphores: impl Iterator<Item = Arc<ExternalSemaphore>>) -> Arc<Vec<Arc<ExternalSemaphore>>> {
    Arc::new(semaphores.collect())
}

impl Graph {
    /// Gives an external-semaphore signal node of this graph new semaphores and parameters, as
    /// [`add_external_signal_node`](Self::add_external_signal_node) takes them
    /// ([`cuGraphExternalSemaphoresSignalNodeSetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html));
    /// the graph keeps the semaphores alive.
    ///
    /// Errors as for [`add_external_signal_node`](Self::add_external_signal_node); a node of
    /// another graph is an [`Error::InvalidArgument`](crate::error::Error::InvalidArgument).
    pub fn set_external_signal_node(
        &self,
        node: GraphNode<'_>,
        signals: &[(&Arc<ExternalSemaphore>, SignalParams)],
    ) -> Result<()> {
        const OP: &str = "Graph::set_external_signal_node";
        let items = signals.iter().map(|(s, p)| (s.as_ref(), *p));
        let mut batch = Batch::new(OP, &self.ctx, items, SignalParams::to_raw)?;
        self.check_nodes(OP, &[node])?;
        let params = sys::CUDA_EXT_SEM_SIGNAL_NODE_PARAMS {
            extSemArray: batch.handles.as_mut_ptr(),
            paramsArray: batch.params.as_ptr(),
            numExtSems: batch.count,
            ..Default::default()
        };
        // SAFETY: the node is a live node of this graph; the arrays hold `count` elements and
        // outlive the call, which copies them; the semaphores are kept below.
        unsafe { driver!(cuGraphExternalSemaphoresSignalNodeSetParams(node.as_raw(), &params)) }?;
        self.keep.push(kept(signals.iter().map(|(s, _)| (*s).clone())));
        Ok(())
    }

    /// Gives an external-semaphore wait node of this graph new semaphores and parameters, as
    /// [`add_external_wait_node`](Self::add_external_wait_node) takes them
    /// ([`cuGraphExternalSemaphoresWaitNodeSetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html));
    /// the graph keeps the semaphores alive.
    ///
    /// Errors as for [`set_external_signal_node`](Self::set_external_signal_node).
    pub fn set_external_wait_node(
        &self,
        node: GraphNode<'_>,
        waits: &[(&Arc<ExternalSemaphore>, WaitParams)],
    ) -> Result<()> {
        const OP: &str = "Graph::set_external_wait_node";
        let items = waits.iter().map(|(s, p)| (s.as_ref(), *p));
        let mut batch = Batch::new(OP, &self.ctx, items, WaitParams::to_raw)?;
        self.check_nodes(OP, &[node])?;
        let params = sys::CUDA_EXT_SEM_WAIT_NODE_PARAMS {
            extSemArray: batch.handles.as_mut_ptr(),
            paramsArray: batch.params.as_ptr(),
            numExtSems: batch.count,
            ..Default::default()
        };
        // SAFETY: as in `set_external_signal_node`.
        unsafe { driver!(cuGraphExternalSemaphoresWaitNodeSetParams(node.as_raw(), &params)) }?;
        self.keep.push(kept(waits.iter().map(|(s, _)| (*s).clone())));
        Ok(())
    }
}

impl GraphExec {
    /// Gives an external-semaphore signal node new semaphores and parameters for later
    /// launches
    /// ([`cuGraphExecExternalSemaphoresSignalNodeSetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html));
    /// `node` is the node of the graph this was made from. The semaphores are kept alive, and
    /// the ones they replace let go of once no launch may use them.
    ///
    /// Errors as for [`Graph::add_external_signal_node`]; the driver refuses a node of another
    /// graph or kind, and a change in the number of semaphores.
    pub fn set_external_signal_node(
        &self,
        node: GraphNode<'_>,
        signals: &[(&Arc<ExternalSemaphore>, SignalParams)],
    ) -> Result<()> {
        const OP: &str = "GraphExec::set_external_signal_node";
        let items = signals.iter().map(|(s, p)| (s.as_ref(), *p));
        let mut batch = Batch::new(OP, self.context(), items, SignalParams::to_raw)?;
        let params = sys::CUDA_EXT_SEM_SIGNAL_NODE_PARAMS {
            extSemArray: batch.handles.as_mut_ptr(),
            paramsArray: batch.params.as_ptr(),
            numExtSems: batch.count,
            ..Default::default()
        };
        self.context().enter()?;
        // SAFETY: both handles are live; the arrays outlive the call, which copies them; the
        // semaphores are kept below.
        unsafe {
            driver!(cuGraphExecExternalSemaphoresSignalNodeSetParams(self.as_raw(), node.as_raw(), &params))
        }?;
        self.replace(node, Role::Semaphores, Some(kept(signals.iter().map(|(s, _)| (*s).clone()))));
        Ok(())
    }

    /// Gives an external-semaphore wait node new semaphores and parameters for later launches
    /// ([`cuGraphExecExternalSemaphoresWaitNodeSetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)),
    /// keeping them as [`set_external_signal_node`](Self::set_external_signal_node) does.
    ///
    /// Errors as for [`set_external_signal_node`](Self::set_external_signal_node).
    pub fn set_external_wait_node(
        &self,
        node: GraphNode<'_>,
        waits: &[(&Arc<ExternalSemaphore>, WaitParams)],
    ) -> Result<()> {
        const OP: &str = "GraphExec::set_external_wait_node";
        let items = waits.iter().map(|(s, p)| (s.as_ref(), *p));
        let mut batch = Batch::new(OP, self.context(), items, WaitParams::to_raw)?;
        let params = sys::CUDA_EXT_SEM_WAIT_NODE_PARAMS {
            extSemArray: batch.handles.as_mut_ptr(),
            paramsArray: batch.params.as_ptr(),
            numExtSems: batch.count,
            ..Default::default()
        };
        self.context().enter()?;
        // SAFETY: as in `set_external_signal_node`.
        unsafe {
            driver!(cuGraphExecExternalSemaphoresWaitNodeSetParams(self.as_raw(), node.as_raw(), &params))
        }?;
        self.replace(node, Role::Semaphores, Some(kept(waits.iter().map(|(s, _)| (*s).clone()))));
        Ok(())
    }
}
