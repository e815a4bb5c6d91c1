/* NVIDIA's header-only NVTX v3, as a C program gets it: including the header compiles in the
 * whole implementation (slots, lazy initialisation, injection loading). */
#include <stdint.h>
#include <nvtx3/nvToolsExt.h>

/* n push+pop pairs; returns the last pop's value so nothing is optimised away. */
int nvtx_c_push_pop_n(const char* message, uint64_t n) {
    int last = 0;
    for (uint64_t i = 0; i < n; ++i) {
        nvtxRangePushA(message);
        last = nvtxRangePop();
    }
    return last;
}
