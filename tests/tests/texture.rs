//! Texture and surface objects and tensor maps: fetches through hand-written PTX compared with
//! the same sampling done on the host (bilinear filtering, address modes, 3D, layered and
//! mipmapped textures, linear and pitched memory), a surface written by one kernel and read by
//! another, tiles loaded through a tensor map with and without swizzling, and descriptors the
//! driver would refuse caught first, naming the field.

#[path = "kernels/texture.rs"]
mod kernels;

use cuda_tests::{TestResult, ensure, ensure_eq, gpu, gpu_needing};
use cuhost::memory::{Array, ArrayFlags, MipmappedArray, PitchedBuffer};
use cuhost::module::Module;
use cuhost::texture::{
    AddressMode, ChannelFormat, FilterMode, ReadMode, Resource, ResourceDescriptor, ResourceViewDescriptor,
    ResourceViewFormat, SurfaceObject, Swizzle, TensorDataType, TensorMapBuilder, TextureDescriptor,
    TextureObject,
};
use cuhost::{Context, ContextFlags, Device, DeviceBuffer, Error, LaunchConfig, Stream, StreamFlags};
use std::sync::Arc;

fn main() {
    cuda_tests::run(&[
        gpu(
            "linear_filtering_with_normalized_coordinates_matches_bilinear_on_the_host",
            linear_filtering_with_normalized_coordinates_matches_bilinear_on_the_host,
        ),
        gpu("address_modes_at_the_edges", address_modes_at_the_edges),
        gpu("three_d_texture_filters_between_slices", three_d_texture_filters_between_slices),
        gpu("layered_texture_reads_each_layer", layered_texture_reads_each_layer),
        gpu("mipmapped_texture_reads_two_levels", mipmapped_texture_reads_two_levels),
        gpu("linear_and_pitched_memory_textures", linear_and_pitched_memory_textures),
        gpu("surface_written_by_one_kernel_is_read_back", surface_written_by_one_kernel_is_read_back),
        gpu_needing(
            "tensor_map_tile_loads_plain_and_swizzled",
            compute_9_or_later,
            tensor_map_tile_loads_plain_and_swizzled,
        ),
        gpu("bad_descriptors_are_refused_naming_the_field", bad_descriptors_are_refused_naming_the_field),
    ]);
}

fn context() -> Result<Context, Error> {
    let ctx = Context::primary(&Device::get(0)?)?;
    ctx.bind_to_thread()?;
    Ok(ctx)
}

fn compute_9_or_later() -> Result<(), String> {
    let (major, minor) = Device::get(0)
        .and_then(|d| d.compute_capability())
        .map_err(|e| format!("cannot read the compute capability: {e}"))?;
    if major >= 9 {
        Ok(())
    } else {
        Err(format!("tensor maps need compute capability 9.0; device 0 has {major}.{minor}"))
    }
}

/// Runs fetch kernel `name` of the texture module at every point of `coords` (2 or 4 floats
/// each, `words` per point) and returns one float4 per point.
fn fetch(
    ctx: &Context,
    texture: &TextureObject<'_>,
    name: &str,
    words: usize,
    coords: &[f32],
) -> Result<Vec<[f32; 4]>, Error> {
    let module = Module::from_ptx(ctx, &kernels::texture_ptx())?;
    let kernel = module.function(name)?;
    let stream = Stream::new(ctx, StreamFlags::NON_BLOCKING)?;
    let n = (coords.len() / words) as u32;
    let points = DeviceBuffer::from_slice(&stream, coords)?;
    let mut out = DeviceBuffer::<[f32; 4]>::zeroed(&stream, n as usize)?;
    // SAFETY: the fetch kernels take (u64 texture, f32* coords, float4* out, u32 n); coords
    // holds `words` floats per point and out one float4 per point.
    unsafe { kernel.launch(&stream, &LaunchConfig::for_elements(n, 64), (texture, &points, &mut out, &n))? };
    stream.synchronize()?;
    out.to_vec()
}

fn close(gpu: f32, host: f32) -> bool {
    (gpu - host).abs() <= 1e-5 * host.abs().max(1.0)
}

fn linear_filtering_with_normalized_coordinates_matches_bilinear_on_the_host() -> TestResult {
    const W: usize = 16;
    const H: usize = 8;
    let ctx = context()?;
    let texel = |x: usize, y: usize| -> [f32; 4] {
        let v = (x + W * y) as f32;
        [v, 2.0 * v + 1.0, 100.0 - v, (x * y) as f32]
    };
    let host: Vec<[f32; 4]> =
        (0..H).flat_map(|y| (0..W).map(move |x| (x, y))).map(|(x, y)| texel(x, y)).collect();
    let format = ChannelFormat::of::<[f32; 4]>();
    let mut array = Array::new(&ctx, &format.array_descriptor(W, H, 0, ArrayFlags::empty()))?;
    array.copy_from_host(&host)?;
    let descriptor = TextureDescriptor {
        filter_mode: FilterMode::Linear,
        normalized_coordinates: true,
        ..Default::default()
    };
    let texture = TextureObject::new(Resource::array(Arc::new(array))?, &descriptor, None)?;

    // Points whose distance from a texel centre is a multiple of 1/8 texel (the hardware keeps
    // 8 fractional bits of the weights), across the whole texture and past its clamped edges.
    let fractions = [0.0f32, 0.25, 0.5, 0.875];
    let mut coords = Vec::new();
    for j in -1..H as i32 {
        for fy in fractions {
            for i in -1..W as i32 {
                for fx in fractions {
                    coords.push((i as f32 + 0.5 + fx) / W as f32);
                    coords.push((j as f32 + 0.5 + fy) / H as f32);
                }
            }
        }
    }
    let clamped =
        |x: i64, y: i64| texel(x.clamp(0, W as i64 - 1) as usize, y.clamp(0, H as i64 - 1) as usize);
    let bilinear = |u: f32, v: f32| -> [f32; 4] {
        let (x, y) = (u as f64 * W as f64 - 0.5, v as f64 * H as f64 - 0.5);
        let (i, j) = (x.floor(), y.floor());
        let (a, b) = (x - i, y - j);
        let (i, j) = (i as i64, j as i64);
        let corners = [
            (clamped(i, j), (1.0 - a) * (1.0 - b)),
            (clamped(i + 1, j), a * (1.0 - b)),
            (clamped(i, j + 1), (1.0 - a) * b),
            (clamped(i + 1, j + 1), a * b),
        ];
        std::array::from_fn(|c| corners.iter().map(|(t, w)| t[c] as f64 * w).sum::<f64>() as f32)
    };
    let got = fetch(&ctx, &texture, "fetch_2d", 2, &coords)?;
    ensure_eq!(got.len(), coords.len() / 2);
    for (p, texel) in got.iter().enumerate() {
        let (u, v) = (coords[2 * p], coords[2 * p + 1]);
        let want = bilinear(u, v);
        for c in 0..4 {
            ensure!(
                close(texel[c], want[c]),
                "at ({u}, {v}) channel {c}: GPU {} vs host {}",
                texel[c],
                want[c]
            );
        }
    }
    // The driver gives the descriptors back.
    let read = texture.texture_descriptor()?;
    ensure_eq!(read.filter_mode, FilterMode::Linear);
    ensure!(read.normalized_coordinates, "normalized coordinates lost: {read:?}");
    ensure_eq!(read.address_mode[0], AddressMode::Clamp);
    let resource = texture.resource_descriptor()?;
    let array = texture.resource().array_handle().map(|a| a.as_raw());
    ensure!(
        matches!(resource, ResourceDescriptor::Array { array: a } if Some(a) == array),
        "resource descriptor {resource:?}"
    );
    Ok(())
}

/// The texel column a fetch at column `k` reads, or `None` for the border colour.
type TexelOf = fn(i32) -> Option<i32>;

fn address_modes_at_the_edges() -> TestResult {
    const W: i32 = 8;
    const H: i32 = 4;
    let ctx = context()?;
    let host: Vec<f32> = (0..H).flat_map(|y| (0..W).map(move |x| (x + 10 * y) as f32)).collect();
    let mut array = Array::new(
        &ctx,
        &ChannelFormat::of::<f32>().array_descriptor(W as usize, H as usize, 0, ArrayFlags::empty()),
    )?;
    array.copy_from_host(&host)?;
    let array = Arc::new(array);
    // Texel centres from one texture width before to one after, on every row.
    let mut coords = Vec::new();
    for y in 0..H {
        for k in -W..2 * W {
            coords.push((k as f32 + 0.5) / W as f32);
            coords.push((y as f32 + 0.5) / H as f32);
        }
    }
    let border = 99.0f32;
    let cases: [(AddressMode, TexelOf); 4] = [
        (AddressMode::Clamp, |k| Some(k.clamp(0, W - 1))),
        (AddressMode::Wrap, |k| Some(k.rem_euclid(W))),
        (AddressMode::Mirror, |k| {
            let period = k.rem_euclid(2 * W);
            Some(if period < W { period } else { 2 * W - 1 - period })
        }),
        (AddressMode::Border, |k| (0..W).contains(&k).then_some(k)),
    ];
    for (mode, expected_x) in cases {
        let descriptor = TextureDescriptor {
            address_mode: [mode; 3],
            normalized_coordinates: true,
            border_color: [border, 0.0, 0.0, 0.0],
            ..Default::default()
        };
        let texture = TextureObject::new(Resource::array(array.clone())?, &descriptor, None)?;
        let got = fetch(&ctx, &texture, "fetch_2d", 2, &coords)?;
        let mut p = 0;
        for y in 0..H {
            for k in -W..2 * W {
                let want = expected_x(k).map_or(border, |x| (x + 10 * y) as f32);
                ensure_eq!(got[p][0], want, "{mode:?} at texel {k} of row {y}");
                p += 1;
            }
        }
        let read = texture.texture_descriptor()?;
        // (The driver gives the address modes back but not the border colour.)
        ensure_eq!(read.address_mode[..2], [mode; 2], "address modes given back");
    }
    Ok(())
}

fn three_d_texture_filters_between_slices() -> TestResult {
    const N: usize = 4;
    let ctx = context()?;
    let value = |x: usize, y: usize, z: usize| (x + 4 * y + 16 * z) as f32;
    let host: Vec<f32> =
        (0..N).flat_map(|z| (0..N).flat_map(move |y| (0..N).map(move |x| value(x, y, z)))).collect();
    let mut array =
        Array::new(&ctx, &ChannelFormat::of::<f32>().array_descriptor(N, N, N, ArrayFlags::empty()))?;
    array.copy_from_host(&host)?;
    let descriptor = TextureDescriptor { filter_mode: FilterMode::Linear, ..Default::default() };
    let texture = TextureObject::new(Resource::array(Arc::new(array))?, &descriptor, None)?;
    // Texel centres read the texel; points halfway between centres (in unnormalized
    // coordinates) read the mean of their neighbours.
    let mut coords = Vec::new();
    let mut want = Vec::new();
    for z in 0..N {
        for y in 0..N {
            for x in 0..N {
                coords.extend([x as f32 + 0.5, y as f32 + 0.5, z as f32 + 0.5, 0.0]);
                want.push(value(x, y, z));
            }
        }
    }
    for z in 0..N - 1 {
        for x in 0..N - 1 {
            // Halfway in x and z, on the centre of row 2.
            coords.extend([x as f32 + 1.0, 2.5, z as f32 + 1.0, 0.0]);
            want.push(
                (value(x, 2, z) + value(x + 1, 2, z) + value(x, 2, z + 1) + value(x + 1, 2, z + 1)) / 4.0,
            );
        }
    }
    let got = fetch(&ctx, &texture, "fetch_3d", 4, &coords)?;
    for (p, (texel, want)) in got.iter().zip(&want).enumerate() {
        ensure!(
            close(texel[0], *want),
            "point {p} {:?}: GPU {} vs host {want}",
            &coords[4 * p..4 * p + 3],
            texel[0]
        );
    }
    Ok(())
}

fn layered_texture_reads_each_layer() -> TestResult {
    const W: usize = 4;
    const H: usize = 4;
    const LAYERS: usize = 3;
    let ctx = context()?;
    let value = |x: usize, y: usize, layer: usize| (x + 10 * y + 100 * layer) as f32;
    let host: Vec<f32> =
        (0..LAYERS).flat_map(|l| (0..H).flat_map(move |y| (0..W).map(move |x| value(x, y, l)))).collect();
    let descriptor = ChannelFormat::of::<f32>().array_descriptor(W, H, LAYERS, ArrayFlags::LAYERED);
    let mut array = Array::new(&ctx, &descriptor)?;
    array.copy_from_host(&host)?;
    let texture = TextureObject::new(Resource::array(Arc::new(array))?, &TextureDescriptor::default(), None)?;
    let mut coords = Vec::new();
    let mut want = Vec::new();
    for l in 0..LAYERS {
        for y in 0..H {
            for x in 0..W {
                coords.extend([l as f32, x as f32 + 0.5, y as f32 + 0.5, 0.0]);
                want.push(value(x, y, l));
            }
        }
    }
    let got = fetch(&ctx, &texture, "fetch_layered", 4, &coords)?;
    ensure_eq!(got.iter().map(|t| t[0]).collect::<Vec<_>>(), want);
    Ok(())
}

fn mipmapped_texture_reads_two_levels() -> TestResult {
    const W: usize = 8;
    let ctx = context()?;
    let descriptor = ChannelFormat::of::<f32>().array_descriptor(W, W, 0, ArrayFlags::empty());
    let mut mipmapped = MipmappedArray::new(&ctx, &descriptor, 2)?;
    for level in 0..2u32 {
        let side = W >> level;
        let mut array = mipmapped.level(level)?;
        ensure_eq!((array.descriptor()?.width, array.descriptor()?.height), (side, side), "level {level}");
        let host: Vec<f32> = (0..side * side).map(|i| (100 * (level as usize + 1) + i) as f32).collect();
        array.copy_from_host(&host)?;
    }
    let texture_descriptor =
        TextureDescriptor { normalized_coordinates: true, max_mipmap_level_clamp: 1.0, ..Default::default() };
    let view = ResourceViewDescriptor {
        format: ResourceViewFormat::Channels(ChannelFormat::of::<f32>()),
        width: W,
        height: W,
        first_mipmap_level: 0,
        last_mipmap_level: 1,
        ..Default::default()
    };
    let texture = TextureObject::new(
        Resource::mipmapped_array(Arc::new(mipmapped))?,
        &texture_descriptor,
        Some(&view),
    )?;
    let mut coords = Vec::new();
    let mut want = Vec::new();
    for level in 0..2usize {
        let side = W >> level;
        for y in 0..side {
            for x in 0..side {
                coords.extend([
                    (x as f32 + 0.5) / side as f32,
                    (y as f32 + 0.5) / side as f32,
                    level as f32,
                    0.0,
                ]);
                want.push((100 * (level + 1) + x + side * y) as f32);
            }
        }
    }
    let got = fetch(&ctx, &texture, "fetch_level", 4, &coords)?;
    ensure_eq!(got.iter().map(|t| t[0]).collect::<Vec<_>>(), want);
    let read = texture.resource_view_descriptor()?;
    ensure!(
        read.is_some_and(|v| v.last_mipmap_level == 1 && v.format == view.format),
        "view given back as {read:?}"
    );
    ensure!(
        matches!(texture.resource_descriptor()?, ResourceDescriptor::MipmappedArray { .. }),
        "not a mipmapped array resource"
    );
    Ok(())
}

fn linear_and_pitched_memory_textures() -> TestResult {
    let ctx = context()?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    // Linear memory: texels fetched by index; reading as normalized floats maps u8 to [0, 1].
    let bytes: Vec<[u8; 4]> = (0..256u32).map(|i| [i as u8, 255 - i as u8, 0, 255]).collect();
    let memory = DeviceBuffer::from_slice(&stream, &bytes)?;
    let descriptor = TextureDescriptor { read_mode: ReadMode::NormalizedFloat, ..Default::default() };
    let texture = TextureObject::new(Resource::linear(memory.view())?, &descriptor, None)?;
    let coords: Vec<f32> = (0..256).flat_map(|i| [i as f32, 0.0]).collect();
    let got = fetch(&ctx, &texture, "fetch_linear", 2, &coords)?;
    for (i, texel) in got.iter().enumerate() {
        let want = [i as f32 / 255.0, (255 - i) as f32 / 255.0, 0.0, 1.0];
        for c in 0..4 {
            ensure!(close(texel[c], want[c]), "linear texel {i} channel {c}: {} vs {}", texel[c], want[c]);
        }
    }
    ensure!(
        matches!(texture.resource_descriptor()?, ResourceDescriptor::Linear { size_in_bytes: 1024, .. }),
        "linear resource given back wrong"
    );
    drop(texture);

    // Pitched memory: a 2D texture with unnormalized coordinates at texel centres.
    let (w, h) = (24usize, 5usize);
    let host: Vec<f32> = (0..w * h).map(|i| i as f32 * 0.5).collect();
    let mut pitched = PitchedBuffer::<f32>::new(&stream, w, h)?;
    pitched.copy_from_host(&host)?;
    let texture = TextureObject::new(Resource::pitch_2d(&pitched)?, &TextureDescriptor::default(), None)?;
    let coords: Vec<f32> =
        (0..h).flat_map(|y| (0..w).flat_map(move |x| [x as f32 + 0.5, y as f32 + 0.5])).collect();
    let got = fetch(&ctx, &texture, "fetch_2d", 2, &coords)?;
    ensure_eq!(got.iter().map(|t| t[0]).collect::<Vec<_>>(), host);
    let pitch = pitched.pitch();
    ensure!(
        matches!(texture.resource_descriptor()?, ResourceDescriptor::Pitch2d { pitch_in_bytes, width: 24, height: 5, .. } if pitch_in_bytes == pitch),
        "pitched resource given back wrong"
    );
    Ok(())
}

fn surface_written_by_one_kernel_is_read_back() -> TestResult {
    const W: usize = 32;
    const H: usize = 6;
    let ctx = context()?;
    let descriptor = ChannelFormat::of::<u32>().array_descriptor(W, H, 0, ArrayFlags::SURFACE_LDST);
    let surface = SurfaceObject::new(Arc::new(Array::new(&ctx, &descriptor)?))?;
    let module = Module::from_ptx(&ctx, kernels::SURFACE_PTX)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let config = LaunchConfig::new(H as u32, W as u32);
    // SAFETY: write_surface takes (u64 surface) over a W × H u32 array, one block per row.
    unsafe { module.function("write_surface")?.launch(&stream, &config, (&surface,))? };
    let mut out = DeviceBuffer::<u32>::zeroed(&stream, W * H)?;
    let width = W as u32;
    // SAFETY: read_surface takes (u64 surface, u32* out, u32 width); out holds W × H words.
    unsafe { module.function("read_surface")?.launch(&stream, &config, (&surface, &mut out, &width))? };
    stream.synchronize()?;
    let written: Vec<u32> = (0..H).flat_map(|y| (0..W).map(move |x| (x + 1000 * y) as u32)).collect();
    let mut array = vec![0u32; W * H];
    surface.array().ok_or("the surface lost its array")?.copy_to_host(&mut array)?;
    ensure_eq!(array, written, "the array after write_surface");
    ensure_eq!(out.to_vec()?, written.iter().map(|v| v + 1).collect::<Vec<_>>(), "read_surface");
    let handle = surface.array().map(|a| a.as_raw());
    ensure!(
        matches!(surface.resource_descriptor()?, ResourceDescriptor::Array { array } if Some(array) == handle),
        "surface resource given back wrong"
    );
    // A launch on a stream of another context is refused before the call: the array's drop
    // would wait for its own context only.
    let other = Context::create(&ctx.device(), ContextFlags::empty())?;
    let there = Stream::new(&other, StreamFlags::NON_BLOCKING)?;
    let foreign = Module::from_ptx(&other, kernels::SURFACE_PTX)?;
    // SAFETY: refused before the launch.
    let r = unsafe { foreign.function("write_surface")?.launch(&there, &config, (&surface,)) };
    ensure!(matches!(r, Err(Error::InvalidArgument { .. })), "a surface of another context: {r:?}");
    Ok(())
}

fn tensor_map_tile_loads_plain_and_swizzled() -> TestResult {
    const N: usize = 64;
    const BOX_W: usize = 32;
    const BOX_H: usize = 8;
    let ctx = context()?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let host: Vec<f32> = (0..N * N).map(|i| i as f32).collect();
    let matrix = DeviceBuffer::from_slice(&stream, &host)?;
    let module = Module::from_ptx(&ctx, kernels::TMA_PTX)?;
    let kernel = module.function("tma_tile")?;
    let (x, y) = (32u32, 8u32);
    // The tile as the tensor's rows, and where the 128-byte swizzle puts each 16-byte chunk:
    // chunk c of row r lands at chunk c ^ (r % 8) of that row.
    let host_ref = &host;
    let tile: Vec<f32> = (0..BOX_H)
        .flat_map(|r| (0..BOX_W).map(move |c| host_ref[(y as usize + r) * N + x as usize + c]))
        .collect();
    let swizzled: Vec<f32> = (0..BOX_W * BOX_H)
        .map(|p| {
            let byte = 4 * p;
            tile[(byte ^ (((byte >> 7) & 7) << 4)) / 4]
        })
        .collect();
    for (swizzle, want) in [(Swizzle::None, &tile), (Swizzle::Bytes128, &swizzled)] {
        let map = TensorMapBuilder::new(matrix.view(), TensorDataType::Float32)
            .global_dims(&[N as u64, N as u64])
            .global_strides(&[(N * 4) as u64])
            .swizzle(swizzle)
            .tiled(&[BOX_W as u32, BOX_H as u32])?;
        let mut out = DeviceBuffer::<f32>::zeroed(&stream, BOX_W * BOX_H)?;
        // SAFETY: tma_tile takes (CUtensorMap by value, u32 x, u32 y, f32* out) and writes one
        // word per thread, 256 of them.
        unsafe { kernel.launch(&stream, &LaunchConfig::new(1, 256), (&map, &x, &y, &mut out))? };
        stream.synchronize()?;
        ensure_eq!(&out.to_vec()?, want, "{swizzle:?}");
        // The same map over a copy of the matrix reads the same tile.
        let copy = DeviceBuffer::from_slice(&stream, &host)?;
        let moved = map.replace_address(copy.view())?;
        let mut again = DeviceBuffer::<f32>::zeroed(&stream, BOX_W * BOX_H)?;
        // SAFETY: as above.
        unsafe { kernel.launch(&stream, &LaunchConfig::new(1, 256), (&moved, &x, &y, &mut again))? };
        stream.synchronize()?;
        ensure_eq!(&again.to_vec()?, want, "{swizzle:?} after replace_address");
    }
    Ok(())
}

/// The message of an `InvalidArgument`, or a failure naming what came instead.
fn refused<T: std::fmt::Debug>(what: &str, r: Result<T, Error>) -> Result<String, cuda_tests::Failed> {
    match r {
        Err(Error::InvalidArgument { message, .. }) => Ok(message),
        other => Err(format!("{what}: expected an InvalidArgument, got {other:?}").into()),
    }
}

fn bad_descriptors_are_refused_naming_the_field() -> TestResult {
    let ctx = context()?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let memory = DeviceBuffer::<f32>::zeroed(&stream, 1024)?;
    // Linear memory must start at the texture alignment.
    let e = refused("misaligned linear memory", Resource::linear(memory.slice(1..)?))?;
    ensure!(e.contains("`address`"), "{e}");
    let array = Arc::new(Array::new(
        &ctx,
        &ChannelFormat::of::<f32>().array_descriptor(8, 8, 0, ArrayFlags::empty()),
    )?);
    // Wrap needs normalized coordinates.
    let wrap = TextureDescriptor { address_mode: [AddressMode::Wrap; 3], ..Default::default() };
    let e = refused("wrap", TextureObject::new(Resource::array(array.clone())?, &wrap, None))?;
    ensure!(e.contains("`address_mode`") && e.contains("normalized"), "{e}");
    // Anisotropy is at most 16.
    let aniso = TextureDescriptor { max_anisotropy: 32, ..Default::default() };
    let e = refused("anisotropy", TextureObject::new(Resource::array(array.clone())?, &aniso, None))?;
    ensure!(e.contains("`max_anisotropy`"), "{e}");
    // Linear filtering of integers read as integers.
    let bytes = Arc::new(Array::new(
        &ctx,
        &ChannelFormat::of::<u8>().array_descriptor(8, 8, 0, ArrayFlags::empty()),
    )?);
    let linear = TextureDescriptor { filter_mode: FilterMode::Linear, ..Default::default() };
    let e = refused("linear integers", TextureObject::new(Resource::array(bytes)?, &linear, None))?;
    ensure!(e.contains("`filter_mode`"), "{e}");
    // A view of linear memory.
    let e = refused(
        "view of linear memory",
        TextureObject::new(
            Resource::linear(memory.view())?,
            &TextureDescriptor::default(),
            Some(&ResourceViewDescriptor::default()),
        ),
    )?;
    ensure!(e.contains("`view`"), "{e}");
    // A surface over an array made without SURFACE_LDST.
    let e = refused("surface without SURFACE_LDST", SurfaceObject::new(array))?;
    ensure!(e.contains("`flags`"), "{e}");
    // Tensor maps: a box wider than 256 elements, and a swizzle narrower than the box.
    let builder = TensorMapBuilder::new(memory.view(), TensorDataType::Float32)
        .global_dims(&[32, 32])
        .global_strides(&[128]);
    let e = refused("box too large", builder.tiled(&[4, 300]))?;
    ensure!(e.contains("`box_dims[1]`"), "{e}");
    let e = refused("swizzle too narrow", builder.clone().swizzle(Swizzle::Bytes32).tiled(&[32, 4]))?;
    ensure!(e.contains("`swizzle`"), "{e}");
    // The same memory, aligned, makes a texture.
    let good = TextureObject::new(Resource::linear(memory.view())?, &TextureDescriptor::default(), None)?;
    ensure!(good.as_raw() != 0, "a texture object handle of 0");
    Ok(())
}
