// The one-row FP8 GEMV on tensor cores (`gemv_fp8_<fmt>_n1m1` / `_n1m2`, Fp8Row1::Mma / Mma2;
// sm_89+ machine code only: the host launches them from the sm_90 cubin and refuses them
// elsewhere). Included by gemv_fp8.cu.
//
// Why: the one-row loop of fp8_row.cuh spends about three instructions per weight byte (a
// conversion per two codes, then an f16 -> f32 conversion and an FMA per code). At the H200's
// HBM rate that is ~40% of all issue slots, and on the 5120-row matrices Nsight found no warp
// issuing on 70% of cycles while 58% of stalls waited on weight loads: the work each arrival
// starts is on the critical path. Here a code costs half a conversion (the f16 pair goes straight
// into an mma operand) and 1/8 of an mma, and the activation's conversion is shared by the
// 16 M rows of a warp.
//
// Work: a block of FP8M_WARPS warps owns 16 M consecutive rows (row0 a multiple of 16 M, so all
// of them share one 128-row tile of scales); warp w takes the 128-column tiles w, w + 4, ... of
// all of them. With g = lane / 4 and t = lane % 4, a lane loads 16-byte chunks t and t + 4 of
// the tile from rows g and g + 8 of each 16-row slab. Those codes are A operands of
// mma.m16n8k16 (f16, exact). A dot product may take its k terms in any order that A and B share:
// lane t's k-slots 2t, 2t+1, 2t+8, 2t+9 of product (h, j) hold codes 4j .. 4j+3 of its chunk
// t + 4h. B holds the activation of the same columns in all 8 of its columns, so every output
// column is the dot product (lanes keep d[0], row g, and d[2], row g + 8).
//
// The activation: each warp converts a tile as it reaches it (lane l: float4 l % 4 of chunk
// l / 4, in tile-lane order through x4_index) after scaling it by the power of two p that puts
// the tile's largest |x| in [2^14, 2^15), so f16 neither overflows nor loses the large values'
// precision, and splits x p = hi + lo into two f16 (hi = f16(x p), lo = f16(x p - hi): ~22
// significant bits), each multiplied in its own product. A tile's products are summed in f32 by
// the tensor cores (16 chained products), then added once more in f32: acc += (scale / p) d.
// The 4 warps' sums meet in shared memory in a fixed order (deterministic).
#pragma once
#include <cuda_fp16.h>
#include <stdint.h>

#include "common.cuh"
#include "fp8_row.cuh"
#include "rms_fold.cuh"

#define FP8M_WARPS 4

// d += A B for one warp, mma.m16n8k16 with f16 operands and f32 accumulation. Fragments (PTX
// ISA), g = lane / 4, t = lane % 4: a[0] (row g, k 2t..2t+1), a[1] (row g+8, the same k),
// a[2] (row g, k 2t+8..2t+9), a[3] (row g+8, the same k); b0 (k 2t..2t+1, column g),
// b1 (k 2t+8..2t+9, column g); d[0..1] (row g, columns 2t..2t+1), d[2..3] (row g+8).
DEVI void mma_f16_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// The two f16 of a half2 as one word (element 0 low).
DEVI uint32_t half2_bits(__half2 h) {
    const __half2_raw r = h;
    return (uint32_t)r.x | ((uint32_t)r.y << 16);
}

// (a, b) = hi + lo in f16 pairs: hi = f16(a, b), lo = f16 of what hi leaves (exact in f32).
DEVI void f16_split2(float a, float b, uint32_t& hi, uint32_t& lo) {
    const __half2 h = __floats2half2_rn(a, b);
    const float2 hf = __half22float2(h);
    hi = half2_bits(h);
    lo = half2_bits(__floats2half2_rn(a - hf.x, b - hf.y));
}

// Word j of a 16-byte chunk (j a compile-time constant after unrolling).
DEVI uint32_t u4_word(const uint4& v, int j) {
    return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}

// A warp's B pieces of one tile in shared memory: chunk k (0..7), word j (0..3) at uint4
// k * 4 + (j ^ ((k >> 1) & 1)), holding {hi(codes 4j, 4j+1), hi(4j+2, 4j+3), lo(..), lo(..)}.
// The swizzle puts the 4 chunks that the lanes t = 0..3 of a quarter warp read in 4 different
// bank groups (without it chunks 0 and 2 collide).
DEVI int fp8m_slot(int k, int j) { return k * 4 + (j ^ ((k >> 1) & 1)); }

// Chunks t and t + 4 of tile T from the 2M rows `wr`, and the tile's scale (TILED). A chunk past
// the row's end re-reads the last one: its activation is zero (fp8m_x_piece), so it adds
// nothing (codes are finite: checkpoints hold no NaN / inf codes, as in fp8_row.cuh).
template <bool TILED, int M>
DEVI void fp8m_load(const uint4* const (&wr)[2 * M], const float* srow, int T, int t, int nch,
                    uint4 (&q)[4 * M], float& s) {
    const int c0 = min(8 * T + t, nch - 1), c1 = min(8 * T + t + 4, nch - 1);
#pragma unroll
    for (int r = 0; r < 2 * M; r++) {
        q[2 * r] = ld_stream16(wr[r] + c0);
        q[2 * r + 1] = ld_stream16(wr[r] + c1);
    }
    if (TILED) s = __ldg(srow + T);
}

// This lane's float4 of tile T's activation (zeros past the row's end). In tile-lane order
// (fp8_row.cuh) chunk 8T + k's word j is float4 32T + k + 8j of x, in row-major order 32T + 4k
// + j: `off` is the lane's k + 8j or 4k + j for the tiles below `lane_tiles` (whole tiles in
// tile-lane order), the row-major 4k + j past them. Loads unconditionally (clamped), so no
// branch sits in the loop.
DEVI float4 fp8m_x_piece(const float4* __restrict__ x4, int T, int lane, int off, int lane_tiles,
                         int nch) {
    const int k = lane >> 2, j = lane & 3;
    const int idx = min(32 * T + (T < lane_tiles ? off : 4 * k + j), 4 * nch - 1);
    const float4 v = __ldg(x4 + idx);
    return 8 * T + k < nch ? v : make_float4(0.f, 0.f, 0.f, 0.f);
}

// The warp's scale for a tile whose largest |x| is `mx`: p = 2^(14 - floor(log2 mx)) and 1 / p,
// p clamped to [2^-126, 2^126] so both are normal: a zero or f32-subnormal maximum takes 2^126,
// an inf / NaN one 2^-114 (non-finite values stay non-finite).
DEVI void fp8m_tile_scale(float mx, float& p, float& inv) {
    const int ef = (int)((__float_as_uint(mx) >> 23) & 0xffu);
    const int pf = min(max(268 - ef, 1), 253);
    p = __uint_as_float((uint32_t)pf << 23);
    inv = __uint_as_float((uint32_t)(254 - pf) << 23);
}

template <int E5M2, bool TILED, int M, int U, int MINB>
__device__ __forceinline__ void gemv_fp8_row1_mma(const uint8_t* __restrict__ w,
                                                  const float* __restrict__ sc, float tscale,
                                                  const float* __restrict__ x,
                                                  float* __restrict__ out, int rows, int cols,
                                                  const RmsFold& f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    constexpr int ROWS = 16 * M;
    static_assert(128 % ROWS == 0, "a block's rows share one tile of scales");
    __shared__ __align__(16) uint4 xs[FP8M_WARPS][2][32];
    __shared__ float red[FP8M_WARPS][ROWS];
    __shared__ float fold_sh[1];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int row0 = blockIdx.x * ROWS;
    const int nch = cols >> 4, ntiles = (nch + 7) >> 3, nlane = fp8_lane_chunks(nch);
    // This warp's tiles: warp, warp + FP8M_WARPS, ...
    const int nt = ntiles > warp ? (ntiles - 1 - warp) / FP8M_WARPS + 1 : 0;
    // Rows g and g + 8 of each slab; a missing last row re-reads the last one (never written).
    const uint4* wr[2 * M];
#pragma unroll
    for (int r = 0; r < 2 * M; r++) {
        const int row = min(row0 + 16 * (r >> 1) + g + 8 * (r & 1), rows - 1);
        wr[r] = reinterpret_cast<const uint4*>(w + (size_t)row * cols);
    }
    const float* srow = TILED ? sc + (size_t)(row0 >> 7) * ((cols + 127) >> 7) : nullptr;
    uint4 q[U][4 * M];
    float s[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
        s[u] = 1.f;
#pragma unroll
        for (int k = 0; k < 4 * M; k++) q[u][k] = make_uint4(0u, 0u, 0u, 0u);
        if (u < nt) fp8m_load<TILED, M>(wr, srow, warp + FP8M_WARPS * u, t, nch, q[u], s[u]);
    }
    // The activation is the previous kernel's output: read it only after the wait.
    pdl_wait();
    pdl_trigger_early<MINB>();
    float ss_in = 0.f;
    if (f.parts_in && tid < 32) ss_in = rms_fold_sum(f.parts_in, f.nparts);
    float acc[2 * M];
#pragma unroll
    for (int r = 0; r < 2 * M; r++) acc[r] = 0.f;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const int lane_tiles = nlane >> 3;
    const int xoff = nlane > 0 ? (lane >> 2) + 8 * (lane & 3) : 4 * (lane >> 2) + (lane & 3);
    float4 xn = fp8m_x_piece(x4, warp, lane, xoff, lane_tiles, nch);
    for (int i0 = 0; i0 < nt; i0 += U) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int i = i0 + u;
            if (i >= nt) break;  // the same i in every lane: no divergence at the mma
            const float4 xv = xn;
            if (i + 1 < nt) xn = fp8m_x_piece(x4, warp + FP8M_WARPS * (i + 1), lane, xoff, lane_tiles, nch);
            float p, inv;
            fp8m_tile_scale(warp_max(fmaxf(fmaxf(fabsf(xv.x), fabsf(xv.y)),
                                           fmaxf(fabsf(xv.z), fabsf(xv.w)))),
                            p, inv);
            uint4 piece;
            f16_split2(xv.x * p, xv.y * p, piece.x, piece.z);
            f16_split2(xv.z * p, xv.w * p, piece.y, piece.w);
            // Two buffers: the one written here was last read two tiles ago, before the
            // __syncwarp of the tile between.
            uint4* buf = xs[warp][i & 1];
            buf[fp8m_slot(lane >> 2, lane & 3)] = piece;
            __syncwarp();
            // Two independent chains of 8 products per slab (hi and lo): one chain of 16 would
            // wait on every product's latency in turn; four spill at 168 registers.
            float d[M][2][4];
#pragma unroll
            for (int m = 0; m < M; m++)
#pragma unroll
                for (int c = 0; c < 2; c++) d[m][c][0] = d[m][c][1] = d[m][c][2] = d[m][c][3] = 0.f;
#pragma unroll
            for (int h = 0; h < 2; h++) {
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const uint4 b = buf[fp8m_slot(t + 4 * h, j)];
#pragma unroll
                    for (int m = 0; m < M; m++) {
                        uint32_t a[4];
                        fp8x4_f16x2<E5M2>(u4_word(q[u][4 * m + h], j), a[0], a[2]);
                        fp8x4_f16x2<E5M2>(u4_word(q[u][4 * m + 2 + h], j), a[1], a[3]);
                        mma_f16_m16n8k16(d[m][0], a, b.x, b.y);
                        mma_f16_m16n8k16(d[m][1], a, b.z, b.w);
                    }
                }
            }
            const float fct = (TILED ? s[u] : 1.f) * inv;
#pragma unroll
            for (int m = 0; m < M; m++) {
                const float rg = d[m][0][0] + d[m][1][0], rg8 = d[m][0][2] + d[m][1][2];
                acc[2 * m] = fmaf(fct, rg, acc[2 * m]);
                acc[2 * m + 1] = fmaf(fct, rg8, acc[2 * m + 1]);
            }
            // This slot's next tile, into the registers just read.
            if (i + U < nt)
                fp8m_load<TILED, M>(wr, srow, warp + FP8M_WARPS * (i + U), t, nch, q[u], s[u]);
        }
    }
    pdl_trigger_late<MINB>();
    if (t == 0) {
#pragma unroll
        for (int m = 0; m < M; m++) {
            red[warp][16 * m + g] = acc[2 * m];
            red[warp][16 * m + g + 8] = acc[2 * m + 1];
        }
    }
    __syncthreads();
    float v = 0.f;
    if (tid < ROWS) {
#pragma unroll
        for (int k = 0; k < FP8M_WARPS; k++) v += red[k][tid];
        if (!TILED) v *= tscale;
    }
    rms_fold_gemv_end(v, tid < ROWS && row0 + tid < rows, row0 + tid, ss_in, x, cols, out, f,
                      fold_sh);
#else
    __trap();  // no f16 mma / e4m3 conversion here: the host never launches it
#endif
}
