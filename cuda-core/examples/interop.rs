//! External memory: a CUDA allocation exported as a POSIX file descriptor (the way Vulkan or
//! another process would hand one over) is imported with `ExternalMemory`, mapped twice as
//! buffers that see the same bytes, and a descriptor that is no memory object is refused and
//! given back open. The guide's interop chapter shows the same with Vulkan, OpenGL and EGL.
//!
//! ```sh
//! cargo run --example interop
//! ```

use cuhost::interop::external::{ExternalMemory, ExternalMemoryFlags, MemoryHandle};
use cuhost::vmm::{AllocationProperties, Granularity, HandleTypes, PhysicalMemory};
use cuhost::{Context, Device, Error, Stream, StreamFlags};
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::ExitCode;

fn main() -> ExitCode {
    // The default pools cache freed blocks for reuse: give them back before exiting, so
    // that a leak checker (compute-sanitizer --leak-check full) sees only real leaks.
    match run().and_then(|r| cuhost::pool::release_default_pools().map(|()| r)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("interop: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Fails the example with `message` unless `ok`.
fn check(ok: bool, message: impl Into<String>) -> cuhost::Result<()> {
    if ok { Ok(()) } else { Err(Error::invalid("interop example", message)) }
}

fn run() -> cuhost::Result<()> {
    let device = Device::get(0)?;
    let ctx = Context::primary(&device)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;

    // The exporting side: physical memory that may leave the process as a descriptor.
    let props = AllocationProperties::device(device).with_handle_types(HandleTypes::POSIX_FILE_DESCRIPTOR);
    let size = props.granularity(Granularity::Recommended)?;
    let physical = PhysicalMemory::new(&ctx, size, &props)?;

    // The importing side: two imports of the same object, one mapping each.
    let flags = ExternalMemoryFlags::empty();
    let writer =
        ExternalMemory::import(&ctx, MemoryHandle::OpaqueFd(physical.export_fd()?), size as u64, flags)?;
    let reader =
        ExternalMemory::import(&ctx, MemoryHandle::OpaqueFd(physical.export_fd()?), size as u64, flags)?;
    let n = size / 4;
    // SAFETY: nothing outside this process touches the memory; both buffers use one stream.
    let (mut a, b) =
        unsafe { (writer.map_buffer::<u32>(0, n, &stream)?, reader.map_buffer::<u32>(0, n, &stream)?) };
    let data: Vec<u32> = (0..n as u32).map(|i| i ^ 0x5a5a_5a5a).collect();
    a.copy_from(&data)?;
    check(b.to_vec()? == data, "the second import does not see the first one's writes")?;
    println!(
        "imported a {size}-byte allocation twice: {n} words written through one mapping read back through the other"
    );

    // A descriptor that is no memory object: refused, and still open afterwards.
    let null: OwnedFd = std::fs::File::open("/dev/null")
        .map_err(|e| Error::invalid("interop example", e.to_string()))?
        .into();
    match ExternalMemory::import(&ctx, MemoryHandle::OpaqueFd(null), 4096, flags) {
        Ok(_) => return Err(Error::invalid("interop example", "/dev/null was imported as memory")),
        Err(refused) => {
            let (error, handle) = refused.into_parts();
            let open = match &handle {
                // SAFETY: F_GETFD only reads the descriptor's flags.
                MemoryHandle::OpaqueFd(fd) => (unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) }) != -1,
                _ => false,
            };
            check(open, "the refused descriptor was closed")?;
            println!("/dev/null refused ({error}); its descriptor came back open");
        }
    }
    drop((a, b, writer, reader));
    let deferred = ctx.take_deferred_errors();
    check(deferred.is_empty(), format!("errors kept from drops: {deferred:?}"))?;
    println!("all mappings and imports released with no deferred errors");
    Ok(())
}
