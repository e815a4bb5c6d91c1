//! The simulated device: streams keep their work queued until the host waits for it, and then
//! run what the wait needs in a random order that respects stream order and event waits.
//!
//! Nothing runs when it is queued. At a host synchronization (a stream, event or context
//! synchronization, a query that answers "done", `cuMemFree`) the simulator takes every
//! operation the waited-for point depends on and runs them one at a time, each time choosing
//! at random among those whose dependencies have run. A dependency the program forgot thus
//! changes results from one seed to the next, and the [checker](crate::checker) reports it
//! whatever the order.

use crate::checker::{Checker, Range, Site, Stamp};
use crate::clock::VectorClock;
use crate::graphs::{CAPTURE_ISOLATION, Capture, Node, Taken};
use crate::kernels::{BUILTINS, Launch};
use crate::memory::Memory;
use crate::rng::Rng;
use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::ffi::c_void;

/// A host function queued with `cuLaunchHostFunc`.
pub type HostFn = unsafe extern "C" fn(*mut c_void);

/// What an operation does when it runs.
#[derive(Clone, Copy, Debug)]
pub enum Work {
    /// Fills `count` elements of `width` bytes at `dst` with `value`.
    Memset {
        /// The first address.
        dst: u64,
        /// How many elements.
        count: u64,
        /// 1, 2 or 4.
        width: u8,
        /// The element value (its low `width` bytes).
        value: u32,
    },
    /// Copies `bytes` from `src` to `dst`.
    Copy {
        /// The destination address.
        dst: u64,
        /// The source address.
        src: u64,
        /// How many bytes.
        bytes: u64,
    },
    /// Calls a host function.
    Host {
        /// The function.
        f: HostFn,
        /// Its argument.
        data: usize,
    },
    /// Runs a built-in kernel.
    Kernel(Launch),
    /// Nothing: an event record or wait, or a stream-ordered free.
    Mark,
}

#[derive(Debug)]
struct Op {
    deps: Vec<usize>,
    work: Work,
    done: bool,
}

/// A stream: its agent in the checker, its last operation, whether it synchronizes with the
/// legacy default stream.
#[derive(Debug)]
pub struct StreamState {
    agent: usize,
    last: Option<usize>,
    blocking: bool,
    /// The capture under way on it.
    pub(crate) capture: Option<Capture>,
}

/// An event: the operation and clock of its last record, if any.
#[derive(Debug, Default)]
pub struct EventState {
    recorded: Option<(usize, VectorClock)>,
    /// The capture its last record was made in (a record in a capture runs nothing now).
    captured: Option<u64>,
}

/// The key of the legacy default stream (handles 0 and `CU_STREAM_LEGACY`).
pub const LEGACY: u64 = 1;
/// `CU_STREAM_PER_THREAD`.
const PER_THREAD: u64 = 2;

thread_local! {
    /// This thread's agent, once it made a call.
    static HOST_AGENT: Cell<Option<usize>> = const { Cell::new(None) };
    /// The owner epochs that the reads and the writes of the work this thread queues are
    /// checked as of (see [`queue_as_of`]); 0: now.
    static AS_OF: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// The work the calling thread queues from now on was issued earlier, when the newest owner
/// epoch was `reads` for the memory it reads and `writes` for the memory it writes (an NCCL
/// group's calls, queued when the group ends); `(0, 0)` goes back to work issued as it is
/// queued. See [`Checker::access_as_of`].
pub fn queue_as_of(reads: u64, writes: u64) {
    AS_OF.with(|a| a.set((reads, writes)));
}

/// The whole simulated driver.
#[derive(Debug)]
pub struct Sim {
    streams: HashMap<u64, StreamState>,
    events: HashMap<u64, EventState>,
    ops: Vec<Op>,
    /// Operations not run yet, in queue order.
    pending: Vec<usize>,
    /// The memory.
    pub memory: Memory,
    /// The checker.
    pub checker: Checker,
    rng: Rng,
    next_handle: u64,
    /// Functions looked up that the simulator does not implement.
    pub unsupported: Vec<String>,
    /// Loaded modules and the function handle of each of their kernels.
    modules: HashMap<u64, Vec<u64>>,
    /// Function handles: the built-in kernel each stands for.
    functions: HashMap<u64, usize>,
    /// Graphs (made by captures) and their nodes.
    pub(crate) graphs: HashMap<u64, Vec<Node>>,
    /// Executable graphs and their nodes.
    pub(crate) execs: HashMap<u64, Vec<Node>>,
}

/// What a host synchronization waits for.
#[derive(Clone, Copy, Debug)]
pub enum Until {
    /// This operation (and all it depends on).
    Op(usize),
    /// Everything queued.
    All,
}

impl Sim {
    /// A simulator with nothing in it, whose random choices follow `seed`.
    pub fn new(seed: u64) -> Sim {
        let mut sim = Sim {
            streams: HashMap::new(),
            events: HashMap::new(),
            ops: Vec::new(),
            pending: Vec::new(),
            memory: Memory::default(),
            checker: Checker::default(),
            rng: Rng::new(seed),
            next_handle: 0x5_0000,
            unsupported: Vec::new(),
            modules: HashMap::new(),
            functions: HashMap::new(),
            graphs: HashMap::new(),
            execs: HashMap::new(),
        };
        let agent = sim.checker.new_agent("the legacy default stream".into(), false);
        sim.streams.insert(LEGACY, StreamState { agent, last: None, blocking: true, capture: None });
        sim
    }

    /// Starts a new program: forgets the clocks, accesses and reports, frees what was freed,
    /// and reseeds. Everything queued must have run.
    pub fn reset(&mut self, seed: u64) {
        self.checker.reset();
        self.ops.clear();
        self.pending.clear();
        self.streams.values_mut().for_each(|s| {
            s.last = None;
            s.capture = None;
        });
        self.events.values_mut().for_each(|e| {
            e.recorded = None;
            e.captured = None;
        });
        self.graphs.clear();
        self.execs.clear();
        self.memory.sweep();
        self.rng = Rng::new(seed);
    }

    /// The calling thread's agent, made on its first call.
    pub fn host(&mut self) -> usize {
        if let Some(a) = HOST_AGENT.with(Cell::get) {
            return a;
        }
        let n = self.checker.agent_count();
        let a = self.checker.new_agent(format!("host thread {n}"), true);
        HOST_AGENT.with(|h| h.set(Some(a)));
        a
    }

    /// A new made-up handle.
    pub fn new_handle(&mut self) -> u64 {
        self.next_handle += 16;
        self.next_handle
    }

    /// The key a stream handle stands for; the per-thread default stream is one per thread.
    fn key(&mut self, handle: u64) -> Option<u64> {
        match handle {
            0 | LEGACY => Some(LEGACY),
            PER_THREAD => {
                let host = self.host() as u64;
                let key = (PER_THREAD << 48) | host;
                if !self.streams.contains_key(&key) {
                    let agent = self.checker.new_agent(format!("per-thread stream of agent {host}"), false);
                    self.streams
                        .insert(key, StreamState { agent, last: None, blocking: true, capture: None });
                }
                Some(key)
            }
            h => self.streams.contains_key(&h).then_some(h),
        }
    }

    /// The state of stream `handle`.
    pub(crate) fn stream_mut(&mut self, handle: u64) -> Option<&mut StreamState> {
        let key = self.key(handle)?;
        self.streams.get_mut(&key)
    }

    /// Every capture under way.
    pub(crate) fn captures_mut(&mut self) -> impl Iterator<Item = &mut Capture> {
        self.streams.values_mut().filter_map(|s| s.capture.as_mut())
    }

    /// Whether `handle` names a stream.
    pub fn is_stream(&mut self, handle: u64) -> bool {
        self.key(handle).is_some()
    }

    /// Creates a stream; `blocking` when it synchronizes with the legacy default stream.
    pub fn create_stream(&mut self, blocking: bool) -> u64 {
        let h = self.new_handle();
        let agent = self.checker.new_agent(format!("stream {h:#x}"), false);
        self.streams.insert(h, StreamState { agent, last: None, blocking, capture: None });
        h
    }

    /// Destroys a stream; its queued work still runs.
    pub fn destroy_stream(&mut self, handle: u64) -> bool {
        handle > PER_THREAD && self.streams.remove(&handle).is_some()
    }

    /// Creates an event.
    pub fn create_event(&mut self) -> u64 {
        let h = self.new_handle();
        self.events.insert(h, EventState::default());
        h
    }

    /// Destroys an event.
    pub fn destroy_event(&mut self, handle: u64) -> bool {
        self.events.remove(&handle).is_some()
    }

    /// Whether `handle` names an event.
    pub fn is_event(&self, handle: u64) -> bool {
        self.events.contains_key(&handle)
    }

    /// Queues `work` on stream `handle` after `also` (an event's record), checks its accesses
    /// (`reads`, `writes`) and returns its operation and stamp; `None` for an unknown stream.
    pub fn enqueue(
        &mut self,
        handle: u64,
        work: Work,
        also: Option<(usize, VectorClock)>,
        call: &'static str,
        reads: &[Range],
        writes: &[Range],
    ) -> Option<(usize, Stamp)> {
        let key = self.key(handle)?;
        let host = self.host();
        let (agent, mut deps) = self.order_of(key);
        self.checker.join_agent(agent, host);
        if let Some((op, clock)) = also {
            deps.push(op);
            self.checker.join(agent, &clock);
        }
        let id = self.ops.len();
        self.ops.push(Op { deps, work, done: false });
        self.pending.push(id);
        if let Some(s) = self.streams.get_mut(&key) {
            s.last = Some(id);
        }
        let stamp = self.checker.tick(agent);
        let site = self.checker.site(host, call);
        for &r in reads {
            self.record(stamp, r, false, &site);
        }
        for &r in writes {
            self.record(stamp, r, true, &site);
        }
        Some((id, stamp))
    }

    /// Queues `work` on stream `handle` with its accesses, or records it into the stream's
    /// capture; the driver status.
    pub fn submit(
        &mut self,
        handle: u64,
        work: Work,
        call: &'static str,
        reads: &[Range],
        writes: &[Range],
    ) -> i32 {
        if let Taken::Done(status) = self.capture_work(handle, work, reads, writes) {
            return status;
        }
        match self.enqueue(handle, work, None, call, reads, writes) {
            Some(_) => crate::SUCCESS,
            None => crate::INVALID_HANDLE,
        }
    }

    fn record(&mut self, stamp: Stamp, range: Range, write: bool, site: &Site) {
        if !self.memory.is_tracked(range.start, range.end - range.start) {
            return;
        }
        let (reads, writes) = AS_OF.with(Cell::get);
        match if write { writes } else { reads } {
            0 => self.checker.access(stamp, range, write, site.clone()),
            as_of => self.checker.access_as_of(stamp, range, write, site.clone(), as_of),
        }
    }

    /// The stream's agent and what its next operation depends on: its last one, and across
    /// the legacy default stream's implicit synchronization (joining the clocks as it goes).
    fn order_of(&mut self, key: u64) -> (usize, Vec<usize>) {
        let Some(s) = self.streams.get(&key) else { return (0, Vec::new()) };
        let (agent, blocking) = (s.agent, s.blocking);
        let mut deps: Vec<usize> = s.last.into_iter().collect();
        let others: Vec<(usize, Option<usize>)> = if key == LEGACY {
            self.streams
                .iter()
                .filter(|(k, s)| **k != LEGACY && s.blocking)
                .map(|(_, s)| (s.agent, s.last))
                .collect()
        } else if blocking {
            self.streams.get(&LEGACY).map(|s| (s.agent, s.last)).into_iter().collect()
        } else {
            Vec::new()
        };
        for (other, last) in others {
            self.checker.join_agent(agent, other);
            deps.extend(last);
        }
        (agent, deps)
    }

    /// Records `event` on stream `handle` (in a capture: marks the event as recorded there).
    pub fn record_event(&mut self, event: u64, handle: u64) -> i32 {
        if !self.events.contains_key(&event) {
            return crate::INVALID_HANDLE;
        }
        match self.capture_of(handle) {
            None => return crate::INVALID_HANDLE,
            Some(Some(c)) if c.invalid => return crate::graphs::CAPTURE_INVALIDATED,
            Some(Some(c)) => {
                let id = c.id;
                if let Some(e) = self.events.get_mut(&event) {
                    e.recorded = None;
                    e.captured = Some(id);
                }
                return crate::SUCCESS;
            }
            Some(None) => {}
        }
        let Some((op, stamp)) = self.enqueue(handle, Work::Mark, None, "cuEventRecord", &[], &[]) else {
            return crate::INVALID_HANDLE;
        };
        let clock = self.checker.clock(stamp.agent).clone();
        if let Some(e) = self.events.get_mut(&event) {
            e.recorded = Some((op, clock));
            e.captured = None;
        }
        crate::SUCCESS
    }

    /// Makes stream `handle` wait for `event`'s last record. A capturing stream may wait only
    /// for a record of its own capture (linear: nothing to add), or, `external`, for one made
    /// outside any capture (a node waiting for it at each launch); a stream that is not
    /// capturing cannot join a capture here.
    pub fn wait_event(&mut self, handle: u64, event: u64, external: bool) -> i32 {
        let Some(e) = self.events.get(&event) else { return crate::INVALID_HANDLE };
        let (also, captured) = (e.recorded.clone(), e.captured);
        match (self.capture_of(handle), captured) {
            (None, _) => crate::INVALID_HANDLE,
            (Some(Some(c)), _) if c.invalid => crate::graphs::CAPTURE_INVALIDATED,
            (Some(Some(c)), Some(id)) if c.id == id => crate::SUCCESS,
            (Some(Some(_)), None) if external => self.capture_wait(handle, also),
            (Some(Some(_)), _) => {
                self.refuse_if_capturing(handle);
                CAPTURE_ISOLATION
            }
            (Some(None), Some(_)) => crate::NOT_SUPPORTED,
            (Some(None), None) => {
                self.enqueue(handle, Work::Mark, also, "cuStreamWaitEvent", &[], &[]);
                crate::SUCCESS
            }
        }
    }

    /// Whether `event`'s last record was made in a capture (it cannot be waited for).
    pub fn is_captured_event(&self, event: u64) -> bool {
        self.events.get(&event).is_some_and(|e| e.captured.is_some())
    }

    /// What waiting for stream `handle` waits for, and its clock; `None` for an unknown stream.
    pub fn stream_point(&mut self, handle: u64) -> Option<(Option<usize>, usize)> {
        let key = self.key(handle)?;
        self.streams.get(&key).map(|s| (s.last, s.agent))
    }

    /// What waiting for `event` waits for: its last record's operation and clock.
    pub fn event_point(&self, event: u64) -> Option<Option<(usize, VectorClock)>> {
        self.events.get(&event).map(|e| e.recorded.clone())
    }

    /// Whether operation `op` has run.
    pub fn is_done(&self, op: usize) -> bool {
        self.ops.get(op).is_none_or(|o| o.done)
    }

    /// The calling host thread has waited for stream agent `agent`'s work so far.
    pub fn host_saw_agent(&mut self, agent: usize) {
        let host = self.host();
        self.checker.join_agent(host, agent);
    }

    /// The calling host thread has waited for work up to `clock`.
    pub fn host_saw(&mut self, clock: &VectorClock) {
        let host = self.host();
        self.checker.join(host, clock);
    }

    /// The calling host thread has waited for everything queued.
    pub fn host_saw_all(&mut self) {
        let agents: Vec<usize> = self.streams.values().map(|s| s.agent).collect();
        agents.into_iter().for_each(|a| self.host_saw_agent(a));
    }

    /// A coin for queries: whether one that could wait answers "done" now.
    pub fn query_finishes(&mut self) -> bool {
        !self.rng.one_in(3)
    }

    /// Runs data operations that `until` needs, in random order, until it is reached (`None`)
    /// or a host function is next: that one is marked run and returned, for the caller to call
    /// with no lock held.
    pub fn run(&mut self, until: Until) -> Option<(HostFn, usize)> {
        let needed = self.needed(until);
        loop {
            let ready: Vec<usize> = self
                .pending
                .iter()
                .copied()
                .filter(|&i| needed.as_ref().is_none_or(|n| n.contains(&i)))
                .filter(|&i| self.ops[i].deps.iter().all(|&d| self.ops[d].done))
                .collect();
            if ready.is_empty() {
                return None;
            }
            let pick = ready[self.rng.below(ready.len())];
            self.ops[pick].done = true;
            self.pending.retain(|&i| i != pick);
            match self.ops[pick].work {
                Work::Host { f, data } => return Some((f, data)),
                work => self.execute(work),
            }
        }
    }

    /// The operations `until` depends on (`None`: all).
    fn needed(&self, until: Until) -> Option<HashSet<usize>> {
        let Until::Op(target) = until else { return None };
        let mut seen = HashSet::new();
        let mut stack = vec![target];
        while let Some(i) = stack.pop() {
            if self.ops.get(i).is_some_and(|o| !o.done) && seen.insert(i) {
                stack.extend(self.ops[i].deps.iter().copied());
            }
        }
        Some(seen)
    }

    fn execute(&mut self, work: Work) {
        match work {
            Work::Memset { dst, count, width, value } => {
                let bytes = value.to_le_bytes();
                let width = usize::from(width);
                if let Some(p) = self.memory.locate(dst, count.saturating_mul(width as u64)) {
                    for i in 0..count as usize {
                        // SAFETY: `locate` found `count * width` bytes at `p`.
                        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.add(i * width), width) };
                    }
                }
            }
            Work::Copy { dst, src, bytes } => {
                let from = self.memory.locate(src, bytes);
                let to = self.memory.locate(dst, bytes);
                if let (Some(from), Some(to)) = (from, to) {
                    // SAFETY: both spans are `bytes` long: simulator memory, or host memory the
                    // caller of a synchronous copy keeps alive while it waits.
                    unsafe { std::ptr::copy(from, to, bytes as usize) };
                }
            }
            Work::Kernel(launch) => launch.run(&mut self.memory),
            Work::Host { .. } | Work::Mark => {}
        }
    }

    /// Loads a module of the built-in kernels `kernels` (indices in [`BUILTINS`]).
    pub fn load_module(&mut self, kernels: &[usize]) -> u64 {
        let module = self.new_handle();
        let functions = kernels
            .iter()
            .map(|&k| {
                let f = self.new_handle();
                self.functions.insert(f, k);
                f
            })
            .collect();
        self.modules.insert(module, functions);
        module
    }

    /// Unloads a module; its functions are gone with it.
    pub fn unload_module(&mut self, module: u64) -> bool {
        let Some(functions) = self.modules.remove(&module) else { return false };
        functions.iter().for_each(|f| {
            self.functions.remove(f);
        });
        true
    }

    /// The function of `module` named `name`.
    pub fn function(&self, module: u64, name: &[u8]) -> Option<Option<u64>> {
        let functions = self.modules.get(&module)?;
        Some(
            functions
                .iter()
                .copied()
                .find(|f| self.functions.get(f).is_some_and(|&k| BUILTINS[k].name.to_bytes() == name)),
        )
    }

    /// The function handles of `module`.
    pub fn module_functions(&self, module: u64) -> Option<Vec<u64>> {
        self.modules.get(&module).cloned()
    }

    /// The built-in kernel a function handle stands for.
    pub fn kernel_of(&self, function: u64) -> Option<usize> {
        self.functions.get(&function).copied()
    }

    /// Whether anything is queued and not run.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }
}
