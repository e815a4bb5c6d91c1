//! The doxygen groups of NVIDIA's headers: which section of the API reference documents each
//! function.

use std::collections::BTreeMap;
use std::path::Path;

/// Where one function is documented.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DocPlace {
    /// File name of the header that declares it.
    pub header: String,
    /// Title of its section.
    pub section: String,
    /// Address of its section's page.
    pub url: String,
}

/// The documentation places of the functions of a set of headers.
pub struct DocIndex {
    places: BTreeMap<String, DocPlace>,
    index: DocPlace,
}

/// The groups of one header: each function's group, the titles, and the groups defined.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct HeaderGroups {
    /// Function name → innermost group open where it is first declared.
    pub functions: BTreeMap<String, String>,
    /// Group name → title from its `\defgroup`.
    pub titles: BTreeMap<String, String>,
    /// The groups the header defines, in order.
    pub defined: Vec<String>,
    /// Functions declared while no group is open.
    pub ungrouped: BTreeMap<String, String>,
}

/// Reads the groups of a header's text; `prefix` selects the function names recorded.
pub fn parse_groups(text: &str, prefix: &str) -> HeaderGroups {
    let mut out = HeaderGroups::default();
    let mut stack: Vec<Option<String>> = Vec::new();
    let mut pending: Option<String> = None;
    let mut rest = text;
    while !rest.is_empty() {
        let (code, comment, next) = match (rest.find("/*"), rest.find("//")) {
            (Some(b), l) if l.is_none_or(|l| b < l) => {
                let end = rest[b..].find("*/").map_or(rest.len(), |e| b + e + 2);
                (&rest[..b], &rest[b..end], &rest[end..])
            }
            (_, Some(l)) => {
                let end = rest[l..].find('\n').map_or(rest.len(), |e| l + e);
                (&rest[..l], &rest[l..end], &rest[end..])
            }
            _ => (rest, "", ""),
        };
        match stack.last() {
            Some(Some(_)) => record_calls(code, prefix, &stack, &mut out.functions),
            _ => record_calls(code, prefix, &[Some(String::new())], &mut out.ungrouped),
        }
        for word_start in comment.match_indices(['\\', '@']).map(|(i, _)| i) {
            let after = &comment[word_start + 1..];
            let mut words = after.split_whitespace();
            match words.next() {
                Some("defgroup") => {
                    if let Some(name) = words.next() {
                        let line = after.lines().next().unwrap_or_default();
                        let title = line.trim_start_matches("defgroup").trim_start().trim_start_matches(name);
                        out.titles.insert(name.to_string(), title.trim().to_string());
                        out.defined.push(name.to_string());
                        pending = Some(name.to_string());
                    }
                }
                Some("addtogroup") => pending = words.next().map(str::to_string),
                _ if after.starts_with('{') => {
                    let top = stack.last().cloned().flatten();
                    stack.push(pending.take().or(top));
                }
                _ if after.starts_with('}') => {
                    stack.pop();
                }
                _ => {}
            }
        }
        rest = next;
    }
    out
}

/// Records every `prefix…(` in code under the innermost open group, first occurrence winning.
fn record_calls(
    code: &str,
    prefix: &str,
    stack: &[Option<String>],
    functions: &mut BTreeMap<String, String>,
) {
    let Some(Some(group)) = stack.last() else { return };
    let bytes = code.as_bytes();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while let Some(found) = code[i..].find(prefix) {
        let start = i + found;
        let mut end = start;
        while end < bytes.len() && is_ident(bytes[end]) {
            end += 1;
        }
        i = end.max(start + 1);
        if start > 0 && is_ident(bytes[start - 1]) {
            continue;
        }
        if code[end..].trim_start().starts_with('(') {
            functions.entry(code[start..end].to_string()).or_insert_with(|| group.clone());
        }
    }
}

/// How a doxygen build names the page of a group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageNames {
    /// `_` doubled, letters kept: `CUDA_MEM` → `group__CUDA__MEM.html` (the CUDA references).
    CaseKept,
    /// `_` doubled and each capital letter written as `_` and its lower case, as doxygen does
    /// when file names must not depend on case: `MARKERS_AND_RANGES` →
    /// `group___m_a_r_k_e_r_s___a_n_d___r_a_n_g_e_s.html` (the NVTX reference).
    CaseEscaped,
}

/// The page of a doxygen group under `names`.
fn group_page(group: &str, names: PageNames) -> String {
    let mut page = String::from("group__");
    for c in group.chars() {
        match c {
            '_' => page.push_str("__"),
            c if c.is_ascii_uppercase() && names == PageNames::CaseEscaped => {
                page.push('_');
                page.push(c.to_ascii_lowercase());
            }
            c => page.push(c),
        }
    }
    page.push_str(".html");
    page
}

impl DocIndex {
    /// Reads `headers`; pages are under `base`, named as `names` says, and `index` is the page
    /// for functions in no group.
    pub fn new(
        headers: &[&Path],
        prefix: &str,
        base: &str,
        names: PageNames,
        index: DocPlace,
    ) -> Result<Self, String> {
        let mut parsed = Vec::new();
        for path in headers {
            let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let header = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            parsed.push((header, parse_groups(&text, prefix)));
        }
        // A header may add to a group that another one defines (`\addtogroup`): titles are
        // looked up across all of them.
        let titles: BTreeMap<&str, &str> =
            parsed.iter().flat_map(|(_, g)| g.titles.iter().map(|(k, v)| (k.as_str(), v.as_str()))).collect();
        let mut places = BTreeMap::new();
        for (header, groups) in &parsed {
            let place = |group: &str| DocPlace {
                header: header.clone(),
                section: titles.get(group).map_or_else(|| group.to_string(), |t| t.to_string()),
                url: format!("{base}{}", group_page(group, names)),
            };
            for (name, group) in &groups.functions {
                places.entry(name.clone()).or_insert_with(|| place(group));
            }
            // Functions declared outside any group: the group the header defines where it defines
            // just one, else the index.
            let fallback = match groups.defined.as_slice() {
                [only] => place(only),
                _ => DocPlace { header: header.clone(), ..index.clone() },
            };
            for name in groups.ungrouped.keys() {
                places.entry(name.clone()).or_insert_with(|| fallback.clone());
            }
        }
        Ok(DocIndex { places, index })
    }

    /// Where `names` (tried in order) is documented; the index page when none is known.
    pub fn place(&self, names: &[&str]) -> DocPlace {
        names.iter().find_map(|n| self.places.get(*n)).cloned().unwrap_or_else(|| self.index.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SNIPPET: &str = "\
/**
 * \\defgroup CUDA_MEM Memory Management
 *
 * ___MANUAL___
 * @{
 */
/** Allocates. \\sa ::cuMemFree */
CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize);
/**
 * \\defgroup CUDA_MEM_INNER Inner
 * \\ingroup CUDA_MEM
 * @{
 */
CUresult CUDAAPI cuInner(void);
/** @} */
CUresult CUDAAPI cuMemFree(CUdeviceptr dptr);
/** @} */ /* END CUDA_MEM */
CUresult CUDAAPI cuOutside(void);
";

    #[test]
    fn functions_take_the_innermost_open_group() {
        let g = parse_groups(SNIPPET, "cu");
        assert_eq!(g.functions.get("cuMemAlloc").map(String::as_str), Some("CUDA_MEM"));
        assert_eq!(g.functions.get("cuInner").map(String::as_str), Some("CUDA_MEM_INNER"));
        assert_eq!(g.functions.get("cuMemFree").map(String::as_str), Some("CUDA_MEM"));
        assert_eq!(g.functions.get("cuOutside"), None);
        assert!(g.ungrouped.contains_key("cuOutside"));
        assert_eq!(g.titles.get("CUDA_MEM").map(String::as_str), Some("Memory Management"));
        assert_eq!(g.defined, ["CUDA_MEM", "CUDA_MEM_INNER"]);
        assert_eq!(group_page("CUDA_MEM", PageNames::CaseKept), "group__CUDA__MEM.html");
    }

    /// The shape of NVTX's headers: a function group per topic, a nested unnamed `@{` around
    /// each declaration, and a second header adding to a group the first one defines.
    const NVTX_SNIPPET: &str = "\
/** \\defgroup MARKERS_AND_RANGES Markers and Ranges
 * @{
 */
/** \\brief Marks an event.
 * \\version NVTX_VERSION_0
 * @{ */
NVTX_DECLSPEC void NVTX_API nvtxMarkA(const char* message);
NVTX_DECLSPEC void NVTX_API nvtxMarkW(const wchar_t* message);
/** @} */
/** @} */ /*END defgroup*/
#define nvtxMark nvtxMarkA
";

    const NVTX_CUDA_SNIPPET: &str = "\
/** \\addtogroup RESOURCE_NAMING
 * @{
 */
/** @{ */
NVTX_DECLSPEC void NVTX_API nvtxNameCuDeviceA(CUdevice device, const char* name);
/** @} */
/** @} */ /* END RESOURCE_NAMING */
";

    #[test]
    fn nvtx_functions_take_their_group_and_pages_escape_capitals() {
        let g = parse_groups(NVTX_SNIPPET, "nvtx");
        assert_eq!(g.functions.get("nvtxMarkA").map(String::as_str), Some("MARKERS_AND_RANGES"));
        assert_eq!(g.functions.get("nvtxMarkW").map(String::as_str), Some("MARKERS_AND_RANGES"));
        // The generic name is a #define, not a declaration.
        assert_eq!(g.functions.get("nvtxMark"), None);
        assert!(g.ungrouped.is_empty());
        assert_eq!(g.titles.get("MARKERS_AND_RANGES").map(String::as_str), Some("Markers and Ranges"));
        let cuda = parse_groups(NVTX_CUDA_SNIPPET, "nvtx");
        assert_eq!(cuda.functions.get("nvtxNameCuDeviceA").map(String::as_str), Some("RESOURCE_NAMING"));
        assert!(cuda.defined.is_empty());
        assert_eq!(
            group_page("MARKERS_AND_RANGES", PageNames::CaseEscaped),
            "group___m_a_r_k_e_r_s___a_n_d___r_a_n_g_e_s.html"
        );
        assert_eq!(
            group_page("SYNCHRONIZATION", PageNames::CaseEscaped),
            "group___s_y_n_c_h_r_o_n_i_z_a_t_i_o_n.html"
        );
    }

    #[test]
    fn a_group_added_to_takes_its_title_from_the_header_that_defines_it() -> Result<(), String> {
        let dir = std::env::temp_dir().join(format!("xtask-docgroups-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let core = dir.join("nvToolsExt.h");
        let cuda = dir.join("nvToolsExtCuda.h");
        let naming = "/** \\defgroup RESOURCE_NAMING Resource Naming\n * @{\n */\n\
                      NVTX_DECLSPEC void NVTX_API nvtxNameOsThreadA(uint32_t id, const char* name);\n\
                      /** @} */\n";
        std::fs::write(&core, naming).map_err(|e| e.to_string())?;
        std::fs::write(&cuda, NVTX_CUDA_SNIPPET).map_err(|e| e.to_string())?;
        let base = "https://nvidia.github.io/NVTX/doxygen/";
        let index = DocPlace { header: "nvToolsExt.h".into(), section: "index".into(), url: base.into() };
        let docs = DocIndex::new(&[&core, &cuda], "nvtx", base, PageNames::CaseEscaped, index);
        let _ = std::fs::remove_dir_all(&dir);
        let docs = docs?;
        let place = docs.place(&["nvtxNameCuDevice", "nvtxNameCuDeviceA"]);
        assert_eq!(place.header, "nvToolsExtCuda.h");
        assert_eq!(place.section, "Resource Naming");
        assert_eq!(place.url, format!("{base}group___r_e_s_o_u_r_c_e___n_a_m_i_n_g.html"));
        assert_eq!(docs.place(&["nvtxUnknown"]).url, base);
        Ok(())
    }
}
