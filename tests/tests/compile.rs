//! Kernels from source: NVRTC compiles, launches check their results, template kernels through
//! name expressions, compile errors that name the line, the compile cache (memory and disk hits
//! that run no NVRTC, a corrupt entry recompiled, two processes filling one directory at once,
//! headers read from include paths compiled afresh after an edit),
//! nvJitLink linking two LTO translation units, and the typed error of a missing NVRTC.

use cuda_tests::{TestResult, cpu_needing, device_zero, ensure, ensure_eq, gpu};
use cuhost::compile::{
    self, Arch, CacheHit, CompileCache, CompileOptions, Linker, Output, Program, nvrtc_compilations,
};
use cuhost::{Context, ContextFlags, DeviceBuffer, Error, LaunchConfig, Stream, StreamFlags};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

/// `x[i] = x[i] * a + b` over `n` elements.
const AXPB: &str = r#"
extern "C" __global__ void axpb(float *x, float a, float b, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * a + b;
}
"#;

/// The environment variable that makes this binary a cache-filling child process.
const CHILD_DIR: &str = "CUDA_TEST_COMPILE_CACHE_CHILD";

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cuda-core-compile-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Runs `axpb` from `compiled` over 1000 elements and checks every one.
fn run_axpb(ctx: &Context, stream: &Stream, compiled: &compile::Compiled) -> TestResult {
    let module = compiled.load(ctx)?;
    let axpb = compiled.shared_function(&module, "axpb")?;
    let host: Vec<f32> = (0..1000).map(|i| i as f32).collect();
    let mut x = DeviceBuffer::from_slice(stream, &host)?;
    // SAFETY: axpb takes (float *, float, float, unsigned) and touches n elements of x.
    unsafe {
        axpb.function().launch(
            stream,
            &LaunchConfig::for_elements(1000usize, 128),
            (&mut x, &3.0f32, &1.0f32, &1000u32),
        )?
    };
    let out = x.to_vec()?;
    for (i, (o, h)) in out.iter().zip(&host).enumerate() {
        ensure!(*o == h * 3.0 + 1.0, "element {i}: {o}, expected {}", h * 3.0 + 1.0);
    }
    Ok(())
}

fn compile_launch_and_check() -> TestResult {
    let (device, ctx, stream) = device_zero()?;
    let compiled = Program::new(AXPB).compile_with_cache(
        Arch::of(&device)?,
        &CompileOptions::new(),
        &CompileCache::disabled(),
    )?;
    ensure_eq!(compiled.output(), Output::Cubin);
    ensure!(compiled.code().starts_with(b"\x7fELF"), "a CUBIN is an ELF image");
    run_axpb(&ctx, &stream, &compiled)?;
    // PTX too, loaded through the driver's JIT.
    let ptx = Program::new(AXPB).compile(Arch::of(&device)?, &CompileOptions::new().output(Output::Ptx))?;
    ensure!(std::str::from_utf8(ptx.code())?.contains(".entry axpb"), "PTX with the kernel's entry");
    run_axpb(&ctx, &stream, &ptx)?;
    // The one-call path.
    let kernel = compile::kernel(&ctx, AXPB, "axpb")?;
    let mut x = DeviceBuffer::from_slice(&stream, &[2.0f32; 64])?;
    // SAFETY: as above, 64 elements.
    unsafe {
        kernel.function().launch(
            &stream,
            &LaunchConfig::for_elements(64usize, 64),
            (&mut x, &2.0f32, &0.5f32, &64u32),
        )?
    };
    ensure!(x.to_vec()?.iter().all(|v| *v == 4.5), "compile::kernel's kernel ran");
    Ok(())
}

/// The one-call path in a primary context: the second call returns the kernel already loaded
/// (the same module, with no compile-cache lookup), whatever `String` holds the same text and
/// whichever `Context` value names the primary context; another name, other options or a
/// created context get their own module; after `forget_loaded_kernels`, once nothing holds it,
/// the module is unloaded and the next call loads a new one.
fn the_one_call_path_loads_a_kernel_once_per_primary_context() -> TestResult {
    let (device, ctx, stream) = device_zero()?;
    // Text no other test compiles, so that no earlier entry answers.
    let source = format!("{AXPB}// loaded once, process {}\n", std::process::id());
    let first = compile::kernel(&ctx, &source, "axpb")?;
    let looked_up = CompileCache::global().stats();
    let again = compile::kernel(&ctx, &source, "axpb")?;
    ensure!(Arc::ptr_eq(first.module(), again.module()), "the second call loaded another module");
    ensure_eq!(CompileCache::global().stats(), looked_up, "the second call went to the compile cache");
    let copy = source.clone();
    let by_text = compile::kernel(&Context::primary(&device)?, &copy, "axpb")?;
    ensure!(Arc::ptr_eq(first.module(), by_text.module()), "the same text elsewhere loaded again");

    let fast = compile::kernel_with(&ctx, &source, "axpb", &CompileOptions::new().fast_math(true))?;
    ensure!(!Arc::ptr_eq(first.module(), fast.module()), "other options got the same module");
    let created = Context::create(&device, ContextFlags::empty())?;
    let in_created = compile::kernel(&created, &source, "axpb")?;
    let in_created_again = compile::kernel(&created, &source, "axpb")?;
    ensure!(in_created.module().context() == &created, "loaded into the created context");
    ensure!(
        !Arc::ptr_eq(in_created.module(), in_created_again.module()),
        "a created context was served by the table, which would keep it alive"
    );
    drop((in_created, in_created_again, created));

    let mut x = DeviceBuffer::from_slice(&stream, &[2.0f32; 64])?;
    // SAFETY: axpb takes (float *, float, float, unsigned) and touches 64 elements of x.
    unsafe {
        again.function().launch(
            &stream,
            &LaunchConfig::for_elements(64usize, 64),
            (&mut x, &2.0f32, &0.5f32, &64u32),
        )?
    };
    ensure!(x.to_vec()?.iter().all(|v| *v == 4.5), "the kernel found again ran");

    let module = Arc::downgrade(first.module());
    drop((first, again, by_text, fast));
    ensure!(compile::forget_loaded_kernels() >= 2, "the table held the two kernels");
    ensure!(module.upgrade().is_none(), "a forgotten kernel nobody holds stays loaded");
    let before = CompileCache::global().stats();
    let reloaded = compile::kernel(&ctx, &source, "axpb")?;
    ensure!(
        CompileCache::global().stats().memory_hits == before.memory_hits + 1,
        "after forget_loaded_kernels the kernel comes from the compile cache"
    );
    // SAFETY: as above.
    unsafe {
        reloaded.function().launch(
            &stream,
            &LaunchConfig::for_elements(64usize, 64),
            (&mut x, &1.0f32, &1.0f32, &64u32),
        )?
    };
    ensure!(x.to_vec()?.iter().all(|v| *v == 5.5), "the kernel loaded again ran");
    Ok(())
}

fn template_kernels_through_name_expressions() -> TestResult {
    let (device, ctx, stream) = device_zero()?;
    let source = r#"#include "ops.h"
template <typename T> __global__ void scale(T *x, T a, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = mul(x[i], a);
}"#;
    let compiled = Program::new(source)
        .header("ops.h", "template <typename T> __device__ T mul(T x, T a) { return x * a; }")
        .name_expression("scale<float>")
        .name_expression("scale<int>")
        .compile(Arch::of(&device)?, &CompileOptions::new())?;
    let lowered = compiled.lowered_name("scale<int>").ok_or("no lowered name for scale<int>")?;
    ensure!(
        lowered.starts_with("_Z") && lowered != compiled.lowered_name("scale<float>").unwrap_or(""),
        "{lowered}"
    );
    let module = compiled.load(&ctx)?;
    let scale_i = compiled.shared_function(&module, "scale<int>")?;
    let scale_f = compiled.shared_function(&module, "scale<float>")?;
    let mut xi = DeviceBuffer::from_slice(&stream, &[1i32, 2, 3, 4])?;
    let mut xf = DeviceBuffer::from_slice(&stream, &[0.5f32, 1.5])?;
    let one = LaunchConfig::for_elements(4usize, 32);
    // SAFETY: scale<T> takes (T *, T, unsigned) and touches n elements.
    unsafe {
        scale_i.function().launch(&stream, &one, (&mut xi, &3i32, &4u32))?;
        scale_f.function().launch(&stream, &one, (&mut xf, &2.0f32, &2u32))?;
    }
    ensure_eq!(xi.to_vec()?, vec![3, 6, 9, 12]);
    ensure_eq!(xf.to_vec()?, vec![1.0, 3.0]);
    Ok(())
}

fn a_compile_error_names_the_line_and_warnings_are_kept() -> TestResult {
    let (device, _ctx, _stream) = device_zero()?;
    let arch = Arch::of(&device)?;
    let broken = "extern \"C\" __global__ void k(float *x) {\n    unsigned i = threadIdx.x;\n    x[i] = undefined_thing;\n}\n";
    let err = Program::new(broken)
        .named("broken.cu")
        .compile(arch, &CompileOptions::new())
        .err()
        .ok_or("a broken source compiled")?;
    let Error::Nvrtc { call, log, .. } = &err else {
        return Err(format!("expected Error::Nvrtc, got {err:?}").into());
    };
    ensure_eq!(*call, "nvrtcCompileProgram");
    let d = compile::diagnostics(log);
    let first = d.first().ok_or_else(|| format!("no diagnostic in the log:\n{log}"))?;
    ensure!(first.file == "broken.cu" && first.line == 3 && first.severity == "error", "{first:?}");
    ensure!(first.message.contains("undefined_thing"), "{first:?}");
    ensure!(err.to_string().contains("broken.cu(3)"), "the error's text carries the log: {err}");
    let warned =
        Program::new(format!("#warning \"look here\"\n{AXPB}")).compile(arch, &CompileOptions::new())?;
    ensure!(warned.log().contains("look here"), "the warning is kept: {:?}", warned.log());
    Ok(())
}

fn cache_hits_run_no_nvrtc_and_a_corrupt_entry_is_recompiled() -> TestResult {
    let (device, ctx, stream) = device_zero()?;
    let arch = Arch::of(&device)?;
    let dir = scratch("hits");
    let cache = CompileCache::at(&dir);
    let options = CompileOptions::new().define("UNIQUE", Some(&std::process::id().to_string()));
    let before = nvrtc_compilations();
    let first = Program::new(AXPB).compile_with_cache(arch, &options, &cache)?;
    ensure_eq!(first.cache_hit(), None);
    ensure_eq!(nvrtc_compilations(), before + 1);
    let again = Program::new(AXPB).compile_with_cache(arch, &options, &cache)?;
    ensure_eq!(again.cache_hit(), Some(CacheHit::Memory));
    // A new cache over the same directory: what a later process sees.
    let later = CompileCache::at(&dir);
    let from_disk = Program::new(AXPB).compile_with_cache(arch, &options, &later)?;
    ensure_eq!(from_disk.cache_hit(), Some(CacheHit::Disk));
    ensure_eq!(nvrtc_compilations(), before + 1, "hits ran NVRTC");
    ensure_eq!(from_disk.code(), first.code());
    run_axpb(&ctx, &stream, &from_disk)?;
    // Corrupt the entry: one byte of the payload, then a truncation.
    let entry = std::fs::read_dir(&dir)?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "bin"))
        .ok_or("no cache file")?;
    for damage in 0..2 {
        let mut bytes = std::fs::read(&entry)?;
        if damage == 0 {
            let last = bytes.len() - 1;
            bytes[last] ^= 0xff;
        } else {
            bytes.truncate(bytes.len() / 2);
        }
        std::fs::write(&entry, &bytes)?;
        let n = nvrtc_compilations();
        let fresh = Program::new(AXPB).compile_with_cache(arch, &options, &CompileCache::at(&dir))?;
        ensure_eq!(fresh.cache_hit(), None, "a damaged entry was loaded");
        ensure_eq!(nvrtc_compilations(), n + 1);
        run_axpb(&ctx, &stream, &fresh)?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// H5: what NVRTC reads from an include path, or pre-includes by a raw option, is not in the
/// cache key, so such a compile goes around the cache: after the header is edited, the next
/// compile through the same cache returns the new code, and nothing is stored.
fn an_edited_header_from_an_include_path_is_compiled_again() -> TestResult {
    let (device, _ctx, _stream) = device_zero()?;
    let arch = Arch::of(&device)?;
    let dir = scratch("include");
    let include = dir.join("include");
    std::fs::create_dir_all(&include)?;
    let header = include.join("value.h");
    let body = "__device__ int value = VALUE;\n\
                extern \"C\" __global__ void read_value(int *out) { *out = value; }\n";
    let included = format!("#include \"value.h\"\n{body}");
    let ptx = CompileOptions::new().output(Output::Ptx);
    let cases = [
        ("include_path", ptx.clone().include_path(&include), included.as_str()),
        ("--pre-include", ptx.clone().raw(format!("--pre-include={}", header.display())), body),
    ];
    let cache = CompileCache::at(dir.join("cache"));
    for (what, options, source) in &cases {
        for (value, old) in [(271828, 314159), (314159, 271828)] {
            std::fs::write(&header, format!("#define VALUE {value}\n"))?;
            let n = nvrtc_compilations();
            let compiled = Program::new(*source).compile_with_cache(arch, options, &cache)?;
            ensure_eq!(compiled.cache_hit(), None, "{what}: VALUE {value}");
            ensure_eq!(nvrtc_compilations(), n + 1, "{what}: VALUE {value}");
            let text = String::from_utf8_lossy(compiled.code());
            ensure!(
                text.contains(&value.to_string()) && !text.contains(&old.to_string()),
                "{what}: the PTX does not hold VALUE {value}:\n{text}"
            );
        }
    }
    let stats = cache.stats();
    ensure_eq!((stats.uncached, stats.writes, stats.memory_hits, stats.disk_hits), (4, 0, 0, 0));
    ensure!(!dir.join("cache").exists(), "nothing is stored on disk");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn two_processes_fill_one_cache_directory() -> TestResult {
    let (device, ctx, stream) = device_zero()?;
    let dir = scratch("procs");
    let exe = std::env::current_exe()?;
    let children: Vec<_> =
        (0..2).map(|_| Command::new(&exe).env(CHILD_DIR, &dir).spawn()).collect::<Result<_, _>>()?;
    for mut child in children {
        ensure!(child.wait()?.success(), "a child failed to compile into the cache");
    }
    let entries: Vec<PathBuf> = std::fs::read_dir(&dir)?.flatten().map(|e| e.path()).collect();
    ensure!(
        entries.iter().all(|p| p.extension().is_some_and(|x| x == "bin")),
        "left-over files: {entries:?}"
    );
    ensure_eq!(entries.len(), 1);
    let cache = CompileCache::at(&dir);
    let n = nvrtc_compilations();
    let compiled = Program::new(AXPB).compile_with_cache(Arch::of(&device)?, &child_options(), &cache)?;
    ensure_eq!(compiled.cache_hit(), Some(CacheHit::Disk));
    ensure_eq!(nvrtc_compilations(), n);
    run_axpb(&ctx, &stream, &compiled)?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn child_options() -> CompileOptions {
    CompileOptions::new().define("CHILD", None)
}

/// The child's work: compile into the directory named by [`CHILD_DIR`] several times.
fn child(dir: &str) -> TestResult {
    let (device, _ctx, _stream) = device_zero()?;
    for _ in 0..5 {
        let cache = CompileCache::at(dir);
        Program::new(AXPB).compile_with_cache(Arch::of(&device)?, &child_options(), &cache)?;
    }
    Ok(())
}

fn two_lto_units_link_and_run() -> TestResult {
    let (device, ctx, stream) = device_zero()?;
    let arch = Arch::of(&device)?;
    let lto = CompileOptions::new().output(Output::LtoIr).relocatable(true);
    let lib = Program::new("__device__ float twice_plus(float x, float b) { return 2.0f * x + b; }")
        .named("lib.cu")
        .compile(arch, &lto)?;
    let main = Program::new(
        "__device__ float twice_plus(float, float);\n\
         extern \"C\" __global__ void run(float *x, unsigned n) {\n\
             unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n\
             if (i < n) x[i] = twice_plus(x[i], 1.0f);\n}\n",
    )
    .named("main.cu")
    .compile(arch, &lto)?;
    ensure_eq!(main.output(), Output::LtoIr);
    let linked = Linker::new(arch).input(&lib).input(&main).link()?;
    ensure!(linked.cubin().starts_with(b"\x7fELF"), "the link gives a CUBIN");
    let module = linked.load(&ctx)?;
    let run = module.function("run")?;
    let mut x = DeviceBuffer::from_slice(&stream, &[1.0f32, 2.0, 3.0])?;
    // SAFETY: run takes (float *, unsigned) and touches n elements.
    unsafe { run.launch(&stream, &LaunchConfig::for_elements(3usize, 32), (&mut x, &3u32))? };
    ensure_eq!(x.to_vec()?, vec![3.0, 5.0, 7.0]);
    // An undefined symbol is the linker's error, with its log.
    let alone =
        Linker::new(arch).input(&main).link().err().ok_or("a link with an undefined function succeeded")?;
    ensure!(matches!(alone, Error::NvJitLink { .. }), "{alone:?}");
    let _ = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    Ok(())
}

fn a_missing_nvrtc_is_a_typed_error_naming_what_to_install() -> TestResult {
    let exe = std::env::current_exe()?;
    let out = Command::new(exe)
        .env("NVRTC_LIBRARY_PATH", "/nonexistent/libnvrtc.so.13")
        .env(CHILD_DIR, "missing")
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.success(), "the child failed: {text}");
    ensure!(
        text.contains("/nonexistent/libnvrtc.so.13")
            && text.contains("NVRTC_LIBRARY_PATH")
            && text.contains("nvidia-cuda-nvrtc"),
        "the error does not say what was tried and what to install: {text}"
    );
    Ok(())
}

/// The child of the missing-library test: the compile must fail with `Error::Load`.
fn missing_child() -> TestResult {
    let (device, _ctx, _stream) = device_zero()?;
    match Program::new(AXPB).compile(Arch::of(&device)?, &CompileOptions::new()) {
        Err(e @ Error::Load { .. }) => {
            println!("{e}");
            Ok(())
        }
        other => Err(format!("expected Error::Load, got {other:?}").into()),
    }
}

/// Whether NVRTC and nvJitLink load; with `CUDA_TEST_REQUIRE_NVRTC=1` (CI, where they come
/// from NVIDIA's wheels) a missing one fails the test instead of leaving it ignored.
fn compilers_load() -> Result<(), String> {
    if std::env::var("CUDA_TEST_REQUIRE_NVRTC").is_ok_and(|v| v == "1") {
        return Ok(());
    }
    if let Err(Error::Load { source, .. }) = Program::new("").compile(Arch::new(9, 0), &CompileOptions::new())
    {
        return Err(format!("NVRTC does not load: {source}"));
    }
    match Linker::new(Arch::new(9, 0)).link() {
        Err(Error::Load { source, .. }) => Err(format!("nvJitLink does not load: {source}")),
        _ => Ok(()),
    }
}

/// Compiling and linking need NVRTC and nvJitLink only: no GPU, no driver. A CUBIN for sm_90
/// (an ELF image), PTX naming the kernel and its target, and two LTO units linked into one.
fn compiling_needs_no_gpu() -> TestResult {
    let arch = Arch::new(9, 0);
    let cubin = Program::new(AXPB).named("axpb.cu").compile(arch, &CompileOptions::new())?;
    ensure_eq!(cubin.output(), Output::Cubin);
    ensure!(cubin.code().starts_with(b"\x7fELF"), "the CUBIN is no ELF image");
    let ptx = Program::new(AXPB).compile(arch, &CompileOptions::new().output(Output::Ptx))?;
    let text = String::from_utf8_lossy(ptx.code());
    ensure!(text.contains(".entry axpb") && text.contains(".target sm_90"), "unexpected PTX:\n{text}");
    let lto = CompileOptions::new().output(Output::LtoIr).relocatable(true);
    let lib = Program::new("__device__ float twice(float x) { return 2 * x; }").compile(arch, &lto)?;
    let main = Program::new(
        "__device__ float twice(float); extern \"C\" __global__ void k(float *x) { x[0] = twice(x[0]); }",
    )
    .compile(arch, &lto)?;
    let linked = Linker::new(arch).input(&lib).input(&main).link()?;
    ensure!(linked.cubin().starts_with(b"\x7fELF"), "the linked image is no ELF image");
    Ok(())
}

fn main() {
    // `compile::kernel` uses the process-wide cache: keep it out of the user's cache directory,
    // so that what earlier runs left there cannot decide a test.
    let global = std::env::temp_dir().join(format!("cuda-core-compile-global-{}", std::process::id()));
    // SAFETY: no other thread exists yet to read the environment concurrently.
    unsafe { std::env::set_var("CUDA_CORE_CACHE_DIR", &global) };
    if let Ok(dir) = std::env::var(CHILD_DIR) {
        let result = if dir == "missing" { missing_child() } else { child(&dir) };
        if let Err(e) = result {
            eprintln!("child: {e:?}");
            std::process::exit(1);
        }
        std::process::exit(0);
    }
    cuda_tests::run(&[
        cpu_needing("compiling_needs_no_gpu", compilers_load, compiling_needs_no_gpu),
        gpu("compile_launch_and_check", compile_launch_and_check),
        gpu(
            "the_one_call_path_loads_a_kernel_once_per_primary_context",
            the_one_call_path_loads_a_kernel_once_per_primary_context,
        ),
        gpu("template_kernels_through_name_expressions", template_kernels_through_name_expressions),
        gpu(
            "a_compile_error_names_the_line_and_warnings_are_kept",
            a_compile_error_names_the_line_and_warnings_are_kept,
        ),
        gpu(
            "cache_hits_run_no_nvrtc_and_a_corrupt_entry_is_recompiled",
            cache_hits_run_no_nvrtc_and_a_corrupt_entry_is_recompiled,
        ),
        gpu(
            "an_edited_header_from_an_include_path_is_compiled_again",
            an_edited_header_from_an_include_path_is_compiled_again,
        ),
        gpu("two_processes_fill_one_cache_directory", two_processes_fill_one_cache_directory),
        gpu("two_lto_units_link_and_run", two_lto_units_link_and_run),
        gpu(
            "a_missing_nvrtc_is_a_typed_error_naming_what_to_install",
            a_missing_nvrtc_is_a_typed_error_naming_what_to_install,
        ),
    ]);
}
