//! Which driver functions `cuhost` calls, read from its source text.
//!
//! The matching is textual and deliberately simple:
//!
//! 1. Comments (doc comments included), string literals (plain, byte, C and raw) and character
//!    literals are blanked out, so that a doc comment or an error message naming
//!    `sys::cuMemAlloc` does not count as a call.
//! 2. Test code is dropped: files named `tests.rs`, files under a `tests/` directory, every item
//!    under a plain `#[cfg(test)]` attribute (a `mod tests { .. }`, a function, an `impl`), and
//!    the file of a module declared as `#[cfg(test)] mod name;` together with its submodules.
//!    A module declared with a `#[path]` attribute, or under a compound condition such as
//!    `#[cfg(any(test, ..))]`, counts as ordinary code.
//! 3. What is left is searched for a path into the driver crate: `sys::cuName`,
//!    `driver_sys::cuName` or `cuhost_driver_sys::cuName`, or a call through the crate's
//!    `driver!` macro, `driver!(cuName(..))` or `driver!(status: cuName(..))`, where the name
//!    starts with `cu` and an upper-case letter (types are `CU..`, constants `CU_..`). A use
//!    need not be a call: a function passed by name counts too. Names brought in by
//!    `use cuhost_driver_sys::{cuName}` and called bare are not seen; `cuhost` does not import
//!    functions that way.
//!
//! Which of the names found are `cuda.h` functions, and which function an ABI-suffixed name
//! (`cuGraphAddNode_v12030`) stands for, is for the caller to decide ([`base_names`]).

use regex::Regex;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The `cu..` names that the non-test code under `src` uses through the driver crate.
pub fn driver_uses(src: &Path) -> Result<BTreeSet<String>, String> {
    let mut files = Vec::new();
    rust_files(src, &mut files)?;
    files.sort();
    let pattern = UsePattern::new()?;
    let mut scanned = Vec::new();
    // Files and directories of modules declared under `#[cfg(test)]`.
    let mut test_only: Vec<PathBuf> = Vec::new();
    for file in files {
        if is_test_path(src, &file) {
            continue;
        }
        let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let source = pattern.scan(&text);
        if source.whole_file_is_test {
            test_only.push(file.clone());
        }
        for module in &source.test_modules {
            test_only.extend(module_paths(&file, module));
        }
        scanned.push((file, source.uses));
    }
    let mut uses = BTreeSet::new();
    for (file, found) in scanned {
        if !test_only.iter().any(|t| file.starts_with(t)) {
            uses.extend(found);
        }
    }
    Ok(uses)
}

/// `name` and the names it stands for once a per-thread suffix (`_ptsz`, `_ptds`) and ABI
/// suffixes (`_v2`, `_v12030`) are taken off, longest first: `cuGraphAddNode_v12030` gives
/// `cuGraphAddNode_v12030` and `cuGraphAddNode`.
pub fn base_names(name: &str) -> Vec<&str> {
    let mut out = vec![name];
    let mut current = name;
    loop {
        let shorter = current.strip_suffix("_ptsz").or_else(|| current.strip_suffix("_ptds")).or_else(|| {
            current
                .rsplit_once("_v")
                .filter(|(_, v)| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .map(|(head, _)| head)
        });
        match shorter {
            Some(s) if !s.is_empty() => {
                out.push(s);
                current = s;
            }
            _ => return out,
        }
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| format!("{}: {e}", dir.display()))?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// `tests.rs` anywhere, or any file under a `tests/` directory below `src`.
fn is_test_path(src: &Path, file: &Path) -> bool {
    let relative = file.strip_prefix(src).unwrap_or(file);
    relative.file_name().is_some_and(|n| n == "tests.rs")
        || relative.parent().is_some_and(|p| p.components().any(|c| c.as_os_str() == "tests"))
}

/// The file and the directory that `mod name;` in `file` may refer to.
fn module_paths(file: &Path, name: &str) -> [PathBuf; 2] {
    let parent = file.parent().unwrap_or(Path::new(""));
    let owns_directory = file.file_stem().is_some_and(|s| s == "mod" || s == "lib" || s == "main");
    let dir = match file.file_stem() {
        Some(stem) if !owns_directory => parent.join(stem),
        _ => parent.to_path_buf(),
    };
    [dir.join(format!("{name}.rs")), dir.join(name)]
}

/// What one source file yields.
#[derive(Debug, Default)]
pub struct Source {
    /// The `cu..` names used through the driver crate outside test code.
    pub uses: BTreeSet<String>,
    /// Modules declared as `#[cfg(test)] mod name;`.
    pub test_modules: Vec<String>,
    /// The file starts with `#![cfg(test)]`.
    pub whole_file_is_test: bool,
}

/// The regular expressions of the scan, compiled once.
pub struct UsePattern {
    path: Regex,
    cfg_test: Regex,
    inner_cfg_test: Regex,
    module_declaration: Regex,
}

impl UsePattern {
    /// Compiles the expressions.
    pub fn new() -> Result<Self, String> {
        let re = |s: &str| Regex::new(s).map_err(|e| e.to_string());
        Ok(UsePattern {
            path: re(
                r"(?:(?:\bcuhost_driver_sys|\bdriver_sys|\bsys)\s*::|\bdriver!\s*\(\s*(?:status\s*:)?)\s*(cu[A-Z][A-Za-z0-9_]*)",
            )?,
            cfg_test: re(r"#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]")?,
            inner_cfg_test: re(r"#\s*!\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]")?,
            module_declaration: re(r"^(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+(\w+)\s*;")?,
        })
    }

    /// Scans the text of one file.
    pub fn scan(&self, text: &str) -> Source {
        let code = blank_comments_and_literals(text);
        let whole_file_is_test = self.inner_cfg_test.is_match(&code);
        let (code, test_modules) = self.without_test_items(&code);
        let uses = self.path.captures_iter(&code).map(|c| c[1].to_string()).collect();
        Source { uses, test_modules, whole_file_is_test }
    }

    /// `code` with every item under `#[cfg(test)]` blanked out, and the names of the modules
    /// declared (not defined) there.
    fn without_test_items(&self, code: &str) -> (String, Vec<String>) {
        let mut bytes = code.as_bytes().to_vec();
        let mut modules = Vec::new();
        let mut blanked_to = 0;
        for m in self.cfg_test.find_iter(code) {
            if m.start() < blanked_to {
                continue;
            }
            let (item_start, has_path) = skip_attributes(code.as_bytes(), m.end());
            let end = item_end(code.as_bytes(), item_start);
            if !has_path {
                let item = code.get(item_start..end).unwrap_or("");
                if let Some(c) = self.module_declaration.captures(item) {
                    modules.push(c[1].to_string());
                }
            }
            blank(&mut bytes[m.start()..end]);
            blanked_to = end;
        }
        // Only ASCII delimiters start and end a blanked range, and blanked bytes become ASCII
        // spaces, so the text stays valid UTF-8.
        (String::from_utf8_lossy(&bytes).into_owned(), modules)
    }
}

fn blank(bytes: &mut [u8]) {
    for b in bytes {
        if *b != b'\n' {
            *b = b' ';
        }
    }
}

/// Skips white space and further attributes from `i`; returns where the item starts and
/// whether one of the attributes was `#[path ..]`.
fn skip_attributes(b: &[u8], mut i: usize) -> (usize, bool) {
    let mut has_path = false;
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if b.get(i) != Some(&b'#') {
            return (i, has_path);
        }
        let Some(open) = (i + 1..b.len()).find(|&j| !b[j].is_ascii_whitespace()) else {
            return (i, has_path);
        };
        if b[open] != b'[' {
            return (i, has_path);
        }
        let close = group_end(b, open);
        let inside = String::from_utf8_lossy(b.get(open + 1..close).unwrap_or_default());
        has_path |= inside.trim_start().starts_with("path");
        i = close;
    }
}

/// Just past the end of the item that starts at `start`: the `;` that ends it at the outermost
/// level, or the `}` that closes its outermost brace block.
fn item_end(b: &[u8], start: usize) -> usize {
    let mut depth = 0usize;
    for (j, &c) in b.iter().enumerate().skip(start) {
        match c {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' => depth = depth.saturating_sub(1),
            b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return j + 1;
                }
            }
            b';' if depth == 0 => return j + 1,
            _ => {}
        }
    }
    b.len()
}

/// Just past the bracket that closes the group opened at `open`.
fn group_end(b: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    for (j, &c) in b.iter().enumerate().skip(open) {
        match c {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return j + 1;
                }
            }
            _ => {}
        }
    }
    b.len()
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `text` with comments and the contents of string and character literals replaced by spaces
/// (line breaks kept), so that what remains is code.
pub fn blank_comments_and_literals(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        let end = match c[i] {
            '/' if next == Some('/') => (i..c.len()).find(|&j| c[j] == '\n').unwrap_or(c.len()),
            '/' if next == Some('*') => block_comment_end(&c, i),
            '"' => string_end(&c, i + 1),
            'r' if starts_raw_string(&c, i) => raw_string_end(&c, i + 1),
            '\'' => char_literal_end(&c, i).unwrap_or(i),
            _ => i,
        };
        if end == i {
            out.push(c[i]);
            i += 1;
        } else {
            out.extend(c[i..end].iter().map(|&ch| if ch == '\n' { '\n' } else { ' ' }));
            i = end;
        }
    }
    out
}

fn block_comment_end(c: &[char], start: usize) -> usize {
    let mut depth = 0usize;
    let mut i = start;
    while i + 1 < c.len() {
        if c[i] == '/' && c[i + 1] == '*' {
            depth += 1;
            i += 2;
        } else if c[i] == '*' && c[i + 1] == '/' {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    c.len()
}

/// Past the closing quote of a string whose contents start at `i`.
fn string_end(c: &[char], mut i: usize) -> usize {
    while i < c.len() {
        match c[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    c.len()
}

/// `r"`, `r#"`, `br"`, `cr#"` and so on, where the `r` does not end an identifier.
fn starts_raw_string(c: &[char], i: usize) -> bool {
    let before = |k: usize| i.checked_sub(k).map(|p| c[p]);
    let prefix_ok = match before(1) {
        None => true,
        Some('b' | 'c') => before(2).is_none_or(|p| !is_ident(p)),
        Some(p) => !is_ident(p),
    };
    let mut j = i + 1;
    while c.get(j) == Some(&'#') {
        j += 1;
    }
    prefix_ok && c.get(j) == Some(&'"')
}

/// Past the end of a raw string whose hashes (if any) start at `i`.
fn raw_string_end(c: &[char], i: usize) -> usize {
    let hashes = c[i..].iter().take_while(|&&ch| ch == '#').count();
    let mut j = i + hashes + 1;
    while j < c.len() {
        if c[j] == '"' && c[j + 1..].iter().take(hashes).filter(|&&ch| ch == '#').count() == hashes {
            return j + 1 + hashes;
        }
        j += 1;
    }
    c.len()
}

/// Past the end of the character literal at `i`, or `None` for a lifetime or label.
fn char_literal_end(c: &[char], i: usize) -> Option<usize> {
    match c.get(i + 1)? {
        // An escape: '\n', '\'', '\u{1F600}'.
        '\\' => (i + 3..c.len().min(i + 14)).find(|&j| c[j] == '\'').map(|j| j + 1),
        '\'' => None,
        _ => (c.get(i + 2) == Some(&'\'')).then_some(i + 3),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = r##"
//! Module docs name sys::cuModuleDoc.
use cuhost_driver_sys as sys;

/// Allocates through [`sys::cuMemFree`]; see `sys::cuDocOnly(`.
pub fn alloc(n: usize) -> Result<u64, Error> {
    let mut p = 0;
    check("sys::cuInString", unsafe { sys::cuMemAlloc(&mut p, n) })?;
    let _raw = r#"driver_sys::cuInRawString"#;
    let _quote = '"';
    /* a block /* nested */ sys::cuInBlockComment() */
    let f: fn() = cuhost_driver_sys::cuCtxSynchronize;
    unsafe { sys::cuGraphAddNode_v12030(out, graph) };
    let _ = |x: &'static str| driver_sys::cuStreamQuery(s);
    unsafe { driver!(cuMacroCall(s)) }?;
    let status = unsafe { driver!(status: cuStatusCall(s)) };
    let _type: sys::CUdeviceptr = 0;
    Ok(p)
}

#[cfg(test)]
mod tests {
    fn fake() { unsafe { sys::cuTestOnly() }; }
}

#[cfg(test)]
fn helper() -> [u8; 2] { unsafe { sys::cuHelperOnly() }; [0; 2] }

#[cfg(test)]
mod property;

#[cfg(test)]
#[path = "../elsewhere.rs"]
mod support;

fn after() { unsafe { sys::cuAfterTests() } }
"##;

    #[test]
    fn calls_count_and_comments_strings_and_tests_do_not() {
        let source = UsePattern::new().unwrap().scan(SOURCE);
        let found: Vec<&str> = source.uses.iter().map(String::as_str).collect();
        assert_eq!(
            found,
            [
                "cuAfterTests",
                "cuCtxSynchronize",
                "cuGraphAddNode_v12030",
                "cuMacroCall",
                "cuMemAlloc",
                "cuStatusCall",
                "cuStreamQuery"
            ]
        );
        assert_eq!(source.test_modules, ["property"]);
        assert!(!source.whole_file_is_test);
    }

    #[test]
    fn a_file_under_inner_cfg_test_is_test_code() {
        let source = UsePattern::new().unwrap().scan("#![cfg(test)]\nfn f() { sys::cuA() }\n");
        assert!(source.whole_file_is_test);
    }

    #[test]
    fn suffixed_names_stand_for_their_base_function() {
        assert_eq!(base_names("cuGraphAddNode_v12030"), ["cuGraphAddNode_v12030", "cuGraphAddNode"]);
        assert_eq!(base_names("cuLaunchHostFunc_v2"), ["cuLaunchHostFunc_v2", "cuLaunchHostFunc"]);
        assert_eq!(base_names("cuMemcpyAsync_ptsz"), ["cuMemcpyAsync_ptsz", "cuMemcpyAsync"]);
        assert_eq!(base_names("cuMemAlloc"), ["cuMemAlloc"]);
        assert_eq!(base_names("cuGetProcAddress_v"), ["cuGetProcAddress_v"]);
    }

    #[test]
    fn test_modules_map_to_their_files() {
        let [file, dir] = module_paths(Path::new("src/pool/mod.rs"), "tests_pinned");
        assert_eq!(file, Path::new("src/pool/tests_pinned.rs"));
        assert_eq!(dir, Path::new("src/pool/tests_pinned"));
        let [file, _] = module_paths(Path::new("src/graph.rs"), "tests");
        assert_eq!(file, Path::new("src/graph/tests.rs"));
        assert!(is_test_path(Path::new("src"), Path::new("src/dlpack/tests.rs")));
        assert!(is_test_path(Path::new("src"), Path::new("src/memory/tests/copy.rs")));
        assert!(!is_test_path(Path::new("src"), Path::new("src/memory/copy.rs")));
    }

    #[test]
    fn lifetimes_are_not_character_literals() {
        let code = blank_comments_and_literals("fn f<'a>(x: &'a str) -> char { 'x' } // sys::cuA");
        assert_eq!(code.trim_end(), "fn f<'a>(x: &'a str) -> char {     }");
    }
}
