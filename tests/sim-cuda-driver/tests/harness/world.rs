//! What a program works on, and each step as the safe calls it makes.

use super::program::{EVENTS, GRAPHS, PINNED, SLOTS, STREAMS, Step, VMMS};
use cuhost::graph::{CaptureMode, Graph, GraphExec, InstantiateFlags};
use cuhost::mempool::Access;
use cuhost::nccl::{Communicator, Group, ReduceOp};
use cuhost::vmm::{AccessGrant, AddressRange, AllocationProperties, Granularity, Mapping, PhysicalMemory};
use cuhost::{
    Context, Device, DeviceBuffer, Event, EventFlags, LaunchConfig, Module, PinnedBuffer, Stream, StreamFlags,
};

/// The image of the simulator's built-in kernels (see `sim_cuda_driver::kernels`).
const KERNELS: &str = "\
.entry fill_u32(.param .u64 dst, .param .u32 n, .param .u32 value)
.entry add_u32(.param .u64 dst, .param .u64 src, .param .u32 n)
";

/// A buffer of the program, with the thread it lives on.
pub struct Slot {
    buffer: DeviceBuffer<u32>,
    pub home: u8,
    /// The buffer's own stream, and the others it was used on (for [`World::emulate_h1_fix`]).
    own: usize,
    used: Vec<usize>,
}

/// An executable graph and its graph, made by capturing copies between the buffer of `slot`
/// and the pinned buffer of `pinned`. The graph holds both buffers by itself: either may be
/// dropped, or its slot given a new buffer, while the graph lives.
pub struct GraphSlot {
    exec: GraphExec,
    _graph: Graph,
    slot: usize,
    pinned: usize,
}

/// The streams, events and buffers; moved to the thread that runs each step.
pub struct World {
    module: Module,
    streams: Vec<Stream>,
    events: Vec<Event>,
    scratch: Event,
    pub slots: [Option<Slot>; SLOTS],
    pinned: [Option<PinnedBuffer<u32>>; PINNED],
    graphs: [Option<GraphSlot>; GRAPHS],
    /// The properties of physical memory, and one granule of it.
    props: AllocationProperties,
    granule: usize,
    /// A reserved range per mapping slot, and what is mapped at its start.
    ranges: Vec<AddressRange>,
    vmm: [Option<Mapping>; VMMS],
    /// A communicator of one rank (on the simulated NCCL).
    comm: Communicator,
    /// Errors the crate returned: none is expected.
    pub errors: Vec<String>,
    /// Graph launches the crate refused while the host held a guard of their pinned buffer.
    pub refused: u64,
    /// Orders, in the program, what the cross-stream first-use wait orders in the crate (the
    /// fix of H1): before a buffer's first use on another stream, that stream waits for the
    /// buffer's own; `set_stream` makes the new stream wait for the old.
    pub emulate_h1_fix: bool,
}

impl World {
    /// Three non-blocking streams and two events in the primary context of device 0.
    pub fn new() -> World {
        let ctx = Context::primary(&Device::get(0).unwrap()).unwrap();
        let stream = || Stream::new(&ctx, StreamFlags::NON_BLOCKING).unwrap();
        let event = || Event::new(&ctx, EventFlags::DISABLE_TIMING).unwrap();
        let props = AllocationProperties::device(Device::get(0).unwrap());
        let granule = props.granularity(Granularity::Minimum).unwrap();
        World {
            ranges: (0..VMMS).map(|_| AddressRange::reserve(&ctx, granule, 0).unwrap()).collect(),
            vmm: Default::default(),
            props,
            granule,
            module: Module::from_ptx(&ctx, KERNELS).unwrap(),
            comm: Communicator::init_all(&[Device::get(0).unwrap()]).unwrap().pop().unwrap(),
            streams: (0..STREAMS).map(|_| stream()).collect(),
            events: (0..EVENTS).map(|_| event()).collect(),
            scratch: event(),
            slots: Default::default(),
            pinned: Default::default(),
            graphs: Default::default(),
            errors: Vec::new(),
            refused: 0,
            emulate_h1_fix: false,
        }
    }

    /// Drops every buffer, and gives the blocks the default pools cache back to the driver, so
    /// that the next program starts from empty pools: a program then runs the same whatever
    /// ran before it, and its shrunk form fails as it did.
    pub fn clear(&mut self) {
        self.graphs = Default::default();
        self.vmm = Default::default();
        self.slots = Default::default();
        self.pinned = Default::default();
        if let Err(e) = cuhost::pool::release_default_pools() {
            self.errors.push(format!("release_default_pools: {e}"));
        }
    }

    /// The thread a step runs on: its buffer's, else its own.
    pub fn thread_of(&self, thread: u8, step: &Step) -> u8 {
        let slot = match *step {
            Step::Drop { slot }
            | Step::Upload { slot, .. }
            | Step::Download { slot }
            | Step::Memset { slot, .. }
            | Step::Copy { dst: slot, .. }
            | Step::SetStream { slot, .. }
            | Step::Move { slot }
            | Step::Launch { dst: slot, .. }
            | Step::PinnedUpload { slot, .. }
            | Step::PinnedDownload { slot, .. }
            | Step::Capture { slot, .. }
            | Step::VmmCopy { slot, .. }
            | Step::Collective { dst: slot, .. }
            | Step::NcclGroup { dst: slot, .. } => slot,
            Step::GraphLaunch { graph, .. } | Step::GraphHold { graph, .. } | Step::GraphDrop { graph } => {
                match &self.graphs[usize::from(graph)] {
                    Some(g) => g.slot as u8,
                    None => return thread,
                }
            }
            _ => return thread,
        };
        self.slots[usize::from(slot)].as_ref().map_or(thread, |s| s.home)
    }

    /// Runs `step` on the calling thread, `thread`.
    pub fn apply(&mut self, thread: u8, step: Step) {
        if let Err(e) = self.try_apply(thread, step) {
            self.errors.push(format!("{step:?}: {e}"));
        }
    }

    fn try_apply(&mut self, thread: u8, step: Step) -> cuhost::Result<()> {
        let ix = usize::from;
        match step {
            Step::Alloc { slot, stream, big, zeroed } => {
                self.slots[ix(slot)] = None;
                let (s, len) = (&self.streams[ix(stream)], if big { 1024 } else { 256 });
                let buffer = if zeroed { DeviceBuffer::zeroed(s, len)? } else { DeviceBuffer::new(s, len)? };
                let own = ix(stream);
                self.slots[ix(slot)] = Some(Slot { buffer, home: thread, own, used: Vec::new() });
            }
            Step::Drop { slot } => self.slots[ix(slot)] = None,
            Step::Upload { slot, value } => {
                if let Some(b) = &mut self.slots[ix(slot)] {
                    b.buffer.copy_from(&vec![value; b.buffer.len()])?;
                }
            }
            Step::Download { slot } => {
                if let Some(b) = &self.slots[ix(slot)] {
                    std::hint::black_box(b.buffer.to_vec()?);
                }
            }
            Step::Memset { slot, stream, part, value } => {
                if self.slots[ix(slot)].is_some() {
                    self.first_use(ix(slot), ix(stream))?;
                }
                if let Some(b) = &mut self.slots[ix(slot)] {
                    let (len, mut view) = (b.buffer.len(), b.buffer.view_mut());
                    let mut part = match part {
                        0 => view.slice_mut(..)?,
                        1 => view.slice_mut(..len / 2)?,
                        _ => view.slice_mut(len / 2..)?,
                    };
                    part.memset_d32_async(value, &self.streams[ix(stream)])?;
                }
            }
            Step::Copy { dst, src, stream } => self.copy(ix(dst), ix(src), ix(stream))?,
            Step::Record { event, stream } => self.events[ix(event)].record(&self.streams[ix(stream)])?,
            Step::Wait { stream, event } => self.streams[ix(stream)].wait_event(&self.events[ix(event)])?,
            Step::EventSync { event } => self.events[ix(event)].synchronize()?,
            Step::Sync { stream } => self.streams[ix(stream)].synchronize()?,
            Step::SetStream { slot, stream } => self.set_stream(ix(slot), ix(stream))?,
            Step::Move { slot } => {
                if let Some(b) = &mut self.slots[ix(slot)] {
                    b.home = 1 - b.home;
                }
            }
            Step::PinnedNew { pinned, big } => {
                self.pinned[ix(pinned)] = None;
                self.pinned[ix(pinned)] = Some(PinnedBuffer::new(if big { 1024 } else { 256 })?);
            }
            Step::PinnedUpload { slot, pinned, stream } => {
                self.pinned_copy(ix(slot), ix(pinned), ix(stream), true)?
            }
            Step::PinnedDownload { slot, pinned, stream } => {
                self.pinned_copy(ix(slot), ix(pinned), ix(stream), false)?
            }
            Step::PinnedRead { pinned } => {
                if let Some(p) = &self.pinned[ix(pinned)] {
                    let slice = p.as_slice()?;
                    std::hint::black_box(slice.iter().sum::<u32>());
                }
            }
            Step::PinnedWrite { pinned, value } => {
                if let Some(p) = &mut self.pinned[ix(pinned)] {
                    let mut slice = p.as_mut_slice()?;
                    slice.fill(value);
                }
            }
            Step::PinnedDrop { pinned } => {
                self.pinned[ix(pinned)] = None;
            }
            Step::Capture { graph, slot, pinned, stream, kind, value } => {
                self.graphs[ix(graph)] = None;
                self.graphs[ix(graph)] = self.capture(ix(slot), ix(pinned), ix(stream), kind, value)?;
            }
            Step::GraphLaunch { graph, stream } => {
                if self.graphs[ix(graph)].is_some() {
                    self.graph_launch(ix(graph), ix(stream))?;
                }
            }
            Step::GraphHold { graph, stream, write } => self.graph_hold(ix(graph), ix(stream), write)?,
            Step::GraphDrop { graph } => self.graphs[ix(graph)] = None,
            Step::VmmMap { vmm } => {
                self.vmm[ix(vmm)] = None;
                let ctx = self.streams[0].context();
                let physical = PhysicalMemory::new(ctx, self.granule, &self.props)?;
                let mapping = self.ranges[ix(vmm)].map(0, &physical)?;
                mapping.set_access(&[AccessGrant::device(Device::get(0)?, Access::ReadWrite)])?;
                self.vmm[ix(vmm)] = Some(mapping);
            }
            Step::VmmMemset { vmm, stream, value } => {
                if let Some(m) = &mut self.vmm[ix(vmm)] {
                    let s = &self.streams[ix(stream)];
                    m.view_mut::<u32>(s)?.memset_d32_async(value, s)?;
                }
            }
            Step::VmmCopy { vmm, slot, stream, to_mapping } => {
                self.vmm_copy(ix(vmm), ix(slot), ix(stream), to_mapping)?
            }
            Step::VmmDrop { vmm } => self.vmm[ix(vmm)] = None,
            Step::Launch { add: false, dst, stream, part, value, .. } => {
                self.fill(ix(dst), ix(stream), part, value)?
            }
            Step::Launch { add: true, dst, src, stream, .. } => self.add(ix(dst), ix(src), ix(stream))?,
            Step::Collective { kind, dst, src, stream } => {
                self.collective(kind, ix(dst), ix(src), ix(stream))?
            }
            Step::NcclGroup { kind, dst, src, stream, nested, drop } => {
                self.nccl_group(thread, kind, ix(dst), ix(src), ix(stream), nested, drop)?
            }
        }
        Ok(())
    }

    fn copy(&mut self, dst: usize, src: usize, stream: usize) -> cuhost::Result<()> {
        self.on_pair(dst, src, stream, |d, s, n, w| {
            let mut to = d.buffer.view_mut();
            to.slice_mut(..n)?.copy_from_device_async(&s.buffer.view().slice(..n)?, &w.streams[stream])
        })
    }

    /// Runs `op` on the buffers of two different live slots (the destination taken out of its
    /// slot meanwhile) and their common length, after each has been noted on `stream`;
    /// nothing when a slot is empty or both are one.
    fn on_pair(
        &mut self,
        dst: usize,
        src: usize,
        stream: usize,
        op: impl FnOnce(&mut Slot, &Slot, usize, &World) -> cuhost::Result<()>,
    ) -> cuhost::Result<()> {
        if dst == src || self.slots[dst].is_none() || self.slots[src].is_none() {
            return Ok(());
        }
        self.first_use(dst, stream)?;
        self.first_use(src, stream)?;
        let Some(mut d) = self.slots[dst].take() else { return Ok(()) };
        let r = match self.slots[src].as_ref() {
            Some(s) => {
                let n = d.buffer.len().min(s.buffer.len());
                op(&mut d, s, n, self)
            }
            None => Ok(()),
        };
        self.slots[dst] = Some(d);
        r
    }

    /// `fill_u32` of the whole buffer or a half on `stream`.
    fn fill(&mut self, dst: usize, stream: usize, part: u8, value: u32) -> cuhost::Result<()> {
        if self.slots[dst].is_none() {
            return Ok(());
        }
        self.first_use(dst, stream)?;
        let Some(b) = &mut self.slots[dst] else { return Ok(()) };
        let (len, mut view) = (b.buffer.len(), b.buffer.view_mut());
        let part = match part {
            0 => view.slice_mut(..)?,
            1 => view.slice_mut(..len / 2)?,
            _ => view.slice_mut(len / 2..)?,
        };
        let n = part.len() as u32;
        let f = self.module.function("fill_u32")?;
        let config = LaunchConfig::for_elements(n, 128);
        // SAFETY: fill_u32 takes (u32*, u32, u32) and writes `n` elements from the pointer: the
        // view holds `n`. The crate keeps the memory allocated until the kernel has run (a
        // launch on another stream than the buffer's own is noted for the release); what the
        // program itself leaves unordered between its streams is a race of its own, which the
        // checker counts apart (category (d)) and which the simulator runs as plain bytes.
        unsafe { f.launch(&self.streams[stream], &config, (part, &n, &value)) }
    }

    /// `add_u32` of `src` into `dst` over their common prefix, on `stream`.
    fn add(&mut self, dst: usize, src: usize, stream: usize) -> cuhost::Result<()> {
        self.on_pair(dst, src, stream, |d, s, n, w| {
            let f = w.module.function("add_u32")?;
            let (mut to, from) = (d.buffer.view_mut(), s.buffer.view());
            let (to, from) = (to.slice_mut(..n)?, from.slice(..n)?);
            let count = n as u32;
            let config = LaunchConfig::for_elements(count, 128);
            // SAFETY: add_u32 takes (u32*, const u32*, u32) and touches `count` elements from
            // each pointer: both views hold `count`. As in `fill`, the crate keeps both
            // buffers allocated until the kernel has run.
            unsafe { f.launch(&w.streams[stream], &config, (to, from, &count)) }
        })
    }

    /// An NCCL collective outside any group (see [`Step::Collective`]).
    fn collective(&mut self, kind: u8, dst: usize, src: usize, stream: usize) -> cuhost::Result<()> {
        if kind == 1 {
            return self.all_reduce_in_place(dst, stream);
        }
        self.on_pair(dst, src, stream, |d, s, n, w| {
            let (mut to, from) = (d.buffer.view_mut(), s.buffer.view());
            let (to, from, st) = (to.slice_mut(..n)?, from.slice(..n)?, &w.streams[stream]);
            match kind {
                0 => w.comm.all_reduce(from, to, ReduceOp::Sum, st),
                2 => w.comm.broadcast(from, to, 0, st),
                3 => w.comm.reduce(from, to, ReduceOp::Sum, 0, st),
                4 => w.comm.all_gather(from, to, st),
                _ => w.comm.reduce_scatter(from, to, ReduceOp::Sum, st),
            }
        })
    }

    fn all_reduce_in_place(&mut self, slot: usize, stream: usize) -> cuhost::Result<()> {
        if self.slots[slot].is_none() {
            return Ok(());
        }
        self.first_use(slot, stream)?;
        let Some(b) = &mut self.slots[slot] else { return Ok(()) };
        self.comm.all_reduce_in_place(&mut b.buffer, ReduceOp::Sum, &self.streams[stream])
    }

    /// An NCCL group whose buffer may be dropped and replaced before it ends (see
    /// [`Step::NcclGroup`]). Every part runs; the first error is returned.
    #[allow(clippy::too_many_arguments)]
    fn nccl_group(
        &mut self,
        thread: u8,
        kind: u8,
        dst: usize,
        src: usize,
        stream: usize,
        nested: bool,
        drop: u8,
    ) -> cuhost::Result<()> {
        let group = Group::start()?;
        let inner = if nested { Some(Group::start()) } else { None };
        let issued = match kind {
            0 => self.on_pair(dst, src, stream, |d, s, n, w| {
                let st = &w.streams[stream];
                w.comm.send(s.buffer.view().slice(..n)?, 0, st)?;
                w.comm.recv(d.buffer.view_mut().slice_mut(..n)?, 0, st)
            }),
            1 => self.collective(0, dst, src, stream),
            _ => self.all_reduce_in_place(dst, stream),
        };
        let inner = inner.map_or(Ok(()), |g| g.and_then(Group::end));
        let renewed = match drop {
            1 => self.renew(thread, dst),
            2 => self.renew(thread, src),
            _ => Ok(()),
        };
        let ended = group.end();
        issued.and(inner).and(renewed).and(ended)
    }

    /// Drops the buffer of `slot` and takes a new zeroed one of its length on its own stream.
    fn renew(&mut self, thread: u8, slot: usize) -> cuhost::Result<()> {
        let Some(old) = self.slots[slot].take() else { return Ok(()) };
        let (own, len) = (old.own, old.buffer.len());
        drop(old);
        let buffer = DeviceBuffer::zeroed(&self.streams[own], len)?;
        self.slots[slot] = Some(Slot { buffer, home: thread, own, used: Vec::new() });
        Ok(())
    }

    fn pinned_copy(&mut self, slot: usize, pinned: usize, stream: usize, upload: bool) -> cuhost::Result<()> {
        let same_len = match (&self.slots[slot], &self.pinned[pinned]) {
            (Some(b), Some(p)) => b.buffer.len() == p.len(),
            _ => false,
        };
        if !same_len {
            return Ok(());
        }
        self.first_use(slot, stream)?;
        let (Some(b), Some(p)) = (&mut self.slots[slot], &mut self.pinned[pinned]) else { return Ok(()) };
        let s = &self.streams[stream];
        if upload { b.buffer.copy_from_pinned_async(p, s) } else { b.buffer.copy_to_pinned_async(p, s) }
    }

    /// Copies between the buffer of `slot` and the mapping `vmm` (their common prefix).
    fn vmm_copy(&mut self, vmm: usize, slot: usize, stream: usize, to_mapping: bool) -> cuhost::Result<()> {
        if self.slots[slot].is_none() || self.vmm[vmm].is_none() {
            return Ok(());
        }
        self.first_use(slot, stream)?;
        let (Some(b), Some(m)) = (&mut self.slots[slot], &mut self.vmm[vmm]) else { return Ok(()) };
        let s = &self.streams[stream];
        let n = b.buffer.len().min(m.size() / 4);
        if to_mapping {
            m.view_mut::<u32>(s)?.slice_mut(..n)?.copy_from_device_async(&b.buffer.view().slice(..n)?, s)
        } else {
            b.buffer.view_mut().slice_mut(..n)?.copy_from_device_async(&m.view::<u32>(s)?.slice(..n)?, s)
        }
    }

    /// Captures copies between the buffer of `slot` and the pinned buffer `pinned` on
    /// `stream` and instantiates them; `None` when the two are missing or differ in length.
    fn capture(
        &mut self,
        slot: usize,
        pinned: usize,
        stream: usize,
        kind: u8,
        value: u32,
    ) -> cuhost::Result<Option<GraphSlot>> {
        let (Some(b), Some(p)) = (&mut self.slots[slot], &mut self.pinned[pinned]) else { return Ok(None) };
        if b.buffer.len() != p.len() {
            return Ok(None);
        }
        let s = &self.streams[stream];
        let capture = s.begin_capture(CaptureMode::ThreadLocal)?;
        let captured = match kind {
            0 => b.buffer.copy_to_pinned_async(p, s),
            1 => b.buffer.copy_from_pinned_async(p, s),
            _ => b
                .buffer
                .view_mut()
                .memset_d32_async(value, s)
                .and_then(|()| b.buffer.copy_to_pinned_async(p, s)),
        };
        let graph = capture.end();
        captured?;
        let graph = graph?;
        let exec = graph.instantiate(InstantiateFlags::empty())?;
        Ok(Some(GraphSlot { exec, _graph: graph, slot, pinned }))
    }

    /// Launches graph `graph` on `stream`.
    fn graph_launch(&mut self, graph: usize, stream: usize) -> cuhost::Result<()> {
        self.emulate_graph_first_use(graph, stream)?;
        let Some(g) = &self.graphs[graph] else { return Ok(()) };
        g.exec.launch(&self.streams[stream])
    }

    /// With [`emulate_h1_fix`](Self::emulate_h1_fix), orders a launch of graph `graph` on
    /// `stream` after the own stream of the buffer now in its slot.
    fn emulate_graph_first_use(&mut self, graph: usize, stream: usize) -> cuhost::Result<()> {
        let Some(g) = &self.graphs[graph] else { return Ok(()) };
        self.first_use(g.slot, stream)
    }

    /// Launches graph `graph` on `stream` while a guard of its pinned buffer is held (the crate
    /// tells the checker of the host access when the guard is taken and when it drops).
    fn graph_hold(&mut self, graph: usize, stream: usize, write: bool) -> cuhost::Result<()> {
        if self.graphs[graph].is_none() {
            return Ok(());
        }
        self.emulate_graph_first_use(graph, stream)?;
        let Some(g) = &self.graphs[graph] else { return Ok(()) };
        let Some(p) = &mut self.pinned[g.pinned] else { return Ok(()) };
        let s = &self.streams[stream];
        let launched = if write {
            let mut slice = p.as_mut_slice()?;
            let launched = g.exec.launch(s);
            slice.fill(1);
            launched
        } else {
            let slice = p.as_slice()?;
            let launched = g.exec.launch(s);
            std::hint::black_box(slice.iter().sum::<u32>());
            launched
        };
        match launched {
            // The refusal the crate promises while the host holds the memory.
            Err(cuhost::Error::InvalidArgument { operation: "GraphExec::launch", .. }) => {
                self.refused += 1;
                Ok(())
            }
            other => other,
        }
    }

    fn set_stream(&mut self, slot: usize, stream: usize) -> cuhost::Result<()> {
        let Some(b) = &mut self.slots[slot] else { return Ok(()) };
        if self.emulate_h1_fix && b.own != stream {
            self.scratch.record(&self.streams[b.own])?;
            self.streams[stream].wait_event(&self.scratch)?;
            b.used.push(b.own);
        }
        b.own = stream;
        b.buffer.set_stream(&self.streams[stream])
    }

    /// With [`emulate_h1_fix`](Self::emulate_h1_fix), orders the first use of the buffer in
    /// `slot` on a foreign `stream` after the buffer's own stream.
    fn first_use(&mut self, slot: usize, stream: usize) -> cuhost::Result<()> {
        let Some(b) = &mut self.slots[slot] else { return Ok(()) };
        if !self.emulate_h1_fix || b.own == stream || b.used.contains(&stream) {
            return Ok(());
        }
        b.used.push(stream);
        self.scratch.record(&self.streams[b.own])?;
        self.streams[stream].wait_event(&self.scratch)
    }
}
