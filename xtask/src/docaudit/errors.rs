//! [`Kind::Errors`](super::Kind::Errors): a function returning `Result` says how it fails.
//!
//! An `# Errors` section, a sentence naming an `Error::` variant, or words such as "fails" or
//! "refused" count. A thin wrapper (one C call in its body, no error of its own) may instead
//! link that call's section of NVIDIA's reference, when the crate documentation states the
//! convention for thin wrappers.

use super::source::{Crate, headings};
use super::wrong_page::links_page;
use proc_macro2::{TokenStream, TokenTree};
use std::collections::BTreeSet;

/// Whether a function returning `output`, documented by `doc`, with `body` calling the C
/// functions `calls`, leaves its errors undocumented.
pub(super) fn undocumented(
    krate: &Crate,
    output: &syn::ReturnType,
    doc: &str,
    body: Option<&TokenStream>,
    calls: &BTreeSet<String>,
) -> bool {
    if !returns_result(output) || says_errors(doc) {
        return false;
    }
    // A body that makes errors of its own (`Error::…`) is more than a wrapper.
    let thin_wrapper = krate.convention
        && calls.len() == 1
        && !body.is_some_and(makes_errors)
        && calls.iter().all(|c| krate.pages.get(c).is_some_and(|page| links_page(doc, c, page)));
    !thin_wrapper
}

pub(super) fn returns_result(output: &syn::ReturnType) -> bool {
    match output {
        syn::ReturnType::Type(_, ty) => match &**ty {
            syn::Type::Path(p) => p.path.segments.last().is_some_and(|s| s.ident == "Result"),
            _ => false,
        },
        syn::ReturnType::Default => false,
    }
}

/// Whether a doc says how the function fails.
pub(super) fn says_errors(doc: &str) -> bool {
    if headings(doc).any(|h| h == "Errors") || doc.contains("Error::") {
        return true;
    }
    let lower = doc.to_ascii_lowercase();
    lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .any(|w| matches!(w, "error" | "errors" | "fails" | "refused" | "refuses" | "rejected"))
}

/// Whether `tokens` name a variant or constructor of `Error` (`Error::invalid`, …).
pub(super) fn makes_errors(tokens: &TokenStream) -> bool {
    let trees: Vec<TokenTree> = tokens.clone().into_iter().collect();
    trees.iter().enumerate().any(|(i, tree)| match tree {
        TokenTree::Group(g) => makes_errors(&g.stream()),
        TokenTree::Ident(e) if e == "Error" => matches!(
            (trees.get(i + 1), trees.get(i + 2)),
            (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b))) if a.as_char() == ':' && b.as_char() == ':'
        ),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_recognised_by_section_variant_or_wording() {
        assert!(says_errors("Does it.\n\n# Errors\n\nWhen out of memory."));
        assert!(says_errors("Fails with [`Error::InvalidArgument`] for zero."));
        assert!(says_errors("Refused when the stream is capturing."));
        assert!(says_errors("A length of zero is rejected."));
        assert!(!says_errors("Allocates memory; errorless in practice."));
        assert!(!says_errors("Allocates memory."));
    }
}
