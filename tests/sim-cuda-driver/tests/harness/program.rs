//! Random safe programs: steps over four buffer slots, two pinned slots, three streams, two
//! events, two host threads and an NCCL communicator of one rank, generated from a seed and
//! shrunk by deleting steps.

use sim_cuda_driver::rng::Rng;

/// One safe call (or a few) of the program. Slots, streams and events are small indices; a
/// step on an empty slot does nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `DeviceBuffer::new` (or `zeroed`) on a stream into a slot (dropping what it held);
    /// `big`: 1024 elements, else 256. The buffer lives on the step's thread.
    Alloc { slot: u8, stream: u8, big: bool, zeroed: bool },
    /// Drops the buffer.
    Drop { slot: u8 },
    /// `copy_from` a host vector of `value`s (synchronous).
    Upload { slot: u8, value: u32 },
    /// `to_vec` (synchronous).
    Download { slot: u8 },
    /// `memset_d32_async` of the whole view (`part` 0) or a half (1, 2) on a stream.
    Memset { slot: u8, stream: u8, part: u8, value: u32 },
    /// `copy_from_device_async` of the common prefix of two buffers on a stream.
    Copy { dst: u8, src: u8, stream: u8 },
    /// `Event::record` on a stream.
    Record { event: u8, stream: u8 },
    /// `Stream::wait_event`.
    Wait { stream: u8, event: u8 },
    /// `Event::synchronize`.
    EventSync { event: u8 },
    /// `Stream::synchronize`.
    Sync { stream: u8 },
    /// `DeviceBuffer::set_stream`.
    SetStream { slot: u8, stream: u8 },
    /// Moves the buffer to the other thread: its later steps run there.
    Move { slot: u8 },
    /// `PinnedBuffer::new` into a pinned slot (dropping what it held).
    PinnedNew { pinned: u8, big: bool },
    /// `copy_from_pinned_async` into the buffer, when the lengths match.
    PinnedUpload { slot: u8, pinned: u8, stream: u8 },
    /// `copy_to_pinned_async` from the buffer, when the lengths match.
    PinnedDownload { slot: u8, pinned: u8, stream: u8 },
    /// Reads the pinned buffer through `as_slice`.
    PinnedRead { pinned: u8 },
    /// Writes the pinned buffer through `as_mut_slice`.
    PinnedWrite { pinned: u8, value: u32 },
    /// Drops the pinned buffer.
    PinnedDrop { pinned: u8 },
    /// Launches a built-in kernel on a stream: `fill_u32` of the whole view (`part` 0) or a
    /// half (1, 2) of `dst` with `value`, or (`add`) `add_u32` of `src` into `dst` over their
    /// common prefix.
    Launch { add: bool, dst: u8, src: u8, stream: u8, part: u8, value: u32 },
    /// Captures on a stream, into a graph slot (dropping what it held), copies between the
    /// buffer and the pinned buffer when their lengths match: `kind` 0 a device-to-host copy,
    /// 1 a host-to-device copy, 2 a memset of the buffer then a device-to-host copy; then
    /// instantiates the graph.
    Capture { graph: u8, slot: u8, pinned: u8, stream: u8, kind: u8, value: u32 },
    /// `GraphExec::launch` on a stream (the graph holds its device buffer by itself).
    GraphLaunch { graph: u8, stream: u8 },
    /// Takes a guard of the graph's pinned buffer (`as_slice`, or with `write` `as_mut_slice`),
    /// launches the graph while it is held (a refusal is what the crate promises), and drops it.
    GraphHold { graph: u8, stream: u8, write: bool },
    /// Drops the executable graph and its graph.
    GraphDrop { graph: u8 },
    /// Maps new physical memory (one granule) at the start of a reserved range (unmapping
    /// what was mapped there) and grants the device access.
    VmmMap { vmm: u8 },
    /// `memset_d32_async` of the whole mapping through `Mapping::view_mut` on a stream.
    VmmMemset { vmm: u8, stream: u8, value: u32 },
    /// `copy_from_device_async` of the buffer's elements into the mapping (`to_mapping`) or of
    /// the mapping's first elements into the buffer, on a stream.
    VmmCopy { vmm: u8, slot: u8, stream: u8, to_mapping: bool },
    /// Drops the mapping (it unmaps).
    VmmDrop { vmm: u8 },
    /// An NCCL collective of one rank, outside any group, on a stream: `kind` 0 all-reduce of
    /// `src` into `dst`, 1 all-reduce of `dst` in place, 2 broadcast, 3 reduce, 4 all-gather,
    /// 5 reduce-scatter (over the common prefix of the two buffers).
    Collective { kind: u8, dst: u8, src: u8, stream: u8 },
    /// An NCCL group of one rank on a stream (with `nested`, the calls inside an inner group
    /// too): `kind` 0 sends `src` to this rank and receives it into `dst`, 1 all-reduces `src`
    /// into `dst`, 2 all-reduces `dst` in place; then, before the group ends (and so before
    /// NCCL queues the calls), drops the buffer `drop` names (0 none, 1 `dst`, 2 `src`) and
    /// takes a new zeroed one of its length on its own stream into the slot, which the pool
    /// may hand out at the same address.
    NcclGroup { kind: u8, dst: u8, src: u8, stream: u8, nested: bool, drop: u8 },
}

/// A program: each step with the thread (0 or 1) that runs it when no buffer decides.
pub type Program = Vec<(u8, Step)>;

pub const SLOTS: usize = 4;
pub const PINNED: usize = 2;
pub const STREAMS: usize = 3;
pub const EVENTS: usize = 2;
pub const GRAPHS: usize = 2;
pub const VMMS: usize = 2;

/// A random program of 8 to 32 steps.
pub fn generate(seed: u64) -> Program {
    let mut rng = Rng::new(seed);
    let len = 8 + rng.below(25);
    (0..len).map(|_| (rng.below(2) as u8, random_step(&mut rng))).collect()
}

fn random_step(rng: &mut Rng) -> Step {
    let mut pick = |n: usize| rng.below(n) as u8;
    let (slot, stream, pinned, event) = (pick(SLOTS), pick(STREAMS), pick(PINNED), pick(EVENTS));
    let (flag, other, value) = (pick(2) == 1, pick(SLOTS), u32::from(pick(250)) + 1);
    let (graph, vmm) = (pick(GRAPHS), pick(VMMS));
    match pick(143) {
        0..15 => Step::Alloc { slot, stream, big: flag, zeroed: pick(2) == 1 },
        15..23 => Step::Drop { slot },
        23..26 => Step::Upload { slot, value },
        26..29 => Step::Download { slot },
        29..43 => Step::Memset { slot, stream, part: pick(3), value },
        43..51 => Step::Copy { dst: slot, src: other, stream },
        51..57 => Step::Record { event, stream },
        57..63 => Step::Wait { stream, event },
        63..65 => Step::EventSync { event },
        65..70 => Step::Sync { stream },
        70..74 => Step::SetStream { slot, stream },
        74..78 => Step::Move { slot },
        78..82 => Step::PinnedNew { pinned, big: flag },
        82..87 => Step::PinnedUpload { slot, pinned, stream },
        87..92 => Step::PinnedDownload { slot, pinned, stream },
        92..95 => Step::PinnedRead { pinned },
        95..98 => Step::PinnedWrite { pinned, value },
        98..100 => Step::PinnedDrop { pinned },
        100..108 => Step::Launch { add: flag, dst: slot, src: other, stream, part: pick(3), value },
        108..113 => Step::Capture { graph, slot, pinned, stream, kind: pick(3), value },
        113..118 => Step::GraphLaunch { graph, stream },
        118..122 => Step::GraphHold { graph, stream, write: flag },
        122 => Step::GraphDrop { graph },
        123..126 => Step::VmmMap { vmm },
        126..129 => Step::VmmMemset { vmm, stream, value },
        129..132 => Step::VmmCopy { vmm, slot, stream, to_mapping: flag },
        132 => Step::VmmDrop { vmm },
        133..138 => Step::Collective { kind: pick(6), dst: slot, src: other, stream },
        _ => Step::NcclGroup { kind: pick(3), dst: slot, src: other, stream, nested: flag, drop: pick(3) },
    }
}

/// Whether [`StreamOrdering::Implicit`](cuhost::StreamOrdering) orders the device work of
/// `step` across streams: everything but copies that touch pinned host memory (their tracker
/// orders them with the host, not with each other) and capture and graph steps (a capture
/// cannot wait for work outside it).
pub fn implicitly_ordered(step: &Step) -> bool {
    !matches!(
        step,
        Step::PinnedUpload { .. }
            | Step::PinnedDownload { .. }
            | Step::Capture { .. }
            | Step::GraphLaunch { .. }
            | Step::GraphHold { .. }
    )
}

/// The smallest program found by deleting steps (runs of them first, then one at a time)
/// for which `fails` still holds.
pub fn shrink(mut program: Program, mut fails: impl FnMut(&Program) -> bool) -> Program {
    let mut chunk = program.len() / 2;
    while chunk > 0 {
        let mut start = 0;
        while start + chunk <= program.len() {
            let mut candidate = program.clone();
            candidate.drain(start..start + chunk);
            if fails(&candidate) {
                program = candidate;
            } else {
                start += 1;
            }
        }
        chunk /= 2;
    }
    program
}

/// The program as Rust source, to paste into a regression test.
pub fn as_source(program: &Program) -> String {
    let steps: Vec<String> = program.iter().map(|(t, s)| format!("    ({t}, Step::{s:?}),")).collect();
    format!("&[\n{}\n]", steps.join("\n"))
}

#[test]
fn shrinking_keeps_what_makes_the_program_fail() {
    let program = generate(7);
    let marker = program[program.len() / 2];
    let small = shrink(program, |p| p.contains(&marker));
    assert_eq!(small, vec![marker]);
}
