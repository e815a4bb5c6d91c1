//! Kernels from source: a cold compile through `compile::Program` against the raw NVRTC calls
//! (create, compile, get the CUBIN, destroy), and a compile answered by the cache, from memory
//! and from disk (by a cache in use, and by a fresh one that opens its directory first),
//! loaded as a module, against reading the CUBIN's file (or holding its bytes)
//! and `cuModuleLoadData`; and `compile::kernel` asked again for a kernel it loaded in the
//! same primary context, against `cuModuleGetFunction` on a loaded module.
//! `tests/benches/compile_cupy.py` measures CuPy's `RawKernel` on the same source.

use cuda_tests::bench::{Row, compare, print_table};
use cuhost::compile::{self, Arch, CompileCache, CompileOptions, Program};
use cuhost::{Context, Device, Module, Result};
use cuhost_driver_sys as sys;
use cuhost_nvrtc_sys as nvrtc;
use std::ffi::CString;
use std::hint::black_box;

/// The source every row compiles; `tests/benches/compile_cupy.py` holds the same text.
const SOURCE: &str = r#"
extern "C" __global__ void saxpy(float a, const float *x, float *y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"#;

fn main() {
    match run() {
        Ok(rows) => print_table("compiling kernels from source against the raw calls (same run)", &rows),
        Err(e) => eprintln!("benchmark skipped: {e}"),
    }
}

/// The raw NVRTC sequence; returns the CUBIN.
fn raw_compile(source: &CString, arch: &CString) -> Vec<u8> {
    let mut prog = std::ptr::null_mut();
    let options = [arch.as_ptr()];
    let mut cubin = Vec::new();
    // SAFETY: NUL-terminated strings alive across the calls; the program is destroyed last.
    unsafe {
        nvrtc::nvrtcCreateProgram(
            &mut prog,
            source.as_ptr(),
            c"kernel.cu".as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        );
        if nvrtc::nvrtcCompileProgram(prog, 1, options.as_ptr()) == nvrtc::nvrtcResult::NVRTC_SUCCESS {
            let mut size = 0;
            nvrtc::nvrtcGetCUBINSize(prog, &mut size);
            cubin.resize(size, 0);
            nvrtc::nvrtcGetCUBIN(prog, cubin.as_mut_ptr().cast());
        }
        nvrtc::nvrtcDestroyProgram(&mut prog);
    }
    cubin
}

/// `cuModuleLoadData` and `cuModuleUnload` of `image`.
fn raw_load(image: &[u8]) {
    let mut module = std::ptr::null_mut();
    // SAFETY: a complete CUBIN in memory; the module is unloaded at once.
    unsafe {
        sys::cuModuleLoadData(&mut module, image.as_ptr().cast());
        sys::cuModuleUnload(module);
    }
}

/// Reads the CUBIN's file and `raw_load`s it: the raw side of the disk rows.
fn read_and_load(file: &std::path::Path) {
    if let Ok(bytes) = std::fs::read(black_box(file)) {
        raw_load(&bytes);
    }
}

fn run() -> Result<Vec<Row>> {
    let device = Device::get(0)?;
    let ctx = Context::primary(&device)?;
    ctx.bind_to_thread()?;
    let arch = Arch::of(&device)?;
    let program = Program::new(SOURCE);
    let options = CompileOptions::new();
    let source = CString::new(SOURCE).map_err(|_| cuhost::Error::invalid("bench", "NUL in the source"))?;
    let arch_flag = CString::new(format!("--gpu-architecture={}", arch.real()))
        .map_err(|_| cuhost::Error::invalid("bench", "NUL in the option"))?;
    let mut rows = Vec::new();

    rows.push(compare(
        "cold compile: Program::compile vs raw NVRTC",
        5,
        2,
        || {
            black_box(program.compile(arch, &options).ok());
        },
        || {
            black_box(raw_compile(&source, &arch_flag));
        },
    ));

    let dir = std::env::temp_dir().join(format!("cuda-core-compile-bench-{}", std::process::id()));
    let cache = CompileCache::at(&dir);
    let compiled = program.compile_with_cache(arch, &options, &cache)?;
    let cubin = compiled.code().to_vec();
    let file = dir.join("raw.cubin");
    std::fs::write(&file, &cubin).map_err(|e| cuhost::Error::invalid("bench", e.to_string()))?;

    rows.push(compare(
        "memory hit + load vs cuModuleLoadData",
        21,
        200,
        || {
            let hit = program.compile_with_cache(arch, &options, &cache);
            black_box(hit.and_then(|c| c.load(&ctx)).ok());
        },
        || raw_load(black_box(&cubin)),
    ));
    // The two halves of the disk row: the cache's read against the file's, and the safe load
    // of the same bytes against the raw pair.
    rows.push(compare(
        "disk hit alone vs read file",
        21,
        200,
        || {
            cache.clear_memory();
            black_box(program.compile_with_cache(arch, &options, &cache).ok());
        },
        || {
            black_box(std::fs::read(black_box(&file)).ok());
        },
    ));
    rows.push(compare(
        "Module::from_cubin + drop vs cuModuleLoadData + cuModuleUnload",
        21,
        200,
        || {
            black_box(Module::from_cubin(&ctx, black_box(&cubin)).ok());
        },
        || raw_load(black_box(&cubin)),
    ));
    // A disk hit of a cache in use (its directory opened on an earlier look): memory is
    // cleared before each, as in a process that loads its kernels from a warm directory.
    rows.push(compare(
        "disk hit + load vs read file + cuModuleLoadData",
        21,
        200,
        || {
            cache.clear_memory();
            let hit = program.compile_with_cache(arch, &options, &cache);
            black_box(hit.and_then(|c| c.load(&ctx)).ok());
        },
        || read_and_load(&file),
    ));
    // The first look of a cache: its directory is opened and checked, then the disk hit.
    rows.push(compare(
        "fresh cache: open dir + disk hit + load vs read file + cuModuleLoadData",
        21,
        200,
        || {
            let fresh = CompileCache::at(&dir);
            let hit = program.compile_with_cache(arch, &options, &fresh);
            black_box(hit.and_then(|c| c.load(&ctx)).ok());
        },
        || read_and_load(&file),
    ));
    let _ = std::fs::remove_dir_all(&dir);

    // The one-call path asked again for a kernel it loaded in this (primary) context: a lookup
    // of the kernel already loaded, against finding a kernel in a loaded module by name.
    let loaded = compile::kernel(&ctx, SOURCE, "saxpy")?;
    let module = loaded.module().as_raw();
    rows.push(compare(
        "kernel again (loaded in this context) vs cuModuleGetFunction",
        21,
        20_000,
        || {
            black_box(compile::kernel(&ctx, black_box(SOURCE), "saxpy").ok());
        },
        || {
            let mut function = std::ptr::null_mut();
            // SAFETY: a loaded module, a NUL-terminated name and one out-parameter.
            unsafe { sys::cuModuleGetFunction(&mut function, black_box(module), c"saxpy".as_ptr()) };
            black_box(function);
        },
    ));
    Ok(rows)
}
