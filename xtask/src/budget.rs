//! `cargo xtask budget`: the instructions the hot allocation paths execute per call, counted by
//! callgrind against the simulated driver, and checked against budgets.
//!
//! Timed benchmarks need a GPU and move with the machine's load; instruction counts need
//! neither. In the steady state `DeviceBuffer::new` + drop, and the pools' own allocate +
//! deallocate, make no driver call (each request is served from the pool's cache), so the
//! simulated `libcuda` of `tests/sim-cuda-driver` stands in for the driver and what is counted
//! is the crate's own work: the same count for the same sources, compiler, C library and CPU
//! family, on any machine and under any load.
//!
//! The probe (`tests/budget-probe`, built with the benchmarks' profile, `bench`) runs one side
//! of a pair per process: `budget-probe <side>` warms the side up (1,000 pairs: the driver's
//! functions resolved, the pool's block allocated), then runs 20,000 pairs inside
//! `budget_counted_loop`, a function of its own (`#[inline(never)]`), and checks that the pool
//! held the same bytes before and after that loop (it took nothing from the driver in it); and
//! the count is refused if callgrind saw the counted code run in the simulated driver's library
//! (a driver call).
//! callgrind runs with `--collect-atstart=no --toggle-collect=*budget_counted_loop*`: it counts
//! from that function's entry to its return and nothing else, so loading the library, creating
//! the context and the stream, the first allocation from the driver, the warm-up and the exit
//! are all left out, and the count divided by the iterations is the cost of one pair (plus a
//! few instructions of the loop's entry spread over 20,000). This beats subtracting a
//! warm-up-only run: two processes' setups differ by a few hundred instructions (hash seeds,
//! the environment), which would have to cancel, and one count per side is half the runs. A
//! count of zero means callgrind did not find the function (renamed, or inlined after all) and
//! fails the check.
//!
//! The budgets ([`CHECKS`]):
//! * `DeviceBuffer::new` + drop of 1 MiB from the default pool, on one stream, against that
//!   pool's own `allocate` + `deallocate`: what a buffer adds over its allocator is bookkeeping
//!   that must stay small. The goal is 1.05 (the wall-clock ratio the GPU benchmark reaches);
//!   in instructions the buffer cost 500 against the pool's 418 (1.20) when this budget was
//!   set, and costs about 444 against 370 (1.20) now that the pool's steady state is cheaper
//!   and stream capture is part of the rule (allocate and drop each load one atomic: is a
//!   capture under way anywhere?), so the budget holds that (1.22) until the buffer's release
//!   path is reworked to meet the goal, which then lowers it.
//! * `PinnedBuffer::new_uninit` + drop against the default pinned pool's own pair, and a
//!   `MemoryPool`'s allocate + deallocate alone (in instructions): budgets about a tenth above
//!   what the code cost when they were set, to catch regressions. A change that makes these
//!   paths cheaper should lower them; one that must make them dearer says why when it raises
//!   them. A compiler or C library upgrade can move the absolute count by a few percent; the
//!   ratios compare two sides of the same build and move less.

use crate::buildcost::total_of;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Pairs counted per side (after the probe's own uncounted warm-up).
const ITERATIONS: u64 = 20_000;
/// The function callgrind collects in (see the probe).
const COUNTED: &str = "*budget_counted_loop*";

/// What a budget bounds.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Bound {
    /// Ours over the reference, per pair.
    Ratio(f64),
    /// Instructions per pair of ours.
    Instructions(f64),
}

/// One checked pair: the probe's side for ours, the side it is compared with, the budget.
struct Check {
    name: &'static str,
    ours: &'static str,
    reference: Option<&'static str>,
    bound: Bound,
}

const CHECKS: [Check; 3] = [
    Check {
        name: "DeviceBuffer::new+drop / default pool's pair",
        ours: "buffer",
        reference: Some("pool"),
        // 1.214 (449 against 370) with the single release; 1.255 (462 against 368) once
        // `Error::InvalidArgument` carried a typed reason: no added work on the path (it builds no
        // error), but the error's code around it moved the registers and the stack frame; 1.215
        // (447 against 368) once the pool's hooked free took the allocation's fields apart, so
        // that the drop no longer stores the allocation to the stack for a call it never makes.
        bound: Bound::Ratio(1.22),
    },
    Check {
        name: "PinnedBuffer::new_uninit+drop / pinned pool's pair",
        ours: "pinned-buffer",
        reference: Some("pinned-pool"),
        // 2.48 when set (464 against 187 instructions); 1.49 (281 against 189) once the copy
        // tracker's state and the chunks' trackers were made on first use.
        bound: Bound::Ratio(1.56),
    },
    Check {
        name: "MemoryPool allocate+deallocate",
        ours: "memory-pool",
        reference: None,
        // 422 when set; 372 once the pool's own steady-state path was trimmed.
        bound: Bound::Instructions(390.0),
    },
];

/// One checked pair, measured.
#[derive(Debug, PartialEq)]
struct Outcome {
    ours: f64,
    reference: Option<f64>,
    /// What the bound is compared with: the ratio, or ours.
    value: f64,
    pass: bool,
}

fn outcome(bound: Bound, ours: f64, reference: Option<f64>) -> Outcome {
    let value = match (bound, reference) {
        (Bound::Ratio(_), Some(r)) if r > 0.0 => ours / r,
        (Bound::Ratio(_), _) => f64::NAN,
        (Bound::Instructions(_), _) => ours,
    };
    let limit = match bound {
        Bound::Ratio(b) | Bound::Instructions(b) => b,
    };
    // NaN (no reference count) fails.
    Outcome { ours, reference, value, pass: value <= limit && ours > 0.0 }
}

/// `cargo xtask budget`.
pub fn run(root: &Path) -> Result<(), String> {
    if Command::new("valgrind").arg("--version").output().is_err() {
        return Err("valgrind is not installed (Debian: apt-get install valgrind)".into());
    }
    let (probe, driver) = build(root)?;
    let out_dir = root.join("target/budget");
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let mut counted = Vec::<(&str, f64)>::new();
    let mut per_pair = |side: &'static str| -> Result<f64, String> {
        if let Some(&(_, n)) = counted.iter().find(|(s, _)| *s == side) {
            return Ok(n);
        }
        let n = count(&probe, &driver, side, &out_dir.join(format!("callgrind.{side}")))?;
        counted.push((side, n));
        Ok(n)
    };
    println!(
        "instructions per pair (callgrind, {ITERATIONS} pairs of 1 MiB after an uncounted warm-up, against the simulated driver):"
    );
    println!("  {:<52} {:>8} {:>10} {:>7} {:>8}  result", "pair", "ours", "reference", "ratio", "budget");
    let mut missed = Vec::new();
    for check in &CHECKS {
        let ours = per_pair(check.ours)?;
        let reference = check.reference.map(&mut per_pair).transpose()?;
        let o = outcome(check.bound, ours, reference);
        println!("  {}", row(check, &o));
        if !o.pass {
            missed.push(check.name);
        }
    }
    if missed.is_empty() {
        println!("all budgets met");
        Ok(())
    } else {
        Err(format!("over budget: {}", missed.join("; ")))
    }
}

/// One line of the table.
fn row(check: &Check, o: &Outcome) -> String {
    let reference = o.reference.map_or_else(|| "-".to_string(), |r| format!("{r:.1}"));
    let (ratio, budget) = match check.bound {
        Bound::Ratio(b) => (format!("{:.3}", o.value), format!("<= {b:.2}")),
        Bound::Instructions(b) => ("-".to_string(), format!("<= {b:.0}")),
    };
    let result = if o.pass { "pass" } else { "FAIL" };
    format!("{:<52} {:>8.1} {reference:>10} {ratio:>7} {budget:>8}  {result}", check.name, o.ours)
}

/// Builds the probe and the simulated driver with the benchmarks' profile; their paths.
fn build(root: &Path) -> Result<(PathBuf, PathBuf), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(root).args([
        "build",
        "--quiet",
        "--profile",
        "bench",
        "--package",
        "budget-probe",
        "--package",
        "sim-cuda-driver",
        "--lib",
        "--bins",
        "--message-format=json",
    ]);
    let out = cmd.output().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cmd:?} failed:\n{}", String::from_utf8_lossy(&out.stderr)));
    }
    let json = String::from_utf8_lossy(&out.stdout);
    let probe = crate::bundle::executables(&json, "bin")
        .into_iter()
        .find(|p| p.file_stem().is_some_and(|s| s == "budget-probe"))
        .ok_or("cargo built no budget-probe binary")?;
    let library = format!("{}sim_cuda_driver{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX);
    let driver =
        crate::bundle::artifact_file(&json, &library).ok_or_else(|| format!("cargo built no {library}"))?;
    Ok((probe, driver))
}

/// Instructions per pair of one side, counted by callgrind in the probe's counted loop.
fn count(probe: &Path, driver: &Path, side: &str, out: &Path) -> Result<f64, String> {
    let _ = std::fs::remove_file(out);
    let mut cmd = Command::new("valgrind");
    cmd.args(["--tool=callgrind", "--quiet", "--collect-atstart=no"])
        .arg(format!("--toggle-collect={COUNTED}"))
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(probe)
        .arg(side)
        .arg(ITERATIONS.to_string())
        .env("CUDA_DRIVER_LIBRARY_PATH", driver)
        // The simulated driver offers the checking hooks; NVIDIA's driver, whose hot paths
        // the budgets are about, does not.
        .env("SIM_CUDA_CHECK_HOOKS", "0");
    let run = cmd.output().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if !run.status.success() {
        return Err(format!("{cmd:?} failed ({}):\n{}", run.status, String::from_utf8_lossy(&run.stderr)));
    }
    let text = std::fs::read_to_string(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let total = total_of(&text).ok_or_else(|| format!("{}: no summary line", out.display()))?;
    let library = driver.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if objects(&text).any(|o| o.ends_with(&library)) {
        return Err(format!(
            "the counted loop of `{side}` called the driver ({library} is in {}): the pool was not in its steady state",
            out.display()
        ));
    }
    if total == 0 {
        return Err(format!(
            "callgrind counted nothing in {COUNTED} for `{side}`: the probe's counted loop was renamed or inlined"
        ));
    }
    Ok(total as f64 / ITERATIONS as f64)
}

/// The objects (executable, libraries) a callgrind output file names: those the counted code
/// ran in or called into. `ob=(3) /lib/libc.so.6` names one; `ob=(3)` refers to it again.
fn objects(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .filter_map(|l| l.strip_prefix("ob=").or_else(|| l.strip_prefix("cob=")))
        .filter_map(|rest| rest.split_once(')').map(|(_, name)| name.trim()))
        .filter(|name| !name.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ratio_passes_up_to_its_budget_and_fails_above_it() {
        let at = outcome(Bound::Ratio(1.05), 420.0, Some(400.0));
        assert!(at.pass);
        assert!((at.value - 1.05).abs() < 1e-12);
        assert!(!outcome(Bound::Ratio(1.05), 421.0, Some(400.0)).pass);
        // Without a reference count there is no ratio to pass.
        assert!(!outcome(Bound::Ratio(1.05), 400.0, Some(0.0)).pass);
        assert!(!outcome(Bound::Ratio(1.05), 400.0, None).pass);
    }

    #[test]
    fn an_instruction_budget_bounds_ours_and_zero_fails() {
        assert!(outcome(Bound::Instructions(465.0), 465.0, None).pass);
        assert!(!outcome(Bound::Instructions(465.0), 465.5, None).pass);
        assert!(!outcome(Bound::Instructions(465.0), 0.0, None).pass);
    }

    #[test]
    fn the_objects_named_are_read_once_each() {
        let text = "events: Ir\nob=(1) /lib/ld.so\nfn=(1) start\ncob=(2) /t/libsim_cuda_driver.so\ncfn=(2) cuInit\nob=(1)\n";
        assert_eq!(objects(text).collect::<Vec<_>>(), ["/lib/ld.so", "/t/libsim_cuda_driver.so"]);
        assert_eq!(objects("events: Ir\nob=(1)\n").count(), 0);
    }

    #[test]
    fn every_side_checked_is_one_the_probe_knows() {
        let probe = include_str!("../../tests/budget-probe/src/main.rs");
        for c in &CHECKS {
            for side in std::iter::once(c.ours).chain(c.reference) {
                assert!(probe.contains(&format!("\"{side}\"")), "the probe has no side {side}");
            }
        }
    }
}
