//! Rust syntax as text, for the generators and reports that compare or print bindgen's items.

/// A type as `prettyplease` prints it (`*mut ::core::ffi::c_void`).
pub fn type_text(ty: &syn::Type) -> String {
    let file: syn::File = syn::parse_quote!(type T = #ty;);
    let text = prettyplease::unparse(&file);
    text.trim().trim_start_matches("type T = ").trim_end_matches(';').to_string()
}
