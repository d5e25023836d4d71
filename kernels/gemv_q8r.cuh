// The one-row dp4a GEMV's core, several rows per block with K split over the block: gemv.cu's
// gemv_q8r_* (the n = 1 default) and gemv_q8_epi.cu's kernels with an epilogue share it.
// Block = T threads over R weight rows. Every thread takes work items tid, tid + T, ... of all
// the block's rows, so the activation it loads serves R rows (a quarter of the L2 traffic of a
// warp per row at R = 4), each warp's loads of one row are 512 contiguous bytes, and each thread
// has R x PF independent loads in flight. Warp sums meet in shared memory. A 4096-column row is
// one loop pass at T = 128.
#pragma once
#include "common.cuh"
#include "dot_q8.cuh"
#include "dot_formats.cuh"

#define GEMVR_THREADS 128
#define GEMVR_ROWS 4

// X-macro over every format with a dp4a work item: (suffix, struct).
#define FOR_EACH_Q8(X) \
    X(q4_0, DotQ4_0)   \
    X(q4_1, DotQ4_1)   \
    X(q5_0, DotQ5_0)   \
    X(q5_1, DotQ5_1)   \
    X(q8_0, DotQ8_0)   \
    X(iq4_nl, DotIQ4_NL) \
    X(q2_k, DotQ2_K)   \
    X(q3_k, DotQ3_K)   \
    X(q4_k, DotQ4_K)   \
    X(q5_k, DotQ5_K)   \
    X(q6_k, DotQ6_K)   \
    X(iq4_xs, DotIQ4_XS)

// Weight rows rix[0..R) (each < rows) against the quantized activation row: warp w's sum for
// row i lands in part[w][i]; returns after the barrier, so every thread may read `part`. PF work
// items per thread and row per pass. MINB: the blocks per SM the kernel's __launch_bounds__
// guarantee (common.cuh pdl_is_early). `after_wait()` runs once right after pdl_wait(), before
// the first products: an epilogue's loads of the previous kernel's output issued there wait
// alongside the weight loads instead of after them.
template <typename D, int T, int R, int PF, int MINB, typename AfterWait>
DEVI void gemv_q8r_rows(const uint8_t* __restrict__ w, const int8_t* __restrict__ xq,
                        const float* __restrict__ xd, const float* __restrict__ xs, int rows,
                        int cols, const int (&rix)[R], float (&part)[T / 32][R],
                        AfterWait after_wait) {
    using F = typename D::Fmt;
    int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    int nb = cols / D::QK, items = nb * D::TPB;
    const uint8_t *row[R], *aux[R];
#pragma unroll
    for (int i = 0; i < R; i++) row_ptrs<F>(w, rows, nb, rix[i], row[i], aux[i]);
    float acc[R];
#pragma unroll
    for (int i = 0; i < R; i++) acc[i] = 0.f;
    Q8Act a{xq, xd, xs};
    bool waited = false;
    for (int it0 = tid; it0 < items; it0 += T * PF) {
        typename D::Raw raw[PF][R];
#pragma unroll
        for (int u = 0; u < PF; u++) {
            int it = it0 + T * u;
            if (it < items) {
#pragma unroll
                for (int i = 0; i < R; i++) raw[u][i] = D::load(row[i], aux[i], it / D::TPB, it % D::TPB);
            }
        }
        // load() reads weights only; the activation blocks come from the previous kernels.
        if (!waited) {
            pdl_wait();
            pdl_trigger_early<MINB>();
            after_wait();
            waited = true;
        }
#pragma unroll
        for (int u = 0; u < PF; u++) {
            int it = it0 + T * u;
            if (it < items) {
#pragma unroll
                for (int i = 0; i < R; i++) acc[i] += D::dot(raw[u][i], it / D::TPB, it % D::TPB, a);
            }
        }
    }
    if (!waited) {
        pdl_wait();
        pdl_trigger_early<MINB>();
        after_wait();
    }
    pdl_trigger_late<MINB>();
#pragma unroll
    for (int i = 0; i < R; i++) {
        float s = warp_sum(acc[i]);
        if (lane == 0) part[warp][i] = s;
    }
    __syncthreads();
}

// Row i's total over the block's warps, added in warp order (deterministic).
template <int T, int R> DEVI float gemv_q8r_total(const float (&part)[T / 32][R], int i) {
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < T / 32; k++) s += part[k][i];
    return s;
}

// Blocks per SM to fit: 8 (64 registers, a 4096-row matrix in one wave) where the work item
// compiles without spills at 64 registers, else 1 (the compiler's choice).
template <typename D> struct Q8rMinBlocks { static constexpr int value = 1; };
template <> struct Q8rMinBlocks<DotQ4_0> { static constexpr int value = 8; };
template <> struct Q8rMinBlocks<DotQ4_1> { static constexpr int value = 8; };
template <> struct Q8rMinBlocks<DotQ8_0> { static constexpr int value = 8; };
template <> struct Q8rMinBlocks<DotQ2_K> { static constexpr int value = 8; };
template <> struct Q8rMinBlocks<DotQ4_K> { static constexpr int value = 8; };
