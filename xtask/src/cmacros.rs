//! What the headers say through the preprocessor: function renames, ABI versions and constants
//! written as casts, which bindgen does not turn into Rust on its own.

use regex::Regex;
use std::collections::BTreeMap;
use std::path::Path;

/// How a canonical C name reaches its declaration.
#[derive(Clone, Debug, Default)]
pub struct Rename {
    /// The name the declaration carries after the `#define` (e.g. `cuMemAlloc_v2`).
    pub declared: String,
    /// `Some("_ptds")` or `Some("_ptsz")` when a per-thread-default-stream variant exists.
    pub per_thread: Option<&'static str>,
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// `#define canonical declared` and `#define canonical __X_API_PTDS(declared)` lines.
pub fn renames(files: &[&Path], prefix: &str) -> Result<BTreeMap<String, Rename>, String> {
    let re = Regex::new(&format!(
        r"(?m)^\s*#\s*define\s+({prefix}\w*)\s+(?:(__\w+_PT(DS|SZ))\(\s*(\w+)\s*\)|({prefix}\w*))\s*$"
    ))
    .map_err(|e| e.to_string())?;
    let mut out = BTreeMap::new();
    for file in files {
        let text = read(file)?;
        for c in re.captures_iter(&text) {
            let canonical = c[1].to_string();
            let (declared, per_thread) = match (c.get(4), c.get(5)) {
                (Some(d), _) => {
                    let pt = if &c[3] == "DS" { "_ptds" } else { "_ptsz" };
                    (d.as_str().to_string(), Some(pt))
                }
                (None, Some(d)) => (d.as_str().to_string(), None),
                _ => continue,
            };
            if canonical == declared && per_thread.is_none() {
                continue;
            }
            out.insert(canonical, Rename { declared, per_thread });
        }
    }
    Ok(out)
}

/// A constant defined as a cast, such as `#define CU_STREAM_LEGACY ((CUstream)0x1)`.
pub struct CastConstant {
    /// The macro's name.
    pub name: String,
    /// The C type it is cast to.
    pub c_type: String,
    /// The integer, as written.
    pub value: String,
}

/// Every `#define NAME ((TYPE)INTEGER)` in `files`.
pub fn cast_constants(files: &[&Path]) -> Result<Vec<CastConstant>, String> {
    let re = Regex::new(
        r"(?m)^\s*#\s*define\s+(\w+)\s+\(\(\s*(\w+(?:\s*\*)?)\s*\)\s*(-?\s*(?:0x[0-9a-fA-F]+|\d+))[uUlL]*\s*\)",
    )
    .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for file in files {
        let text = read(file)?;
        for c in re.captures_iter(&text) {
            out.push(CastConstant {
                name: c[1].to_string(),
                c_type: c[2].split_whitespace().collect::<Vec<_>>().join(" "),
                value: c[3].split_whitespace().collect(),
            });
        }
    }
    Ok(out)
}

/// `#define NAME value` with a plain integer value, for the header's version macro.
pub fn integer_define(file: &Path, name: &str) -> Result<i32, String> {
    let text = read(file)?;
    let re = Regex::new(&format!(r"(?m)^\s*#\s*define\s+{name}\s+(\d+)")).map_err(|e| e.to_string())?;
    re.captures(&text)
        .and_then(|c| c[1].parse().ok())
        .ok_or_else(|| format!("{name} not defined in {}", file.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(name: &str, text: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-cmacros-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn renames_cover_plain_and_per_thread_defines() {
        let h = header(
            "renames.h",
            "#define cuMemAlloc                          cuMemAlloc_v2\n\
             #define cuMemcpyHtoD                        __CUDA_API_PTDS(cuMemcpyHtoD_v2)\n\
             #define cuMemcpy                            __CUDA_API_PTDS(cuMemcpy)\n\
             #define cuStreamQuery                       __CUDA_API_PTSZ(cuStreamQuery)\n\
             #define cuSelf                              cuSelf\n\
             #define CU_NOT_A_FUNCTION                   1\n",
        );
        let r = renames(&[h.as_path()], "cu").unwrap();
        assert_eq!(r["cuMemAlloc"].declared, "cuMemAlloc_v2");
        assert_eq!(r["cuMemAlloc"].per_thread, None);
        assert_eq!(r["cuMemcpyHtoD"].declared, "cuMemcpyHtoD_v2");
        assert_eq!(r["cuMemcpyHtoD"].per_thread, Some("_ptds"));
        assert_eq!(r["cuMemcpy"].declared, "cuMemcpy");
        assert_eq!(r["cuStreamQuery"].per_thread, Some("_ptsz"));
        assert!(!r.contains_key("cuSelf"), "an identity define is not a rename");
        assert!(!r.contains_key("CU_NOT_A_FUNCTION"));
    }

    #[test]
    fn cast_constants_keep_type_and_sign() {
        let h = header(
            "casts.h",
            "#define CU_STREAM_LEGACY     ((CUstream)0x1)\n\
             #define CU_DEVICE_CPU        ((CUdevice)-1)\n\
             #define CU_LAUNCH_PARAM_END  ((void*)0x00)\n\
             #define NOT_A_CAST           (1 << 3)\n",
        );
        let c = cast_constants(&[h.as_path()]).unwrap();
        let found: Vec<(&str, &str, &str)> =
            c.iter().map(|c| (c.name.as_str(), c.c_type.as_str(), c.value.as_str())).collect();
        assert_eq!(
            found,
            [
                ("CU_STREAM_LEGACY", "CUstream", "0x1"),
                ("CU_DEVICE_CPU", "CUdevice", "-1"),
                ("CU_LAUNCH_PARAM_END", "void*", "0x00")
            ]
        );
    }

    #[test]
    fn integer_defines_are_read() {
        let h = header("version.h", "#define CUDA_VERSION 13000\n");
        assert_eq!(integer_define(&h, "CUDA_VERSION").unwrap(), 13000);
        assert!(integer_define(&h, "CUDART_VERSION").is_err());
    }
}
