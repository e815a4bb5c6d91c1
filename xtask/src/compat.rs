//! `cargo xtask compat`: the safe layer compiles against bindings generated from every supported
//! header set, not only the committed one.
//!
//! Two checks:
//! * every struct literal of a generated C struct in `cuhost` ends in `..` (a default or
//!   zeroed base), so that a field a newer header adds does not break the build;
//! * for the `oldest` and `newest` sets of `xtask/wheels.txt`, the workspace is copied into
//!   `target/compat/<set>`, its bindings are regenerated there from that set's headers, and
//!   `cuhost` and the GPU test crate are checked (`cargo check --all-targets`).

use crate::bindgen;
use crate::headers::{self, Pins, Wheel};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use syn::visit::Visit;

/// Names of the named-field structs (and their aliases) the `-sys` crates generate; unions are
/// left out (a union literal names exactly one member and cannot have a base).
fn generated_structs(root: &Path) -> Result<BTreeSet<String>, String> {
    let mut structs = BTreeSet::new();
    let mut aliases = Vec::new();
    for krate in ["cuda-driver-sys", "cudart-sys", "nvtx-sys", "nccl-sys", "nvrtc-sys", "nvjitlink-sys"] {
        let path = root.join(krate).join("src/generated/types.rs");
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let file = syn::parse_file(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        for item in file.items {
            match item {
                syn::Item::Struct(s) if matches!(s.fields, syn::Fields::Named(_)) => {
                    structs.insert(s.ident.to_string());
                }
                syn::Item::Type(t) => aliases.push((t.ident.to_string(), crate::syntax::type_text(&t.ty))),
                _ => {}
            }
        }
    }
    // Aliases of aliases: repeat until nothing is added.
    loop {
        let before = structs.len();
        for (alias, target) in &aliases {
            if structs.contains(target) {
                structs.insert(alias.clone());
            }
        }
        if structs.len() == before {
            return Ok(structs);
        }
    }
}

/// Finds struct literals of C structs without a base.
struct Literals<'a> {
    structs: &'a BTreeSet<String>,
    found: Vec<(usize, String)>,
}

impl<'ast> Visit<'ast> for Literals<'_> {
    fn visit_expr_struct(&mut self, e: &'ast syn::ExprStruct) {
        if let Some(last) = e.path.segments.last() {
            let name = last.ident.to_string();
            if e.rest.is_none() && e.dot2_token.is_none() && self.structs.contains(&name) {
                self.found.push((last.ident.span().start().line, name));
            }
        }
        syn::visit::visit_expr_struct(self, e);
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    for entry in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// `file:line: Name { .. }` for every C struct literal without a base in `cuda-core/src`.
pub fn literal_findings(root: &Path) -> Result<Vec<String>, String> {
    let structs = generated_structs(root)?;
    let mut files = Vec::new();
    rust_files(&root.join("cuda-core/src"), &mut files)?;
    files.sort();
    let mut findings = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let file = syn::parse_file(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut v = Literals { structs: &structs, found: Vec::new() };
        v.visit_file(&file);
        let shown = path.strip_prefix(root).unwrap_or(&path).display().to_string();
        findings.extend(v.found.into_iter().map(|(line, name)| format!("{shown}:{line}: {name} {{ .. }}")));
    }
    Ok(findings)
}

/// The files of the working tree that git tracks or would track.
fn tree_files(root: &Path) -> Result<Vec<PathBuf>, String> {
    let out = Command::new("git")
        .args(["ls-files", "-z", "--cached", "--others", "--exclude-standard"])
        .current_dir(root)
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !out.status.success() {
        return Err(format!("git ls-files failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(out
        .stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| PathBuf::from(String::from_utf8_lossy(p).into_owned()))
        .collect())
}

/// Copies the working tree into `scratch`, regenerates its bindings from `set` and checks the
/// safe layer and its tests there.
fn check_set(root: &Path, name: &str, set: &[Wheel], pins: &Pins) -> Result<(), String> {
    let scratch = root.join("target/compat").join(name);
    let _ = std::fs::remove_dir_all(&scratch);
    for rel in tree_files(root)? {
        let from = root.join(&rel);
        if !from.is_file() {
            continue;
        }
        let to = scratch.join(&rel);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        std::fs::copy(&from, &to).map_err(|e| format!("{} -> {}: {e}", from.display(), to.display()))?;
    }
    let headers = headers::locate(root, set, &pins.cuda12, None, None)?;
    let files = bindgen::generate(&headers)?;
    bindgen::write_all(&scratch, &files)?;
    println!("{name}: bindings from {} and {}", headers.origin_cuda, headers.origin_nccl);
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["check", "--locked", "--all-targets", "-p", "cuhost", "-p", "cuda-tests"])
        .args(["--features", "cuhost/tracing,cuhost/half"])
        .env("CARGO_TARGET_DIR", root.join("target/compat-target"))
        .current_dir(&scratch)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if status.success() {
        println!("{name}: cuhost and its tests compile");
        Ok(())
    } else {
        Err(format!(
            "{name}: cuhost does not compile against these headers (the copy is in {})",
            scratch.display()
        ))
    }
}

/// Calls in `cuda-core/src` (`name(`) of driver functions whose C name resolves at a newer ABI
/// in the newest headers than in the oldest: on a driver of the oldest release they would fail.
/// Such a call must name its version (`cuGraphAddNode_v12030`) or choose one at run time.
fn moved_calls(root: &Path, oldest: &str, newest: &str) -> Result<Vec<String>, String> {
    let old = crate::syntax::driver_versions(oldest);
    let moved: Vec<(String, i32, i32)> = crate::syntax::driver_versions(newest)
        .into_iter()
        .filter_map(|(name, v)| old.get(&name).filter(|o| **o < v).map(|o| (name, *o, v)))
        .collect();
    let mut files = Vec::new();
    rust_files(&root.join("cuda-core/src"), &mut files)?;
    let mut found = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        for (name, o, v) in &moved {
            let call = regex::Regex::new(&format!(r"\b{name}\s*\(")).map_err(|e| e.to_string())?;
            if call.is_match(&text) {
                let shown = path.strip_prefix(root).unwrap_or(&path).display();
                found.push(format!("{shown}: {name} (ABI {o} in the oldest headers, {v} in the newest)"));
            }
        }
    }
    Ok(found)
}

/// Runs the checks.
pub fn run(root: &Path) -> Result<(), String> {
    let findings = literal_findings(root)?;
    if !findings.is_empty() {
        return Err(format!(
            "struct literals of C structs without a `..Default::default()` base (a newer header may add fields):\n  {}",
            findings.join("\n  ")
        ));
    }
    println!("no C struct literal without a base in cuhost");
    let pins = headers::read_pins(root)?;
    check_set(root, "oldest", &pins.oldest, &pins)?;
    check_set(root, "newest", &pins.newest, &pins)?;
    let functions = |set: &str| {
        let path = root.join("target/compat").join(set).join("cuda-driver-sys/src/generated/functions.rs");
        std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))
    };
    let moved = moved_calls(root, &functions("oldest")?, &functions("newest")?)?;
    if !moved.is_empty() {
        return Err(format!(
            "calls through C names that newer headers resolve at an ABI older drivers lack (name the version):\n  {}",
            moved.join("\n  ")
        ));
    }
    println!("no call through a C name whose ABI moved since the oldest headers");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_without_a_base_are_found() {
        let structs: BTreeSet<String> = ["CUmemLocation".to_string()].into();
        let file: syn::File = syn::parse_str(
            "fn f() {\n\
             let a = sys::CUmemLocation { type_: t, id: 1 };\n\
             let b = sys::CUmemLocation { type_: t, ..Default::default() };\n\
             let c = Other { x: 1 };\n\
             }",
        )
        .unwrap();
        let mut v = Literals { structs: &structs, found: Vec::new() };
        v.visit_file(&file);
        assert_eq!(v.found, [(2, "CUmemLocation".to_string())]);
    }

    #[test]
    fn calls_through_moved_c_names_are_found() {
        let root = std::env::temp_dir().join(format!("xtask-compat-{}", std::process::id()));
        let src = root.join("cuda-core/src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("a.rs"), "fn f() { sys::cuGraphAddNode(a); sys::cuGraphAddNode_v12030(b); }")
            .unwrap();
        std::fs::write(src.join("b.rs"), "fn g() { sys::cuGraphAddNode_v12030(b); sys::cuMemAlloc(c); }")
            .unwrap();
        let line = |name: &str, v: i32| {
            format!("    {name}(a: i32) -> CUresult => c\"{name}\", {v}, 0, \"cuda.h\";\n")
        };
        let oldest = line("cuGraphAddNode", 12030) + &line("cuMemAlloc", 3020);
        let newest = line("cuGraphAddNode", 13040) + &line("cuMemAlloc", 3020);
        let found = moved_calls(&root, &oldest, &newest).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains("a.rs: cuGraphAddNode (ABI 12030 in the oldest headers, 13040 in the newest)"),
            "{found:?}"
        );
        let _ = std::fs::remove_dir_all(&root);
    }
}
