//! Real calls through `nccl-sys`: the version, and an all-reduce on a one-rank communicator.

use cuda_tests::{TestResult, ensure, ensure_eq, gpu, rt};
use cuhost_cudart_sys as cudart;
use cuhost_nccl_sys as nccl;

fn main() {
    cuda_tests::run(&[
        gpu("version_is_nccl_2", version_is_nccl_2),
        gpu("one_rank_all_reduce_sums", one_rank_all_reduce_sums),
    ]);
}

fn ok(call: &str, status: nccl::ncclResult_t) -> TestResult {
    if status == nccl::ncclResult_t::ncclSuccess {
        Ok(())
    } else {
        Err(format!("{call} failed: {}", status.name().unwrap_or("unknown status")).into())
    }
}

fn version_is_nccl_2() -> TestResult {
    let mut v = 0;
    // SAFETY: one int out-parameter.
    ok("ncclGetVersion", unsafe { nccl::ncclGetVersion(&mut v) })?;
    // NCCL encodes 2.x.y as 2*10000 + x*100 + y.
    ensure!((20000..30000).contains(&v), "unexpected NCCL version code {v}");
    Ok(())
}

fn one_rank_all_reduce_sums() -> TestResult {
    let n = 1024usize;
    let host: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut back = vec![0f32; n];
    // SAFETY: buffers are sized for `n` floats; the communicator covers device 0 only and is
    // destroyed before the buffers are freed.
    unsafe {
        rt("cudaSetDevice", cudart::cudaSetDevice(0))?;
        let (mut send, mut recv) = (std::ptr::null_mut(), std::ptr::null_mut());
        rt("cudaMalloc", cudart::cudaMalloc(&mut send, n * 4))?;
        rt("cudaMalloc", cudart::cudaMalloc(&mut recv, n * 4))?;
        rt(
            "cudaMemcpy",
            cudart::cudaMemcpy(
                send,
                host.as_ptr().cast(),
                n * 4,
                cudart::cudaMemcpyKind::cudaMemcpyHostToDevice,
            ),
        )?;
        let mut comm: nccl::ncclComm_t = std::ptr::null_mut();
        let devs = [0i32];
        ok("ncclCommInitAll", nccl::ncclCommInitAll(&mut comm, 1, devs.as_ptr()))?;
        let mut ranks = 0;
        ok("ncclCommCount", nccl::ncclCommCount(comm, &mut ranks))?;
        ensure_eq!(ranks, 1);
        ok(
            "ncclAllReduce",
            nccl::ncclAllReduce(
                send,
                recv,
                n,
                nccl::ncclDataType_t::ncclFloat32,
                nccl::ncclRedOp_t::ncclSum,
                comm,
                std::ptr::null_mut(),
            ),
        )?;
        rt("cudaDeviceSynchronize", cudart::cudaDeviceSynchronize())?;
        rt(
            "cudaMemcpy",
            cudart::cudaMemcpy(
                back.as_mut_ptr().cast(),
                recv,
                n * 4,
                cudart::cudaMemcpyKind::cudaMemcpyDeviceToHost,
            ),
        )?;
        ok("ncclCommDestroy", nccl::ncclCommDestroy(comm))?;
        rt("cudaFree", cudart::cudaFree(send))?;
        rt("cudaFree", cudart::cudaFree(recv))?;
    }
    ensure_eq!(back, host);
    Ok(())
}
