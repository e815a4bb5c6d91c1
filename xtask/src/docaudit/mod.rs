//! `cargo xtask doc-audit`: every public function of `cuhost` documents what its caller needs.
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
//!
//! One file per check: [`safety`], [`errors`], [`links`] and [`wrong_page`]; [`source`] reads
//! the crate and [`macros`] the methods that macros write.

mod errors;
mod links;
mod macros;
mod safety;
pub(crate) mod source;
#[cfg(test)]
mod tests;
mod wrong_page;

use proc_macro2::{Ident, TokenStream};
use quote::ToTokens;
use source::{Crate, Module, doc_of, hidden, load_crate, qualified, test_only, type_name, use_leaves};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

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
        findings.extend(wrong_page::wrong_pages(&m.file, &m.source, &krate.pages));
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
                    for (sig, attrs, block) in macros::macro_methods(&mac.mac.tokens) {
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
        links::c_calls(body.clone(), &mut calls);
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
    if safety::missing(f.sig, &doc) {
        report(Kind::Safety, String::new());
    }
    if errors::undocumented(krate, &f.sig.output, &doc, f.body.as_ref(), &calls) {
        report(Kind::Errors, String::new());
    }
    let unlinked = links::unlinked(&calls, &[doc.as_str(), f.type_doc, f.module.doc.as_str()]);
    if !unlinked.is_empty() {
        report(Kind::Link, unlinked.join(", "));
    }
}
