//! Where the C headers come from: a local toolkit, or NVIDIA's pinned Python wheels.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The pinned wheels and what each provides.
pub const WHEELS: &[(&str, &str)] = &[
    ("nvidia-cuda-runtime", "13.0.96"),
    ("nvidia-cuda-profiler-api", "13.0.85"),
    ("nvidia-nvtx", "13.0.85"),
    ("nvidia-nccl-cu13", "2.28.9"),
    ("nvidia-cuda-runtime-cu12", "12.9.79"),
];

/// Include directories for the four header sets, and a line saying where they came from.
pub struct Headers {
    /// Holds cuda.h, cudaTypedefs.h, the interop headers, cuda_runtime_api.h, cuda_profiler_api.h.
    pub cuda: PathBuf,
    /// Holds nvtx3/.
    pub nvtx: PathBuf,
    /// Holds nccl.h.
    pub nccl: PathBuf,
    /// Holds the CUDA 12 runtime's cuda_runtime_api.h, against which the runtime crate finds the
    /// functions whose CUDA 13 ABI `libcudart.so.12` lacks.
    pub cuda12_runtime: PathBuf,
    /// Where the CUDA 12 runtime headers came from, for the generated file's header.
    pub origin_cuda12: String,
    /// Written at the top of generated files.
    pub origin_cuda: String,
    /// Written at the top of generated NCCL files.
    pub origin_nccl: String,
}

/// Finds the headers, downloading the pinned wheels into `target/cuda-headers` if needed.
pub fn locate(
    root: &Path,
    cuda_root: Option<PathBuf>,
    nccl_root: Option<PathBuf>,
) -> Result<Headers, String> {
    // The CUDA 12 runtime headers always come from their wheel.
    let wheel_include = Some(fetch_wheels(root)?);
    let (cuda, origin_cuda) = match (&cuda_root, &wheel_include) {
        (Some(r), _) => (r.join("include"), "a local CUDA toolkit (--cuda-root)".to_string()),
        (None, Some(w)) => (
            w.join("nvidia/cu13/include"),
            format!(
                "NVIDIA wheels nvidia-cuda-runtime=={}, nvidia-cuda-profiler-api=={}, nvidia-nvtx=={}",
                WHEELS[0].1, WHEELS[1].1, WHEELS[2].1
            ),
        ),
        (None, None) => return Err("no CUDA headers".into()),
    };
    let (nccl, origin_nccl) = match (&nccl_root, &wheel_include) {
        (Some(r), _) => (r.join("include"), "a local NCCL (--nccl-root)".to_string()),
        (None, Some(w)) => {
            (w.join("nvidia/nccl/include"), format!("NVIDIA wheel nvidia-nccl-cu13=={}", WHEELS[3].1))
        }
        (None, None) => return Err("no NCCL headers".into()),
    };
    let (cuda12_runtime, origin_cuda12) = match &wheel_include {
        Some(w) => (
            w.join("nvidia/cuda_runtime/include"),
            format!("NVIDIA wheel nvidia-cuda-runtime-cu12=={}", WHEELS[4].1),
        ),
        None => return Err("no CUDA 12 runtime headers".into()),
    };
    for (dir, file) in [
        (&cuda, "cuda.h"),
        (&cuda, "cuda_runtime_api.h"),
        (&nccl, "nccl.h"),
        (&cuda12_runtime, "cuda_runtime_api.h"),
    ] {
        if !dir.join(file).is_file() {
            return Err(format!("{} not found in {}", file, dir.display()));
        }
    }
    let nvtx = cuda.clone();
    if !nvtx.join("nvtx3/nvToolsExt.h").is_file() {
        return Err(format!("nvtx3/nvToolsExt.h not found in {}", nvtx.display()));
    }
    Ok(Headers { cuda, nvtx, nccl, cuda12_runtime, origin_cuda, origin_nccl, origin_cuda12 })
}

/// Downloads and unpacks the headers of the pinned wheels once; returns the unpacked root.
fn fetch_wheels(root: &Path) -> Result<PathBuf, String> {
    let cache = root.join("target/cuda-headers");
    let stamp_text: String = WHEELS.iter().map(|(n, v)| format!("{n}=={v}\n")).collect();
    let unpacked = cache.join("include-root");
    let stamp = cache.join("stamp");
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(stamp_text.as_str()) {
        return Ok(unpacked);
    }
    let wheels = cache.join("wheels");
    std::fs::create_dir_all(&wheels).map_err(|e| e.to_string())?;
    let mut pip = Command::new("python3");
    pip.args(["-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"])
        .args(["--platform", "manylinux_2_18_x86_64", "--platform", "manylinux2014_x86_64"])
        .args(["--platform", "manylinux1_x86_64", "--platform", "manylinux_2_5_x86_64"])
        .arg("--dest")
        .arg(&wheels);
    for (name, version) in WHEELS {
        pip.arg(format!("{name}=={version}"));
    }
    eprintln!("downloading the pinned NVIDIA wheels (headers only are kept)");
    run(&mut pip)?;
    let _ = std::fs::remove_dir_all(&unpacked);
    // Only headers are unpacked; the wheels' shared libraries are never used.
    let script = "import sys, zipfile, pathlib\n\
        dest = pathlib.Path(sys.argv[1])\n\
        for w in sys.argv[2:]:\n\
        \x20   z = zipfile.ZipFile(w)\n\
        \x20   for n in z.namelist():\n\
        \x20       if n.endswith('.h'):\n\
        \x20           z.extract(n, dest)\n";
    let mut unzip = Command::new("python3");
    unzip.args(["-c", script]).arg(&unpacked);
    let entries = std::fs::read_dir(&wheels).map_err(|e| e.to_string())?;
    for entry in entries.flatten() {
        let path = entry.path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let wanted = WHEELS.iter().any(|(n, v)| name.starts_with(&format!("{}-{v}-", n.replace('-', "_"))));
        if wanted && name.ends_with(".whl") {
            unzip.arg(&path);
        }
    }
    run(&mut unzip)?;
    std::fs::write(&stamp, stamp_text).map_err(|e| e.to_string())?;
    Ok(unpacked)
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let status = cmd.status().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("{cmd:?} failed: {status}")) }
}
