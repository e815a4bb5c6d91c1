//! [`Kind::Safety`](super::Kind::Safety): an `unsafe` function has a `# Safety` section.

use super::source::headings;

/// Whether `sig` is `unsafe` while `doc` has no `# Safety` heading.
pub(super) fn missing(sig: &syn::Signature, doc: &str) -> bool {
    sig.unsafety.is_some() && !headings(doc).any(|h| h == "Safety")
}
