//! Rust syntax as text, for the generators and reports that compare or print bindgen's items,
//! and the generated function lists read back.

/// A type as `prettyplease` prints it (`*mut ::core::ffi::c_void`).
pub fn type_text(ty: &syn::Type) -> String {
    let file: syn::File = syn::parse_quote!(type T = #ty;);
    let text = prettyplease::unparse(&file);
    text.trim().trim_start_matches("type T = ").trim_end_matches(';').to_string()
}

/// The ABI version each function of a generated driver function list resolves at
/// (`    cuFoo(args) -> ret => c"cuFoo", 13010, ...;`).
pub fn driver_versions(functions_rs: &str) -> std::collections::BTreeMap<String, i32> {
    let Ok(re) = regex::Regex::new(r#"(?m)^\s{4}(\w+)\(.*?=> c"\w+", (\d+), "#) else {
        return Default::default();
    };
    re.captures_iter(functions_rs).filter_map(|c| Some((c[1].to_string(), c[2].parse().ok()?))).collect()
}
