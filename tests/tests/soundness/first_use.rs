//! The acquire side of the cross-stream rule (review finding H1): the first use of a buffer on a
//! stream other than its own waits for the work queued on its own stream, the work of the
//! block's earlier owners included; `set_stream` orders the new stream after the old one.
//!
//! The shape: the owner's stream is held back by a sleeping host function, so that the work
//! queued behind it runs late; a buffer zeroed and copied out there is dropped, and a new buffer
//! taken on the same stream (the same block) is written on another stream. Before the fix, the
//! dropped buffer's late zeroing landed on the new owner's write.

use cuda_tests::{Test, TestResult, device_zero, ensure, ensure_eq, gpu, hold, no_deferred};
use cuhost::error::Reason;
use cuhost::graph::CaptureMode;
use cuhost::{Context, DeviceBuffer, Error, PinnedBuffer, Stream, StreamFlags};
use std::sync::{Arc, mpsc};
use std::time::Duration;

/// The tests of this module.
pub const TESTS: &[Test] = &[
    gpu("a_reused_block_written_on_another_stream_waits_for_its_old_owner", reused_block_on_another_stream),
    gpu("set_stream_orders_the_new_stream_after_the_old_one", set_stream_waits_for_the_old_stream),
    gpu("a_buffer_zeroed_on_its_stream_is_zero_when_first_copied_on_another", zeroed_then_copied_elsewhere),
    gpu("set_stream_onto_a_stream_being_captured_is_refused", set_stream_onto_a_capture),
    gpu(
        "a_synchronous_copy_of_a_buffer_on_another_threads_per_thread_stream_is_refused",
        synchronous_copy_on_another_threads_stream,
    ),
    gpu(
        "a_first_use_that_waits_on_the_host_lets_a_host_function_note_the_buffer",
        host_wait_outside_the_lock,
    ),
    gpu(
        "a_pitched_copy_into_a_reused_block_on_another_stream_waits_for_its_old_owner",
        pitched_copy_into_a_reused_block,
    ),
];

/// Elements of the buffers: 16 MiB of `u32`.
const N: usize = 1 << 22;

fn two_streams(ctx: &Context) -> Result<(Stream, Stream), Error> {
    Ok((Stream::new(ctx, StreamFlags::NON_BLOCKING)?, Stream::new(ctx, StreamFlags::NON_BLOCKING)?))
}

/// The review's program: `a` zeroed and copied out on a held-back `s1` and dropped; `b` takes
/// the same block on `s1` and is set to sevens on `s2`. Before the fix, `b` read zeros (the
/// old owner's memset ran after the new owner's) and the host copy held sevens.
fn reused_block_on_another_stream() -> TestResult {
    let (_device, ctx, _) = device_zero()?;
    let (s1, s2) = two_streams(&ctx)?;
    let mut host = PinnedBuffer::<u32>::new(N)?;
    hold(&s1, 500)?;
    let address = {
        let a = DeviceBuffer::<u32>::zeroed(&s1, N)?;
        a.copy_to_pinned_async(&mut host, &s1)?;
        a.as_raw()
    };
    let mut b = DeviceBuffer::<u32>::new(&s1, N)?;
    ensure_eq!(b.as_raw(), address, "the pool did not hand the same block back");
    b.view_mut().memset_d32_async(7, &s2)?;
    s2.synchronize()?;
    let (seen, copied) = (b.to_vec()?, host.to_vec()?);
    ensure_eq!(seen.iter().filter(|&&v| v != 7).count(), 0, "words of the new buffer not 7");
    ensure_eq!(copied.iter().filter(|&&v| v != 0).count(), 0, "words of the old owner's copy not 0");
    no_deferred(&ctx)
}

/// A buffer moved from a held-back stream to another: the zeroing queued on the old stream
/// must run before the sevens written on the new one. Before the fix, the sevens ran first.
fn set_stream_waits_for_the_old_stream() -> TestResult {
    let (_device, ctx, _) = device_zero()?;
    let (s1, s2) = two_streams(&ctx)?;
    hold(&s1, 500)?;
    let mut b = DeviceBuffer::<u32>::zeroed(&s1, N)?;
    b.set_stream(&s2)?;
    b.view_mut().memset_d32_async(7, &s2)?;
    s1.synchronize()?;
    let seen = b.to_vec()?;
    ensure_eq!(seen.iter().filter(|&&v| v != 7).count(), 0, "words zeroed after the move's sevens");
    no_deferred(&ctx)
}

/// The guide's example (memory chapter): `source` zeroed on `owner`, copied on `side`. Before the
/// fix, nothing ordered the copy after the zeroing; with `owner` held back and `source` taken
/// over a block of nines, the copy read nines.
fn zeroed_then_copied_elsewhere() -> TestResult {
    let (_device, ctx, _) = device_zero()?;
    let (owner, side) = two_streams(&ctx)?;
    drop(DeviceBuffer::<u32>::from_slice(&owner, &vec![9; N])?);
    hold(&owner, 500)?;
    let source = DeviceBuffer::<u32>::zeroed(&owner, N)?;
    let mut target = DeviceBuffer::<u32>::from_slice(&side, &vec![5; N])?;
    target.view_mut().copy_from_device_async(&source.view(), &side)?;
    side.synchronize()?;
    let seen = target.to_vec()?;
    ensure_eq!(seen.iter().filter(|&&v| v != 0).count(), 0, "words copied before the zeroing");
    owner.synchronize()?;
    no_deferred(&ctx)
}

/// `set_stream` onto a stream being captured: the new stream cannot wait for the old one (a
/// capture cannot wait for work outside it), so the move is refused and the buffer stays.
/// Before, the move went through without the wait, and work queued on the new stream after the
/// capture ran unordered with the old stream's.
fn set_stream_onto_a_capture() -> TestResult {
    let (_device, ctx, _) = device_zero()?;
    let (old, new) = two_streams(&ctx)?;
    let mut b = DeviceBuffer::<u32>::zeroed(&old, N)?;
    let capture = new.begin_capture(CaptureMode::ThreadLocal)?;
    let refused = b.set_stream(&new);
    drop(capture.end()?);
    ensure!(
        matches!(refused, Err(Error::InvalidArgument { reason: Reason::DURING_CAPTURE, .. })),
        "a move onto a capturing stream was not refused for the capture: {refused:?}"
    );
    ensure!(*b.stream() == old, "the refused move changed the buffer's stream");
    old.synchronize()?;
    no_deferred(&ctx)
}

/// A buffer zeroed late on the per-thread default stream of one thread, then moved to another
/// thread (finding F1 of the third review): there the stream's handle names that thread's own
/// per-thread stream, which is not ordered after the zeroing, so the synchronous copies and
/// memsets are refused; after `set_stream` onto a stream of the new thread they see the zeros.
/// Before the fix, `to_vec` ran on the new thread's stream, unordered with the zeroing.
fn synchronous_copy_on_another_threads_stream() -> TestResult {
    let (_device, ctx, _) = device_zero()?;
    let first = Stream::per_thread(&ctx);
    hold(&first, 300)?;
    let buffer = DeviceBuffer::<u32>::zeroed(&first, N)?;
    std::thread::scope(|scope| {
        scope
            .spawn(|| -> TestResult {
                let mut buffer = buffer;
                let read = buffer.to_vec();
                ensure!(
                    matches!(read, Err(Error::InvalidArgument { reason: Reason::WRONG_STREAM, .. })),
                    "a synchronous copy through another thread's per-thread stream ran: {:?}",
                    read.map(|v| v.len())
                );
                let set = buffer.view_mut().memset_d32(7);
                ensure!(matches!(set, Err(Error::InvalidArgument { .. })), "the memset ran: {set:?}");
                buffer.set_stream(&Stream::per_thread(&ctx))?;
                let seen = buffer.to_vec()?;
                ensure_eq!(seen.iter().filter(|&&v| v != 0).count(), 0, "words not zero after set_stream");
                Ok(())
            })
            .join()
            .map_err(|_| "the thread panicked")?
    })?;
    no_deferred(&ctx)
}

/// The first use of a buffer owned by another thread's per-thread stream waits for it on the
/// host, through its context (finding F5 of the third review). A host function queued in that
/// context notes another stream on the same buffer meanwhile. Before the fix the wait was made
/// under the buffer's lock, which the host function then waited for: neither returned.
fn host_wait_outside_the_lock() -> TestResult {
    let (_device, ctx, _) = device_zero()?;
    let own = Stream::per_thread(&ctx);
    let buffer = Arc::new(DeviceBuffer::<u32>::zeroed(&own, 16)?);
    let (side, late, first) = (
        Stream::new(&ctx, StreamFlags::NON_BLOCKING)?,
        Stream::new(&ctx, StreamFlags::NON_BLOCKING)?,
        Stream::new(&ctx, StreamFlags::NON_BLOCKING)?,
    );
    let (noted_late, in_callback) = (Arc::clone(&buffer), late.clone());
    side.launch_host_func(move || {
        std::thread::sleep(Duration::from_millis(300));
        // The driver refuses its calls on this thread; what matters is that the note returns.
        let _ = noted_late.record_stream(&in_callback);
    })?;
    let (sent, received) = mpsc::channel();
    let noted_first = Arc::clone(&buffer);
    std::thread::spawn(move || {
        let _ = sent.send(noted_first.record_stream(&first).map_err(|e| e.to_string()));
    });
    match received.recv_timeout(Duration::from_secs(20)) {
        Ok(noted) => ensure!(noted.is_ok(), "the first use failed: {noted:?}"),
        Err(_) => {
            return Err("the first use's host wait and the host function's note wait for each other".into());
        }
    }
    side.synchronize()?;
    no_deferred(&ctx)
}

/// The same hole through a synchronous 2D copy: `a` zeroed on a held-back `s1` and dropped; `b`
/// takes the same block on `s1` and a pitched buffer on `s2` copies its sevens into it, on
/// `s2`. Before the fix, the dense side of the copy was not noted at all, and the old owner's
/// late zeroing landed on the copied sevens.
fn pitched_copy_into_a_reused_block() -> TestResult {
    let (_device, ctx, _) = device_zero()?;
    let (s1, s2) = two_streams(&ctx)?;
    let (width, height) = (1024, N / 1024);
    let mut pitched = cuhost::memory::PitchedBuffer::<u32>::new(&s2, width, height)?;
    pitched.memset_d32(7)?;
    hold(&s1, 500)?;
    let address = DeviceBuffer::<u32>::zeroed(&s1, N)?.as_raw();
    let mut b = DeviceBuffer::<u32>::new(&s1, N)?;
    ensure_eq!(b.as_raw(), address, "the pool did not hand the same block back");
    pitched.copy_to_device(&mut b.view_mut())?;
    let seen = b.to_vec()?;
    ensure_eq!(seen.iter().filter(|&&v| v != 7).count(), 0, "words of the copy overwritten by the old owner");
    no_deferred(&ctx)
}
