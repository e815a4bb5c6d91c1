//! The safe coverage of the driver API: which functions `cuda.h` declares that `cuhost`
//! calls, and why each of the others is left to the raw crate (`xtask/unwrapped.txt`).

use super::scan;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The file that gives the reasons, relative to the workspace root.
pub const REASONS_FILE: &str = "xtask/unwrapped.txt";

/// Why one function is left unwrapped, and where the file says so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reason {
    /// The line of the reasons file, from 1.
    pub line: usize,
    /// The reason, as written.
    pub text: String,
}

/// Parses the reasons file: one `cuName: reason` a line; blank lines and lines that start
/// with `#` are skipped. Every malformed or repeated line is reported, with its number.
pub fn parse_reasons(text: &str) -> Result<BTreeMap<String, Reason>, String> {
    let mut reasons: BTreeMap<String, Reason> = BTreeMap::new();
    let mut errors = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let Some((name, reason)) = trimmed.split_once(':') else {
            errors.push(format!("line {line}: expected `cuName: reason`, found `{trimmed}`"));
            continue;
        };
        let (name, reason) = (name.trim(), reason.trim());
        let is_name = name.starts_with("cu") && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !is_name {
            errors.push(format!("line {line}: `{name}` is not a driver function name"));
        } else if reason.is_empty() {
            errors.push(format!("line {line}: {name} has no reason"));
        } else if let Some(first) = reasons.get(name) {
            errors.push(format!("line {line}: {name} already has a reason on line {}", first.line));
        } else {
            reasons.insert(name.to_string(), Reason { line, text: reason.to_string() });
        }
    }
    if errors.is_empty() { Ok(reasons) } else { Err(errors.join("\n")) }
}

/// What the section reports on: the functions `cuda.h` declares and what is known of them.
pub struct Driver<'a> {
    /// The functions `cuda.h` declares, by the names C code calls.
    pub declared: &'a BTreeSet<String>,
    /// Pairs of declared names that are one function (`cuGraphInstantiate` is
    /// `cuGraphInstantiateWithFlags`), both ways round.
    pub aliases: &'a BTreeMap<String, String>,
    /// The documentation section of each function, from the generated function list.
    pub sections: &'a BTreeMap<String, String>,
    /// The driver version each function new since the oldest pinned headers needs (0 when
    /// unknown), as the "new since" list computes it.
    pub new_since_oldest: &'a BTreeMap<String, i32>,
}

/// The declared functions that `uses` (names found by [`scan::driver_uses`]) reach, directly,
/// through an ABI-suffixed name or through an alias.
pub fn wrapped(uses: &BTreeSet<String>, driver: &Driver) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for name in uses {
        for base in scan::base_names(name) {
            if driver.declared.contains(base) {
                out.insert(base.to_string());
                if let Some(alias) = driver.aliases.get(base) {
                    out.insert(alias.clone());
                }
            }
        }
    }
    out
}

/// Prints the section; returns what `--strict` refuses (functions with neither a wrapper nor a
/// reason, and reasons for functions that are wrapped or not declared).
pub fn report(root: &Path, driver: &Driver) -> Result<Vec<String>, String> {
    let reasons_path = root.join(REASONS_FILE);
    let text =
        std::fs::read_to_string(&reasons_path).map_err(|e| format!("{}: {e}", reasons_path.display()))?;
    let reasons = parse_reasons(&text).map_err(|e| format!("{REASONS_FILE}:\n{e}"))?;
    let uses = scan::driver_uses(&root.join("cuda-core/src"))?;
    let wrapped = wrapped(&uses, driver);

    let with_reason: Vec<(&String, &Reason)> = reasons
        .iter()
        .filter(|(name, _)| driver.declared.contains(*name) && !wrapped.contains(*name))
        .collect();
    let neither: Vec<&String> =
        driver.declared.iter().filter(|n| !wrapped.contains(*n) && !reasons.contains_key(*n)).collect();
    let mut stale: Vec<(usize, String)> = reasons
        .iter()
        .filter_map(|(name, r)| {
            let why = if wrapped.contains(name) {
                "is wrapped"
            } else if !driver.declared.contains(name) {
                "is not declared by cuda.h"
            } else {
                return None;
            };
            Some((r.line, format!("{REASONS_FILE} line {}: {name} {why}", r.line)))
        })
        .collect();
    stale.sort();
    let stale: Vec<String> = stale.into_iter().map(|(_, s)| s).collect();

    println!(
        "\ncuda-core (safe) over cuda.h: {} of {} wrapped, {} with a reason, {} neither",
        wrapped.len(),
        driver.declared.len(),
        with_reason.len(),
        neither.len()
    );
    if !neither.is_empty() {
        println!("  neither wrapped nor given a reason, by section:");
        let mut by_section: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for name in &neither {
            let section = driver.sections.get(*name).map_or("(no section)", String::as_str);
            by_section.entry(section).or_default().push(marked(name, driver));
        }
        for (section, names) in by_section {
            print_wrapped(&format!("    {section} ({}): ", names.len()), &names);
        }
    }
    if !with_reason.is_empty() {
        println!("  with a reason ({REASONS_FILE}):");
        for (name, reason) in &with_reason {
            println!("    {}: {}", marked(name, driver), reason.text);
        }
    }
    if !stale.is_empty() {
        println!("  stale reasons:");
        for s in &stale {
            println!("    {s}");
        }
    }

    let mut refused = Vec::new();
    if !neither.is_empty() {
        refused.push(format!(
            "{} cuda.h functions are neither wrapped by cuhost nor given a reason in {REASONS_FILE}",
            neither.len()
        ));
    }
    refused.extend(stale);
    Ok(refused)
}

/// `name`, with the driver version it needs when the oldest pinned headers lack it.
fn marked(name: &str, driver: &Driver) -> String {
    match driver.new_since_oldest.get(name) {
        Some(&v) if v > 0 => format!("{name} (needs {})", super::version_text(v)),
        Some(_) => format!("{name} (new, version unknown)"),
        None => name.to_string(),
    }
}

/// Prints `head` and `items` separated by commas, continuing on indented lines past the
/// rustfmt width.
fn print_wrapped(head: &str, items: &[String]) {
    const WIDTH: usize = 110;
    let indent = " ".repeat(head.len().min(8));
    let mut line = head.to_string();
    let mut first = true;
    for (i, item) in items.iter().enumerate() {
        let piece = if i + 1 < items.len() { format!("{item},") } else { item.clone() };
        if !first && line.len() + 1 + piece.len() > WIDTH {
            println!("{line}");
            line = format!("{indent}{piece}");
        } else {
            if !first {
                line.push(' ');
            }
            line.push_str(&piece);
        }
        first = false;
    }
    println!("{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_skip_comments_and_blank_lines() {
        let text = "# why these are left to the raw crate\n\
                    \n\
                    cuCtxAttach: deprecated: use cuDevicePrimaryCtxRetain\n\
                    \x20 # an indented comment\n\
                    cuLaunch :  deprecated since CUDA 4.0: use cuLaunchKernel  \n";
        let reasons = parse_reasons(text).unwrap();
        assert_eq!(reasons.len(), 2);
        assert_eq!(
            reasons["cuCtxAttach"],
            Reason { line: 3, text: "deprecated: use cuDevicePrimaryCtxRetain".into() }
        );
        assert_eq!(reasons["cuLaunch"].text, "deprecated since CUDA 4.0: use cuLaunchKernel");
        assert_eq!(reasons["cuLaunch"].line, 5);
    }

    #[test]
    fn malformed_lines_are_errors_with_their_numbers() {
        let text = "cuGood: fine\n\
                    cuNoColon\n\
                    # comment\n\
                    cuEmpty:\n\
                    not a name: reason\n\
                    cuGood: again\n";
        let err = parse_reasons(text).unwrap_err();
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 4, "{err}");
        assert!(lines[0].starts_with("line 2:"), "{err}");
        assert!(lines[1].starts_with("line 4:"), "{err}");
        assert!(lines[2].starts_with("line 5:"), "{err}");
        assert!(lines[3].starts_with("line 6:") && lines[3].contains("line 1"), "{err}");
    }

    #[test]
    fn suffixed_and_aliased_uses_reach_the_declared_function() {
        let declared: BTreeSet<String> =
            ["cuGraphAddNode", "cuGraphInstantiate", "cuGraphInstantiateWithFlags", "cuMemAlloc"]
                .map(String::from)
                .into();
        let aliases: BTreeMap<String, String> = [
            ("cuGraphInstantiate".to_string(), "cuGraphInstantiateWithFlags".to_string()),
            ("cuGraphInstantiateWithFlags".to_string(), "cuGraphInstantiate".to_string()),
        ]
        .into();
        let empty = BTreeMap::new();
        let none = BTreeMap::new();
        let driver =
            Driver { declared: &declared, aliases: &aliases, sections: &empty, new_since_oldest: &none };
        let uses: BTreeSet<String> =
            ["cuGraphAddNode_v12030", "cuGraphInstantiateWithFlags", "cuNotInCudaH"].map(String::from).into();
        let found: Vec<String> = wrapped(&uses, &driver).into_iter().collect();
        assert_eq!(found, ["cuGraphAddNode", "cuGraphInstantiate", "cuGraphInstantiateWithFlags"]);
    }
}
