//! The NVTX tool protocol against a recording tool library built in this workspace
//! (`nvtx-sys/test-tool`). Initialisation happens once per process, so every scenario runs in
//! a child process of this binary with its own environment.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::field_reassign_with_default, clippy::type_complexity)]

mod attributes;
mod calls;
mod failures;

use libtest_mimic::{Arguments, Failed, Trial};
use std::path::PathBuf;
use std::process::{Command, ExitCode};

/// The result of a scenario, run in the child.
pub type Outcome = Result<(), String>;

/// Fails the scenario with a message unless `a == b`.
#[macro_export]
macro_rules! check_eq {
    ($a:expr, $b:expr $(,)?) => {{
        let (a, b) = (&$a, &$b);
        if a != b {
            return Err(format!("{} = {:?}, expected {:?} (line {})", stringify!($a), a, b, line!()));
        }
    }};
}

/// Fails the scenario with a message unless the condition holds.
#[macro_export]
macro_rules! check {
    ($c:expr, $($msg:tt)+) => {{
        if !$c {
            return Err(format!("{} (line {}): {}", stringify!($c), line!(), format!($($msg)+)));
        }
    }};
}

/// What a scenario's child process gets as `NVTX_INJECTION64_PATH`.
enum Tool {
    None,
    Recording(&'static str),
    Path(&'static str),
}

struct Scenario {
    name: &'static str,
    tool: Tool,
    run: fn() -> Outcome,
}

const SCENARIOS: &[Scenario] = &[
    Scenario { name: "defaults_without_a_tool", tool: Tool::None, run: failures::defaults_without_a_tool },
    Scenario { name: "every_module_reaches_the_tool", tool: Tool::Recording(""), run: calls::every_module },
    Scenario {
        name: "attributes_with_every_payload_and_message_type",
        tool: Tool::Recording(""),
        run: attributes::every_payload_and_message_type,
    },
    Scenario {
        name: "range_ids_are_64_bit",
        tool: Tool::Recording(""),
        run: attributes::range_ids_are_64_bit,
    },
    Scenario {
        name: "eight_threads_race_the_first_call",
        tool: Tool::Recording("slow"),
        run: failures::eight_threads_race_the_first_call,
    },
    Scenario {
        name: "tool_whose_init_returns_0",
        tool: Tool::Recording("fail"),
        run: failures::tool_whose_init_returns_0,
    },
    Scenario {
        name: "path_that_does_not_exist",
        tool: Tool::Path("/nonexistent/libnvtx-tool-that-is-not-there.so"),
        run: failures::path_that_does_not_exist,
    },
    Scenario {
        name: "library_without_the_entry_point",
        tool: Tool::Path("libm.so.6"),
        run: failures::library_without_the_entry_point,
    },
];

const CHILD_VARIABLE: &str = "NVTX_SYS_TEST_SCENARIO";

/// The recording tool: built next to this binary because it is a dev-dependency.
pub fn tool_path() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().expect("test binary directory").to_path_buf();
    let name = if cfg!(windows) { "nvtx_test_tool.dll" } else { "libnvtx_test_tool.so" };
    let direct = dir.join(name);
    if direct.exists() { direct } else { dir.join("deps").join(name) }
}

/// Everything the tool has logged so far, one line per call.
pub fn tool_log() -> Vec<String> {
    // SAFETY: the tool is already loaded by the NVTX loader; loading it again only takes a
    // reference, and the function has the signature the tool defines.
    unsafe {
        let lib = libloading::Library::new(tool_path()).expect("load the tool");
        let read: libloading::Symbol<unsafe extern "C" fn(*mut u8, usize) -> usize> =
            lib.get(b"nvtx_test_tool_read_log\0").expect("nvtx_test_tool_read_log");
        let len = read(std::ptr::null_mut(), 0);
        let mut buf = vec![0u8; len];
        let n = read(buf.as_mut_ptr(), buf.len());
        buf.truncate(n);
        String::from_utf8_lossy(&buf).lines().map(str::to_string).collect()
    }
}

/// How many times the tool's `InitializeInjectionNvtx2` ran.
pub fn tool_init_count() -> u32 {
    // SAFETY: as in `tool_log`.
    unsafe {
        let lib = libloading::Library::new(tool_path()).expect("load the tool");
        let count: libloading::Symbol<unsafe extern "C" fn() -> u32> =
            lib.get(b"nvtx_test_tool_init_count\0").expect("nvtx_test_tool_init_count");
        count()
    }
}

/// The log without the lines the tool writes during initialisation.
pub fn calls_logged() -> Vec<String> {
    tool_log().into_iter().filter(|l| !l.starts_with("init:") && !l.starts_with("module ")).collect()
}

/// A NUL-terminated `wchar_t` (32-bit on Linux) string.
pub fn wide(s: &str) -> Vec<cuhost_nvtx_sys::wchar_t> {
    s.chars().map(|c| c as cuhost_nvtx_sys::wchar_t).chain(std::iter::once(0)).collect()
}

fn run_in_child(scenario: &Scenario) -> Result<(), Failed> {
    let mut cmd = Command::new(std::env::current_exe().map_err(|e| e.to_string())?);
    cmd.env(CHILD_VARIABLE, scenario.name).env_remove("NVTX_TEST_TOOL_MODE");
    match scenario.tool {
        Tool::None => {
            cmd.env_remove("NVTX_INJECTION64_PATH");
        }
        Tool::Recording(mode) => {
            let path = tool_path();
            if !path.exists() {
                return Err(format!("the test tool was not built at {}", path.display()).into());
            }
            cmd.env("NVTX_INJECTION64_PATH", path).env("NVTX_TEST_TOOL_MODE", mode);
        }
        Tool::Path(p) => {
            cmd.env("NVTX_INJECTION64_PATH", p);
        }
    }
    let out = cmd.output().map_err(|e| format!("cannot run the child: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "child exited with {}:\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
        .into())
    }
}

fn main() -> ExitCode {
    if let Ok(name) = std::env::var(CHILD_VARIABLE) {
        let Some(scenario) = SCENARIOS.iter().find(|s| s.name == name) else {
            eprintln!("no scenario {name}");
            return ExitCode::FAILURE;
        };
        return match (scenario.run)() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        };
    }
    let args = Arguments::from_args();
    let trials = SCENARIOS.iter().map(|s| Trial::test(s.name, move || run_in_child(s))).collect();
    libtest_mimic::run(&args, trials).exit_code()
}
