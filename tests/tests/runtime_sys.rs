//! Real calls through `cudart-sys`, checked against the driver.

use cuda_tests::{TestResult, drv, ensure, ensure_eq, gpu, rt};
use cuhost_cudart_sys as cudart;
use cuhost_driver_sys as sys;

fn main() {
    cuda_tests::run(&[
        gpu("malloc_memcpy_free_round_trip", malloc_memcpy_free_round_trip),
        gpu("device_properties_match_driver_attributes", device_properties_match_driver_attributes),
        gpu("runtime_errors_come_back_as_statuses", runtime_errors_come_back_as_statuses),
    ]);
}

fn malloc_memcpy_free_round_trip() -> TestResult {
    let host: Vec<f64> = (0..10_000).map(|i| f64::from(i) * 0.5).collect();
    let bytes = host.len() * 8;
    let mut back = vec![0f64; host.len()];
    let mut ptr = std::ptr::null_mut();
    // SAFETY: sizes match the host buffers; the device buffer is freed at the end.
    unsafe {
        rt("cudaSetDevice", cudart::cudaSetDevice(0))?;
        rt("cudaMalloc", cudart::cudaMalloc(&mut ptr, bytes))?;
        rt(
            "cudaMemcpy",
            cudart::cudaMemcpy(
                ptr,
                host.as_ptr().cast(),
                bytes,
                cudart::cudaMemcpyKind::cudaMemcpyHostToDevice,
            ),
        )?;
        rt(
            "cudaMemcpy",
            cudart::cudaMemcpy(
                back.as_mut_ptr().cast(),
                ptr,
                bytes,
                cudart::cudaMemcpyKind::cudaMemcpyDeviceToHost,
            ),
        )?;
        rt("cudaFree", cudart::cudaFree(ptr))?;
    }
    ensure_eq!(back, host);
    Ok(())
}

fn attribute(attr: sys::CUdevice_attribute) -> Result<i32, cuda_tests::Failed> {
    let mut v = 0;
    // SAFETY: one int out-parameter; device 0 exists (the harness checked).
    drv("cuDeviceGetAttribute", unsafe { sys::cuDeviceGetAttribute(&mut v, attr, 0) })?;
    Ok(v)
}

fn device_properties_match_driver_attributes() -> TestResult {
    let mut prop = cudart::cudaDeviceProp::default();
    let mut version = 0;
    // SAFETY: one out-parameter.
    rt("cudaRuntimeGetVersion", unsafe { cudart::cudaRuntimeGetVersion(&mut version) })?;
    // SAFETY: one struct out-parameter.
    let status = unsafe { cudart::cudaGetDeviceProperties(&mut prop, 0) };
    if version < 13000 {
        // `cudaDeviceProp` has another layout in CUDA 12: the call is refused, never made.
        ensure_eq!(status, cudart::cudaError_t::cudaErrorSymbolNotFound);
        let why = cudart::load_error("cudaGetDeviceProperties").map(|e| e.to_string()).unwrap_or_default();
        ensure!(why.contains("13.0"), "the refusal does not name the version needed: {why:?}");
        return Ok(());
    }
    rt("cudaGetDeviceProperties", status)?;
    drv("cuInit", unsafe { sys::cuInit(0) })?;
    use sys::CUdevice_attribute as A;
    ensure_eq!(prop.major, attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?);
    ensure_eq!(prop.minor, attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?);
    ensure_eq!(prop.multiProcessorCount, attribute(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?);
    ensure_eq!(prop.maxThreadsPerBlock, attribute(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?);
    ensure_eq!(prop.warpSize, attribute(A::CU_DEVICE_ATTRIBUTE_WARP_SIZE)?);
    ensure_eq!(prop.pciBusID, attribute(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?);
    let mut total = 0usize;
    drv("cuDeviceTotalMem", unsafe { sys::cuDeviceTotalMem(&mut total, 0) })?;
    ensure_eq!(prop.totalGlobalMem, total);
    let mut name = [0 as std::ffi::c_char; 256];
    drv("cuDeviceGetName", unsafe { sys::cuDeviceGetName(name.as_mut_ptr(), 256, 0) })?;
    // SAFETY: both names are NUL-terminated within their arrays.
    let (a, b) =
        unsafe { (std::ffi::CStr::from_ptr(prop.name.as_ptr()), std::ffi::CStr::from_ptr(name.as_ptr())) };
    ensure_eq!(a, b);
    Ok(())
}

fn runtime_errors_come_back_as_statuses() -> TestResult {
    let mut count = 0;
    // SAFETY: plain out-parameter calls; the invalid device is refused by the runtime.
    unsafe {
        rt("cudaGetDeviceCount", cudart::cudaGetDeviceCount(&mut count))?;
        let status = cudart::cudaSetDevice(count + 7);
        ensure_eq!(status, cudart::cudaError_t::cudaErrorInvalidDevice);
        let name = std::ffi::CStr::from_ptr(cudart::cudaGetErrorName(status));
        ensure_eq!(name.to_str().ok(), Some("cudaErrorInvalidDevice"));
        let mut version = 0;
        rt("cudaRuntimeGetVersion", cudart::cudaRuntimeGetVersion(&mut version))?;
        ensure!(version >= 12000, "runtime version {version}");
    }
    Ok(())
}
