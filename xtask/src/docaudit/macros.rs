//! Methods written by `macro_rules!` macros, read where the macro defines them.

use proc_macro2::{Group, Ident, TokenStream, TokenTree};
use quote::ToTokens;

/// The public methods a `macro_rules!` macro writes into `impl` blocks: each rule's expansion,
/// with its `$` fragments made plain, read as the body of an `impl`.
pub(super) fn macro_methods(rules: &TokenStream) -> Vec<(syn::Signature, Vec<syn::Attribute>, TokenStream)> {
    let trees: Vec<TokenTree> = rules.clone().into_iter().collect();
    let mut out = Vec::new();
    for (i, tree) in trees.iter().enumerate() {
        let TokenTree::Group(expansion) = tree else { continue };
        let arrow = i >= 2
            && matches!(
                (&trees[i - 2], &trees[i - 1]),
                (TokenTree::Punct(a), TokenTree::Punct(b)) if a.as_char() == '=' && b.as_char() == '>'
            );
        if !arrow {
            continue;
        }
        let body = plain(expansion.stream());
        let wrapped = quote::quote!(impl MacroExpansion { #body });
        let Ok(imp) = syn::parse2::<syn::ItemImpl>(wrapped) else { continue };
        for item in imp.items {
            if let syn::ImplItem::Fn(f) = item {
                if matches!(f.vis, syn::Visibility::Public(_)) {
                    out.push((f.sig, f.attrs, f.block.to_token_stream()));
                }
            }
        }
    }
    out
}

/// A macro expansion's tokens with `$crate` as `crate`, `$name` as a plain identifier, and
/// each repetition `$( … ) sep op` written once.
pub(super) fn plain(tokens: TokenStream) -> TokenStream {
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    let mut out = TokenStream::new();
    let mut i = 0;
    while i < trees.len() {
        match (&trees[i], trees.get(i + 1)) {
            (TokenTree::Punct(p), Some(TokenTree::Ident(name))) if p.as_char() == '$' => {
                let plain_name = if name == "crate" { "crate".to_string() } else { format!("macro_{name}") };
                out.extend([TokenTree::Ident(Ident::new(&plain_name, name.span()))]);
                i += 2;
            }
            (TokenTree::Punct(p), Some(TokenTree::Group(g))) if p.as_char() == '$' => {
                out.extend(plain(g.stream()));
                i += 2;
                // The repetition operator, after an optional separator.
                let is_op = |t: Option<&TokenTree>| matches!(t, Some(TokenTree::Punct(p)) if matches!(p.as_char(), '*' | '+' | '?'));
                if is_op(trees.get(i)) {
                    i += 1;
                } else if is_op(trees.get(i + 1)) {
                    i += 2;
                }
            }
            (TokenTree::Group(g), _) => {
                let mut inner = Group::new(g.delimiter(), plain(g.stream()));
                inner.set_span(g.span());
                out.extend([TokenTree::Group(inner)]);
                i += 1;
            }
            (t, _) => {
                out.extend([t.clone()]);
                i += 1;
            }
        }
    }
    out
}
