//! The headers' `*_INITIALIZER` macros as Rust constants.
//!
//! NCCL's versioned structs (`ncclConfig_t` and its siblings) must start from their
//! `NCCL_CONFIG_INITIALIZER`: size, magic, the header's version and every option undefined. The
//! structs grow with each NCCL release, so a Rust struct literal written against one header does
//! not compile against the next. The generator turns each positional initializer whose first
//! element is `sizeof(T)` into `pub const NAME: T`, so that the safe layer starts from the
//! constant of whichever header the bindings came from and sets only the fields it knows.

use crate::syntax::type_text;
use regex::Regex;
use std::collections::BTreeMap;
use std::path::Path;

/// One `#define NAME { sizeof(T), ... }` of a header: its name, the type and the elements.
#[derive(Debug, PartialEq)]
pub struct Initializer {
    /// The macro's name, e.g. `NCCL_CONFIG_INITIALIZER`.
    pub name: String,
    /// The C type named by the first element's `sizeof`.
    pub c_type: String,
    /// Every element as written, comments removed, `sizeof(T)` included.
    pub elements: Vec<String>,
}

/// The macros of `text` with their continuation lines joined: `(name, body)` pairs.
fn macros(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        let Some(rest) = t.strip_prefix('#').map(str::trim_start).and_then(|r| r.strip_prefix("define"))
        else {
            continue;
        };
        let mut body = rest.to_string();
        while body.trim_end().ends_with('\\') {
            let trimmed = body.trim_end();
            body = trimmed[..trimmed.len() - 1].to_string();
            match lines.next() {
                Some(next) => {
                    body.push(' ');
                    body.push_str(next);
                }
                None => break,
            }
        }
        let body = body.trim();
        let (name, value) = body.split_once(char::is_whitespace).unwrap_or((body, ""));
        if !name.contains('(') {
            out.push((name.to_string(), value.trim().to_string()));
        }
    }
    out
}

/// Removes `/* ... */` comments.
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("/*") {
        out.push_str(&rest[..start]);
        match rest[start + 2..].find("*/") {
            Some(end) => rest = &rest[start + 2 + end + 2..],
            None => return out,
        }
    }
    out.push_str(rest);
    out
}

/// `text` split at the commas outside parentheses.
fn top_level_split(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out
}

/// Function-like macro calls that headers use in initializers, and the object-like macro of the
/// same header that expands to the same value.
const SAME_VALUE: &[(&str, &str)] =
    &[("NCCL_VERSION(NCCL_MAJOR,NCCL_MINOR,NCCL_PATCH)", "NCCL_VERSION_CODE")];

/// An element with its spaces removed inside calls, and known calls replaced ([`SAME_VALUE`]).
fn normalise(element: &str) -> String {
    let e = element.trim();
    let compact: String = e.chars().filter(|c| !c.is_whitespace()).collect();
    match SAME_VALUE.iter().find(|(call, _)| *call == compact) {
        Some((_, same)) => same.to_string(),
        None => e.to_string(),
    }
}

/// Every positional initializer macro of `files` whose first element is `sizeof(T)`, and every
/// plain alias (`#define A B`) of the same files, for resolving the elements.
pub fn read(files: &[&Path]) -> Result<(Vec<Initializer>, BTreeMap<String, String>), String> {
    let sizeof = Regex::new(r"^sizeof\s*\(\s*(\w+)\s*\)$").map_err(|e| e.to_string())?;
    let ident = Regex::new(r"^\w+$").map_err(|e| e.to_string())?;
    let mut found = Vec::new();
    let mut aliases = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
        for (name, value) in macros(&text) {
            let value = strip_comments(&value);
            let value = value.trim();
            if ident.is_match(value) {
                aliases.insert(name, value.to_string());
                continue;
            }
            let Some(inner) = value.strip_prefix('{').and_then(|v| v.strip_suffix('}')) else { continue };
            let elements: Vec<String> =
                top_level_split(inner).into_iter().map(normalise).filter(|e| !e.is_empty()).collect();
            let Some(c) = elements.first().and_then(|first| sizeof.captures(first)) else { continue };
            found.push(Initializer { name, c_type: c[1].to_string(), elements });
        }
    }
    Ok((found, aliases))
}

/// Whether a field of type `ty` holds a pointer, through the bindings' type aliases.
fn is_pointer(ty: &syn::Type, typedefs: &BTreeMap<String, String>) -> bool {
    let mut text = type_text(ty);
    for _ in 0..8 {
        if text.starts_with('*') {
            return true;
        }
        match typedefs.get(&text) {
            Some(next) => text = next.clone(),
            None => break,
        }
    }
    false
}

/// The Rust expression for one element, given the field's type, or `None` for an element the
/// generator cannot translate.
fn element(
    text: &str,
    field_type: &syn::Type,
    constants: &BTreeMap<String, String>,
    aliases: &BTreeMap<String, String>,
    typedefs: &BTreeMap<String, String>,
) -> Option<String> {
    let mut text = text.to_string();
    for _ in 0..8 {
        match aliases.get(&text) {
            Some(next) if !constants.contains_key(&text) => text = next.clone(),
            _ => break,
        }
    }
    if let Some(t) = text.strip_prefix("sizeof").map(str::trim) {
        let t = t.strip_prefix('(')?.strip_suffix(')')?.trim();
        return Some(format!("::core::mem::size_of::<{t}>() as _"));
    }
    let pointer = is_pointer(field_type, typedefs);
    match text.as_str() {
        "NULL" | "0" if pointer => Some("::core::ptr::null_mut::<::core::ffi::c_void>() as _".into()),
        "NULL" => None,
        "INT_MIN" => Some("::core::ffi::c_int::MIN as _".into()),
        "INT_MAX" => Some("::core::ffi::c_int::MAX as _".into()),
        t if constants.contains_key(t) => constants.get(t).map(|path| format!("{path} as _")),
        t => {
            let digits = t.trim_end_matches(['u', 'U', 'l', 'L']);
            let number = if let Some(hex) = digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
                i128::from_str_radix(hex, 16).ok()
            } else {
                digits.parse::<i128>().ok()
            };
            number.map(|n| format!("{n}i128 as _"))
        }
    }
}

/// The constants for the initializers of `files`, over the bindgen items already generated.
/// An initializer whose elements do not match the struct's fields one to one is an error: the
/// header changed in a way the generator must learn.
pub fn constants(files: &[&Path], items: &[syn::Item]) -> Result<Vec<syn::Item>, String> {
    let (found, aliases) = read(files)?;
    let mut typedefs = BTreeMap::new();
    let mut structs = BTreeMap::new();
    let mut consts: BTreeMap<String, String> = BTreeMap::new();
    for item in items {
        match item {
            syn::Item::Type(t) => {
                typedefs.insert(t.ident.to_string(), type_text(&t.ty));
            }
            syn::Item::Struct(s) => {
                structs.insert(s.ident.to_string(), s.fields.clone());
            }
            syn::Item::Const(c) => {
                consts.insert(c.ident.to_string(), c.ident.to_string());
            }
            syn::Item::Impl(imp) => {
                // Enumerators are associated constants of their newtype enum.
                let owner = type_text(&imp.self_ty);
                for member in &imp.items {
                    if let syn::ImplItem::Const(c) = member {
                        consts
                            .entry(c.ident.to_string())
                            .or_insert_with(|| format!("{owner}::{}.0", c.ident));
                    }
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for init in found {
        let mut target = init.c_type.clone();
        for _ in 0..8 {
            match typedefs.get(&target) {
                Some(next) => target = next.clone(),
                None => break,
            }
        }
        let Some(syn::Fields::Named(fields)) = structs.get(&target) else {
            return Err(format!("{}: no struct {} among the bindings", init.name, init.c_type));
        };
        if fields.named.len() != init.elements.len() {
            return Err(format!(
                "{}: {} elements for the {} fields of {}",
                init.name,
                init.elements.len(),
                fields.named.len(),
                init.c_type
            ));
        }
        let mut body = Vec::new();
        for (field, text) in fields.named.iter().zip(&init.elements) {
            let name = field.ident.as_ref().map(ToString::to_string).unwrap_or_default();
            let value = element(text, &field.ty, &consts, &aliases, &typedefs)
                .ok_or_else(|| format!("{}: cannot translate `{text}` for field {name}", init.name))?;
            body.push(format!("{name}: {value}"));
        }
        let code = format!(
            "/// `{}`: the value C code must start a `{}` from.\n\
             pub const {}: {} = {} {{ {} }};",
            init.name,
            init.c_type,
            init.name,
            init.c_type,
            target,
            body.join(", ")
        );
        out.push(syn::parse_str(&code).map_err(|e| format!("{}: {e}", init.name))?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continued_macros_are_joined_and_comments_dropped() {
        let text = "#define X_INITIALIZER {  \\\n  sizeof(x_t), /* size */ \\\n  ONE, /* a */ \\\n  7, \\\n  NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), \\\n}\n\
                    #define ONE UNDEF\n#define F(a) a\n";
        let dir = std::env::temp_dir().join(format!("xtask-init-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("x.h");
        std::fs::write(&file, text).unwrap();
        let (found, aliases) = read(&[file.as_path()]).unwrap();
        assert_eq!(
            found,
            [Initializer {
                name: "X_INITIALIZER".into(),
                c_type: "x_t".into(),
                elements: vec!["sizeof(x_t)".into(), "ONE".into(), "7".into(), "NCCL_VERSION_CODE".into()],
            }]
        );
        assert_eq!(aliases.get("ONE").map(String::as_str), Some("UNDEF"));
        assert!(!aliases.contains_key("F(a)"));
    }

    #[test]
    fn elements_follow_aliases_and_field_types() {
        let int: syn::Type = syn::parse_quote!(::core::ffi::c_int);
        let ptr: syn::Type = syn::parse_quote!(*const ::core::ffi::c_char);
        let consts = BTreeMap::from([
            ("MAGIC".to_string(), "MAGIC".to_string()),
            ("MODE_NONE".to_string(), "mode_t::MODE_NONE.0".to_string()),
        ]);
        let aliases = BTreeMap::from([
            ("UNDEF_INT".to_string(), "INT_MIN".to_string()),
            ("UNDEF_PTR".to_string(), "NULL".to_string()),
        ]);
        let typedefs = BTreeMap::from([("event_t".to_string(), "*mut event_st".to_string())]);
        let e = |t: &str, ty: &syn::Type| element(t, ty, &consts, &aliases, &typedefs);
        let event: syn::Type = syn::parse_quote!(event_t);
        assert_eq!(
            e("UNDEF_PTR", &event).as_deref(),
            Some("::core::ptr::null_mut::<::core::ffi::c_void>() as _")
        );
        assert_eq!(e("UNDEF_INT", &int).as_deref(), Some("::core::ffi::c_int::MIN as _"));
        assert_eq!(
            e("UNDEF_PTR", &ptr).as_deref(),
            Some("::core::ptr::null_mut::<::core::ffi::c_void>() as _")
        );
        assert_eq!(e("MAGIC", &int).as_deref(), Some("MAGIC as _"));
        assert_eq!(e("MODE_NONE", &int).as_deref(), Some("mode_t::MODE_NONE.0 as _"));
        assert_eq!(e("0xcafe", &int).as_deref(), Some("51966i128 as _"));
        assert_eq!(e("sizeof(x_t)", &int).as_deref(), Some("::core::mem::size_of::<x_t>() as _"));
        assert_eq!(e("UNDEF_PTR", &int), None);
        assert_eq!(e("NCCL_VERSION(2,3,4)", &int), None);
    }
}
