//! A kernel from a string: compile it with NVRTC, launch it, check every element, then compile
//! it again and get it from the compile cache (no NVRTC run), from memory and from disk.
//!
//! `cargo run --example nvrtc`

use cuhost::compile::{self, Arch, CompileCache, CompileOptions, Program};
use cuhost::{Context, Device, DeviceBuffer, LaunchConfig, Stream, StreamFlags};
use std::process::ExitCode;
use std::time::Instant;

const SOURCE: &str = r#"
// y = a * x + y over n elements.
extern "C" __global__ void saxpy(float a, const float *x, float *y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"#;

fn main() -> ExitCode {
    // The default pools' cache goes back at the end, so that a leak checker sees only real leaks.
    match run().and_then(|()| cuhost::pool::release_default_pools()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nvrtc: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> cuhost::Result<()> {
    let device = Device::get(0)?;
    let ctx = Context::primary(&device)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let arch = Arch::of(&device)?;
    // A cache of its own, in a fresh directory, so that the first compile really compiles.
    let dir = std::env::temp_dir().join(format!("cuda-core-nvrtc-example-{}", std::process::id()));
    let cache = CompileCache::at(&dir);
    let program = Program::new(SOURCE).named("saxpy.cu");
    let options = CompileOptions::new();

    let t = Instant::now();
    let compiled = program.compile_with_cache(arch, &options, &cache)?;
    let cold = t.elapsed();
    println!(
        "compiled for {} with NVRTC in {:.1} ms: {} bytes of CUBIN",
        arch.real(),
        ms(cold),
        compiled.code().len()
    );

    let n = 1 << 20;
    let x: Vec<f32> = (0..n).map(|i| (i % 100) as f32).collect();
    let y: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let module = compiled.load(&ctx)?;
    let saxpy = compiled.shared_function(&module, "saxpy")?;
    let dx = DeviceBuffer::from_slice(&stream, &x)?;
    let mut dy = DeviceBuffer::from_slice(&stream, &y)?;
    let config = LaunchConfig::for_elements(n, 256);
    // SAFETY: saxpy takes (float, const float *, float *, unsigned) and touches n elements.
    unsafe { saxpy.function().launch(&stream, &config, (&2.0f32, &dx, &mut dy, &(n as u32)))? };
    let out = dy.to_vec()?;
    let wrong =
        out.iter().zip(x.iter().zip(&y)).filter(|(o, (x, y))| **o != 2.0f32.mul_add(**x, **y)).count();
    println!("saxpy over {n} elements: {wrong} wrong");

    let compilations = compile::nvrtc_compilations();
    let t = Instant::now();
    let again = program.compile_with_cache(arch, &options, &cache)?;
    let memory = t.elapsed();
    let t = Instant::now();
    let later = program.compile_with_cache(arch, &options, &CompileCache::at(&dir))?;
    let disk = t.elapsed();
    println!(
        "again: {:?} in {:.3} ms; a new cache over the same directory: {:?} in {:.3} ms; NVRTC runs since the first compile: {}",
        again.cache_hit(),
        ms(memory),
        later.cache_hit(),
        ms(disk),
        compile::nvrtc_compilations() - compilations
    );
    let _ = std::fs::remove_dir_all(&dir);
    if wrong != 0
        || again.cache_hit().is_none()
        || later.cache_hit().is_none()
        || later.code() != compiled.code()
    {
        return Err(cuhost::Error::invalid("nvrtc example", "a result or a cache hit was not as expected"));
    }
    Ok(())
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
