//! Slices of a pinned buffer held across a graph launch (review finding H2): a plain `&[T]` from
//! `PinnedBuffer::as_slice` changed under it while the launch of a graph whose captured copy
//! writes the buffer ran; the mirror case is a `&mut [T]` written while a launch reads. The
//! slices are guards now, and such launches are refused while one lives.

use cuda_tests::{Test, TestResult, device_zero, ensure, ensure_eq, gpu, no_deferred};
use cuhost::graph::{CaptureMode, InstantiateFlags};
use cuhost::{DeviceBuffer, Error, PinnedBuffer};

/// The tests of this module.
pub const TESTS: &[Test] = &[
    gpu("a_pinned_slice_held_across_a_launch_that_writes_it_refuses_the_launch", slice_across_writing_launch),
    gpu(
        "a_pinned_mut_slice_held_across_a_launch_that_reads_it_refuses_the_launch",
        mut_slice_across_reading_launch,
    ),
];

const N: usize = 1 << 20;

/// The review's program: a device-to-host copy captured into a graph; a slice of the host
/// buffer taken; the graph launched. Before the fix, the launch was queued and its copy wrote
/// the sevens under the slice.
fn slice_across_writing_launch() -> TestResult {
    let (_device, ctx, s) = device_zero()?;
    let dev = DeviceBuffer::<u32>::from_slice(&s, &vec![7; N])?;
    let mut host = PinnedBuffer::<u32>::new(N)?;
    host.as_mut_slice()?.fill(1);
    let capture = s.begin_capture(CaptureMode::ThreadLocal)?;
    dev.copy_to_pinned_async(&mut host, &s)?;
    let graph = capture.end()?;
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    let view = host.as_slice()?;
    let refused = exec.launch(&s);
    ensure!(
        matches!(refused, Err(Error::InvalidArgument { .. })),
        "a launch that writes the buffer under a live slice was not refused: {refused:?}"
    );
    s.synchronize()?;
    ensure_eq!(view.iter().filter(|&&v| v != 1).count(), 0, "the slice changed under the host");
    drop(view);
    exec.launch(&s)?;
    ensure_eq!(host.as_slice()?.iter().filter(|&&v| v != 7).count(), 0, "the launch after the slice");
    drop((exec, graph));
    no_deferred(&ctx)
}

/// The mirror case: a host-to-device copy captured; the host writes the buffer through a slice
/// while a launch would read it. Before the fix, the launch was queued and read half-written
/// memory.
fn mut_slice_across_reading_launch() -> TestResult {
    let (_device, ctx, s) = device_zero()?;
    let mut dev = DeviceBuffer::<u32>::zeroed(&s, N)?;
    let mut host = PinnedBuffer::<u32>::from_slice(&vec![3; N])?;
    let capture = s.begin_capture(CaptureMode::ThreadLocal)?;
    dev.copy_from_pinned_async(&host, &s)?;
    let graph = capture.end()?;
    let exec = graph.instantiate(InstantiateFlags::empty())?;
    {
        let mut writing = host.as_mut_slice()?;
        let refused = exec.launch(&s);
        ensure!(
            matches!(refused, Err(Error::InvalidArgument { .. })),
            "a launch that reads the buffer under a live mutable slice was not refused: {refused:?}"
        );
        writing.fill(4);
    }
    // A reading slice does not keep a reading launch out.
    let reading = host.as_slice()?;
    exec.launch(&s)?;
    ensure_eq!(reading.iter().filter(|&&v| v != 4).count(), 0, "the host's writes");
    drop(reading);
    ensure_eq!(dev.to_vec()?.iter().filter(|&&v| v != 4).count(), 0, "the launch read the host's writes");
    drop((exec, graph));
    no_deferred(&ctx)
}
