// Greedy sampling on the device: index of each row's largest value (first index on ties; NaN
// never wins). `multi`: grid (slices, rows) of GREEDY_THREADS, greedy.cuh's multi-block
// reduction; else the previous shape (grid (1, rows), one block of 1024 threads per row), kept
// for A/B timing (POCKET_SMALL_KERNELS=old).
#include "greedy.cuh"

DEVI void better(float& bv, int& bi, float v, int i) {
    if (v > bv || (v == bv && i < bi)) {
        bv = v;
        bi = i;
    }
}

extern "C" __global__ void argmax_rows(const float* __restrict__ x, uint32_t* __restrict__ out, int vocab,
                                       int multi) {
    if (multi) {
        greedy_rows<false>(x, out, nullptr, vocab);
        return;
    }
    const float* row = x + (size_t)blockIdx.y * vocab;
    pdl_wait();
    pdl_trigger();
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        float v = row[i];
        if (!isnan(v)) better(bv, bi, v, i);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        better(bv, bi, ov, oi);
    }
    __shared__ float sv[32];
    __shared__ int si[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) {
        sv[warp] = bv;
        si[warp] = bi;
    }
    __syncthreads();
    if (warp == 0) {
        int nw = blockDim.x / 32;
        bv = lane < nw ? sv[lane] : -INFINITY;
        bi = lane < nw ? si[lane] : 0x7fffffff;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            better(bv, bi, ov, oi);
        }
        // An all-NaN row has no winner; report index 0.
        if (lane == 0) out[blockIdx.y] = bi == 0x7fffffff ? 0u : (uint32_t)bi;
    }
}
