//! The ABI version of each driver function, read from the `PFN_<name>_v<version>` typedefs of
//! `cudaTypedefs.h`: the version whose signature is the one the header declares.

use std::collections::BTreeMap;

/// One typedef: its version, whether it is the per-thread-default-stream variant, its
/// signature with every type alias resolved, and its parameters as the typedef writes them.
struct Variant {
    version: i32,
    per_thread: bool,
    signature: String,
    params: Vec<(String, syn::Type)>,
    output: Option<syn::Type>,
}

/// One ABI version of a function as its `PFN_` typedef declares it.
pub struct TypedefVariant {
    /// The function's base name (`cuMemAdvise`).
    pub base: String,
    /// The ABI version (`8000`).
    pub version: i32,
    /// The version of the per-thread-default-stream variant with the same signature; 0 if none.
    pub per_thread_version: i32,
    /// `(name, type)` of each parameter; unnamed ones are `argN`.
    pub params: Vec<(String, syn::Type)>,
    /// The return type; `None` for `void`.
    pub output: Option<syn::Type>,
}

/// Every `PFN_` typedef, by the function's base name.
pub struct AbiTable {
    variants: BTreeMap<String, Vec<Variant>>,
    aliases: BTreeMap<String, syn::Type>,
}

impl AbiTable {
    /// Builds the table from bindgen's items.
    pub fn new(items: &[syn::Item]) -> Self {
        let mut aliases = BTreeMap::new();
        for item in items {
            if let syn::Item::Type(t) = item {
                aliases.insert(t.ident.to_string(), (*t.ty).clone());
            }
        }
        let mut table = AbiTable { variants: BTreeMap::new(), aliases };
        let pfn = regex::Regex::new(r"^PFN_(\w+?)_v(\d+)(_ptds|_ptsz)?$").ok();
        let mut found = Vec::new();
        for (name, ty) in &table.aliases {
            let Some(c) = pfn.as_ref().and_then(|re| re.captures(name)) else { continue };
            let Ok(version) = c[2].parse::<i32>() else { continue };
            let Some(f) = bare_fn(ty) else { continue };
            let params: Vec<(String, syn::Type)> = f
                .inputs
                .iter()
                .enumerate()
                .map(|(i, a)| {
                    let name =
                        a.name.as_ref().map(|(n, _)| n.to_string()).unwrap_or_else(|| format!("arg{i}"));
                    (name, a.ty.clone())
                })
                .collect();
            let output = match &f.output {
                syn::ReturnType::Default => None,
                syn::ReturnType::Type(_, t) => Some((**t).clone()),
            };
            found.push((c[1].to_string(), version, c.get(3).is_some(), params, output));
        }
        for (base, version, per_thread, params, output) in found {
            let inputs: Vec<syn::Type> = params.iter().map(|(_, t)| t.clone()).collect();
            let signature = table.signature(&inputs, output.as_ref());
            let variant = Variant { version, per_thread, signature, params, output };
            table.variants.entry(base).or_default().push(variant);
        }
        table
    }

    /// A signature with aliases resolved, for comparing a declaration with a typedef.
    pub fn signature(&self, inputs: &[syn::Type], output: Option<&syn::Type>) -> String {
        let args: Vec<String> = inputs.iter().map(|t| self.resolve(t, 0)).collect();
        let ret = output.map(|t| self.resolve(t, 0)).unwrap_or_else(|| "()".into());
        format!("({}) -> {ret}", args.join(", "))
    }

    fn resolve(&self, ty: &syn::Type, depth: usize) -> String {
        match ty {
            syn::Type::Ptr(p) => {
                let m = if p.mutability.is_some() { "*mut " } else { "*const " };
                format!("{m}{}", self.resolve(&p.elem, depth))
            }
            syn::Type::Path(p) => {
                let name = p.path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default();
                match self.aliases.get(&name) {
                    Some(target) if depth < 16 && p.path.segments.len() == 1 => {
                        self.resolve(target, depth + 1)
                    }
                    _ => name,
                }
            }
            other => quote::quote!(#other).to_string(),
        }
    }

    /// The newest default and per-thread versions of `base` whose signature is `signature`.
    pub fn versions(&self, base: &str, signature: &str) -> Option<(i32, i32)> {
        let variants = self.variants.get(base)?;
        let newest = |pt: bool| {
            variants
                .iter()
                .filter(|v| v.per_thread == pt && v.signature == signature)
                .map(|v| v.version)
                .max()
        };
        Some((newest(false)?, newest(true).unwrap_or(0)))
    }

    /// Every default-stream ABI version of every function, by base name then version, each with
    /// its per-thread version: the newest per-thread typedef of the same signature from before
    /// the next default-stream version (two versions can share a signature and differ in
    /// meaning, as `cuStreamWaitValue32` 8.0 and 11.7 do), 0 when there is none.
    pub fn all_variants(&self) -> Vec<TypedefVariant> {
        let mut out = Vec::new();
        for (base, variants) in &self.variants {
            let mut own: Vec<&Variant> = variants.iter().filter(|v| !v.per_thread).collect();
            own.sort_by_key(|v| v.version);
            let next_versions: Vec<i32> =
                own.iter().skip(1).map(|v| v.version).chain(std::iter::once(i32::MAX)).collect();
            for (v, next) in own.into_iter().zip(next_versions) {
                let per_thread_version = variants
                    .iter()
                    .filter(|p| p.per_thread && p.signature == v.signature && p.version < next)
                    .map(|p| p.version)
                    .max()
                    .unwrap_or(0);
                out.push(TypedefVariant {
                    base: base.clone(),
                    version: v.version,
                    per_thread_version,
                    params: v.params.clone(),
                    output: v.output.clone(),
                });
            }
        }
        out
    }
}

fn bare_fn(ty: &syn::Type) -> Option<&syn::TypeBareFn> {
    // bindgen writes function pointer typedefs as `Option<unsafe extern "C" fn(..)>`.
    let syn::Type::Path(p) = ty else { return None };
    let seg = p.path.segments.last()?;
    let syn::PathArguments::AngleBracketed(args) = &seg.arguments else { return None };
    match args.args.first()? {
        syn::GenericArgument::Type(syn::Type::BareFn(f)) => Some(f),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> AbiTable {
        let file: syn::File = syn::parse_quote! {
            pub type CUcontext = *mut CUctx_st;
            pub type CUdevice_v1 = ::core::ffi::c_int;
            pub type CUdevice = CUdevice_v1;
            pub type PFN_cuCtxSynchronize_v2000 = Option<unsafe extern "C" fn() -> CUresult>;
            pub type PFN_cuCtxSynchronize_v13000 = Option<unsafe extern "C" fn(ctx: CUcontext) -> CUresult>;
            pub type PFN_cuMemAdvise_v8000 = Option<unsafe extern "C" fn(p: u64, n: usize, d: CUdevice_v1) -> CUresult>;
            pub type PFN_cuMemAdvise_v12020 = Option<unsafe extern "C" fn(p: u64, n: usize, l: CUmemLocation) -> CUresult>;
            pub type PFN_cuMemcpy_v4000 = Option<unsafe extern "C" fn(d: u64, s: u64, n: usize) -> CUresult>;
            pub type PFN_cuMemcpy_v7000_ptds = Option<unsafe extern "C" fn(d: u64, s: u64, n: usize) -> CUresult>;
            pub type PFN_cuStreamWaitValue32_v8000 = Option<unsafe extern "C" fn(s: CUstream, v: u32) -> CUresult>;
            pub type PFN_cuStreamWaitValue32_v8000_ptsz = Option<unsafe extern "C" fn(s: CUstream, v: u32) -> CUresult>;
            pub type PFN_cuStreamWaitValue32_v11070 = Option<unsafe extern "C" fn(s: CUstream, v: u32) -> CUresult>;
            pub type PFN_cuStreamWaitValue32_v11070_ptsz = Option<unsafe extern "C" fn(s: CUstream, v: u32) -> CUresult>;
        };
        AbiTable::new(&file.items)
    }

    fn sig(t: &AbiTable, inputs: &[syn::Type]) -> String {
        let ret: syn::Type = syn::parse_quote!(CUresult);
        t.signature(inputs, Some(&ret))
    }

    #[test]
    fn the_version_is_the_one_whose_signature_matches() {
        let t = table();
        assert_eq!(t.versions("cuCtxSynchronize", &sig(&t, &[])), Some((2000, 0)));
        let ctx: syn::Type = syn::parse_quote!(CUcontext);
        assert_eq!(t.versions("cuCtxSynchronize", &sig(&t, &[ctx])), Some((13000, 0)));
    }

    #[test]
    fn aliases_are_resolved_before_comparing() {
        let t = table();
        let (p, n): (syn::Type, syn::Type) = (syn::parse_quote!(u64), syn::parse_quote!(usize));
        let dev: syn::Type = syn::parse_quote!(CUdevice);
        let loc: syn::Type = syn::parse_quote!(CUmemLocation);
        assert_eq!(t.versions("cuMemAdvise", &sig(&t, &[p.clone(), n.clone(), dev])), Some((8000, 0)));
        assert_eq!(t.versions("cuMemAdvise", &sig(&t, &[p, n, loc])), Some((12020, 0)));
    }

    #[test]
    fn per_thread_variants_have_their_own_version() {
        let t = table();
        let (a, n): (syn::Type, syn::Type) = (syn::parse_quote!(u64), syn::parse_quote!(usize));
        assert_eq!(t.versions("cuMemcpy", &sig(&t, &[a.clone(), a, n])), Some((4000, 7000)));
        assert_eq!(t.versions("cuNoSuchFunction", &sig(&t, &[])), None);
    }

    #[test]
    fn every_default_stream_variant_is_listed_with_its_parameters() {
        let t = table();
        let all: Vec<(String, i32, i32, usize)> = t
            .all_variants()
            .into_iter()
            .map(|v| (v.base, v.version, v.per_thread_version, v.params.len()))
            .collect();
        assert_eq!(
            all,
            [
                ("cuCtxSynchronize".to_string(), 2000, 0, 0),
                ("cuCtxSynchronize".to_string(), 13000, 0, 1),
                ("cuMemAdvise".to_string(), 8000, 0, 3),
                ("cuMemAdvise".to_string(), 12020, 0, 3),
                ("cuMemcpy".to_string(), 4000, 7000, 3),
                ("cuStreamWaitValue32".to_string(), 8000, 8000, 2),
                ("cuStreamWaitValue32".to_string(), 11070, 11070, 2),
            ]
        );
        let advise = t.all_variants().into_iter().find(|v| v.version == 8000).map(|v| v.params);
        let names: Vec<String> = advise.unwrap_or_default().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["p", "n", "d"]);
    }
}
