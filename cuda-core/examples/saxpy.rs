//! `y = a*x + y` on the GPU: load a PTX kernel, copy the inputs, launch, copy the result back
//! and check it.
//!
//! ```sh
//! cargo run --example saxpy -- 1000000
//! ```

use cuda_core::module::Module;
use cuda_core::{Context, Device, DeviceBuffer, LaunchConfig, Stream, StreamFlags};
use std::process::ExitCode;

/// `saxpy(u32 n, f32 a, const f32* x, f32* y)`.
const PTX: &str = r#"
.version 8.0
.target sm_70
.address_size 64

.visible .entry saxpy(.param .u32 n, .param .f32 a, .param .u64 x, .param .u64 y)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<5>;
    .reg .b64 %rd<8>;

    ld.param.u32 %r1, [n];
    ld.param.f32 %f1, [a];
    ld.param.u64 %rd1, [x];
    ld.param.u64 %rd2, [y];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    mul.wide.u32 %rd5, %r5, 4;
    add.s64 %rd6, %rd3, %rd5;
    add.s64 %rd7, %rd4, %rd5;
    ld.global.f32 %f2, [%rd6];
    ld.global.f32 %f3, [%rd7];
    fma.rn.f32 %f4, %f1, %f2, %f3;
    st.global.f32 [%rd7], %f4;
DONE:
    ret;
}
"#;

fn main() -> ExitCode {
    let n = std::env::args().nth(1).and_then(|s| s.parse::<u32>().ok()).unwrap_or(1 << 20);
    match run(n) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("saxpy: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(n: u32) -> cuda_core::Result<()> {
    let ctx = Context::primary(&Device::get(0)?)?;
    let module = Module::from_ptx(&ctx, PTX)?;
    let saxpy = module.function("saxpy")?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;

    let a = 2.5f32;
    let x: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let y: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let dx = DeviceBuffer::from_slice(&stream, &x)?;
    let mut dy = DeviceBuffer::from_slice(&stream, &y)?;

    // The block size that gives the best occupancy for this kernel on this device.
    let best = saxpy.max_potential_block_size(0, 0, Default::default())?;
    let config = LaunchConfig::for_elements(n, best.block_size);
    // Buffers pass as their device addresses; `&mut dy` because the kernel writes to it.
    // SAFETY: saxpy takes (u32, f32, const f32*, f32*), and both buffers hold n floats.
    unsafe { saxpy.launch(&stream, &config, (&n, &a, &dx, &mut dy))? };
    stream.synchronize()?;

    let result = dy.to_vec()?;
    let wrong = result.iter().zip(x.iter().zip(&y)).filter(|(r, (x, y))| **r != a.mul_add(**x, **y)).count();
    println!("saxpy of {n} elements: grid {} x block {}, {} wrong", config.grid.x, config.block.x, wrong);
    if wrong == 0 {
        Ok(())
    } else {
        Err(cuda_core::Error::invalid("saxpy", format!("{wrong} of {n} results differ from the host")))
    }
}
