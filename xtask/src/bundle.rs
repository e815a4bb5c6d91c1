//! Packing test and benchmark binaries for a GPU host that has no Rust toolchain.
//!
//! `gpu-bundle` writes `.gpu/`: a `cargo nextest archive` of the GPU suite, the `cargo-nextest`
//! binary, the examples (packed; `run` and `sanitize` unpack them into `.gpu/examples`), `run`
//! (the suite, from the repository root), `sanitize` (each test binary under
//! compute-sanitizer), and the checking driver (`libchecked_cuda_driver.so`) with `run-checked`
//! (the suite under the stream-rule checker).
//! `bench` writes `.bench/`: release builds of the benchmark binaries and `run`.

use std::path::{Path, PathBuf};
use std::process::Command;

const GPU_RUN: &str = r#"#!/bin/sh
# Runs the GPU test suite from this bundle. Usage (from the repository root):
#   CUDA_TEST_REQUIRE_GPU=1 .gpu/run [nextest filter arguments]
# The examples travel packed (examples.tar.xz): they are unpacked into .gpu/examples first, for
# the sanitizer's test of them and for running them by hand. The tests that run a child under
# the checking driver find it through CUDA_TEST_CHECKING_DRIVER.
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
[ -d "$here/examples" ] || tar -xJf "$here/examples.tar.xz" -C "$here" || exit 2
CUDA_TEST_CHECKING_DRIVER="$here/libchecked_cuda_driver.so"
export CUDA_TEST_CHECKING_DRIVER
exec "$here/cargo-nextest" nextest run --profile gpu \
    --archive-file "$here/tests.tar.zst" --workspace-remap "$root" "$@"
"#;

const GPU_RUN_CHECKED: &str = r#"#!/bin/sh
# Runs the GPU test suite as `run` does, with every test process under the stream-rule checker:
# the checking driver of this bundle sits between the tests and the real libcuda.so.1 (another
# one with CUDA_CHECK_REAL_DRIVER=...). A test in which the checker reports (a)-(c) exits with
# status 86 and fails; its output holds the reports and, at the end, a summary per category.
# CUDA_CHECK_BACKTRACE=1 adds the Rust call stack of each site. Usage (from the repository root):
#   CUDA_TEST_REQUIRE_GPU=1 .gpu/run-checked [nextest filter arguments]
# An example or any program built on cuhost runs under the checker the same way:
#   CUDA_DRIVER_LIBRARY_PATH=$PWD/.gpu/libchecked_cuda_driver.so .gpu/examples/<name>
here=$(cd "$(dirname "$0")" && pwd)
CUDA_DRIVER_LIBRARY_PATH="$here/libchecked_cuda_driver.so"
export CUDA_DRIVER_LIBRARY_PATH
exec "$here/run" "$@"
"#;

const GPU_SANITIZE: &str = r#"#!/bin/bash
# Runs every test binary of this bundle under compute-sanitizer, one process per binary (the
# sanitizer is slow to start, so this beats one process per test). Usage, from the repository
# root:  .gpu/sanitize [memcheck|racecheck|initcheck|synccheck] [extra compute-sanitizer args]
# Memcheck also checks for leaks and reports memory errors only, not the API errors that the
# bad-input tests provoke on purpose. Tests that fault on purpose are skipped, and so are the
# test that reads the JIT's info log, which the sanitizer's instrumentation leaves empty, and the
# checkpoint test: under a tool the driver answers checkpoint queries with NOT_SUPPORTED; and the
# test of two kernels overlapping (programmatic dependent launch): the tools serialize kernels.
# Memcheck skips the three tests in which a pool keeps a block for good (its last event was
# recorded in a stream capture, so it is never known free): the leak check reports it.
# The four-GPU NCCL binary is not sanitized: its tests time their ranks against deadlines and
# kill one on purpose, which the tools' slowdown and their reports of killed processes break.
# Synccheck skips the soundness test that all-reduces 64 MiB on two GPUs in one group: NCCL's
# ring LL all-reduce kernel (NCCL 2.28) reports divergent barriers under synccheck, as the same
# all-reduce made from CuPy does, and the launch failure the tool then causes breaks the contexts
# of every later test in the binary.
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
[ -d "$here/examples" ] || tar -xJf "$here/examples.tar.xz" -C "$here" || exit 2
tool=${1:-memcheck}; shift
extra=()
tool_skips=()
[ "$tool" = memcheck ] && extra=(--leak-check full --report-api-errors no) && tool_skips=(--skip pinned_pool_keeps_a_block --skip memory_pool_keeps_a_block)
[ "$tool" = synccheck ] && tool_skips=(--skip nccl_group_all_reduce_into_buffers_dropped_inside_the_group)
command -v compute-sanitizer >/dev/null || export PATH=$PATH:/usr/local/cuda/bin
dir=$(mktemp -d)
"$here/cargo-nextest" nextest list --run-ignored all --archive-file "$here/tests.tar.zst"     --workspace-remap "$root" --extract-to "$dir" >/dev/null 2>&1 || { echo "cannot extract the archive"; exit 2; }
cd "$root/tests" || exit 2
# Binaries run side by side (the sanitizer is mostly host-bound), at most 8 at a time; the
# graph binary runs alone afterwards: with other processes on the GPU, memcheck reports an
# out-of-bounds access in its while-node conditional kernel about one run in four (at 86252fa
# as since), and the run then fails the tests after it; alone it is clean.
sanitize() {
    CUDA_TEST_REQUIRE_GPU=1 compute-sanitizer --tool "$tool" "${extra[@]}" "$@" \
        --target-processes all --error-exitcode 99 "$b" --test-threads 1 \
        --skip a_faulting_kernel --skip a_fault_resolves_every_pending_future_with_the_error \
        --skip jit_options_limit_registers_and_fill_the_info_log \
        --skip this_process_is_running_for_checkpoints \
        --skip programmatic_dependent_launch_overlaps_two_kernels "${tool_skips[@]}" > "$dir/$name.out" 2>&1
    echo $? > "$dir/$name.code"
}
names=()
alone=()
for b in $(find "$dir" -type f -path '*/deps/*' -perm -u+x ! -name '*.so' ! -name '*.d' | sort); do
    name=$(basename "$b" | sed 's/-[0-9a-f]*$//')
    case "$name" in fault|cuda_tests|sanitizer|nccl_cluster) continue ;; graph) alone+=("$b"); continue ;; esac
    names+=("$name")
    while [ "$(jobs -rp | wc -l)" -ge 8 ]; do wait -n; done
    sanitize "$@" &
done
wait
for b in "${alone[@]}"; do
    name=$(basename "$b" | sed 's/-[0-9a-f]*$//')
    names+=("$name")
    sanitize "$@"
done
status=0
for name in "${names[@]}"; do
    code=$(cat "$dir/$name.code")
    summary=$(grep -E '(ERROR|RACECHECK|LEAK) SUMMARY' "$dir/$name.out" | tail -1)
    tests=$(grep -E '^test result' "$dir/$name.out" | tail -1)
    printf '%-12s exit=%-3s %s | %s\n' "$name" "$code" "$summary" "$tests"
    if [ "$code" -ne 0 ]; then
        status=1
        grep -E '^test .*FAILED|^---- ' "$dir/$name.out" | head -20
        grep -E '^=========' "$dir/$name.out" | head -40
    fi
done
rm -rf "$dir"
exit $status
"#;

const BENCH_RUN: &str = r#"#!/bin/sh
# Runs every benchmark in this bundle; pass names to run only those.
here=$(cd "$(dirname "$0")" && pwd)
status=0
for b in "$here"/bin/*; do
    name=$(basename "$b")
    if [ $# -gt 0 ]; then
        case " $* " in *" $name "*) ;; *) continue ;; esac
    fi
    echo "== $name"
    "$b" --bench || status=1
done
exit $status
"#;

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cmd:?} failed:\n{}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn write_script(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Executables of the given kind (`test`, `bench`, `example`) that a cargo build reported.
pub(crate) fn executables(json: &str, kind: &str) -> Vec<PathBuf> {
    let kind_tag = format!("\"kind\":[\"{kind}\"]");
    json.lines()
        .filter(|l| l.contains("\"reason\":\"compiler-artifact\"") && l.contains(&kind_tag))
        .filter_map(|l| {
            let start = l.find("\"executable\":\"")? + "\"executable\":\"".len();
            let end = l[start..].find('"')? + start;
            Some(PathBuf::from(&l[start..end]))
        })
        .collect()
}

/// The path of an artifact file named `name` among those a cargo build reported.
pub(crate) fn artifact_file(json: &str, name: &str) -> Option<PathBuf> {
    let quoted_end = format!("{}{name}\"", std::path::MAIN_SEPARATOR);
    json.lines().filter(|l| l.contains("\"reason\":\"compiler-artifact\"")).find_map(|l| {
        let end = l.find(&quoted_end)? + quoted_end.len() - 1;
        let start = l[..end].rfind('"')? + 1;
        Some(PathBuf::from(&l[start..end]))
    })
}

fn copy_into(files: &[PathBuf], dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for f in files {
        let name = f.file_name().ok_or_else(|| format!("{} has no file name", f.display()))?;
        std::fs::copy(f, dir.join(name)).map_err(|e| format!("{}: {e}", f.display()))?;
    }
    Ok(())
}

fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// `cargo xtask gpu-bundle`.
pub fn gpu_bundle(root: &Path) -> Result<(), String> {
    let out = root.join(".gpu");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).map_err(|e| e.to_string())?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    run(Command::new(&cargo)
        .current_dir(root)
        .args([
            "nextest",
            "archive",
            "--package",
            "cuda-tests",
            "--cargo-profile",
            "gpu",
            "--zstd-level",
            "19",
            "--archive-file",
        ])
        .arg(out.join("tests.tar.zst")))?;
    let nextest = run(Command::new("sh").args(["-c", "command -v cargo-nextest"]))?;
    let nextest = PathBuf::from(nextest.trim());
    std::fs::copy(&nextest, out.join("cargo-nextest")).map_err(|e| format!("{}: {e}", nextest.display()))?;
    // Its symbols are a fifth of it, and the bundle travels to the GPU host: drop them where
    // `strip` is installed.
    let _ = Command::new("strip").arg(out.join("cargo-nextest")).status();
    // The crate's examples, and those of the tests crate (the async service, whose executors
    // are dev-dependencies there only).
    for package in ["cuhost", "cuda-tests"] {
        let json = run(Command::new(&cargo).current_dir(root).args([
            "build",
            "--profile",
            "gpu",
            "--package",
            package,
            "--examples",
            "--message-format=json",
        ]))?;
        copy_into(&executables(&json, "example"), &out.join("examples"))?;
    }
    // The examples are most of a megabyte each and mostly the same code: packed with xz they
    // take a tenth of the room, which keeps the bundle under what travels to a GPU host.
    run(Command::new("tar")
        .arg("-cJf")
        .arg(out.join("examples.tar.xz"))
        .arg("-C")
        .arg(&out)
        .arg("examples"))?;
    std::fs::remove_dir_all(out.join("examples")).map_err(|e| e.to_string())?;
    pack_checking_driver(root, &out)?;
    write_script(&out.join("run"), GPU_RUN)?;
    write_script(&out.join("run-checked"), GPU_RUN_CHECKED)?;
    write_script(&out.join("sanitize"), GPU_SANITIZE)?;
    let size = dir_size(&out);
    println!("packed the GPU suite into {} ({:.1} MiB)", out.display(), size as f64 / 1048576.0);
    if size > 64 * 1024 * 1024 {
        return Err("the bundle is over 64 MiB; it will not travel".into());
    }
    Ok(())
}

/// Builds the checking driver (release, a few hundred KiB once stripped) into `out`.
fn pack_checking_driver(root: &Path, out: &Path) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let json = run(Command::new(&cargo).current_dir(root).args([
        "build",
        "--release",
        "--package",
        "checked-cuda-driver",
        "--lib",
        "--message-format=json",
    ]))?;
    let name = format!("{}checked_cuda_driver{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX);
    let built = artifact_file(&json, &name).ok_or_else(|| format!("cargo built no {name}"))?;
    let packed = out.join(&name);
    std::fs::copy(&built, &packed).map_err(|e| format!("{}: {e}", built.display()))?;
    let _ = Command::new("strip").arg(&packed).status();
    Ok(())
}

/// `cargo xtask bench`.
pub fn bench_bundle(root: &Path) -> Result<(), String> {
    let out = root.join(".bench");
    let _ = std::fs::remove_dir_all(&out);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let json = run(Command::new(&cargo).current_dir(root).args([
        "bench",
        "--package",
        "cuda-tests",
        "--no-run",
        "--message-format=json",
    ]))?;
    let bins = executables(&json, "bench");
    copy_into(&bins, &out.join("bin"))?;
    // Cargo names the copies with a hash suffix; strip it so `run <name>` works.
    for b in &bins {
        let Some(name) = b.file_name().map(|n| n.to_string_lossy().into_owned()) else { continue };
        let short = match name.rfind('-') {
            Some(i) if name[i + 1..].chars().all(|c| c.is_ascii_hexdigit()) => &name[..i],
            _ => continue,
        };
        let from = out.join("bin").join(&name);
        std::fs::rename(&from, out.join("bin").join(short)).map_err(|e| e.to_string())?;
    }
    write_script(&out.join("run"), BENCH_RUN)?;
    println!(
        "packed {} benchmark(s) into {}; on a GPU host run `.bench/run` from the repository root",
        bins.len(),
        out.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_is_found_among_the_artifact_files() {
        let json = concat!(
            r#"{"reason":"compiler-artifact","target":{"kind":["cdylib","rlib"],"name":"sim_cuda_driver"},"#,
            r#""filenames":["/t/release/libsim_cuda_driver.so","/t/release/libsim_cuda_driver.rlib"],"executable":null}"#,
            "\n",
            r#"{"reason":"build-finished","success":true}"#,
        );
        assert_eq!(
            artifact_file(json, "libsim_cuda_driver.so"),
            Some(PathBuf::from("/t/release/libsim_cuda_driver.so"))
        );
        assert_eq!(artifact_file(json, "libother.so"), None);
    }

    #[test]
    fn executables_are_picked_by_kind() {
        let json = concat!(
            r#"{"reason":"compiler-artifact","target":{"kind":["bench"]},"executable":"/t/release/deps/pool-1a2b"}"#,
            "\n",
            r#"{"reason":"compiler-artifact","target":{"kind":["lib"]},"executable":null}"#,
            "\n",
            r#"{"reason":"compiler-artifact","target":{"kind":["example"]},"executable":"/t/gpu/examples/saxpy"}"#,
            "\n",
            r#"{"reason":"build-finished","success":true}"#,
        );
        assert_eq!(executables(json, "bench"), [PathBuf::from("/t/release/deps/pool-1a2b")]);
        assert_eq!(executables(json, "example"), [PathBuf::from("/t/gpu/examples/saxpy")]);
        assert!(executables(json, "test").is_empty());
    }
}
