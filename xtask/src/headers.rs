//! Where the C headers come from: a local toolkit, or NVIDIA's Python wheels pinned in
//! `xtask/wheels.txt`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// One pinned wheel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wheel {
    /// The distribution name, e.g. `nvidia-cuda-runtime`.
    pub name: String,
    /// The exact version.
    pub version: String,
}

impl Wheel {
    fn requirement(&self) -> String {
        format!("{}=={}", self.name, self.version)
    }

    /// The file-name prefix pip gives this wheel (`nvidia_cuda_runtime-13.5.37-`).
    fn file_prefix(&self) -> String {
        format!("{}-{}-", self.name.replace('-', "_"), self.version)
    }
}

/// The CUDA wheels of a header set (runtime, profiler API, NVTX, NVRTC, nvJitLink) in this
/// order; all unpack into the same `nvidia/cu<major>/include`.
const CUDA_WHEELS: [&str; 5] = [
    "nvidia-cuda-runtime",
    "nvidia-cuda-profiler-api",
    "nvidia-nvtx",
    "nvidia-cuda-nvrtc",
    "nvidia-nvjitlink",
];
/// The NCCL wheel of a header set.
const NCCL_WHEEL: &str = "nvidia-nccl-cu13";

/// The header sets of `xtask/wheels.txt`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pins {
    /// What the committed bindings are generated from.
    pub newest: Vec<Wheel>,
    /// The oldest headers the safe layer must compile against.
    pub oldest: Vec<Wheel>,
    /// The CUDA 12 runtime headers.
    pub cuda12: Vec<Wheel>,
}

/// The file that pins the wheels.
pub fn pins_file(root: &Path) -> PathBuf {
    root.join("xtask/wheels.txt")
}

/// Parses `xtask/wheels.txt`.
pub fn parse_pins(text: &str) -> Result<Pins, String> {
    let mut pins = Pins::default();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [set, name, version] = fields[..] else {
            return Err(format!("wheels.txt line {}: expected `set name version`", n + 1));
        };
        let wheel = Wheel { name: name.to_string(), version: version.to_string() };
        match set {
            "newest" => pins.newest.push(wheel),
            "oldest" => pins.oldest.push(wheel),
            "cuda12" => pins.cuda12.push(wheel),
            other => return Err(format!("wheels.txt line {}: unknown set {other}", n + 1)),
        }
    }
    for (set, wheels) in [("newest", &pins.newest), ("oldest", &pins.oldest)] {
        for name in CUDA_WHEELS.iter().chain([&NCCL_WHEEL]) {
            if !wheels.iter().any(|w| w.name == *name) {
                return Err(format!("wheels.txt: the {set} set has no {name}"));
            }
        }
    }
    if pins.cuda12.is_empty() {
        return Err("wheels.txt: no cuda12 wheel".into());
    }
    Ok(pins)
}

/// Reads `xtask/wheels.txt`.
pub fn read_pins(root: &Path) -> Result<Pins, String> {
    let path = pins_file(root);
    parse_pins(&std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?)
}

/// `text` with the `newest` lines replaced by `newest`, comments and other sets kept.
pub fn replace_newest(text: &str, newest: &[Wheel]) -> String {
    let mut out = String::new();
    let mut written = false;
    for line in text.lines() {
        if line.trim_start().starts_with("newest ") {
            if !written {
                for w in newest {
                    out.push_str(&format!("newest {} {}\n", w.name, w.version));
                }
                written = true;
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

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

/// Finds the headers of `set` (a local toolkit or NCCL where given), downloading its wheels into
/// `target/cuda-headers` if needed.
pub fn locate(
    root: &Path,
    set: &[Wheel],
    cuda12: &[Wheel],
    cuda_root: Option<PathBuf>,
    nccl_root: Option<PathBuf>,
) -> Result<Headers, String> {
    let wheel = |name: &str| -> Result<&Wheel, String> {
        set.iter().find(|w| w.name == name).ok_or_else(|| format!("no {name} among the pinned wheels"))
    };
    let cuda_set: Vec<Wheel> = CUDA_WHEELS.iter().map(|n| wheel(n).cloned()).collect::<Result<_, _>>()?;
    let (cuda, origin_cuda) = match cuda_root {
        Some(r) => (r.join("include"), "a local CUDA toolkit (--cuda-root)".to_string()),
        None => {
            let unpacked = fetch_wheels(root, &cuda_set)?;
            let requirements: Vec<String> = cuda_set.iter().map(Wheel::requirement).collect();
            (find_include(&unpacked, "cuda.h")?, format!("NVIDIA wheels {}", requirements.join(", ")))
        }
    };
    let (nccl, origin_nccl) = match nccl_root {
        Some(r) => (r.join("include"), "a local NCCL (--nccl-root)".to_string()),
        None => {
            let w = wheel(NCCL_WHEEL)?.clone();
            let unpacked = fetch_wheels(root, std::slice::from_ref(&w))?;
            (find_include(&unpacked, "nccl.h")?, format!("NVIDIA wheel {}", w.requirement()))
        }
    };
    let unpacked12 = fetch_wheels(root, cuda12)?;
    let cuda12_runtime = find_include(&unpacked12, "cuda_runtime_api.h")?;
    let origin_cuda12 =
        format!("NVIDIA wheel {}", cuda12.iter().map(Wheel::requirement).collect::<Vec<_>>().join(", "));
    for (dir, file) in [
        (&cuda, "cuda.h"),
        (&cuda, "cuda_runtime_api.h"),
        (&cuda, "nvrtc.h"),
        (&cuda, "nvJitLink.h"),
        (&nccl, "nccl.h"),
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

/// Points `target/cuda-headers/current` at the unpacked wheels of the pinned `newest` CUDA set,
/// where C code of the workspace (the NVTX C reference of the tests) finds the headers.
pub fn link_current(root: &Path, newest: &[Wheel]) -> Result<(), String> {
    let cuda_set: Vec<Wheel> =
        newest.iter().filter(|w| CUDA_WHEELS.contains(&w.name.as_str())).cloned().collect();
    let unpacked = fetch_wheels(root, &cuda_set)?;
    let link = root.join("target/cuda-headers/current");
    let _ = std::fs::remove_file(&link);
    #[cfg(unix)]
    std::os::unix::fs::symlink(&unpacked, &link).map_err(|e| format!("{}: {e}", link.display()))?;
    Ok(())
}

/// The `nvidia/<package>/include` directory of an unpacked wheel set that holds `file`.
fn find_include(unpacked: &Path, file: &str) -> Result<PathBuf, String> {
    let nvidia = unpacked.join("nvidia");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&nvidia)
        .map_err(|e| format!("{}: {e}", nvidia.display()))?
        .flatten()
        .map(|e| e.path().join("include"))
        .filter(|dir| dir.join(file).is_file())
        .collect();
    found.sort();
    found.pop().ok_or_else(|| format!("no {file} in the wheels unpacked in {}", unpacked.display()))
}

/// The platforms whose wheels are asked for (NVIDIA tags its wheels with several).
const PLATFORMS: &[&str] = &[
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_18_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
];

fn pip_download(dest: &Path, requirements: &[String]) -> Result<(), String> {
    std::fs::create_dir_all(dest).map_err(|e| format!("{}: {e}", dest.display()))?;
    let mut pip = Command::new("python3");
    pip.args(["-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]);
    for p in PLATFORMS {
        pip.args(["--platform", p]);
    }
    pip.arg("--dest").arg(dest).args(requirements);
    run(&mut pip)
}

/// Downloads and unpacks the headers of `wheels` once; returns the unpacked root.
fn fetch_wheels(root: &Path, wheels: &[Wheel]) -> Result<PathBuf, String> {
    let key: Vec<String> = wheels.iter().map(|w| format!("{}-{}", w.name, w.version)).collect();
    let cache = root.join("target/cuda-headers").join(key.join("+"));
    let unpacked = cache.join("include-root");
    let stamp = cache.join("stamp");
    let stamp_text: String = wheels.iter().map(|w| format!("{}\n", w.requirement())).collect();
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(stamp_text.as_str()) {
        return Ok(unpacked);
    }
    let downloads = root.join("target/cuda-headers/wheels");
    let have = |w: &Wheel| wheel_file(&downloads, w).is_some();
    let missing: Vec<String> = wheels.iter().filter(|w| !have(w)).map(Wheel::requirement).collect();
    if !missing.is_empty() {
        eprintln!("downloading {} (headers only are kept)", missing.join(", "));
        pip_download(&downloads, &missing)?;
    }
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
    for w in wheels {
        let file =
            wheel_file(&downloads, w).ok_or_else(|| format!("{} was not downloaded", w.requirement()))?;
        unzip.arg(file);
    }
    run(&mut unzip)?;
    std::fs::write(&stamp, stamp_text).map_err(|e| e.to_string())?;
    Ok(unpacked)
}

/// The downloaded file of `wheel` in `dir`, if any.
fn wheel_file(dir: &Path, wheel: &Wheel) -> Option<PathBuf> {
    let prefix = wheel.file_prefix();
    std::fs::read_dir(dir).ok()?.flatten().map(|e| e.path()).find(|p| {
        p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".whl"))
    })
}

/// The newest published wheels of CUDA release `cuda` (`13.5`) and NCCL release `nccl`
/// (`2.32`), where given: pip picks the newest patch of each, and the file names tell which it
/// picked.
pub fn resolve_release(root: &Path, cuda: Option<&str>, nccl: Option<&str>) -> Result<Vec<Wheel>, String> {
    let dest = root.join("target/cuda-headers/resolve");
    let _ = std::fs::remove_dir_all(&dest);
    let mut wanted: Vec<(&str, &str)> = Vec::new();
    if let Some(cuda) = cuda {
        wanted.extend(CUDA_WHEELS.iter().map(|n| (*n, cuda)));
    }
    if let Some(nccl) = nccl {
        wanted.push((NCCL_WHEEL, nccl));
    }
    let requirements: Vec<String> = wanted.iter().map(|(n, v)| format!("{n}=={v}.*")).collect();
    eprintln!("finding the newest of {}", requirements.join(", "));
    pip_download(&dest, &requirements)?;
    let files: Vec<String> = std::fs::read_dir(&dest)
        .map_err(|e| format!("{}: {e}", dest.display()))?
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    let mut out = Vec::new();
    for (name, _) in wanted {
        let prefix = format!("{}-", name.replace('-', "_"));
        let version = files
            .iter()
            .find_map(|f| f.strip_prefix(&prefix).and_then(|rest| rest.split('-').next()))
            .ok_or_else(|| format!("pip downloaded no {name}"))?;
        out.push(Wheel { name: name.to_string(), version: version.to_string() });
    }
    // Keep the downloads for `fetch_wheels`.
    let downloads = root.join("target/cuda-headers/wheels");
    std::fs::create_dir_all(&downloads).map_err(|e| e.to_string())?;
    for f in &files {
        let _ = std::fs::rename(dest.join(f), downloads.join(f));
    }
    Ok(out)
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let status = cmd.status().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("{cmd:?} failed: {status}")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# comment\n\
        newest nvidia-cuda-runtime 13.5.37\nnewest nvidia-cuda-profiler-api 13.5.25\n\
        newest nvidia-nvtx 13.5.25\nnewest nvidia-cuda-nvrtc 13.5.37\nnewest nvidia-nvjitlink 13.5.37\n\
        newest nvidia-nccl-cu13 2.32.3\n\
        oldest nvidia-cuda-runtime 13.0.96\noldest nvidia-cuda-profiler-api 13.0.85\n\
        oldest nvidia-nvtx 13.0.85\noldest nvidia-cuda-nvrtc 13.0.88\noldest nvidia-nvjitlink 13.0.88\n\
        oldest nvidia-nccl-cu13 2.28.9\n\
        cuda12 nvidia-cuda-runtime-cu12 12.9.79\n";

    #[test]
    fn pins_parse_by_set() {
        let pins = parse_pins(TEXT).unwrap();
        assert_eq!(pins.newest.len(), 6);
        assert_eq!(pins.oldest[5], Wheel { name: "nvidia-nccl-cu13".into(), version: "2.28.9".into() });
        assert_eq!(pins.cuda12[0].version, "12.9.79");
        assert!(parse_pins("newest nvidia-nvtx\n").unwrap_err().contains("line 1"));
        assert!(parse_pins("later nvidia-nvtx 1\n").unwrap_err().contains("unknown set"));
        let without_nccl: String =
            TEXT.lines().filter(|l| !l.starts_with("oldest nvidia-nccl")).map(|l| format!("{l}\n")).collect();
        assert!(parse_pins(&without_nccl).unwrap_err().contains("oldest set has no nvidia-nccl-cu13"));
    }

    #[test]
    fn replacing_newest_keeps_the_rest() {
        let bumped = vec![
            Wheel { name: "nvidia-cuda-runtime".into(), version: "13.6.1".into() },
            Wheel { name: "nvidia-cuda-profiler-api".into(), version: "13.6.2".into() },
            Wheel { name: "nvidia-nvtx".into(), version: "13.6.3".into() },
            Wheel { name: "nvidia-cuda-nvrtc".into(), version: "13.6.1".into() },
            Wheel { name: "nvidia-nvjitlink".into(), version: "13.6.1".into() },
            Wheel { name: "nvidia-nccl-cu13".into(), version: "2.33.0".into() },
        ];
        let text = replace_newest(TEXT, &bumped);
        let pins = parse_pins(&text).unwrap();
        assert_eq!(pins.newest, bumped);
        assert_eq!(pins.oldest, parse_pins(TEXT).unwrap().oldest);
        assert!(text.starts_with("# comment\n"));
    }

    #[test]
    fn wheel_files_are_named_as_pip_names_them() {
        let w = Wheel { name: "nvidia-cuda-runtime".into(), version: "13.5.37".into() };
        assert_eq!(w.file_prefix(), "nvidia_cuda_runtime-13.5.37-");
    }
}
