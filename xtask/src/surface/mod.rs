//! `cargo xtask surface`: functions declared by the headers against functions each crate exposes.
//!
//! Declarations are found by scanning the header text, independently of bindgen, and mapped to
//! the names C code calls through the headers' `#define` renames. Exposed functions are read
//! from each crate's generated function list. After the table, [`coverage`] reports which
//! `cuda.h` functions `cuhost` wraps in safe API, and why the others are not.

mod coverage;
mod scan;

use crate::cmacros;
use crate::headers::Headers;
use regex::Regex;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

struct Surface {
    krate: &'static str,
    headers: Vec<PathBuf>,
    declaration: &'static str,
    prefix: &'static str,
}

fn read(p: &Path) -> Result<String, String> {
    std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))
}

/// Macros that only the libraries' own builds define, or that opt into C++-only helpers: a
/// block under one of them declares nothing a C program compiled against the header can call
/// (NCCL's `ncclResetDebugInit` is a no-op macro there; NVRTC's `nvrtcGetTypeName` is an
/// inline C++ template).
const BUILD_ONLY: &[&str] = &["__CUDA_API_VERSION_INTERNAL", "NCCL_OS_LINUX", "NVRTC_GET_TYPE_NAME"];

/// Header text outside blocks the generator never sees: declarations kept for the libraries'
/// own builds ([`BUILD_ONLY`]) and Windows-only declarations.
fn visible_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut depth = 0usize;
    let mut hidden_at: Option<usize> = None;
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("#if") {
            depth += 1;
            let hides = BUILD_ONLY.iter().any(|m| t.contains(m)) || t.contains("_WIN32");
            if hidden_at.is_none() && hides && !t.contains("!defined(_WIN32)") {
                hidden_at = Some(depth);
            }
        } else if t.starts_with("#endif") {
            if hidden_at == Some(depth) {
                hidden_at = None;
            }
            depth = depth.saturating_sub(1);
            continue;
        } else if (t.starts_with("#else") || t.starts_with("#elif")) && hidden_at == Some(depth) {
            hidden_at = None;
            continue;
        }
        if hidden_at.is_none() {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The names C code calls: the header text declares functions by those names (the `#define`
/// renames to ABI-suffixed symbols apply only once the preprocessor runs).
fn header_functions(s: &Surface) -> Result<BTreeSet<String>, String> {
    let re = Regex::new(s.declaration).map_err(|e| e.to_string())?;
    let mut names = BTreeSet::new();
    for h in &s.headers {
        let text = visible_text(&read(h)?);
        for c in re.captures_iter(&text) {
            let name = &c[1];
            if !(name.ends_with("_ptds") || name.ends_with("_ptsz")) {
                names.insert(name.to_string());
            }
        }
    }
    let refs: Vec<&Path> = s.headers.iter().map(PathBuf::as_path).collect();
    // A `#define` that points a declared name at another exported function
    // (`cuGraphInstantiate` -> `cuGraphInstantiateWithFlags`) makes both names callable.
    let abi_suffix = Regex::new(r"_v\d+$").map_err(|e| e.to_string())?;
    for (canonical, rename) in cmacros::renames(&refs, s.prefix)? {
        if rename.per_thread.is_some() {
            continue;
        }
        if names.contains(&rename.declared) {
            // `#define nvtxMark nvtxMarkA`: the macro name is what C code writes.
            names.insert(canonical);
        } else if names.contains(&canonical) && !abi_suffix.is_match(&rename.declared) {
            names.insert(rename.declared);
        }
    }
    Ok(names)
}

fn exposed_functions(root: &Path, krate: &str) -> Result<BTreeSet<String>, String> {
    let text = read(&root.join(krate).join("src/generated/functions.rs"))?;
    let re = Regex::new(r"(?m)^\s{4}(\w+)\(").map_err(|e| e.to_string())?;
    Ok(re.captures_iter(&text).map(|c| c[1].to_string()).collect())
}

/// The surfaces of the four crates over the headers of `h`.
fn surfaces_of(h: &Headers) -> [Surface; 6] {
    let c = &h.cuda;
    let nvtx = h.nvtx.join("nvtx3");
    [
        Surface {
            krate: "cuda-driver-sys",
            headers: ["cuda.h", "cudaProfiler.h", "cudaGL.h", "cudaEGL.h", "cudaVDPAU.h"]
                .iter()
                .map(|f| c.join(f))
                .collect(),
            declaration: r"(?m)^\s*(?:__CUDA_DEPRECATED\s+)?CUresult\s+CUDAAPI\s+(\w+)\s*\(",
            prefix: "cu",
        },
        Surface {
            krate: "cudart-sys",
            headers: vec![c.join("cuda_runtime_api.h"), c.join("cuda_profiler_api.h")],
            declaration: r"(?m)^\s*extern\s+(?:__CUDA_DEPRECATED\s+)?__host__[^;{(]*?\b(cuda\w+)\s*\(",
            prefix: "cuda",
        },
        Surface {
            krate: "nvtx-sys",
            headers: ["nvToolsExt.h", "nvToolsExtCuda.h", "nvToolsExtCudaRt.h", "nvToolsExtSync.h"]
                .iter()
                .map(|f| nvtx.join(f))
                .collect(),
            declaration: r"(?m)^\s*NVTX_DECLSPEC\s+[^;{(]*?NVTX_API\s+(nvtx\w+)\s*\(",
            prefix: "nvtx",
        },
        Surface {
            krate: "nccl-sys",
            headers: vec![h.nccl.join("nccl.h")],
            declaration: r"(?m)^\s*(?:ncclResult_t|const\s+char\s*\*|void)\s+(p?nccl\w+)\s*\(",
            prefix: "nccl",
        },
        Surface {
            krate: "nvrtc-sys",
            headers: vec![c.join("nvrtc.h")],
            declaration: r"(?m)^\s*(?:nvrtcResult\s+|const\s+char\s*\*\s*)(nvrtc\w+)\s*\(",
            prefix: "nvrtc",
        },
        Surface {
            krate: "nvjitlink-sys",
            headers: vec![c.join("nvJitLink.h")],
            // The C names, from the versioned entry points that every header declares
            // (`__nvJitLinkCreate_13_0` is `nvJitLinkCreate`) and the plain declarations.
            declaration: r"(?m)^\s*extern\s+nvJitLinkResult\s+(?:__)?(nvJitLink[A-Za-z]+)(?:_\d+_\d+)?\s*\(",
            prefix: "nvJitLink",
        },
    ]
}

/// `13010` as `13.1`.
fn version_text(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// Prints the comparison, the functions new since the `oldest` headers and the safe coverage
/// of `cuda.h`; fails if any header function is not exposed, and with `strict` also if a
/// `cuda.h` function has neither a safe wrapper nor a reason, or a reason is stale.
pub fn report(root: &Path, h: &Headers, oldest: &Headers, strict: bool) -> Result<(), String> {
    let surfaces = surfaces_of(h);
    let old_surfaces = surfaces_of(oldest);
    let mut all_complete = true;
    println!("{:<18} {:>8} {:>8} {:>8}", "crate", "header", "exposed", "covered");
    for s in &surfaces {
        let header = header_functions(s)?;
        let exposed = exposed_functions(root, s.krate)?;
        let missing: Vec<&String> = header.difference(&exposed).collect();
        // Older ABI versions come from cudaTypedefs.h, named `<function>_v<typedef version>`.
        let (older_abi, extra): (Vec<&String>, Vec<&String>) =
            exposed.difference(&header).partition(|name| is_older_abi(name));
        let covered = header.len() - missing.len();
        let pct = if header.is_empty() { 100.0 } else { 100.0 * covered as f64 / header.len() as f64 };
        println!("{:<18} {:>8} {:>8} {:>7.1}%", s.krate, header.len(), exposed.len(), pct);
        if !missing.is_empty() {
            all_complete = false;
            println!("  missing: {}", missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "));
        }
        if !older_abi.is_empty() {
            println!("  older ABI versions (cudaTypedefs.h): {}", older_abi.len());
        }
        if !extra.is_empty() {
            println!(
                "  exposed beyond the scanned declarations: {}",
                extra.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
            );
        }
    }
    println!("\nnew since the oldest supported headers ({}):", oldest.origin_cuda);
    let functions_rs = read(&root.join("cuda-driver-sys/src/generated/functions.rs"))?;
    let versions = crate::syntax::driver_versions(&functions_rs);
    // The driver functions new since the oldest headers, with the version each needs (0 when
    // unknown): printed here, and marked in the coverage below.
    let mut driver_new: BTreeMap<String, i32> = BTreeMap::new();
    for (s, old) in surfaces.iter().zip(&old_surfaces) {
        let new: BTreeSet<String> = header_functions(s)?;
        let before = header_functions(old)?;
        let added: Vec<&String> = new.difference(&before).collect();
        if added.is_empty() {
            continue;
        }
        println!("  {} ({}):", s.krate, added.len());
        if s.krate == "cuda-driver-sys" {
            let mut by_version: BTreeMap<i32, Vec<&str>> = BTreeMap::new();
            for name in &added {
                let version = versions.get(name.as_str()).copied().unwrap_or(0);
                driver_new.insert(name.to_string(), version);
                by_version.entry(version).or_default().push(name);
            }
            for (v, names) in by_version {
                let needs = if v == 0 {
                    "version unknown".to_string()
                } else {
                    format!("needs a {} driver", version_text(v))
                };
                println!("    {needs}: {}", names.join(", "));
            }
        } else {
            println!("    {}", added.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "));
        }
    }
    let [driver, ..] = surfaces_of(h);
    let cuda_h = Surface { headers: vec![h.cuda.join("cuda.h")], ..driver };
    let declared = header_functions(&cuda_h)?;
    let aliases = aliases(&cuda_h, &declared)?;
    let sections = sections(&functions_rs)?;
    let coverage = coverage::Driver {
        declared: &declared,
        aliases: &aliases,
        sections: &sections,
        new_since_oldest: &driver_new,
    };
    let refused = coverage::report(root, &coverage)?;

    let mut failures = Vec::new();
    if !all_complete {
        failures.push("some header functions are not exposed".to_string());
    }
    if strict {
        failures.extend(refused);
    }
    if failures.is_empty() { Ok(()) } else { Err(failures.join("\n")) }
}

/// Declared names that a `#define` makes one function (`cuGraphInstantiate` is
/// `cuGraphInstantiateWithFlags`), both ways round. ABI renames (`cuMemAlloc` to
/// `cuMemAlloc_v2`) are not aliases: only the canonical name is declared.
fn aliases(s: &Surface, declared: &BTreeSet<String>) -> Result<BTreeMap<String, String>, String> {
    let refs: Vec<&Path> = s.headers.iter().map(PathBuf::as_path).collect();
    let mut out = BTreeMap::new();
    for (canonical, rename) in cmacros::renames(&refs, s.prefix)? {
        if rename.per_thread.is_none() && declared.contains(&canonical) && declared.contains(&rename.declared)
        {
            out.insert(rename.declared.clone(), canonical.clone());
            out.insert(canonical, rename.declared);
        }
    }
    Ok(out)
}

/// The documentation section of each function of the generated driver function list
/// (`    cuFoo(args) -> ret => c"cuFoo", 2000, 0, "cuda.h", "Memory Management", "https://..";`).
fn sections(functions_rs: &str) -> Result<BTreeMap<String, String>, String> {
    let re = Regex::new(r#"(?m)^\s{4}(\w+)\(.*?=> c"\w+", \d+, \d+, "[^"]*", "([^"]*)""#)
        .map_err(|e| e.to_string())?;
    Ok(re.captures_iter(functions_rs).map(|c| (c[1].to_string(), c[2].to_string())).collect())
}

/// Whether `name` is an older ABI version the generator adds, `<function>_v<version>` with a
/// CUDA version of four digits or more (C's own suffixes are `_v2`, `_v3`).
fn is_older_abi(name: &str) -> bool {
    name.rsplit_once("_v").is_some_and(|(_, v)| v.len() >= 4 && v.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn older_abi_names_are_told_from_c_suffixes() {
        assert!(is_older_abi("cuEventElapsedTime_v2000"));
        assert!(is_older_abi("cuMemAdvise_v8000"));
        assert!(!is_older_abi("cuCtxSynchronize_v2"));
        assert!(!is_older_abi("cuMemAlloc"));
    }

    #[test]
    fn internal_and_windows_blocks_are_hidden() {
        let text = "CUresult CUDAAPI cuA(void);\n\
                    #if defined(__CUDA_API_VERSION_INTERNAL)\n\
                    CUresult CUDAAPI cuOld(void);\n\
                    #if X\n\
                    CUresult CUDAAPI cuNested(void);\n\
                    #endif\n\
                    #else\n\
                    CUresult CUDAAPI cuElse(void);\n\
                    #endif\n\
                    #ifdef _WIN32\n\
                    CUresult CUDAAPI cuWGLGetDevice(void);\n\
                    #endif\n\
                    CUresult CUDAAPI cuB(void);\n";
        let visible = visible_text(text);
        for shown in ["cuA", "cuElse", "cuB"] {
            assert!(visible.contains(shown), "{shown} hidden:\n{visible}");
        }
        for hidden in ["cuOld", "cuNested", "cuWGLGetDevice"] {
            assert!(!visible.contains(hidden), "{hidden} shown:\n{visible}");
        }
    }
}
