//! The driver loader against a fake `libcuda`: missing file, missing symbol, driver too old,
//! concurrent first calls and the default-stream choice. Each scenario runs in its own process.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

fn fake_driver() -> PathBuf {
    let probe = PathBuf::from(env!("CARGO_BIN_EXE_loader-probe"));
    let dir = probe.parent().map(PathBuf::from).unwrap_or_default();
    let name = if cfg!(windows) { "fake_cuda_driver.dll" } else { "libfake_cuda_driver.so" };
    // `cargo test` rebuilds the copy in deps/; one next to the binaries may be left from an
    // earlier `cargo build`. The newer one is this build's.
    let modified = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let (direct, in_deps) = (dir.join(name), dir.join("deps").join(name));
    if modified(&direct) > modified(&in_deps) { direct } else { in_deps }
}

/// Runs the probe with a scenario and environment; returns its `key=value` lines.
fn probe(scenario: &str, env: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_loader-probe"));
    cmd.arg(scenario)
        .env_remove("CUDA_API_PER_THREAD_DEFAULT_STREAM")
        .env_remove("FAKE_CUDA_DRIVER_VERSION")
        .env_remove("FAKE_CUDA_RESOLVE_DELAY_MS")
        .env_remove("FAKE_NCCL_VERSION")
        .env("CUDA_DRIVER_LIBRARY_PATH", fake_driver())
        .env("NCCL_LIBRARY_PATH", fake_driver());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run the probe: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "probe {scenario} exited with {}: {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout.lines().filter_map(|l| l.split_once('=').map(|(k, v)| (k.to_string(), v.to_string()))).collect()
}

#[test]
fn the_fake_driver_was_built() {
    assert!(fake_driver().exists(), "{} missing", fake_driver().display());
}

#[test]
fn functions_resolve_once_and_work() {
    let r = probe("basic", &[]);
    assert_eq!(r["cuInit"], "CUDA_SUCCESS");
    assert_eq!(r["cuDeviceGetCount"], "CUDA_SUCCESS");
    assert_eq!(r["count"], "3");
    assert_eq!(r["again"], "CUDA_SUCCESS");
    assert_eq!(r["lookups.cuDeviceGetCount"], "1", "a resolved function must not be looked up again");
    assert_eq!(r["version"], "Ok(13000)");
}

#[test]
fn a_missing_library_is_a_status_and_a_reason() {
    let r = probe("no_library", &[("CUDA_DRIVER_LIBRARY_PATH", "/nonexistent/dir/libcuda.so.1")]);
    assert_eq!(r["cuInit"], "CUDA_ERROR_NOT_FOUND");
    assert_eq!(r["again"], "CUDA_ERROR_NOT_FOUND");
    assert_eq!(r["cuDeviceGetCount"], "CUDA_ERROR_NOT_FOUND");
    assert!(r["error.kind"].starts_with("LibraryNotFound"), "{}", r["error.kind"]);
    let message = &r["error.message"];
    assert!(message.contains("/nonexistent/dir/libcuda.so.1"), "{message}");
    assert!(message.contains("CUDA_DRIVER_LIBRARY_PATH"), "{message}");
    assert!(message.contains("install the NVIDIA driver"), "{message}");
    assert_eq!(&r["library_error"], message);
    assert_eq!(r["last"], "true");
}

#[test]
fn a_file_that_is_not_a_driver_is_refused() {
    // Any shared library that is not a CUDA driver will do; the C library is always there.
    let libc = if cfg!(target_os = "linux") { "libc.so.6" } else { return };
    let r = probe("no_library", &[("CUDA_DRIVER_LIBRARY_PATH", libc)]);
    assert_eq!(r["cuInit"], "CUDA_ERROR_NOT_FOUND");
    assert!(r["error.kind"].starts_with("Unusable"), "{}", r["error.kind"]);
    assert!(r["error.message"].contains("cuDriverGetVersion"), "{}", r["error.message"]);
}

#[test]
fn a_missing_symbol_is_not_found_and_named() {
    let r = probe("missing_symbol", &[]);
    assert_eq!(r["cuCheckpointProcessLock"], "CUDA_ERROR_NOT_FOUND");
    assert_eq!(r["again"], "CUDA_ERROR_NOT_FOUND");
    assert_eq!(r["lookups.cuCheckpointProcessLock"], "1", "a failed lookup must be remembered");
    assert!(r["error.kind"].starts_with("SymbolNotFound"), "{}", r["error.kind"]);
    assert!(r["error.message"].contains("cuCheckpointProcessLock"), "{}", r["error.message"]);
    assert_eq!(r["cuInit"], "CUDA_SUCCESS", "other functions keep working");
}

#[test]
fn a_driver_too_old_for_a_function_says_which_versions() {
    // 12.0 predates cuGetProcAddress_v2: the loader falls back to the 11.3 entry point.
    let r = probe("too_old", &[("FAKE_CUDA_DRIVER_VERSION", "12000")]);
    assert_eq!(r["cuInit"], "CUDA_SUCCESS");
    assert_eq!(r["cuCtxCreate"], "CUDA_ERROR_NOT_SUPPORTED");
    assert!(r["cuCtxCreate.kind"].contains("needed: 12050"), "{}", r["cuCtxCreate.kind"]);
    assert!(r["cuCtxCreate.kind"].contains("installed: 12000"), "{}", r["cuCtxCreate.kind"]);
    assert!(r["cuCtxCreate.message"].contains("12.5"), "{}", r["cuCtxCreate.message"]);
    assert!(r["cuCtxCreate.message"].contains("12.0"), "{}", r["cuCtxCreate.message"]);
}

#[test]
fn a_function_newer_than_the_driver_is_never_asked_for() {
    // Asked for cuCtxCreate at 12.5, a 12.4 driver would hand out its 11.4 ABI, whose
    // arguments differ: the loader refuses before asking.
    let r = probe("too_old", &[("FAKE_CUDA_DRIVER_VERSION", "12040")]);
    assert_eq!(r["cuCtxCreate"], "CUDA_ERROR_NOT_SUPPORTED");
    assert!(r["cuCtxCreate.kind"].contains("needed: 12050"), "{}", r["cuCtxCreate.kind"]);
    assert!(r["cuCtxCreate.kind"].contains("installed: 12040"), "{}", r["cuCtxCreate.kind"]);
    assert_eq!(r["lookups.cuCtxCreate"], "0");
    assert_eq!(r["cuCtxCreate_v3020"], "CUDA_SUCCESS", "the older ABI is reachable by its own name");
}

#[test]
fn version_not_sufficient_through_get_proc_address_v2() {
    let r = probe("too_old", &[("FAKE_CUDA_DRIVER_VERSION", "12080")]);
    assert_eq!(r["cuCtxCreate"], "CUDA_SUCCESS");
    assert_eq!(r["cuCtxSynchronize_v2"], "CUDA_ERROR_NOT_SUPPORTED");
    assert!(r["cuCtxSynchronize.kind"].contains("needed: 13000"), "{}", r["cuCtxSynchronize.kind"]);
    assert!(r["cuCtxSynchronize.kind"].contains("installed: 12080"), "{}", r["cuCtxSynchronize.kind"]);
}

#[test]
fn eight_threads_racing_the_first_call_resolve_once() {
    let r = probe("concurrent", &[("FAKE_CUDA_RESOLVE_DELAY_MS", "50")]);
    assert_eq!(r["threads"], "8");
    assert_eq!(r["ok"], "8");
    assert_eq!(r["lookups.cuDeviceGetCount"], "1");
}

#[test]
fn per_thread_default_stream_selects_the_ptds_variant() {
    let r = probe("per_thread", &[]);
    assert_eq!(r["set"], "Ok(())");
    assert_eq!(r["cuMemcpy"], "999", "the per-thread variant must be the one called");
    assert_eq!(r["set_again_legacy"], "true");
    assert_eq!(r["per_thread"], "true");
    let r = probe("legacy", &[]);
    assert_eq!(r["cuMemcpy"], "0");
    assert_eq!(r["set_per_thread_late"], "true", "the choice is fixed by the first resolution");
    let r = probe("legacy", &[("CUDA_API_PER_THREAD_DEFAULT_STREAM", "1")]);
    assert_eq!(r["cuMemcpy"], "999", "the environment variable selects the per-thread variant");
}

#[test]
fn an_nccl_function_newer_than_the_library_names_the_version_loaded() {
    let r = probe("nccl", &[]);
    assert_eq!(r["nccl_version"], "Ok(21803)");
    assert_eq!(r["ncclGetVersion"], "Some(\"ncclSuccess\") 21803");
    assert_eq!(r["ncclCommShrink"], "Some(\"ncclSystemError\")");
    let message = &r["ncclCommShrink.message"];
    assert!(
        message.starts_with("ncclCommShrink is not provided by libnccl.so.2 2.18.3 (loaded from "),
        "{message}"
    );
    let r = probe("nccl", &[("FAKE_NCCL_VERSION", "22809")]);
    assert!(r["ncclCommShrink.message"].contains("libnccl.so.2 2.28.9"), "{}", r["ncclCommShrink.message"]);
}
