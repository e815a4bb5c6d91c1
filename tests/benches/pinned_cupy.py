"""CuPy's pinned memory pool on the size tests/benches/pinned.rs measures: 1 MiB taken and given
back (cupy.cuda.alloc_pinned_memory, the default PinnedMemoryPool), median over many rounds."""
import statistics
import time


def main():
    import cupy

    cupy.cuda.runtime.setDevice(0)
    size = 1 << 20
    cupy.cuda.alloc_pinned_memory(size)  # the pool's first allocation
    rounds = []
    for _ in range(31):
        t = time.perf_counter()
        for _ in range(2000):
            p = cupy.cuda.alloc_pinned_memory(size)
            del p
        rounds.append((time.perf_counter() - t) / 2000 * 1e9)
    print(f"cupy {cupy.__version__} pinned pool, 1 MiB alloc + free: {statistics.median(rounds):.0f} ns")


if __name__ == "__main__":
    main()
