//! Sets `cuda_headers_13_<minor>` for every CUDA 13 minor release up to the one whose `cuda.h`
//! the driver bindings were generated from, so that wrappers of functions those headers added
//! are built only where the bindings declare them (`cargo xtask compat` builds the crate against
//! the oldest supported headers too). Which driver a call needs is checked at run time. The GPU
//! tests (`tests/`) build with this script too, for the tests of those wrappers.

/// The minor releases whose functions have wrappers behind a cfg.
const MINORS: [u32; 5] = [1, 2, 3, 4, 5];

fn main() {
    println!("cargo::rerun-if-env-changed=DEP_CUDA_DRIVER_SYS_HEADER_VERSION");
    let version: u32 =
        std::env::var("DEP_CUDA_DRIVER_SYS_HEADER_VERSION").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    for minor in MINORS {
        println!("cargo::rustc-check-cfg=cfg(cuda_headers_13_{minor})");
        if version >= 13000 + minor * 10 {
            println!("cargo::rustc-cfg=cuda_headers_13_{minor}");
        }
    }
}
