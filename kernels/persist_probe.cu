// Measurement probe for docs/architecture/persistent-decode.md (plan step 1; no model uses it):
// what a grid-wide barrier costs, and whether one-row FP8 GEMVs chained inside one persistent
// launch, each loading its first weights before the barrier that publishes its input, beat the
// same GEMVs as separate launches with programmatic dependent launch.
//
//  * persist_barriers(bar, rounds): `rounds` grid barriers and nothing else.
//  * persist_fp8_chain(w1, s1, w2, s2, xa, xb, r1, c1, layers, bar): for each layer l,
//    xb = W1_l xa then xa = W2_l xb, W1_l [r1, c1] and W2_l [c1, r1] the l-th row blocks of the
//    stacked weights w1 [layers * r1, c1] and w2 [layers * c1, r1] (FP8 E4M3 with 128x128 tile
//    scales in the device layout of cuda/matmul_fp8.rs; r1 and c1 multiples of 128), each phase
//    a warp per 4 rows with 6 steps of loads in flight (the main loop of the deep n1d6 GEMV,
//    fp8_row.cuh). The barrier sits between a phase's weight preload and its first activation
//    read (row1_accumulate's after_wait).
//  * persist_fp8_chain_late: the same with the barrier before the phase's first weight loads,
//    to tell the barrier's saving from the preload's.
//  * probe_read_rows(w, rows, cols, sink): the one-row GEMV's weight reads alone (a warp per 4
//    rows, 6 steps of 16-byte loads in flight, as n1d6) with no decode, activation or FMA: an
//    xor of the words. probe_read_stream(w, n16, sink): the same bytes read grid-stride, 8
//    loads in flight per thread. Together with the GEMV on the same weight they tell the
//    memory system's time for one such read from the kernel's own (tests/cuda_bench_persist.rs,
//    session 12). sink[0] is written only if the xor hits a value random data never gives.
//
// Launch (cuda/persist_probe.rs): block 128, every block resident at once (at most
// PERSIST_MINB per SM), max(r1, c1) / 4 warps at most; bar: two words zeroed once (every
// launch leaves the count at zero; the generation may start anywhere).
#include "common.cuh"
#include "fp8_row.cuh"

#define PERSIST_MINB 3

DEVI unsigned ld_acquire_u32(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// Every block of the grid waits here until all have arrived. bar[0] counts arrivals, bar[1] is
// the generation: a block reads the generation before it arrives, the last arrival resets the
// count and advances the generation, the others spin until it moves. Writes before the barrier
// are visible to reads after it through L2 (the fences; readers use ld.global.cg).
DEVI void grid_barrier(unsigned* bar) {
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned gen = ld_acquire_u32(bar + 1);
        __threadfence();
        if (atomicAdd(bar, 1u) == gridDim.x - 1) {
            atomicExch(bar, 0u);
            __threadfence();
            atomicAdd(bar + 1, 1u);
        } else {
            while (ld_acquire_u32(bar + 1) == gen) {
            }
        }
        __threadfence();
    }
    __syncthreads();
}

// One phase: out = W x for this warp's 4 rows (if it has any). Every thread of every block
// passes the barrier exactly once and at one place in the code: after its first weight loads
// (PRELOAD; a warp without rows runs the same main loop over no columns, so it loads nothing and
// still meets the barrier there) or before them.
template <bool PRELOAD>
DEVI void chain_phase(const uint8_t* w, const float* sc, const float* x, float* out, int rows,
                      int cols, unsigned* bar) {
    const int lane = threadIdx.x & 31;
    const int row0 = (blockIdx.x * (FP8R_THREADS / 32) + threadIdx.x / 32) * 4;
    const bool has = row0 < rows;
    if (!PRELOAD) grid_barrier(bar);
    const uint4* wr[4];
    const float* srow[1];
    row1_group<true, 4>(w, sc, rows, cols, has ? row0 : 0, wr, srow);
    float acc[4];
    row1_accumulate<0, true, 1, 4, 1, 6, 0, true>(wr, srow, x, has ? cols >> 4 : 0, lane, acc,
                                                  [&] {
                                                      if (PRELOAD) grid_barrier(bar);
                                                  });
    const float v = row1_lane_total<4>(acc, lane, 1.f);
    if (has && lane < 4 && row0 + lane < rows) out[row0 + lane] = v;
}

template <bool PRELOAD>
DEVI void chain(const uint8_t* w1, const float* s1, const uint8_t* w2, const float* s2, float* xa,
                float* xb, int r1, int c1, int layers, unsigned* bar) {
    const size_t tr = r1 >> 7, tc = c1 >> 7;  // 128-row/column tiles of W1_l
    for (int l = 0; l < layers; l++) {
        chain_phase<PRELOAD>(w1 + (size_t)l * r1 * c1, s1 + l * tr * tc, xa, xb, r1, c1, bar);
        chain_phase<PRELOAD>(w2 + (size_t)l * c1 * r1, s2 + l * tc * tr, xb, xa, c1, r1, bar);
    }
}

#define PERSIST_CHAIN(name, preload)                                                            \
    extern "C" __global__ void __launch_bounds__(FP8R_THREADS, PERSIST_MINB)                    \
        name(const uint8_t* w1, const float* s1, const uint8_t* w2, const float* s2, float* xa, \
             float* xb, int r1, int c1, int layers, unsigned* bar) {                           \
        chain<preload>(w1, s1, w2, s2, xa, xb, r1, c1, layers, bar);                           \
    }
PERSIST_CHAIN(persist_fp8_chain, true)
PERSIST_CHAIN(persist_fp8_chain_late, false)

extern "C" __global__ void __launch_bounds__(FP8R_THREADS) persist_barriers(unsigned* bar,
                                                                            int rounds) {
    for (int i = 0; i < rounds; i++) grid_barrier(bar);
}

// See the top of the file. Grid: rows / 16 blocks of 128 threads (n1d6's).
extern "C" __global__ void __launch_bounds__(FP8R_THREADS, 3)
    probe_read_rows(const uint8_t* w, int rows, int cols, unsigned* sink) {
    constexpr int R = 4, U = 6, STEP = 32 * U;
    const int lane = threadIdx.x & 31;
    const int row0 = (blockIdx.x * (FP8R_THREADS / 32) + threadIdx.x / 32) * R;
    if (row0 >= rows) return;
    const uint4* wr[R];
    const float* srow[1];
    row1_group<false, R>(w, nullptr, rows, cols, row0, wr, srow);
    const int nch = cols >> 4;
    uint4 q[U][R];
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int c = lane + 32 * u;
#pragma unroll
        for (int r = 0; r < R; r++) q[u][r] = c < nch ? ld_stream16(wr[r] + c) : make_uint4(0u, 0u, 0u, 0u);
    }
    unsigned acc = 0u;
    for (int c0 = lane; c0 < nch; c0 += STEP) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + 32 * u;
            if (c >= nch) break;
#pragma unroll
            for (int r = 0; r < R; r++) acc ^= q[u][r].x ^ q[u][r].y ^ q[u][r].z ^ q[u][r].w;
            const int cn = c + STEP;
            if (cn < nch) {
#pragma unroll
                for (int r = 0; r < R; r++) q[u][r] = ld_stream16(wr[r] + cn);
            }
        }
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;
}

// See the top of the file. Grid-stride over n16 16-byte words, 8 loads in flight per thread.
extern "C" __global__ void __launch_bounds__(256) probe_read_stream(const uint4* w, long long n16,
                                                                    unsigned* sink) {
    constexpr int U = 8;
    const long long nt = (long long)gridDim.x * blockDim.x;
    unsigned acc = 0u;
    for (long long i0 = (long long)blockIdx.x * blockDim.x + threadIdx.x; i0 < n16; i0 += nt * U) {
        uint4 q[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const long long i = i0 + nt * u;
            q[u] = i < n16 ? ld_stream16(w + i) : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int u = 0; u < U; u++) acc ^= q[u].x ^ q[u].y ^ q[u].z ^ q[u].w;
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;
}
