//! The happens-before checker: is every pair of conflicting uses of memory ordered, and by
//! what the CUDA programming model promises rather than by the order the work happened to run?
//!
//! # The model
//!
//! *Agents* are streams and host threads; each has a [`VectorClock`]. The relation is the one
//! the driver documents, nothing more:
//!
//! * **Program order.** Work queued on a stream is ordered after the work queued there before
//!   it, and after everything the queueing host thread did before the call: queueing joins the
//!   host thread's clock into the stream's, then ticks the stream.
//! * **Events.** `cuEventRecord` keeps the stream's clock in the event; `cuStreamWaitEvent`
//!   joins it into the waiting stream's.
//! * **Host synchronization.** A stream, event or context synchronization, and a query that
//!   answers "done", join the clocks of the work waited for into the host thread's.
//! * **The legacy default stream** is ordered after and before every blocking stream.
//! * **Hand-offs between host threads** that the driver cannot see (a channel, a join) are told
//!   by the test program through `sim_set_step`: the thread running a step has seen everything
//!   the thread of the step before had.
//!
//! Every queued operation is one tick of its stream, with the address ranges it reads and
//! writes; every host access to pinned memory is one tick of its host thread. Memory is owned
//! in *epochs*: a driver allocation starts one, and so does each block a pool hands out again
//! (told by the program through the pool's hooks, since the pool reuses blocks without a driver
//! call).
//!
//! # The reports
//!
//! A new access is checked against every earlier access to overlapping bytes of which one of
//! the two writes; when the earlier one is not ordered before the new one:
//!
//! * [`Category::OwnerOverlap`] (a): the two belong to different owners (epochs): the work of
//!   an earlier owner of a block is not ordered before the work of its next owner;
//! * [`Category::HostAccess`] (c): one of them is a host access to pinned memory;
//! * [`Category::UserRace`] (d): same owner, two streams: a race in the program itself, which
//!   the crate does not promise to prevent, counted apart. These are exactly the pairs that
//!   `cuhost::StreamOrdering::Implicit` would have ordered (a use after the last write on
//!   another stream, a write after the reads since), where the work was queued through the
//!   crate's safe calls on its buffers, views and mappings.
//!
//! Work issued for memory but queued only later (NCCL queues a group's calls when the group
//! ends) is checked [as of](Checker::access_as_of) the owners of when it was issued: a range
//! that has had a new owner in between is an (a) report too, since that work, ordered or not,
//! comes after the next owner took the memory.
//!
//! A release to the driver (`cuMemFreeAsync`, `cuMemFreeHost`) is checked against every access
//! to the memory: one not ordered before it is [`Category::ReleaseUnderWork`] (b). `cuMemFree`
//! waits for the device, as the driver's does, so it is ordered after everything.
//!
//! Each report names both sites: the program's step (when it tells one), the host thread, the
//! driver call, and, when backtraces are on, the Rust call stack of each. Reports are kept (at
//! most [`MAX_REPORTS`] between resets), counted per category, and printed to standard error as
//! they are made when [`Checker::print`] is on.
//!
//! # Cost
//!
//! An access is checked against the accesses kept so far that overlap it. An earlier access of
//! the same agent, owner and kind that the new one covers is dropped (every access unordered
//! with the old one is unordered with the new one, and gets the same report); with
//! [`Checker::collect_every`] set, the accesses every live agent has seen are dropped too, from
//! time to time, so that a long program keeps only what can still race.

use crate::clock::VectorClock;
use std::backtrace::Backtrace;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

/// What a report is about; the numbers are those of the exported query functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Category {
    /// (a) Work of an earlier owner of a block not ordered before work of its next owner.
    OwnerOverlap = 0,
    /// (b) Memory given back to the driver while work that used it is not ordered before.
    ReleaseUnderWork = 1,
    /// (c) A host access to pinned memory not ordered with a queued copy that touches it.
    HostAccess = 2,
    /// (d) Two unordered accesses to one owner's memory from two streams, one a write: a race
    /// in the user's program.
    UserRace = 3,
}

/// Every category, in number order.
pub const CATEGORIES: [Category; 4] =
    [Category::OwnerOverlap, Category::ReleaseUnderWork, Category::HostAccess, Category::UserRace];

impl Category {
    /// The category of number `n`.
    pub fn from_number(n: i32) -> Option<Category> {
        CATEGORIES.get(usize::try_from(n).ok()?).copied()
    }

    /// What the category means, in words.
    pub fn label(self) -> &'static str {
        match self {
            Category::OwnerOverlap => "(a) earlier owner's work not ordered before the next owner's",
            Category::ReleaseUnderWork => "(b) memory given back while work that used it may run",
            Category::HostAccess => "(c) host access to pinned memory not ordered with a copy",
            Category::UserRace => {
                "(d) race in the program: two streams, one owner, one write (StreamOrdering::Implicit orders it)"
            }
        }
    }

    /// Whether a report of this category is a hole in the crate's rule, not the program's own race.
    pub fn is_rule_broken(self) -> bool {
        self != Category::UserRace
    }
}

/// Where something happened: the program's step, the agent, the driver call.
#[derive(Clone, Debug)]
pub struct Site {
    /// The step the program set last ([`Checker::set_step`]), if it tells steps.
    pub step: Option<u32>,
    /// The host thread that made the call (its agent).
    pub host: usize,
    /// The driver call (or harness report) that made it.
    pub call: &'static str,
    /// The Rust stack of the call, captured unresolved when backtraces are on.
    pub trace: Option<Arc<Backtrace>>,
}

/// One report: its category and its words, both sites included.
#[derive(Clone, Debug)]
pub struct Report {
    /// What kind of problem.
    pub category: Category,
    /// The report in words.
    pub text: String,
}

/// A half-open byte range `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    /// The first address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
}

impl Range {
    /// `len` bytes from `start`.
    pub fn new(start: u64, len: u64) -> Range {
        Range { start, end: start.saturating_add(len) }
    }

    /// Whether the two share a byte.
    pub fn overlaps(self, other: Range) -> bool {
        self.start < other.end && other.start < self.end
    }

    /// Whether `other` lies inside this range.
    pub fn covers(self, other: Range) -> bool {
        self.start <= other.start && other.end <= self.end
    }
}

/// A point of an agent: its tick.
#[derive(Clone, Copy, Debug)]
pub struct Stamp {
    /// The agent.
    pub agent: usize,
    /// Its tick at this point.
    pub tick: u32,
}

#[derive(Debug)]
struct Access {
    range: Range,
    write: bool,
    host: bool,
    epoch: u64,
    at: Stamp,
    site: Site,
}

/// The owner epochs of address ranges: for each byte, the epoch of the last owner that took it.
/// Kept as disjoint intervals, so a look-up is a search.
#[derive(Debug, Default)]
struct Owners {
    /// start -> (end, epoch); the intervals do not overlap.
    spans: BTreeMap<u64, (u64, u64)>,
}

impl Owners {
    fn set(&mut self, range: Range, epoch: u64) {
        if range.start >= range.end {
            return;
        }
        // An interval that begins before the range and reaches into it keeps its head (and its
        // tail, past the range).
        if let Some((&start, &(end, e))) = self.spans.range(..range.start).next_back() {
            if end > range.start {
                self.spans.insert(start, (range.start, e));
                if end > range.end {
                    self.spans.insert(range.end, (end, e));
                }
            }
        }
        let inside: Vec<u64> = self.spans.range(range.start..range.end).map(|(&s, _)| s).collect();
        for start in inside {
            if let Some((end, e)) = self.spans.remove(&start) {
                if end > range.end {
                    self.spans.insert(range.end, (end, e));
                }
            }
        }
        self.spans.insert(range.start, (range.end, epoch));
    }

    fn end_of(&self, addr: u64) -> Option<u64> {
        match self.spans.range(..=addr).next_back() {
            Some((_, &(end, _))) if addr < end => Some(end),
            _ => None,
        }
    }

    /// The newest epoch among the owners of the bytes of `range` (0 for bytes nobody took).
    fn newest_in(&self, range: Range) -> u64 {
        let first = self.spans.range(..=range.start).next_back().filter(|&(_, &(end, _))| end > range.start);
        let inside = self.spans.range(range.start..range.end).filter(|&(&s, _)| s > range.start);
        first.into_iter().chain(inside).map(|(_, &(_, epoch))| epoch).max().unwrap_or(0)
    }

    fn epoch_of(&self, addr: u64) -> u64 {
        match self.spans.range(..=addr).next_back() {
            Some((_, &(end, epoch))) if addr < end => epoch,
            _ => 0,
        }
    }
}

/// The checker's state: the agents' clocks, the accesses so far, the owners, the reports.
#[derive(Debug, Default)]
pub struct Checker {
    clocks: Vec<VectorClock>,
    names: Vec<String>,
    hosts: Vec<bool>,
    retired: Vec<bool>,
    accesses: Vec<Access>,
    owners: Owners,
    next_epoch: u64,
    reports: Vec<Report>,
    counts: [u64; 4],
    /// The step the program set last, and the host thread of the call before.
    step: Option<u32>,
    last_host: Option<usize>,
    /// Accesses recorded since the last collection.
    since_collect: usize,
    /// Whether sites carry backtraces.
    pub backtraces: bool,
    /// Whether each report is printed to standard error as it is made.
    pub print: bool,
    /// Drop the accesses every live agent has seen once this many were recorded since the last
    /// time (0: never; an agent made afterwards must then start from a clock that has seen
    /// them, as a host thread does through [`follow`](Self::follow)).
    pub collect_every: usize,
}

/// At most this many reports are kept between resets: one bug repeats itself.
pub const MAX_REPORTS: usize = 64;

impl Checker {
    /// A new agent named `name` (a stream, or a host thread when `host`), with a zero clock.
    pub fn new_agent(&mut self, name: String, host: bool) -> usize {
        self.clocks.push(VectorClock::default());
        self.names.push(name);
        self.hosts.push(host);
        self.retired.push(false);
        self.clocks.len() - 1
    }

    /// How many agents there are.
    pub fn agent_count(&self) -> usize {
        self.clocks.len()
    }

    /// The agent's name.
    pub fn name(&self, agent: usize) -> &str {
        &self.names[agent]
    }

    /// The agent will make no more accesses (a destroyed stream): what it has not seen no
    /// longer keeps accesses from being collected.
    pub fn retire(&mut self, agent: usize) {
        self.retired[agent] = true;
    }

    /// Forgets every access, owner, report and clock (the agents stay): for a new program,
    /// once all queued work has run.
    pub fn reset(&mut self) {
        self.clocks.iter_mut().for_each(|c| *c = VectorClock::default());
        self.accesses.clear();
        self.owners = Owners::default();
        self.reports.clear();
        self.counts = [0; 4];
        self.step = None;
        self.last_host = None;
    }

    /// The agent's present clock.
    pub fn clock(&self, agent: usize) -> &VectorClock {
        &self.clocks[agent]
    }

    /// Joins `other` into `agent`'s clock.
    pub fn join(&mut self, agent: usize, other: &VectorClock) {
        self.clocks[agent].join(other);
    }

    /// Joins agent `from`'s clock into agent `into`'s.
    pub fn join_agent(&mut self, into: usize, from: usize) {
        if into != from {
            let theirs = self.clocks[from].clone();
            self.clocks[into].join(&theirs);
        }
    }

    /// One more tick of `agent`.
    pub fn tick(&mut self, agent: usize) -> Stamp {
        Stamp { agent, tick: self.clocks[agent].tick(agent) }
    }

    /// Host thread `host` acts after the host thread that acted last: it has seen everything
    /// that thread had.
    pub fn follow(&mut self, host: usize) {
        if let Some(last) = self.last_host {
            self.join_agent(host, last);
        }
        self.last_host = Some(host);
    }

    /// The program's step `step` begins on host thread `host`, which has seen everything the
    /// thread of the step before had.
    pub fn set_step(&mut self, step: u32, host: usize) {
        self.follow(host);
        self.step = Some(step);
    }

    /// The site of a call made now by `host`.
    pub fn site(&self, host: usize, call: &'static str) -> Site {
        let trace = self.backtraces.then(|| Arc::new(Backtrace::force_capture()));
        Site { step: self.step, host, call, trace }
    }

    /// `range` has a new owner from now on.
    pub fn new_owner(&mut self, range: Range) {
        self.next_epoch += 1;
        self.owners.set(range, self.next_epoch);
    }

    /// The newest owner epoch: the one the last [`new_owner`](Self::new_owner) started. Work
    /// issued now and queued later (an NCCL group's calls, queued when the group ends) is
    /// checked against it with [`access_as_of`](Self::access_as_of).
    pub fn epoch(&self) -> u64 {
        self.next_epoch
    }

    /// The end of the block of the owner of `addr` (the bytes the same owner took with it).
    pub fn owner_end(&self, addr: u64) -> Option<u64> {
        self.owners.end_of(addr)
    }

    /// The owner (epoch) of the byte at `addr` now.
    pub fn epoch_of(&self, addr: u64) -> u64 {
        self.owners.epoch_of(addr)
    }

    /// Checks and records an access to `range` by the point `at` of its agent (whose present
    /// clock is the access's), made at `site`.
    pub fn access(&mut self, at: Stamp, range: Range, write: bool, site: Site) {
        if range.start == range.end {
            return;
        }
        let host = self.hosts[at.agent];
        let epoch = self.owners.epoch_of(range.start);
        let clock = &self.clocks[at.agent];
        let mut found = Vec::new();
        for x in &self.accesses {
            if !x.range.overlaps(range) || !(x.write || write) || clock.has_seen(x.at.agent, x.at.tick) {
                continue;
            }
            let category = if x.host || host {
                Category::HostAccess
            } else if x.epoch != epoch {
                Category::OwnerOverlap
            } else if x.at.agent != at.agent {
                Category::UserRace
            } else {
                continue;
            };
            found.push((category, self.describe_pair(x, at, range, write, &site)));
        }
        for (category, text) in found {
            self.report(category, text);
        }
        self.accesses.retain(|x| {
            !(x.at.agent == at.agent && x.epoch == epoch && range.covers(x.range) && (write || !x.write))
        });
        self.accesses.push(Access { range, write, host, epoch, at, site });
        self.since_collect += 1;
        if self.collect_every != 0 && self.since_collect >= self.collect_every {
            self.collect();
        }
    }

    /// [`access`](Self::access) for work issued for the owners of memory when the newest epoch
    /// was `as_of` ([`epoch`](Self::epoch) then), and queued only now: an NCCL group's calls,
    /// which NCCL queues when the group ends. The memory must still belong to the owners the
    /// work was issued for. A byte of `range` that has had a new owner since is a
    /// [`Category::OwnerOverlap`] report, whatever orders the two: the earlier owner's work is
    /// not ordered before the next owner's, it comes after it.
    pub fn access_as_of(&mut self, at: Stamp, range: Range, write: bool, site: Site, as_of: u64) {
        if range.start == range.end {
            return;
        }
        let newest = self.owners.newest_in(range);
        if newest > as_of {
            let text = format!(
                "  issued for the owner of {:#x}..{:#x} (newest owner then: {as_of}), queued only later: {} by {} at {}\n  \
                 the memory had a new owner (owner {newest}) in between",
                range.start,
                range.end,
                if write { "write" } else { "read" },
                self.names[at.agent],
                self.describe_site(&site),
            );
            self.report(Category::OwnerOverlap, text);
        }
        self.access(at, range, write, site);
    }

    /// Drops the accesses that every live agent has seen: nothing can race with them any more.
    pub fn collect(&mut self) {
        self.since_collect = 0;
        let live: Vec<&VectorClock> =
            self.clocks.iter().zip(&self.retired).filter(|(_, r)| !**r).map(|(c, _)| c).collect();
        self.accesses.retain(|x| !live.iter().all(|c| c.has_seen(x.at.agent, x.at.tick)));
    }

    /// How many accesses are kept.
    pub fn kept(&self) -> usize {
        self.accesses.len()
    }

    /// Reports a graph launch's access to `range`, which belonged to owner `captured` when the
    /// work was captured and has another owner now: the graph uses memory given back since.
    pub fn stale_graph_access(&mut self, range: Range, captured: u64, site: &Site) {
        let text = format!(
            "  a graph launch at {} uses {:#x}..{:#x}, captured while owner {} had it; owner {} has it now",
            self.describe_site(site),
            range.start,
            range.end,
            captured,
            self.epoch_of(range.start)
        );
        self.report(Category::OwnerOverlap, text);
    }

    /// Checks a release of `range` to the driver at the point `at`: every access to it must
    /// be ordered before.
    pub fn release(&mut self, at: Stamp, range: Range, site: Site) {
        let clock = &self.clocks[at.agent];
        let late: Vec<String> = self
            .accesses
            .iter()
            .filter(|x| x.range.overlaps(range) && !clock.has_seen(x.at.agent, x.at.tick))
            .map(|x| {
                format!(
                    "  released by {} at {}\n  used by     {} at {} ({} {:#x}..{:#x})",
                    self.names[at.agent],
                    self.describe_site(&site),
                    self.names[x.at.agent],
                    self.describe_site(&x.site),
                    if x.write { "write" } else { "read" },
                    x.range.start,
                    x.range.end
                )
            })
            .collect();
        for text in late {
            self.report(Category::ReleaseUnderWork, text);
        }
    }

    fn describe_pair(&self, x: &Access, at: Stamp, range: Range, write: bool, site: &Site) -> String {
        let rw = |w: bool| if w { "write" } else { "read" };
        format!(
            "  earlier: {} of {:#x}..{:#x} by {} (owner {}) at {}\n  later:   {} of {:#x}..{:#x} by {} (owner {}) at {}",
            rw(x.write),
            x.range.start,
            x.range.end,
            self.names[x.at.agent],
            x.epoch,
            self.describe_site(&x.site),
            rw(write),
            range.start,
            range.end,
            self.names[at.agent],
            self.owners.epoch_of(range.start),
            self.describe_site(site),
        )
    }

    fn report(&mut self, category: Category, text: String) {
        self.counts[category as usize] += 1;
        if self.print {
            eprintln!("cuda-check: {}\n{}", category.label(), text);
        }
        if self.reports.len() < MAX_REPORTS {
            self.reports.push(Report { category, text });
        }
    }

    /// The reports kept since the last reset (at most [`MAX_REPORTS`]).
    pub fn reports(&self) -> &[Report] {
        &self.reports
    }

    /// How many reports of `category` were made since the last reset.
    pub fn count(&self, category: Category) -> u64 {
        self.counts[category as usize]
    }

    /// Whether a report of (a)–(c) was made since the last reset.
    pub fn rule_broken(&self) -> bool {
        CATEGORIES.iter().any(|&c| c.is_rule_broken() && self.count(c) > 0)
    }

    /// One line per category: how many reports were made.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        for c in CATEGORIES {
            let _ = writeln!(out, "{:>6}  {}", self.count(c), c.label());
        }
        out
    }

    /// The reports in words, one paragraph each, backtraces resolved.
    pub fn reports_text(&self) -> String {
        let mut out = String::new();
        for r in &self.reports {
            let _ = writeln!(out, "{}\n{}", r.category.label(), r.text);
        }
        out
    }

    fn describe_site(&self, site: &Site) -> String {
        let mut s = String::new();
        if let Some(step) = site.step {
            let _ = write!(s, "step {step} on ");
        }
        let _ = write!(s, "{} ({})", self.names[site.host], site.call);
        if let Some(trace) = &site.trace {
            let _ = write!(s, "\n{}", caller_frames(trace));
        }
        s
    }
}

/// Frames of the checker itself, the drivers (and the simulated NCCL), the standard library and the test harness: not
/// what a reader wants to see of a site.
const HIDDEN: [&str; 17] = [
    "std::",
    "core::",
    "alloc::",
    "<std::",
    "<core::",
    "<alloc::",
    "stream_checker::",
    "<stream_checker::",
    "sim_cuda_driver::",
    "sim_nccl::",
    "checked_cuda_driver::",
    "cuhost_driver_sys::",
    "cuhost_loader::",
    "test::",
    "__rust",
    "__libc",
    "_start",
];

/// The frames of a backtrace that belong to the program and `cuhost`, not to the checker,
/// the drivers or the standard library: what a reader wants to see of a site.
fn caller_frames(trace: &Backtrace) -> String {
    let text = trace.to_string();
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let Some((_, function)) = line.trim_start().split_once(": ") else { continue };
        // Driver and NCCL entry points (the wrappers and the `-sys` functions) name no path.
        let entry_point =
            (function.starts_with("cu") || function.starts_with("nccl")) && !function.contains("::");
        let hidden = HIDDEN.iter().any(|p| function.starts_with(p))
            || function.contains("harness::")
            || entry_point
            || ["<fn(", "start_thread", "clone"].iter().any(|p| function.starts_with(p));
        if !hidden {
            let _ = writeln!(out, "      {function}");
            if let Some(at) = lines.peek().filter(|l| l.trim_start().starts_with("at ")) {
                let _ = writeln!(out, "        {}", at.trim_start());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site() -> Site {
        Site { step: None, host: 0, call: "test", trace: None }
    }

    #[test]
    fn unordered_writes_of_two_owners_are_category_a_and_ordered_ones_are_not() {
        let mut c = Checker::default();
        let (s1, s2) = (c.new_agent("s1".into(), false), c.new_agent("s2".into(), false));
        let block = Range::new(0x1000, 256);
        c.new_owner(block);
        let a = c.tick(s1);
        c.access(a, block, true, site());
        c.new_owner(block);
        let b = c.tick(s2);
        c.access(b, block, true, site());
        assert_eq!(c.reports().len(), 1);
        assert_eq!(c.reports()[0].category, Category::OwnerOverlap);
        c.reset();
        c.new_owner(block);
        let a = c.tick(s1);
        c.access(a, block, true, site());
        c.new_owner(block);
        c.join_agent(s2, s1);
        let b = c.tick(s2);
        c.access(b, block, true, site());
        assert!(c.reports().is_empty(), "{}", c.reports_text());
    }

    #[test]
    fn same_owner_races_are_category_d_and_reads_do_not_conflict() {
        let mut c = Checker::default();
        let (s1, s2) = (c.new_agent("s1".into(), false), c.new_agent("s2".into(), false));
        let r = Range::new(0x1000, 64);
        let a = c.tick(s1);
        c.access(a, r, false, site());
        let b = c.tick(s2);
        c.access(b, r, false, site());
        assert!(c.reports().is_empty());
        let w = c.tick(s2);
        c.access(w, r, true, site());
        assert_eq!(c.reports().len(), 1);
        assert_eq!(c.reports()[0].category, Category::UserRace);
    }

    #[test]
    fn a_release_before_the_work_is_waited_for_is_category_b() {
        let mut c = Checker::default();
        let (s1, host) = (c.new_agent("s1".into(), false), c.new_agent("host".into(), true));
        let r = Range::new(0x1000, 64);
        let a = c.tick(s1);
        c.access(a, r, true, site());
        let h = c.tick(host);
        c.release(h, r, site());
        assert_eq!(c.reports()[0].category, Category::ReleaseUnderWork);
        c.reset();
        let a = c.tick(s1);
        c.access(a, r, true, site());
        c.join_agent(host, s1);
        let h = c.tick(host);
        c.release(h, r, site());
        c.access(h, r, true, site());
        assert!(c.reports().is_empty());
    }

    #[test]
    fn a_host_access_overlapping_an_unwaited_copy_is_category_c() {
        let mut c = Checker::default();
        let (s1, host) = (c.new_agent("s1".into(), false), c.new_agent("host".into(), true));
        let (pinned, other) = (Range::new(0x7000, 64), Range::new(0x8000, 64));
        let copy = c.tick(s1);
        c.access(copy, pinned, true, site());
        let read = c.tick(host);
        c.access(read, other, false, site());
        assert!(c.reports().is_empty());
        c.access(read, pinned, false, site());
        assert_eq!(c.reports()[0].category, Category::HostAccess);
    }
}

#[cfg(test)]
mod more_tests {
    use super::*;

    fn site() -> Site {
        Site { step: None, host: 0, call: "test", trace: None }
    }

    #[test]
    fn owners_are_the_last_taker_of_each_byte() {
        let mut o = Owners::default();
        o.set(Range::new(0x1000, 0x1000), 1);
        o.set(Range::new(0x1400, 0x100), 2);
        assert_eq!(
            [0x13ff, 0x1400, 0x14ff, 0x1500, 0x1fff, 0x2000].map(|a| o.epoch_of(a)),
            [1, 2, 2, 1, 1, 0]
        );
        o.set(Range::new(0x0800, 0x1000), 3);
        assert_eq!([0x07ff, 0x0800, 0x1400, 0x17ff, 0x1800].map(|a| o.epoch_of(a)), [0, 3, 3, 3, 1]);
    }

    #[test]
    fn work_queued_after_its_memory_changed_owner_is_category_a_even_when_ordered() {
        let mut c = Checker::default();
        let s1 = c.new_agent("s1".into(), false);
        let (block, other) = (Range::new(0x1000, 256), Range::new(0x2000, 256));
        c.new_owner(block);
        c.new_owner(other);
        let issued = c.epoch();
        // Another block changing owner, and the same block still with its owner: no report.
        c.new_owner(Range::new(0x3000, 64));
        let a = c.tick(s1);
        c.access_as_of(a, block, true, site(), issued);
        assert!(c.reports().is_empty(), "{}", c.reports_text());
        // The block has a new owner, whose write comes first on the same stream: the late
        // write of the earlier owner's call is ordered after it, and still a report.
        c.new_owner(Range::new(0x2080, 64));
        let b = c.tick(s1);
        c.access(b, Range::new(0x2080, 64), true, site());
        let late = c.tick(s1);
        c.access_as_of(late, other, false, site(), issued);
        assert_eq!(c.reports().len(), 1, "{}", c.reports_text());
        assert_eq!(c.reports()[0].category, Category::OwnerOverlap);
        assert!(c.reports()[0].text.contains("had a new owner"), "{}", c.reports()[0].text);
    }

    #[test]
    fn the_newest_owner_of_a_range_looks_at_every_byte() {
        let mut o = Owners::default();
        o.set(Range::new(0x1000, 0x100), 4);
        o.set(Range::new(0x1080, 0x10), 9);
        assert_eq!(o.newest_in(Range::new(0x1000, 0x80)), 4);
        assert_eq!(o.newest_in(Range::new(0x1000, 0x81)), 9);
        assert_eq!(o.newest_in(Range::new(0x1085, 0x100)), 9);
        assert_eq!(o.newest_in(Range::new(0x1090, 0x10)), 4);
        assert_eq!(o.newest_in(Range::new(0x5000, 0x10)), 0);
    }

    #[test]
    fn a_covered_access_of_the_same_agent_is_dropped_and_seen_ones_are_collected() {
        let mut c = Checker::default();
        let (s1, host) = (c.new_agent("s1".into(), false), c.new_agent("host".into(), true));
        let r = Range::new(0x1000, 64);
        for _ in 0..10 {
            let a = c.tick(s1);
            c.access(a, r, true, site());
        }
        assert_eq!(c.kept(), 1);
        c.collect();
        assert_eq!(c.kept(), 1, "the host has not seen it");
        c.join_agent(host, s1);
        c.collect();
        assert_eq!(c.kept(), 0);
        let s2 = c.new_agent("s2".into(), false);
        let w = c.tick(s2);
        c.access(w, r, true, site());
        assert_eq!(c.reports().len(), 0);
        assert!(!c.rule_broken());
        assert_eq!(c.count(Category::UserRace), 0);
    }
}
