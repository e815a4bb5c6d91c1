//! `cargo xtask build-cost`: how many instructions rustc executes to type-check the crates on
//! the build's critical path (`cargo check` of cuhost-driver-sys, whose metadata every dependent
//! waits for, and of cuhost with its default features and without them).
//!
//! Wall-clock build times on a small shared machine move by a tenth from one run to the next;
//! instruction counts (valgrind's callgrind) are the same for the same sources, compiler and
//! flags, so a change that makes the crates cheaper to compile shows as a smaller number. They
//! count the front end only (type checking, borrow checking, metadata): code generation runs on
//! several threads and is left to timed clean builds.
//!
//! cargo runs this binary as its `RUSTC_WRAPPER` (see [`wrap`]): the compilation of the crate
//! measured runs under callgrind, every other one runs as it would.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Set, for the wrapper, to the crate name whose compilation is counted.
const CRATE_VAR: &str = "XTASK_BUILD_COST_CRATE";
/// Set, for the wrapper, to the callgrind output file.
const OUT_VAR: &str = "XTASK_BUILD_COST_OUT";

/// What is measured: a package, its crate name, and the `cargo check` options.
const TARGETS: [(&str, &str, &[&str]); 3] = [
    ("cuhost-driver-sys", "cuhost_driver_sys", &[]),
    ("cuhost", "cuhost", &["--no-default-features"]),
    ("cuhost", "cuhost", &[]),
];

/// `cargo xtask build-cost`.
pub fn run(root: &Path) -> Result<(), String> {
    if Command::new("valgrind").arg("--version").output().is_err() {
        return Err("valgrind is not installed (Debian: apt-get install valgrind)".into());
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let me = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let target = root.join("target/build-cost");
    let out = target.join("callgrind.out");
    println!("instructions rustc executes for `cargo check` (callgrind; the same for the same sources):");
    for (package, krate, options) in TARGETS {
        // The dependencies first, uncounted; then the package alone, from scratch.
        let check = |wrapped: bool| -> Result<(), String> {
            let mut c = Command::new(&cargo);
            c.current_dir(root).args(["check", "--quiet", "--package", package]).args(options);
            c.env("CARGO_TARGET_DIR", &target);
            if wrapped {
                c.env("RUSTC_WRAPPER", &me).env(CRATE_VAR, krate).env(OUT_VAR, &out);
            }
            status(&mut c)
        };
        check(false)?;
        status(
            Command::new(&cargo)
                .current_dir(root)
                .args(["clean", "--quiet", "--package", package])
                .env("CARGO_TARGET_DIR", &target),
        )?;
        let _ = std::fs::remove_file(&out);
        check(true)?;
        let count = read_total(&out)?;
        let what = if options.is_empty() { String::new() } else { format!(" {}", options.join(" ")) };
        println!("  {package}{what}: {:.3} G", count as f64 / 1e9);
    }
    Ok(())
}

fn status(cmd: &mut Command) -> Result<(), String> {
    let s = cmd.status().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if s.success() { Ok(()) } else { Err(format!("{cmd:?} failed ({s})")) }
}

/// The total instruction count of a callgrind output file.
fn read_total(path: &Path) -> Result<u64, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    total_of(&text).ok_or_else(|| format!("{}: no summary line", path.display()))
}

pub(crate) fn total_of(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("summary:").or_else(|| l.strip_prefix("totals:")))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// When cargo runs this binary as its `RUSTC_WRAPPER` for `build-cost`: runs the compiler
/// (`args[0]`) with the rest of `args`, under callgrind when it compiles the crate measured.
/// `None` when this process is not such a wrapper.
pub fn wrap(args: &[String]) -> Option<i32> {
    let measured = std::env::var(CRATE_VAR).ok()?;
    let out = PathBuf::from(std::env::var_os(OUT_VAR)?);
    let (rustc, rest) = args.split_first()?;
    let crate_name = rest.windows(2).find(|w| w[0] == "--crate-name").map(|w| w[1].as_str());
    let mut cmd = if crate_name == Some(measured.as_str()) {
        let mut c = Command::new("valgrind");
        c.arg("--tool=callgrind").arg(format!("--callgrind-out-file={}", out.display())).arg("--quiet");
        c.arg(rustc);
        c
    } else {
        Command::new(rustc)
    };
    Some(cmd.args(rest).status().ok().and_then(|s| s.code()).unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_total_is_read_from_the_summary_line() {
        let text = "# callgrind format\nversion: 1\nevents: Ir\nsummary: 3050092379\n\nfn=main\n";
        assert_eq!(total_of(text), Some(3_050_092_379));
        assert_eq!(total_of("events: Ir\ntotals: 42\n"), Some(42));
        assert_eq!(total_of("events: Ir\n"), None);
    }
}
