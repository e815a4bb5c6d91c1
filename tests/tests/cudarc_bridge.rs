//! `cuhost::cudarc`: cudarc 0.19 and this crate in one process, on the device's primary
//! context. Kernels of both on one stream, a buffer of each used by the other, and the stream
//! rule across the bridge: memory used through the other crate on a stream held back is not
//! freed and reused before that work has run.

use cuda_tests::{TestResult, ensure, ensure_eq, gpu, hold, no_deferred};
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, DevicePtr, PushKernelArg};
use cudarc::nvrtc::Ptx;
use cuhost::cudarc::{CudarcSlice, CudarcSliceMut};
use cuhost::module::Module;
use cuhost::{Context, Device, DeviceBuffer, LaunchConfig, Stream, StreamFlags};
use std::sync::Arc;

fn main() {
    cuda_tests::run(&[
        gpu("contexts_and_streams_are_the_same_handles", contexts_and_streams_are_the_same_handles),
        gpu(
            "kernels_of_both_crates_run_in_order_on_one_stream",
            kernels_of_both_crates_run_in_order_on_one_stream,
        ),
        gpu("a_cudarc_slice_written_here_on_a_late_stream_is_seen_by_cudarc", cudarc_slice_written_here_late),
        gpu(
            "a_buffer_lent_to_cudarc_is_written_after_its_stream_and_read_back_after_cudarc",
            buffer_lent_to_cudarc,
        ),
        gpu("a_cudarc_slice_used_here_late_is_not_reused_by_cudarc_before", cudarc_slice_not_reused_early),
        gpu("a_buffer_lent_to_cudarc_and_used_late_is_not_reused_before", lent_buffer_not_reused_early),
    ]);
}

/// `twice_plus(float *x, unsigned n, float c)`: `x[i] = 2 * x[i] + c`. Applied with two
/// constants, the result says which ran first: from 0, `c = 1` then `c = 10` gives 12, the
/// other order 21.
const PTX: &str = r#"
.version 7.0
.target sm_70
.address_size 64

.visible .entry twice_plus(
    .param .u64 twice_plus_param_0,
    .param .u32 twice_plus_param_1,
    .param .f32 twice_plus_param_2
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [twice_plus_param_0];
    ld.param.u32 %r1, [twice_plus_param_1];
    ld.param.f32 %f1, [twice_plus_param_2];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.f32 %f2, [%rd4];
    fma.rn.f32 %f3, %f2, 0f40000000, %f1;
    st.global.f32 [%rd4], %f3;
DONE:
    ret;
}
"#;

/// Elements of the buffers of the stream-rule tests: 64 MiB of `u32`, so that late work is
/// plainly visible.
const N: usize = 1 << 24;

/// cudarc's context on device 0 (the primary context) and a stream of it: with a second stream
/// made, cudarc tracks its slices with events.
fn cudarc_side() -> Result<(Arc<CudaContext>, Arc<CudaStream>), cudarc::driver::DriverError> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    Ok((ctx, stream))
}

fn cudarc_kernel(ctx: &Arc<CudaContext>) -> Result<CudaFunction, cudarc::driver::DriverError> {
    ctx.load_module(Ptx::from_src(PTX))?.load_function("twice_plus")
}

fn contexts_and_streams_are_the_same_handles() -> TestResult {
    let (theirs, their_stream) = cudarc_side()?;
    let ours = Context::from_cudarc(&theirs);
    ensure_eq!(ours.as_raw() as usize, theirs.cu_ctx() as usize);
    let primary = Context::primary(&Device::get(0)?)?;
    ensure!(ours == primary, "cudarc's context is the primary context");
    ensure_eq!(primary.to_cudarc()?.cu_ctx() as usize, primary.as_raw() as usize);
    let stream = Stream::from_cudarc(&their_stream);
    ensure_eq!(stream.as_raw() as usize, their_stream.cu_stream() as usize);
    ensure!(!stream.is_owned(), "cudarc destroys its stream, not this crate");
    let legacy = Stream::from_cudarc(&theirs.default_stream());
    ensure!(legacy == Stream::legacy(&ours), "cudarc's default stream is the legacy stream");
    drop((theirs, their_stream));
    // The values hold cudarc's: the stream still works.
    stream.synchronize()?;
    let created = Context::create(&Device::get(0)?, cuhost::ContextFlags::empty())?;
    ensure!(created.to_cudarc().is_err(), "a created context is refused");
    Ok(())
}

/// A cudarc kernel, then one of this crate, then cudarc's again, on one cudarc stream, through
/// a cudarc slice borrowed here; then the same through a stream of this crate lent to cudarc.
fn kernels_of_both_crates_run_in_order_on_one_stream() -> TestResult {
    let (theirs, their_stream) = cudarc_side()?;
    let f = cudarc_kernel(&theirs)?;
    let ctx = Context::from_cudarc(&theirs);
    let module = Module::from_ptx(&ctx, PTX)?;
    let ours = module.function("twice_plus")?;
    let n = 4096u32;
    let cfg = LaunchConfig::for_elements(n, 256);
    let mut slice = their_stream.alloc_zeros::<f32>(n as usize)?;
    // SAFETY: twice_plus(float*, unsigned, float) over n elements of the slice.
    unsafe {
        their_stream
            .launch_builder(&f)
            .arg(&mut slice)
            .arg(&n)
            .arg(&1.0f32)
            .launch(cudarc::driver::LaunchConfig::for_num_elems(n))?
    };
    {
        let mut borrowed = CudarcSliceMut::new(&mut slice)?;
        let stream = borrowed.stream().clone();
        ensure_eq!(stream.as_raw() as usize, their_stream.cu_stream() as usize);
        // SAFETY: as above.
        unsafe { ours.launch(&stream, &cfg, (&mut borrowed.view_mut(), &n, &10.0f32))? };
    }
    // SAFETY: as above.
    unsafe {
        their_stream
            .launch_builder(&f)
            .arg(&mut slice)
            .arg(&n)
            .arg(&100.0f32)
            .launch(cudarc::driver::LaunchConfig::for_num_elems(n))?
    };
    let seen = their_stream.clone_dtoh(&slice)?;
    // 0 -> 1 -> 12 -> 124.
    ensure_eq!(seen.iter().filter(|&&v| v != 124.0).count(), 0, "first elements {:?}", &seen[..4]);

    // A stream of this crate lent to cudarc: cudarc's launch runs between two of ours.
    let stream = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let mut buffer = DeviceBuffer::<f32>::zeroed(&stream, n as usize)?;
    // SAFETY: as above.
    unsafe { ours.launch(&stream, &cfg, (&mut buffer, &n, &1.0f32))? };
    {
        let lent_stream = stream.lend_to_cudarc(&theirs)?;
        let mut lent = buffer.lend_to_cudarc_mut(&lent_stream)?;
        let mut view = lent.view_mut();
        // SAFETY: as above.
        unsafe {
            lent_stream
                .launch_builder(&f)
                .arg(&mut view)
                .arg(&n)
                .arg(&10.0f32)
                .launch(cudarc::driver::LaunchConfig::for_num_elems(n))?
        };
    }
    // SAFETY: as above.
    unsafe { ours.launch(&stream, &cfg, (&mut buffer, &n, &100.0f32))? };
    let seen = buffer.to_vec()?;
    ensure_eq!(seen.iter().filter(|&&v| v != 124.0).count(), 0, "first elements {:?}", &seen[..4]);
    no_deferred(&ctx)
}

/// A cudarc slice borrowed here and written by a kernel of this crate on a stream of this crate
/// that is held back: once the borrow ends, cudarc's copy on the slice's stream waits for that
/// kernel (the borrow's end joins the late stream into the slice's stream).
fn cudarc_slice_written_here_late() -> TestResult {
    let (theirs, their_stream) = cudarc_side()?;
    let ctx = Context::from_cudarc(&theirs);
    let module = Module::from_ptx(&ctx, PTX)?;
    let ours = module.function("twice_plus")?;
    let late = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let n = 4096u32;
    let mut slice = their_stream.clone_htod(&vec![1.0f32; n as usize])?;
    {
        let mut borrowed = CudarcSliceMut::new(&mut slice)?;
        hold(&late, 300)?;
        // SAFETY: twice_plus(float*, unsigned, float) over n elements of the slice.
        unsafe {
            ours.launch(&late, &LaunchConfig::for_elements(n, 256), (borrowed.view_mut(), &n, &3.0f32))?
        };
    }
    let seen = their_stream.clone_dtoh(&slice)?;
    ensure_eq!(seen.iter().filter(|&&v| v != 5.0).count(), 0, "first elements {:?}", &seen[..4]);
    no_deferred(&ctx)
}

/// A buffer of this crate, written late on its own stream, lent to cudarc: cudarc's kernel on
/// its stream runs after the write, and once the loan ends the buffer's stream reads what
/// cudarc wrote.
fn buffer_lent_to_cudarc() -> TestResult {
    let (theirs, their_stream) = cudarc_side()?;
    let f = cudarc_kernel(&theirs)?;
    let ctx = Context::from_cudarc(&theirs);
    let own = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let n = 4096u32;
    let mut buffer = DeviceBuffer::<f32>::from_slice(&own, &vec![1.0; n as usize])?;
    hold(&own, 300)?;
    buffer.view_mut().memset_d32_async(5.0f32.to_bits(), &own)?;
    {
        let mut lent = buffer.lend_to_cudarc_mut(&their_stream)?;
        let mut view = lent.view_mut();
        // SAFETY: twice_plus(float*, unsigned, float) over n elements of the buffer.
        unsafe {
            their_stream
                .launch_builder(&f)
                .arg(&mut view)
                .arg(&n)
                .arg(&1.0f32)
                .launch(cudarc::driver::LaunchConfig::for_num_elems(n))?
        };
        // cudarc's own read on its stream sees its write.
        let read = their_stream.clone_dtoh(lent.slice())?;
        ensure_eq!(read.iter().filter(|&&v| v != 11.0).count(), 0, "read by cudarc: {:?}", &read[..4]);
        hold(&Stream::from_cudarc(&their_stream), 300)?;
        // SAFETY: as above; queued late, after the hold.
        unsafe {
            their_stream
                .launch_builder(&f)
                .arg(&mut lent.view_mut())
                .arg(&n)
                .arg(&0.0f32)
                .launch(cudarc::driver::LaunchConfig::for_num_elems(n))?
        };
    }
    // The buffer's stream waits for cudarc's late kernel: 5 -> 11 -> 22.
    let seen = buffer.to_vec()?;
    ensure_eq!(seen.iter().filter(|&&v| v != 22.0).count(), 0, "first elements {:?}", &seen[..4]);
    no_deferred(&ctx)
}

/// The stream rule across the bridge, cudarc's side: a cudarc slice borrowed here and memset on
/// a stream of this crate held back; the borrow ends and cudarc drops the slice (freed on its
/// stream) and allocates a successor of sevens there, which its pool hands the same block. Once
/// the late memset has run, the successor must still hold its sevens.
fn cudarc_slice_not_reused_early() -> TestResult {
    let (theirs, their_stream) = cudarc_side()?;
    let ctx = Context::from_cudarc(&theirs);
    let late = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let mut slice = their_stream.alloc_zeros::<u32>(N)?;
    let address = slice.device_ptr(&their_stream).0;
    {
        let mut borrowed = CudarcSliceMut::new(&mut slice)?;
        hold(&late, 300)?;
        borrowed.view_mut().memset_d32_async(9, &late)?;
    }
    drop(slice);
    let successor = their_stream.clone_htod(&vec![7u32; N])?;
    ensure_eq!(successor.device_ptr(&their_stream).0, address, "cudarc's pool did not hand the block back");
    late.synchronize()?;
    let seen = their_stream.clone_dtoh(&successor)?;
    ensure_eq!(seen.iter().filter(|&&v| v != 7).count(), 0, "words of cudarc's new slice overwritten");
    no_deferred(&ctx)
}

/// The stream rule across the bridge, this crate's side: a buffer lent to cudarc and zeroed by
/// cudarc on another cudarc stream held back; the loan ends and the buffer is dropped, and a
/// successor of sevens is taken on its stream (the pool hands the same block back). Once the
/// late memset has run, the successor must still hold its sevens (the pool either keeps the
/// block from reuse until then or hands it back ordered after the memset).
fn lent_buffer_not_reused_early() -> TestResult {
    let (theirs, their_stream) = cudarc_side()?;
    let other = theirs.new_stream()?;
    let ctx = Context::from_cudarc(&theirs);
    let own = Stream::new(&ctx, StreamFlags::NON_BLOCKING)?;
    let mut buffer = DeviceBuffer::<u32>::new(&own, N)?;
    let address = buffer.as_raw();
    {
        let mut lent = buffer.lend_to_cudarc_mut(&their_stream)?;
        hold(&Stream::from_cudarc(&other), 300)?;
        other.memset_zeros(&mut lent.view_mut())?;
    }
    drop(buffer);
    // The pool keeps the block from reuse until the late memset has run, handing out another
    // one meanwhile; if it hands the same block back, the sevens must survive the memset.
    let successor = DeviceBuffer::<u32>::from_slice(&own, &vec![7; N])?;
    let reused = successor.as_raw() == address;
    other.synchronize()?;
    let seen = successor.to_vec()?;
    ensure_eq!(
        seen.iter().filter(|&&v| v != 7).count(),
        0,
        "words of the successor overwritten (reused: {reused})"
    );
    ensure!(CudarcSlice::new(&their_stream.alloc_zeros::<u32>(4)?).is_ok(), "a shared borrow");
    no_deferred(&ctx)
}
