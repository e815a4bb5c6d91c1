//! Peer access between devices: for every ordered pair, whether the first can reach the
//! second's memory and what the link offers; then access enabled both ways between devices 0
//! and 1 (where they allow it), a buffer copied from device 0 to device 1 and back, each copy
//! checked element by element, and access disabled again. With fewer than two devices it says
//! so in one line and exits successfully.
//!
//! ```sh
//! cargo run --example peer
//! ```

use cuhost::driver_sys::CUresult;
use cuhost::peer::P2PAttribute;
use cuhost::{Context, Device, DeviceBuffer, Error, Stream, StreamFlags};
use std::process::ExitCode;

/// Elements copied between the devices.
const N: u32 = 1 << 22;

fn main() -> ExitCode {
    // The default pools cache freed blocks for reuse: give them back before exiting, so
    // that a leak checker (compute-sanitizer --leak-check full) sees only real leaks.
    match run().and_then(|r| cuhost::pool::release_default_pools().map(|()| r)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("peer: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Fails the example with `message` unless `ok`.
fn check(ok: bool, message: impl Into<String>) -> cuhost::Result<()> {
    if ok { Ok(()) } else { Err(Error::invalid("peer example", message)) }
}

/// Enables `ctx`'s access to `peer`'s memory; an access already enabled counts as enabled.
fn enable(ctx: &Context, peer: &Context) -> cuhost::Result<()> {
    match ctx.enable_peer_access(peer) {
        Err(e) if e.driver_status() != Some(CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) => Err(e),
        _ => Ok(()),
    }
}

fn run() -> cuhost::Result<()> {
    let devices = Device::all()?;
    if devices.len() < 2 {
        println!("peer: needs two devices, found {}; nothing to do", devices.len());
        return Ok(());
    }
    for a in &devices {
        for b in devices.iter().filter(|b| *b != a) {
            let can = a.can_access_peer(b)?;
            let supported = a.p2p_attribute(b, P2PAttribute::AccessSupported)? != 0;
            check(can == supported, format!("can_access_peer says {can}, the P2P attribute {supported}"))?;
            println!(
                "device {} -> device {}: can access {can}, performance rank {}, native atomics {}",
                a.ordinal(),
                b.ordinal(),
                a.p2p_attribute(b, P2PAttribute::PerformanceRank)?,
                a.p2p_attribute(b, P2PAttribute::NativeAtomicSupported)? != 0,
            );
        }
    }

    let (d0, d1) = (Device::get(0)?, Device::get(1)?);
    let (c0, c1) = (Context::primary(&d0)?, Context::primary(&d1)?);
    let both_ways = d0.can_access_peer(&d1)? && d1.can_access_peer(&d0)?;
    if both_ways {
        enable(&c0, &c1)?;
        enable(&c1, &c0)?;
        println!("peer access enabled both ways between devices 0 and 1");
    } else {
        println!("devices 0 and 1 cannot access each other: the copies go through the host");
    }

    let host: Vec<u32> = (0..N).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    let (s0, s1) =
        (Stream::new(&c0, StreamFlags::NON_BLOCKING)?, Stream::new(&c1, StreamFlags::NON_BLOCKING)?);
    let on0 = DeviceBuffer::from_slice(&s0, &host)?;
    let mut on1 = DeviceBuffer::<u32>::zeroed(&s1, host.len())?;
    on1.copy_from_device(&on0)?; // between contexts: cuMemcpyPeer, waited for
    check(on1.context().device() == d1, "the destination is not on device 1")?;
    check(on1.to_vec()? == host, "device 1 holds other values than device 0 sent")?;
    println!("copied {} MiB from device 0 to device 1: equal", (host.len() * 4) >> 20);

    // Back again, queued on device 0's stream.
    let mut back = DeviceBuffer::<u32>::zeroed(&s0, host.len())?;
    back.view_mut().copy_from_device_async(&on1.view(), &s0)?;
    s0.synchronize()?;
    check(back.to_vec()? == host, "the copy back to device 0 differs")?;
    println!("copied it back to device 0 on a device-0 stream: equal");

    if both_ways {
        c0.disable_peer_access(&c1)?;
        c1.disable_peer_access(&c0)?;
        let again = c0.disable_peer_access(&c1).err().and_then(|e| e.driver_status());
        check(
            again == Some(CUresult::CUDA_ERROR_PEER_ACCESS_NOT_ENABLED),
            format!("disabling twice gave {again:?}"),
        )?;
        println!("peer access disabled again (a second disable: CUDA_ERROR_PEER_ACCESS_NOT_ENABLED)");
    }
    drop((on0, on1, back));
    let deferred: Vec<Error> =
        c0.take_deferred_errors().into_iter().chain(c1.take_deferred_errors()).collect();
    check(deferred.is_empty(), format!("errors kept from drops: {deferred:?}"))
}
