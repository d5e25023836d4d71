// Multi-block greedy pick over rows of logits, shared by argmax.cu (index only) and sample.cu
// (index and log-probability). Block (s, r) of a grid (slices, rows) reduces slice s of row r
// with 16-byte loads to (max, first index of the max, sum of exp(v - max)); the last block of
// the row to finish (an atomic counter) merges the slices' partials in slice order and writes
// the result. No host sync and no allocation: the partials live in this module's globals and
// the last block resets the row's counter, so the launch can be captured in a CUDA graph and
// replayed. A module's globals belong to one backend, whose single stream orders its launches
// (under PDL the next launch waits in pdl_wait before it touches them).
//
// The pick equals a sequential scan's: the largest value, the lowest index among equal ones,
// NaN never wins (an all-NaN row picks 0). The log-normalizer is max + log(sum exp(v - max))
// over non-NaN values, accumulated online per thread and merged in a fixed order, so it is
// deterministic; it differs from the one-block kernel's in the last bits of the sum only.
#pragma once
#include "common.cuh"

#define GREEDY_THREADS 256
#define GREEDY_MAX_SLICES 128
#define GREEDY_MAX_ROWS 64

__device__ float g_greedy_m[GREEDY_MAX_ROWS * GREEDY_MAX_SLICES];
__device__ float g_greedy_s[GREEDY_MAX_ROWS * GREEDY_MAX_SLICES];
__device__ int g_greedy_i[GREEDY_MAX_ROWS * GREEDY_MAX_SLICES];
__device__ unsigned int g_greedy_done[GREEDY_MAX_ROWS];

// Adds element (v, i) to a running (max m, its first index bi, sum s of exp(x - m)). Elements
// come in increasing index order per thread, so the index tie only matters for -inf.
template <bool LP>
DEVI void greedy_add(float& m, float& s, int& bi, float v, int i) {
    if (v > m) {
        if (LP) s = s * expf(m - v) + 1.f;  // s = 0 while m = -inf
        m = v;
        bi = i;
    } else {
        if (v == m && i < bi) bi = i;
        if (LP && v > -INFINITY) s += expf(v - m);
    }
}

// Merges another running triple into (m, s, bi): larger max, then lower index; sums rescaled.
template <bool LP>
DEVI void greedy_merge(float& m, float& s, int& bi, float m2, float s2, int i2) {
    if (LP) {
        float mm = fmaxf(m, m2);
        if (mm > -INFINITY)
            s = (s != 0.f ? s * expf(m - mm) : 0.f) + (s2 != 0.f ? s2 * expf(m2 - mm) : 0.f);
    }
    if (m2 > m || (m2 == m && i2 < bi)) {
        m = m2;
        bi = i2;
    }
}

// Block-wide merge in a fixed shape (lanes by xor, then warps in order); the result is valid in
// thread 0. `sm`, `ss`, `si` hold 32 entries.
template <bool LP>
DEVI void greedy_block(float& m, float& s, int& bi, float* sm, float* ss, int* si) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        int i2 = __shfl_xor_sync(0xffffffffu, bi, o);
        greedy_merge<LP>(m, s, bi, m2, s2, i2);
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();  // a previous call's readers are done with the slots
    if (lane == 0) {
        sm[warp] = m;
        ss[warp] = s;
        si[warp] = bi;
    }
    __syncthreads();
    if (warp == 0) {
        m = lane < nw ? sm[lane] : -INFINITY;
        s = lane < nw ? ss[lane] : 0.f;
        bi = lane < nw ? si[lane] : 0x7fffffff;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
            int i2 = __shfl_xor_sync(0xffffffffu, bi, o);
            greedy_merge<LP>(m, s, bi, m2, s2, i2);
        }
    }
}

// Row blockIdx.y (< GREEDY_MAX_ROWS) of `logits` [rows, vocab]: ids[row] and, with LP,
// logprobs[row] = logits[row][id] - log_z. gridDim.x <= GREEDY_MAX_SLICES slices.
template <bool LP>
DEVI void greedy_rows(const float* __restrict__ logits, uint32_t* __restrict__ ids,
                      float* __restrict__ logprobs, int vocab) {
    __shared__ float sm[32], ss[32];
    __shared__ int si[32];
    __shared__ bool last;
    const int row = blockIdx.y, slice = blockIdx.x, ns = gridDim.x, tid = threadIdx.x;
    const float* l = logits + (size_t)row * vocab;
    pdl_wait();  // the logits are the previous kernel's output
    pdl_trigger();
    float m = -INFINITY, s = 0.f;
    int bi = 0x7fffffff;
    if ((vocab & 3) == 0 && ((uintptr_t)logits & 15) == 0) {  // rows start 16-byte aligned
        const int n4 = vocab >> 2, per = (n4 + ns - 1) / ns;
        const int b = slice * per, e = min(n4, b + per);
        const float4* l4 = (const float4*)l;
#pragma unroll 2
        for (int j = b + tid; j < e; j += blockDim.x) {
            float4 q = l4[j];
            greedy_add<LP>(m, s, bi, q.x, 4 * j);
            greedy_add<LP>(m, s, bi, q.y, 4 * j + 1);
            greedy_add<LP>(m, s, bi, q.z, 4 * j + 2);
            greedy_add<LP>(m, s, bi, q.w, 4 * j + 3);
        }
    } else {
        const int per = (vocab + ns - 1) / ns, b = slice * per, e = min(vocab, b + per);
        for (int j = b + tid; j < e; j += blockDim.x) greedy_add<LP>(m, s, bi, l[j], j);
    }
    greedy_block<LP>(m, s, bi, sm, ss, si);
    if (ns > 1) {
        const int p = row * GREEDY_MAX_SLICES;
        if (tid == 0) {
            g_greedy_m[p + slice] = m;
            g_greedy_s[p + slice] = s;
            g_greedy_i[p + slice] = bi;
            __threadfence();  // the partial is visible before the count says so
            last = atomicAdd(&g_greedy_done[row], 1u) == (unsigned)ns - 1;
        }
        __syncthreads();
        if (!last) return;
        __threadfence();
        // Partial t in thread t: the merge order is fixed whichever block came last.
        m = tid < ns ? __ldcg(&g_greedy_m[p + tid]) : -INFINITY;
        s = tid < ns ? __ldcg(&g_greedy_s[p + tid]) : 0.f;
        bi = tid < ns ? __ldcg(&g_greedy_i[p + tid]) : 0x7fffffff;
        greedy_block<LP>(m, s, bi, sm, ss, si);
        if (tid == 0) g_greedy_done[row] = 0u;  // ready for the next launch (graph replays too)
    }
    if (tid == 0) {
        // No winner (all NaN; for LP also all -inf, as the one-block sampler): index 0.
        int id = (bi == 0x7fffffff || (LP && m == -INFINITY)) ? 0 : bi;
        ids[row] = (uint32_t)id;
        if (LP) logprobs[row] = l[id] - (m + logf(s));
    }
}
