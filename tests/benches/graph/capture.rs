//! The rows of the graph benchmark that measure safe capture: a decode-like step (temporaries
//! allocated on two streams, kernels, a fork and a join, a small copy out, the temporaries
//! freed) captured and instantiated through the crate against the same raw calls; its replay
//! against running it eagerly; one captured safe call against the raw call; and the launch of
//! a captured graph that holds buffers against `cuGraphLaunch`.

use cuda_tests::bench::{Row, compare, compare_settled};
use cuhost::graph::{CaptureMode, GraphExec, InstantiateFlags};
use cuhost::module::Function;
use cuhost::{Context, DeviceBuffer, Event, EventFlags, LaunchConfig, Stream, StreamFlags};
use cuhost_driver_sys as sys;
use std::ffi::c_void;

/// Elements of each temporary of the step.
const N: u32 = 1 << 16;
/// Elements of the result copied out.
const OUT: usize = 16;

/// The streams, events and kernels of the step.
pub struct Step<'m> {
    pub main: Stream,
    pub side: Stream,
    fork: Event,
    join: Event,
    add: Function<'m>,
    mul: Function<'m>,
    out: DeviceBuffer<u32>,
}

impl<'m> Step<'m> {
    pub fn new(ctx: &Context, add: Function<'m>, mul: Function<'m>) -> cuhost::Result<Step<'m>> {
        let main = Stream::new(ctx, StreamFlags::NON_BLOCKING)?;
        let out = DeviceBuffer::<u32>::zeroed(&main, OUT)?;
        Ok(Step {
            side: Stream::new(ctx, StreamFlags::NON_BLOCKING)?,
            fork: Event::new(ctx, EventFlags::DISABLE_TIMING)?,
            join: Event::new(ctx, EventFlags::DISABLE_TIMING)?,
            main,
            add,
            mul,
            out,
        })
    }

    /// The step through the crate: `t1 = 1 + 2` on the main stream, `t2 = 3 * t1` on the side
    /// stream, the first words of `t2` copied out on the main stream; the temporaries dropped.
    pub fn run(&mut self) -> cuhost::Result<()> {
        let config = LaunchConfig::for_elements(N, 256);
        let (n, two, three) = (N, 2u32, 3u32);
        let mut t1 = DeviceBuffer::<u32>::new(&self.main, N as usize)?;
        t1.view_mut().memset_d32_async(1, &self.main)?;
        // SAFETY: add_u32 and mul_u32 take (u32*, u32, u32); the buffers hold N words; the
        // module outlives the graphs (the benchmark declares it first).
        unsafe { self.add.launch(&self.main, &config, (&mut t1, &n, &two))? };
        self.fork.record(&self.main)?;
        self.side.wait_event(&self.fork)?;
        let mut t2 = DeviceBuffer::<u32>::new(&self.side, N as usize)?;
        t2.view_mut().copy_from_device_async(&t1.view(), &self.side)?;
        // SAFETY: as above.
        unsafe { self.mul.launch(&self.side, &config, (&mut t2, &n, &three))? };
        self.join.record(&self.side)?;
        self.main.wait_event(&self.join)?;
        self.out.view_mut().copy_from_device_async(&t2.slice(..OUT)?, &self.main)?;
        drop((t1, t2));
        Ok(())
    }

    /// The same step with raw calls on a capturing main stream: stream-ordered allocations and
    /// frees (graph memory nodes), the kernels, the fork and the join, the copy out.
    fn run_raw(&self) {
        let (main, side) = (self.main.as_raw(), self.side.as_raw());
        let bytes = N as usize * 4;
        let (mut t1, mut t2) = (0, 0);
        let (mut n, mut two, mut three) = (N, 2u32, 3u32);
        // SAFETY: the streams, events and functions are live; the allocations are used only
        // between their allocation and their free, on streams ordered after the allocation.
        unsafe {
            check("cuMemAllocAsync", sys::cuMemAllocAsync(&mut t1, bytes, main));
            check("cuMemsetD32Async", sys::cuMemsetD32Async(t1, 1, N as usize, main));
            launch(
                self.add.as_raw(),
                main,
                &mut [
                    (&mut t1 as *mut u64).cast(),
                    (&mut n as *mut u32).cast(),
                    (&mut two as *mut u32).cast(),
                ],
            );
            check("cuEventRecord", sys::cuEventRecord(self.fork.as_raw(), main));
            check("cuStreamWaitEvent", sys::cuStreamWaitEvent(side, self.fork.as_raw(), 0));
            check("cuMemAllocAsync", sys::cuMemAllocAsync(&mut t2, bytes, side));
            check("cuMemcpyDtoDAsync", sys::cuMemcpyDtoDAsync(t2, t1, bytes, side));
            launch(
                self.mul.as_raw(),
                side,
                &mut [
                    (&mut t2 as *mut u64).cast(),
                    (&mut n as *mut u32).cast(),
                    (&mut three as *mut u32).cast(),
                ],
            );
            check("cuEventRecord", sys::cuEventRecord(self.join.as_raw(), side));
            check("cuStreamWaitEvent", sys::cuStreamWaitEvent(main, self.join.as_raw(), 0));
            check("cuMemcpyDtoDAsync", sys::cuMemcpyDtoDAsync(self.out.as_raw(), t2, OUT * 4, main));
            check("cuMemFreeAsync", sys::cuMemFreeAsync(t1, main));
            check("cuMemFreeAsync", sys::cuMemFreeAsync(t2, main));
        }
    }

    /// Captures the step through the crate and instantiates it.
    pub fn capture(&mut self) -> cuhost::Result<GraphExec> {
        let capture = self.main.begin_capture(CaptureMode::ThreadLocal)?;
        self.run()?;
        capture.end()?.instantiate(InstantiateFlags::empty())
    }

    /// Captures the raw step, instantiates it and destroys both.
    fn capture_raw(&self) {
        let main = self.main.as_raw();
        let (mut graph, mut exec) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: the stream is live and not capturing; the graph and executable graph made
        // here are destroyed once, here.
        unsafe {
            check(
                "cuStreamBeginCapture",
                sys::cuStreamBeginCapture(
                    main,
                    sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                ),
            );
            self.run_raw();
            check("cuStreamEndCapture", sys::cuStreamEndCapture(main, &mut graph));
            let mut params = sys::CUDA_GRAPH_INSTANTIATE_PARAMS {
                flags: 0,
                hUploadStream: std::ptr::null_mut(),
                hErrNode_out: std::ptr::null_mut(),
                result_out: sys::CUgraphInstantiateResult::CUDA_GRAPH_INSTANTIATE_SUCCESS,
            };
            check(
                "cuGraphInstantiateWithParams",
                sys::cuGraphInstantiateWithParams(&mut exec, graph, &mut params),
            );
            check("cuGraphExecDestroy", sys::cuGraphExecDestroy(exec));
            check("cuGraphDestroy", sys::cuGraphDestroy(graph));
        }
    }
}

/// Launches `f` (three parameters) with one thread per element of the step.
///
/// # Safety
///
/// `f` is live and takes the three parameters `params` points to; `stream` is live.
unsafe fn launch(f: sys::CUfunction, stream: sys::CUstream, params: &mut [*mut c_void; 3]) {
    // SAFETY: the caller's contract.
    let status = unsafe {
        sys::cuLaunchKernel(f, N / 256, 1, 1, 256, 1, 1, 0, stream, params.as_mut_ptr(), std::ptr::null_mut())
    };
    check("cuLaunchKernel", status);
}

fn check(call: &str, status: sys::CUresult) {
    if status != sys::CUresult::CUDA_SUCCESS {
        super::fail(call, status.name().unwrap_or("unknown status"));
    }
}

/// The rows: ours against the raw calls in the same run.
pub fn rows(ctx: &Context, add: Function<'_>, mul: Function<'_>) -> cuhost::Result<(Vec<Row>, Vec<Row>)> {
    let mut step = Step::new(ctx, add, mul)?;
    step.main.synchronize()?;
    let mut rows = Vec::new();
    let step_cell = std::cell::RefCell::new(&mut step);
    rows.push(compare(
        "capture + instantiate, decode step (safe)",
        51,
        1,
        || drop(step_cell.borrow_mut().capture().unwrap_or_else(|e| super::fail("capture", e))),
        || step_cell.borrow().capture_raw(),
    ));

    // One captured safe call (a memset of a buffer held by the graph) against the raw call,
    // both captured into one capture that is discarded afterwards: what retention adds.
    let s = Stream::new(ctx, StreamFlags::NON_BLOCKING)?;
    let mut held = DeviceBuffer::<u32>::zeroed(&s, 256)?;
    s.synchronize()?;
    let (raw_ptr, raw_s) = (held.as_raw(), s.as_raw());
    let capture = s.begin_capture(CaptureMode::ThreadLocal)?;
    let held_cell = std::cell::RefCell::new(&mut held);
    rows.push(compare(
        "captured memset (safe, held by the graph)",
        101,
        100,
        || {
            held_cell
                .borrow_mut()
                .view_mut()
                .memset_d32_async(1, &s)
                .unwrap_or_else(|e| super::fail("captured memset", e))
        },
        // SAFETY: a live stream, 256 words at a live address, captured.
        || check("cuMemsetD32Async", unsafe { sys::cuMemsetD32Async(raw_ptr, 1, 256, raw_s) }),
    ));
    drop(capture);

    // The launch of a captured graph that holds buffers, against `cuGraphLaunch` on it.
    let mut buffers =
        (0..4).map(|_| DeviceBuffer::<u32>::zeroed(&s, 256)).collect::<cuhost::Result<Vec<_>>>()?;
    s.synchronize()?;
    let capture = s.begin_capture(CaptureMode::ThreadLocal)?;
    for b in &mut buffers {
        b.view_mut().memset_d32_async(7, &s)?;
    }
    let exec = capture.end()?.instantiate(InstantiateFlags::empty())?;
    drop(buffers);
    exec.upload(&s)?;
    let raw_exec = exec.as_raw();
    rows.push(super::measure_launches(
        "graph launch, captured graph holding 4 buffers",
        &s,
        || exec.launch(&s).unwrap_or_else(|e| super::fail("GraphExec::launch", e)),
        // SAFETY: both handles are live.
        || check("cuGraphLaunch", unsafe { sys::cuGraphLaunch(raw_exec, raw_s) }),
    )?);

    // The step replayed from its graph against the step run eagerly (the raw column).
    let exec = step.capture()?;
    let main = step.main.clone();
    let step_cell = std::cell::RefCell::new(&mut step);
    let replay = vec![compare_settled(
        "decode step: graph replay (ours) vs eager (raw)",
        101,
        10,
        || exec.launch(&main).unwrap_or_else(|e| super::fail("GraphExec::launch", e)),
        || step_cell.borrow_mut().run().unwrap_or_else(|e| super::fail("eager step", e)),
        || main.synchronize().unwrap_or_else(|e| super::fail("Stream::synchronize", e)),
    )];
    main.synchronize()?;
    drop(exec);
    Ok((rows, replay))
}
