//! [`Kind::Link`](super::Kind::Link): a function that calls a C function of a `-sys` crate links
//! NVIDIA's documentation in its doc, its type's or its module's.

use proc_macro2::{TokenStream, TokenTree};
use std::collections::BTreeSet;

/// The names under which `cuhost` refers to the `-sys` crates.
pub(super) const SYS_PATHS: &[&str] = &[
    "sys",
    "rt",
    "nccl",
    "cuhost_driver_sys",
    "driver_sys",
    "cuhost_cudart_sys",
    "runtime_sys",
    "cuhost_nccl_sys",
    "cuhost_nvtx_sys",
];

/// Where NVIDIA documents the C functions of the `-sys` crates.
pub(super) const NVIDIA_DOCS: &str = "https://docs.nvidia.com/";
/// Where NVIDIA documents the NVTX C API.
pub(super) const NVTX_DOCS: &str = "https://nvidia.github.io/NVTX/";

/// The C library a function belongs to, told by its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Library {
    Driver,
    Runtime,
    Nccl,
    Nvtx,
}

pub(super) fn library_of(name: &str) -> Option<Library> {
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
pub(super) fn links_docs(doc: &str, library: Library) -> bool {
    doc.contains(NVIDIA_DOCS) || (library == Library::Nvtx && doc.contains(NVTX_DOCS))
}

/// Every `<sys crate>::<C function>` path in `tokens`, macro arguments included, and every
/// driver call made through `cuhost`'s `driver!(cuName(..))` or `driver!(status: cuName(..))`.
pub(super) fn c_calls(tokens: TokenStream, out: &mut BTreeSet<String>) {
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    for (i, tree) in trees.iter().enumerate() {
        match tree {
            TokenTree::Group(g) => c_calls(g.stream(), out),
            TokenTree::Ident(m) if m == "driver" => {
                // `driver!(cuName(..))`, or `driver!(status: cuName(..))`.
                let called = match (trees.get(i + 1), trees.get(i + 2)) {
                    (Some(TokenTree::Punct(bang)), Some(TokenTree::Group(args))) if bang.as_char() == '!' => {
                        let mut args = args.stream().into_iter();
                        match args.next() {
                            Some(TokenTree::Ident(first)) if first == "status" => args.nth(1),
                            first => first,
                        }
                    }
                    _ => None,
                };
                if let Some(TokenTree::Ident(name)) = called {
                    let name = name.to_string();
                    if library_of(&name) == Some(Library::Driver) {
                        out.insert(name);
                    }
                }
            }
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

/// The C functions of `calls` that none of `docs` links documentation for.
pub(super) fn unlinked<'a>(calls: &'a BTreeSet<String>, docs: &[&str]) -> Vec<&'a str> {
    calls
        .iter()
        .filter(|c| {
            let lib = library_of(c).unwrap_or(Library::Driver);
            !docs.iter().any(|d| links_docs(d, lib))
        })
        .map(String::as_str)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_functions_are_told_from_other_paths() {
        let mut calls = BTreeSet::new();
        let tokens: TokenStream = "check(\"x\", unsafe { sys::cuMemAlloc(&mut p, n) }); \
            let s = sys::CUresult::CUDA_SUCCESS; rt::cudaMalloc(p, n); nccl::ncclAllReduce(); \
            rt::cudaMemcpy(d, s, n, rt::cudaMemcpyKind::cudaMemcpyDefault); \
            other::cuNotSys(); sys::per_thread_default_stream(); \
            unsafe { driver!(cuMemFree(p)) }; driver!(not_a_call); driver!(status: cuEventQuery(e));"
            .parse()
            .unwrap_or_default();
        c_calls(tokens, &mut calls);
        assert_eq!(
            calls.into_iter().collect::<Vec<_>>(),
            ["cuEventQuery", "cuMemAlloc", "cuMemFree", "cudaMalloc", "cudaMemcpy", "ncclAllReduce"]
        );
        assert_eq!(library_of("cudaMalloc"), Some(Library::Runtime));
        assert_eq!(library_of("cuMemAlloc"), Some(Library::Driver));
        assert_eq!(library_of("current"), None);
    }
}
