//! External-resource and graphics interop against the raw driver calls, in the same run:
//!
//! * signalling a Vulkan timeline semaphore on a stream: `ExternalSemaphore::signal` against
//!   `cuSignalExternalSemaphoresAsync`, and a wait for a value already reached against
//!   `cuWaitExternalSemaphoresAsync`; and each raw call against itself, which shows how far
//!   apart two identical sides come out;
//! * mapping a range of Vulkan memory as a buffer and dropping it: `map_buffer` + drop against
//!   `cuExternalMemoryGetMappedBuffer` + `cuStreamSynchronize` + `cuMemFree`;
//! * mapping an OpenGL buffer on a stream and unmapping it: `map` + `unmap` against
//!   `cuGraphicsMapResources` + `cuGraphicsUnmapResources`.
//!
//! Where the Vulkan or EGL loader is missing, those rows are skipped and the reason printed.

#[path = "../tests/peers/egl.rs"]
mod egl;
#[path = "../tests/peers/vulkan.rs"]
mod vulkan;

use cuda_tests::bench::{Row, compare, compare_settled, print_table};
use cuhost::interop::external::{
    ExternalMemory, ExternalMemoryFlags, ExternalSemaphore, MemoryHandle, SemaphoreHandle, SignalParams,
    WaitParams,
};
use cuhost::interop::graphics::{GraphicsResource, RegisterFlags};
use cuhost::{Context, Device, Result, Stream, StreamFlags};
use cuhost_driver_sys as sys;
use std::cell::Cell;

const ROUNDS: usize = 21;
/// The semaphore rows and their raw-against-raw rows: more rounds, since the driver's own cost
/// per call moves by several percent from block to block and these ratios are read to 2%.
const SEMAPHORE_ROUNDS: usize = 61;

fn main() {
    let setup = || -> Result<(Device, Context, Stream)> {
        let device = Device::get(0)?;
        let ctx = Context::primary(&device)?;
        ctx.bind_to_thread()?;
        let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
        Ok((device, ctx, stream))
    };
    let (device, ctx, stream) = match setup() {
        Ok(s) => s,
        Err(e) => return eprintln!("benchmark skipped: {e}"),
    };
    let mut rows = Vec::new();
    match vulkan_rows(&device, &ctx, &stream) {
        Ok(mut r) => rows.append(&mut r),
        Err(e) => eprintln!("Vulkan rows skipped: {e}"),
    }
    match gl_rows(&ctx, &stream) {
        Ok(mut r) => rows.append(&mut r),
        Err(e) => eprintln!("OpenGL rows skipped: {e}"),
    }
    print_table("Interop against the raw driver calls (same run)", &rows);
}

fn check(call: &str, status: sys::CUresult) {
    if status != sys::CUresult::CUDA_SUCCESS {
        eprintln!("{call} failed: {}", status.name().unwrap_or("unknown status"));
        std::process::exit(1);
    }
}

fn vulkan_rows(device: &Device, ctx: &Context, stream: &Stream) -> std::result::Result<Vec<Row>, String> {
    let text = |e: cuhost::Error| e.to_string();
    let vk = vulkan::Vulkan::new(device.uuid().map_err(text)?.0)?;
    let timeline = vk.timeline_semaphore(0)?;
    let semaphore =
        ExternalSemaphore::import(ctx, SemaphoreHandle::TimelineFd(vk.export_semaphore_fd(&timeline)?))
            .map_err(|r| r.to_string())?;
    let raw_semaphore = semaphore.as_raw();
    // Timeline values only grow: both sides draw from one counter.
    let value = Cell::new(0u64);
    let next = || {
        value.set(value.get() + 1);
        value.get()
    };
    let mut rows = Vec::new();
    // Each timed block starts from a drained stream: 2,000 queued signals otherwise leave
    // back-pressure that the next block, of either side, pays for.
    let drain = || {
        if let Err(e) = stream.synchronize() {
            eprintln!("synchronize failed: {e}");
            std::process::exit(1);
        }
    };
    // The raw calls, also timed against themselves below: how far apart two identical sides
    // come out in this bench, the floor under the ratios of the wrapper.
    let raw_signal = || {
        // SAFETY: a plain C struct; all zeroes is a valid value.
        let mut params: sys::CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS = unsafe { std::mem::zeroed() };
        params.params.fence.value = next();
        // SAFETY: one live semaphore, its parameters, a live stream.
        check("cuSignalExternalSemaphoresAsync", unsafe {
            sys::cuSignalExternalSemaphoresAsync(&raw_semaphore, &params, 1, stream.as_raw())
        });
    };
    let raw_wait = || {
        // SAFETY: a plain C struct; all zeroes is a valid value.
        let mut params: sys::CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS = unsafe { std::mem::zeroed() };
        params.params.fence.value = 1;
        // SAFETY: as above.
        check("cuWaitExternalSemaphoresAsync", unsafe {
            sys::cuWaitExternalSemaphoresAsync(&raw_semaphore, &params, 1, stream.as_raw())
        });
    };
    rows.push(compare_settled(
        "ExternalSemaphore::signal (timeline)",
        SEMAPHORE_ROUNDS,
        2000,
        || {
            if let Err(e) = semaphore.signal(stream, SignalParams::value(next())) {
                eprintln!("signal failed: {e}");
                std::process::exit(1);
            }
        },
        raw_signal,
        drain,
    ));
    stream.synchronize().map_err(text)?;
    rows.push(compare_settled(
        "ExternalSemaphore::wait (value reached)",
        SEMAPHORE_ROUNDS,
        2000,
        || {
            if let Err(e) = semaphore.wait(stream, WaitParams::value(1)) {
                eprintln!("wait failed: {e}");
                std::process::exit(1);
            }
        },
        raw_wait,
        drain,
    ));
    stream.synchronize().map_err(text)?;
    rows.push(compare_settled(
        "raw signal against itself (the bench's spread)",
        SEMAPHORE_ROUNDS,
        2000,
        raw_signal,
        raw_signal,
        drain,
    ));
    stream.synchronize().map_err(text)?;
    rows.push(compare_settled(
        "raw wait against itself (the bench's spread)",
        SEMAPHORE_ROUNDS,
        2000,
        raw_wait,
        raw_wait,
        drain,
    ));
    stream.synchronize().map_err(text)?;

    let size = 1u64 << 20;
    let buffer = vk.exportable_buffer(size)?;
    let memory = ExternalMemory::import(
        ctx,
        MemoryHandle::OpaqueFd(vk.export_memory_fd(&buffer)?),
        buffer.allocation_size(),
        ExternalMemoryFlags::DEDICATED,
    )
    .map_err(|r| r.to_string())?;
    let raw_memory = memory.as_raw();
    rows.push(compare(
        "ExternalMemory::map_buffer + drop (1 MiB)",
        ROUNDS,
        200,
        || {
            // SAFETY: Vulkan does not touch the buffer.
            match unsafe { memory.map_buffer::<u8>(0, size as usize, stream) } {
                Ok(b) => drop(b),
                Err(e) => {
                    eprintln!("map_buffer failed: {e}");
                    std::process::exit(1);
                }
            }
        },
        || {
            let desc = sys::CUDA_EXTERNAL_MEMORY_BUFFER_DESC { offset: 0, size, flags: 0, reserved: [0; 16] };
            let mut ptr = 0;
            // SAFETY: a live imported object; the mapping is freed after its stream is idle.
            unsafe {
                check(
                    "cuExternalMemoryGetMappedBuffer",
                    sys::cuExternalMemoryGetMappedBuffer(&mut ptr, raw_memory, &desc),
                );
                check("cuStreamSynchronize", sys::cuStreamSynchronize(stream.as_raw()));
                check("cuMemFree", sys::cuMemFree(ptr));
            }
        },
    ));
    drop((memory, semaphore));
    Ok(rows)
}

fn gl_rows(ctx: &Context, stream: &Stream) -> std::result::Result<Vec<Row>, String> {
    let gl = egl::Gl::new(0)?;
    let name = gl.create_buffer(&vec![0u8; 1 << 20])?;
    let mut resource =
        GraphicsResource::gl_buffer(ctx, name, RegisterFlags::empty()).map_err(|e| e.to_string())?;
    let mut raw_resource = resource.as_raw();
    let row = compare(
        "GraphicsResource::map + unmap (GL buffer)",
        ROUNDS,
        1000,
        || {
            if let Err(e) = resource.map(stream).and_then(|m| m.unmap()) {
                eprintln!("map failed: {e}");
                std::process::exit(1);
            }
        },
        || {
            // SAFETY: a registered resource, mapped and unmapped on a live stream.
            unsafe {
                check(
                    "cuGraphicsMapResources",
                    sys::cuGraphicsMapResources(1, &mut raw_resource, stream.as_raw()),
                );
                check(
                    "cuGraphicsUnmapResources",
                    sys::cuGraphicsUnmapResources(1, &mut raw_resource, stream.as_raw()),
                );
            }
        },
    );
    stream.synchronize().map_err(|e| e.to_string())?;
    drop(resource);
    gl.delete_buffer(name);
    Ok(vec![row])
}
