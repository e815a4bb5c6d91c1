//! Packing test and benchmark binaries for the GPU host.
pub fn gpu_bundle(_root: &std::path::Path) -> Result<(), String> {
    Err("todo".into())
}
/// Packs the benchmarks.
pub fn bench_bundle(_root: &std::path::Path) -> Result<(), String> {
    Err("todo".into())
}
