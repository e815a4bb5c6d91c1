//! Compiles `src/reference.c` against NVIDIA's NVTX headers from the wheels that
//! `cargo xtask bindgen` unpacks into `target/cuda-headers` (`current` is the pinned set). Without them (or without a C
//! compiler) nothing is compiled and `nvtx_c_reference::available()` is false.

use std::path::PathBuf;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(nvtx_c_reference)");
    println!("cargo::rerun-if-changed=src/reference.c");
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let include = std::env::var_os("NVTX_C_INCLUDE")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("../../target/cuda-headers/current/nvidia/cu13/include"));
    println!("cargo::rerun-if-env-changed=NVTX_C_INCLUDE");
    println!("cargo::rerun-if-changed={}", include.join("nvtx3/nvToolsExt.h").display());
    if !include.join("nvtx3/nvToolsExt.h").exists() {
        println!(
            "cargo::warning=NVTX headers not found under {} (run `cargo xtask bindgen`); the C reference is not built",
            include.display()
        );
        return;
    }
    let built = cc::Build::new()
        .file("src/reference.c")
        .include(&include)
        .opt_level(3)
        .warnings(false)
        .try_compile("nvtx_c_reference");
    match built {
        Ok(()) => {
            println!("cargo::rustc-link-lib=dl");
            println!("cargo::rustc-cfg=nvtx_c_reference");
        }
        Err(e) => println!("cargo::warning=the C reference did not compile: {e}"),
    }
}
