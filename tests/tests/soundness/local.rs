//! Soundness regressions (see the parent module): handles that must not outlive, or alias, what
//! they came from: the current context and pool (G3, G4), globals (F11), VMM memory that a buffer
//! owns (F13), pitched buffers used on another stream (F8's type).

use crate::kernels;
use cuda_tests::{Test, TestResult, device_zero, drv, ensure, ensure_eq, gpu, no_deferred, still_usable};
use cuhost::driver_sys as sys;
use cuhost::memory::PitchedBuffer;
use cuhost::mempool::{MemPool, MemPoolProps};
use cuhost::module::{JitOptions, Library, Module};
use cuhost::vmm::{AddressRange, GrowableBuffer, VmmAllocator};
use cuhost::{Context, ContextFlags, Device, DeviceBuffer, Error, Stream, StreamFlags};
use std::sync::Arc;

/// The tests of this module.
pub const TESTS: &[Test] = &[
    gpu("current_context_outlives_its_creator", current_context_outlives_its_creator),
    gpu("current_context_shares_deferred_errors", current_context_shares_deferred_errors),
    gpu("foreign_primary_context_is_retained_by_current", foreign_primary_context_is_retained_by_current),
    gpu("foreign_created_context_is_refused_by_current", foreign_created_context_is_refused_by_current),
    gpu("current_pool_stays_alive_while_current", current_pool_stays_alive_while_current),
    gpu("foreign_current_pool_is_refused", foreign_current_pool_is_refused),
    gpu("a_global_is_handed_out_once_at_a_time", a_global_is_handed_out_once_at_a_time),
    gpu(
        "dropping_a_global_waits_for_work_through_its_views",
        dropping_a_global_waits_for_work_through_its_views,
    ),
    gpu("buffer_owned_vmm_memory_cannot_be_mapped_again", buffer_owned_vmm_memory_cannot_be_mapped_again),
    gpu("pitched_async_work_on_another_stream_is_recorded", pitched_async_work_on_another_stream_is_recorded),
];

/// G4: `Context::current()` of a created context, whose creating value is then dropped, is still
/// a live context. Before the fix it was a borrowed alias: the drop ran `cuCtxDestroy`, and the
/// stream made through the alias failed (or landed in a new context that reused the handle).
fn current_context_outlives_its_creator() -> TestResult {
    let device = Device::get(0)?;
    let owned = Context::create(&device, ContextFlags::empty())?;
    owned.bind_to_thread()?;
    let current = Context::current()?.ok_or("no context current after bind_to_thread")?;
    ensure_eq!(current.as_raw(), owned.as_raw());
    drop(owned);
    // The context must still exist: the value from `current()` holds it.
    let stream = Stream::new(&current, StreamFlags::NON_BLOCKING)?;
    still_usable(&stream)?;
    let again = Context::current()?.ok_or("the context is no longer current")?;
    ensure_eq!(again.as_raw(), current.as_raw(), "the context current on this thread changed");
    drop((stream, again));
    no_deferred(&current)?;
    drop(current);
    // The last holder destroyed it (cuCtxDestroy unbinds it from this thread).
    ensure!(Context::current()?.is_none(), "a destroyed context is still current");
    Ok(())
}

/// G4: the value `current()` gives is the same context value as its creator's, so errors kept
/// in one are seen through the other. Before the fix the alias had its own list: an error from a
/// callback on a stream of the alias never reached the creator.
// The panic is the point: it is caught and kept as the context's deferred error.
#[allow(clippy::panic)]
fn current_context_shares_deferred_errors() -> TestResult {
    let device = Device::get(0)?;
    let owned = Context::create(&device, ContextFlags::empty())?;
    owned.bind_to_thread()?;
    let current = Context::current()?.ok_or("no context current after bind_to_thread")?;
    let stream = Stream::new(&current, StreamFlags::NON_BLOCKING)?;
    stream.launch_host_func(|| panic!("soundness test: a deliberate panic in a host callback"))?;
    // Wait without the crate's synchronize, which would report (and take) the kept error.
    // SAFETY: a live stream of the context current on this thread.
    drv("cuStreamSynchronize", unsafe { sys::cuStreamSynchronize(stream.as_raw()) })?;
    let kept = owned.take_deferred_errors();
    ensure_eq!(
        kept.len(),
        1,
        "the callback's panic, kept through `current`, as seen by its creator: {kept:?}"
    );
    drop(stream);
    drop(current);
    no_deferred(&owned)?;
    Ok(())
}

/// G4: a primary context made current by someone else (here a raw retain, as the runtime does)
/// comes back from `current()` retained, so it stays alive after the other holder releases it.
/// Before the fix it came back borrowed (`is_primary() == false`) and died with that release.
fn foreign_primary_context_is_retained_by_current() -> TestResult {
    let device = Device::get(0)?;
    let mut raw = std::ptr::null_mut();
    // SAFETY: one out-parameter; released below.
    drv("cuDevicePrimaryCtxRetain", unsafe { sys::cuDevicePrimaryCtxRetain(&mut raw, device.as_raw()) })?;
    // SAFETY: the context is alive (retained above).
    drv("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(raw) })?;
    let current = Context::current()?;
    // SAFETY: gives back the retain taken above.
    drv("cuDevicePrimaryCtxRelease", unsafe { sys::cuDevicePrimaryCtxRelease(device.as_raw()) })?;
    let current = current.ok_or("no context current after cuCtxSetCurrent")?;
    ensure_eq!(current.as_raw(), raw);
    ensure!(current.is_primary(), "a foreign primary context came back without a retain of its own");
    ensure!(Context::primary_state(&device)?.active, "the primary context was released with a holder left");
    let stream = Stream::new(&current, StreamFlags::NON_BLOCKING)?;
    still_usable(&stream)?;
    Ok(())
}

/// G4: a context created outside the crate (a raw `cuCtxCreate`) cannot be held by any value,
/// so `current()` refuses it with an error that names the unsafe way. Before the fix it came
/// back as a borrowed `Context` with no lifetime.
fn foreign_created_context_is_refused_by_current() -> TestResult {
    let device = Device::get(0)?;
    let mut raw = std::ptr::null_mut();
    // SAFETY: one out-parameter; the context is destroyed below. (The pre-12.5 form exists on
    // every driver.)
    drv("cuCtxCreate", unsafe { sys::cuCtxCreate_v3020(&mut raw, 0, device.as_raw()) })?;
    let current = Context::current();
    // SAFETY: created above, used by nothing else; destroying it also unbinds it.
    drv("cuCtxDestroy", unsafe { sys::cuCtxDestroy(raw) })?;
    match current {
        Err(Error::InvalidArgument { .. }) => Ok(()),
        other => Err(format!("a foreign created context was handed out: {other:?}").into()),
    }
}

/// G3: the pool `MemPool::current` returns is alive while it is current, even after every value
/// the user made of it is dropped. Before the fix it was a borrowed wrapper (`is_owned() ==
/// false`), and dropping the creator destroyed the pool under it.
fn current_pool_stays_alive_while_current() -> TestResult {
    let (device, ctx, stream) = device_zero()?;
    let default = MemPool::device_default(&device)?;
    let pool = MemPool::create(&MemPoolProps::device(device))?;
    MemPool::set_current(&device, &pool)?;
    let current = MemPool::current(&device)?;
    ensure_eq!(current.as_raw(), pool.as_raw());
    drop(pool);
    ensure!(current.is_owned(), "the current pool came back borrowed");
    current.trim_to(0)?;
    let mut buffer = DeviceBuffer::<u32>::new_in(&stream, 1 << 16, current.allocator(&ctx))?;
    buffer.copy_from(&vec![7u32; 1 << 16])?;
    ensure!(current.used_mem_current()? >= 4 << 16, "the allocation is not counted in the pool");
    ensure!(buffer.to_vec()?.iter().all(|&v| v == 7), "the buffer from the current pool lost its data");
    drop(buffer);
    stream.synchronize()?;
    // Making the default pool current again gives the device's hold back; ours keeps it alive.
    MemPool::set_current(&device, &default)?;
    ensure_eq!(MemPool::current(&device)?.as_raw(), default.as_raw());
    current.trim_to(0)?;
    no_deferred(&ctx)
}

/// G3: a pool made current outside the crate (a raw `cuDeviceSetMemPool`) has no holder here,
/// so `MemPool::current` refuses it. Before the fix it came back borrowed, with no lifetime.
fn foreign_current_pool_is_refused() -> TestResult {
    let (device, _ctx, _stream) = device_zero()?;
    let default = MemPool::device_default(&device)?;
    let pool = MemPool::create(&MemPoolProps::device(device))?;
    // SAFETY: the pool is alive until after the default is made current again below.
    drv("cuDeviceSetMemPool", unsafe { sys::cuDeviceSetMemPool(device.as_raw(), pool.as_raw()) })?;
    let current = MemPool::current(&device);
    MemPool::set_current(&device, &default)?;
    drop(pool);
    match current {
        Err(Error::InvalidArgument { .. }) => Ok(()),
        other => Err(format!("a pool made current outside the crate was handed out: {other:?}").into()),
    }
}

/// F11: a module or library hands out one `Global` per variable at a time, so two exclusive views
/// of one variable cannot be made through two handles. Before the fix every call gave a new
/// handle.
fn a_global_is_handed_out_once_at_a_time() -> TestResult {
    let (_device, ctx, _stream) = device_zero()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let mut hits = module.global::<u32>("hits")?;
    let second = module.global::<u32>("hits");
    ensure!(matches!(second, Err(Error::InvalidArgument { .. })), "a second Global of `hits`: {second:?}");
    let as_bytes = module.global::<u8>("hits");
    ensure!(matches!(as_bytes, Err(Error::InvalidArgument { .. })), "a second Global as bytes: {as_bytes:?}");
    // Another variable is free.
    ensure_eq!(module.global::<f32>("factor")?.to_vec()?, [1.0f32]);
    hits.copy_from_host(&[1, 2, 3, 4])?;
    hits.as_view_mut().memset_d32(9)?;
    ensure_eq!(hits.to_vec()?, [9, 9, 9, 9]);
    drop(hits);
    ensure_eq!(module.global::<u32>("hits")?.to_vec()?, [9, 9, 9, 9], "the variable is free again");

    let library = Library::from_ptx(kernels::PTX, &JitOptions::new())?;
    let factor = library.global::<f32>(&ctx, "factor")?;
    let second = library.global::<f32>(&ctx, "factor");
    ensure!(matches!(second, Err(Error::InvalidArgument { .. })), "a second library Global: {second:?}");
    drop((second, factor));
    ensure_eq!(library.global::<f32>(&ctx, "factor")?.to_vec()?, [1.0f32]);
    library.unload()?;
    no_deferred(&ctx)
}

/// F11's class: work queued through a `Global`'s view on some stream has finished when the
/// handle is dropped, so the next handle (or the module's unload) does not race it. Before, the
/// drop did not wait, and a read right after it saw the variable without the queued memset.
fn dropping_a_global_waits_for_work_through_its_views() -> TestResult {
    let (_device, ctx, _stream) = device_zero()?;
    let module = Module::from_ptx(&ctx, kernels::PTX)?;
    let held = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let mut hits = module.global::<u32>("hits")?;
    hits.copy_from_host(&[0; 4])?;
    // Hold the stream back, so the memset is still queued when the handle is dropped.
    held.launch_host_func(|| std::thread::sleep(std::time::Duration::from_millis(300)))?;
    hits.as_view_mut().memset_d32_async(5, &held)?;
    drop(hits);
    // A synchronous read on the default stream does not wait for a non-blocking stream: only
    // the drop's wait makes the memset visible here.
    ensure_eq!(module.global::<u32>("hits")?.to_vec()?, [5, 5, 5, 5], "the drop did not wait for the memset");
    held.synchronize()?;
    no_deferred(&ctx)
}

/// F13's class: the physical memory behind a `GrowableBuffer` chunk or a `VmmAllocator` buffer
/// is reachable (`Mapping::physical`), but mapping it a second time is refused, so the buffer
/// keeps the only way to its bytes. Before the fix the second mapping succeeded and its
/// `view_mut` wrote the buffer's memory.
fn buffer_owned_vmm_memory_cannot_be_mapped_again() -> TestResult {
    let (_device, ctx, stream) = device_zero()?;
    let mut growable = GrowableBuffer::<u32>::new(&stream, 1 << 20)?;
    growable.resize(1024)?;
    let physical = growable.chunks().first().ok_or("a grown buffer has no chunk")?.physical().clone();
    let range = AddressRange::reserve(&ctx, physical.size(), 0)?;
    let refused = range.map(0, &physical).map(drop);
    ensure!(
        matches!(refused, Err(Error::InvalidArgument { .. })),
        "a GrowableBuffer chunk mapped twice: {refused:?}"
    );

    let allocator = Arc::new(VmmAllocator::new(&ctx)?);
    let buffer = DeviceBuffer::<u32>::new_in(&stream, 1024, allocator.clone())?;
    let physical = allocator
        .with_mapping(buffer.as_raw(), |m| m.physical().clone())
        .ok_or("the allocator does not know its own buffer")?;
    let range = AddressRange::reserve(&ctx, physical.size(), 0)?;
    let refused = range.map(0, &physical).map(drop);
    ensure!(
        matches!(refused, Err(Error::InvalidArgument { .. })),
        "a VmmAllocator buffer mapped twice: {refused:?}"
    );
    // Exporting stays possible (it fails here only because no handle type was asked for).
    drop((buffer, growable));
    stream.synchronize()?;
    no_deferred(&ctx)
}

/// F8's type, async half: a `PitchedBuffer`'s async memset on a stream other than its own notes
/// that stream, so dropping the buffer waits for it. Before, nothing was noted and the memory
/// could be reused under the memset.
fn pitched_async_work_on_another_stream_is_recorded() -> TestResult {
    let (_device, ctx, stream) = device_zero()?;
    let other = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let mut pitched = PitchedBuffer::<u32>::new(&stream, 300, 200)?;
    ensure!(pitched.storage().recorded_streams().is_empty(), "a fresh buffer has recorded streams");
    pitched.memset_d32_async(5, &other)?;
    ensure!(
        pitched.storage().recorded_streams().contains(&other),
        "the stream of an async memset was not noted on the buffer"
    );
    other.synchronize()?;
    let mut host = vec![0u32; 300 * 200];
    pitched.copy_to_host(&mut host)?;
    ensure!(host.iter().all(|&v| v == 5), "the memset on the other stream did not land");
    drop(pitched);
    stream.synchronize()?;
    no_deferred(&ctx)
}
