//! Random safe programs of `cuda-core` calls against the simulated driver (and the simulated
//! NCCL), with the happens-before checker watching: no program may make a report in
//! categories (a)–(c).
//!
//! `SIM_CASES` (default 10,000) programs are run from seed `SIM_SEED` (default fixed, so a
//! run replays); a failing program is shrunk, printed as Rust source for a regression test,
//! and replayed with backtraces. Races in the programs themselves (category (d)) are counted
//! and printed, never failed on.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod harness;

use harness::program::{Program, Step, as_source, generate, implicitly_ordered, shrink};
use harness::{harness, run_program};

/// The simulator to one test alone (the harness's lock), reset, with device 0's primary
/// context; reset again when the test is done, before the lock is let go.
struct Alone {
    sim: &'static harness::sim::Sim,
    ctx: cuhost::Context,
    _guard: std::sync::MutexGuard<'static, Option<harness::Harness>>,
}

impl Alone {
    fn new() -> Alone {
        let _guard = harness();
        let sim = harness::sim::Sim::get();
        (sim.reset)(1);
        let ctx = cuhost::Context::primary(&cuhost::Device::get(0).unwrap()).unwrap();
        Alone { sim, ctx, _guard }
    }

    /// A new non-blocking stream of the context.
    fn stream(&self) -> cuhost::Stream {
        cuhost::Stream::new(&self.ctx, cuhost::StreamFlags::NON_BLOCKING).unwrap()
    }

    /// A communicator of one rank over device 0.
    fn communicator(&self) -> cuhost::nccl::Communicator {
        cuhost::nccl::Communicator::init_all(&[cuhost::Device::get(0).unwrap()]).unwrap().pop().unwrap()
    }
}

impl Drop for Alone {
    fn drop(&mut self) {
        (self.sim.reset)(1);
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[test]
fn random_safe_programs_make_no_report_in_a_b_or_c() {
    let cases = env_number("SIM_CASES", 10_000);
    let base = env_number("SIM_SEED", 0x5EED_0001);
    let mut guard = harness();
    let h = guard.as_mut().unwrap();
    let started = std::time::Instant::now();
    (harness::sim::Sim::get().set_backtraces)(i32::from(env_number("SIM_BACKTRACES", 0) != 0));
    let (mut races, mut racy_programs) = (0, 0);
    for case in 0..cases {
        let seed = base.wrapping_add(case);
        let program = generate(seed);
        let out = h.run(&program, seed, false);
        races += out.races;
        racy_programs += u64::from(out.races > 0);
        if !out.fails() {
            continue;
        }
        let small = shrink(program, |p| h.run(p, seed, false).fails());
        let traced = h.run_with_backtraces(&small, seed);
        panic!(
            "seed {seed}: a safe program made the checker report (shrunk, simulator seed {seed}):\n{}\n\
             {:?}\nerrors: {:?}\n{}",
            as_source(&small),
            traced.bugs,
            traced.errors,
            traced.text
        );
    }
    println!(
        "{cases} programs from seed {base:#x} in {:.1?}: {races} races of the programs themselves \
         (category (d)) in {racy_programs} programs",
        started.elapsed()
    );
    println!("unsupported driver functions looked up: {:?}", harness::sim::Sim::get().unsupported());
}

/// With the process ordering uses across streams itself (`StreamOrdering::Implicit`), random
/// programs of the steps it covers make no report at all: neither a hole in the rule nor a race
/// of their own (category (d)), which the same programs make without it.
#[test]
fn random_programs_ordered_implicitly_make_no_report_not_even_races_of_their_own() {
    let cases = env_number("SIM_CASES", 10_000) / 4;
    let base = env_number("SIM_SEED", 0x5EED_0001) ^ 0x0D3D;
    let mut guard = harness();
    let h = guard.as_mut().unwrap();
    let mut explicit_races = 0;
    for case in 0..cases {
        let seed = base.wrapping_add(case);
        let program: Program = generate(seed).into_iter().filter(|(_, s)| implicitly_ordered(s)).collect();
        let out = h.run_implicit(&program, seed);
        if out.fails() || out.races > 0 {
            let small = shrink(program, |p| {
                let o = h.run_implicit(p, seed);
                o.fails() || o.races > 0
            });
            let traced = h.run_implicit(&small, seed);
            panic!(
                "seed {seed}: a program ordered implicitly made a report (shrunk):\n{}\n{:?}\nerrors: {:?}\n{}",
                as_source(&small),
                traced.bugs,
                traced.errors,
                traced.text
            );
        }
        explicit_races += h.run(&program, seed, false).races;
    }
    println!("{cases} programs ordered implicitly: no report; without the ordering, {explicit_races} races");
    assert!(explicit_races > 0, "the programs never race without the ordering: the test shows nothing");
}

/// H1 as the random programs found it (shrunk): a block given back on stream 0 and taken
/// again there is written on stream 1 before the old owner's memset on stream 0 is ordered
/// before it.
#[test]
fn h1_a_reused_block_is_written_on_another_stream_after_its_old_owner() {
    const PROGRAM: &[(u8, Step)] = &[
        (0, Step::Alloc { slot: 0, stream: 0, big: false, zeroed: true }),
        (0, Step::Alloc { slot: 0, stream: 0, big: false, zeroed: false }),
        (0, Step::Memset { slot: 0, stream: 1, part: 0, value: 7 }),
    ];
    let out = run_program(PROGRAM);
    assert!(!out.fails(), "{out:?}");
}

/// The same hole through `set_stream`.
#[test]
fn h1_set_stream_orders_the_new_stream_after_the_old() {
    const PROGRAM: &[(u8, Step)] = &[
        (0, Step::Alloc { slot: 0, stream: 0, big: false, zeroed: true }),
        (0, Step::Alloc { slot: 0, stream: 0, big: false, zeroed: false }),
        (0, Step::SetStream { slot: 0, stream: 1 }),
        (0, Step::Memset { slot: 0, stream: 1, part: 0, value: 7 }),
    ];
    let out = run_program(PROGRAM);
    assert!(!out.fails(), "{out:?}");
}

/// The shape of H1, with the program ordering its streams itself as well: clean, and no race
/// of the program's own.
#[test]
fn h1_with_the_program_ordering_its_streams_too() {
    let program: Program = vec![
        (0, Step::Alloc { slot: 0, stream: 0, big: false, zeroed: true }),
        (0, Step::Alloc { slot: 0, stream: 0, big: false, zeroed: false }),
        (0, Step::Memset { slot: 0, stream: 1, part: 0, value: 7 }),
    ];
    let mut guard = harness();
    let h = guard.as_mut().unwrap();
    let fixed = h.run(&program, 1, true);
    assert!(!fixed.fails() && fixed.races == 0, "{fixed:?}");
}

/// Kernel launches are checked like other work: two launches that write one buffer from two
/// streams with nothing ordering them are a race of the program's own (category (d)), and
/// nothing in (a)–(c).
#[test]
fn unordered_launches_on_two_streams_are_the_programs_race() {
    let program: Program = vec![
        (0, Step::Alloc { slot: 0, stream: 0, big: false, zeroed: true }),
        (0, Step::Alloc { slot: 1, stream: 0, big: false, zeroed: true }),
        (0, Step::Launch { add: false, dst: 0, src: 0, stream: 1, part: 0, value: 3 }),
        (0, Step::Launch { add: true, dst: 1, src: 0, stream: 2, part: 0, value: 0 }),
    ];
    let mut guard = harness();
    let h = guard.as_mut().unwrap();
    let out = h.run(&program, 1, false);
    assert!(!out.fails(), "{out:?}");
    assert!(out.races > 0, "the two launches touch slot 0 unordered: {out:?}");
}

/// Capture: a buffer dropped while a graph that captured work on it lives is given back once
/// the graph is gone. Taken out, the block goes back to the pool at the drop, the next buffer
/// on the stream takes it, and the launch writes the new owner's memory (category (a)).
#[test]
fn capture_a_buffer_dropped_while_its_graph_lives_is_given_back_after_the_graph() {
    let program: Program = vec![
        (0, Step::Alloc { slot: 0, stream: 0, big: false, zeroed: true }),
        (0, Step::PinnedNew { pinned: 0, big: false }),
        (0, Step::Capture { graph: 0, slot: 0, pinned: 0, stream: 0, kind: 1, value: 0 }),
        (0, Step::Drop { slot: 0 }),
        (0, Step::Alloc { slot: 1, stream: 0, big: false, zeroed: true }),
        (0, Step::GraphLaunch { graph: 0, stream: 0 }),
        (0, Step::GraphDrop { graph: 0 }),
        (0, Step::Download { slot: 1 }),
    ];
    let mut guard = harness();
    let h = guard.as_mut().unwrap();
    let out = h.run(&program, 1, false);
    assert!(!out.fails(), "{out:?}");
}

/// Capture, pinned: a pinned buffer dropped while a graph that captured a copy into it lives
/// gives its memory back once the graph is gone (the random programs found it, shrunk). Taken
/// out, the new pinned buffer takes the same memory and the graph's launch writes it while the
/// host reads it through a guard (categories (a) and (c)).
#[test]
fn capture_a_pinned_buffer_dropped_while_its_graph_lives_is_given_back_after_the_graph() {
    const PROGRAM: &[(u8, Step)] = &[
        (1, Step::PinnedNew { pinned: 0, big: false }),
        (0, Step::Alloc { slot: 1, stream: 0, big: false, zeroed: true }),
        (1, Step::Capture { graph: 1, slot: 1, pinned: 0, stream: 0, kind: 0, value: 89 }),
        (1, Step::PinnedNew { pinned: 0, big: false }),
        (1, Step::GraphHold { graph: 1, stream: 0, write: false }),
    ];
    let out = run_program(PROGRAM);
    assert!(!out.fails(), "{out:?}");
}

/// Capture: the first captured use of a buffer waits, at each launch, for the work queued on
/// its own stream before (its earlier owner's included). Taken out, a launch on a third stream
/// writes the reused block while its old owner's memset may still run (category (a)).
#[test]
fn capture_a_launch_waits_for_the_work_queued_on_the_buffer_before_the_capture() {
    let program: Program = vec![
        (0, Step::Alloc { slot: 0, stream: 0, big: false, zeroed: true }),
        (0, Step::Alloc { slot: 0, stream: 0, big: false, zeroed: false }),
        (0, Step::PinnedNew { pinned: 0, big: false }),
        (0, Step::Capture { graph: 0, slot: 0, pinned: 0, stream: 1, kind: 1, value: 0 }),
        (0, Step::GraphLaunch { graph: 0, stream: 2 }),
        (0, Step::Capture { graph: 1, slot: 0, pinned: 0, stream: 0, kind: 2, value: 9 }),
        (0, Step::GraphLaunch { graph: 1, stream: 2 }),
    ];
    let mut guard = harness();
    let h = guard.as_mut().unwrap();
    let out = h.run(&program, 1, false);
    assert!(!out.fails(), "{out:?}");
}

/// H2: a guard of a pinned buffer held while a graph whose captured copy writes it (or, for a
/// write guard, reads it) is launched. The launch is refused; taken out, the copy's late write
/// lands under the guard, and the host access told before the guard drops is category (c).
#[test]
fn h2_a_graph_launch_is_refused_while_a_guard_of_its_pinned_buffer_is_held() {
    for (kind, write) in [(0, false), (1, true), (2, true)] {
        let program: Program = vec![
            (0, Step::Alloc { slot: 0, stream: 0, big: false, zeroed: true }),
            (0, Step::PinnedNew { pinned: 0, big: false }),
            (0, Step::Capture { graph: 0, slot: 0, pinned: 0, stream: 1, kind, value: 5 }),
            (1, Step::GraphHold { graph: 0, stream: 2, write }),
            (1, Step::GraphLaunch { graph: 0, stream: 2 }),
            (0, Step::PinnedRead { pinned: 0 }),
        ];
        let mut guard = harness();
        let h = guard.as_mut().unwrap();
        let out = h.run(&program, 1, false);
        assert!(!out.fails(), "{out:?}");
        assert_eq!(out.refused, 1, "kind {kind}: the launch under the guard is refused: {out:?}");
    }
}

/// F9: a mapping dropped while a memset queued through its view may still run. Dropping it
/// waits for the streams its views were used on; taken out, the unmap is a release under that
/// work (category (b)), and the memset lands in the memory mapped there next.
#[test]
fn f9_a_mapping_is_unmapped_after_the_work_queued_through_its_views() {
    const PROGRAM: &[(u8, Step)] = &[
        (0, Step::VmmMap { vmm: 0 }),
        (0, Step::VmmMemset { vmm: 0, stream: 1, value: 3 }),
        (1, Step::VmmDrop { vmm: 0 }),
        (1, Step::VmmMap { vmm: 0 }),
        (1, Step::VmmMemset { vmm: 0, stream: 2, value: 4 }),
    ];
    let out = run_program(PROGRAM);
    assert!(!out.fails(), "{out:?}");
}

/// F7: a buffer received into inside an NCCL group, dropped and replaced (the pool would hand
/// out the same block) before the group ends, that is before NCCL queues the receive. The
/// buffer is given back only once the group has queued its calls; taken out, the late receive
/// writes the new buffer's block, and the checker, which queues the group's calls as of the
/// owners of when they were made, reports it in category (a).
#[test]
fn f7_a_buffer_dropped_inside_an_nccl_group_goes_back_after_the_group_is_queued() {
    for (stream, nested, drop) in [(0, false, 1), (1, true, 1), (0, false, 2), (2, true, 2)] {
        let program = [
            (0, Step::Alloc { slot: 0, stream: 0, big: false, zeroed: true }),
            (0, Step::Alloc { slot: 1, stream: 0, big: false, zeroed: true }),
            (0, Step::NcclGroup { kind: 0, dst: 1, src: 0, stream, nested, drop }),
            (0, Step::Download { slot: 1 }),
        ];
        let out = run_program(&program);
        assert!(!out.fails(), "stream {stream}, nested {nested}, drop {drop}: {out:?}");
    }
}

/// The checker sees what the crate's fix of F7 prevents: raw NCCL calls, which tell no buffer
/// of the group, receive into a buffer that is then dropped and whose block the pool hands
/// out again before the group ends. The receive is queued after the new owner took the block:
/// category (a), although it is ordered after the new owner's memset on the same stream.
#[test]
fn raw_nccl_calls_into_a_block_reused_inside_the_group_are_reported() {
    use cuhost::cuhost_nccl_sys as nccl;
    use cuhost::{Context, Device, DeviceBuffer, Stream, StreamFlags};
    let guard = harness();
    let sim = harness::sim::Sim::get();
    let ctx = Context::primary(&Device::get(0).unwrap()).unwrap();
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING).unwrap();
    let comm = cuhost::nccl::Communicator::init_all(&[Device::get(0).unwrap()]).unwrap().pop().unwrap();
    for late in [false, true] {
        (sim.reset)(1);
        let source = DeviceBuffer::<u32>::from_slice(&stream, &[3; 256]).unwrap();
        let target = DeviceBuffer::<u32>::zeroed(&stream, 256).unwrap();
        let (s, r) = (source.as_raw() as usize as *mut std::ffi::c_void, target.as_raw());
        let raw = |f: unsafe fn() -> nccl::ncclResult_t| {
            // SAFETY: group calls take no arguments.
            assert_eq!(unsafe { f() }, nccl::ncclResult_t::ncclSuccess);
        };
        raw(nccl::ncclGroupStart);
        let (u32_type, st) = (nccl::ncclDataType_t::ncclUint32, stream.as_raw().cast());
        // SAFETY: live device memory of 256 elements each, a live communicator and stream; the
        // target is dropped before the group ends when `late`: what this test shows the
        // checker reporting.
        unsafe {
            assert_eq!(
                nccl::ncclSend(s, 256, u32_type, 0, comm.as_raw(), st),
                nccl::ncclResult_t::ncclSuccess
            );
            assert_eq!(
                nccl::ncclRecv(r as usize as *mut _, 256, u32_type, 0, comm.as_raw(), st),
                nccl::ncclResult_t::ncclSuccess
            );
        }
        let successor = if late {
            drop(target);
            let successor = DeviceBuffer::<u32>::zeroed(&stream, 256).unwrap();
            assert_eq!(successor.as_raw(), r, "the pool did not hand the block out again");
            Some(successor)
        } else {
            None
        };
        raw(nccl::ncclGroupEnd);
        stream.synchronize().unwrap();
        let (bugs, _) = sim.counts();
        assert_eq!(bugs, [u64::from(late), 0, 0], "late {late}: {}", sim.reports());
        if late {
            assert!(sim.reports().contains("had a new owner"), "{}", sim.reports());
            assert_eq!(successor.unwrap().to_vec().unwrap(), vec![3; 256], "the late receive landed");
        }
        drop(source);
    }
    (sim.reset)(1);
    drop(guard);
}

/// H1: on a non-blocking communicator NCCL may answer a group's end with `ncclInProgress` and
/// queue the calls later, in the background. The end waits until it has: a buffer the group
/// received into, dropped after the end, goes back after the receive. Taken out, the end
/// returns at once, the buffer's block goes to a new owner, and the receive, queued only when
/// the communicator is polled later, writes the new owner's memory (category (a)).
#[test]
fn a_group_end_answered_in_progress_returns_once_its_calls_are_queued() {
    use cuhost::DeviceBuffer;
    use cuhost::nccl::{Communicator, Config, ReduceOp, UniqueId, group};
    let alone = Alone::new();
    let (sim, stream) = (alone.sim, alone.stream());
    let config = Config::new().blocking(false);
    let comm = Communicator::init_rank(&alone.ctx, &UniqueId::new().unwrap(), 1, 0, &config).unwrap();
    assert!(!comm.is_blocking());
    (sim.nccl_in_progress)(1);
    let source = DeviceBuffer::<u32>::from_slice(&stream, &[3; 256]).unwrap();
    let mut target = DeviceBuffer::<u32>::zeroed(&stream, 256).unwrap();
    let block = target.as_raw();
    group(|| comm.all_reduce(&source, &mut target, ReduceOp::Sum, &stream)).unwrap();
    drop(target);
    let successor = DeviceBuffer::<u32>::zeroed(&stream, 256).unwrap();
    assert_eq!(successor.as_raw(), block, "the pool did not hand the block out again");
    // Whatever NCCL still had to queue, it queues now.
    comm.wait(std::time::Duration::from_secs(1)).unwrap();
    (sim.nccl_in_progress)(0);
    stream.synchronize().unwrap();
    assert_eq!(sim.counts().0, [0, 0, 0], "{}", sim.reports());
    assert_eq!(successor.to_vec().unwrap(), vec![0; 256], "the group's receive landed in the new owner");
    drop((source, successor, comm));
}

/// M2: the wait of a group's end for NCCL to queue the calls of a non-blocking communicator
/// ends at the communicator's time limit: an `Error::Timeout`, the communicator faulted, and
/// the buffers the group used kept (a leak, reported) rather than given back under calls NCCL
/// may still queue. Taken out, the end waits for as long as the peer is stuck (here: for
/// good; the test gives up after ten seconds).
#[test]
fn a_group_end_waits_for_a_stuck_communicator_until_its_time_limit() {
    use cuhost::nccl::{Communicator, Config, ReduceOp, UniqueId, group};
    use cuhost::{DeviceBuffer, Error};
    let alone = Alone::new();
    let (sim, ctx, stream) = (alone.sim, alone.ctx.clone(), alone.stream());
    let config = Config::new().blocking(false);
    let comm = Communicator::init_rank(&ctx, &UniqueId::new().unwrap(), 1, 0, &config).unwrap();
    assert_eq!(comm.timeout(), None);
    comm.set_timeout(Some(std::time::Duration::from_millis(50)));
    (sim.nccl_in_progress)(2);
    let (done, ended) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let source = DeviceBuffer::<u32>::from_slice(&stream, &[3; 256]).unwrap();
        let mut target = DeviceBuffer::<u32>::zeroed(&stream, 256).unwrap();
        let r = group(|| comm.all_reduce(&source, &mut target, ReduceOp::Sum, &stream));
        let faulted = comm.is_faulted();
        drop((source, target));
        let kept = ctx.take_deferred_errors().len();
        let _ = done.send((r, faulted, kept));
        drop(comm);
    });
    let got = ended.recv_timeout(std::time::Duration::from_secs(10));
    (sim.nccl_in_progress)(0);
    let (r, faulted, kept) = got.expect("the group's end did not give up at the time limit");
    assert!(matches!(r, Err(Error::Timeout { operation: "Group::end", .. })), "{r:?}");
    assert!(faulted, "the communicator is not faulted");
    assert!(kept >= 1, "the buffers the group used were given back under its calls");
}

/// H2 (NCCL registrations): work queued through a registration's view on another stream follows the stream rule: it
/// waits for the buffer's own stream first, and the buffer's release waits for it. Taken out
/// (views with no owner to tell), the memset on the other stream runs before the buffer's
/// zeroing and after its release, and the block's next owner is written under it.
#[test]
fn work_through_a_registration_is_noted_on_its_buffer() {
    use cuhost::DeviceBuffer;
    let alone = Alone::new();
    let (sim, own, other, comm) = (alone.sim, alone.stream(), alone.stream(), alone.communicator());
    let mut buffer = DeviceBuffer::<u32>::zeroed(&own, 256).unwrap();
    {
        let mut registration = comm.register(&mut buffer).unwrap();
        registration.view_mut().memset_d32_async(7, &other).unwrap();
    }
    // Given back at once (nothing noted), the block goes to the next owner on the same stream.
    drop(buffer);
    let successor = DeviceBuffer::<u32>::zeroed(&own, 256).unwrap();
    own.synchronize().unwrap();
    other.synchronize().unwrap();
    assert_eq!(sim.counts().0, [0, 0, 0], "{}", sim.reports());
    assert_eq!(successor.to_vec().unwrap(), vec![0; 256], "the memset landed in the new owner");
    drop((successor, comm));
}

/// The simulated NCCL moves the bytes: a send received by the same rank in a group, and the
/// collectives of one rank, which copy their send memory.
#[test]
fn the_simulated_nccl_delivers_sends_and_collectives() {
    use cuhost::DeviceBuffer;
    use cuhost::nccl::{ReduceOp, group};
    let alone = Alone::new();
    let (sim, s0, s1, comm) = (alone.sim, alone.stream(), alone.stream(), alone.communicator());
    assert_eq!((comm.count().unwrap(), comm.rank().unwrap()), (1, 0));
    assert_eq!(cuhost::nccl::version().unwrap().to_string(), "2.28.0");
    let source = DeviceBuffer::<u32>::from_slice(&s0, &[5; 64]).unwrap();
    let mut received = DeviceBuffer::<u32>::zeroed(&s1, 64).unwrap();
    group(|| {
        comm.send(&source, 0, &s0)?;
        comm.recv(&mut received, 0, &s1)
    })
    .unwrap();
    assert_eq!(received.to_vec().unwrap(), vec![5; 64]);
    let mut reduced = DeviceBuffer::<u32>::zeroed(&s0, 64).unwrap();
    comm.all_reduce(&source, &mut reduced, ReduceOp::Sum, &s0).unwrap();
    let mut gathered = DeviceBuffer::<u32>::zeroed(&s0, 64).unwrap();
    comm.all_gather(&reduced, &mut gathered, &s0).unwrap();
    assert_eq!(gathered.to_vec().unwrap(), vec![5; 64]);
    assert_eq!(sim.counts(), ([0, 0, 0], 0), "{}", sim.reports());
    drop((source, received, reduced, gathered));
}
