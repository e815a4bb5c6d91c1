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
//!   the crate does not promise to prevent, counted apart.
//!
//! A release to the driver (`cuMemFreeAsync`, `cuMemFreeHost`) is checked against every access
//! to the memory: one not ordered before it is [`Category::ReleaseUnderWork`] (b). `cuMemFree`
//! waits for the device, as the driver's does, so it is ordered after everything.
//!
//! Each report names both sites: the program's step, the host thread, the driver call, and,
//! when backtraces are on (`sim_set_backtraces`), the Rust call stack of each.

use crate::clock::VectorClock;
use std::backtrace::Backtrace;
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

impl Category {
    /// The category of number `n`.
    pub fn from_number(n: i32) -> Option<Category> {
        [Category::OwnerOverlap, Category::ReleaseUnderWork, Category::HostAccess, Category::UserRace]
            .get(usize::try_from(n).ok()?)
            .copied()
    }

    fn label(self) -> &'static str {
        match self {
            Category::OwnerOverlap => "(a) earlier owner's work not ordered before the next owner's",
            Category::ReleaseUnderWork => "(b) memory given back while work that used it may run",
            Category::HostAccess => "(c) host access to pinned memory not ordered with a copy",
            Category::UserRace => "(d) race in the program: two streams, one owner, one write",
        }
    }
}

/// Where something happened: the program's step, the agent, the driver call.
#[derive(Clone, Debug)]
pub struct Site {
    /// The step the program set last (`sim_set_step`).
    pub step: u32,
    /// The host thread that made the call.
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

    fn overlaps(self, other: Range) -> bool {
        self.start < other.end && other.start < self.end
    }
}

/// A point of an agent: its tick, and whether the agent is a host thread.
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

#[derive(Debug)]
struct Owner {
    range: Range,
    epoch: u64,
}

/// The checker's state: the agents' clocks, the accesses so far, the owners, the reports.
#[derive(Debug, Default)]
pub struct Checker {
    clocks: Vec<VectorClock>,
    names: Vec<String>,
    hosts: Vec<bool>,
    accesses: Vec<Access>,
    owners: Vec<Owner>,
    next_epoch: u64,
    reports: Vec<Report>,
    /// The step and host thread the program set last.
    step: u32,
    last_host: Option<usize>,
    /// Whether sites carry backtraces.
    pub backtraces: bool,
}

/// At most this many reports are kept between resets: one bug repeats itself.
const MAX_REPORTS: usize = 64;

impl Checker {
    /// A new agent named `name` (a stream, or a host thread when `host`), with a zero clock.
    pub fn new_agent(&mut self, name: String, host: bool) -> usize {
        self.clocks.push(VectorClock::default());
        self.names.push(name);
        self.hosts.push(host);
        self.clocks.len() - 1
    }

    /// How many agents there are.
    pub fn agent_count(&self) -> usize {
        self.clocks.len()
    }

    /// Forgets every access, owner, report and clock (the agents stay): for a new program,
    /// once all queued work has run.
    pub fn reset(&mut self) {
        self.clocks.iter_mut().for_each(|c| *c = VectorClock::default());
        self.accesses.clear();
        self.owners.clear();
        self.reports.clear();
        self.step = 0;
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

    /// The program's step `step` begins on host thread `host`, which has seen everything the
    /// thread of the step before had.
    pub fn set_step(&mut self, step: u32, host: usize) {
        if let Some(last) = self.last_host {
            self.join_agent(host, last);
        }
        self.last_host = Some(host);
        self.step = step;
    }

    /// The site of a call made now by `host`.
    pub fn site(&self, host: usize, call: &'static str) -> Site {
        let trace = self.backtraces.then(|| Arc::new(Backtrace::force_capture()));
        Site { step: self.step, host, call, trace }
    }

    /// `range` has a new owner from now on.
    pub fn new_owner(&mut self, range: Range) {
        self.next_epoch += 1;
        self.owners.push(Owner { range, epoch: self.next_epoch });
    }

    fn epoch_of(&self, addr: u64) -> u64 {
        let r = Range::new(addr, 1);
        self.owners.iter().rev().find(|o| o.range.overlaps(r)).map_or(0, |o| o.epoch)
    }

    /// Checks and records an access to `range` by the point `at` of its agent (whose present
    /// clock is the access's), made at `site`.
    pub fn access(&mut self, at: Stamp, range: Range, write: bool, site: Site) {
        if range.start == range.end {
            return;
        }
        let host = self.hosts[at.agent];
        let epoch = self.epoch_of(range.start);
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
        self.accesses.push(Access { range, write, host, epoch, at, site });
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
                    describe_site(&site),
                    self.names[x.at.agent],
                    describe_site(&x.site),
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
            describe_site(&x.site),
            rw(write),
            range.start,
            range.end,
            self.names[at.agent],
            self.epoch_of(range.start),
            describe_site(site),
        )
    }

    fn report(&mut self, category: Category, text: String) {
        if self.reports.len() < MAX_REPORTS {
            self.reports.push(Report { category, text });
        }
    }

    /// The reports since the last reset.
    pub fn reports(&self) -> &[Report] {
        &self.reports
    }

    /// The reports in words, one paragraph each, backtraces resolved.
    pub fn reports_text(&self) -> String {
        let mut out = String::new();
        for r in &self.reports {
            let _ = writeln!(out, "{}\n{}", r.category.label(), r.text);
        }
        out
    }
}

fn describe_site(site: &Site) -> String {
    let mut s = format!("step {} on host thread {} ({})", site.step, site.host, site.call);
    if let Some(trace) = &site.trace {
        let _ = write!(s, "\n{}", caller_frames(trace));
    }
    s
}

/// The frames of a backtrace that belong to the program and `cuda_core`, not to the simulator
/// or the standard library: what a reader wants to see of a site.
fn caller_frames(trace: &Backtrace) -> String {
    let text = trace.to_string();
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let function = line.trim_start().split_once(": ").map_or("", |(_, f)| f);
        let ours =
            ["cuda_core::", "random_programs::", "<cuda_core::"].iter().any(|p| function.starts_with(p));
        if ours && !function.contains("harness::") {
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
        Site { step: 0, host: 0, call: "test", trace: None }
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
