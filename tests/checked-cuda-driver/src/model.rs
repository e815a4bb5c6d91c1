//! What the checking driver knows of the program: its streams, events, host threads, live
//! memory, captures and graphs, and the [`Checker`] they feed.
//!
//! * **Streams** are agents. A stream handle is resolved as the driver resolves it: 0 is the
//!   legacy default stream of the current context (the calling thread's per-thread stream when
//!   the function was looked up with the per-thread flag), `CU_STREAM_LEGACY` and
//!   `CU_STREAM_PER_THREAD` name those two. Work on the legacy stream is ordered after the
//!   work queued so far on every blocking stream of its context, and work on a blocking stream
//!   after the legacy stream's.
//! * **Host threads** are agents too. Hand-offs between threads (a channel, a join) make no
//!   driver call, so the checker takes the order in which threads make their calls as their
//!   order: each call has seen what the thread of the call before had. Races between host
//!   threads are Rust's to prevent, not this checker's.
//! * **Memory**: every allocation (`cuMemAlloc*`, `cuMemHostAlloc`, `cuMemAllocManaged`, a
//!   `cuMemMap`) starts an owner; a pool handing a block out again starts one too (told by
//!   `cuda-core`). Only ranges inside live allocations are checked. A kernel argument of 8
//!   bytes inside a live allocation counts as reading and writing from there to the end of its
//!   owner's block, or as reading only where `cuda-core` told that the launch only reads it
//!   (the argument was a shared borrow: the `launch_reads` hook). `cuMemFree` and context destruction wait for the device; `cuMemFreeHost`,
//!   `cuMemFreeAsync` and `cuMemUnmap` are releases that every use must be ordered before.
//!   Memory freed with `cuMemFreeAsync` and handed out again by the driver's pool is ordered
//!   after the free, as the driver orders it.
//! * **Capture**: work queued on a capturing stream (or on one that joined the capture through
//!   an event) is recorded with its ranges; the captured graph keeps them, an instantiation
//!   copies them, and a launch queues them on its stream, ordered after the exec's previous
//!   launch. Graphs the checker did not see captured are launched unmodelled.

use crate::EXIT_STATUS;
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::ffi::c_int;
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};
use stream_checker::checker::{Checker, Range, Stamp};
use stream_checker::clock::VectorClock;

/// `CU_STREAM_LEGACY`.
const LEGACY: u64 = 1;
/// `CU_STREAM_PER_THREAD`.
const PER_THREAD: u64 = 2;

/// Which stream a handle names, in the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Key {
    Created(u64),
    Legacy(u64),
    PerThread { ctx: u64, host: usize },
}

#[derive(Debug)]
struct StreamInfo {
    agent: usize,
    blocking: bool,
    ctx: u64,
    /// The capture it records into, if any.
    capture: Option<u64>,
}

#[derive(Debug, Default)]
struct EventInfo {
    clock: Option<VectorClock>,
    /// The capture its last record was made in.
    captured: Option<u64>,
}

/// The ranges one piece of captured work reads and writes.
#[derive(Clone, Debug, Default)]
struct Node {
    reads: Vec<Range>,
    writes: Vec<Range>,
}

#[derive(Debug, Default)]
struct Exec {
    nodes: Vec<Node>,
    /// The clock of its last launch: launches of one exec are ordered by the driver.
    last: Option<VectorClock>,
    /// Made from a graph the checker did not see captured.
    unmodelled: bool,
}

/// The whole model.
#[derive(Debug, Default)]
pub struct Model {
    /// The checker.
    pub checker: Checker,
    streams: HashMap<Key, StreamInfo>,
    events: HashMap<u64, EventInfo>,
    /// Live allocations: start -> end.
    live: BTreeMap<u64, u64>,
    /// Memory freed with `cuMemFreeAsync`: start -> (end, the clock of the free).
    freed_async: BTreeMap<u64, (u64, VectorClock)>,
    /// Captures under way: id -> the nodes recorded.
    captures: HashMap<u64, Vec<Node>>,
    next_capture: u64,
    graphs: HashMap<u64, Vec<Node>>,
    execs: HashMap<u64, Exec>,
    /// Kernel parameter layouts: function -> (offset, size) of each parameter.
    pub(crate) params: HashMap<u64, Option<Vec<(usize, usize)>>>,
    /// How often something unmodelled happened, by what.
    unmodelled: BTreeMap<String, u64>,
    /// Calls the model saw.
    pub calls: u64,
}

static MODEL: LazyLock<Mutex<Model>> = LazyLock::new(|| {
    let mut m = Model::default();
    m.checker.print = true;
    m.checker.collect_every = 4096;
    m.checker.backtraces = std::env::var_os("CUDA_CHECK_BACKTRACE").is_some_and(|v| v == "1");
    Mutex::new(m)
});

thread_local! {
    static HOST: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The model, locked.
pub fn lock() -> MutexGuard<'static, Model> {
    MODEL.lock().unwrap_or_else(PoisonError::into_inner)
}

unsafe extern "C" {
    fn atexit(f: extern "C" fn()) -> c_int;
    fn _exit(status: c_int) -> !;
}

/// Registers the exit summary, once.
pub(crate) fn start() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        // SAFETY: registers a function of the right type, which lives as long as the process
        // (the library is never unloaded: the program's driver loader keeps it open).
        unsafe { atexit(at_exit) };
    });
}

extern "C" fn at_exit() {
    let m = lock();
    eprint!("{}", m.summary());
    if m.checker.rule_broken() {
        eprintln!("cuda-check: the stream rule was broken (reports above); exit status {EXIT_STATUS}");
        // SAFETY: ends the process at once, as `exit` would after this handler, with a status
        // that says the check failed.
        unsafe { _exit(EXIT_STATUS) };
    }
}

/// The `new_owner` hook.
pub extern "C" fn new_owner_hook(ptr: u64, size: u64) {
    let mut m = lock();
    m.host();
    m.checker.new_owner(Range::new(ptr, size));
}

/// The `host_access` hook.
pub extern "C" fn host_access_hook(ptr: u64, len: u64, write: c_int) {
    let mut m = lock();
    let host = m.host();
    let range = Range::new(ptr, len);
    if m.is_live(range) {
        let at = m.checker.tick(host);
        let site = m.checker.site(
            host,
            if write != 0 { "host write of pinned memory" } else { "host read of pinned memory" },
        );
        m.checker.access(at, range, write != 0, site);
    }
}

/// A function that may queue work was looked up and passes through unmodelled.
pub(crate) fn looked_up_unmodelled(name: &str) {
    const WORK: [&str; 9] = [
        "cuMemcpy",
        "cuMemset",
        "cuLaunch",
        "cuGraphLaunch",
        "cuMemPrefetch",
        "cuStreamWriteValue",
        "cuStreamWaitValue",
        "cuStreamBatchMemOp",
        "cuMemDiscard",
    ];
    if WORK.iter().any(|w| name.starts_with(w)) {
        lock().unmodelled(format!("looked up, passes through: {name}"));
    }
}

impl Model {
    /// The calling thread's agent (made on its first call), which has seen what the thread
    /// of the call before had.
    pub fn host(&mut self) -> usize {
        self.calls += 1;
        let host = match HOST.with(Cell::get) {
            Some(h) => h,
            None => {
                let n = self.checker.agent_count();
                let name = match std::thread::current().name() {
                    Some(t) => format!("host thread {n} ({t})"),
                    None => format!("host thread {n}"),
                };
                let h = self.checker.new_agent(name, true);
                HOST.with(|c| c.set(Some(h)));
                h
            }
        };
        self.checker.follow(host);
        host
    }

    /// Counts something unmodelled.
    pub fn unmodelled(&mut self, what: String) {
        *self.unmodelled.entry(what).or_default() += 1;
    }

    fn summary(&self) -> String {
        let mut out = format!("cuda-check: {} driver calls checked; reports per category:\n", self.calls);
        for line in self.checker.summary().lines() {
            out.push_str(&format!("cuda-check: {line}\n"));
        }
        for (what, n) in &self.unmodelled {
            out.push_str(&format!("cuda-check: unmodelled ({n}x): {what}\n"));
        }
        out
    }

    /// Whether `range` lies inside a live allocation.
    fn is_live(&self, range: Range) -> bool {
        self.live.range(..=range.start).next_back().is_some_and(|(_, &end)| range.start < end)
    }

    /// The live allocation containing `addr`.
    fn allocation_of(&self, addr: u64) -> Option<Range> {
        let (&start, &end) = self.live.range(..=addr).next_back()?;
        (addr < end).then_some(Range { start, end })
    }

    /// A new allocation of `len` bytes at `ptr`, made by `host` (or, stream-ordered, on `stream`).
    pub fn allocated(&mut self, ptr: u64, len: u64, stream: Option<(u64, bool)>) {
        let host = self.host();
        let range = Range::new(ptr, len);
        // Memory the driver's pool hands out again after a stream-ordered free is ordered
        // after that free (the driver makes the new owner's stream wait, or knows it done).
        let agent = match stream.and_then(|(h, pt)| self.stream(h, pt)) {
            Some(key) => self.streams[&key].agent,
            None => host,
        };
        let freed: Vec<u64> =
            self.freed_async.range(..range.end).filter(|(_, (end, _))| *end > ptr).map(|(s, _)| *s).collect();
        for start in freed {
            if let Some((_, clock)) = self.freed_async.remove(&start) {
                self.checker.join(agent, &clock);
            }
        }
        self.live.insert(ptr, range.end);
        self.checker.new_owner(range);
    }

    /// The allocation at `ptr` is gone; its range.
    fn forget(&mut self, ptr: u64) -> Option<Range> {
        self.live.remove(&ptr).map(|end| Range { start: ptr, end })
    }

    /// `cuMemFree`: waits for the device, then frees.
    pub fn freed_synchronously(&mut self, ptr: u64) {
        let host = self.host();
        self.host_saw_everything(host);
        self.forget(ptr);
    }

    /// A release by the host that waits for nothing (`cuMemFreeHost`, `cuMemUnmap`).
    pub fn released_by_host(&mut self, ptr: u64, len: Option<u64>, call: &'static str) {
        let host = self.host();
        let range = match len {
            Some(len) => {
                self.live.remove(&ptr);
                Range::new(ptr, len)
            }
            None => match self.forget(ptr) {
                Some(r) => r,
                None => return,
            },
        };
        let at = self.checker.tick(host);
        let site = self.checker.site(host, call);
        self.checker.release(at, range, site);
    }

    /// `cuMemFreeAsync` on stream `handle`: a release in the stream's order.
    pub fn freed_async(&mut self, ptr: u64, handle: u64, pt: bool) {
        let host = self.host();
        let Some(range) = self.forget(ptr) else { return };
        let Some(key) = self.stream(handle, pt) else { return };
        if self.streams[&key].capture.is_some() {
            return;
        }
        let at = self.queue_on(key, host);
        let site = self.checker.site(host, "cuMemFreeAsync");
        self.checker.release(at, range, site);
        let clock = self.checker.clock(at.agent).clone();
        self.freed_async.insert(range.start, (range.end, clock));
    }

    /// The key of stream `handle` (made when first seen), for a function looked up with the
    /// per-thread flag when `pt`.
    fn stream(&mut self, handle: u64, pt: bool) -> Option<Key> {
        let key = match handle {
            0 if pt => Key::PerThread { ctx: crate::wrappers::current_context(), host: self.host_id() },
            0 | LEGACY => Key::Legacy(crate::wrappers::current_context()),
            PER_THREAD => Key::PerThread { ctx: crate::wrappers::current_context(), host: self.host_id() },
            h => Key::Created(h),
        };
        if !self.streams.contains_key(&key) {
            let (name, blocking, ctx) = match key {
                Key::Created(h) => (format!("stream {h:#x}"), true, crate::wrappers::current_context()),
                Key::Legacy(ctx) => (format!("the legacy default stream of context {ctx:#x}"), true, ctx),
                Key::PerThread { ctx, host } => (
                    format!(
                        "the per-thread default stream of {} in context {ctx:#x}",
                        self.checker.name(host)
                    ),
                    true,
                    ctx,
                ),
            };
            let agent = self.checker.new_agent(name, false);
            self.streams.insert(key, StreamInfo { agent, blocking, ctx, capture: None });
        }
        Some(key)
    }

    fn host_id(&mut self) -> usize {
        HOST.with(Cell::get).unwrap_or_else(|| self.host())
    }

    /// A stream was created.
    pub fn stream_created(&mut self, handle: u64, blocking: bool) {
        self.host();
        let ctx = crate::wrappers::current_context();
        let agent = self.checker.new_agent(format!("stream {handle:#x}"), false);
        if let Some(old) =
            self.streams.insert(Key::Created(handle), StreamInfo { agent, blocking, ctx, capture: None })
        {
            self.checker.retire(old.agent);
        }
    }

    /// A stream was destroyed.
    pub fn stream_destroyed(&mut self, handle: u64) {
        self.host();
        if let Some(s) = self.streams.remove(&Key::Created(handle)) {
            self.checker.retire(s.agent);
        }
    }

    /// One more tick of the stream `key`, ordered after the queueing host thread and, across
    /// the legacy default stream's implicit synchronization, after the streams it waits for.
    fn queue_on(&mut self, key: Key, host: usize) -> Stamp {
        let s = &self.streams[&key];
        let (agent, blocking, ctx) = (s.agent, s.blocking, s.ctx);
        let others: Vec<usize> = match key {
            Key::Legacy(_) => self
                .streams
                .iter()
                .filter(|(k, s)| !matches!(k, Key::Legacy(_)) && s.blocking && s.ctx == ctx)
                .map(|(_, s)| s.agent)
                .collect(),
            _ if blocking => self.streams.get(&Key::Legacy(ctx)).map(|s| s.agent).into_iter().collect(),
            _ => Vec::new(),
        };
        for other in others {
            self.checker.join_agent(agent, other);
        }
        self.checker.join_agent(agent, host);
        self.checker.tick(agent)
    }

    /// Work queued on stream `handle` that reads `reads` and writes `writes` (or, on a
    /// capturing stream, recorded into the capture).
    pub fn queued(&mut self, handle: u64, pt: bool, call: &'static str, reads: &[Range], writes: &[Range]) {
        let host = self.host();
        let Some(key) = self.stream(handle, pt) else { return };
        let reads: Vec<Range> = reads.iter().copied().filter(|&r| self.is_live(r)).collect();
        let writes: Vec<Range> = writes.iter().copied().filter(|&r| self.is_live(r)).collect();
        if let Some(c) = self.streams[&key].capture {
            self.captures.entry(c).or_default().push(Node { reads, writes });
            return;
        }
        let at = self.queue_on(key, host);
        let site = self.checker.site(host, call);
        for r in reads {
            self.checker.access(at, r, false, site.clone());
        }
        for r in writes {
            self.checker.access(at, r, true, site.clone());
        }
    }

    /// Synchronous work (`cuMemcpy*` without `Async`): queued on the default stream, then
    /// waited for by the host.
    pub fn queued_and_waited(&mut self, pt: bool, call: &'static str, reads: &[Range], writes: &[Range]) {
        self.queued(0, pt, call, reads, writes);
        let host = self.host();
        if let Some(key) = self.stream(0, pt) {
            let agent = self.streams[&key].agent;
            self.checker.join_agent(host, agent);
        }
    }

    /// The ranges a kernel argument `value` stands for: from it to the end of its owner's
    /// block, when it lies inside a live allocation.
    pub fn argument_range(&self, value: u64) -> Option<Range> {
        let allocation = self.allocation_of(value)?;
        let end = self.checker.owner_end(value).map_or(allocation.end, |e| e.min(allocation.end));
        Some(Range { start: value, end })
    }

    /// `cuEventRecord`.
    pub fn event_recorded(&mut self, event: u64, handle: u64, pt: bool) {
        let host = self.host();
        let Some(key) = self.stream(handle, pt) else { return };
        if let Some(c) = self.streams[&key].capture {
            let e = self.events.entry(event).or_default();
            e.captured = Some(c);
            e.clock = None;
            return;
        }
        let at = self.queue_on(key, host);
        let clock = self.checker.clock(at.agent).clone();
        let e = self.events.entry(event).or_default();
        e.clock = Some(clock);
        e.captured = None;
    }

    /// `cuStreamWaitEvent`.
    pub fn event_waited(&mut self, handle: u64, pt: bool, event: u64) {
        let host = self.host();
        let Some(key) = self.stream(handle, pt) else { return };
        let Some(e) = self.events.get(&event) else { return };
        match (e.captured, self.streams[&key].capture) {
            // A stream that waits for an event recorded in a capture joins the capture.
            (Some(c), None) => {
                if let Some(s) = self.streams.get_mut(&key) {
                    s.capture = Some(c);
                }
            }
            (_, Some(_)) => {}
            (None, None) => {
                if let Some(clock) = e.clock.clone() {
                    let agent = self.streams[&key].agent;
                    self.checker.join_agent(agent, host);
                    self.checker.join(agent, &clock);
                }
            }
        }
    }

    /// The clock an event stands for, for a host wait (taken before the wait).
    pub fn event_clock(&mut self, event: u64) -> Option<VectorClock> {
        self.events.get(&event).and_then(|e| e.clock.clone())
    }

    /// The clock a stream has now, for a host wait (taken before the wait).
    pub fn stream_clock(&mut self, handle: u64, pt: bool) -> Option<VectorClock> {
        let key = self.stream(handle, pt)?;
        Some(self.checker.clock(self.streams[&key].agent).clone())
    }

    /// The host thread has waited for work up to `clock`.
    pub fn host_saw(&mut self, clock: &VectorClock) {
        let host = self.host();
        self.checker.join(host, clock);
    }

    /// Every stream's present clock, joined: for a wait for the whole device.
    pub fn everything(&self) -> VectorClock {
        let mut all = VectorClock::default();
        for s in self.streams.values() {
            all.join(self.checker.clock(s.agent));
        }
        all
    }

    fn host_saw_everything(&mut self, host: usize) {
        let all = self.everything();
        self.checker.join(host, &all);
    }

    /// `cuStreamBeginCapture` succeeded on `handle`.
    pub fn capture_began(&mut self, handle: u64, pt: bool) {
        self.host();
        let Some(key) = self.stream(handle, pt) else { return };
        self.next_capture += 1;
        let id = self.next_capture;
        self.captures.insert(id, Vec::new());
        if let Some(s) = self.streams.get_mut(&key) {
            s.capture = Some(id);
        }
    }

    /// `cuStreamEndCapture` on `handle` made `graph` (0 when it failed): the capture ends for
    /// every stream in it.
    pub fn capture_ended(&mut self, handle: u64, pt: bool, graph: u64) {
        self.host();
        let Some(key) = self.stream(handle, pt) else { return };
        let Some(id) = self.streams[&key].capture else { return };
        for s in self.streams.values_mut().filter(|s| s.capture == Some(id)) {
            s.capture = None;
        }
        let nodes = self.captures.remove(&id).unwrap_or_default();
        if graph != 0 {
            self.graphs.insert(graph, nodes);
        }
    }

    /// `graph` was instantiated as `exec`.
    pub fn instantiated(&mut self, graph: u64, exec: u64) {
        self.host();
        let exec_info = match self.graphs.get(&graph) {
            Some(nodes) => Exec { nodes: nodes.clone(), last: None, unmodelled: false },
            None => Exec { nodes: Vec::new(), last: None, unmodelled: true },
        };
        self.execs.insert(exec, exec_info);
    }

    /// A graph or an exec was destroyed.
    pub fn graph_destroyed(&mut self, handle: u64) {
        self.host();
        self.graphs.remove(&handle);
        self.execs.remove(&handle);
    }

    /// `cuGraphLaunch` of `exec` on `handle`: its nodes queued there (or recorded into the
    /// stream's capture), after its previous launch.
    pub fn graph_launched(&mut self, exec: u64, handle: u64, pt: bool) {
        let host = self.host();
        let Some(key) = self.stream(handle, pt) else { return };
        let (nodes, last) = match self.execs.get(&exec) {
            Some(e) if !e.unmodelled => (e.nodes.clone(), e.last.clone()),
            _ => {
                self.unmodelled("launch of a graph not made by a capture the checker saw".into());
                (Vec::new(), None)
            }
        };
        if let Some(c) = self.streams[&key].capture {
            self.captures.entry(c).or_default().extend(nodes);
            return;
        }
        let agent = self.streams[&key].agent;
        if let Some(last) = &last {
            self.checker.join(agent, last);
        }
        let at = self.queue_on(key, host);
        let site = self.checker.site(host, "cuGraphLaunch");
        for node in &nodes {
            for &r in &node.reads {
                self.checker.access(at, r, false, site.clone());
            }
            for &r in &node.writes {
                self.checker.access(at, r, true, site.clone());
            }
        }
        let clock = self.checker.clock(agent).clone();
        if let Some(e) = self.execs.get_mut(&exec) {
            e.last = Some(clock);
        }
    }

    /// The host waited for the whole device (`cuCtxSynchronize`, a context destroyed).
    pub fn device_waited(&mut self, before: &VectorClock) {
        self.host_saw(before);
    }
}

/// Runs `f` on the model, locked.
pub fn with<R>(f: impl FnOnce(&mut Model) -> R) -> R {
    f(&mut lock())
}

/// The clock of everything queued so far, for a wait for the device (taken before the wait).
pub fn everything_now() -> VectorClock {
    lock().everything()
}

#[cfg(test)]
mod tests {
    use super::*;
    use stream_checker::checker::Category;

    fn writes(m: &mut Model, stream: u64, range: Range) {
        m.queued(stream, false, "test", &[], &[range]);
    }

    #[test]
    fn the_legacy_stream_orders_blocking_streams_and_not_non_blocking_ones() {
        let mut m = Model::default();
        m.stream_created(0x10, true);
        m.stream_created(0x20, false);
        let r = Range::new(0x1000, 64);
        m.allocated(r.start, 64, None);
        writes(&mut m, 0x10, r);
        writes(&mut m, LEGACY, r);
        assert_eq!(m.checker.count(Category::UserRace), 0, "{}", m.checker.reports_text());
        writes(&mut m, 0x20, r);
        // Unordered with both earlier writes.
        assert_eq!(m.checker.count(Category::UserRace), 2);
    }

    #[test]
    fn events_order_streams_and_a_stream_ordered_free_orders_the_next_allocation() {
        let mut m = Model::default();
        m.stream_created(0x10, false);
        m.stream_created(0x20, false);
        let r = Range::new(0x1000, 64);
        m.allocated(r.start, 64, None);
        writes(&mut m, 0x10, r);
        m.event_recorded(0x99, 0x10, false);
        m.event_waited(0x20, false, 0x99);
        writes(&mut m, 0x20, r);
        m.freed_async(r.start, 0x20, false);
        assert!(!m.checker.rule_broken(), "{}", m.checker.reports_text());
        m.allocated(r.start, 64, Some((0x10, false)));
        writes(&mut m, 0x10, r);
        assert!(!m.checker.rule_broken(), "{}", m.checker.reports_text());
        // Without the driver's ordering the new owner's write would be category (a).
        m.allocated(0x2000, 64, None);
        writes(&mut m, 0x20, Range::new(0x2000, 64));
        m.checker.new_owner(Range::new(0x2000, 64));
        writes(&mut m, 0x10, Range::new(0x2000, 64));
        assert_eq!(m.checker.count(Category::OwnerOverlap), 1);
    }

    #[test]
    fn a_captured_graph_launch_checks_the_captured_ranges() {
        let mut m = Model::default();
        m.stream_created(0x10, false);
        m.stream_created(0x20, false);
        let r = Range::new(0x1000, 64);
        m.allocated(r.start, 64, None);
        m.capture_began(0x10, false);
        writes(&mut m, 0x10, r);
        m.capture_ended(0x10, false, 0x500);
        m.instantiated(0x500, 0x600);
        assert_eq!(m.checker.kept(), 0, "captured work runs at launches");
        m.graph_launched(0x600, 0x10, false);
        m.graph_launched(0x600, 0x20, false);
        assert_eq!(m.checker.count(Category::UserRace), 0, "launches of one exec are ordered");
        writes(&mut m, 0x20, r);
        m.graph_launched(0x600, 0x10, false);
        assert_eq!(m.checker.count(Category::UserRace), 1);
    }

    /// What the model adds to a call (the lock, the clocks, the check of the ranges), without
    /// the driver: run by hand with
    /// `cargo test --release -p checked-cuda-driver --lib -- --ignored --nocapture model_cost`.
    #[test]
    #[ignore = "a measurement, not a check"]
    fn model_cost_per_call() {
        let mut m = Model::default();
        for s in 1..=4 {
            m.stream_created(s * 0x10, false);
        }
        for b in 0..64 {
            m.allocated(0x10_0000 * (b + 1), 0x1000, None);
        }
        let m = Mutex::new(m);
        let n = 100_000u64;
        let started = std::time::Instant::now();
        for i in 0..n {
            let stream = 0x10 * (i % 4 + 1);
            let block = Range::new(0x10_0000 * (i % 64 + 1), 0x1000);
            m.lock().unwrap().queued(stream, false, "memset", &[], &[block]);
            m.lock().unwrap().event_recorded(0x99, stream, false);
            m.lock().unwrap().event_waited(0x10 * ((i + 1) % 4 + 1), false, 0x99);
        }
        let per_call = started.elapsed().as_nanos() / u128::from(3 * n);
        println!("model: {per_call} ns per call, {} accesses kept", m.lock().unwrap().checker.kept());
    }
}
