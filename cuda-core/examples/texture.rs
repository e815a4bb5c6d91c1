//! Upsampling an image through a texture: a CUDA array sampled with linear filtering and
//! normalized coordinates by a PTX kernel, compared with bilinear interpolation on the host;
//! then a tensor map encoded over the same pixels in device memory.
//!
//! ```sh
//! cargo run --example texture -- 4
//! ```

use cuhost::memory::{Array, ArrayFlags};
use cuhost::module::Module;
use cuhost::texture::{
    AddressMode, ChannelFormat, FilterMode, Resource, Swizzle, TensorDataType, TensorMapBuilder,
    TextureDescriptor, TextureObject,
};
use cuhost::{Context, Device, DeviceBuffer, LaunchConfig, Stream, StreamFlags};
use std::process::ExitCode;
use std::sync::Arc;

/// `upsample(u64 tex, f32* out, u32 width, u32 height)`: `out[y * width + x]` is the texture
/// at the centre of output pixel `(x, y)`, in normalized coordinates.
const PTX: &str = r#"
.version 8.0
.target sm_70
.address_size 64

.visible .entry upsample(.param .u64 tex, .param .u64 out, .param .u32 width, .param .u32 height)
{
    .reg .pred %p<3>;
    .reg .b32 %r<12>;
    .reg .f32 %f<12>;
    .reg .b64 %rd<6>;

    ld.param.u64 %rd1, [tex];
    ld.param.u64 %rd2, [out];
    ld.param.u32 %r1, [width];
    ld.param.u32 %r2, [height];
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %tid.x;
    mad.lo.s32 %r6, %r3, %r4, %r5;
    mov.u32 %r7, %ctaid.y;
    setp.ge.u32 %p1, %r6, %r1;
    setp.ge.u32 %p2, %r7, %r2;
    or.pred %p1, %p1, %p2;
    @%p1 bra DONE;
    cvt.rn.f32.u32 %f1, %r6;
    cvt.rn.f32.u32 %f2, %r7;
    cvt.rn.f32.u32 %f3, %r1;
    cvt.rn.f32.u32 %f4, %r2;
    add.rn.f32 %f1, %f1, 0f3F000000;
    add.rn.f32 %f2, %f2, 0f3F000000;
    div.rn.f32 %f5, %f1, %f3;
    div.rn.f32 %f6, %f2, %f4;
    tex.2d.v4.f32.f32 {%f7, %f8, %f9, %f10}, [%rd1, {%f5, %f6}];
    mad.lo.s32 %r8, %r7, %r1, %r6;
    cvta.to.global.u64 %rd3, %rd2;
    mul.wide.u32 %rd4, %r8, 4;
    add.s64 %rd5, %rd3, %rd4;
    st.global.f32 [%rd5], %f7;
DONE:
    ret;
}
"#;

const SIDE: usize = 32;

fn main() -> ExitCode {
    let scale = std::env::args().nth(1).and_then(|s| s.parse::<usize>().ok()).unwrap_or(4).clamp(1, 16);
    // The default pools cache freed blocks for reuse: give them back before exiting, so
    // that a leak checker (compute-sanitizer --leak-check full) sees only real leaks.
    match run(scale).and_then(|r| cuhost::pool::release_default_pools().map(|()| r)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("texture: {e}");
            ExitCode::FAILURE
        }
    }
}

fn pixel(x: usize, y: usize) -> f32 {
    ((x * 7 + y * 3) % 32) as f32
}

fn run(scale: usize) -> cuhost::Result<()> {
    let ctx = Context::primary(&Device::get(0)?)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let image: Vec<f32> = (0..SIDE * SIDE).map(|i| pixel(i % SIDE, i / SIDE)).collect();

    // The image in a CUDA array, sampled with bilinear filtering; coordinates past the edge
    // read the edge.
    let format = ChannelFormat::of::<f32>();
    let mut array = Array::new(&ctx, &format.array_descriptor(SIDE, SIDE, 0, ArrayFlags::empty()))?;
    array.copy_from_host(&image)?;
    let descriptor = TextureDescriptor {
        address_mode: [AddressMode::Clamp; 3],
        filter_mode: FilterMode::Linear,
        normalized_coordinates: true,
        ..Default::default()
    };
    let texture = TextureObject::new(Resource::array(Arc::new(array))?, &descriptor, None)?;

    let module = Module::from_ptx(&ctx, PTX)?;
    let upsample = module.function("upsample")?;
    let (width, height) = ((SIDE * scale) as u32, (SIDE * scale) as u32);
    let mut out = DeviceBuffer::<f32>::zeroed(&stream, (width * height) as usize)?;
    let config = LaunchConfig::new((width.div_ceil(64), height), 64);
    // The texture passes as its 64-bit handle.
    // SAFETY: upsample takes (u64 texture, f32* out, u32 width, u32 height); out holds
    // width × height floats.
    unsafe { upsample.launch(&stream, &config, (&texture, &mut out, &width, &height))? };
    stream.synchronize()?;
    let result = out.to_vec()?;

    // The same sampling on the host. The hardware keeps 8 fractional bits of the weights, so
    // the two agree to within 1/256 of the largest step between neighbours (31 here).
    let at =
        |x: i64, y: i64| pixel(x.clamp(0, SIDE as i64 - 1) as usize, y.clamp(0, SIDE as i64 - 1) as usize);
    let mut worst = 0.0f32;
    for (i, &gpu) in result.iter().enumerate() {
        let (ox, oy) = (i % width as usize, i / width as usize);
        let x = (ox as f32 + 0.5) / scale as f32 - 0.5;
        let y = (oy as f32 + 0.5) / scale as f32 - 0.5;
        let (x0, y0) = (x.floor(), y.floor());
        let (a, b) = (x - x0, y - y0);
        let (x0, y0) = (x0 as i64, y0 as i64);
        let host = (1.0 - a) * (1.0 - b) * at(x0, y0)
            + a * (1.0 - b) * at(x0 + 1, y0)
            + (1.0 - a) * b * at(x0, y0 + 1)
            + a * b * at(x0 + 1, y0 + 1);
        worst = worst.max((gpu - host).abs());
    }
    println!("upsampled {SIDE}×{SIDE} to {width}×{height}: largest difference from the host {worst:.5}");
    println!("the driver keeps the texture as {:?}", texture.texture_descriptor()?.filter_mode);

    // A tensor map over the image in device memory: 32 × 8 tiles, swizzled for shared memory.
    let pixels = DeviceBuffer::from_slice(&stream, &image)?;
    let map = TensorMapBuilder::new(pixels.view(), TensorDataType::Float32)
        .global_dims(&[SIDE as u64, SIDE as u64])
        .global_strides(&[(SIDE * 4) as u64])
        .swizzle(Swizzle::Bytes128)
        .tiled(&[32, 8])?;
    println!(
        "tensor map over {} bytes, ready for cp.async.bulk.tensor on compute capability 9.0+",
        map.footprint()
    );

    if worst <= 32.0 / 256.0 {
        Ok(())
    } else {
        Err(cuhost::Error::invalid("texture", format!("the GPU differs from the host by {worst}")))
    }
}
