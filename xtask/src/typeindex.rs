//! `cargo xtask type-index [--check]`: the guide's index from each public type of `cuhost` to
//! the chapters that show it (`docs/src/type-index.md`).
//!
//! A type is public when it is declared `pub` in a public module, or re-exported by a `pub use`
//! of one; the flag types the crate's `flags!` macro declares count too. A chapter shows a type
//! where its name stands in code: a fenced block or an inline span. The index lists, per type,
//! its shortest public path and the chapters naming it most, in the guide's order of chapters
//! on a tie; types no chapter shows are listed apart, so that the gap is visible. `--check`
//! fails when the committed page is not what this writes.

use crate::docaudit::source::{Crate, Module, hidden, load_crate, test_only, use_leaves};
use regex::Regex;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The page written, relative to the workspace root.
const PAGE: &str = "docs/src/type-index.md";
/// The chapters listed per type, at most.
const CHAPTERS_PER_TYPE: usize = 3;

/// Writes the index, or with `check` compares it with the committed page.
pub fn run(root: &Path, check: bool) -> Result<(), String> {
    let krate = load_crate(root)?;
    let types = public_types(&krate);
    let chapters = chapters(root)?;
    let page = render(&types, &chapters);
    let path = root.join(PAGE);
    if check {
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        if committed != page {
            return Err(format!("{PAGE} is out of date: run `cargo xtask type-index`"));
        }
        println!("type-index: {PAGE} is up to date ({} types)", types.len());
        return Ok(());
    }
    std::fs::write(&path, page).map_err(|e| format!("{}: {e}", path.display()))?;
    println!("type-index: wrote {PAGE} ({} types)", types.len());
    Ok(())
}

/// Every public type's name and its shortest public path (`memory::DeviceBuffer` or, where the
/// crate root re-exports it, `DeviceBuffer`), by name.
fn public_types(krate: &Crate) -> BTreeMap<String, String> {
    let mut paths: BTreeMap<String, String> = BTreeMap::new();
    let mut offer = |name: String, path: String| {
        let shorter = paths.get(&name).is_none_or(|p| path.len() < p.len());
        if shorter {
            paths.insert(name, path);
        }
    };
    let exposed: Vec<&Module> = krate.modules.iter().filter(|m| m.exposed).collect();
    let mut reexported: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for m in &exposed {
        for item in &m.items {
            if let syn::Item::Use(u) = item {
                if matches!(u.vis, syn::Visibility::Public(_)) && !hidden(&u.attrs) {
                    let mut leaves = BTreeSet::new();
                    use_leaves(&u.tree, &mut leaves);
                    for leaf in leaves {
                        reexported.entry(leaf).or_default().push(m.path.clone());
                    }
                }
            }
        }
    }
    for m in &krate.modules {
        for (name, attrs) in declared_types(&m.items) {
            if hidden(attrs) || test_only(attrs) {
                continue;
            }
            if m.exposed {
                offer(name.clone(), join(&m.path, &name));
            }
            for at in reexported.get(&name).into_iter().flatten() {
                offer(name.clone(), join(at, &name));
            }
        }
    }
    paths
}

/// The `pub` types declared among `items`: structs, enums, unions, traits, type aliases, and the
/// flag types of `flags!` invocations.
fn declared_types(items: &[syn::Item]) -> Vec<(String, &[syn::Attribute])> {
    let flag_type = Regex::new(r"pub struct (\w+)\s*:").ok();
    let mut out = Vec::new();
    for item in items {
        let (vis, ident, attrs) = match item {
            syn::Item::Struct(s) => (&s.vis, &s.ident, &s.attrs),
            syn::Item::Enum(e) => (&e.vis, &e.ident, &e.attrs),
            syn::Item::Union(u) => (&u.vis, &u.ident, &u.attrs),
            syn::Item::Trait(t) => (&t.vis, &t.ident, &t.attrs),
            syn::Item::Type(t) => (&t.vis, &t.ident, &t.attrs),
            syn::Item::Macro(m) if m.mac.path.is_ident("flags") => {
                let tokens = m.mac.tokens.to_string();
                if let Some(c) = flag_type.as_ref().and_then(|r| r.captures(&tokens)) {
                    out.push((c[1].to_string(), m.attrs.as_slice()));
                }
                continue;
            }
            _ => continue,
        };
        if matches!(vis, syn::Visibility::Public(_)) {
            out.push((ident.to_string(), attrs.as_slice()));
        }
    }
    out
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() { name.to_string() } else { format!("{path}::{name}") }
}

/// One chapter of the guide: its file, its title, and the code it holds.
struct Chapter {
    file: String,
    title: String,
    code: String,
}

/// The chapters of `docs/src/SUMMARY.md`, in its order, this page left out.
fn chapters(root: &Path) -> Result<Vec<Chapter>, String> {
    let src = root.join("docs/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).map_err(|e| format!("SUMMARY.md: {e}"))?;
    let entry = Regex::new(r"\[([^\]]+)\]\(([^)]+\.md)\)").map_err(|e| e.to_string())?;
    let page = Path::new(PAGE).file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let mut out = Vec::new();
    for c in entry.captures_iter(&summary) {
        let file = c[2].to_string();
        if file == page {
            continue;
        }
        let text = std::fs::read_to_string(src.join(&file)).map_err(|e| format!("{file}: {e}"))?;
        out.push(Chapter { file, title: c[1].to_string(), code: code_of(&text) });
    }
    Ok(out)
}

/// The code of a chapter: its fenced blocks and inline spans, joined by newlines.
fn code_of(text: &str) -> String {
    let mut code = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            code.push_str(line);
            code.push('\n');
        } else {
            for (i, span) in line.split('`').enumerate() {
                if i % 2 == 1 {
                    code.push_str(span);
                    code.push('\n');
                }
            }
        }
    }
    code
}

/// How many times `name` stands as a whole word in `code`.
fn mentions(code: &str, name: &str) -> usize {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    code.match_indices(name)
        .filter(|(at, _)| {
            let before = code[..*at].chars().next_back();
            let after = code[at + name.len()..].chars().next();
            !before.is_some_and(word) && !after.is_some_and(word)
        })
        .count()
}

fn render(types: &BTreeMap<String, String>, chapters: &[Chapter]) -> String {
    let mut shown = String::new();
    let mut missing = Vec::new();
    let mut sorted: Vec<(&String, &String)> = types.iter().collect();
    sorted.sort_by_key(|(name, path)| (name.to_lowercase(), path.to_string()));
    for (name, path) in sorted {
        let mut found: Vec<(usize, usize)> = chapters
            .iter()
            .enumerate()
            .map(|(i, c)| (mentions(&c.code, name), i))
            .filter(|(n, _)| *n > 0)
            .collect();
        found.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        if found.is_empty() {
            missing.push(format!("`{path}`"));
            continue;
        }
        let links: Vec<String> = found
            .iter()
            .take(CHAPTERS_PER_TYPE)
            .filter_map(|&(_, i)| chapters.get(i))
            .map(|c| format!("[{}]({})", c.title, c.file))
            .collect();
        shown.push_str(&format!("| `{path}` | {} |\n", links.join(", ")));
    }
    let mut page = String::from(
        "# Index of types\n\n\
         Each public type of the crate, by its shortest path, and the chapters whose code shows it most.\n\
         This page is written by `cargo xtask type-index`; CI checks that it is current.\n\n\
         | type | chapters |\n|---|---|\n",
    );
    page.push_str(&shown);
    if !missing.is_empty() {
        page.push_str("\nNo chapter shows these yet; their API documentation is the reference:\n");
        page.push_str(&missing.join(", "));
        page.push('\n');
    }
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_is_fenced_blocks_and_inline_spans() {
        let text = "Prose Stream here, `Event::new` there.\n```rust\nlet s = Stream::new();\n```\nStream.";
        let code = code_of(text);
        assert_eq!(mentions(&code, "Stream"), 1);
        assert_eq!(mentions(&code, "Event"), 1);
    }

    #[test]
    fn a_name_counts_as_a_whole_word_only() {
        assert_eq!(mentions("StreamFlags Stream MyStream Stream_x Stream::new", "Stream"), 2);
    }
}
