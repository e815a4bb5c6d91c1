//! A correct program is clean under compute-sanitizer with its default flags plus leak
//! checking, as users run it on their own programs: the examples of the bundle (`.gpu/examples`,
//! or the directory `CUDA_EXAMPLES_DIR` names) run under `compute-sanitizer --leak-check full`
//! and the sanitizer must report no error, no API error included, and no leak.
//!
//! Ignored where compute-sanitizer or the example binaries are missing, and when this binary
//! itself runs under the sanitizer (`.gpu/sanitize`): the sanitizer does not nest.

use cuda_tests::{TestResult, ensure, gpu_needing};
use std::path::PathBuf;
use std::process::Command;

/// The examples checked: the README's first program, the smallest kernel launch, and a kernel
/// compiled from source by NVRTC.
const EXAMPLES: [&str; 3] = ["device_info", "saxpy", "nvrtc"];

fn sanitizer() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths).map(|p| p.join("compute-sanitizer")).find(|p| p.is_file())
    });
    on_path.or_else(|| Some(PathBuf::from("/usr/local/cuda/bin/compute-sanitizer")).filter(|p| p.is_file()))
}

fn examples_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CUDA_EXAMPLES_DIR") {
        return PathBuf::from(dir);
    }
    // Tests run from the `tests` package directory (cargo and nextest set the variable).
    let manifest =
        std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    manifest.join("../.gpu/examples")
}

fn requires() -> Result<(), String> {
    if std::env::var_os("CUDA_INJECTION64_PATH").is_some() {
        return Err("running under a CUDA tool already (compute-sanitizer does not nest)".into());
    }
    sanitizer().ok_or("compute-sanitizer is not installed")?;
    for name in EXAMPLES {
        let path = examples_dir().join(name);
        if !path.is_file() {
            return Err(format!("{} is missing (build the bundle: cargo xtask gpu-bundle)", path.display()));
        }
    }
    Ok(())
}

fn examples_are_clean_under_memcheck_with_leak_checking() -> TestResult {
    let tool = sanitizer().ok_or("compute-sanitizer is not installed")?;
    for name in EXAMPLES {
        let out = Command::new(&tool)
            .args(["--leak-check", "full", "--error-exitcode", "99"])
            .arg(examples_dir().join(name))
            .env_remove("CUDA_TEST_REQUIRE_GPU")
            // The examples run against the driver the sanitizer intercepts, not a checking
            // driver between them (`.gpu/run-checked`), whose probes of kernel parameters the
            // sanitizer would report as API errors.
            .env_remove("CUDA_DRIVER_LIBRARY_PATH")
            .output()?;
        let text =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let reports: Vec<&str> = text.lines().filter(|l| l.starts_with("=========")).collect();
        ensure!(
            out.status.success() && text.contains("ERROR SUMMARY: 0 errors"),
            "{name} under compute-sanitizer exited with {}:\n{}",
            out.status,
            reports.join("\n")
        );
        ensure!(
            !reports.iter().any(|l| l.contains("Program hit") || l.contains("Leaked")),
            "{name}: the sanitizer reported\n{}",
            reports.join("\n")
        );
    }
    Ok(())
}

fn main() {
    cuda_tests::run(&[gpu_needing(
        "examples_are_clean_under_memcheck_with_leak_checking",
        requires,
        examples_are_clean_under_memcheck_with_leak_checking,
    )]);
}
