//! The audit run on a small crate written for it: each kind of finding where it is missing, and
//! only there.

use super::source::{Crate, SOURCE, function_pages, load_module, states_convention};
use super::{Finding, Kind, audit};

const LIB: &str = r#"
//! A crate.
//!
//! # Errors of thin wrappers
//!
//! A thin wrapper returns the status of its one call.

pub mod public;
mod private;
pub use private::Exported;
"#;

const PUBLIC: &str = r#"
//! A public module; no link here.
use cuhost_driver_sys as sys;

/// Allocates.
pub fn undocumented_errors() -> Result<(), Error> { Ok(()) }

/// Allocates; fails with [`Error::Driver`] when out of memory.
pub fn documented_errors() -> crate::Result<()> { Ok(()) }

/// Reads memory.
pub unsafe fn no_safety() {}

/// Reads memory.
///
/// # Safety
///
/// The memory must be readable.
pub unsafe fn with_safety() {}

/// Frees ([`cuMemFree`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
pub fn thin_wrapper() -> Result<()> { check("cuMemFree", unsafe { sys::cuMemFree(0) }) }

/// Frees and synchronizes.
pub fn unlinked_calls() -> Result<()> {
    check("cuMemFree", unsafe { sys::cuMemFree(0) })?;
    check!(sys::cuCtxSynchronize());
    Ok(())
}

/// Frees ([`cuMemFree`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)).
pub fn wrong_page() {}

/// Frees ([`cuMemFree`](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html)).
pub fn checks_first(p: u64) -> Result<()> {
    if p == 0 { return Err(Error::invalid("checks_first", "null")); }
    check("cuMemFree", unsafe { sys::cuMemFree(p) })
}

pub(crate) fn internal() -> Result<()> { Ok(()) }

/// A type whose doc links the section
/// ([Streams](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html)).
pub struct Stream;

impl Stream {
    /// Waits; an error when the stream failed.
    pub fn synchronize(&self) -> Result<()> { check("cuStreamSynchronize", unsafe { sys::cuStreamSynchronize(0) }) }
    fn private() -> Result<()> { Ok(()) }
}

/// Names things.
pub fn nvtx_call() { unsafe { sys::nvtxMarkA(c"m".as_ptr()) } }

macro_rules! attributes {
    ($fn:ident, $attr:ident) => {
        #[doc = concat!("The value of `", stringify!($attr), "`; fails when the driver refuses.")]
        pub fn $fn(&self) -> Result<i32> { self.attribute($attr) }
    };
}

macro_rules! views {
    ($name:literal) => {
        /// A slice.
        pub fn slice(&self, range: $crate::Range) -> $crate::Result<usize> { Ok(0) }
        $(
            /// Repeated.
            pub fn repeated(&self) {}
        )*
    };
}

#[cfg(test)]
mod tests {
    pub fn test_helper() -> Result<()> { Ok(()) }
}
"#;

const PRIVATE: &str = r#"
//! See [Memory](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html).
/// Exported through `pub use`.
pub struct Exported;
/// Not exported.
pub struct Hidden;
impl Exported {
    /// Gets it.
    pub fn get(&self) -> Result<u32> { Ok(unsafe { sys::cuDriverGetVersion() }) }
}
impl Hidden {
    /// Gets it.
    pub fn get(&self) -> Result<u32> { Ok(0) }
}
"#;

fn krate(lib: &str) -> Result<Crate, String> {
    let dir = std::env::temp_dir().join(format!("xtask-docaudit-{}-{}", std::process::id(), lib.len()));
    let src = dir.join(SOURCE);
    std::fs::create_dir_all(&src).map_err(|e| e.to_string())?;
    for (name, text) in [("lib.rs", lib), ("public.rs", PUBLIC), ("private.rs", PRIVATE)] {
        std::fs::write(src.join(name), text).map_err(|e| e.to_string())?;
    }
    let mut modules = Vec::new();
    let loaded = load_module(&dir, &src.join("lib.rs"), String::new(), true, &src, &mut modules);
    let _ = std::fs::remove_dir_all(&dir);
    loaded?;
    let pages = function_pages(
        "crate::driver_functions! {\n    cuMemFree(dptr: CUdeviceptr) -> CUresult => c\"cuMemFree\", 3020, 0, \
         \"cuda.h\", \"Memory Management\", \"https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html\";\n}\n",
    );
    let convention = modules.first().is_some_and(|m| states_convention(&m.doc));
    Ok(Crate { modules, pages, convention })
}

fn found(findings: &[Finding]) -> Vec<(String, Kind)> {
    findings.iter().map(|f| (f.item.clone(), f.kind)).collect()
}

#[test]
fn each_kind_is_found_where_it_is_missing_and_only_there() -> Result<(), String> {
    let k = krate(LIB)?;
    assert!(k.convention);
    let findings = audit(&k);
    let mut got = found(&findings);
    got.sort();
    assert_eq!(got, expected());
    let unlinked = findings.iter().find(|f| f.kind == Kind::Link && f.item.ends_with("unlinked_calls"));
    assert_eq!(unlinked.map(|f| f.detail.as_str()), Some("cuCtxSynchronize, cuMemFree"));
    assert!(findings.iter().all(|f| f.line > 0 && f.file.ends_with(".rs")));
    Ok(())
}

fn expected() -> Vec<(String, Kind)> {
    let mut v = vec![
        ("public::no_safety".to_string(), Kind::Safety),
        ("public::undocumented_errors".to_string(), Kind::Errors),
        ("public::checks_first".to_string(), Kind::Errors),
        ("cuMemFree".to_string(), Kind::WrongPage),
        ("public::unlinked_calls".to_string(), Kind::Errors),
        ("public::unlinked_calls".to_string(), Kind::Link),
        ("public::nvtx_call".to_string(), Kind::Link),
        ("Exported::get".to_string(), Kind::Errors),
        ("views!::slice".to_string(), Kind::Errors),
    ];
    v.sort();
    v
}

#[test]
fn without_the_convention_a_thin_wrapper_must_say_how_it_fails() -> Result<(), String> {
    let k = krate("//! A crate.\n\npub mod public;\nmod private;\npub use private::Exported;\n")?;
    assert!(!k.convention);
    let findings = audit(&k);
    assert!(findings.iter().any(|f| f.item == "public::thin_wrapper" && f.kind == Kind::Errors));
    Ok(())
}
