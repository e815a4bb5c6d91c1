//! `cargo xtask <command>`: the project's maintenance tasks.
//!
//! * `bindgen [--check] [--cuda X.Y] [--nccl X.Y] [--cuda-root DIR] [--nccl-root DIR]`:
//!   regenerate the `-sys` crates from the `newest` wheels of `xtask/wheels.txt` and report what
//!   changed in the API surface, or check that what is committed is what the generator writes.
//!   `--cuda`/`--nccl` bump the pins to the newest wheels of those releases first.
//! * `surface [--strict] [--cuda-root DIR] [--nccl-root DIR]`: per crate, functions the headers
//!   declare against functions the crate exposes, the driver functions new since the oldest set,
//!   and which `cuda.h` functions `cuhost` wraps in safe API (the others need a reason in
//!   `xtask/unwrapped.txt`; `--strict` fails when one has none or a reason is stale).
//! * `compat`: `cuhost` compiles against bindings from the oldest and the newest header sets.
//! * `doc-audit`: every public function of `cuhost` documents its safety contract, its
//!   errors and the NVIDIA section of the C function it calls (see [`docaudit`]).
//! * `gpu-bundle`: pack the GPU test suite into `.gpu/` for a host without a Rust toolchain.
//! * `bench`: pack the benchmarks into `.bench/` (run there with `.bench/run`).
//! * `build-cost`: the instructions rustc executes to type-check cuhost-driver-sys and cuhost
//!   (with and without its default features), counted by callgrind: a build-time measure that
//!   does not move with the machine's load (see [`buildcost`]).
//! * `type-index [--check]`: the guide's index from each public type to the chapters that show
//!   it, `docs/src/type-index.md` (see [`typeindex`]).
//! * `budget`: the instructions `DeviceBuffer::new`+drop, `PinnedBuffer::new_uninit`+drop and a
//!   `MemoryPool`'s allocate+deallocate execute per call, counted by callgrind against the
//!   simulated driver and checked against budgets (the buffer within 1.05 times its pool's own
//!   calls); fails on a miss (see [`budget`]).

mod abi;
mod bindgen;
mod budget;
mod buildcost;
mod bundle;
mod changes;
mod cmacros;
mod compat;
mod derives;
mod docaudit;
mod docgroups;
mod headers;
mod initializers;
mod runtime12;
mod surface;
mod syntax;
mod typeindex;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `build-cost` runs this program as cargo's rustc wrapper.
    if let Some(code) = buildcost::wrap(&args) {
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn workspace_root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent().map(Path::to_path_buf).unwrap_or(here)
}

#[derive(Default)]
struct Options {
    check: bool,
    /// `surface`: fail on `cuda.h` functions with neither a safe wrapper nor a reason.
    strict: bool,
    cuda_root: Option<PathBuf>,
    nccl_root: Option<PathBuf>,
    /// A CUDA release (`13.5`) to bump the pins to.
    cuda_release: Option<String>,
    /// An NCCL release (`2.32`) to bump the pins to.
    nccl_release: Option<String>,
}

fn options(args: &[String]) -> Result<Options, String> {
    let mut o = Options::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--check" => o.check = true,
            "--strict" => o.strict = true,
            "--cuda-root" => o.cuda_root = Some(it.next().ok_or("--cuda-root needs a directory")?.into()),
            "--nccl-root" => o.nccl_root = Some(it.next().ok_or("--nccl-root needs a directory")?.into()),
            "--cuda" => o.cuda_release = Some(it.next().ok_or("--cuda needs a release, e.g. 13.5")?.clone()),
            "--nccl" => o.nccl_release = Some(it.next().ok_or("--nccl needs a release, e.g. 2.32")?.clone()),
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(o)
}

fn run(args: &[String]) -> Result<(), String> {
    let root = workspace_root();
    let Some((cmd, rest)) = args.split_first() else {
        return Err(
            "usage: cargo xtask <bindgen [--check] [--cuda X.Y] [--nccl X.Y] | surface [--strict] | compat | doc-audit | gpu-bundle | bench | build-cost | budget>".into()
        );
    };
    match cmd.as_str() {
        "bindgen" => {
            let o = options(rest)?;
            let mut pins = headers::read_pins(&root)?;
            let bump = o.cuda_release.is_some() || o.nccl_release.is_some();
            if bump {
                if o.check {
                    return Err(
                        "--check compares with the pinned headers; it takes no --cuda or --nccl".into()
                    );
                }
                let resolved =
                    headers::resolve_release(&root, o.cuda_release.as_deref(), o.nccl_release.as_deref())?;
                for w in &mut pins.newest {
                    if let Some(r) = resolved.iter().find(|r| r.name == w.name) {
                        w.version = r.version.clone();
                    }
                }
            }
            let local = o.cuda_root.is_some();
            let headers = headers::locate(&root, &pins.newest, &pins.cuda12, o.cuda_root, o.nccl_root)?;
            if !local {
                headers::link_current(&root, &pins.newest)?;
            }
            let files = bindgen::generate(&headers)?;
            if o.check {
                return check(&root, &files);
            }
            let report = changes::report(&root, &files);
            bindgen::write_all(&root, &files)?;
            if bump {
                let path = headers::pins_file(&root);
                let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                std::fs::write(&path, headers::replace_newest(&text, &pins.newest))
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                println!("pinned in {}:", path.display());
                for w in &pins.newest {
                    println!("  {} {}", w.name, w.version);
                }
            }
            let saved = root.join("target/bindgen-changes.txt");
            let _ = std::fs::write(&saved, &report);
            println!("what changed in the API surface (also in {}):\n{report}", saved.display());
            Ok(())
        }
        "surface" => {
            let o = options(rest)?;
            let pins = headers::read_pins(&root)?;
            let headers = headers::locate(&root, &pins.newest, &pins.cuda12, o.cuda_root, o.nccl_root)?;
            let oldest = headers::locate(&root, &pins.oldest, &pins.cuda12, None, None)?;
            surface::report(&root, &headers, &oldest, o.strict)
        }
        "compat" => compat::run(&root),
        "doc-audit" => docaudit::run(&root),
        "gpu-bundle" => bundle::gpu_bundle(&root),
        "bench" => bundle::bench_bundle(&root),
        "build-cost" => buildcost::run(&root),
        "budget" => budget::run(&root),
        "type-index" => typeindex::run(&root, rest.iter().any(|a| a == "--check")),
        other => Err(format!("unknown command {other}")),
    }
}

/// Regenerates into a scratch directory and compares with the committed files.
fn check(root: &Path, files: &[bindgen::GeneratedFile]) -> Result<(), String> {
    let scratch = root.join("target/bindgen-check");
    let _ = std::fs::remove_dir_all(&scratch);
    bindgen::write_all(&scratch, files)?;
    let mut differ = Vec::new();
    for f in files {
        let committed = std::fs::read_to_string(root.join(&f.path)).unwrap_or_default();
        if committed != f.text {
            differ.push(f.path.display().to_string());
        }
    }
    if differ.is_empty() {
        println!("bindings are up to date ({} files)", files.len());
        Ok(())
    } else {
        Err(format!(
            "generated bindings differ from the committed ones: {} (fresh output in {}); run `cargo xtask bindgen`",
            differ.join(", "),
            scratch.display()
        ))
    }
}
