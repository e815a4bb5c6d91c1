//! `cuhost::green`: a device's SMs split into groups, a green context per group whose
//! streams run kernels on that group's SMs only, what the driver reports of them, what keeps a
//! green context alive, its events and its context; and the stream and context queries of the
//! same issue (`Stream::device`, `Stream::context_raw`, `Context::record_event` and `wait_event`).

#[path = "kernels/mod.rs"]
mod kernels;

use cuda_tests::{TestResult, ensure, ensure_eq, gpu};
use cuhost::device::driver_version;
use cuhost::green::{GreenContext, SmResource, SplitFlags};
use cuhost::{
    Context, Device, DeviceBuffer, Error, Event, EventFlags, LaunchConfig, Module, Stream, StreamFlags,
};
use std::collections::BTreeSet;

fn main() {
    #[allow(unused_mut)]
    let mut tests = vec![
        gpu("device_sms_split_into_groups_and_a_remainder", device_sms_split_into_groups_and_a_remainder),
        gpu("green_contexts_run_kernels_on_their_own_sms", green_contexts_run_kernels_on_their_own_sms),
        gpu(
            "green_context_as_a_context_allocates_on_its_sms",
            green_context_as_a_context_allocates_on_its_sms,
        ),
        gpu(
            "streams_and_contexts_keep_their_green_context_alive",
            streams_and_contexts_keep_their_green_context_alive,
        ),
        gpu("events_order_green_contexts_and_contexts", events_order_green_contexts_and_contexts),
        gpu("a_stream_reports_its_device_and_context", a_stream_reports_its_device_and_context),
    ];
    #[cfg(cuda_headers_13_1)]
    tests.push(gpu(
        "structured_split_and_workqueue_configuration",
        since_13_1::structured_split_and_workqueue_configuration,
    ));
    cuda_tests::run(&tests);
}

/// `record_smid(u32* out)`: block `b` writes the id of the SM it runs on to `out[b]`.
const SMID_PTX: &str = r#"
.version 8.0
.target sm_70
.address_size 64

.visible .entry record_smid(
    .param .u64 record_smid_out
)
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [record_smid_out];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %smid;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r2;
    ret;
}
"#;

/// Whether the installed driver is at least `version` (e.g. 12050 for 12.5).
fn driver_at_least(version: i32) -> Result<bool, Error> {
    Ok(driver_version()? >= version)
}

/// The check on a call of a function the driver lacks: a load error naming `call`.
fn too_old<T: std::fmt::Debug>(result: Result<T, Error>, call: &str) -> TestResult {
    match result {
        Err(e @ Error::Load { .. }) => {
            ensure_eq!(e.call(), Some(call));
            Ok(())
        }
        other => Err(format!("expected a load error naming {call} on this driver, got {other:?}").into()),
    }
}

/// The SM count groups are asked for: 8, or the device's smallest group where that is larger.
fn group_size(all: &SmResource) -> u32 {
    all.min_partition_size().max(8)
}

/// Device 0, its SMs, and their split into groups of `group_size`; `None` on a driver without
/// green contexts (before 12.5, whose streams this file uses), after checking the typed error.
fn split_device() -> Result<Option<(Device, SmResource, Vec<SmResource>)>, cuda_tests::Failed> {
    let device = Device::get(0)?;
    if !driver_at_least(12040)? {
        too_old(SmResource::of_device(&device), "cuDeviceGetDevResource")?;
        return Ok(None);
    }
    let all = SmResource::of_device(&device)?;
    let split = all.split_by_count(group_size(&all), SplitFlags::empty())?;
    if !driver_at_least(12050)? {
        let green = GreenContext::from_sms(&split.groups[0])?;
        too_old(green.stream(), "cuGreenCtxStreamCreate")?;
        return Ok(None);
    }
    Ok(Some((device, all, split.groups)))
}

/// What the driver reports of a device's SMs and of their split, and the splits refused before
/// any call.
fn device_sms_split_into_groups_and_a_remainder() -> TestResult {
    let device = Device::get(0)?;
    if !driver_at_least(12040)? {
        return too_old(SmResource::of_device(&device), "cuDeviceGetDevResource");
    }
    let all = SmResource::of_device(&device)?;
    ensure_eq!(i64::from(all.sm_count()), i64::from(device.multiprocessor_count()?));
    ensure_eq!(all.device(), device);
    ensure!(all.min_partition_size() >= 1, "{all:?}");
    ensure!(all.coscheduled_alignment() >= 1, "{all:?}");
    let ctx = Context::primary(&device)?;
    ensure_eq!(SmResource::of_context(&ctx)?.sm_count(), all.sm_count());

    let size = group_size(&all);
    let split = all.split_by_count(size, SplitFlags::empty())?;
    ensure!(!split.groups.is_empty(), "no group of {size} SMs from {all:?}");
    let mut used = 0;
    for group in &split.groups {
        ensure!(group.sm_count() >= size, "a group smaller than asked: {group:?}");
        ensure_eq!(group.sm_count() % all.coscheduled_alignment(), 0, "{group:?} of {all:?}");
        ensure_eq!(group.device(), device);
        used += group.sm_count();
    }
    let left = split.remainder.map_or(0, |r| r.sm_count());
    ensure!(
        used + left <= all.sm_count(),
        "{used} SMs in groups and {left} left over, of {}",
        all.sm_count()
    );
    ensure!(
        u64::from(size) * split.groups.len() as u64 <= u64::from(all.sm_count()),
        "{} groups of {size} SMs from {} SMs",
        split.groups.len(),
        all.sm_count()
    );

    // Refused before any call.
    match all.split_by_count(all.sm_count() + 1, SplitFlags::empty()) {
        Err(Error::InvalidArgument { .. }) => {}
        other => return Err(format!("a split larger than the device gave {other:?}").into()),
    }
    match GreenContext::create(&[]) {
        Err(Error::InvalidArgument { .. }) => {}
        other => return Err(format!("a green context of nothing gave {other:?}").into()),
    }
    Ok(())
}

/// Each group's green context: what the driver reports of it and of its stream, a kernel's
/// results read back, and the SMs its blocks ran on (within the group's count, and none shared
/// with another group's green context).
fn green_contexts_run_kernels_on_their_own_sms() -> TestResult {
    let Some((device, all, groups)) = split_device()? else { return Ok(()) };
    let primary = Context::primary(&device)?;
    let module = Module::from_ptx(&primary, kernels::PTX)?;
    let saxpy = module.function("saxpy")?;
    let smid_module = Module::from_ptx(&primary, SMID_PTX)?;
    let record_smid = smid_module.function("record_smid")?;
    let blocks = all.sm_count() * 8;

    let mut seen: Vec<BTreeSet<u32>> = Vec::new();
    let mut ids = BTreeSet::new();
    for group in groups.iter().take(4) {
        let green = GreenContext::from_sms(group)?;
        ensure!(green.is_owned(), "a created green context is not owned");
        ensure_eq!(green.device(), device);
        ensure_eq!(green.primary_context(), &primary);
        ensure_eq!(green.sm_resource()?.sm_count(), group.sm_count());
        if driver_at_least(12090)? {
            ensure!(ids.insert(green.id()?), "two green contexts share an id");
        } else {
            too_old(green.id(), "cuGreenCtxGetId")?;
        }

        let stream = green.stream()?;
        ensure!(
            stream.is_owned() && !stream.is_default(),
            "a green context's stream is not an owned created stream"
        );
        ensure_eq!(stream.context(), &primary);
        ensure_eq!(stream.green_context()?, Some(green.clone()));
        ensure!(stream.flags()?.contains(StreamFlags::NON_BLOCKING), "{:?}", stream.flags()?);

        // Memory of the primary context, used on the green context's stream.
        let n = 50_000u32;
        let x = DeviceBuffer::from_slice(&stream, &(0..n).map(|i| i as f32).collect::<Vec<_>>())?;
        let mut y = DeviceBuffer::from_slice(&stream, &vec![1.0f32; n as usize])?;
        let a = 3.0f32;
        // SAFETY: saxpy takes (u32, f32, f32*, f32*); x and y hold n floats; the stream's context
        // is the module's.
        unsafe { saxpy.launch(&stream, &LaunchConfig::for_elements(n, 256), (&n, &a, &x, &mut y))? };
        let expected: Vec<f32> = (0..n).map(|i| a * i as f32 + 1.0).collect();
        ensure_eq!(y.to_vec()?, expected);

        let mut out = DeviceBuffer::<u32>::zeroed(&stream, blocks as usize)?;
        // SAFETY: record_smid takes (u32*) and block b writes out[b]; `out` holds one word per block.
        unsafe { record_smid.launch(&stream, &LaunchConfig::new(blocks, 1), (&mut out,))? };
        let sms: BTreeSet<u32> = out.to_vec()?.into_iter().collect();
        ensure!(
            sms.len() <= group.sm_count() as usize,
            "blocks of a green context of {} SMs ran on {} SMs: {sms:?}",
            group.sm_count(),
            sms.len()
        );
        for (i, other) in seen.iter().enumerate() {
            ensure!(
                sms.is_disjoint(other),
                "green contexts {i} and {} ran blocks on the same SMs",
                seen.len()
            );
        }
        seen.push(sms);
    }
    cuda_tests::no_deferred(&primary)
}

/// The green context's own context: what the driver reports of it, a buffer allocated and read
/// back through a stream made in it, and the same green context from every side.
fn green_context_as_a_context_allocates_on_its_sms() -> TestResult {
    let Some((device, _all, groups)) = split_device()? else { return Ok(()) };
    let primary = Context::primary(&device)?;
    let green = GreenContext::from_sms(&groups[0])?;
    // SAFETY: the context and everything made in it are used on this thread only.
    let ctx = unsafe { green.context() };
    ensure!(ctx.as_raw() != primary.as_raw(), "the green context's context is the primary context's handle");
    ensure!(!ctx.is_primary(), "the green context's context claims to be primary");
    ensure_eq!(ctx.device(), device);
    ensure_eq!(ctx.green_context(), Some(green.clone()));
    ensure_eq!(primary.green_context(), None);
    // SAFETY: as above.
    ensure_eq!(unsafe { green.context() }, ctx);
    ensure_eq!(SmResource::of_context(&ctx)?.sm_count(), groups[0].sm_count());
    {
        let guard = ctx.push()?;
        ensure_eq!(guard.context(), &ctx);
        let current = Context::current()?.ok_or("no current context under the guard")?;
        ensure_eq!(current, ctx);
        ensure_eq!(current.green_context(), Some(green.clone()));

        let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
        ensure_eq!(stream.green_context()?, Some(green.clone()));
        ensure_eq!(stream.context_raw()?, ctx.as_raw());
        let data: Vec<u32> = (0..4096).map(|i| i * 3 + 1).collect();
        let buffer = DeviceBuffer::from_slice(&stream, &data)?;
        ensure_eq!(buffer.to_vec()?, data);
        let (free, total) = ctx.memory_info()?;
        ensure!(free <= total && total > 0, "memory info {free} of {total}");
        // Its default stream is the green context's too.
        ensure_eq!(Stream::legacy(&ctx).green_context()?, Some(green.clone()));
        drop(buffer);
        stream.synchronize()?;
    }
    // A green context's stream names the green context's context as its own to the driver.
    let green_stream = green.stream()?;
    ensure_eq!(green_stream.context_raw()?, ctx.as_raw());
    cuda_tests::no_deferred(&ctx)?;
    cuda_tests::no_deferred(&primary)
}

/// A stream, and the green context's context, work after the last `GreenContext` value is
/// dropped: they hold the green context, which goes only with the last of them.
fn streams_and_contexts_keep_their_green_context_alive() -> TestResult {
    let Some((device, _all, groups)) = split_device()? else { return Ok(()) };
    let primary = Context::primary(&device)?;
    let green = GreenContext::from_sms(&groups[0])?;
    let raw = green.as_raw();
    let stream = green.stream()?;
    // SAFETY: the context and everything made in it are used on this thread only.
    let ctx = unsafe { green.context() };
    drop(green);

    let data: Vec<u32> = (0..1024).collect();
    let buffer = DeviceBuffer::from_slice(&stream, &data)?;
    ensure_eq!(buffer.to_vec()?, data);
    let back = stream.green_context()?.ok_or("the stream lost its green context")?;
    ensure_eq!(back.as_raw(), raw);
    ensure_eq!(back.sm_resource()?.sm_count(), groups[0].sm_count());
    drop(back);
    drop(buffer);
    drop(stream);

    // The context alone still holds it.
    {
        let _guard = ctx.push()?;
        let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
        cuda_tests::still_usable(&stream)?;
        ensure_eq!(stream.green_context()?.map(|g| g.as_raw()), Some(raw));
    }
    drop(ctx);
    cuda_tests::no_deferred(&primary)
}

/// Events recorded on a green context and on a context, and waited for by a green context and
/// a context; the work before the record is done when the event is.
fn events_order_green_contexts_and_contexts() -> TestResult {
    let Some((device, _all, groups)) = split_device()? else { return Ok(()) };
    let primary = Context::primary(&device)?;
    let first = GreenContext::from_sms(&groups[0])?;
    let second = GreenContext::from_sms(groups.get(1).unwrap_or(&groups[0]))?;
    let stream = first.stream()?;
    let data: Vec<u32> = (0..1 << 20).collect();
    let buffer = DeviceBuffer::from_slice(&stream, &data)?;

    let event = Event::new(&primary, EventFlags::DISABLE_TIMING)?;
    first.record_event(&event)?;
    second.wait_event(&event)?;
    event.synchronize()?;
    ensure!(event.query()?, "the event is not complete after its synchronize");
    ensure!(stream.query()?, "the work recorded before the event is not done");

    if driver_at_least(12050)? {
        let ctx_event = Event::new(&primary, EventFlags::DISABLE_TIMING)?;
        primary.record_event(&ctx_event)?;
        primary.wait_event(&ctx_event)?;
        ctx_event.synchronize()?;
        // An event of another context is refused by the driver.
        let other = Context::create(&device, cuhost::ContextFlags::empty())?;
        let foreign = Event::new(&other, EventFlags::DISABLE_TIMING)?;
        ensure!(primary.record_event(&foreign).is_err(), "an event of another context was recorded");
        // Waiting on an event of another context is allowed.
        primary.wait_event(&foreign)?;
    } else {
        too_old(primary.record_event(&event), "cuCtxRecordEvent")?;
    }
    ensure_eq!(buffer.to_vec()?, data);
    cuda_tests::no_deferred(&primary)
}

/// `Stream::device` and `Stream::context_raw` on created and default streams of an ordinary
/// context, which belong to no green context.
fn a_stream_reports_its_device_and_context() -> TestResult {
    let (device, ctx, stream) = cuda_tests::device_zero()?;
    let legacy = Stream::legacy(&ctx);
    for s in [&stream, &legacy] {
        ensure_eq!(s.context_raw()?, ctx.as_raw());
        if driver_at_least(12080)? {
            ensure_eq!(s.device()?, device);
        } else {
            too_old(s.device(), "cuStreamGetDevice")?;
        }
        if driver_at_least(12040)? {
            ensure_eq!(s.green_context()?, None);
        }
    }
    // A default stream names its own context's stream, whichever context is current.
    let other = Context::create(&device, cuhost::ContextFlags::empty())?;
    let other_legacy = Stream::legacy(&other);
    ctx.bind_to_thread()?;
    ensure_eq!(other_legacy.context_raw()?, other.as_raw());
    Ok(())
}

#[cfg(cuda_headers_13_1)]
mod since_13_1 {
    use super::{driver_at_least, too_old};
    use cuda_tests::{TestResult, ensure, ensure_eq};
    use cuhost::Device;
    use cuhost::green::{GreenContext, Resource, SmGroupParams, SmResource, WorkqueueConfig, WorkqueueScope};

    /// Groups of different sizes (`cuDevSmResourceSplit`), and a green context made of a group
    /// and a workqueue configuration, which it reports back.
    pub fn structured_split_and_workqueue_configuration() -> TestResult {
        let device = Device::get(0)?;
        let all = SmResource::of_device(&device)?;
        let first = 2 * all.coscheduled_alignment();
        let params = [SmGroupParams { sm_count: first, ..Default::default() }, SmGroupParams::default()];
        if !driver_at_least(13010)? {
            return too_old(all.split(&params), "cuDevSmResourceSplit");
        }
        ensure!(all.sm_count() > first, "too few SMs ({}) for the test", all.sm_count());
        let split = all.split(&params)?;
        ensure_eq!(split.groups.len(), 2);
        ensure_eq!(split.groups[0].sm_count(), first);
        ensure!(split.groups[1].sm_count() > 0, "{:?}", split.groups[1]);
        ensure!(
            split.groups[0].sm_count() + split.groups[1].sm_count() <= all.sm_count(),
            "{split:?} of {all:?}"
        );

        let mut queues = WorkqueueConfig::of_device(&device)?;
        ensure_eq!(queues.device, device);
        ensure!(queues.concurrency_limit >= 1, "{queues:?}");
        queues.concurrency_limit = 2;
        queues.scope = WorkqueueScope::GreenContextBalanced;
        let green =
            GreenContext::create(&[Resource::Sm(split.groups[0]), Resource::WorkqueueConfig(queues)])?;
        ensure_eq!(green.sm_resource()?.sm_count(), first);
        let back = green.workqueue_config()?;
        ensure_eq!(back.scope, WorkqueueScope::GreenContextBalanced);
        ensure_eq!(back.concurrency_limit, 2);
        cuda_tests::still_usable(&green.stream()?)
    }
}
