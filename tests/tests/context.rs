//! `cuhost::context`: the primary context, created contexts, the current-context guard,
//! settings, and errors kept from `Drop`.

use cuda_tests::{TestResult, ensure, ensure_eq, gpu};
use cuhost::alloc::{DeviceAllocation, DeviceAllocator};
use cuhost::context::{CacheConfig, ExecAffinity, Limit};
use cuhost::memory::pointer_attributes;
use cuhost::{Context, ContextFlags, Device, DeviceBuffer, Error, Stream, StreamFlags};
use cuhost_driver_sys as sys;
use std::sync::Arc;

fn main() {
    cuda_tests::run(&[
        gpu("primary_context_is_retained_and_active", primary_context_is_retained_and_active),
        gpu("bind_to_thread_makes_it_current", bind_to_thread_makes_it_current),
        gpu("guard_restores_the_previous_context", guard_restores_the_previous_context),
        gpu("guard_restores_on_early_error_return", guard_restores_on_early_error_return),
        gpu("created_context_owns_its_memory", created_context_owns_its_memory),
        gpu("limits_round_trip", limits_round_trip),
        gpu("cache_config_and_priorities", cache_config_and_priorities),
        gpu("version_id_flags_affinity", version_id_flags_affinity),
        gpu(
            "affinity_contexts_where_the_device_supports_them",
            affinity_contexts_where_the_device_supports_them,
        ),
        gpu("drop_errors_are_kept_and_reported_once", drop_errors_are_kept_and_reported_once),
        gpu("primary_flags_round_trip", primary_flags_round_trip),
        gpu("flush_gpu_direct_rdma_writes_follows_support", flush_gpu_direct_rdma_writes_follows_support),
        gpu("dropping_the_last_primary_retain_unbinds_it", dropping_the_last_primary_retain_unbinds_it),
    ]);
}

fn current_raw() -> Result<sys::CUcontext, String> {
    let mut c = std::ptr::null_mut();
    // SAFETY: one out-parameter.
    let s = unsafe { sys::cuCtxGetCurrent(&mut c) };
    if s != sys::CUresult::CUDA_SUCCESS {
        return Err(format!("cuCtxGetCurrent: {s:?}"));
    }
    Ok(c)
}

fn primary_context_is_retained_and_active() -> TestResult {
    let d = Device::get(0)?;
    let ctx = Context::primary(&d)?;
    ensure!(ctx.is_primary(), "not primary");
    ensure_eq!(ctx.device(), d);
    ensure!(Context::primary_state(&d)?.active, "primary context inactive while retained");
    // A second retain gives the same context.
    let again = Context::primary(&d)?;
    ensure_eq!(again.as_raw(), ctx.as_raw());
    Ok(())
}

fn bind_to_thread_makes_it_current() -> TestResult {
    let ctx = Context::primary(&Device::get(0)?)?;
    ctx.bind_to_thread()?;
    ensure_eq!(current_raw()?, ctx.as_raw());
    let current = Context::current()?.ok_or("no current context")?;
    ensure_eq!(current, ctx);
    // The value `current` hands out is the held primary context itself, which it keeps alive.
    ensure!(current.is_primary(), "the current context came back without the retain that keeps it alive");
    Ok(())
}

fn guard_restores_the_previous_context() -> TestResult {
    let d = Device::get(0)?;
    let primary = Context::primary(&d)?;
    primary.bind_to_thread()?;
    let created = Context::create(&d, ContextFlags::SCHED_BLOCKING_SYNC)?;
    // Creating does not change the current context.
    ensure_eq!(current_raw()?, primary.as_raw());
    {
        let guard = created.push()?;
        ensure_eq!(current_raw()?, created.as_raw());
        ensure_eq!(guard.context().as_raw(), created.as_raw());
    }
    ensure_eq!(current_raw()?, primary.as_raw());
    ensure!(created.take_deferred_errors().is_empty(), "the guard's pop failed");
    Ok(())
}

fn guard_restores_on_early_error_return() -> TestResult {
    let d = Device::get(0)?;
    let primary = Context::primary(&d)?;
    primary.bind_to_thread()?;
    let created = Context::create(&d, ContextFlags::empty())?;
    fn fails_while_pushed(ctx: &Context) -> Result<(), Error> {
        let _guard = ctx.push()?;
        let stream = Stream::new(ctx, StreamFlags::NON_BLOCKING)?;
        DeviceBuffer::<u32>::new(&stream, 0)?;
        Ok(())
    }
    ensure!(fails_while_pushed(&created).is_err(), "a zero-length allocation succeeded");
    ensure_eq!(current_raw()?, primary.as_raw());
    Ok(())
}

fn created_context_owns_its_memory() -> TestResult {
    let d = Device::get(0)?;
    let primary = Context::primary(&d)?;
    let created = Context::create(&d, ContextFlags::empty())?;
    ensure!(!created.is_primary(), "created context claims to be primary");
    ensure!(created.as_raw() != primary.as_raw(), "created context is the primary one");
    let a = DeviceBuffer::<u32>::from_slice(&Stream::new(&created, StreamFlags::NON_BLOCKING)?, &[1, 2, 3])?;
    let b = DeviceBuffer::<u32>::from_slice(&Stream::new(&primary, StreamFlags::NON_BLOCKING)?, &[4, 5, 6])?;
    ensure!(a.context() == &created && b.context() == &primary, "buffers in the wrong contexts");
    ensure_eq!(pointer_attributes(a.as_raw())?.context, created.as_raw());
    ensure_eq!(pointer_attributes(b.as_raw())?.context, primary.as_raw());
    ensure_eq!(a.to_vec()?, vec![1, 2, 3]);
    ensure_eq!(b.to_vec()?, vec![4, 5, 6]);
    created.synchronize()?;
    Ok(())
}

fn limits_round_trip() -> TestResult {
    let ctx = Context::primary(&Device::get(0)?)?;
    ctx.set_limit(Limit::StackSize, 4096)?;
    ensure!(ctx.limit(Limit::StackSize)? >= 4096, "stack size {}", ctx.limit(Limit::StackSize)?);
    ctx.set_limit(Limit::PrintfFifoSize, 2 << 20)?;
    ensure_eq!(ctx.limit(Limit::PrintfFifoSize)?, 2 << 20);
    ctx.set_limit(Limit::MallocHeapSize, 16 << 20)?;
    ensure_eq!(ctx.limit(Limit::MallocHeapSize)?, 16 << 20);
    ensure_eq!(Limit::try_from(sys::CUlimit::CU_LIMIT_STACK_SIZE)?, Limit::StackSize);
    ensure!(Limit::try_from(sys::CUlimit(999)).is_err(), "unknown limit converted");
    Ok(())
}

fn cache_config_and_priorities() -> TestResult {
    let ctx = Context::primary(&Device::get(0)?)?;
    ctx.set_cache_config(CacheConfig::PreferShared)?;
    ensure_eq!(ctx.cache_config()?, CacheConfig::PreferShared);
    ctx.set_cache_config(CacheConfig::PreferNone)?;
    ensure_eq!(ctx.cache_config()?, CacheConfig::PreferNone);
    let (least, greatest) = ctx.stream_priority_range()?;
    ensure!(greatest <= least, "priority range ({least}, {greatest})");
    Ok(())
}

fn version_id_flags_affinity() -> TestResult {
    let d = Device::get(0)?;
    let ctx = Context::primary(&d)?;
    ensure!(ctx.api_version()? >= 3020, "api version {}", ctx.api_version()?);
    let created = Context::create(&d, ContextFlags::SCHED_YIELD)?;
    ensure!(created.id()? != ctx.id()?, "two contexts share an id");
    ensure!(created.flags()?.contains(ContextFlags::SCHED_YIELD), "flags {:?}", created.flags()?);
    created.set_flags(ContextFlags::SCHED_SPIN)?;
    ensure!(created.flags()?.contains(ContextFlags::SCHED_SPIN), "flags {:?}", created.flags()?);
    let ExecAffinity::SmCount(sms) = ctx.exec_affinity()?;
    ensure_eq!(i64::from(sms), i64::from(d.multiprocessor_count()?));
    Ok(())
}

fn affinity_contexts_where_the_device_supports_them() -> TestResult {
    let d = Device::get(0)?;
    let sms = u32::try_from(d.multiprocessor_count()?).map_err(|e| e.to_string())?;
    let half = ExecAffinity::SmCount((sms / 2).max(1));
    let created = Context::create_with_affinity(&d, ContextFlags::empty(), half);
    if d.exec_affinity_supported()? {
        let ctx = created?;
        let ExecAffinity::SmCount(granted) = ctx.exec_affinity()?;
        ensure!(granted >= sms / 2 && granted < sms, "asked for {half:?} of {sms}, granted {granted}");
    } else {
        match created {
            Err(Error::Driver { status, .. }) => {
                ensure_eq!(status, sys::CUresult::CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY)
            }
            other => return Err(format!("affinity without support: {other:?}").into()),
        }
    }
    Ok(())
}

fn drop_errors_are_kept_and_reported_once() -> TestResult {
    let ctx = Context::primary(&Device::get(0)?)?;
    ctx.synchronize()?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    // A buffer adopting an address that was never allocated, as plain cuMemAlloc memory:
    // freeing it fails in `Drop`.
    let never_allocated = DeviceAllocation { ptr: 0x1000, size: 4, token: 0 };
    // SAFETY: the address is never read or written; only the free (cuMemFree) is attempted.
    let bogus = unsafe {
        DeviceBuffer::<u32>::from_allocation(
            &stream,
            Arc::new(DeviceAllocator::new(&ctx)),
            never_allocated,
            1,
        )?
    };
    drop(bogus);
    let kept = ctx.deferred_error().ok_or("the free error was not kept")?;
    ensure_eq!(kept.call(), Some("cuMemFree"));
    // It names what was dropped and the line of this test that made it.
    match &kept {
        Error::Dropped { what, made_at: Some(at), .. } => {
            ensure_eq!(*what, "DeviceBuffer");
            ensure!(at.file().ends_with("context.rs") && at.line() > 170, "made at {at}");
        }
        other => return Err(format!("the kept error does not say what was dropped: {other:?}").into()),
    }
    let text = kept.to_string();
    ensure!(text.contains("dropping the DeviceBuffer made at") && text.contains("context.rs"), "{text}");
    // The next call through the context reports it, once; the one after works.
    match ctx.synchronize() {
        Err(e) => ensure_eq!(e, kept),
        Ok(()) => return Err("the kept error was not reported".into()),
    }
    ctx.synchronize()?;
    ensure!(ctx.take_deferred_errors().is_empty(), "the error was reported twice");
    Ok(())
}

fn primary_flags_round_trip() -> TestResult {
    let d = Device::get(0)?;
    Context::set_primary_flags(&d, ContextFlags::SCHED_BLOCKING_SYNC)?;
    let state = Context::primary_state(&d)?;
    ensure!(state.flags.contains(ContextFlags::SCHED_BLOCKING_SYNC), "flags {:?}", state.flags);
    let ctx = Context::primary(&d)?;
    ensure!(Context::primary_state(&d)?.active, "retained primary context inactive");
    ensure!(ctx.flags()?.contains(ContextFlags::SCHED_BLOCKING_SYNC), "flags {:?}", ctx.flags()?);
    Ok(())
}

fn flush_gpu_direct_rdma_writes_follows_support() -> TestResult {
    use cuhost::device::{FlushGpuDirectRdmaWritesScope, flush_gpu_direct_rdma_writes};
    let d = Device::get(0)?;
    let ctx = Context::primary(&d)?;
    ctx.bind_to_thread()?;
    let options = d.gpu_direct_rdma_flush_writes_options()?;
    let r = flush_gpu_direct_rdma_writes(FlushGpuDirectRdmaWritesScope::ToOwner);
    if options & 1 != 0 {
        r?;
    } else {
        ensure!(r.is_err(), "flush succeeded on a device that reports no support");
    }
    Ok(())
}

fn dropping_the_last_primary_retain_unbinds_it() -> TestResult {
    let d = Device::get(0)?;
    let raw = {
        let ctx = Context::primary(&d)?;
        ctx.bind_to_thread()?;
        ensure_eq!(current_raw()?, ctx.as_raw());
        ctx.as_raw()
    };
    let (mut flags, mut active) = (0u32, 0i32);
    // SAFETY: out-parameters are live locals.
    let s = unsafe { sys::cuDevicePrimaryCtxGetState(d.as_raw(), &mut flags, &mut active) };
    ensure_eq!(s, sys::CUresult::CUDA_SUCCESS);
    // Either someone else still holds the primary context (then it may stay current), or it was
    // destroyed and must not be left current on this thread.
    if active == 0 {
        ensure!(current_raw()?.is_null(), "a destroyed primary context was left current");
    } else {
        ensure_eq!(current_raw()?, raw);
    }
    // And a fresh retain works on this thread right away.
    let ctx = Context::primary(&d)?;
    ctx.bind_to_thread()?;
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let mut buf = DeviceBuffer::<u32>::zeroed(&stream, 16)?;
    ensure_eq!(buf.to_vec()?, vec![0u32; 16]);
    buf.copy_from(&[9u32; 16])?;
    let mut back = [0u32; 16];
    buf.copy_to(&mut back)?;
    ensure_eq!(back, [9u32; 16]);
    Ok(())
}
