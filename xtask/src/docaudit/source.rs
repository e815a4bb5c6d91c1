//! Reading `cuhost`'s source: its modules with their items and docs, the syntax helpers the
//! checks share, and the address the `-sys` crates' generated function lists give each C function.

use proc_macro2::TokenTree;
use quote::ToTokens;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The crate audited, relative to the workspace root.
pub(super) const SOURCE: &str = "cuda-core/src";

/// The generated function lists of the `-sys` crates: each line ends with the address of the
/// section documenting that function.
pub(super) const FUNCTION_LISTS: &[&str] = &[
    "cuda-driver-sys/src/generated/functions.rs",
    "cudart-sys/src/generated/functions.rs",
    "nccl-sys/src/generated/functions.rs",
    "nvtx-sys/src/generated/functions.rs",
];

/// One module of the crate, as parsed.
pub(crate) struct Module {
    /// File, relative to the workspace root.
    pub(crate) file: String,
    /// `memory::buffer`; empty for the crate root.
    pub(crate) path: String,
    /// Reachable from outside the crate: every module from the root to it is `pub`.
    pub(crate) exposed: bool,
    /// Its `//!` documentation.
    pub(crate) doc: String,
    pub(crate) items: Vec<syn::Item>,
    /// The file's text, for the module a file holds; empty for an inline module.
    pub(crate) source: String,
}

/// What the checks need from the whole crate.
pub(crate) struct Crate {
    pub(crate) modules: Vec<Module>,
    /// The section address of every C function the `-sys` crates expose.
    pub(crate) pages: BTreeMap<String, String>,
    /// Whether the crate documentation states the thin-wrapper convention.
    pub(crate) convention: bool,
}

pub(crate) fn load_crate(root: &Path) -> Result<Crate, String> {
    let mut modules = Vec::new();
    let src = root.join(SOURCE);
    load_module(root, &src.join("lib.rs"), String::new(), true, &src, &mut modules)?;
    let mut pages = BTreeMap::new();
    for list in FUNCTION_LISTS {
        let path = root.join(list);
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        pages.extend(function_pages(&text));
    }
    let convention = modules.first().is_some_and(|m| states_convention(&m.doc));
    Ok(Crate { modules, pages, convention })
}

/// `name(…) -> … => …, "https://…";` lines of a generated function list: name → address.
pub(super) fn function_pages(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        let Some(open) = line.find('(') else { continue };
        let name = &line[..open];
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let Some(url_start) = line.rfind("\"https://") else { continue };
        let url = line[url_start + 1..].trim_end_matches(';').trim_end_matches('"');
        out.insert(name.to_string(), url.to_string());
    }
    out
}

/// Whether the crate documentation has a section (a heading) about thin wrappers.
pub(super) fn states_convention(crate_doc: &str) -> bool {
    headings(crate_doc).any(|h| h.to_ascii_lowercase().contains("thin wrapper"))
}

pub(super) fn load_module(
    root: &Path,
    file: &Path,
    path: String,
    exposed: bool,
    children: &Path,
    out: &mut Vec<Module>,
) -> Result<(), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let parsed = syn::parse_file(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    let rel = file.strip_prefix(root).unwrap_or(file).to_string_lossy().into_owned();
    let first = out.len();
    add_module(root, rel, path, exposed, doc_of(&parsed.attrs), parsed.items, children, out)?;
    if let Some(m) = out.get_mut(first) {
        m.source = text;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn add_module(
    root: &Path,
    file: String,
    path: String,
    exposed: bool,
    doc: String,
    items: Vec<syn::Item>,
    children: &Path,
    out: &mut Vec<Module>,
) -> Result<(), String> {
    let mut submodules = Vec::new();
    for item in &items {
        if let syn::Item::Mod(m) = item {
            if test_only(&m.attrs) {
                continue;
            }
            let name = m.ident.to_string();
            let sub_path = if path.is_empty() { name.clone() } else { format!("{path}::{name}") };
            let sub_exposed = exposed && matches!(m.vis, syn::Visibility::Public(_));
            submodules.push((m.clone(), sub_path, sub_exposed, children.join(&name)));
        }
    }
    out.push(Module { file: file.clone(), path, exposed, doc, items, source: String::new() });
    for (m, sub_path, sub_exposed, dir) in submodules {
        match m.content {
            Some((_, items)) => {
                add_module(root, file.clone(), sub_path, sub_exposed, doc_of(&m.attrs), items, &dir, out)?
            }
            None => {
                let flat = dir.with_extension("rs");
                let nested = dir.join("mod.rs");
                let found = if flat.is_file() { flat } else { nested };
                load_module(root, &found, sub_path, sub_exposed, &dir, out)?;
            }
        }
    }
    Ok(())
}

pub(super) fn qualified(path: &str, name: &str) -> String {
    if path.is_empty() { name.to_string() } else { format!("{path}::{name}") }
}

/// The name of the type an `impl` block is for.
pub(super) fn type_name(ty: &syn::Type) -> Option<String> {
    match ty {
        syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
        syn::Type::Reference(r) => type_name(&r.elem),
        _ => None,
    }
}

pub(crate) fn use_leaves(tree: &syn::UseTree, out: &mut BTreeSet<String>) {
    match tree {
        syn::UseTree::Path(p) => use_leaves(&p.tree, out),
        syn::UseTree::Name(n) => {
            out.insert(n.ident.to_string());
        }
        syn::UseTree::Rename(r) => {
            out.insert(r.rename.to_string());
        }
        syn::UseTree::Group(g) => g.items.iter().for_each(|t| use_leaves(t, out)),
        syn::UseTree::Glob(_) => {}
    }
}

/// The text of an item's doc comments.
pub(super) fn doc_of(attrs: &[syn::Attribute]) -> String {
    let mut doc = String::new();
    for attr in attrs {
        if let syn::Meta::NameValue(nv) = &attr.meta {
            if nv.path.is_ident("doc") {
                match &nv.value {
                    syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => doc.push_str(&s.value()),
                    // `#[doc = concat!("…", stringify!(…), "…")]`, as macros write: its literals.
                    syn::Expr::Macro(m) if m.mac.path.is_ident("concat") => {
                        for tree in m.mac.tokens.clone() {
                            if let TokenTree::Literal(lit) = tree {
                                if let syn::Lit::Str(s) = syn::Lit::new(lit) {
                                    doc.push_str(&s.value());
                                }
                            }
                        }
                    }
                    _ => {}
                }
                doc.push('\n');
            }
        }
    }
    doc
}

/// `#[cfg(test)]` or `#[cfg(doctest)]`: not part of the library.
pub(crate) fn test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && {
            let text = a.meta.to_token_stream().to_string();
            (text.contains("test") || text.contains("doctest")) && !text.contains("not")
        }
    })
}

/// `#[doc(hidden)]`.
pub(crate) fn hidden(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("doc") && matches!(&a.meta, syn::Meta::List(l) if l.tokens.to_string() == "hidden")
    })
}

/// The titles of the markdown headings of a doc comment.
pub(super) fn headings(doc: &str) -> impl Iterator<Item = &str> {
    doc.lines().filter_map(|l| {
        let l = l.trim();
        l.starts_with('#').then(|| l.trim_start_matches('#').trim())
    })
}
