//! Stream capture against the simulated driver: memory allocated in a capture (graph memory
//! nodes), memory that captured work uses and that is dropped while the graph lives, and
//! captures that end badly. The happens-before checker watches every run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod harness;

use cuhost::graph::{CaptureMode, InstantiateFlags};
use cuhost::{Context, Device, DeviceBuffer, Error, Stream, StreamFlags};
use harness::harness;
use harness::sim::Sim;

/// Runs `f` with the simulator to itself, freshly reset, and fails on any report of (a)–(c).
fn with_sim(f: impl FnOnce(&Stream) -> cuhost::Result<()>) {
    let _guard = harness();
    let sim = Sim::get();
    (sim.reset)(7);
    let ctx = Context::primary(&Device::get(0).unwrap()).unwrap();
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING).unwrap();
    f(&stream).unwrap();
    stream.synchronize().unwrap();
    cuhost::pool::release_default_pools().unwrap();
    let (bugs, _) = sim.counts();
    assert_eq!(bugs, [0, 0, 0], "{}", sim.reports());
}

fn is_graph_memory_refusal(e: &Error) -> bool {
    matches!(e, Error::InvalidArgument { operation: "graph memory", .. })
}

/// A buffer allocated and dropped inside a capture is an allocation node and a free node of
/// the graph: it is used there only, and each launch runs it.
#[test]
fn a_buffer_allocated_and_dropped_in_a_capture_is_graph_memory() {
    with_sim(|stream| {
        let capture = stream.begin_capture(CaptureMode::ThreadLocal)?;
        let mut scratch = DeviceBuffer::<u32>::zeroed(stream, 256)?;
        assert_eq!(scratch.allocator_name(), "cuMemAllocAsync");
        scratch.view_mut().memset_d32_async(5, stream)?;
        let sync = scratch.to_vec().unwrap_err();
        assert!(is_graph_memory_refusal(&sync), "{sync}");
        drop(scratch);
        let graph = capture.end()?;
        let exec = graph.instantiate(InstantiateFlags::empty())?;
        for _ in 0..3 {
            exec.launch(stream)?;
        }
        stream.synchronize()
    });
}

/// A buffer allocated in a capture and still alive when it ends is freed in the graph at the
/// end: the graph is whole, and the buffer, which has no memory outside the launches, refuses
/// every use.
#[test]
fn a_buffer_that_outlives_its_capture_refuses_every_use() {
    with_sim(|stream| {
        let capture = stream.begin_capture(CaptureMode::ThreadLocal)?;
        let mut kept = DeviceBuffer::<u32>::zeroed(stream, 64)?;
        let graph = capture.end()?;
        let exec = graph.instantiate(InstantiateFlags::empty())?;
        exec.launch(stream)?;
        let refusals = [
            kept.to_vec().unwrap_err(),
            kept.copy_from(&[1; 64]).unwrap_err(),
            kept.view_mut().memset_d32_async(1, stream).unwrap_err(),
            kept.record_stream(stream).unwrap_err(),
        ];
        for e in &refusals {
            assert!(is_graph_memory_refusal(e), "{e}");
        }
        assert!(kept.set_stream(&Stream::new(stream.context(), StreamFlags::NON_BLOCKING)?).is_err());
        drop(kept);
        exec.launch(stream)
    });
}

/// A capture that is discarded (dropped, or broken by a call the driver refuses while
/// capturing) leaves its buffers without memory, refusing every use, and the buffers the
/// captured work used are given back as if it had never been captured.
#[test]
fn an_invalidated_capture_leaves_nothing_dangling() {
    with_sim(|stream| {
        let mut outside = DeviceBuffer::<u32>::zeroed(stream, 256)?;
        let address = outside.as_raw();
        let capture = stream.begin_capture(CaptureMode::ThreadLocal)?;
        outside.view_mut().memset_d32_async(3, stream)?;
        let inside = DeviceBuffer::<u32>::new(stream, 256)?;
        assert!(stream.synchronize().is_err(), "a synchronization breaks the capture");
        assert!(capture.end().is_err());
        assert!(is_graph_memory_refusal(&inside.to_vec().unwrap_err()));
        drop(inside);
        drop(outside);
        // The discarded graph let go of the buffer: its block is the pool's again.
        let again = DeviceBuffer::<u32>::new(stream, 256)?;
        assert_eq!(again.as_raw(), address);
        Ok(())
    });
}

/// A buffer that captured work uses, dropped while the graph lives, keeps its memory until the
/// graph and its executable graph are gone: no other buffer gets it meanwhile.
#[test]
fn a_buffer_dropped_while_its_graph_lives_is_kept_until_the_graph_is_gone() {
    with_sim(|stream| {
        let mut data = DeviceBuffer::<u32>::zeroed(stream, 256)?;
        let address = data.as_raw();
        let capture = stream.begin_capture(CaptureMode::ThreadLocal)?;
        data.view_mut().memset_d32_async(9, stream)?;
        let graph = capture.end()?;
        assert!(graph.kept_count() > 0, "the graph holds the buffer");
        let exec = graph.instantiate(InstantiateFlags::empty())?;
        drop(data);
        let other = DeviceBuffer::<u32>::new(stream, 256)?;
        assert_ne!(other.as_raw(), address, "the block was handed out while the graph may use it");
        exec.launch(stream)?;
        drop((graph, exec));
        drop(other);
        let after = DeviceBuffer::<u32>::new(stream, 256)?;
        let again = DeviceBuffer::<u32>::new(stream, 256)?;
        assert!(
            [after.as_raw(), again.as_raw()].contains(&address),
            "the block came back to the pool once the graph was gone"
        );
        Ok(())
    });
}

/// A buffer dropped while its own stream is being captured, and not used there, cannot be given
/// back in that stream's order now; the capture's graph holds it, and it goes back once the
/// graph is gone.
#[test]
fn a_buffer_dropped_during_a_capture_of_its_stream_goes_back_after_the_graph() {
    with_sim(|stream| {
        let early = DeviceBuffer::<u32>::zeroed(stream, 256)?;
        let address = early.as_raw();
        let capture = stream.begin_capture(CaptureMode::ThreadLocal)?;
        drop(early);
        let scratch = DeviceBuffer::<u32>::zeroed(stream, 256)?;
        assert_ne!(scratch.as_raw(), address);
        drop(scratch);
        let graph = capture.end()?;
        let exec = graph.instantiate(InstantiateFlags::empty())?;
        exec.launch(stream)?;
        drop((exec, graph));
        let again = DeviceBuffer::<u32>::new(stream, 256)?;
        assert_eq!(again.as_raw(), address);
        Ok(())
    });
}

/// `DeviceBuffer::from_slice` on a capturing stream: graph memory, filled at each launch from a
/// pinned copy of the slice that the graph holds.
#[test]
fn from_slice_in_a_capture_fills_the_graph_memory_at_each_launch() {
    with_sim(|stream| {
        let mut out = DeviceBuffer::<u32>::zeroed(stream, 64)?;
        let capture = stream.begin_capture(CaptureMode::ThreadLocal)?;
        let input = DeviceBuffer::from_slice(stream, &[3u32; 64])?;
        out.view_mut().copy_from_device_async(&input.view(), stream)?;
        drop(input);
        let graph = capture.end()?;
        let exec = graph.instantiate(InstantiateFlags::empty())?;
        exec.launch(stream)?;
        stream.synchronize()?;
        assert_eq!(out.to_vec()?, vec![3; 64]);
        out.view_mut().memset_d32_async(0, stream)?;
        exec.launch(stream)?;
        assert_eq!(out.to_vec()?, vec![3; 64]);
        Ok(())
    });
}

/// An executable graph launched on a capturing stream is refused (the driver captures no graph
/// launch), the capture still ends, and the graph launches afterwards.
#[test]
fn a_graph_launched_into_a_capture_is_refused() {
    with_sim(|stream| {
        let mut data = DeviceBuffer::<u32>::zeroed(stream, 256)?;
        let capture = stream.begin_capture(CaptureMode::ThreadLocal)?;
        data.view_mut().memset_d32_async(5, stream)?;
        let inner = capture.end()?.instantiate(InstantiateFlags::empty())?;
        let capture = stream.begin_capture(CaptureMode::ThreadLocal)?;
        let refused = inner.launch(stream);
        assert!(matches!(refused, Err(Error::InvalidArgument { .. })), "{refused:?}");
        capture.end()?;
        inner.launch(stream)?;
        stream.synchronize()?;
        assert_eq!(data.to_vec()?, vec![5; 256]);
        Ok(())
    });
}

/// A kernel launched on a capturing stream: the graph holds the module's code, so the module
/// may be dropped before the graph's launches (the simulator refuses a launch of a kernel whose
/// module was unloaded).
#[test]
fn a_captured_launch_holds_its_module() {
    with_sim(|stream| {
        const IMAGE: &str = ".entry fill_u32(.param .u64 dst, .param .u32 n, .param .u32 value)\n";
        let module = cuhost::Module::from_ptx(stream.context(), IMAGE)?;
        let fill = module.function("fill_u32")?;
        let mut data = DeviceBuffer::<u32>::zeroed(stream, 256)?;
        let (n, value) = (256u32, 4u32);
        let capture = stream.begin_capture(CaptureMode::ThreadLocal)?;
        // SAFETY: fill_u32 takes (u32*, u32, u32) and writes n words of `data`.
        unsafe { fill.launch(stream, &cuhost::LaunchConfig::for_elements(n, 64), (&mut data, &n, &value))? };
        let exec = capture.end()?.instantiate(InstantiateFlags::empty())?;
        drop(module);
        exec.launch(stream)?;
        assert_eq!(data.to_vec()?, vec![4; 256]);
        Ok(())
    });
}
