//! Which traits the generated C structs derive.
//!
//! bindgen derives `Hash`, `PartialEq` and `Eq` on every type it can. The newtype enums need
//! them (statuses are compared and matched on), and so do the structs of one field, which are
//! identifiers and opaque handles (`CUuuid`, the IPC and fabric handles). The structs of several
//! fields are parameter blocks, which nobody hashes and whose equality C does not define (padding,
//! pointers that mean the same memory): without the three derives they keep `Debug`, `Copy`,
//! `Clone` and `Default`, and the driver crate type-checks about a sixth faster, which every
//! crate built on it waits for.

/// Removes `Hash`, `PartialEq` and `Eq` from the derives of each struct of more than one field.
pub fn trim_parameter_struct_derives(items: &mut [syn::Item]) {
    for item in items {
        let syn::Item::Struct(s) = item else { continue };
        if s.fields.len() < 2 {
            continue;
        }
        for attr in &mut s.attrs {
            if !attr.path().is_ident("derive") {
                continue;
            }
            let Ok(paths) = attr
                .parse_args_with(syn::punctuated::Punctuated::<syn::Path, syn::Token![,]>::parse_terminated)
            else {
                continue;
            };
            let kept: Vec<&syn::Path> = paths
                .iter()
                .filter(|p| !["Hash", "PartialEq", "Eq"].iter().any(|name| p.is_ident(name)))
                .collect();
            if kept.len() != paths.len() {
                *attr = syn::parse_quote!(#[derive(#(#kept),*)]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn derives(item: &syn::Item) -> String {
        let syn::Item::Struct(s) = item else { return String::new() };
        s.attrs.iter().map(|a| quote::quote!(#a).to_string()).collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn parameter_structs_lose_hash_and_equality_and_one_field_structs_keep_them() {
        let mut items: Vec<syn::Item> = vec![
            syn::parse_quote! {
                #[repr(C)]
                #[derive(Debug, Default, Copy, Clone, Hash, PartialEq, Eq)]
                pub struct Params { pub a: u32, pub b: u64 }
            },
            syn::parse_quote! {
                #[derive(Debug, Copy, Clone, Hash, PartialEq, Eq)]
                pub struct Uuid { pub bytes: [u8; 16] }
            },
            syn::parse_quote! {
                #[derive(Debug, Copy, Clone, Hash, PartialEq, Eq)]
                pub struct Status(pub u32);
            },
        ];
        trim_parameter_struct_derives(&mut items);
        assert_eq!(derives(&items[0]), "# [repr (C)] # [derive (Debug , Default , Copy , Clone)]");
        assert!(derives(&items[1]).contains("Hash , PartialEq , Eq"), "{}", derives(&items[1]));
        assert!(derives(&items[2]).contains("Hash , PartialEq , Eq"), "{}", derives(&items[2]));
    }
}
