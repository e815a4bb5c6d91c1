//! `cargo xtask doc-audit`: every public function of `cuda-core` documents what its caller needs.
//!
//! For each public function and method (declared `pub` and reachable from outside the crate:
//! in a public module, re-exported by a `pub use`, a method of such a type, or a method of a
//! public trait), the audit reports:
//!
//! * an `unsafe` function whose doc has no `# Safety` section;
//! * a function returning `Result` whose doc says nothing of its errors: it needs an `# Errors`
//!   section, or a sentence naming an `Error::` variant or saying what is an error, fails, or is
//!   refused or rejected. A thin wrapper (one C call in its body) may instead link that call's
//!   section of NVIDIA's reference, when the crate documentation states the convention for
//!   thin wrappers (a section whose heading names them);
//! * a function that calls a C function of a `-sys` crate in its own body while neither its doc,
//!   the doc of the type its `impl` block is for, nor its module's doc links NVIDIA's
//!   documentation.
//!
//! Methods written by a `macro_rules!` macro are audited where the macro defines them.

use proc_macro2::{Group, Ident, TokenStream, TokenTree};
use quote::ToTokens;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The crate audited, relative to the workspace root.
const SOURCE: &str = "cuda-core/src";

/// The generated function lists of the `-sys` crates: each line ends with the address of the
/// section documenting that function.
const FUNCTION_LISTS: &[&str] = &[
    "cuda-driver-sys/src/generated/functions.rs",
    "cudart-sys/src/generated/functions.rs",
    "nccl-sys/src/generated/functions.rs",
    "nvtx-sys/src/generated/functions.rs",
];

/// The names under which `cuda-core` refers to the `-sys` crates.
const SYS_PATHS: &[&str] = &[
    "sys",
    "rt",
    "nccl",
    "cuda_driver_sys",
    "driver_sys",
    "cudart_sys",
    "runtime_sys",
    "nccl_sys",
    "nvtx_sys",
];

/// Where NVIDIA documents the C functions of the `-sys` crates.
const NVIDIA_DOCS: &str = "https://docs.nvidia.com/";
/// Where NVIDIA documents the NVTX C API.
const NVTX_DOCS: &str = "https://nvidia.github.io/NVTX/";

/// What a finding is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// An `unsafe` function without a `# Safety` section.
    Safety,
    /// A function returning `Result` whose doc does not say when it fails.
    Errors,
    /// A function calling a C function with no link to NVIDIA's documentation near it.
    Link,
    /// A doc link on a C function's name that leads to a page not documenting it.
    WrongPage,
}

impl Kind {
    const ALL: [Kind; 4] = [Kind::Safety, Kind::Errors, Kind::Link, Kind::WrongPage];

    fn describe(self) -> &'static str {
        match self {
            Kind::Safety => "unsafe, but its doc has no `# Safety` section",
            Kind::Errors => "returns `Result`, but its doc says nothing of its errors",
            Kind::Link => {
                "calls a C function, but no NVIDIA documentation link in its doc, its type's or its module's"
            }
            Kind::WrongPage => "a C function's name links a page that does not document it",
        }
    }

    fn short(self) -> &'static str {
        match self {
            Kind::Safety => "no `# Safety`",
            Kind::Errors => "errors not documented",
            Kind::Link => "no NVIDIA link",
            Kind::WrongPage => "linked to the wrong page",
        }
    }
}

/// One thing the audit found.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Finding {
    /// File, relative to the workspace root.
    pub file: String,
    /// Line of the function's name.
    pub line: usize,
    /// `Type::method` or `module::function`.
    pub item: String,
    /// What is missing.
    pub kind: Kind,
    /// The C functions called, for [`Kind::Link`].
    pub detail: String,
}

/// The C library a function belongs to, told by its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Library {
    Driver,
    Runtime,
    Nccl,
    Nvtx,
}

fn library_of(name: &str) -> Option<Library> {
    let after = |prefix: &str| {
        name.strip_prefix(prefix).is_some_and(|r| r.starts_with(|c: char| c.is_ascii_uppercase()))
    };
    if after("cuda") {
        Some(Library::Runtime)
    } else if after("cu") {
        Some(Library::Driver)
    } else if after("nccl") {
        Some(Library::Nccl)
    } else if after("nvtx") {
        Some(Library::Nvtx)
    } else {
        None
    }
}

/// Whether `doc` links documentation that covers a function of `library`.
fn links_docs(doc: &str, library: Library) -> bool {
    doc.contains(NVIDIA_DOCS) || (library == Library::Nvtx && doc.contains(NVTX_DOCS))
}

/// Whether `doc` links the page documenting the C function `name`: `page` itself (an anchor
/// allowed), or a page whose anchor is the function's name, as NCCL's per-topic pages have.
fn links_page(doc: &str, name: &str, page: &str) -> bool {
    urls(doc).any(|url| url_documents(url, name, page))
}

fn url_documents(url: &str, name: &str, page: &str) -> bool {
    let (base, anchor) = url.split_once('#').unwrap_or((url, ""));
    base == page || anchor.eq_ignore_ascii_case(name)
}

/// The `https://` addresses in a text.
fn urls(text: &str) -> impl Iterator<Item = &str> {
    text.match_indices("https://").map(move |(i, _)| {
        let rest = &text[i..];
        let end = rest
            .find(|c: char| c.is_whitespace() || matches!(c, ')' | '>' | '"' | '`'))
            .unwrap_or(rest.len());
        &rest[..end]
    })
}

/// Every doc-comment link of the form ``[`cuName`](address)`` in a file whose address is not
/// a page documenting that function.
fn wrong_pages(file: &str, text: &str, pages: &BTreeMap<String, String>) -> Vec<Finding> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if !(trimmed.starts_with("///") || trimmed.starts_with("//!")) {
            continue;
        }
        let mut rest = trimmed;
        while let Some(start) = rest.find("[`") {
            rest = &rest[start + 2..];
            let Some(end) = rest.find("`](") else { break };
            let name = &rest[..end];
            let after = &rest[end + 3..];
            let url = after.split(')').next().unwrap_or_default();
            if let Some(page) = pages.get(name) {
                if url.starts_with("https://") && !url_documents(url, name, page) {
                    out.push(Finding {
                        file: file.to_string(),
                        line: n + 1,
                        item: name.to_string(),
                        kind: Kind::WrongPage,
                        detail: format!("{url}; it is documented in {page}"),
                    });
                }
            }
        }
    }
    out
}

/// One module of the crate, as parsed.
struct Module {
    /// File, relative to the workspace root.
    file: String,
    /// `memory::buffer`; empty for the crate root.
    path: String,
    /// Reachable from outside the crate: every module from the root to it is `pub`.
    exposed: bool,
    /// Its `//!` documentation.
    doc: String,
    items: Vec<syn::Item>,
    /// The file's text, for the module a file holds; empty for an inline module.
    source: String,
}

/// What the checks need from the whole crate.
struct Crate {
    modules: Vec<Module>,
    /// The section address of every C function the `-sys` crates expose.
    pages: BTreeMap<String, String>,
    /// Whether the crate documentation states the thin-wrapper convention.
    convention: bool,
}

/// Runs the audit on the workspace at `root`; an error when it finds anything.
pub fn run(root: &Path) -> Result<(), String> {
    let krate = load_crate(root)?;
    let findings = audit(&krate);
    for f in &findings {
        let detail = if f.detail.is_empty() { String::new() } else { format!(" ({})", f.detail) };
        println!("{}:{}: {}: {}{detail}", f.file, f.line, f.item, f.kind.describe());
    }
    let count = |k: Kind| findings.iter().filter(|f| f.kind == k).count();
    let summary: Vec<String> = Kind::ALL.iter().map(|&k| format!("{} {}", count(k), k.short())).collect();
    println!(
        "doc-audit: {} findings ({}){}",
        findings.len(),
        summary.join(", "),
        if krate.convention { "" } else { "; the crate docs state no thin-wrapper convention" }
    );
    if findings.is_empty() {
        Ok(())
    } else {
        Err(format!("{} public items are missing documentation", findings.len()))
    }
}

fn load_crate(root: &Path) -> Result<Crate, String> {
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
fn function_pages(text: &str) -> BTreeMap<String, String> {
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
fn states_convention(crate_doc: &str) -> bool {
    headings(crate_doc).any(|h| h.to_ascii_lowercase().contains("thin wrapper"))
}

fn load_module(
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

fn audit(krate: &Crate) -> Vec<Finding> {
    // Names re-exported by a `pub use` of a public module.
    let mut reexported = BTreeSet::new();
    for m in krate.modules.iter().filter(|m| m.exposed) {
        for item in &m.items {
            if let syn::Item::Use(u) = item {
                if matches!(u.vis, syn::Visibility::Public(_)) {
                    use_leaves(&u.tree, &mut reexported);
                }
            }
        }
    }
    let public = |m: &Module, vis: &syn::Visibility, ident: &Ident| {
        matches!(vis, syn::Visibility::Public(_)) && (m.exposed || reexported.contains(&ident.to_string()))
    };
    // The docs of every public type, by name, and which of them can be named outside the crate.
    let mut type_docs: BTreeMap<String, String> = BTreeMap::new();
    let mut public_types = BTreeSet::new();
    for m in &krate.modules {
        for item in &m.items {
            let (vis, ident, attrs) = match item {
                syn::Item::Struct(s) => (&s.vis, &s.ident, &s.attrs),
                syn::Item::Enum(e) => (&e.vis, &e.ident, &e.attrs),
                syn::Item::Union(u) => (&u.vis, &u.ident, &u.attrs),
                syn::Item::Trait(t) => (&t.vis, &t.ident, &t.attrs),
                syn::Item::Type(t) => (&t.vis, &t.ident, &t.attrs),
                _ => continue,
            };
            type_docs.entry(ident.to_string()).or_default().push_str(&doc_of(attrs));
            if public(m, vis, ident) {
                public_types.insert(ident.to_string());
            }
        }
    }
    let mut findings = Vec::new();
    for m in &krate.modules {
        findings.extend(wrong_pages(&m.file, &m.source, &krate.pages));
        let mut audit_fn = |item: String,
                            sig: &syn::Signature,
                            attrs: &[syn::Attribute],
                            body: Option<TokenStream>,
                            type_doc: &str| {
            let f = Function { module: m, item, sig, attrs, body, type_doc };
            check(krate, &f, &mut findings);
        };
        for item in &m.items {
            match item {
                syn::Item::Fn(f) if public(m, &f.vis, &f.sig.ident) && !test_only(&f.attrs) => {
                    let name = qualified(&m.path, &f.sig.ident.to_string());
                    audit_fn(name, &f.sig, &f.attrs, Some(f.block.to_token_stream()), "");
                }
                syn::Item::Impl(imp) if imp.trait_.is_none() && !test_only(&imp.attrs) => {
                    let Some(ty) = type_name(&imp.self_ty) else { continue };
                    if !public_types.contains(&ty) {
                        continue;
                    }
                    let type_doc = type_docs.get(&ty).map(String::as_str).unwrap_or_default();
                    for ii in &imp.items {
                        if let syn::ImplItem::Fn(f) = ii {
                            if matches!(f.vis, syn::Visibility::Public(_)) && !test_only(&f.attrs) {
                                let name = format!("{ty}::{}", f.sig.ident);
                                audit_fn(name, &f.sig, &f.attrs, Some(f.block.to_token_stream()), type_doc);
                            }
                        }
                    }
                }
                syn::Item::Trait(t) if public(m, &t.vis, &t.ident) => {
                    let type_doc = doc_of(&t.attrs);
                    for ti in &t.items {
                        if let syn::TraitItem::Fn(f) = ti {
                            let name = format!("{}::{}", t.ident, f.sig.ident);
                            let body = f.default.as_ref().map(ToTokens::to_token_stream);
                            audit_fn(name, &f.sig, &f.attrs, body, &type_doc);
                        }
                    }
                }
                syn::Item::Macro(mac) if mac.mac.path.is_ident("macro_rules") => {
                    let macro_name = mac.ident.as_ref().map(ToString::to_string).unwrap_or_default();
                    for (sig, attrs, block) in macro_methods(&mac.mac.tokens) {
                        let name = format!("{macro_name}!::{}", sig.ident);
                        audit_fn(name, &sig, &attrs, Some(block), "");
                    }
                }
                _ => {}
            }
        }
    }
    findings.sort();
    findings
}

/// A function being audited.
struct Function<'a> {
    module: &'a Module,
    item: String,
    sig: &'a syn::Signature,
    attrs: &'a [syn::Attribute],
    body: Option<TokenStream>,
    type_doc: &'a str,
}

fn check(krate: &Crate, f: &Function<'_>, findings: &mut Vec<Finding>) {
    if hidden(f.attrs) {
        return;
    }
    let doc = doc_of(f.attrs);
    let mut calls = BTreeSet::new();
    if let Some(body) = &f.body {
        c_calls(body.clone(), &mut calls);
    }
    let mut report = |kind: Kind, detail: String| {
        findings.push(Finding {
            file: f.module.file.clone(),
            line: f.sig.ident.span().start().line,
            item: f.item.clone(),
            kind,
            detail,
        });
    };
    if f.sig.unsafety.is_some() && !headings(&doc).any(|h| h == "Safety") {
        report(Kind::Safety, String::new());
    }
    if returns_result(&f.sig.output) && !says_errors(&doc) {
        // A body that makes errors of its own (`Error::…`) is more than a wrapper.
        let thin_wrapper = krate.convention
            && calls.len() == 1
            && !f.body.as_ref().is_some_and(makes_errors)
            && calls.iter().all(|c| krate.pages.get(c).is_some_and(|page| links_page(&doc, c, page)));
        if !thin_wrapper {
            report(Kind::Errors, String::new());
        }
    }
    let unlinked: Vec<&str> = calls
        .iter()
        .filter(|c| {
            let lib = library_of(c).unwrap_or(Library::Driver);
            ![doc.as_str(), f.type_doc, f.module.doc.as_str()].iter().any(|d| links_docs(d, lib))
        })
        .map(String::as_str)
        .collect();
    if !unlinked.is_empty() {
        report(Kind::Link, unlinked.join(", "));
    }
}

fn qualified(path: &str, name: &str) -> String {
    if path.is_empty() { name.to_string() } else { format!("{path}::{name}") }
}

/// The name of the type an `impl` block is for.
fn type_name(ty: &syn::Type) -> Option<String> {
    match ty {
        syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
        syn::Type::Reference(r) => type_name(&r.elem),
        _ => None,
    }
}

fn use_leaves(tree: &syn::UseTree, out: &mut BTreeSet<String>) {
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
fn doc_of(attrs: &[syn::Attribute]) -> String {
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
fn test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && {
            let text = a.meta.to_token_stream().to_string();
            (text.contains("test") || text.contains("doctest")) && !text.contains("not")
        }
    })
}

/// `#[doc(hidden)]`.
fn hidden(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("doc") && matches!(&a.meta, syn::Meta::List(l) if l.tokens.to_string() == "hidden")
    })
}

/// The titles of the markdown headings of a doc comment.
fn headings(doc: &str) -> impl Iterator<Item = &str> {
    doc.lines().filter_map(|l| {
        let l = l.trim();
        l.starts_with('#').then(|| l.trim_start_matches('#').trim())
    })
}

fn returns_result(output: &syn::ReturnType) -> bool {
    match output {
        syn::ReturnType::Type(_, ty) => match &**ty {
            syn::Type::Path(p) => p.path.segments.last().is_some_and(|s| s.ident == "Result"),
            _ => false,
        },
        syn::ReturnType::Default => false,
    }
}

/// Whether a doc says how the function fails.
fn says_errors(doc: &str) -> bool {
    if headings(doc).any(|h| h == "Errors") || doc.contains("Error::") {
        return true;
    }
    let lower = doc.to_ascii_lowercase();
    lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .any(|w| matches!(w, "error" | "errors" | "fails" | "refused" | "refuses" | "rejected"))
}

/// Every `<sys crate>::<C function>` path in `tokens`, macro arguments included.
fn c_calls(tokens: TokenStream, out: &mut BTreeSet<String>) {
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    for (i, tree) in trees.iter().enumerate() {
        match tree {
            TokenTree::Group(g) => c_calls(g.stream(), out),
            TokenTree::Ident(base) if SYS_PATHS.iter().any(|p| base == p) => {
                let path_sep = matches!(
                    (trees.get(i + 1), trees.get(i + 2)),
                    (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b))) if a.as_char() == ':' && b.as_char() == ':'
                );
                // `sys::cudaMemcpyKind::…` names a type, not a function.
                let type_path = matches!(
                    (trees.get(i + 4), trees.get(i + 5)),
                    (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b))) if a.as_char() == ':' && b.as_char() == ':'
                );
                if let (true, false, Some(TokenTree::Ident(name))) = (path_sep, type_path, trees.get(i + 3)) {
                    let name = name.to_string();
                    if library_of(&name).is_some() {
                        out.insert(name);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Whether `tokens` name a variant or constructor of `Error` (`Error::invalid`, …).
fn makes_errors(tokens: &TokenStream) -> bool {
    let trees: Vec<TokenTree> = tokens.clone().into_iter().collect();
    trees.iter().enumerate().any(|(i, tree)| match tree {
        TokenTree::Group(g) => makes_errors(&g.stream()),
        TokenTree::Ident(e) if e == "Error" => matches!(
            (trees.get(i + 1), trees.get(i + 2)),
            (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b))) if a.as_char() == ':' && b.as_char() == ':'
        ),
        _ => false,
    })
}

/// The public methods a `macro_rules!` macro writes into `impl` blocks: each rule's expansion,
/// with its `$` fragments made plain, read as the body of an `impl`.
fn macro_methods(rules: &TokenStream) -> Vec<(syn::Signature, Vec<syn::Attribute>, TokenStream)> {
    let trees: Vec<TokenTree> = rules.clone().into_iter().collect();
    let mut out = Vec::new();
    for (i, tree) in trees.iter().enumerate() {
        let TokenTree::Group(expansion) = tree else { continue };
        let arrow = i >= 2
            && matches!(
                (&trees[i - 2], &trees[i - 1]),
                (TokenTree::Punct(a), TokenTree::Punct(b)) if a.as_char() == '=' && b.as_char() == '>'
            );
        if !arrow {
            continue;
        }
        let body = plain(expansion.stream());
        let wrapped = quote::quote!(impl MacroExpansion { #body });
        let Ok(imp) = syn::parse2::<syn::ItemImpl>(wrapped) else { continue };
        for item in imp.items {
            if let syn::ImplItem::Fn(f) = item {
                if matches!(f.vis, syn::Visibility::Public(_)) {
                    out.push((f.sig, f.attrs, f.block.to_token_stream()));
                }
            }
        }
    }
    out
}

/// A macro expansion's tokens with `$crate` as `crate`, `$name` as a plain identifier, and
/// each repetition `$( … ) sep op` written once.
fn plain(tokens: TokenStream) -> TokenStream {
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    let mut out = TokenStream::new();
    let mut i = 0;
    while i < trees.len() {
        match (&trees[i], trees.get(i + 1)) {
            (TokenTree::Punct(p), Some(TokenTree::Ident(name))) if p.as_char() == '$' => {
                let plain_name = if name == "crate" { "crate".to_string() } else { format!("macro_{name}") };
                out.extend([TokenTree::Ident(Ident::new(&plain_name, name.span()))]);
                i += 2;
            }
            (TokenTree::Punct(p), Some(TokenTree::Group(g))) if p.as_char() == '$' => {
                out.extend(plain(g.stream()));
                i += 2;
                // The repetition operator, after an optional separator.
                let is_op = |t: Option<&TokenTree>| matches!(t, Some(TokenTree::Punct(p)) if matches!(p.as_char(), '*' | '+' | '?'));
                if is_op(trees.get(i)) {
                    i += 1;
                } else if is_op(trees.get(i + 1)) {
                    i += 2;
                }
            }
            (TokenTree::Group(g), _) => {
                let mut inner = Group::new(g.delimiter(), plain(g.stream()));
                inner.set_span(g.span());
                out.extend([TokenTree::Group(inner)]);
                i += 1;
            }
            (t, _) => {
                out.extend([t.clone()]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIB: &str = r#"
//! A crate.
//!
//! # Errors of thin wrappers
//!
//! A thin wrapper returns the status of its one call.

pub mod public;
mod private;
pub use private::Exported;
"#;

    const PUBLIC: &str = r#"
//! A public module; no link here.
use cuda_driver_sys as sys;

/// Allocates.
pub fn undocumented_errors() -> Result<(), Error> { Ok(()) }

/// Allocates; fails with [`Error::Driver`] when out of memory.
pub fn documented_errors() -> crate::Result<()> { Ok(()) }

/// Reads memory.
pub unsafe fn no_safety() {}

/// Reads memory.
///
/// # Safety
///
/// The memory must be readable.
pub unsafe fn with_safety() {}

/// Frees ([`cuMemFree`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
pub fn thin_wrapper() -> Result<()> { check("cuMemFree", unsafe { sys::cuMemFree(0) }) }

/// Frees and synchronizes.
pub fn unlinked_calls() -> Result<()> {
    check("cuMemFree", unsafe { sys::cuMemFree(0) })?;
    check!(sys::cuCtxSynchronize());
    Ok(())
}

/// Frees ([`cuMemFree`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)).
pub fn wrong_page() {}

/// Frees ([`cuMemFree`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
pub fn checks_first(p: u64) -> Result<()> {
    if p == 0 { return Err(Error::invalid("checks_first", "null")); }
    check("cuMemFree", unsafe { sys::cuMemFree(p) })
}

pub(crate) fn internal() -> Result<()> { Ok(()) }

/// A type whose doc links the section
/// ([Streams](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)).
pub struct Stream;

impl Stream {
    /// Waits; an error when the stream failed.
    pub fn synchronize(&self) -> Result<()> { check("cuStreamSynchronize", unsafe { sys::cuStreamSynchronize(0) }) }
    fn private() -> Result<()> { Ok(()) }
}

/// Names things.
pub fn nvtx_call() { unsafe { sys::nvtxMarkA(c"m".as_ptr()) } }

macro_rules! attributes {
    ($fn:ident, $attr:ident) => {
        #[doc = concat!("The value of `", stringify!($attr), "`; fails when the driver refuses.")]
        pub fn $fn(&self) -> Result<i32> { self.attribute($attr) }
    };
}

macro_rules! views {
    ($name:literal) => {
        /// A slice.
        pub fn slice(&self, range: $crate::Range) -> $crate::Result<usize> { Ok(0) }
        $(
            /// Repeated.
            pub fn repeated(&self) {}
        )*
    };
}

#[cfg(test)]
mod tests {
    pub fn test_helper() -> Result<()> { Ok(()) }
}
"#;

    const PRIVATE: &str = r#"
//! See [Memory](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html).
/// Exported through `pub use`.
pub struct Exported;
/// Not exported.
pub struct Hidden;
impl Exported {
    /// Gets it.
    pub fn get(&self) -> Result<u32> { Ok(unsafe { sys::cuDriverGetVersion() }) }
}
impl Hidden {
    /// Gets it.
    pub fn get(&self) -> Result<u32> { Ok(0) }
}
"#;

    fn krate(lib: &str) -> Result<Crate, String> {
        let dir = std::env::temp_dir().join(format!("xtask-docaudit-{}-{}", std::process::id(), lib.len()));
        let src = dir.join(SOURCE);
        std::fs::create_dir_all(&src).map_err(|e| e.to_string())?;
        for (name, text) in [("lib.rs", lib), ("public.rs", PUBLIC), ("private.rs", PRIVATE)] {
            std::fs::write(src.join(name), text).map_err(|e| e.to_string())?;
        }
        let mut modules = Vec::new();
        let loaded = load_module(&dir, &src.join("lib.rs"), String::new(), true, &src, &mut modules);
        let _ = std::fs::remove_dir_all(&dir);
        loaded?;
        let pages = function_pages(
            "crate::driver_functions! {\n    cuMemFree(dptr: CUdeviceptr) -> CUresult => c\"cuMemFree\", 3020, 0, \
             \"cuda.h\", \"Memory Management\", \"https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html\";\n}\n",
        );
        let convention = modules.first().is_some_and(|m| states_convention(&m.doc));
        Ok(Crate { modules, pages, convention })
    }

    fn found(findings: &[Finding]) -> Vec<(String, Kind)> {
        findings.iter().map(|f| (f.item.clone(), f.kind)).collect()
    }

    #[test]
    fn each_kind_is_found_where_it_is_missing_and_only_there() -> Result<(), String> {
        let k = krate(LIB)?;
        assert!(k.convention);
        let findings = audit(&k);
        let mut got = found(&findings);
        got.sort();
        assert_eq!(got, expected());
        let unlinked = findings.iter().find(|f| f.kind == Kind::Link && f.item.ends_with("unlinked_calls"));
        assert_eq!(unlinked.map(|f| f.detail.as_str()), Some("cuCtxSynchronize, cuMemFree"));
        assert!(findings.iter().all(|f| f.line > 0 && f.file.ends_with(".rs")));
        Ok(())
    }

    fn expected() -> Vec<(String, Kind)> {
        let mut v = vec![
            ("public::no_safety".to_string(), Kind::Safety),
            ("public::undocumented_errors".to_string(), Kind::Errors),
            ("public::checks_first".to_string(), Kind::Errors),
            ("cuMemFree".to_string(), Kind::WrongPage),
            ("public::unlinked_calls".to_string(), Kind::Errors),
            ("public::unlinked_calls".to_string(), Kind::Link),
            ("public::nvtx_call".to_string(), Kind::Link),
            ("Exported::get".to_string(), Kind::Errors),
            ("views!::slice".to_string(), Kind::Errors),
        ];
        v.sort();
        v
    }

    #[test]
    fn without_the_convention_a_thin_wrapper_must_say_how_it_fails() -> Result<(), String> {
        let k = krate("//! A crate.\n\npub mod public;\nmod private;\npub use private::Exported;\n")?;
        assert!(!k.convention);
        let findings = audit(&k);
        assert!(findings.iter().any(|f| f.item == "public::thin_wrapper" && f.kind == Kind::Errors));
        Ok(())
    }

    #[test]
    fn errors_are_recognised_by_section_variant_or_wording() {
        assert!(says_errors("Does it.\n\n# Errors\n\nWhen out of memory."));
        assert!(says_errors("Fails with [`Error::InvalidArgument`] for zero."));
        assert!(says_errors("Refused when the stream is capturing."));
        assert!(says_errors("A length of zero is rejected."));
        assert!(!says_errors("Allocates memory; errorless in practice."));
        assert!(!says_errors("Allocates memory."));
    }

    #[test]
    fn a_page_is_recognised_by_address_or_by_the_anchor_of_the_function() {
        let nccl = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api.html";
        let doc = "Sums ([`ncclAllReduce`](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/colls.html#ncclallreduce)).";
        assert!(links_page(doc, "ncclAllReduce", nccl));
        assert!(!links_page(doc, "ncclBroadcast", nccl));
        let mem = "https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html";
        assert!(links_page(&format!("See <{mem}#group__CUDA__MEM_1gabc>."), "cuMemAlloc", mem));
        assert!(!links_page(
            "See <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__CTX.html>.",
            "cuMemAlloc",
            mem
        ));
    }

    #[test]
    fn c_functions_are_told_from_other_paths() {
        let mut calls = BTreeSet::new();
        let tokens: TokenStream = "check(\"x\", unsafe { sys::cuMemAlloc(&mut p, n) }); \
            let s = sys::CUresult::CUDA_SUCCESS; rt::cudaMalloc(p, n); nccl::ncclAllReduce(); \
            rt::cudaMemcpy(d, s, n, rt::cudaMemcpyKind::cudaMemcpyDefault); \
            other::cuNotSys(); sys::per_thread_default_stream();"
            .parse()
            .unwrap_or_default();
        c_calls(tokens, &mut calls);
        assert_eq!(
            calls.into_iter().collect::<Vec<_>>(),
            ["cuMemAlloc", "cudaMalloc", "cudaMemcpy", "ncclAllReduce"]
        );
        assert_eq!(library_of("cudaMalloc"), Some(Library::Runtime));
        assert_eq!(library_of("cuMemAlloc"), Some(Library::Driver));
        assert_eq!(library_of("current"), None);
    }
}
