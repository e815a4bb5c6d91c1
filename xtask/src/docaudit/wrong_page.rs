//! The check behind [`super::Kind::WrongPage`]: a doc link on a C function's name leads to the
//! page that documents that function.

use super::{Finding, Kind};
use std::collections::BTreeMap;

/// Whether `doc` links the page documenting the C function `name`: `page` itself (an anchor
/// allowed), or a page whose anchor is the function's name, as NCCL's per-topic pages have.
pub(super) fn links_page(doc: &str, name: &str, page: &str) -> bool {
    urls(doc).any(|url| url_documents(url, name, page))
}

pub(super) fn url_documents(url: &str, name: &str, page: &str) -> bool {
    let (base, anchor) = url.split_once('#').unwrap_or((url, ""));
    base == page || anchor.eq_ignore_ascii_case(name)
}

/// The `https://` addresses in a text.
pub(super) fn urls(text: &str) -> impl Iterator<Item = &str> {
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
pub(super) fn wrong_pages(file: &str, text: &str, pages: &BTreeMap<String, String>) -> Vec<Finding> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
