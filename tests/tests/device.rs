//! `cuhost::device`: enumeration, identity, memory, attributes.

use cuda_tests::{TestResult, cpu, ensure, ensure_eq, gpu};
use cuhost::device::{Uuid, driver_version};
use cuhost::{Context, Device, Error};
use cuhost_driver_sys as sys;

fn main() {
    cuda_tests::run(&[
        gpu("count_get_and_out_of_range_ordinal", count_get_and_out_of_range_ordinal),
        gpu("ordinals_of_every_integer_type_and_refusals", ordinals_of_every_integer_type_and_refusals),
        cpu("bad_ordinals_refused_before_the_driver", bad_ordinals_refused_before_the_driver),
        gpu("identity_round_trips", identity_round_trips),
        gpu("typed_attributes_match_raw_ones", typed_attributes_match_raw_ones),
        gpu("every_attribute_answers_or_is_refused", every_attribute_answers_or_is_refused),
        gpu("memory_sizes_and_pools", memory_sizes_and_pools),
        cpu("uuid_prints_like_nvidia_smi", uuid_prints_like_nvidia_smi),
        gpu("async_notifications_register_and_unregister", async_notifications_register_and_unregister),
    ]);
}

fn count_get_and_out_of_range_ordinal() -> TestResult {
    let n = Device::count()?;
    ensure!(n >= 1, "no device");
    ensure_eq!(Device::all()?.len(), n);
    let d = Device::get(0)?;
    ensure_eq!(d.ordinal(), 0);
    match Device::get(n + 5) {
        Err(Error::InvalidArgument { message, .. }) => {
            ensure!(message.contains("out of range"), "message: {message}");
        }
        other => return Err(format!("expected InvalidArgument, got {other:?}").into()),
    }
    ensure!(driver_version()? >= 12000, "driver version {}", driver_version()?);
    Ok(())
}

/// The refusal of `Device::get(ordinal)`, as `operation: message`.
fn refusal(ordinal: Result<Device, Error>) -> Result<String, String> {
    match ordinal {
        Err(Error::InvalidArgument { operation, message, .. }) => Ok(format!("{operation}: {message}")),
        other => Err(format!("expected InvalidArgument, got {other:?}")),
    }
}

fn ordinals_of_every_integer_type_and_refusals() -> TestResult {
    let n = Device::count()?;
    let first = Device::get(0)?;
    ensure_eq!(Device::get(0i32)?, first);
    ensure_eq!(Device::get(0u32)?, first);
    ensure_eq!(Device::get(0usize)?, first);
    ensure_eq!(Device::get(0u64)?, first);
    ensure_eq!(Device::get(0i64)?, first);
    ensure_eq!(Device::get(n - 1)?.ordinal(), n - 1);
    // CUDA code holds the ordinal as an `int`; so does the driver.
    let as_int: i32 = i32::try_from(n)?;
    let past_the_end = refusal(Device::get(as_int))?;
    ensure_eq!(
        past_the_end,
        format!(
            "Device::get: device ordinal {n} is out of range: {n} device(s) present (ordinals 0..{n}); \
             use one below Device::count()"
        )
    );
    ensure_eq!(refusal(Device::get(n))?, past_the_end);
    let negative = refusal(Device::get(-1i32))?;
    ensure!(negative.starts_with("Device::get: device ordinal -1 is out of range"), "{negative}");
    Ok(())
}

/// A negative ordinal, or one no `int` holds, is refused before the driver is loaded: this
/// runs on a host without CUDA.
fn bad_ordinals_refused_before_the_driver() -> TestResult {
    let negative = refusal(Device::get(-1i32))?;
    ensure_eq!(
        negative,
        "Device::get: device ordinal -1 is out of range: ordinals count from 0 (the first device) to \
         Device::count() - 1"
    );
    let oversized = refusal(Device::get(u64::MAX))?;
    ensure!(oversized.contains("18446744073709551615") && oversized.contains("int"), "{oversized}");
    ensure!(refusal(Device::get(i64::MIN)).is_ok(), "i64::MIN was not refused");
    ensure!(refusal(Device::get(1u64 << 31)).is_ok(), "2^31 was not refused");
    Ok(())
}

fn identity_round_trips() -> TestResult {
    let d = Device::get(0)?;
    let name = d.name()?;
    ensure!(!name.is_empty() && name.is_ascii(), "name {name:?}");
    let uuid = d.uuid()?;
    ensure!(uuid.0 != [0; 16], "all-zero UUID");
    ensure_eq!(Device::by_uuid(&uuid)?, d);
    let pci = d.pci_bus_id()?;
    ensure!(pci.contains(':') && pci.contains('.'), "PCI bus id {pci}");
    ensure_eq!(Device::by_pci_bus_id(&pci)?, d);
    ensure!(Device::by_pci_bus_id("not a bus id").is_err(), "a garbage bus id was accepted");
    ensure!(Device::by_uuid(&Uuid([0xAB; 16])).is_err(), "an unknown UUID was found");
    // The PCI attributes agree with the bus id string, which is `domain:bus:device.function` in hex.
    let bus = u32::from_str_radix(pci.split(':').nth(1).unwrap_or(""), 16)?;
    ensure_eq!(i64::from(bus), i64::from(d.pci_bus_number()?));
    Ok(())
}

fn typed_attributes_match_raw_ones() -> TestResult {
    let d = Device::get(0)?;
    use sys::CUdevice_attribute as A;
    ensure_eq!(d.warp_size()?, 32);
    ensure_eq!(d.multiprocessor_count()?, d.attribute(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?);
    ensure!(d.multiprocessor_count()? > 0, "no SMs");
    let (major, minor) = d.compute_capability()?;
    let mut raw_major = 0;
    let mut raw_minor = 0;
    // SAFETY: two out-parameters.
    cuda_tests::drv("cuDeviceComputeCapability", unsafe {
        sys::cuDeviceComputeCapability(&mut raw_major, &mut raw_minor, d.as_raw())
    })?;
    ensure_eq!((major, minor), (raw_major, raw_minor));
    ensure!(major >= 5, "compute capability {major}.{minor}");
    ensure!(d.max_threads_per_block()? >= 512, "max threads per block");
    ensure!(d.unified_addressing()?, "64-bit Linux devices have unified addressing");
    ensure!(d.managed_memory()?, "managed memory");
    Ok(())
}

fn every_attribute_answers_or_is_refused() -> TestResult {
    let d = Device::get(0)?;
    let mut answered = 0;
    for raw in 1..sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX.0 {
        match d.attribute(sys::CUdevice_attribute(raw)) {
            Ok(_) => answered += 1,
            Err(Error::Driver { status, .. }) => {
                ensure_eq!(status, sys::CUresult::CUDA_ERROR_INVALID_VALUE);
            }
            Err(e) => return Err(format!("attribute {raw}: {e}").into()),
        }
    }
    ensure!(answered > 100, "only {answered} attributes answered");
    Ok(())
}

fn memory_sizes_and_pools() -> TestResult {
    let d = Device::get(0)?;
    let total = d.total_memory()?;
    ensure!(total > 1 << 30, "total memory {total}");
    let ctx = Context::primary(&d)?;
    let (free, total_ctx) = ctx.memory_info()?;
    ensure_eq!(total_ctx, total);
    ensure!(free <= total && free > 0, "free {free} total {total}");
    if d.memory_pools_supported()? {
        let pool = d.default_memory_pool()?;
        ensure!(!pool.is_null(), "null default pool");
        ensure_eq!(d.memory_pool()?, pool);
    }
    Ok(())
}

fn uuid_prints_like_nvidia_smi() -> TestResult {
    let u = Uuid([0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0, 1, 2, 3, 4, 5, 6, 7]);
    ensure_eq!(u.to_string(), "GPU-01234567-89ab-cdef-0001-020304050607");
    Ok(())
}

/// A closure registered for the device's async notifications (CUDA 12.4) is unregistered
/// cleanly, by `unregister` and by drop, and a second registration at the same time is
/// independent. Over-budget notifications need memory pressure, so the closure is not expected
/// to run; what it received is printed. A driver without the call is an `Error::Load`, a
/// device or platform without notifications the driver's CUDA_ERROR_NOT_SUPPORTED.
fn async_notifications_register_and_unregister() -> TestResult {
    use cuhost::device::AsyncNotification;
    use std::sync::{Arc, Mutex};
    let device = Device::get(0)?;
    let _ctx = Context::primary(&device)?;
    let seen: Arc<Mutex<Vec<AsyncNotification>>> = Arc::default();
    let sink = Arc::clone(&seen);
    let first = match device.register_async_notification(move |n| {
        if let Ok(mut v) = sink.lock() {
            v.push(n);
        }
    }) {
        Ok(first) => first,
        Err(Error::Load { .. }) => {
            ensure!(driver_version()? < 12040, "the call is missing from a {} driver", driver_version()?);
            println!("driver {} has no async notifications: Error::Load", driver_version()?);
            return Ok(());
        }
        Err(e) if e.driver_status() == Some(sys::CUresult::CUDA_ERROR_NOT_SUPPORTED) => {
            println!("async notifications are not supported here: {e}");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    ensure_eq!(first.device(), device);
    ensure!(!first.as_raw().is_null(), "a null callback handle");
    let second = device.register_async_notification(|_| {})?;
    ensure!(first.as_raw() != second.as_raw(), "two registrations share a handle");
    drop(second);
    ensure!(first.take_panic().is_none(), "no panic was raised");
    first.unregister()?;
    ensure_eq!(Arc::strong_count(&seen), 1, "unregistering frees the closure and what it captured");
    println!("notifications received: {:?}", seen.lock().map(|v| v.clone()).unwrap_or_default());
    // The registry is clean: a new registration after both are gone works.
    device.register_async_notification(|_| {})?.unregister()?;
    Ok(())
}
