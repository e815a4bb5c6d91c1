//! The runtime calls of `cupy.cuda.runtime`: versions, the device count and device 0's
//! properties as the runtime reports them (each compared with the driver's answer), a
//! `cudaMalloc` / `cudaMemcpy` / `cudaMemset` round trip, pointer attributes, then pinned memory
//! copied both ways on a runtime stream, timed with runtime events, with a host callback that
//! runs once the copies are done.
//!
//! ```sh
//! cargo run --example runtime
//! ```

use cuhost::memory::HostAllocFlags;
use cuhost::runtime::{self as rt, MemoryType};
use cuhost::runtime_sys::cudaDeviceAttr as RA;
use cuhost::{Context, Device, Error};
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Duration;

/// Elements of the buffers.
const N: usize = 1 << 20;

fn main() -> ExitCode {
    // The default pools cache freed blocks for reuse: give them back before exiting, so
    // that a leak checker (compute-sanitizer --leak-check full) sees only real leaks.
    match run().and_then(|r| cuhost::pool::release_default_pools().map(|()| r)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Fails the example with `message` unless `ok`.
fn check(ok: bool, message: impl Into<String>) -> cuhost::Result<()> {
    if ok { Ok(()) } else { Err(Error::invalid("runtime example", message)) }
}

fn version(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

fn run() -> cuhost::Result<()> {
    let (driver, runtime) = (rt::driver_version()?, rt::runtime_version()?);
    check(driver == cuhost::device::driver_version()?, "the runtime and the driver report other drivers")?;
    let count = rt::get_device_count()?;
    check(count == Device::count()?, format!("the runtime counts {count} devices"))?;
    println!("runtime {}, driver {}, {count} device(s)", version(runtime), version(driver));

    rt::set_device(0)?;
    check(rt::get_device()? == 0, "set_device(0) did not stick")?;
    let device = Device::get(0)?;
    let major = rt::device_get_attribute(RA::cudaDevAttrComputeCapabilityMajor, 0)?;
    let minor = rt::device_get_attribute(RA::cudaDevAttrComputeCapabilityMinor, 0)?;
    check((major, minor) == device.compute_capability()?, format!("compute capability {major}.{minor}"))?;
    let sms = rt::device_get_attribute(RA::cudaDevAttrMultiProcessorCount, 0)?;
    check(sms == device.multiprocessor_count()?, format!("{sms} SMs"))?;
    let threads = rt::device_get_attribute(RA::cudaDevAttrMaxThreadsPerBlock, 0)?;
    check(threads == device.max_threads_per_block()?, "threads per block")?;
    let bus = rt::device_get_pci_bus_id(0)?;
    check(bus.eq_ignore_ascii_case(&device.pci_bus_id()?), format!("PCI bus id {bus}"))?;
    check(rt::device_get_by_pci_bus_id(&bus)? == 0, format!("{bus} is not device 0"))?;
    let (free, total) = rt::mem_get_info()?;
    check(free <= total && total > 0, format!("{free} bytes free of {total}"))?;
    println!(
        "device 0: compute capability {major}.{minor}, {sms} SMs, {threads} threads per block, PCI {bus}, \
         {} of {} MiB free (all as the driver says)",
        free >> 20,
        total >> 20
    );

    // Synchronous: host to device, device to device, device to host; then a memset.
    let stream = rt::Stream::create()?;
    let host: Vec<u32> = (0..N as u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    let mut a = rt::malloc::<u32>(&stream, N)?;
    let mut b = rt::malloc::<u32>(&stream, N)?;
    check(a.allocator_name() == "cudaMalloc", format!("memory from {}", a.allocator_name()))?;
    rt::memcpy(&mut a, host.as_slice())?;
    rt::memcpy(&mut b, &a)?;
    let mut back = vec![0u32; N];
    rt::memcpy(back.as_mut_slice(), &b)?;
    check(back == host, "the cudaMemcpy round trip changed the data")?;
    rt::memset(&mut b, 0xab)?;
    rt::memcpy(back.as_mut_slice(), &b)?;
    check(back.iter().all(|&v| v == 0xabab_abab), "cudaMemset did not set every byte")?;
    let attributes = rt::pointer_get_attributes(a.as_raw())?;
    check(
        attributes.memory_type == MemoryType::Device
            && attributes.device == 0
            && attributes.device_pointer == a.as_raw(),
        format!("{attributes:?}"),
    )?;
    let plain = rt::pointer_get_attributes(host.as_ptr() as u64)?;
    check(plain.memory_type == MemoryType::Unregistered, format!("a Vec's memory: {plain:?}"))?;
    println!(
        "cudaMalloc, cudaMemcpy H2D/D2D/D2H and cudaMemset on {N} words: equal; pointer attributes: {attributes:?}"
    );

    // Stream-ordered: pinned to device, device to pinned, a memset, two events and a callback.
    let mut pinned_in = rt::host_alloc::<u32>(N, HostAllocFlags::PORTABLE)?;
    let mut pinned_out = rt::host_alloc::<u32>(N, HostAllocFlags::PORTABLE)?;
    pinned_in.copy_from_slice(&host)?;
    let (start, end) = (rt::Event::create()?, rt::Event::create()?);
    let (sender, called) = mpsc::channel();
    start.record(&stream)?;
    rt::memset_async(&mut a, 0, &stream)?;
    rt::memcpy_async(&mut a, &pinned_in, &stream)?;
    rt::memcpy_async(&mut pinned_out, &a, &stream)?;
    rt::memset_async(&mut b, 0x5a, &stream)?;
    end.record(&stream)?;
    // Runs on a runtime thread once everything above is done; it must not call CUDA.
    stream.add_callback(move |status| {
        let _ = sender.send(status.map_err(|e| e.to_string()));
    })?;
    let status = called.recv_timeout(Duration::from_secs(60));
    check(status == Ok(Ok(())), format!("the callback reported {status:?}"))?;
    stream.synchronize()?;
    check(stream.query()? && end.query()?, "work is still pending after the callback and synchronize")?;
    check(pinned_out.as_slice()? == host.as_slice(), "the pinned round trip changed the data")?;
    rt::memcpy(back.as_mut_slice(), &b)?;
    check(back.iter().all(|&v| v == 0x5a5a_5a5a), "cudaMemsetAsync did not set every byte")?;
    let ms = rt::Event::elapsed_time(&start, &end)?;
    check(ms >= 0.0, format!("{ms} ms between the events"))?;
    println!(
        "on a runtime stream: pinned -> device -> pinned and a memset in {ms:.3} ms; the callback ran with Ok"
    );

    drop((a, b, pinned_in, pinned_out, start, end, stream));
    let mut deferred = rt::take_deferred_errors();
    deferred.extend(Context::primary(&device)?.take_deferred_errors());
    check(deferred.is_empty(), format!("errors kept from drops: {deferred:?}"))
}
