//! Graphics interop against a real OpenGL context made through EGL with no display: a GL
//! buffer written by a kernel while mapped and read back with GL, a GL texture read and written
//! as CUDA arrays and sampled by a kernel through a texture object, an EGL image read through
//! its EGL frame, an EGL stream carrying a CUDA frame
//! from producer to consumer, and an event made from an EGL fence. Names that do not exist, a
//! resource mapped behind the guard's back, and the wrong view of a mapping are refused with
//! typed errors, and the context goes on.

#[path = "peers/egl.rs"]
mod egl;
#[path = "kernels/mod.rs"]
mod kernels;
#[path = "kernels/texture.rs"]
mod texture_kernels;

use cuda_tests::{TestResult, ensure, ensure_eq, gpu_needing, no_deferred, still_usable};
use cuhost::interop::graphics::{
    EglFrame, EglStreamConsumer, EglStreamProducer, GlDeviceList, GlImageTarget, GraphicsResource, MapFlags,
    RegisterFlags, event_from_egl_sync, gl_devices, map_all,
};
use cuhost::module::Module;
use cuhost::texture::{Resource, TextureDescriptor, TextureObject};
use cuhost::{Context, Device, DeviceBuffer, Error, EventFlags, LaunchConfig, Stream};
use cuhost_driver_sys as sys;
use egl::Gl;
use std::time::Duration;

fn main() {
    cuda_tests::run(&[
        gpu_needing("gl_context_renders_on_a_cuda_device", egl_present, gl_context_renders_on_a_cuda_device),
        gpu_needing(
            "gl_buffer_is_written_by_a_kernel_while_mapped",
            egl_present,
            gl_buffer_is_written_by_a_kernel_while_mapped,
        ),
        gpu_needing(
            "gl_texture_is_read_and_written_as_arrays",
            egl_present,
            gl_texture_is_read_and_written_as_arrays,
        ),
        gpu_needing("gl_texture_is_sampled_by_a_kernel", egl_present, gl_texture_is_sampled_by_a_kernel),
        gpu_needing(
            "egl_image_is_read_through_its_frame",
            egl_image_present,
            egl_image_is_read_through_its_frame,
        ),
        gpu_needing("egl_stream_carries_a_cuda_frame", egl_stream_present, egl_stream_carries_a_cuda_frame),
        gpu_needing("egl_fence_becomes_an_event", egl_fence_present, egl_fence_becomes_an_event),
        gpu_needing(
            "gl_names_that_do_not_exist_are_refused",
            egl_present,
            gl_names_that_do_not_exist_are_refused,
        ),
        gpu_needing("mapping_misuse_is_refused", egl_present, mapping_misuse_is_refused),
    ]);
}

/// A GL context on CUDA device 0, current on this thread, with that device's primary context
/// bound and a stream.
fn setup() -> Result<(Gl, Context, Stream), String> {
    let gl = Gl::new(0)?;
    let (_, ctx, stream) = cuda_tests::device_zero().map_err(|e| e.to_string())?;
    Ok((gl, ctx, stream))
}

fn egl_present() -> Result<(), String> {
    Gl::new(0).map(drop)
}

fn egl_needing(extension: &str) -> Result<(), String> {
    let gl = Gl::new(0)?;
    if gl.has_extension(extension) { Ok(()) } else { Err(format!("the EGL display lacks {extension}")) }
}

fn egl_image_present() -> Result<(), String> {
    egl_needing("EGL_KHR_gl_texture_2D_image")
}

fn egl_stream_present() -> Result<(), String> {
    egl_needing("EGL_KHR_stream")
}

fn egl_fence_present() -> Result<(), String> {
    egl_needing("EGL_KHR_fence_sync")?;
    Device::get(0).map_err(|e| e.to_string())?;
    let (mut function, mut found) =
        (std::ptr::null_mut(), sys::CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SUCCESS);
    // SAFETY: a lookup by name into two locals.
    let status = unsafe {
        sys::cuGetProcAddress(c"cuEventCreateFromEGLSync".as_ptr(), &mut function, 9000, 0, &mut found)
    };
    if status != sys::CUresult::CUDA_SUCCESS || function.is_null() {
        return Err(
            "the driver does not provide cuEventCreateFromEGLSync (NVIDIA provides it on Tegra)".into()
        );
    }
    Ok(())
}

fn gl_context_renders_on_a_cuda_device() -> TestResult {
    let (gl, _ctx, _stream) = setup()?;
    let devices = gl_devices(GlDeviceList::All)?;
    let zero = Device::get(0)?;
    ensure!(devices.contains(&zero), "{} renders on {devices:?}, not on CUDA device 0", gl.describe());
    Ok(())
}

fn gl_buffer_is_written_by_a_kernel_while_mapped() -> TestResult {
    let (gl, ctx, stream) = setup()?;
    let n = 1 << 16;
    let ys: Vec<f32> = (0..n).map(|i| (i % 31) as f32).collect();
    let name = gl.create_buffer(bytemuck::cast_slice(&ys))?;
    let mut resource = GraphicsResource::gl_buffer(&ctx, name, RegisterFlags::empty())?;
    let xs: Vec<f32> = (0..n).map(|i| (i % 7) as f32 - 3.0).collect();
    let x = DeviceBuffer::from_slice(&stream, &xs)?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let saxpy = module.function("saxpy")?;
    {
        let mut mapped = resource.map(&stream)?;
        ensure_eq!(mapped.pointer(0)?.1, n * 4, "the mapped size");
        let y = mapped.buffer_mut::<f32>(0)?;
        ensure_eq!(y.len(), n);
        let (count, a) = (n as u32, 2.0f32);
        // SAFETY: saxpy takes (u32 n, f32 a, const f32* x, f32* y); x and y hold n floats.
        unsafe { saxpy.launch(&stream, &LaunchConfig::for_elements(count, 256), (&count, &a, &x, y))? };
        mapped.unmap()?;
    }
    let bytes = gl.read_buffer(name, n * 4)?;
    let got: &[f32] = bytemuck::try_cast_slice(&bytes).map_err(|e| e.to_string())?;
    let wrong = (0..n).find(|&i| got[i] != 2.0 * xs[i] + ys[i]);
    ensure!(wrong.is_none(), "element {wrong:?}: GL read {:?}", wrong.map(|i| got[i]));
    // A second mapping, through the drop of its guard, sees GL's data too.
    resource.set_map_flags(MapFlags::ReadOnly)?;
    let mapped = resource.map(&stream)?;
    ensure!(mapped.buffer::<f32>(0)?.to_vec()? == got, "a read-only mapping reads other values");
    drop(mapped);
    drop(resource);
    gl.delete_buffer(name);
    ensure_eq!(gl.error(), 0, "GL reported an error");
    no_deferred(&ctx)
}

fn gl_texture_is_read_and_written_as_arrays() -> TestResult {
    let (gl, ctx, stream) = setup()?;
    let (width, height) = (64u32, 16u32);
    let initial: Vec<f32> = (0..width * height).map(|i| i as f32).collect();
    let texture = gl.create_texture_r32f(width, height, 2, &initial)?;
    let mut resource =
        GraphicsResource::gl_image(&ctx, texture, GlImageTarget::Texture2D, RegisterFlags::SURFACE_LDST)?;
    let written: Vec<f32> = initial.iter().map(|v| 1000.0 - v).collect();
    {
        let mut mapped = resource.map(&stream)?;
        // The synchronous copies below run on the default stream: let the mapping land first.
        mapped.stream().synchronize()?;
        let mut level0 = mapped.array_mut(0, 0, 0)?;
        let d = level0.descriptor()?;
        ensure_eq!((d.width, d.height, d.num_channels), (width as usize, height as usize, 1));
        ensure_eq!(d.format, sys::CUarray_format::CU_AD_FORMAT_FLOAT);
        let mut seen = vec![0f32; initial.len()];
        level0.copy_to_host(&mut seen)?;
        let wrong = (0..seen.len()).find(|&i| seen[i] != initial[i]);
        ensure!(
            wrong.is_none(),
            "CUDA reads other values than GL wrote: at {wrong:?} {:?}",
            wrong.map(|i| (seen[i], initial[i]))
        );
        level0.copy_from_host(&written)?;
        drop(level0);
        let mut levels = mapped.mipmapped_array(0, 2)?;
        ensure_eq!(levels.level_descriptor(1)?.width, (width / 2) as usize);
        ensure_eq!(levels.level(1)?.descriptor()?.width, (width / 2) as usize);
        let third = levels.level(2).map(drop);
        ensure!(matches!(third, Err(Error::InvalidArgument { .. })), "level 2 of 2: {third:?}");
    }
    let back = gl.read_texture_r32f(texture, 0, width, height)?;
    let wrong = (0..back.len()).find(|&i| back[i] != written[i]);
    ensure!(
        wrong.is_none(),
        "GL reads other values than CUDA wrote: at {wrong:?} {:?}",
        wrong.map(|i| (back[i], written[i]))
    );
    drop(resource);
    gl.delete_texture(texture);
    no_deferred(&ctx)
}

fn gl_texture_is_sampled_by_a_kernel() -> TestResult {
    let (gl, ctx, stream) = setup()?;
    let (width, height) = (16u32, 8u32);
    let texels: Vec<f32> = (0..width * height).map(|i| (i * 7 % 101) as f32 - 50.0).collect();
    let name = gl.create_texture_r32f(width, height, 1, &texels)?;
    let mut resource =
        GraphicsResource::gl_image(&ctx, name, GlImageTarget::Texture2D, RegisterFlags::READ_ONLY)?;
    let module = Module::from_ptx(&ctx, &texture_kernels::texture_ptx())?;
    let fetch = module.function("fetch_2d")?;
    // One point at the centre of every texel, sampled without filtering.
    let coords: Vec<f32> =
        (0..height).flat_map(|y| (0..width).flat_map(move |x| [x as f32 + 0.5, y as f32 + 0.5])).collect();
    let points = DeviceBuffer::from_slice(&stream, &coords)?;
    let n = width * height;
    let mut out = DeviceBuffer::<[f32; 4]>::zeroed(&stream, n as usize)?;
    {
        let mapped = resource.map(&stream)?;
        let level = mapped.array(0, 0, 0)?;
        let texture =
            TextureObject::new(Resource::borrowed_array(&level)?, &TextureDescriptor::default(), None)?;
        // SAFETY: fetch_2d takes (u64 texture, f32* coords, float4* out, u32 n); coords holds
        // two floats and out one float4 per point. It runs on the mapping's stream.
        unsafe {
            fetch.launch(
                mapped.stream(),
                &LaunchConfig::for_elements(n, 64),
                (&texture, &points, &mut out, &n),
            )?
        };
        stream.synchronize()?;
    }
    let got: Vec<f32> = out.to_vec()?.iter().map(|t| t[0]).collect();
    let wrong = (0..got.len()).find(|&i| got[i] != texels[i]);
    ensure!(wrong.is_none(), "texel {wrong:?}: the kernel sampled {:?}", wrong.map(|i| (got[i], texels[i])));
    drop(resource);
    gl.delete_texture(name);
    no_deferred(&ctx)
}

fn egl_image_is_read_through_its_frame() -> TestResult {
    let (gl, ctx, _stream) = setup()?;
    let (width, height) = (32u32, 8u32);
    let data: Vec<u32> = (0..width * height).map(|i| 0x8000_0000 | (i * 0x0101)).collect();
    let texture = gl.create_texture_rgba8(width, height, &data)?;
    let image = gl.create_image_from_texture(texture)?;
    // SAFETY: the image lives until after the resource is dropped.
    let resource = unsafe { GraphicsResource::egl_image(&ctx, image, MapFlags::ReadOnly)? };
    // Nothing orders the two APIs' work on an EGL image: GL finishes before CUDA reads.
    gl.finish();
    let frame = resource.egl_frame(0, 0)?;
    ensure_eq!((frame.width(), frame.height(), frame.plane_count()), (width, height, 1), "{frame:?}");
    let array = frame.array(0).ok_or_else(|| format!("the frame is not made of arrays: {frame:?}"))?;
    let mut seen = vec![0u32; data.len()];
    array.copy_to_host(&mut seen)?;
    ensure!(seen == data, "the EGL frame holds other values (first {:#x}, {frame:?})", seen[0]);
    drop(resource);
    gl.destroy_image(image);
    gl.delete_texture(texture);
    no_deferred(&ctx)
}

/// The words of the pitched plane 0 of `frame`, `width` by `height`.
fn read_pitched(frame: &EglFrame<'_>, width: u32, height: u32) -> Result<Vec<u32>, cuda_tests::Failed> {
    let ptr = frame.plane_pointer(0).ok_or_else(|| format!("not a pitched frame: {frame:?}"))?;
    let mut seen = vec![0u32; (width * height) as usize];
    for row in 0..height as usize {
        let start = row * width as usize;
        // SAFETY: each row of the plane holds `width` words.
        let status = unsafe {
            sys::cuMemcpyDtoH(
                seen[start..].as_mut_ptr().cast(),
                ptr + (row * frame.pitch() as usize) as u64,
                width as usize * 4,
            )
        };
        cuda_tests::drv("cuMemcpyDtoH", status)?;
    }
    Ok(seen)
}

fn egl_stream_carries_a_cuda_frame() -> TestResult {
    let (gl, ctx, stream) = setup()?;
    let egl_stream = gl.create_stream()?;
    let (width, height) = (64u32, 4u32);
    // Each texel is four 8-bit channels (ARGB), one u32 here; two frames take turns.
    let first: Vec<u32> = (0..width * height).map(|i| 0xabc0_0000 | i).collect();
    let second: Vec<u32> = first.iter().map(|v| !v).collect();
    let buffers = [DeviceBuffer::from_slice(&stream, &first)?, DeviceBuffer::from_slice(&stream, &second)?];
    let outcome = (|| -> TestResult {
        // SAFETY: the EGL stream outlives both connections (destroyed below, after them).
        let mut consumer = unsafe { EglStreamConsumer::connect(&ctx, egl_stream, None)? };
        // SAFETY: as above.
        let mut producer = unsafe { EglStreamProducer::connect(&ctx, egl_stream, width, height)? };
        let frames = buffers
            .iter()
            .map(|b| {
                let (format, color) = (
                    sys::CUarray_format::CU_AD_FORMAT_UNSIGNED_INT8,
                    sys::CUeglColorFormat::CU_EGL_COLOR_FORMAT_ARGB,
                );
                EglFrame::pitched(b.view(), width, height, width * 4, 4, format, color)
            })
            .collect::<Result<Vec<_>, Error>>()?;
        for (frame, data) in frames.iter().zip([&first, &second]) {
            // SAFETY: the buffers are neither freed nor written until the stream is gone.
            unsafe { producer.present(frame, Some(&stream))? };
            let acquired = consumer.acquire(Some(&stream), Some(Duration::from_secs(5)))?;
            let received = acquired.frame()?;
            ensure_eq!((received.width(), received.height()), (width, height), "{received:?}");
            let seen = read_pitched(&received, width, height)?;
            ensure!(seen == *data, "the consumer received other values (first {:#x})", seen[0]);
            acquired.release()?;
        }
        // The stream keeps the latest frame for its consumer and hands the older one back.
        let back = producer.return_frame(Some(&stream))?;
        ensure_eq!(back.plane_pointer(0), Some(buffers[0].as_raw()), "the producer got another frame back");
        let none = producer.return_frame(Some(&stream)).map(|f| f.plane_pointer(0));
        ensure_eq!(
            none.err().and_then(|e| e.driver_status()),
            Some(sys::CUresult::CUDA_ERROR_LAUNCH_TIMEOUT),
            "a second frame came back while the consumer keeps it"
        );
        Ok(())
    })();
    gl.destroy_stream(egl_stream);
    outcome?;
    stream.synchronize()?;
    no_deferred(&ctx)
}

fn egl_fence_becomes_an_event() -> TestResult {
    let (gl, ctx, stream) = setup()?;
    let name = gl.create_buffer(&[1u8; 4096])?;
    let sync = gl.create_fence_sync()?;
    // SAFETY: the sync object lives until after the event is dropped.
    let event = unsafe { event_from_egl_sync(&ctx, sync, EventFlags::BLOCKING_SYNC)? };
    stream.wait_event(&event)?;
    stream.synchronize()?;
    event.synchronize()?;
    ensure!(event.query()?, "the EGL fence's event is not complete after GL finished");
    drop(event);
    gl.destroy_sync(sync);
    gl.delete_buffer(name);
    no_deferred(&ctx)
}

fn gl_names_that_do_not_exist_are_refused() -> TestResult {
    let (gl, ctx, stream) = setup()?;
    let missing = GraphicsResource::gl_buffer(&ctx, 987_654, RegisterFlags::empty());
    ensure!(
        matches!(missing, Err(Error::Driver { call: "cuGraphicsGLRegisterBuffer", .. })),
        "an unknown buffer name: {missing:?}"
    );
    let missing = GraphicsResource::gl_image(&ctx, 987_654, GlImageTarget::Texture2D, RegisterFlags::empty());
    ensure!(
        matches!(missing, Err(Error::Driver { call: "cuGraphicsGLRegisterImage", .. })),
        "an unknown texture name: {missing:?}"
    );
    let zero = GraphicsResource::gl_buffer(&ctx, 0, RegisterFlags::empty());
    ensure!(matches!(zero, Err(Error::InvalidArgument { .. })), "name 0: {zero:?}");
    // A buffer registered as an image is the wrong kind of object.
    let name = gl.create_buffer(&[0u8; 256])?;
    let wrong = GraphicsResource::gl_image(&ctx, name, GlImageTarget::Texture2D, RegisterFlags::empty());
    ensure!(matches!(wrong, Err(Error::Driver { .. })), "a buffer as a texture: {wrong:?}");
    gl.delete_buffer(name);
    still_usable(&stream)?;
    no_deferred(&ctx)
}

fn mapping_misuse_is_refused() -> TestResult {
    let (gl, ctx, stream) = setup()?;
    let buffer = gl.create_buffer(&[0u8; 12])?;
    let texture = gl.create_texture_r32f(8, 8, 1, &[0.0; 64])?;
    let mut as_buffer = GraphicsResource::gl_buffer(&ctx, buffer, RegisterFlags::empty())?;
    let mut as_image =
        GraphicsResource::gl_image(&ctx, texture, GlImageTarget::Texture2D, RegisterFlags::empty())?;
    {
        let mapped = map_all([&mut as_buffer, &mut as_image], &stream)?;
        ensure_eq!(mapped.len(), 2);
        let status = |r: Result<_, Error>| r.err().and_then(|e| e.driver_status());
        ensure_eq!(
            status(mapped.buffer::<u8>(1).map(drop)),
            Some(sys::CUresult::CUDA_ERROR_NOT_MAPPED_AS_POINTER)
        );
        ensure_eq!(
            status(mapped.array(0, 0, 0).map(drop)),
            Some(sys::CUresult::CUDA_ERROR_NOT_MAPPED_AS_ARRAY)
        );
        let odd = mapped.buffer::<u64>(0);
        ensure!(matches!(odd, Err(Error::InvalidArgument { .. })), "12 bytes as u64s: {odd:?}");
        let past = mapped.buffer::<u8>(2);
        ensure!(matches!(past, Err(Error::InvalidArgument { .. })), "resource 2 of 2: {past:?}");
    }
    // Mapped behind the guard's back, through the raw handle: the guard's map is refused.
    let mut raw = as_buffer.as_raw();
    // SAFETY: a registered resource and a live stream.
    cuda_tests::drv("cuGraphicsMapResources", unsafe {
        sys::cuGraphicsMapResources(1, &mut raw, stream.as_raw())
    })?;
    let twice = as_buffer.map(&stream).map(drop);
    ensure_eq!(twice.err().and_then(|e| e.driver_status()), Some(sys::CUresult::CUDA_ERROR_ALREADY_MAPPED));
    // SAFETY: mapped just above.
    cuda_tests::drv("cuGraphicsUnmapResources", unsafe {
        sys::cuGraphicsUnmapResources(1, &mut raw, stream.as_raw())
    })?;
    // Unmapping what is not mapped is the driver's error, and harms nothing.
    // SAFETY: a registered resource and a live stream.
    let again = unsafe { sys::cuGraphicsUnmapResources(1, &mut raw, stream.as_raw()) };
    ensure_eq!(again, sys::CUresult::CUDA_ERROR_NOT_MAPPED);
    let mapped = as_buffer.map(&stream)?;
    ensure_eq!(mapped.buffer::<u8>(0)?.len(), 12);
    mapped.unmap()?;
    drop((as_buffer, as_image));
    gl.delete_buffer(buffer);
    gl.delete_texture(texture);
    still_usable(&stream)?;
    no_deferred(&ctx)
}
