"""CuPy's RawKernel on the source of tests/benches/compile.rs: a cold compile (a fresh cache
directory, nothing in memory) and a cached one (the same source again: CuPy's in-memory cache),
each until the kernel is loaded. Prints median milliseconds; run on the GPU host beside
`.bench/run compile`."""
import os
import statistics
import tempfile
import time

SOURCE = r'''
extern "C" __global__ void saxpy(float a, const float *x, float *y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
'''


def main():
    os.environ["CUPY_CACHE_DIR"] = tempfile.mkdtemp(prefix="cupy-cache-")
    import cupy

    cupy.cuda.runtime.setDevice(0)
    cold = []
    for i in range(5):
        # A different comment makes a different source: a real compile each time.
        source = SOURCE + f"// round {i} {time.time_ns()}\n"
        t = time.perf_counter()
        cupy.RawKernel(source, "saxpy").kernel  # compiles (NVRTC) and loads
        cold.append((time.perf_counter() - t) * 1e3)
    cupy.RawKernel(SOURCE, "saxpy").kernel
    warm = []
    for _ in range(200):
        t = time.perf_counter()
        cupy.RawKernel(SOURCE, "saxpy").kernel
        warm.append((time.perf_counter() - t) * 1e3)
    print(f"cupy {cupy.__version__} RawKernel cold compile + load: {statistics.median(cold):.2f} ms")
    print(f"cupy RawKernel cached (same source, new RawKernel): {statistics.median(warm) * 1e3:.1f} us")


if __name__ == "__main__":
    main()
