//! `cargo xtask <command>`: the project's maintenance tasks.
//!
//! * `bindgen [--check] [--cuda-root DIR] [--nccl-root DIR]`: regenerate the `-sys` crates, or
//!   check that what is committed is what the generator writes.
//! * `surface [--cuda-root DIR] [--nccl-root DIR]`: per crate, functions the headers declare
//!   against functions the crate exposes.
//! * `doc-audit`: every public function of `cuda-core` documents its safety contract, its
//!   errors and the NVIDIA section of the C function it calls (see [`docaudit`]).
//! * `gpu-bundle`: pack the GPU test suite into `.gpu/` for a host without a Rust toolchain.
//! * `bench`: pack the benchmarks into `.bench/` (run there with `.bench/run`).

mod abi;
mod bindgen;
mod bundle;
mod cmacros;
mod docaudit;
mod docgroups;
mod headers;
mod runtime12;
mod surface;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
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

struct Options {
    check: bool,
    cuda_root: Option<PathBuf>,
    nccl_root: Option<PathBuf>,
}

fn options(args: &[String]) -> Result<Options, String> {
    let mut o = Options { check: false, cuda_root: None, nccl_root: None };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--check" => o.check = true,
            "--cuda-root" => o.cuda_root = Some(it.next().ok_or("--cuda-root needs a directory")?.into()),
            "--nccl-root" => o.nccl_root = Some(it.next().ok_or("--nccl-root needs a directory")?.into()),
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(o)
}

fn run(args: &[String]) -> Result<(), String> {
    let root = workspace_root();
    let Some((cmd, rest)) = args.split_first() else {
        return Err(
            "usage: cargo xtask <bindgen [--check] | surface | doc-audit | gpu-bundle | bench>".into()
        );
    };
    match cmd.as_str() {
        "bindgen" => {
            let o = options(rest)?;
            let headers = headers::locate(&root, o.cuda_root, o.nccl_root)?;
            let files = bindgen::generate(&headers)?;
            if o.check { check(&root, &files) } else { bindgen::write_all(&root, &files) }
        }
        "surface" => {
            let o = options(rest)?;
            let headers = headers::locate(&root, o.cuda_root, o.nccl_root)?;
            surface::report(&root, &headers)
        }
        "doc-audit" => docaudit::run(&root),
        "gpu-bundle" => bundle::gpu_bundle(&root),
        "bench" => bundle::bench_bundle(&root),
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
