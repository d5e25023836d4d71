// L2 prefetch of decode GEMV weights. Batch-1 decode leaves HBM idle while the small kernels
// between two GEMVs (norms, RoPE, attention, SwiGLU) run; the backend launches prefetch_l2 for
// the next GEMV's weight on a side stream during them, so part of that weight is already in L2
// when the GEMV starts. The kernel reads nothing into registers and writes nothing: it only
// changes what the L2 holds, so results cannot change.
// Self-contained (no common.cuh): its PTX does not change with the other kernels' headers.
#include <stdint.h>

// Brings [base, base + bytes) into L2. The grid is small on purpose (it runs beside the small
// kernels and must leave the SMs to them): each thread takes `chunk`-byte pieces, grid-strided.
// sm_90: one asynchronous bulk prefetch per piece (the TMA unit moves it; base 16-byte aligned,
// bytes and chunk multiples of 16, which the host guarantees). Older GPUs: a
// prefetch.global.L2 per 128-byte line of the piece.
extern "C" __global__ void prefetch_l2(const uint8_t* __restrict__ base, unsigned long long bytes,
                                       unsigned int chunk) {
    const unsigned long long threads = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (unsigned long long off = t * chunk; off < bytes; off += threads * chunk) {
        const unsigned long long left = bytes - off;
        const unsigned int n = left < chunk ? (unsigned int)left : chunk;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(base + off), "r"(n)
                     : "memory");
#else
        for (unsigned int l = 0; l < n; l += 128)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(base + off + l));
#endif
    }
}

// Busy-waits one thread for `ns` nanoseconds of the global timer: the benchmarks' stand-in for
// the small kernels between two GEMVs (HBM idle, the SMs almost free).
extern "C" __global__ void spin_ns(unsigned long long ns) {
    if (threadIdx.x != 0) return;
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
