//! Executable graphs: instantiation, upload, launch, and updates of the whole graph or of one
//! node.

use super::buffer::ExecMemory;
use super::host::HostFunction;
use super::keep::{KeepAlive, Kept, all_empty};
use super::kernel::{NodeKernel, kernel_params};
use super::memory::{GraphSlice, memcpy_params, memset_params};
use super::{Graph, GraphNode};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::flags::flags;
use crate::launch::{KernelArgs, LaunchConfig};
use crate::memory::HostAccess;
use crate::stream::Stream;
use bytemuck::Pod;
use cuhost_driver_sys as sys;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;

flags! {
    /// How a graph is instantiated (`CUgraphInstantiate_flags`).
    #[derive(Clone, Copy, PartialEq, Eq, Hash)]
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
/// It keeps alive what the graph it was made from (or last updated from) keeps alive, and what
/// its node setters were given. A value a setter or [`update`](Self::update) replaces is let go
/// of once a launch queued after the replacement is known to be complete (launches of one
/// executable graph run in order), checked at later launches and setter calls; at once if it
/// was never launched. Once launched, dropping it waits for the work queued in its context
/// before it lets go of the values (when there are any: a graph that keeps nothing is dropped
/// at once), and keeps them for good if that wait fails.
pub struct GraphExec {
    raw: sys::CUgraphExec,
    ctx: Context,
    keep: RefCell<ExecKeep>,
    /// How many launches were queued.
    launches: Cell<u64>,
}

/// Which value of a node a setter gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Role {
    Destination,
    Source,
    Host,
    Child,
    Event,
    /// The external semaphores of a signal or wait node.
    #[cfg_attr(not(feature = "interop"), allow(dead_code))]
    Semaphores,
}

/// What an executable graph keeps alive.
#[derive(Debug, Default)]
struct ExecKeep {
    /// The list of the graph it was made from, or last updated from, and the launch count
    /// when it was.
    graph: Option<(Arc<KeepAlive>, u64)>,
    /// The values node setters gave, by node and role, with the launch count when they were
    /// given; a later setter replaces them.
    slots: HashMap<(usize, Role), (Kept, u64)>,
    /// Replaced values that launches queued before the replacement may still use.
    retired: Vec<Kept>,
    /// Retired values with an event recorded after a later launch: free once it completes.
    fenced: Vec<(Event, Vec<Kept>)>,
    /// An event of a batch that was let go of, for the next batch.
    spare: Option<Event>,
    /// The pinned buffers its captured copies use: each launch is ordered after their copies
    /// in flight and recorded on them (see [`GraphExec::launch`]).
    host: Vec<HostAccess>,
    /// The graph memory it allocates and does not free (see [`GraphBuffer`](super::GraphBuffer)),
    /// whose trackers are among `host`.
    memory: ExecMemory,
}

impl ExecKeep {
    /// Lets go of the fenced batches whose launch is complete.
    fn release_completed(&mut self) {
        let mut i = 0;
        while i < self.fenced.len() {
            let (event, _) = &self.fenced[i];
            // SAFETY: the event is live. The raw call neither reports nor consumes the
            // context's deferred errors; any answer but success keeps the batch.
            if unsafe { sys::cuEventQuery(event.as_raw()) } == sys::CUresult::CUDA_SUCCESS {
                let (event, batch) = self.fenced.swap_remove(i);
                drop(batch);
                self.spare.get_or_insert(event);
            } else {
                i += 1;
            }
        }
    }

    /// Retires a replaced value, given at launch count `since`, now that the count is `now`:
    /// gone at once if no launch was queued in between (none can use it), else kept until a
    /// later launch completes.
    fn retire(&mut self, old: Kept, since: u64, now: u64) {
        if now != since {
            self.retired.push(old);
        }
    }

    /// Whether nothing is kept.
    fn is_empty(&self) -> bool {
        self.graph.as_ref().is_none_or(|(g, _)| g.is_empty())
            && all_empty(&self.slots.values().map(|(v, _)| v.clone()).collect::<Vec<_>>())
            && all_empty(&self.retired)
            && self.fenced.iter().all(|(_, batch)| all_empty(batch))
    }
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
            ..Default::default()
        };
        // SAFETY: the graph (and the stream, when given) are live; one out-parameter and the
        // in-out parameters.
        let status = unsafe { sys::cuGraphInstantiateWithParams(&mut raw, self.raw, &mut params) };
        if status != sys::CUresult::CUDA_SUCCESS {
            return Err(instantiate_refused(status, &params));
        }
        let memory = ExecMemory::of(&self.keep, flags);
        let mut host = self.keep.host_accesses();
        if !memory.is_empty() {
            host.extend(memory.accesses());
            host.sort_by_key(|a| Arc::as_ptr(&a.uses) as usize);
        }
        let keep = ExecKeep { graph: Some((self.keep.clone(), 0)), host, memory, ..ExecKeep::default() };
        Ok(GraphExec { raw, ctx: self.ctx.clone(), keep: RefCell::new(keep), launches: Cell::new(0) })
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
        unsafe { driver!(cuGraphExecGetFlags(self.raw, &mut flags)) }?;
        Ok(InstantiateFlags::from_bits_retain(flags))
    }

    /// Queues the whole graph on `stream`, after the work queued there before and after any
    /// earlier launch of this executable graph
    /// ([`cuGraphLaunch`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    /// The stream must belong to the graph's context.
    ///
    /// When copies captured into the graph use [`PinnedBuffer`](crate::memory::PinnedBuffer)s, the
    /// launch is ordered after those buffers' copies in flight on other streams and recorded on
    /// each buffer as one more copy: [`PinnedBuffer::as_slice`](crate::memory::PinnedBuffer::as_slice)
    /// waits for the launches that write the buffer, and
    /// [`as_mut_slice`](crate::memory::PinnedBuffer::as_mut_slice) for every launch that uses it, so
    /// the host reads results and writes new inputs between launches safely. A graph without
    /// such buffers costs nothing more.
    ///
    /// The same holds for the buffers of [`add_memcpy_to_pinned_node`](Graph::add_memcpy_to_pinned_node)
    /// and [`add_memcpy_from_pinned_node`](Graph::add_memcpy_from_pinned_node), and a launch
    /// is refused while the host holds a slice of such a buffer that the launch would race
    /// with. Memory of allocation nodes that is freed outside the graph
    /// ([`GraphBuffer`](super::GraphBuffer)) is recorded as allocated by the launch; a launch
    /// while an earlier one's allocation is unfreed, without
    /// [`AUTO_FREE_ON_LAUNCH`](InstantiateFlags::AUTO_FREE_ON_LAUNCH), or on a capturing
    /// stream, is refused (the driver captures no graph launch: add the graph as a child graph
    /// node instead).
    ///
    /// Fails with the driver's status when the launch is refused (a stream of another context,
    /// an earlier fault), or when it cannot be recorded on such a buffer (then the launch was
    /// waited for instead); the refusals above are [`Error::InvalidArgument`]s.
    #[inline]
    pub fn launch(&self, stream: &Stream) -> Result<()> {
        self.ctx.take_deferred()?;
        stream.bind_if_default()?;
        if crate::stream::capturing::any() {
            refuse_capture(stream)?;
        }
        if self.keep.borrow().host.is_empty() {
            self.launch_raw(stream)?;
        } else {
            self.launch_tracked(stream)?;
        }
        if !self.keep.borrow().retired.is_empty() || !self.keep.borrow().fenced.is_empty() {
            self.fence_retired(stream);
        }
        Ok(())
    }

    /// Queues one launch on `stream`.
    #[inline]
    fn launch_raw(&self, stream: &Stream) -> Result<()> {
        self.launches.set(self.launches.get().wrapping_add(1));
        // SAFETY: both handles are live; everything the graph refers to is kept alive.
        unsafe { driver!(cuGraphLaunch(self.raw, stream.as_raw())) }
    }

    /// A launch of a graph whose captured copies use pinned buffers: ordered after the
    /// buffers' copies in flight on other streams, and recorded on each buffer, so that the
    /// host waits for it before it reads a buffer the graph writes, or writes one it uses. A
    /// launch that is itself captured into another graph hands the buffers to that graph,
    /// whose launches then track them.
    #[cold]
    fn launch_tracked(&self, stream: &Stream) -> Result<()> {
        if !self.keep.borrow().memory.is_empty() {
            let keep = self.keep.borrow();
            return keep.memory.launch(&keep.host, stream, || self.launch_raw(stream));
        }
        if let Some(capture) = crate::stream::capture_of(stream)? {
            // Captured into another graph: that graph's launches are what use the buffers.
            self.launch_raw(stream)?;
            for access in &self.keep.borrow().host {
                capture.note(Arc::new(access.clone()));
            }
            return Ok(());
        }
        let host = self.keep.borrow().host.clone();
        crate::memory::launch_tracked(&host, stream, || self.launch_raw(stream))
    }

    /// After a launch on `stream`: lets go of the retired values whose fence has completed,
    /// and fences the ones retired since with an event recorded after this launch (which
    /// runs after every earlier launch, the ones that may use them). Off the launch's hot
    /// path: only runs while replaced values are waiting. Failures only keep values longer.
    #[cold]
    fn fence_retired(&self, stream: &Stream) {
        let mut keep = self.keep.borrow_mut();
        keep.release_completed();
        if keep.retired.is_empty() {
            return;
        }
        // A record on a capturing stream is captured, not made: the event would read as
        // complete at once. Fence at a launch that really runs.
        let mut capture = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE;
        // SAFETY: the stream is live; one out-parameter.
        let status = unsafe { sys::cuStreamIsCapturing(stream.as_raw(), &mut capture) };
        if status != sys::CUresult::CUDA_SUCCESS
            || capture != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
        {
            return;
        }
        let event = match keep.spare.take() {
            Some(event) => event,
            None => match self.new_fence() {
                Some(event) => event,
                None => return,
            },
        };
        // SAFETY: both handles are live; the stream is of the event's context. The raw call
        // neither reports nor consumes the context's deferred errors.
        if unsafe { sys::cuEventRecord(event.as_raw(), stream.as_raw()) } == sys::CUresult::CUDA_SUCCESS {
            let batch = std::mem::take(&mut keep.retired);
            keep.fenced.push((event, batch));
        }
    }

    /// An event for a fence, made without touching the context's deferred errors.
    fn new_fence(&self) -> Option<Event> {
        self.ctx.make_current().ok()?;
        let flags = crate::event::EventFlags::DISABLE_TIMING;
        let mut raw = std::ptr::null_mut();
        // SAFETY: one out-parameter; the context is current.
        let status = unsafe { sys::cuEventCreate(&mut raw, flags.bits()) };
        // SAFETY: created above in this context with `flags`, owned by nothing else.
        (status == sys::CUresult::CUDA_SUCCESS).then(|| unsafe { Event::from_raw(&self.ctx, raw, flags) })
    }

    /// Keeps `value` (if any) for `node`'s `role`, retiring the value it replaces.
    pub(super) fn replace(&self, node: GraphNode<'_>, role: Role, value: Option<Kept>) {
        let mut keep = self.keep.borrow_mut();
        keep.release_completed();
        let now = self.launches.get();
        let old = match value {
            Some(value) => keep.slots.insert((node.id(), role), (value, now)),
            None => keep.slots.remove(&(node.id(), role)),
        };
        if let Some((old, since)) = old {
            keep.retire(old, since, now);
        }
    }

    /// Prepares the graph's device resources on `stream`, so that the first launch does not
    /// pay for it ([`cuGraphUpload`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    pub fn upload(&self, stream: &Stream) -> Result<()> {
        self.ctx.take_deferred()?;
        stream.bind_if_default()?;
        // SAFETY: both handles are live.
        unsafe { driver!(cuGraphUpload(self.raw, stream.as_raw())) }
    }

    /// Takes the parameters of `graph`'s nodes, a graph of the same shape as the one this was
    /// made from (same nodes, kinds and dependencies, added in the same order)
    /// ([`cuGraphExecUpdate`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    ///
    /// A refusal is [`Error::GraphUpdate`] with the driver's reason and the node it blames;
    /// the executable graph is then unchanged. On success it keeps alive what `graph` keeps
    /// alive instead of what it kept before (let go of once no launch may use it). An
    /// executable graph whose allocation nodes' memory is freed outside it
    /// ([`GraphBuffer`](super::GraphBuffer)) is refused with an [`Error::InvalidArgument`]: its
    /// launches must stay tracked on that memory.
    pub fn update(&self, graph: &Graph) -> Result<()> {
        if !self.keep.borrow().memory.is_empty() {
            // Its launches must stay tracked on the memory they allocate.
            return Err(Error::invalid(
                "GraphExec::update",
                "the executable graph allocates memory that is freed outside it (a GraphBuffer); \
                 instantiate the new graph instead",
            ));
        }
        self.ctx.enter()?;
        let mut info = sys::CUgraphExecUpdateResultInfo {
            result: sys::CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_SUCCESS,
            errorNode: std::ptr::null_mut(),
            errorFromNode: std::ptr::null_mut(),
            ..Default::default()
        };
        // SAFETY: both graphs are live; one out-parameter.
        let status = unsafe { driver!(status: cuGraphExecUpdate(self.raw, graph.raw, &mut info)) };
        if status.is(sys::CUresult::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE) {
            return Err(update_refused(&info));
        }
        status.check()?;
        // Every node now has `graph`'s parameters: what the old graph and the setters gave is
        // replaced.
        let mut keep = self.keep.borrow_mut();
        keep.release_completed();
        let now = self.launches.get();
        let old_slots: Vec<(Kept, u64)> = keep.slots.drain().map(|(_, v)| v).collect();
        for (old, since) in old_slots {
            keep.retire(old, since, now);
        }
        if let Some((old, since)) = keep.graph.replace((graph.keep.clone(), now)) {
            keep.retire(old, since, now);
        }
        keep.host = graph.keep.host_accesses();
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
        unsafe { driver!(cuGraphExecKernelNodeSetParams(self.raw, node.as_raw(), &params)) }
    }

    /// Gives a memset node a new destination and value, as [`Graph::add_memset_node`] takes
    /// them ([`cuGraphExecMemsetNodeSetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html));
    /// the memory is kept alive, and the memory it replaces let go of once no launch may use
    /// it.
    pub fn set_memset_node<T: Pod>(&self, node: GraphNode<'_>, dst: &GraphSlice<T>, value: T) -> Result<()> {
        let params = memset_params("GraphExec::set_memset_node", dst, value)?;
        self.ctx.enter()?;
        // SAFETY: both handles are live; the memory stays allocated (kept below).
        unsafe {
            driver!(cuGraphExecMemsetNodeSetParams(self.raw, node.as_raw(), &params, self.ctx.as_raw()))
        }?;
        self.replace(node, Role::Destination, dst.owner());
        Ok(())
    }

    /// Gives a memcpy node new slices, as [`Graph::add_memcpy_node`] takes them
    /// ([`cuGraphExecMemcpyNodeSetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html));
    /// the memory is kept alive, and the memory it replaces let go of once no launch may use
    /// it.
    pub fn set_memcpy_node<T: Pod>(
        &self,
        node: GraphNode<'_>,
        dst: &GraphSlice<T>,
        src: &GraphSlice<T>,
    ) -> Result<()> {
        let params = memcpy_params("GraphExec::set_memcpy_node", dst, src)?;
        self.ctx.enter()?;
        // SAFETY: as in `set_memset_node`.
        unsafe {
            driver!(cuGraphExecMemcpyNodeSetParams(self.raw, node.as_raw(), &params, self.ctx.as_raw()))
        }?;
        self.replace(node, Role::Destination, dst.owner());
        self.replace(node, Role::Source, src.owner());
        Ok(())
    }

    /// Gives a host node a new closure
    /// ([`cuGraphExecHostNodeSetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html));
    /// the closure is kept alive, and the one it replaces let go of once no launch may run it.
    pub fn set_host_node(&self, node: GraphNode<'_>, f: impl Fn() + Send + Sync + 'static) -> Result<()> {
        let (host, params) = HostFunction::params(&self.ctx, f);
        // SAFETY: both handles are live; the user data stays alive in the keep-alive list.
        unsafe { driver!(cuGraphExecHostNodeSetParams(self.raw, node.as_raw(), &params)) }?;
        self.replace(node, Role::Host, Some(host));
        Ok(())
    }

    /// Gives a child-graph node the parameters of `child`, a graph of the same shape as the
    /// node's ([`cuGraphExecChildGraphNodeSetParams`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html));
    /// what `child` keeps alive now is kept alive too, and what the node's previous
    /// parameters kept let go of once no launch may use it.
    pub fn set_child_graph_node(&self, node: GraphNode<'_>, child: &Graph) -> Result<()> {
        // SAFETY: the handles are live; the driver copies the child's parameters.
        unsafe { driver!(cuGraphExecChildGraphNodeSetParams(self.raw, node.as_raw(), child.raw)) }?;
        self.replace(node, Role::Child, Some(child.keep.snapshot()));
        Ok(())
    }

    /// Makes an event record node record `event`
    /// ([`cuGraphExecEventRecordNodeSetEvent`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html));
    /// the event is kept alive, and the one it replaces let go of once no launch may use it.
    pub fn set_event_record_node(&self, node: GraphNode<'_>, event: &Arc<Event>) -> Result<()> {
        // SAFETY: the handles are live; the event is kept alive below.
        unsafe { driver!(cuGraphExecEventRecordNodeSetEvent(self.raw, node.as_raw(), event.as_raw())) }?;
        self.replace(node, Role::Event, Some(event.clone()));
        Ok(())
    }

    /// Makes an event wait node wait for `event`
    /// ([`cuGraphExecEventWaitNodeSetEvent`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html));
    /// the event is kept alive, and the one it replaces let go of once no launch may use it.
    pub fn set_event_wait_node(&self, node: GraphNode<'_>, event: &Arc<Event>) -> Result<()> {
        // SAFETY: as in `set_event_record_node`.
        unsafe { driver!(cuGraphExecEventWaitNodeSetEvent(self.raw, node.as_raw(), event.as_raw())) }?;
        self.replace(node, Role::Event, Some(event.clone()));
        Ok(())
    }

    /// Turns a node off (it then does nothing, like an empty node) or back on for later
    /// launches; kernel, memcpy and memset nodes only
    /// ([`cuGraphNodeSetEnabled`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    pub fn set_node_enabled(&self, node: GraphNode<'_>, enabled: bool) -> Result<()> {
        // SAFETY: both handles are live.
        unsafe { driver!(cuGraphNodeSetEnabled(self.raw, node.as_raw(), u32::from(enabled))) }
    }

    /// Whether a node is enabled
    /// ([`cuGraphNodeGetEnabled`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__GRAPH.html)).
    pub fn is_node_enabled(&self, node: GraphNode<'_>) -> Result<bool> {
        let mut on = 0;
        // SAFETY: both handles are live; one out-parameter.
        unsafe { driver!(cuGraphNodeGetEnabled(self.raw, node.as_raw(), &mut on)) }?;
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
        self.ctx.with_current_for_drop("GraphExec", || unsafe { driver!(cuGraphExecDestroy(raw)) });
        let keep = self.keep.get_mut();
        if self.launches.get() != 0 && !keep.is_empty() {
            // A launch may still use what the graph keeps; wait before letting go of it. The
            // wait neither reports nor consumes the context's deferred errors.
            let mut waited = false;
            // SAFETY: the context is current during the closure.
            self.ctx.with_current_for_drop("GraphExec", || {
                let synchronized = unsafe { driver!(cuCtxSynchronize()) };
                waited = synchronized.is_ok();
                synchronized
            });
            if !waited {
                // The work may still run: keep what it uses for good rather than free it.
                std::mem::forget(std::mem::take(keep));
            }
        }
    }
}

/// Refuses a launch on a stream being captured through this crate: the driver does not capture
/// a graph launch (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`); add the graph to the capture's graph
/// as a child graph node instead.
#[cold]
fn refuse_capture(stream: &Stream) -> Result<()> {
    if crate::stream::capture_of(stream)?.is_some() {
        return Err(crate::error::Error::refused(
            crate::error::Reason::DURING_CAPTURE,
            "GraphExec::launch",
            "the stream is being captured, and the driver does not capture a graph launch; add the graph \
             as a child graph node (Graph::add_child_graph_node) of the graph being built instead",
        ));
    }
    Ok(())
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
            ..Default::default()
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
            ..Default::default()
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
