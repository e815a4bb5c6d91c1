//! Which CUDA 13 runtime functions `libcudart.so.12` exports with the same ABI.
//!
//! A function's ABI here is its signature with every alias resolved and every struct or union
//! it reaches (through pointers too) spelled out field by field, so that a struct whose layout
//! changed between 12 and 13 (`cudaDeviceProp`) makes every function that takes it differ.
//! A struct reached through a pointer may have gained fields at its end (`reserved` arrays):
//! the older library reads and writes the fields it knows, which sit at the same offsets.
//! A CUDA 13 function whose name the CUDA 12 header declares with the same ABI needs nothing;
//! one whose ABI CUDA 12 exports under a suffixed name (`cudaMemAdvise` is 12's
//! `cudaMemAdvise_v2`) is resolved by that name on 12; any other is refused on 12.

use std::collections::{BTreeMap, BTreeSet};

/// A function's parameters, `(name, type)`, and its result (`None` for `void`).
type Signature = (Vec<(String, syn::Type)>, Option<syn::Type>);

/// The functions and types of one header set, as bindgen wrote them.
pub struct Catalog {
    aliases: BTreeMap<String, syn::Type>,
    records: BTreeMap<String, Vec<(String, syn::Type)>>,
    unions: BTreeSet<String>,
    /// Record sizes from bindgen's layout tests.
    sizes: BTreeMap<String, usize>,
    functions: BTreeMap<String, Signature>,
}

impl Catalog {
    /// Reads bindgen's items.
    pub fn new(items: &[syn::Item]) -> Catalog {
        let mut c = Catalog {
            aliases: BTreeMap::new(),
            records: BTreeMap::new(),
            unions: BTreeSet::new(),
            sizes: BTreeMap::new(),
            functions: BTreeMap::new(),
        };
        let size_test = regex::Regex::new(r#""Size of (\w+)"\s*,?\s*\]\s*\[[^\]]*?-\s*(\d+)\s*usize"#).ok();
        for item in items {
            match item {
                syn::Item::Type(t) => {
                    c.aliases.insert(t.ident.to_string(), (*t.ty).clone());
                }
                syn::Item::Struct(s) => {
                    c.records.insert(s.ident.to_string(), fields(s.fields.iter()));
                }
                syn::Item::Union(u) => {
                    c.records.insert(u.ident.to_string(), fields(u.fields.named.iter()));
                    c.unions.insert(u.ident.to_string());
                }
                syn::Item::Const(k) if k.ident == "_" => {
                    let text = quote::quote!(#k).to_string();
                    if let Some(re) = &size_test {
                        for cap in re.captures_iter(&text) {
                            if let Ok(n) = cap[2].parse() {
                                c.sizes.insert(cap[1].to_string(), n);
                            }
                        }
                    }
                }
                syn::Item::ForeignMod(m) => {
                    for fi in &m.items {
                        let syn::ForeignItem::Fn(f) = fi else { continue };
                        let inputs = f
                            .sig
                            .inputs
                            .iter()
                            .filter_map(|a| match a {
                                syn::FnArg::Typed(p) => {
                                    let name = match &*p.pat {
                                        syn::Pat::Ident(i) => i.ident.to_string(),
                                        _ => String::new(),
                                    };
                                    Some((name, (*p.ty).clone()))
                                }
                                syn::FnArg::Receiver(_) => None,
                            })
                            .collect();
                        let output = match &f.sig.output {
                            syn::ReturnType::Default => None,
                            syn::ReturnType::Type(_, t) => Some((**t).clone()),
                        };
                        c.functions.insert(f.sig.ident.to_string(), (inputs, output));
                    }
                }
                _ => {}
            }
        }
        c
    }

    fn deep(&self, ty: &syn::Type, seen: &mut BTreeSet<String>) -> String {
        match ty {
            syn::Type::Ptr(p) => {
                let m = if p.mutability.is_some() { "*mut " } else { "*const " };
                format!("{m}{}", self.deep(&p.elem, seen))
            }
            syn::Type::Array(a) => {
                let len = &a.len;
                format!("[{}; {}]", self.deep(&a.elem, seen), quote::quote!(#len))
            }
            syn::Type::Path(p) if p.path.segments.len() == 1 || p.path.leading_colon.is_none() => {
                let Some(last) = p.path.segments.last() else { return String::new() };
                if !matches!(last.arguments, syn::PathArguments::None) {
                    return quote::quote!(#ty).to_string();
                }
                let name = last.ident.to_string();
                if let Some(target) = self.aliases.get(&name) {
                    return self.deep(target, seen);
                }
                match self.fields_of(&name) {
                    Some(fields) if seen.insert(name.clone()) => {
                        let inner: Vec<String> =
                            fields.iter().map(|(f, t)| format!("{f}: {}", self.deep(t, seen))).collect();
                        let size = self.sizes.get(&name).map(|n| format!("[{n}]")).unwrap_or_default();
                        format!("{name}{size} {{ {} }}", inner.join(", "))
                    }
                    _ => name,
                }
            }
            other => quote::quote!(#other).to_string(),
        }
    }
}

/// Whether `older` can be called with what `newer` declares for `newer_fn` and `older_fn`: the
/// same arguments and result, except that a struct or union an argument points to may have
/// gained fields at its end (the older library reads and writes the part it knows, at the same
/// offsets). That holds for one struct, not for an array of them, whose stride changed: a
/// function with a count parameter (`num*`, `*count*`) may take arrays, and gets no such leeway.
fn callable_as(newer: &Catalog, newer_fn: &str, older: &Catalog, older_fn: &str) -> bool {
    let (Some((new_in, new_out)), Some((old_in, old_out))) =
        (newer.functions.get(newer_fn), older.functions.get(older_fn))
    else {
        return false;
    };
    let same_result = match (new_out, old_out) {
        (Some(a), Some(b)) => same_type(newer, a, older, b),
        (None, None) => true,
        _ => false,
    };
    let may_take_arrays = new_in.iter().any(|(name, _)| {
        let name = name.to_ascii_lowercase();
        name.starts_with("num") || name.contains("count")
    });
    same_result
        && new_in.len() == old_in.len()
        && new_in.iter().zip(old_in).all(|((_, a), (_, b))| {
            if may_take_arrays {
                same_type(newer, a, older, b)
            } else {
                arguments_match(newer, a, older, b, false)
            }
        })
}

fn same_type(newer: &Catalog, a: &syn::Type, older: &Catalog, b: &syn::Type) -> bool {
    newer.deep(a, &mut BTreeSet::new()) == older.deep(b, &mut BTreeSet::new())
}

fn arguments_match(
    newer: &Catalog,
    a: &syn::Type,
    older: &Catalog,
    b: &syn::Type,
    behind_pointer: bool,
) -> bool {
    if same_type(newer, a, older, b) {
        return true;
    }
    match (a, b) {
        (syn::Type::Ptr(pa), syn::Type::Ptr(pb)) => {
            pa.mutability.is_some() == pb.mutability.is_some()
                && arguments_match(newer, &pa.elem, older, &pb.elem, true)
        }
        _ if behind_pointer => match (newer.record(a), older.record(b)) {
            (Some(new_fields), Some(old_fields)) => {
                let prefix_of_new = |old: &[(String, syn::Type)]| {
                    old.len() < new_fields.len()
                        && old
                            .iter()
                            .zip(&new_fields)
                            .all(|((on, ot), (nn, nt))| on == nn && same_type(newer, nt, older, ot))
                };
                // New fields at the end, or new fields carved out of a trailing `reserved`
                // array at the same size (CUDA 13.1's `cudaFuncAttributes`).
                let unreserved: Vec<(String, syn::Type)> = {
                    let mut kept = old_fields.clone();
                    while kept.last().is_some_and(|(n, _)| n.starts_with("reserved")) {
                        kept.pop();
                    }
                    kept
                };
                let same_size = matches!(
                    (newer.size_of(a), older.size_of(b)),
                    (Some(x), Some(y)) if x == y
                );
                prefix_of_new(&old_fields)
                    || (same_size && unreserved.len() < old_fields.len() && prefix_of_new(&unreserved))
            }
            _ => false,
        },
        _ => false,
    }
}

impl Catalog {
    /// The fields of the struct or union `ty` names, through aliases, as [`Catalog::fields_of`] gives them.
    fn record(&self, ty: &syn::Type) -> Option<Vec<(String, syn::Type)>> {
        let syn::Type::Path(p) = ty else { return None };
        let name = p.path.segments.last()?.ident.to_string();
        match self.aliases.get(&name) {
            Some(target) => self.record(target),
            None => self.fields_of(&name),
        }
    }

    /// The size bindgen's layout test gives the record `ty` names, through aliases.
    fn size_of(&self, ty: &syn::Type) -> Option<usize> {
        let syn::Type::Path(p) = ty else { return None };
        let name = p.path.segments.last()?.ident.to_string();
        match self.aliases.get(&name) {
            Some(target) => self.size_of(target),
            None => self.sizes.get(&name).copied(),
        }
    }

    /// The fields of the record `name`, an anonymous union member (`__bindgen_anon_N`) standing
    /// for its first member: C places every member of the union at the union's offset, and a
    /// header that wraps a field in such a union (`cudaMemLocation::id` in CUDA 13.1) keeps the
    /// field where it was. The record's size, compared with the rest, catches a union that
    /// grew past the field.
    fn fields_of(&self, name: &str) -> Option<Vec<(String, syn::Type)>> {
        let fields = self.records.get(name)?;
        Some(
            fields
                .iter()
                .map(|(f, t)| {
                    let first = match t {
                        syn::Type::Path(p) if f.starts_with("__bindgen_anon_") => p
                            .path
                            .segments
                            .last()
                            .map(|s| s.ident.to_string())
                            .filter(|u| self.unions.contains(u))
                            .and_then(|u| self.records.get(&u))
                            .and_then(|members| members.first().cloned()),
                        _ => None,
                    };
                    first.unwrap_or_else(|| (f.clone(), t.clone()))
                })
                .collect(),
        )
    }
}

fn fields<'a>(fields: impl Iterator<Item = &'a syn::Field>) -> Vec<(String, syn::Type)> {
    fields
        .enumerate()
        .map(|(i, f)| {
            (f.ident.as_ref().map(ToString::to_string).unwrap_or_else(|| i.to_string()), f.ty.clone())
        })
        .collect()
}

/// Every function of `newer` that cannot be called as `older` declares it under the same name
/// (see `callable_as`), with the
/// suffixed name (`<name>_v<n>`, the highest `n`) under which `older` declares that ABI, if any.
pub fn differences(newer: &Catalog, older: &Catalog) -> BTreeMap<String, Option<String>> {
    let mut out = BTreeMap::new();
    for name in newer.functions.keys() {
        if callable_as(newer, name, older, name) {
            continue;
        }
        let prefix = format!("{name}_v");
        let alternative = older
            .functions
            .keys()
            .filter_map(|o| {
                let n: u32 = o.strip_prefix(&prefix)?.parse().ok()?;
                callable_as(newer, name, older, o).then_some((n, o.clone()))
            })
            .max()
            .map(|(_, o)| o);
        out.insert(name.clone(), alternative);
    }
    out
}

/// The generated table, as Rust source.
pub fn render(differences: &BTreeMap<String, Option<String>>) -> String {
    let mut text = String::from(
        "/// CUDA 13 runtime functions whose ABI `libcudart.so.12` exports under another name\n\
         /// (`Some`) or not at all (`None`), sorted by name.\n\
         pub(crate) static CUDA12_ABI: &[(&str, Option<&str>)] = &[\n",
    );
    for (name, alternative) in differences {
        match alternative {
            Some(a) => text.push_str(&format!("    (\"{name}\", Some(\"{a}\")),\n")),
            None => text.push_str(&format!("    (\"{name}\", None),\n")),
        }
    }
    text.push_str("];\n");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog(file: syn::File) -> Catalog {
        Catalog::new(&file.items)
    }

    #[test]
    fn a_changed_struct_layout_makes_its_functions_differ() {
        let v13 = catalog(syn::parse_quote! {
            pub struct cudaDeviceProp { pub major: i32, pub minor: i32 }
            pub type cudaError_t = u32;
            pub type cudaStream_t = *mut CUstream_st;
            unsafe extern "C" {
                pub fn cudaGetDeviceProperties(prop: *mut cudaDeviceProp, device: i32) -> cudaError_t;
                pub fn cudaMemAdvise(p: *const u8, n: usize, a: u32, l: cudaMemLocation) -> cudaError_t;
                pub fn cudaStreamSynchronize(s: cudaStream_t) -> cudaError_t;
            }
        });
        let v12 = catalog(syn::parse_quote! {
            pub struct cudaDeviceProp { pub major: i32, pub minor: i32, pub clockRate: i32 }
            pub type cudaError = u32;
            pub type cudaError_t = cudaError;
            pub type cudaStream_t = *mut CUstream_st;
            unsafe extern "C" {
                pub fn cudaGetDeviceProperties_v2(prop: *mut cudaDeviceProp, device: i32) -> cudaError_t;
                pub fn cudaMemAdvise(p: *const u8, n: usize, a: u32, device: i32) -> cudaError_t;
                pub fn cudaMemAdvise_v2(p: *const u8, n: usize, a: u32, l: cudaMemLocation) -> cudaError_t;
                pub fn cudaStreamSynchronize(s: cudaStream_t) -> cudaError_t;
            }
        });
        let d = differences(&v13, &v12);
        assert_eq!(d.get("cudaGetDeviceProperties"), Some(&None));
        assert_eq!(d.get("cudaMemAdvise"), Some(&Some("cudaMemAdvise_v2".to_string())));
        assert_eq!(d.get("cudaStreamSynchronize"), None, "aliases resolve to the same type");
        assert_eq!(d.len(), 2);
    }

    #[test]
    fn fields_added_at_the_end_of_a_pointed_to_struct_keep_it_callable() {
        let v13 = catalog(syn::parse_quote! {
            pub struct cudaPointerAttributes { pub type_: i32, pub device: i32, pub reserved: [i64; 8usize] }
            pub struct cudaExtent { pub width: usize, pub height: usize, pub depth: usize, pub extra: usize }
            pub struct cudaDeviceProp { pub name: [u8; 256usize], pub totalGlobalMem: usize }
            unsafe extern "C" {
                pub fn cudaPointerGetAttributes(a: *mut cudaPointerAttributes, p: *const u8) -> u32;
                pub fn cudaByValue(e: cudaExtent) -> u32;
                pub fn cudaGetDeviceProperties(prop: *mut cudaDeviceProp, device: i32) -> u32;
                pub fn cudaArrayOf(a: *mut cudaPointerAttributes, numAttrs: usize) -> u32;
            }
        });
        let v12 = catalog(syn::parse_quote! {
            pub struct cudaPointerAttributes { pub type_: i32, pub device: i32 }
            pub struct cudaExtent { pub width: usize, pub height: usize, pub depth: usize }
            pub struct cudaDeviceProp { pub name: [u8; 256usize], pub clockRate: i32, pub totalGlobalMem: usize }
            unsafe extern "C" {
                pub fn cudaPointerGetAttributes(a: *mut cudaPointerAttributes, p: *const u8) -> u32;
                pub fn cudaByValue(e: cudaExtent) -> u32;
                pub fn cudaGetDeviceProperties(prop: *mut cudaDeviceProp, device: i32) -> u32;
                pub fn cudaArrayOf(a: *mut cudaPointerAttributes, numAttrs: usize) -> u32;
            }
        });
        let d = differences(&v13, &v12);
        assert_eq!(d.get("cudaArrayOf"), Some(&None), "an array of grown structs has another stride");
        assert_eq!(d.get("cudaPointerGetAttributes"), None);
        assert_eq!(d.get("cudaByValue"), Some(&None), "a struct passed by value must match exactly");
        assert_eq!(
            d.get("cudaGetDeviceProperties"),
            Some(&None),
            "a field removed in the middle moves the rest"
        );
    }

    #[test]
    fn a_field_wrapped_in_an_anonymous_union_keeps_its_functions_callable() {
        let v13 = catalog(syn::parse_quote! {
            pub struct cudaMemLocation { pub type_: u32, pub __bindgen_anon_1: cudaMemLocation__bindgen_ty_1 }
            pub union cudaMemLocation__bindgen_ty_1 { pub id: i32, pub pair: [u8; 2usize] }
            const _: () = { ["Size of cudaMemLocation"][::core::mem::size_of::<cudaMemLocation>() - 8usize]; };
            pub struct cudaWide { pub type_: u32, pub __bindgen_anon_1: cudaWide__bindgen_ty_1 }
            pub union cudaWide__bindgen_ty_1 { pub id: i32, pub big: [u64; 2usize] }
            const _: () = { ["Size of cudaWide"][::core::mem::size_of::<cudaWide>() - 24usize]; };
            unsafe extern "C" {
                pub fn cudaMemAdvise(p: *const u8, n: usize, a: u32, l: cudaMemLocation) -> u32;
                pub fn cudaWideCall(l: cudaWide) -> u32;
            }
        });
        let v12 = catalog(syn::parse_quote! {
            pub struct cudaMemLocation { pub type_: u32, pub id: i32 }
            const _: () = { ["Size of cudaMemLocation"][::core::mem::size_of::<cudaMemLocation>() - 8usize]; };
            pub struct cudaWide { pub type_: u32, pub id: i32 }
            const _: () = { ["Size of cudaWide"][::core::mem::size_of::<cudaWide>() - 8usize]; };
            unsafe extern "C" {
                pub fn cudaMemAdvise(p: *const u8, n: usize, a: u32, l: cudaMemLocation) -> u32;
                pub fn cudaWideCall(l: cudaWide) -> u32;
            }
        });
        let d = differences(&v13, &v12);
        assert_eq!(d.get("cudaMemAdvise"), None, "the id is where it was");
        assert_eq!(d.get("cudaWideCall"), Some(&None), "a union that grew moves what follows");
    }

    #[test]
    fn fields_carved_out_of_trailing_reserved_bytes_keep_a_pointed_to_struct_callable() {
        let v13 = catalog(syn::parse_quote! {
            pub struct cudaFuncAttributes { pub maxThreads: i32, pub newer: i32, pub reserved: [i32; 15usize] }
            const _: () = { ["Size of cudaFuncAttributes"][::core::mem::size_of::<cudaFuncAttributes>() - 64usize]; };
            pub struct cudaGrown { pub a: i32, pub newer: i32, pub reserved: [i32; 15usize] }
            const _: () = { ["Size of cudaGrown"][::core::mem::size_of::<cudaGrown>() - 68usize]; };
            unsafe extern "C" {
                pub fn cudaFuncGetAttributes(attr: *mut cudaFuncAttributes, f: *const u8) -> u32;
                pub fn cudaGrownGet(g: *mut cudaGrown) -> u32;
            }
        });
        let v12 = catalog(syn::parse_quote! {
            pub struct cudaFuncAttributes { pub maxThreads: i32, pub reserved: [i32; 16usize] }
            const _: () = { ["Size of cudaFuncAttributes"][::core::mem::size_of::<cudaFuncAttributes>() - 64usize]; };
            pub struct cudaGrown { pub a: i32, pub reserved: [i32; 15usize] }
            const _: () = { ["Size of cudaGrown"][::core::mem::size_of::<cudaGrown>() - 64usize]; };
            unsafe extern "C" {
                pub fn cudaFuncGetAttributes(attr: *mut cudaFuncAttributes, f: *const u8) -> u32;
                pub fn cudaGrownGet(g: *mut cudaGrown) -> u32;
            }
        });
        let d = differences(&v13, &v12);
        assert_eq!(d.get("cudaFuncGetAttributes"), None, "the same bytes, the old fields where they were");
        assert_eq!(d.get("cudaGrownGet"), Some(&None), "a different size is not the same struct");
    }
}
