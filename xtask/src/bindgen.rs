//! `cargo xtask bindgen`: regenerates the four `-sys` crates from the headers.

use crate::abi::AbiTable;
use crate::cmacros::{self, Rename};
use crate::headers::Headers;
use regex::Regex;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One generated file: where it goes, relative to the workspace root, and its text.
pub struct GeneratedFile {
    /// Path relative to the workspace root.
    pub path: PathBuf,
    /// Full contents.
    pub text: String,
}

/// How the functions of one crate are reached at run time.
enum Flavor {
    /// `cuGetProcAddress` at the ABI version from `cudaTypedefs.h`.
    Driver { fallback_version: i32 },
    /// The exported symbol, with its `_ptds`/`_ptsz` variant where the header has one.
    Runtime,
    /// The exported symbol.
    Nccl,
    /// A slot of the NVTX tool protocol: (module, callback id) by function name.
    Nvtx { slots: BTreeMap<String, (String, u32)> },
}

struct CrateSpec {
    dir: &'static str,
    macro_name: &'static str,
    origin: String,
    headers_named: String,
    wrapper: String,
    include_dirs: Vec<PathBuf>,
    allow_dir: PathBuf,
    defines: Vec<&'static str>,
    /// Files whose `#define` renames and cast constants are read.
    macro_files: Vec<PathBuf>,
    prefix: &'static str,
    flavor: Flavor,
}

/// Generates every file of the four crates in memory.
pub fn generate(h: &Headers) -> Result<Vec<GeneratedFile>, String> {
    let mut out = Vec::new();
    for spec in specs(h)? {
        out.extend(generate_crate(&spec)?);
    }
    Ok(out)
}

fn specs(h: &Headers) -> Result<Vec<CrateSpec>, String> {
    let c = &h.cuda;
    let (stub, nccl_stub) = write_stubs()?;
    let fallback_version = cmacros::integer_define(&c.join("cuda.h"), "CUDA_VERSION")?;
    let nvtx_slots = nvtx_slots(&h.nvtx.join("nvtx3/nvtxDetail/nvtxTypes.h"))?;
    let driver_headers = [
        "cuda.h",
        "cudaProfiler.h",
        "cudaGL.h",
        "cudaEGL.h",
        "vdpau/vdpau.h",
        "cudaVDPAU.h",
        "cudaTypedefs.h",
        "cudaProfilerTypedefs.h",
        "cudaGLTypedefs.h",
        "cudaEGLTypedefs.h",
        "cudaVDPAUTypedefs.h",
    ];
    let runtime_headers = ["cuda_runtime_api.h", "cuda_profiler_api.h"];
    let nvtx_headers = [
        "nvtx3/nvToolsExt.h",
        "nvtx3/nvToolsExtCuda.h",
        "nvtx3/nvToolsExtCudaRt.h",
        "nvtx3/nvToolsExtSync.h",
    ];
    let includes = |names: &[&str]| -> String { names.iter().map(|n| format!("#include <{n}>\n")).collect() };
    Ok(vec![
        CrateSpec {
            dir: "cuda-driver-sys",
            macro_name: "driver_functions",
            origin: h.origin_cuda.clone(),
            headers_named: "cuda.h, cudaProfiler.h, cudaGL.h, cudaEGL.h, cudaVDPAU.h and their *Typedefs.h"
                .into(),
            wrapper: includes(&driver_headers),
            include_dirs: vec![c.clone()],
            allow_dir: c.clone(),
            defines: vec![],
            macro_files: driver_headers
                .iter()
                .filter(|f| f.starts_with("cuda") && !f.contains("Typedefs"))
                .map(|f| c.join(f))
                .collect(),
            prefix: "cu",
            flavor: Flavor::Driver { fallback_version },
        },
        CrateSpec {
            dir: "cudart-sys",
            macro_name: "runtime_functions",
            origin: h.origin_cuda.clone(),
            headers_named: runtime_headers.join(", "),
            wrapper: includes(&runtime_headers),
            include_dirs: vec![c.clone(), stub.clone()],
            allow_dir: c.clone(),
            defines: vec![],
            macro_files: runtime_headers.iter().map(|f| c.join(f)).collect(),
            prefix: "cuda",
            flavor: Flavor::Runtime,
        },
        CrateSpec {
            dir: "nvtx-sys",
            macro_name: "nvtx_functions",
            origin: h.origin_cuda.clone(),
            headers_named: nvtx_headers.join(", "),
            wrapper: includes(&nvtx_headers),
            include_dirs: vec![h.nvtx.clone(), c.clone(), stub.clone()],
            allow_dir: h.nvtx.join("nvtx3"),
            defines: vec!["NVTX_NO_IMPL"],
            macro_files: nvtx_headers.iter().map(|f| h.nvtx.join(f)).collect(),
            prefix: "nvtx",
            flavor: Flavor::Nvtx { slots: nvtx_slots },
        },
        CrateSpec {
            dir: "nccl-sys",
            macro_name: "nccl_functions",
            origin: h.origin_nccl.clone(),
            headers_named: "nccl.h".into(),
            wrapper: "#include <nccl.h>\n".into(),
            include_dirs: vec![h.nccl.clone(), nccl_stub, c.clone(), stub.clone()],
            allow_dir: h.nccl.clone(),
            defines: vec![],
            macro_files: vec![h.nccl.join("nccl.h")],
            prefix: "nccl",
            flavor: Flavor::Nccl,
        },
    ])
}

/// The runtime headers include `crt/host_defines.h`, which ships with nvcc rather than with the
/// runtime wheel. This stand-in gives its qualifiers their host-side meaning; the alignment
/// macros matter, since they set the layout of the vector types.
const HOST_DEFINES_STUB: &str = "\
#pragma once
#define __host__
#define __device__
#define __global__
#define __shared__
#define __constant__
#define __managed__
#define __noinline__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __device_builtin__
#define __device_builtin_texture_type__
#define __device_builtin_surface_type__
#define __cudart_builtin__
#define __align__(n) __attribute__((aligned(n)))
#define __builtin_align__(a) __align__(a)
#define __no_return__ __attribute__((noreturn))
#define CUDARTAPI
#define CUDART_CB
#define __dv(v)
";

/// nccl.h includes the C++ runtime header and the half-precision headers, none of which it needs
/// for its declarations: stand-ins keep bindgen to the C API.
const NCCL_STUBS: &[(&str, &str)] = &[
    ("cuda_runtime.h", "#pragma once\n#include <cuda_runtime_api.h>\n"),
    ("cuda_fp16.h", "#pragma once\n"),
    ("cuda_bf16.h", "#pragma once\n"),
];

/// Writes the stand-in headers; returns the directory for the runtime and the one for NCCL.
fn write_stubs() -> Result<(PathBuf, PathBuf), String> {
    let dir = std::env::temp_dir().join(format!("cuda-rs-stub-headers-{}", std::process::id()));
    let write = |path: PathBuf, text: &str| -> Result<(), String> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    };
    write(dir.join("runtime/crt/host_defines.h"), HOST_DEFINES_STUB)?;
    for (name, text) in NCCL_STUBS {
        write(dir.join("nccl").join(name), text)?;
    }
    Ok((dir.join("runtime"), dir.join("nccl")))
}

/// `NVTX_CBID_<MODULE>_<Name> = <id>` gives `nvtx<Name>` the slot `(<MODULE>, id)`.
fn nvtx_slots(types_h: &Path) -> Result<BTreeMap<String, (String, u32)>, String> {
    let text = std::fs::read_to_string(types_h).map_err(|e| format!("{}: {e}", types_h.display()))?;
    let re = Regex::new(r"NVTX_CBID_(CORE2|CORE|CUDART|CUDA|OPENCL|SYNC)_(\w+)\s*=\s*(\d+)")
        .map_err(|e| e.to_string())?;
    let mut out = BTreeMap::new();
    for c in re.captures_iter(&text) {
        if &c[2] == "INVALID" {
            continue;
        }
        let id: u32 = c[3].parse().map_err(|e| format!("{}: {e}", &c[0]))?;
        out.insert(format!("nvtx{}", &c[2]), (c[1].to_string(), id));
    }
    Ok(out)
}

fn run_bindgen(spec: &CrateSpec) -> Result<syn::File, String> {
    let allow = format!("{}/.*", regex::escape(&spec.allow_dir.to_string_lossy()));
    let mut builder = bindgen::Builder::default()
        .header_contents("wrapper.h", &spec.wrapper)
        .allowlist_file(allow)
        .default_enum_style(bindgen::EnumVariation::NewType { is_bitfield: false, is_global: false })
        .derive_default(true)
        .derive_eq(true)
        .derive_hash(true)
        .impl_debug(false)
        .generate_comments(false)
        .layout_tests(true)
        .prepend_enum_name(false)
        .ctypes_prefix("::core::ffi")
        .use_core()
        .merge_extern_blocks(true)
        .rust_edition(bindgen::RustEdition::Edition2024)
        .rust_target(bindgen::RustTarget::stable(85, 0).map_err(|e| e.to_string())?)
        .formatter(bindgen::Formatter::None);
    for dir in &spec.include_dirs {
        builder = builder.clang_arg(format!("-I{}", dir.display()));
    }
    for d in &spec.defines {
        builder = builder.clang_arg(format!("-D{d}"));
    }
    let bindings = builder.generate().map_err(|e| format!("bindgen for {}: {e}", spec.dir))?;
    syn::parse_file(&bindings.to_string()).map_err(|e| format!("parsing bindgen output: {e}"))
}

/// A C function as bindgen saw it.
struct CFunction {
    declared: String,
    args: Vec<(String, String)>,
    ret: String,
    arg_types: Vec<syn::Type>,
    ret_type: Option<syn::Type>,
}

fn type_text(ty: &syn::Type) -> String {
    let file: syn::File = syn::parse_quote!(type T = #ty;);
    let text = prettyplease::unparse(&file);
    text.trim().trim_start_matches("type T = ").trim_end_matches(';').to_string()
}

fn generate_crate(spec: &CrateSpec) -> Result<Vec<GeneratedFile>, String> {
    let file = run_bindgen(spec)?;
    let mut types = Vec::new();
    let mut functions = Vec::new();
    let mut defined = BTreeSet::new();
    for item in file.items {
        match item {
            syn::Item::ForeignMod(m) => {
                for fi in m.items {
                    if let syn::ForeignItem::Fn(f) = fi {
                        functions.push(c_function(&f.sig));
                    }
                }
            }
            other => {
                if let Some(name) = item_name(&other) {
                    defined.insert(name);
                }
                types.push(other);
            }
        }
    }
    types.extend(enum_name_functions(&types)?);
    let macro_refs: Vec<&Path> = spec.macro_files.iter().map(PathBuf::as_path).collect();
    for constant in cmacros::cast_constants(&macro_refs)? {
        if defined.contains(&constant.name) {
            continue;
        }
        let rust_type = match constant.c_type.as_str() {
            "void *" | "void*" => "*mut ::core::ffi::c_void".to_string(),
            t if defined.contains(t) => t.to_string(),
            _ => continue,
        };
        let code = format!("pub const {}: {rust_type} = {} as {rust_type};", constant.name, constant.value);
        let item: syn::Item = syn::parse_str(&code).map_err(|e| format!("{code}: {e}"))?;
        defined.insert(constant.name);
        types.push(item);
    }
    let renames = cmacros::renames(&macro_refs, spec.prefix)?;
    let abi = AbiTable::new(&types);
    let header = |what: &str| {
        format!(
            "// @generated by `cargo xtask bindgen`. Do not edit: CI regenerates this file and fails on\n\
             // any difference.\n\
             // {what} from {}\n\
             // of {}.\n",
            spec.headers_named, spec.origin
        )
    };
    let types_text = format!(
        "{}\n{}",
        header("C types and constants"),
        prettyplease::unparse(&syn::File { shebang: None, attrs: vec![], items: types })
    );
    let functions_text =
        format!("{}\n{}", header("C functions"), render_functions(spec, &functions, &renames, &abi)?);
    let base = PathBuf::from(spec.dir).join("src/generated");
    Ok(vec![
        GeneratedFile { path: base.join("types.rs"), text: types_text },
        GeneratedFile { path: base.join("functions.rs"), text: functions_text },
    ])
}

/// For every newtype enum, a `name()` giving the C name of a value, so that statuses and
/// enumerators print by name without a call into the library.
fn enum_name_functions(items: &[syn::Item]) -> Result<Vec<syn::Item>, String> {
    let mut by_enum: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for item in items {
        let syn::Item::Impl(imp) = item else { continue };
        let syn::Type::Path(self_ty) = &*imp.self_ty else { continue };
        let Some(enum_name) = self_ty.path.get_ident().map(ToString::to_string) else { continue };
        for impl_item in &imp.items {
            let syn::ImplItem::Const(c) = impl_item else { continue };
            let syn::Expr::Call(call) = &c.expr else { continue };
            let Some(syn::Expr::Lit(lit)) = call.args.first() else { continue };
            let syn::Lit::Int(value) = &lit.lit else { continue };
            by_enum.entry(enum_name.clone()).or_default().push((c.ident.to_string(), value.to_string()));
        }
    }
    let mut out = Vec::new();
    for (enum_name, values) in by_enum {
        let mut seen = BTreeSet::new();
        let arms: String = values
            .iter()
            .filter(|(_, v)| seen.insert(v.clone()))
            .map(|(name, v)| format!("{v} => Some(\"{name}\"),"))
            .collect();
        let code = format!(
            "impl {enum_name} {{ \
             /// The C name of this value; `None` for a value the header does not know.\n\
             pub const fn name(self) -> Option<&'static str> {{ match self.0 {{ {arms} _ => None }} }} }}"
        );
        out.push(syn::parse_str(&code).map_err(|e| format!("{enum_name}: {e}"))?);
    }
    Ok(out)
}

fn item_name(item: &syn::Item) -> Option<String> {
    Some(match item {
        syn::Item::Const(c) => c.ident.to_string(),
        syn::Item::Type(t) => t.ident.to_string(),
        syn::Item::Struct(s) => s.ident.to_string(),
        syn::Item::Union(u) => u.ident.to_string(),
        syn::Item::Enum(e) => e.ident.to_string(),
        syn::Item::Static(s) => s.ident.to_string(),
        _ => return None,
    })
}

fn c_function(sig: &syn::Signature) -> CFunction {
    let args = sig
        .inputs
        .iter()
        .enumerate()
        .filter_map(|(i, a)| match a {
            syn::FnArg::Typed(p) => {
                let name = match &*p.pat {
                    syn::Pat::Ident(id) => id.ident.to_string(),
                    _ => format!("arg{i}"),
                };
                Some((name, type_text(&p.ty)))
            }
            syn::FnArg::Receiver(_) => None,
        })
        .collect();
    let ret_type = match &sig.output {
        syn::ReturnType::Default => None,
        syn::ReturnType::Type(_, t) => Some((**t).clone()),
    };
    let ret = ret_type.as_ref().map(type_text).unwrap_or_else(|| "()".to_string());
    let arg_types = sig
        .inputs
        .iter()
        .filter_map(|a| match a {
            syn::FnArg::Typed(p) => Some((*p.ty).clone()),
            syn::FnArg::Receiver(_) => None,
        })
        .collect();
    CFunction { declared: sig.ident.to_string(), args, ret, arg_types, ret_type }
}

fn strip_abi_suffix(name: &str) -> &str {
    let re_end = name.rfind("_v");
    match re_end {
        Some(i) if name[i + 2..].chars().all(|c| c.is_ascii_digit()) && i + 2 < name.len() => &name[..i],
        _ => name,
    }
}

/// The C names through which code reaches a declaration: the `#define`d names that expand to
/// it, and the declared name itself unless it is an ABI-suffixed spelling.
fn canonical_names(f: &CFunction, renames: &BTreeMap<String, Rename>) -> Vec<(String, Option<&'static str>)> {
    let mut names: Vec<(String, Option<&'static str>)> = renames
        .iter()
        .filter(|(_, r)| r.declared == f.declared)
        .map(|(canonical, r)| (canonical.clone(), r.per_thread))
        .collect();
    let suffixed = strip_abi_suffix(&f.declared) != f.declared;
    if (!suffixed || names.is_empty()) && !names.iter().any(|(n, _)| *n == f.declared) {
        names.push((f.declared.clone(), None));
    }
    names.sort();
    names
}

fn render_functions(
    spec: &CrateSpec,
    functions: &[CFunction],
    renames: &BTreeMap<String, Rename>,
    abi: &AbiTable,
) -> Result<String, String> {
    let mut lines = BTreeMap::new();
    // (symbol, version) of every driver ABI a declared name already reaches.
    let mut reached = BTreeSet::new();
    for f in functions {
        let args: Vec<String> = f.args.iter().map(|(n, t)| format!("{n}: {t}")).collect();
        let sig = format!("({}) -> {}", args.join(", "), f.ret);
        for (name, per_thread) in canonical_names(f, renames) {
            let tail = match &spec.flavor {
                Flavor::Driver { fallback_version } => {
                    let symbol = strip_abi_suffix(&f.declared);
                    let signature = abi.signature(&f.arg_types, f.ret_type.as_ref());
                    // A function without a typedef (none so far) is asked for at the header's
                    // own version.
                    let (v, ptv) = abi.versions(symbol, &signature).unwrap_or_else(|| {
                        eprintln!(
                            "note: no PFN typedef matches {}; using version {fallback_version}",
                            f.declared
                        );
                        (*fallback_version, 0)
                    });
                    reached.insert((symbol.to_string(), v));
                    format!("c\"{symbol}\", {v}, {ptv}")
                }
                Flavor::Runtime => {
                    let pt = per_thread.map(|s| format!("{}{s}", f.declared)).unwrap_or_default();
                    format!("c\"{}\", c\"{pt}\"", f.declared)
                }
                Flavor::Nccl => format!("c\"{}\"", f.declared),
                Flavor::Nvtx { slots } => match slots.get(&f.declared) {
                    Some((module, id)) => format!("{module}, {id}"),
                    None => return Err(format!("{}: no NVTX callback id", f.declared)),
                },
            };
            lines.insert(name.clone(), format!("    {name}{sig} => {tail};\n"));
        }
    }
    if let Flavor::Driver { .. } = spec.flavor {
        older_abi_lines(abi, &reached, &mut lines)?;
    }
    let body: String = lines.into_values().collect();
    Ok(format!("crate::{}! {{\n{body}}}\n", spec.macro_name))
}

/// The ABI versions of driver functions that no declared name reaches, each as
/// `<base>_v<version>` with the signature of its `PFN_<base>_v<version>` typedef, so that code
/// can call an older ABI on a driver that lacks the newer one.
fn older_abi_lines(
    abi: &AbiTable,
    reached: &BTreeSet<(String, i32)>,
    lines: &mut BTreeMap<String, String>,
) -> Result<(), String> {
    for v in abi.all_variants() {
        if reached.contains(&(v.base.clone(), v.version)) {
            continue;
        }
        let name = format!("{}_v{}", v.base, v.version);
        if lines.contains_key(&name) {
            return Err(format!("{name} is both declared and an ABI variant"));
        }
        let args: Vec<String> = v.params.iter().map(|(n, t)| format!("{n}: {}", type_text(t))).collect();
        let ret = v.output.as_ref().map(type_text).unwrap_or_else(|| "()".to_string());
        let line = format!(
            "    {name}({}) -> {ret} => c\"{}\", {}, {};\n",
            args.join(", "),
            v.base,
            v.version,
            v.per_thread_version
        );
        lines.insert(name, line);
    }
    Ok(())
}

/// Writes the generated files into `root`, returning their paths.
pub fn write_all(root: &Path, files: &[GeneratedFile]) -> Result<(), String> {
    for f in files {
        let path = root.join(&f.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        std::fs::write(&path, &f.text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(declared: &str) -> CFunction {
        CFunction {
            declared: declared.into(),
            args: vec![],
            ret: "()".into(),
            arg_types: vec![],
            ret_type: None,
        }
    }

    #[test]
    fn abi_suffixes_are_stripped_only_when_numeric() {
        assert_eq!(strip_abi_suffix("cuMemAlloc_v2"), "cuMemAlloc");
        assert_eq!(strip_abi_suffix("cuCtxCreate_v4"), "cuCtxCreate");
        assert_eq!(strip_abi_suffix("cuMemAlloc"), "cuMemAlloc");
        assert_eq!(strip_abi_suffix("cuFoo_v"), "cuFoo_v");
        assert_eq!(strip_abi_suffix("cuFoo_vx2"), "cuFoo_vx2");
    }

    #[test]
    fn canonical_names_follow_the_defines() {
        let mut renames = BTreeMap::new();
        renames
            .insert("cuMemAlloc".to_string(), Rename { declared: "cuMemAlloc_v2".into(), per_thread: None });
        renames.insert(
            "cuGraphInstantiate".to_string(),
            Rename { declared: "cuGraphInstantiateWithFlags".into(), per_thread: None },
        );
        renames.insert(
            "cuMemcpy".to_string(),
            Rename { declared: "cuMemcpy".into(), per_thread: Some("_ptds") },
        );
        let names = |d: &str| -> Vec<String> {
            canonical_names(&function(d), &renames).into_iter().map(|(n, _)| n).collect()
        };
        // The suffixed spelling is reached through its define only.
        assert_eq!(names("cuMemAlloc_v2"), ["cuMemAlloc"]);
        // A define pointing at another real function gives both names.
        assert_eq!(
            names("cuGraphInstantiateWithFlags"),
            ["cuGraphInstantiate", "cuGraphInstantiateWithFlags"]
        );
        // A suffixed declaration no define reaches keeps its own name.
        assert_eq!(names("cuCtxSynchronize_v2"), ["cuCtxSynchronize_v2"]);
        assert_eq!(
            canonical_names(&function("cuMemcpy"), &renames),
            [("cuMemcpy".to_string(), Some("_ptds"))]
        );
    }
}
