//! `cuhost::nvtx` naming real CUDA objects, and `cuhost::profiler`.
//!
//! Run with `NVTX_INJECTION64_PATH` naming the workspace's recording tool
//! (`libnvtx_test_tool.so`, built by `cargo test -p nvtx-sys`), the naming test also reads back
//! what the tool received: the real handles of the context, stream and event.

use cuda_tests::{TestResult, ensure, ensure_eq, gpu};
use cuhost::{Context, Device, Error, Event, EventFlags, Stream, StreamFlags, nvtx, profiler};

fn main() {
    cuda_tests::run(&[
        gpu("profiler_start_stop_and_scope", profiler_start_stop_and_scope),
        gpu("profiler_needs_a_current_context", profiler_needs_a_current_context),
        gpu("cuda_objects_are_named", cuda_objects_are_named),
    ]);
}

fn profiler_start_stop_and_scope() -> TestResult {
    let ctx = Context::primary(&Device::get(0)?)?;
    ctx.bind_to_thread()?;
    profiler::start()?;
    profiler::stop()?;
    let scope = profiler::scope()?;
    scope.stop()?;
    drop(profiler::scope()?);
    Ok(())
}

fn profiler_needs_a_current_context() -> TestResult {
    // A fresh thread has no current context.
    let result = std::thread::spawn(profiler::start).join().map_err(|_| "the thread panicked")?;
    match result {
        Err(Error::Driver { call, status }) => {
            ensure_eq!(call, "cuProfilerStart");
            ensure!(status.name().is_some(), "an unnamed status {status:?}");
            Ok(())
        }
        other => Err(format!("cuProfilerStart without a context gave {other:?}").into()),
    }
}

/// The recording tool's log, when `NVTX_INJECTION64_PATH` names it.
fn tool_log() -> Option<Vec<String>> {
    let path = std::env::var_os("NVTX_INJECTION64_PATH")?;
    if !path.to_string_lossy().contains("nvtx_test_tool") {
        return None;
    }
    // SAFETY: the NVTX loader has loaded this library already; the function has the
    // signature the tool defines.
    unsafe {
        let lib = libloading::Library::new(&path).ok()?;
        let read: libloading::Symbol<unsafe extern "C" fn(*mut u8, usize) -> usize> =
            lib.get(b"nvtx_test_tool_read_log\0").ok()?;
        let mut buf = vec![0u8; read(std::ptr::null_mut(), 0)];
        let n = read(buf.as_mut_ptr(), buf.len());
        buf.truncate(n);
        Some(String::from_utf8_lossy(&buf).lines().map(str::to_string).collect())
    }
}

fn cuda_objects_are_named() -> TestResult {
    let device = Device::get(0)?;
    let ctx = Context::primary(&device)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let event = Event::new(&ctx, EventFlags::DISABLE_TIMING)?;
    nvtx::name_device(&device, "gpu zero");
    nvtx::name_context(&ctx, "primary");
    nvtx::name_stream(&stream, "copies");
    nvtx::name_event(&event, "done");
    // Naming changes nothing about the objects.
    event.record(&stream)?;
    stream.synchronize()?;
    ensure!(event.query()?, "the event did not complete");
    let injected = std::env::var_os("NVTX_INJECTION64_PATH").is_some_and(|p| !p.is_empty());
    ensure_eq!(nvtx::injection().is_attached(), injected);
    if let Some(log) = tool_log() {
        for line in [
            format!(r#"CUDA.NameCuDeviceA {} "gpu zero""#, device.as_raw()),
            format!(r#"CUDA.NameCuContextA {:p} "primary""#, ctx.as_raw()),
            format!(r#"CUDA.NameCuStreamA {:p} "copies""#, stream.as_raw()),
            format!(r#"CUDA.NameCuEventA {:p} "done""#, event.as_raw()),
        ] {
            ensure!(log.contains(&line), "the tool did not receive {line}; it logged {log:#?}");
        }
        println!("the recording tool received the four names with the real handles");
    }
    Ok(())
}
