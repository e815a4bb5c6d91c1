//! Virtual memory management: reserve addresses, make physical memory, map it and grant
//! access; export it as a file descriptor and map the import a second time (both mappings see
//! the same bytes); then grow a `GrowableBuffer` in place and shrink it, and back a
//! `DeviceBuffer` with the `VmmAllocator`.
//!
//! ```sh
//! cargo run --example vmm
//! ```

use cuhost::mempool::Access;
use cuhost::vmm::{
    AccessGrant, AddressRange, AllocationProperties, Granularity, GrowableBuffer, HandleTypes,
    PhysicalMemory, VmmAllocator, VmmSupport,
};
use cuhost::{Context, Device, DeviceBuffer, Error, Stream, StreamFlags};
use std::os::fd::AsFd;
use std::process::ExitCode;
use std::sync::Arc;

fn main() -> ExitCode {
    // The default pools cache freed blocks for reuse: give them back before exiting, so
    // that a leak checker (compute-sanitizer --leak-check full) sees only real leaks.
    match run().and_then(|r| cuhost::pool::release_default_pools().map(|()| r)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vmm: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Fails the example with `message` unless `ok`.
fn check(ok: bool, message: impl Into<String>) -> cuhost::Result<()> {
    if ok { Ok(()) } else { Err(Error::invalid("vmm example", message)) }
}

fn run() -> cuhost::Result<()> {
    let device = Device::get(0)?;
    let ctx = Context::primary(&device)?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    println!("{}: {:?}", device.name()?, VmmSupport::of(&device)?);

    let props = AllocationProperties::device(device).with_handle_types(HandleTypes::POSIX_FILE_DESCRIPTOR);
    let granule = props.granularity(Granularity::Minimum)?;
    println!(
        "granularity: minimum {} KiB, recommended {} KiB",
        granule >> 10,
        props.granularity(Granularity::Recommended)? >> 10
    );

    // Addresses for two granules, memory for one, mapped at the start; then the same memory,
    // exported and imported, mapped at the second granule.
    let range = AddressRange::reserve(&ctx, 2 * granule, 0)?;
    let physical = PhysicalMemory::new(&ctx, granule, &props)?;
    let access = [AccessGrant::device(device, Access::ReadWrite)];
    let mut first = range.map(0, &physical)?;
    first.set_access(&access)?;
    let fd = physical.export_fd()?;
    // SAFETY: nothing else uses the exported memory while this mapping of it is used.
    let imported = unsafe { PhysicalMemory::import_fd(&ctx, fd.as_fd(), granule) }?;
    let second = range.map(granule, &imported)?;
    second.set_access(&access)?;
    first.view_mut::<u32>(&stream)?.memset_d32(0xc0ffee)?;
    let seen = second.view::<u32>(&stream)?.to_vec()?;
    check(seen.iter().all(|&v| v == 0xc0ffee), "the second mapping does not see the first's writes")?;
    println!("{:#x} and {:#x} map the same {} KiB", first.as_raw(), second.as_raw(), granule >> 10);
    drop((range, physical, imported, fd)); // the mappings keep what they need
    drop((first, second));

    // A buffer that grows without copying.
    let mut growing = GrowableBuffer::<u64>::new(&stream, 1 << 28)?;
    growing.extend_from_slice(&[1, 2, 3])?;
    let address = growing.as_raw();
    for len in [1 << 20, 1 << 24, 1 << 26] {
        growing.resize(len)?;
        check(growing.as_raw() == address, "the growable buffer moved")?;
        println!("{len:>9} elements in {} chunk(s) at {address:#x}", growing.chunks().len());
    }
    check(growing.slice(..3)?.to_vec()? == [1, 2, 3], "growth changed the first elements")?;
    growing.resize(3)?;
    println!("shrunk to 3 elements: {} chunk(s) mapped", growing.chunks().len());

    // Any buffer from VMM memory.
    let vmm = Arc::new(VmmAllocator::new(&ctx)?);
    let buffer = DeviceBuffer::from_slice(&stream, &[0.5f32; 1000])?;
    let mut copy = DeviceBuffer::<f32>::new_in(&stream, 1000, vmm)?;
    copy.copy_from_device(&buffer)?;
    check(copy.to_vec()? == [0.5; 1000], "the VMM-backed copy differs")?;
    println!("a DeviceBuffer from {} holds {} bytes", copy.allocator_name(), copy.allocation().size);
    Ok(())
}
