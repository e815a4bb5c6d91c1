//! Peer access between two devices: can-access, P2P attributes, enable/disable, copies between
//! contexts, and a kernel on one device reading the other's memory.

#[path = "kernels/mod.rs"]
mod kernels;

use cuda_tests::{TestResult, ensure, ensure_eq, gpu, multi_gpu};
use cuhost::driver_sys as sys;
use cuhost::module::Module;
use cuhost::peer::P2PAttribute;
use cuhost::runtime as rt;
use cuhost::{Context, Device, DeviceBuffer, Error, LaunchConfig, Stream, StreamFlags};

fn main() {
    cuda_tests::run(&[
        gpu("a_device_is_not_its_own_peer", a_device_is_not_its_own_peer),
        multi_gpu("can_access_matches_the_p2p_attributes", 2, can_access_matches_the_p2p_attributes),
        multi_gpu("enable_and_disable_peer_access", 2, enable_and_disable_peer_access),
        multi_gpu("peer_copies_between_devices", 2, peer_copies_between_devices),
        multi_gpu("a_kernel_reads_peer_memory", 2, a_kernel_reads_peer_memory),
    ]);
}

fn devices() -> Result<(Device, Device), Error> {
    Ok((Device::get(0)?, Device::get(1)?))
}

fn a_device_is_not_its_own_peer() -> TestResult {
    let d = Device::get(0)?;
    ensure!(
        matches!(d.p2p_attribute(&d, P2PAttribute::AccessSupported), Err(Error::InvalidArgument { .. })),
        "self link"
    );
    let ctx = Context::primary(&d)?;
    ensure!(matches!(ctx.enable_peer_access(&ctx), Err(Error::InvalidArgument { .. })), "self access");
    // Between two contexts of one device the copy is a peer copy and still works.
    let other = Context::create(&d, cuhost::ContextFlags::empty())?;
    let a = DeviceBuffer::from_slice(&Stream::new(&ctx, StreamFlags::NON_BLOCKING)?, &[1u32, 2, 3])?;
    let mut b = DeviceBuffer::<u32>::zeroed(&Stream::new(&other, StreamFlags::NON_BLOCKING)?, 3)?;
    b.copy_from_device(&a)?;
    ensure_eq!(b.to_vec()?, [1, 2, 3]);
    let mut short = DeviceBuffer::<u32>::zeroed(b.stream(), 2)?;
    ensure!(matches!(short.copy_from_device(&a), Err(Error::InvalidArgument { .. })), "length");
    Ok(())
}

fn can_access_matches_the_p2p_attributes() -> TestResult {
    let (d0, d1) = devices()?;
    let can = d0.can_access_peer(&d1)?;
    ensure_eq!(can, d0.p2p_attribute(&d1, P2PAttribute::AccessSupported)? != 0);
    ensure_eq!(can, rt::device_can_access_peer(0, 1)?);
    ensure!(d0.p2p_attribute(&d1, P2PAttribute::PerformanceRank)? >= 0, "rank");
    let atomics = d0.p2p_attribute(&d1, P2PAttribute::NativeAtomicSupported)?;
    ensure!(atomics == 0 || atomics == 1, "native atomics is a flag, got {atomics}");
    Ok(())
}

fn enable_and_disable_peer_access() -> TestResult {
    let (d0, d1) = devices()?;
    if !d0.can_access_peer(&d1)? {
        return Ok(());
    }
    let (c0, c1) = (Context::primary(&d0)?, Context::primary(&d1)?);
    // Start from a known state: access may be enabled by an earlier test in this process.
    let _ = c0.disable_peer_access(&c1);
    c0.enable_peer_access(&c1)?;
    let again = c0.enable_peer_access(&c1).err().and_then(|e| e.driver_status());
    ensure_eq!(again, Some(sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED));
    c0.disable_peer_access(&c1)?;
    let off = c0.disable_peer_access(&c1).err().and_then(|e| e.driver_status());
    ensure_eq!(off, Some(sys::CUresult::CUDA_ERROR_PEER_ACCESS_NOT_ENABLED));
    Ok(())
}

fn peer_copies_between_devices() -> TestResult {
    let (d0, d1) = devices()?;
    let (c0, c1) = (Context::primary(&d0)?, Context::primary(&d1)?);
    let host: Vec<u32> = (0..1 << 20).map(|i: u32| i.wrapping_mul(2_654_435_761)).collect();
    let stream = Stream::new(&c0, StreamFlags::NON_BLOCKING)?;
    let a = DeviceBuffer::from_slice(&stream, &host)?;
    // A synchronous peer copy: after `a`'s stream, on `b`'s, waited for.
    let mut b = DeviceBuffer::<u32>::zeroed(&Stream::new(&c1, StreamFlags::NON_BLOCKING)?, host.len())?;
    b.copy_from_device(&a)?;
    ensure_eq!(b.to_vec()?, host);
    // Zeroed in `stream`'s order, before the peer copy queued there.
    let mut c = DeviceBuffer::<u32>::zeroed(&stream, host.len())?;
    c.view_mut().copy_from_device_async(&b.view(), &stream)?;
    stream.synchronize()?;
    ensure_eq!(c.to_vec()?, host);
    // The runtime's peer copy between allocations made on each device.
    rt::set_device(0)?;
    let s0 = rt::Stream::create()?;
    let mut r0 = rt::malloc::<u32>(&s0, host.len())?;
    rt::memcpy(&mut r0, host.as_slice())?;
    rt::set_device(1)?;
    let s1 = rt::Stream::create()?;
    let mut r1 = rt::malloc::<u32>(&s1, host.len())?;
    ensure_eq!((r0.context().device().ordinal(), r1.context().device().ordinal()), (0, 1));
    rt::memcpy_peer(&mut r1, &r0)?;
    ensure_eq!(r1.to_vec()?, host);
    Ok(())
}

fn a_kernel_reads_peer_memory() -> TestResult {
    let (d0, d1) = devices()?;
    if !d1.can_access_peer(&d0)? {
        return Ok(());
    }
    let (c0, c1) = (Context::primary(&d0)?, Context::primary(&d1)?);
    let _ = c1.disable_peer_access(&c0);
    c1.enable_peer_access(&c0)?;
    let n = 4096u32;
    let s0 = Stream::new(&c0, StreamFlags::NON_BLOCKING)?;
    let stream = Stream::new(&c1, StreamFlags::NON_BLOCKING)?;
    let x = DeviceBuffer::from_slice(&s0, &(0..n).map(|i| i as f32).collect::<Vec<_>>())?;
    let y = DeviceBuffer::from_slice(&stream, &vec![1.0f32; n as usize])?;
    let module = Module::from_ptx(&c1, kernels::PTX)?;
    let (a, xp, yp) = (2.0f32, x.as_raw(), y.as_raw());
    // SAFETY: saxpy takes (u32, f32, f32*, f32*); x lives on device 0, readable from device 1
    // with peer access enabled above; both hold n floats.
    unsafe {
        module.function("saxpy")?.launch(&stream, &LaunchConfig::for_elements(n, 256), (&n, &a, &xp, &yp))?
    };
    stream.synchronize()?;
    c1.disable_peer_access(&c0)?;
    ensure_eq!(y.to_vec()?, (0..n).map(|i| 2.0 * i as f32 + 1.0).collect::<Vec<_>>());
    Ok(())
}
