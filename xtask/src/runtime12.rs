//! Which CUDA 13 runtime functions `libcudart.so.12` exports with the same ABI.
//!
//! A function's ABI here is its signature with every alias resolved and every struct or union
//! it reaches (through pointers too) spelled out field by field, so that a struct whose layout
//! changed between 12 and 13 (`cudaDeviceProp`) makes every function that takes it differ.
//! A CUDA 13 function whose name the CUDA 12 header declares with the same ABI needs nothing;
//! one whose ABI CUDA 12 exports under a suffixed name (`cudaMemAdvise` is 12's
//! `cudaMemAdvise_v2`) is resolved by that name on 12; any other is refused on 12.

use std::collections::{BTreeMap, BTreeSet};

/// The functions and types of one header set, as bindgen wrote them.
pub struct Catalog {
    aliases: BTreeMap<String, syn::Type>,
    records: BTreeMap<String, Vec<(String, syn::Type)>>,
    functions: BTreeMap<String, (Vec<syn::Type>, Option<syn::Type>)>,
}

impl Catalog {
    /// Reads bindgen's items.
    pub fn new(items: &[syn::Item]) -> Catalog {
        let mut c =
            Catalog { aliases: BTreeMap::new(), records: BTreeMap::new(), functions: BTreeMap::new() };
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
                }
                syn::Item::ForeignMod(m) => {
                    for fi in &m.items {
                        let syn::ForeignItem::Fn(f) = fi else { continue };
                        let inputs = f
                            .sig
                            .inputs
                            .iter()
                            .filter_map(|a| match a {
                                syn::FnArg::Typed(p) => Some((*p.ty).clone()),
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

    /// The ABI of a declared function, or `None` when the headers do not declare it.
    pub fn abi(&self, function: &str) -> Option<String> {
        let (inputs, output) = self.functions.get(function)?;
        let mut seen = BTreeSet::new();
        let args: Vec<String> = inputs.iter().map(|t| self.deep(t, &mut seen)).collect();
        let ret = output.as_ref().map(|t| self.deep(t, &mut seen)).unwrap_or_else(|| "()".into());
        Some(format!("({}) -> {ret}", args.join(", ")))
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
                match self.records.get(&name) {
                    Some(fields) if seen.insert(name.clone()) => {
                        let inner: Vec<String> =
                            fields.iter().map(|(f, t)| format!("{f}: {}", self.deep(t, seen))).collect();
                        format!("{name} {{ {} }}", inner.join(", "))
                    }
                    _ => name,
                }
            }
            other => quote::quote!(#other).to_string(),
        }
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

/// Every function of `newer` whose ABI `older` does not declare under the same name, with the
/// suffixed name (`<name>_v<n>`, the highest `n`) under which `older` declares that ABI, if any.
pub fn differences(newer: &Catalog, older: &Catalog) -> BTreeMap<String, Option<String>> {
    let mut out = BTreeMap::new();
    for name in newer.functions.keys() {
        let Some(abi) = newer.abi(name) else { continue };
        if older.abi(name).as_ref() == Some(&abi) {
            continue;
        }
        let prefix = format!("{name}_v");
        let alternative = older
            .functions
            .keys()
            .filter_map(|o| {
                let n: u32 = o.strip_prefix(&prefix)?.parse().ok()?;
                (older.abi(o).as_ref() == Some(&abi)).then_some((n, o.clone()))
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
}
