//! Tells the crates that depend on this one which `cuda.h` the bindings were generated from
//! (`DEP_CUDA_DRIVER_SYS_HEADER_VERSION`, e.g. `13050`), so that they can build their wrappers
//! of functions newer than the oldest supported headers only where the bindings have them.

fn main() {
    println!("cargo::rerun-if-changed=src/generated/types.rs");
    let text = std::fs::read_to_string("src/generated/types.rs").unwrap_or_default();
    let version = text
        .lines()
        .find_map(|line| line.strip_prefix("pub const CUDA_VERSION: u32 = "))
        .and_then(|rest| rest.strip_suffix(';'))
        .unwrap_or("0");
    println!("cargo::metadata=header_version={version}");
}
