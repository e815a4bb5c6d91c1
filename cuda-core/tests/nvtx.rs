//! `cuhost::nvtx` against the recording NVTX tool built in this workspace
//! (`nvtx-sys/test-tool`). NVTX initialises once per process, so each test re-runs this
//! binary as a child with its own `NVTX_INJECTION64_PATH`.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use cuhost::Device;
use cuhost::nvtx::{self, Domain, EventAttributes, Injection};
use std::path::PathBuf;
use std::process::Command;

const CHILD: &str = "CUDA_CORE_NVTX_TEST_CHILD";

fn tool_path() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().to_path_buf();
    let direct = dir.join("libnvtx_test_tool.so");
    if direct.exists() { direct } else { dir.join("deps").join("libnvtx_test_tool.so") }
}

/// In the parent: re-runs `test` alone in a child, with or without the tool. In the child:
/// returns true, and the caller runs the body.
fn in_child(test: &str, with_tool: bool) -> bool {
    if std::env::var_os(CHILD).is_some() {
        return true;
    }
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test, "--test-threads=1", "--nocapture"]).env(CHILD, "1");
    if with_tool {
        assert!(tool_path().exists(), "the test tool was not built at {}", tool_path().display());
        cmd.env("NVTX_INJECTION64_PATH", tool_path()).env_remove("NVTX_TEST_TOOL_MODE");
    } else {
        cmd.env_remove("NVTX_INJECTION64_PATH");
    }
    let out = cmd.output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "child failed:\n{text}");
    assert!(text.contains("1 passed"), "the child ran no test:\n{text}");
    false
}

/// The tool's log of calls (initialisation lines left out).
fn calls() -> Vec<String> {
    // SAFETY: the tool is loaded already; this takes another reference to it.
    unsafe {
        let lib = libloading::Library::new(tool_path()).unwrap();
        let read: libloading::Symbol<unsafe extern "C" fn(*mut u8, usize) -> usize> =
            lib.get(b"nvtx_test_tool_read_log\0").unwrap();
        let mut buf = vec![0u8; read(std::ptr::null_mut(), 0)];
        let n = read(buf.as_mut_ptr(), buf.len());
        buf.truncate(n);
        String::from_utf8_lossy(&buf)
            .lines()
            .filter(|l| !l.starts_with("init:") && !l.starts_with("module "))
            .map(str::to_string)
            .collect()
    }
}

fn assert_calls(expected: &[String]) {
    let got = calls();
    for (i, (g, e)) in got.iter().zip(expected).enumerate() {
        assert_eq!(g, e, "call {i}");
    }
    assert_eq!(got.len(), expected.len(), "{got:#?}");
}

#[test]
fn ranges_marks_and_names_reach_the_tool() {
    if !in_child("ranges_marks_and_names_reach_the_tool", true) {
        return;
    }
    assert!(nvtx::injection().is_attached(), "{:?}", nvtx::injection());
    let mut want: Vec<String> = Vec::new();
    {
        let outer = nvtx::push_range("outer");
        want.push(r#"CORE.RangePushA "outer""#.into());
        let attributes = EventAttributes::new().message(c"inner").color(0xff76b900).category(2).payload(7u64);
        let inner = nvtx::push_range_with(&attributes);
        want.push(
            r#"CORE.RangePushEx v=3 size=48 category=2 color=argb:ff76b900 payload=u64:7 message=ascii:"inner""#
                .into(),
        );
        assert_eq!((outer.level(), inner.level()), (Some(0), Some(1)));
    }
    want.extend(["CORE.RangePop".to_string(), "CORE.RangePop".to_string()]);

    // A process range ends on another thread, with its full 64-bit id.
    let started = nvtx::start_range("process");
    assert_eq!(started.id(), 0xdead_beef_0000_0001);
    want.push(r#"CORE.RangeStartA "process" -> 0xdeadbeef00000001"#.into());
    std::thread::spawn(move || started.end()).join().unwrap();
    want.push("CORE.RangeEnd 0xdeadbeef00000001".into());

    nvtx::mark("m");
    want.push(r#"CORE.MarkA "m""#.into());
    nvtx::mark_with(&EventAttributes::new().rgb(1, 2, 3).payload(-1.5f64).payload(-3i32));
    want.push("CORE.MarkEx v=3 size=48 category=0 color=argb:ff010203 payload=i32:-3 message=none".into());
    for payload in [nvtx::Payload::U32(9), nvtx::Payload::I64(-9), nvtx::Payload::F32(0.5)] {
        nvtx::mark_with(&EventAttributes::new().payload(payload));
    }
    want.push("CORE.MarkEx v=3 size=48 category=0 color=none payload=u32:9 message=none".into());
    want.push("CORE.MarkEx v=3 size=48 category=0 color=none payload=i64:-9 message=none".into());
    want.push("CORE.MarkEx v=3 size=48 category=0 color=none payload=f32:0.5 message=none".into());
    let long = "long ".repeat(100);
    nvtx::mark(long.as_str());
    want.push(format!("CORE.MarkA {long:?}"));
    nvtx::name_category(3, "cat");
    want.push(r#"CORE.NameCategoryA 3 "cat""#.into());

    // The OS id NVTX gets is the kernel's thread id.
    let link = std::fs::read_link("/proc/thread-self").unwrap();
    let tid: u32 = link.file_name().unwrap().to_str().unwrap().parse().unwrap();
    assert_eq!(nvtx::current_os_thread_id(), Some(tid));
    nvtx::name_current_thread("worker");
    want.push(format!(r#"CORE.NameOsThreadA {tid} "worker""#));
    nvtx::name_device(&Device::from_raw(1), "second GPU");
    want.push(r#"CUDA.NameCuDeviceA 1 "second GPU""#.into());

    {
        let domain = Domain::new("lib");
        want.push(r#"CORE2.DomainCreateA "lib""#.into());
        domain.name_category(1, "io");
        want.push(r#"CORE2.DomainNameCategoryA domain "lib" 1 "io""#.into());
        let read = domain.register_string("read");
        want.push(r#"CORE2.DomainRegisterStringA domain "lib" "read""#.into());
        {
            let attributes = EventAttributes::new().registered_message(read).category(1).payload(4096u64);
            let range = domain.push_range_with(&attributes);
            assert_eq!(range.level(), Some(0));
        }
        want.push(
            r#"CORE2.DomainRangePushEx domain "lib" v=3 size=48 category=1 color=none payload=u64:4096 message=registered:string "read""#
                .into(),
        );
        want.push(r#"CORE2.DomainRangePop domain "lib""#.into());
        drop(domain.push_range("dr"));
        want.push(r#"CORE2.DomainRangePushEx domain "lib" v=3 size=48 category=0 color=none payload=none message=ascii:"dr""#.into());
        want.push(r#"CORE2.DomainRangePop domain "lib""#.into());
        domain.mark("dm");
        want.push(r#"CORE2.DomainMarkEx domain "lib" v=3 size=48 category=0 color=none payload=none message=ascii:"dm""#.into());
        let started = domain.start_range("ds");
        assert_eq!(started.id(), 0xdead_beef_0000_0002);
        want.push(
            r#"CORE2.DomainRangeStartEx domain "lib" v=3 size=48 category=0 color=none payload=none message=ascii:"ds" -> 0xdeadbeef00000002"#
                .into(),
        );
        std::thread::scope(|s| {
            s.spawn(move || started.end());
        });
        want.push(r#"CORE2.DomainRangeEnd domain "lib" 0xdeadbeef00000002"#.into());
    }
    want.push(r#"CORE2.DomainDestroy domain "lib""#.into());
    assert_calls(&want);
}

#[test]
fn without_a_tool_everything_is_a_no_op() {
    if !in_child("without_a_tool_everything_is_a_no_op", false) {
        return;
    }
    let range = nvtx::push_range("r");
    assert_eq!(range.level(), None);
    assert_eq!(nvtx::start_range("s").id(), 0);
    let domain = Domain::new("d");
    assert!(domain.as_raw().is_null());
    assert!(domain.register_string("x").as_raw().is_null());
    assert_eq!(domain.push_range("p").level(), None);
    assert_eq!(nvtx::injection(), &Injection::NoInjectionLibrary);
}

#[cfg(feature = "tracing")]
#[test]
fn tracing_spans_become_ranges() {
    use tracing_subscriber::prelude::*;
    if !in_child("tracing_spans_become_ranges", true) {
        return;
    }
    let subscriber = tracing_subscriber::registry().with(nvtx::tracing::NvtxLayer::new().with_events(true));
    tracing::subscriber::with_default(subscriber, || {
        let span = tracing::info_span!("forward", layer = 3);
        {
            let _entered = span.enter();
            tracing::info!(step = 1, "hello");
        }
        span.record("layer", 4);
        let _entered = span.enter();
    });
    assert_calls(&[
        r#"CORE.RangePushA "forward layer=3""#.into(),
        r#"CORE.MarkA "nvtx: hello step=1""#.into(),
        "CORE.RangePop".into(),
        r#"CORE.RangePushA "forward layer=3 layer=4""#.into(),
        "CORE.RangePop".into(),
    ]);
}
