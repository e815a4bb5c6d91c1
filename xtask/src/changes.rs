//! What a regeneration changes in the API surface: functions added and removed, structs added,
//! removed or changed (fields and size), per crate. The report a maintainer reads before a
//! release.

use crate::bindgen::GeneratedFile;
use crate::syntax::type_text;
use regex::Regex;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::path::Path;

/// The surface of one generated crate.
#[derive(Default)]
struct Surface {
    functions: BTreeSet<String>,
    /// Struct name to its fields (`name: type`) and its size from the layout test.
    structs: BTreeMap<String, (Vec<String>, Option<usize>)>,
}

fn functions(text: &str) -> BTreeSet<String> {
    match Regex::new(r"(?m)^\s{4}(\w+)\(") {
        Ok(re) => re.captures_iter(text).map(|c| c[1].to_string()).collect(),
        Err(_) => BTreeSet::new(),
    }
}

/// The structs of `types_text` with their sizes from the layout checks, which are in
/// `layout_text` (`layout.rs`) or, in files generated before the split, in `types_text` itself.
fn structs(types_text: &str, layout_text: &str) -> BTreeMap<String, (Vec<String>, Option<usize>)> {
    let mut out = BTreeMap::new();
    let Ok(file) = syn::parse_file(types_text) else { return out };
    let sizes: BTreeMap<String, usize> =
        match Regex::new(r#""Size of (\w+)",?\s*\]\[[^\]]*?-\s*(\d+)usize\]"#) {
            Ok(re) => [types_text, layout_text]
                .iter()
                .flat_map(|text| re.captures_iter(text))
                .filter_map(|c| Some((c[1].to_string(), c[2].parse().ok()?)))
                .collect(),
            Err(_) => BTreeMap::new(),
        };
    for item in file.items {
        let (name, fields) = match item {
            syn::Item::Struct(s) => (s.ident.to_string(), s.fields),
            syn::Item::Union(u) => (u.ident.to_string(), syn::Fields::Named(u.fields)),
            _ => continue,
        };
        let fields = fields
            .iter()
            .map(|f| {
                let name = f.ident.as_ref().map(ToString::to_string).unwrap_or_else(|| "_".into());
                format!("{name}: {}", type_text(&f.ty))
            })
            .collect();
        let size = sizes.get(&name).copied();
        out.insert(name, (fields, size));
    }
    out
}

fn surface(functions_text: &str, types_text: &str, layout_text: &str) -> Surface {
    Surface { functions: functions(functions_text), structs: structs(types_text, layout_text) }
}

fn list(out: &mut String, title: &str, names: &[&String]) {
    if !names.is_empty() {
        let _ = writeln!(
            out,
            "  {title} ({}): {}",
            names.len(),
            names.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        );
    }
}

/// The changes from `old` to `new` of one crate, as text; empty when nothing changed.
fn compare(krate: &str, old: &Surface, new: &Surface) -> String {
    let mut out = String::new();
    let added: Vec<&String> = new.functions.difference(&old.functions).collect();
    let removed: Vec<&String> = old.functions.difference(&new.functions).collect();
    list(&mut out, "functions added", &added);
    list(&mut out, "functions removed", &removed);
    let new_structs: Vec<&String> = new.structs.keys().filter(|k| !old.structs.contains_key(*k)).collect();
    let gone_structs: Vec<&String> = old.structs.keys().filter(|k| !new.structs.contains_key(*k)).collect();
    list(&mut out, "structs added", &new_structs);
    list(&mut out, "structs removed", &gone_structs);
    for (name, (fields, size)) in &new.structs {
        let Some((old_fields, old_size)) = old.structs.get(name) else { continue };
        if fields == old_fields && size == old_size {
            continue;
        }
        let size_text = match (old_size, size) {
            (Some(a), Some(b)) if a != b => format!(", size {a} -> {b} bytes"),
            _ => String::new(),
        };
        let _ = writeln!(out, "  struct {name} changed{size_text}:");
        let old_set: BTreeSet<&String> = old_fields.iter().collect();
        let new_set: BTreeSet<&String> = fields.iter().collect();
        for f in old_fields.iter().filter(|f| !new_set.contains(f)) {
            let _ = writeln!(out, "    - {f}");
        }
        for f in fields.iter().filter(|f| !old_set.contains(f)) {
            let _ = writeln!(out, "    + {f}");
        }
    }
    if out.is_empty() { out } else { format!("{krate}:\n{out}") }
}

/// The report of what `files` change against the files committed under `root`.
pub fn report(root: &Path, files: &[GeneratedFile]) -> String {
    let text_of = |path: &Path| files.iter().find(|f| f.path == path).map(|f| f.text.as_str());
    let mut crates: BTreeSet<String> = BTreeSet::new();
    for f in files {
        if let Some(krate) = f.path.components().next() {
            crates.insert(krate.as_os_str().to_string_lossy().into_owned());
        }
    }
    let mut out = String::new();
    for krate in crates {
        let functions_path = Path::new(&krate).join("src/generated/functions.rs");
        let types_path = Path::new(&krate).join("src/generated/types.rs");
        let layout_path = Path::new(&krate).join("src/generated/layout.rs");
        let (Some(new_functions), Some(new_types)) = (text_of(&functions_path), text_of(&types_path)) else {
            continue;
        };
        let read = |p: &Path| std::fs::read_to_string(root.join(p)).unwrap_or_default();
        let old = surface(&read(&functions_path), &read(&types_path), &read(&layout_path));
        let new = surface(new_functions, new_types, text_of(&layout_path).unwrap_or_default());
        out.push_str(&compare(&krate, &old, &new));
    }
    if out.is_empty() { "no change to the API surface\n".into() } else { out }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD_TYPES: &str = "pub struct A { pub x: i32 }\n\
        const _: () = { [\"Size of A\"][::core::mem::size_of::<A>() - 4usize]; };\n\
        pub struct Gone { pub y: u8 }\n";
    // Files generated since the split keep the layout checks in `layout.rs`.
    const NEW_TYPES: &str = "pub struct A { pub x: i32, pub z: u64 }\n\
        pub struct Fresh { pub y: u8 }\n";
    const NEW_LAYOUT: &str = "const _: () = { [\"Size of A\"][::core::mem::size_of::<A>() - 16usize]; };\n";

    #[test]
    fn functions_and_structs_are_compared() {
        let old = surface("x! {\n    cuA() -> i32 => 1;\n    cuB() -> i32 => 1;\n}\n", OLD_TYPES, "");
        let new = surface("x! {\n    cuA() -> i32 => 1;\n    cuC() -> i32 => 1;\n}\n", NEW_TYPES, NEW_LAYOUT);
        let text = compare("cuhost-driver-sys", &old, &new);
        assert!(text.starts_with("cuhost-driver-sys:\n"), "{text}");
        assert!(text.contains("functions added (1): cuC"), "{text}");
        assert!(text.contains("functions removed (1): cuB"), "{text}");
        assert!(text.contains("structs added (1): Fresh"), "{text}");
        assert!(text.contains("structs removed (1): Gone"), "{text}");
        assert!(text.contains("struct A changed, size 4 -> 16 bytes:\n    + z: u64"), "{text}");
        assert_eq!(compare("c", &old, &old), "");
    }
}
