//! The checking driver over the simulated driver as its "real" driver
//! (`CUDA_CHECK_REAL_DRIVER=libsim_cuda_driver.so`): `cuda-core` programs run in a child process
//! (this test binary again, told which program by `CHECKED_PROGRAM`), and the parent reads its
//! exit status and what the checker printed.
//!
//! A correct safe program makes no report and exits 0; one that queues unordered work through
//! raw driver calls is reported, with both sites, and exits with the checker's status.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use cuhost::driver_sys as sys;
use cuhost::{
    Context, Device, DeviceBuffer, Event, EventFlags, LaunchConfig, Module, PinnedBuffer, Stream, StreamFlags,
};
use std::path::PathBuf;
use std::process::{Command, Output};

const PROGRAM: &str = "CHECKED_PROGRAM";

/// The image of the simulator's built-in kernels.
const KERNELS: &str = ".entry fill_u32(.param .u64 dst, .param .u32 n, .param .u32 value)\n\
                       .entry add_u32(.param .u64 dst, .param .u64 src, .param .u32 n)\n";

/// A library `cargo test` built: in `deps/`, next to this binary, or one level up.
fn library(name: &str) -> PathBuf {
    let file = format!("{}{name}{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX);
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let modified = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let (in_deps, above) = (deps.join(&file), deps.parent().unwrap().join(&file));
    let path = if modified(&above) > modified(&in_deps) { above } else { in_deps };
    assert!(path.exists(), "{} missing: build the {name} crate", path.display());
    path
}

/// Runs test `name` of this binary in a child process under the checking driver.
fn run_under_checker(name: &str) -> (Output, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--test-threads", "1", "--nocapture"])
        .env(PROGRAM, "1")
        .env("CUDA_DRIVER_LIBRARY_PATH", library("checked_cuda_driver"))
        .env("CUDA_CHECK_REAL_DRIVER", library("sim_cuda_driver"))
        .env("CUDA_CHECK_BACKTRACE", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stderr)
}

fn in_child() -> bool {
    std::env::var_os(PROGRAM).is_some()
}

fn streams(ctx: &Context) -> (Stream, Stream) {
    let s = || Stream::new(ctx, StreamFlags::NON_BLOCKING).unwrap();
    (s(), s())
}

/// Safe calls only: buffers used across streams, a block reused by the pool and written on
/// another stream, a kernel, pinned copies read on the host, a captured graph.
fn correct_program() {
    let ctx = Context::primary(&Device::get(0).unwrap()).unwrap();
    let (s0, s1) = streams(&ctx);
    let module = Module::from_ptx(&ctx, KERNELS).unwrap();
    let fill = module.function("fill_u32").unwrap();
    let done = Event::new(&ctx, EventFlags::DISABLE_TIMING).unwrap();
    for round in 0..3u32 {
        let a = DeviceBuffer::<u32>::zeroed(&s0, 256).unwrap();
        drop(a);
        let mut b = DeviceBuffer::<u32>::new(&s0, 256).unwrap();
        b.view_mut().slice_mut(..).unwrap().memset_d32_async(round, &s1).unwrap();
        let n = 256u32;
        let config = LaunchConfig::for_elements(n, 128);
        let mut whole = b.view_mut();
        let view = whole.slice_mut(..).unwrap();
        // SAFETY: fill_u32 takes (u32*, u32, u32) and writes `n` elements: the view holds 256.
        unsafe { fill.launch(&s1, &config, (view, &n, &round)).unwrap() };
        // The program orders its own streams: the copy on s0 reads what s1 wrote.
        done.record(&s1).unwrap();
        s0.wait_event(&done).unwrap();
        let mut host = PinnedBuffer::<u32>::new(256).unwrap();
        b.copy_to_pinned_async(&mut host, &s0).unwrap();
        assert_eq!(host.as_slice().unwrap()[0], round);
        host.as_mut_slice().unwrap().fill(7);
        b.copy_from_pinned_async(&host, &s1).unwrap();
    }
    s0.synchronize().unwrap();
    s1.synchronize().unwrap();
}

/// A block of the pool written through its raw address on a second stream with nothing
/// ordering it, then given back and handed to a new owner that writes it on its own stream:
/// the earlier owner's work is not ordered before the next owner's (a).
fn unordered_program() {
    let ctx = Context::primary(&Device::get(0).unwrap()).unwrap();
    let (s0, s1) = streams(&ctx);
    let a = DeviceBuffer::<u32>::zeroed(&s0, 256).unwrap();
    // SAFETY: a memset of the buffer's own bytes; what it leaves unordered is the point.
    let status = unsafe { sys::cuMemsetD32Async(a.as_raw(), 5, 256, s1.as_raw()) };
    assert_eq!(status, sys::CUresult::CUDA_SUCCESS);
    drop(a);
    let mut b = DeviceBuffer::<u32>::new(&s0, 256).unwrap();
    b.view_mut().slice_mut(..).unwrap().memset_d32_async(1, &s0).unwrap();
    s0.synchronize().unwrap();
    s1.synchronize().unwrap();
}

/// Pinned memory given back to the driver while a copy that reads it may still run (b).
fn release_under_work_program() {
    let ctx = Context::primary(&Device::get(0).unwrap()).unwrap();
    let (s0, _) = streams(&ctx);
    let device = DeviceBuffer::<u8>::zeroed(&s0, 4096).unwrap();
    let mut host = std::ptr::null_mut();
    // SAFETY: raw allocation, copy and free, the free not waiting for the copy on purpose.
    unsafe {
        assert_eq!(sys::cuMemHostAlloc(&mut host, 4096, 0), sys::CUresult::CUDA_SUCCESS);
        assert_eq!(
            sys::cuMemcpyHtoDAsync(device.as_raw(), host, 4096, s0.as_raw()),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(sys::cuMemFreeHost(host), sys::CUresult::CUDA_SUCCESS);
    }
    s0.synchronize().unwrap();
}

/// The eager step of the `graph_decode` example, three times: a pinned input copied in on the
/// main stream, a kernel writing `h` there, a fork (one event, recorded again each step) to a
/// side stream whose kernel reads `h`, a join back, and a kernel on main reading the side's
/// result; every temporary dropped at the end of the step and taken again by the next.
fn fork_join_program() {
    let ctx = Context::primary(&Device::get(0).unwrap()).unwrap();
    let (main, side) = streams(&ctx);
    let module = Module::from_ptx(&ctx, KERNELS).unwrap();
    let add = module.function("add_u32").unwrap();
    let (fork, join) = (
        Event::new(&ctx, EventFlags::DISABLE_TIMING).unwrap(),
        Event::new(&ctx, EventFlags::DISABLE_TIMING).unwrap(),
    );
    let n = 256u32;
    let config = LaunchConfig::for_elements(n, 128);
    let mut input = PinnedBuffer::<u32>::new(256).unwrap();
    let mut output = PinnedBuffer::<u32>::new(256).unwrap();
    for step in 0..3u32 {
        input.as_mut_slice().unwrap().fill(step);
        let mut x = DeviceBuffer::<u32>::new(&main, 256).unwrap();
        x.copy_from_pinned_async(&input, &main).unwrap();
        let mut h = DeviceBuffer::<u32>::zeroed(&main, 256).unwrap();
        // SAFETY: add_u32 takes (u32*, const u32*, u32) and touches `n` elements of each.
        unsafe { add.launch(&main, &config, (&mut h, &x, &n)).unwrap() };
        drop(x);
        fork.record(&main).unwrap();
        side.wait_event(&fork).unwrap();
        let mut sq = DeviceBuffer::<u32>::zeroed(&side, 256).unwrap();
        // SAFETY: as above.
        unsafe { add.launch(&side, &config, (&mut sq, &h, &n)).unwrap() };
        let mut sc = DeviceBuffer::<u32>::zeroed(&main, 256).unwrap();
        // SAFETY: as above.
        unsafe { add.launch(&main, &config, (&mut sc, &h, &n)).unwrap() };
        join.record(&side).unwrap();
        main.wait_event(&join).unwrap();
        // SAFETY: as above.
        unsafe { add.launch(&main, &config, (&mut sc, &sq, &n)).unwrap() };
        sc.copy_to_pinned_async(&mut output, &main).unwrap();
        drop((h, sq, sc));
        assert_eq!(output.as_slice().unwrap()[0], 2 * step);
    }
}

/// A launch refused after its first argument, a shared borrow of `a`, was noted (its second is
/// graph memory outside its capture), then a kernel writing `a` on one stream and a copy
/// reading it on another with nothing ordering them: a race of the program's own, which the
/// checker must see. Were the refused launch's "read only" left for the next launch, the write
/// would count as a read, and the race would go unseen.
fn refused_launch_then_race_program() {
    let ctx = Context::primary(&Device::get(0).unwrap()).unwrap();
    let (s0, s1) = streams(&ctx);
    let (s2, s3) = streams(&ctx);
    let module = Module::from_ptx(&ctx, KERNELS).unwrap();
    let (add, fill) = (module.function("add_u32").unwrap(), module.function("fill_u32").unwrap());
    let n = 256u32;
    let config = LaunchConfig::for_elements(n, 128);
    let mut a = DeviceBuffer::<u32>::zeroed(&s0, 256).unwrap();
    s0.synchronize().unwrap();
    let capture = s3.begin_capture(cuhost::graph::CaptureMode::ThreadLocal).unwrap();
    let mut graph_memory = DeviceBuffer::<u32>::zeroed(&s3, 256).unwrap();
    let graph = capture.end().unwrap();
    // SAFETY: refused before the driver is called (the second argument has no memory here).
    let refused = unsafe { add.launch(&s1, &config, (&a, &mut graph_memory, &n)) };
    assert!(refused.is_err(), "a launch with graph memory outside its capture was made");
    // SAFETY: fill_u32 takes (u32*, u32, u32) and writes `n` elements: `a` holds 256.
    unsafe { fill.launch(&s1, &config, (&mut a, &n, &7u32)).unwrap() };
    let mut b = DeviceBuffer::<u32>::zeroed(&s2, 256).unwrap();
    b.view_mut().copy_from_device_async(&a.view(), &s2).unwrap();
    for s in [&s0, &s1, &s2] {
        s.synchronize().unwrap();
    }
    drop((graph_memory, graph));
}

#[test]
fn a_launch_refused_after_noting_an_argument_hides_no_later_write() {
    if in_child() {
        return refused_launch_then_race_program();
    }
    let (out, stderr) = run_under_checker("a_launch_refused_after_noting_an_argument_hides_no_later_write");
    assert!(out.status.success(), "{:?}\n{stderr}", out.status);
    let races = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("cuda-check:"))
        .filter(|l| l.contains("(d) race in the program"))
        .find_map(|l| l.split_whitespace().next().and_then(|n| n.parse::<u64>().ok()));
    assert!(
        races.is_some_and(|r| r > 0),
        "the write on one stream and the read on another were not seen:\n{stderr}"
    );
}

#[test]
fn a_fork_and_join_with_one_event_each_step_is_no_race() {
    if in_child() {
        return fork_join_program();
    }
    let (out, stderr) = run_under_checker("a_fork_and_join_with_one_event_each_step_is_no_race");
    assert!(out.status.success(), "{:?}\n{stderr}", out.status);
    assert!(stderr.contains("      0  (d)"), "the fork and join order the streams:\n{stderr}");
}

#[test]
fn a_correct_safe_program_makes_no_report() {
    if in_child() {
        return correct_program();
    }
    let (out, stderr) = run_under_checker("a_correct_safe_program_makes_no_report");
    assert!(out.status.success(), "{:?}\n{stderr}", out.status);
    assert!(stderr.contains("driver calls checked"), "the summary is printed at exit:\n{stderr}");
    for line in stderr.lines().filter(|l| l.contains(") ") && l.starts_with("cuda-check:   ")) {
        assert!(line.trim_start_matches("cuda-check:").trim_start().starts_with("0 "), "{line}\n{stderr}");
    }
    assert!(stderr.contains("      0  (d)"), "nor a race of its own:\n{stderr}");
    assert!(!stderr.contains("unmodelled"), "everything the program did is modelled:\n{stderr}");
}

#[test]
fn unordered_work_of_an_earlier_owner_is_reported_and_fails_the_process() {
    if in_child() {
        return unordered_program();
    }
    let (out, stderr) =
        run_under_checker("unordered_work_of_an_earlier_owner_is_reported_and_fails_the_process");
    assert_eq!(out.status.code(), Some(checked_cuda_driver::EXIT_STATUS), "{stderr}");
    assert!(stderr.contains("(a) earlier owner's work not ordered before the next owner's"), "{stderr}");
    assert!(stderr.contains("(cuMemsetD32Async)"), "both sites are named:\n{stderr}");
    assert!(stderr.contains("unordered_program"), "with the program's call stack:\n{stderr}");
}

#[test]
fn a_release_under_a_copy_is_reported_and_fails_the_process() {
    if in_child() {
        return release_under_work_program();
    }
    let (out, stderr) = run_under_checker("a_release_under_a_copy_is_reported_and_fails_the_process");
    assert_eq!(out.status.code(), Some(checked_cuda_driver::EXIT_STATUS), "{stderr}");
    assert!(stderr.contains("(b) memory given back while work that used it may run"), "{stderr}");
    assert!(stderr.contains("(cuMemFreeHost)") && stderr.contains("(cuMemcpyHtoDAsync)"), "{stderr}");
}
