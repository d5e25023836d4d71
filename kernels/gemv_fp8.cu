// FP8 weights (E4M3 "fn" and E5M2), row-major [rows, cols], one byte per weight, with either one
// f32 scale per tensor (applied to the result) or f32 scales per 128x128 tile
// (`weight_scale_inv`, [ceil(rows/128), ceil(cols/128)], value = fp8 * scale).
//
//  * gemv_fp8_<e4m3|e5m2>_<t|b>_<n1|n1w8|n1d|n1w8d|n1d6|n1w8s2>: decode GEMV for one activation
//    row (f32 activation and accumulation), one template (gemv_fp8_row1, below) with a warp per 4
//    rows (n1, 16 rows per 128-thread block) or per 8 rows (n1w8, 32 per block), their deep forms
//    with two or four times the loads in flight (n1d, n1w8d, n1d6), and a pair of warps per 8
//    rows (n1w8s2; see FP8_ROW1_ALL). The host picks one per shape
//    (gemv_fp8.rs). Launch: block 128, grid ceil(rows / rows per block). Both can also run a
//    folded residual-add RMSNorm's producer and consumer halves (rms_fold.cuh).
//    `_bits` (E4M3 only): the same kernels with the previous integer decode, for A/B runs.
//    (Whole-block row groups, 2 or 4 rows per block with the columns split over its warps, were
//    measured in sessions 4 and 5 and won no shape: removed. A tensor-core form, `_n1m1` /
//    `_n1m2`, was measured slower than n1d6 in session 11 and removed:
//    docs/architecture/fp8-mma-gemv.md.)
//  * gemv_fp8_<e4m3|e5m2>_<t|b>_<n4|n8>: the same for 2..4 / 5..8 activation rows. The block's
//    activations go through shared memory 512 columns at a time (all rows of x, f32), so each
//    weight byte is loaded and decoded once and used for every activation row, and x is read
//    from L2 once per block instead of once per warp (the old per-warp __ldg of 8 rows of x ran
//    at 10% of HBM bandwidth: it was L2-bound). The next tile's weights are loaded before the
//    current one is multiplied. Launch: block 256 (8 warps x 4 rows = 32 rows), grid
//    ceil(rows / 32); a warp past the last row still joins the barriers.
//  * gemv_fp8_silu_<e4m3|e5m2>_<t|b>_<gu1|gu2|gu4>: one activation row times a stacked
//    [gate; up] weight [2 inter, cols] with the SwiGLU epilogue, out[i] = silu(gate_i) * up_i
//    (f32, inter outputs): one warp per 1 / 2 / 4 outputs, reading their gate and up rows
//    together (gemv_fp8_silu_row1, below). Launch: block 128, grid ceil(inter / (4 x outputs
//    per warp)).
//  * dequant_fp8_<e4m3|e5m2>_<t|b>_<f16|f32>: rows [r0, r0 + nr) to f16 (tensor-core prefill) or
//    f32 (exact prefill, SGEMM) for cuBLAS (tile scale folded in; a per-tensor scale is left to
//    the GEMM's alpha, the raw codes are exact in f16). One thread per 16 bytes;
//    grid ceil(nr * cols / 16 / 256), block 256.
//
// All need cols % 16 == 0 (16-byte aligned rows); the upload refuses other widths. The codes of
// each whole 128-column tile are in tile-lane order on the device (fp8_row.cuh `fp8_lanes`);
// every kernel here reads them through x4_index. Decoding: fp8_row.cuh.
//
// Programmatic dependent launch: the one-row kernels load their first step of weights before
// pdl_wait(); they let the next kernel launch right after it where the host's pdl_early mask
// says so (common.cuh; by default where the launch's grid fits in one wave at MINB blocks per
// SM), else after their main loop.
#include <cuda_fp16.h>
#include <stdint.h>

#include "common.cuh"
#include "fp8_row.cuh"
#include "gate_math.cuh"
#include "rms_fold.cuh"

#define FP8_NB_WARPS 4
#define FP8_NB_ROWS 4
// Floats per 16-column group of the shared activation tile: 16 plus 4 of padding, so the 8 lanes
// of a quarter-warp reading 16-byte pieces of groups lane*20 hit 8 distinct 4-bank groups.
#define FP8_XPAD 20

// SPLIT warps share each group of R rows. SPLIT = 1: a warp per R rows. SPLIT = 2 (`n1w8s2`,
// session 13): warp `half` of a pair takes chunks lane + 32 half, + 64, ... of every row, and the
// pair's halves are added through shared memory before the epilogue. Why: at 5120 rows the
// 4-row warps' own work per 16-byte chunk (4 activation loads, the decode and 16 FMAs per row)
// holds the stream at ~80% of a bare read (docs/performance/logs/2026-12-02-s13-gemv-parts/);
// 8 rows per warp halve the activation loads per weight byte, and the split keeps n1d6's warps
// per SM (16 rows per block). A row's sum is then half 0 + half 1, each in column order, so the
// result differs from the unsplit forms in rounding only.
template <int E5M2, bool TILED, int DEC, int R, int U, int MINB, int SPLIT = 1>
__device__ __forceinline__ void gemv_fp8_row1(const uint8_t* __restrict__ w,
                                              const float* __restrict__ sc, float tscale,
                                              const float* __restrict__ x,
                                              float* __restrict__ out, int rows, int cols,
                                              const RmsFold& f) {
    static_assert(128 % R == 0 && R <= 32 && (SPLIT == 1 || SPLIT == 2), "row group shape");
    __shared__ float fold_sh[1];
    __shared__ float half1[SPLIT == 1 ? 1 : FP8R_THREADS / 64][R];  // SPLIT 2: the halves' sums
    const int tid = threadIdx.x, lane = tid & 31;
    const int group = SPLIT == 1 ? tid / 32 : tid >> 6, half = SPLIT == 1 ? 0 : (tid >> 5) & 1;
    const int row0 = (blockIdx.x * (FP8R_THREADS / (32 * SPLIT)) + group) * R;
    // A whole warp past the last row has nothing to do and no barrier to reach. With a fold the
    // host launches whole blocks, so every warp reaches the fold's barriers.
    if (SPLIT == 1 && row0 >= rows) return;
    float acc[R];
    float ss_in = 0.f;
    if (SPLIT == 1 || row0 < rows) {
        const uint4* wr[R];
        const float* srow[1];
        row1_group<TILED, R>(w, sc, rows, cols, row0, wr, srow);
        row1_accumulate<E5M2, TILED, DEC, R, 1, U, MINB, false, 32 * SPLIT>(
            wr, srow, x, cols >> 4, lane + 32 * half, acc, [&] {
                if (f.parts_in && tid < 32) ss_in = rms_fold_sum(f.parts_in, f.nparts);
            });
        pdl_trigger_late<MINB>();
    } else {
        // A pair past the last row (pair 1 of a partial last block; warp 0, which sums the fold's
        // parts, is always in range) reads no weights but still reaches the barrier below, and
        // the epilogue reads the previous kernel's output: it waits like the others.
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] = 0.f;
        pdl_wait();
    }
    // Lane r < R takes row row0 + r.
    float v = row1_lane_total<R>(acc, lane, TILED ? 1.f : tscale);
    if constexpr (SPLIT == 2) {
        if (half == 1 && lane < R) half1[group][lane] = v;
        __syncthreads();
        if (half == 0 && lane < R) v += half1[group][lane];
    }
    const bool mine = (SPLIT == 1 || half == 0) && lane < R && row0 + lane < rows;
    rms_fold_gemv_end(v, mine, row0 + lane, ss_in, x, cols, out, f, fold_sh);
}

// ---- one activation row of a stacked [gate; up] weight, SwiGLU epilogue ----------------------
// w is [2 * inter, cols]: gate rows 0..inter, then up rows inter..2 inter. Each warp owns R
// outputs o0..o0+R (o0 a multiple of R) and accumulates their 2R weight rows together (gate rows
// o0+r, up rows inter+o0+r: 2R x U loads in flight per thread, as the plain kernel with 2R rows),
// then writes out[o] = silu(gate_o) * up_o with silu_mul_halves' expression (split.cu), so the
// result equals the warp-per-row GEMV (the same chunk order and shuffle sums per row) followed by
// silu_mul_halves. The up rows share one tile only if inter % R == 0: the host picks R so.
// f32 output (what the next FP8 GEMV reads); no int8 quantization of it.
template <int E5M2, bool TILED, int R, int U, int MINB>
__device__ __forceinline__ void gemv_fp8_silu_row1(const uint8_t* __restrict__ w,
                                                   const float* __restrict__ sc, float tscale,
                                                   const float* __restrict__ x,
                                                   float* __restrict__ out, int inter, int cols,
                                                   const RmsFold& f) {
    static_assert(128 % R == 0 && R <= 32, "row group shape");
    const int lane = threadIdx.x & 31;
    const int o0 = (blockIdx.x * (FP8R_THREADS / 32) + threadIdx.x / 32) * R;
    // A whole warp past the end has no barrier below (with a fold the host launches whole
    // blocks, so none is past it).
    if (o0 >= inter) return;
    const int nch = cols >> 4;
    const uint4* wr[2 * R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        // A missing last output re-reads the previous rows (its result is never written).
        const size_t o = (size_t)min(o0 + r, inter - 1);
        wr[r] = reinterpret_cast<const uint4*>(w + o * cols);
        wr[R + r] = reinterpret_cast<const uint4*>(w + (o + inter) * cols);
    }
    const size_t tcols = (cols + 127) >> 7;
    const float* srow[2] = {TILED ? sc + (size_t)(o0 >> 7) * tcols : nullptr,
                            TILED ? sc + (size_t)((o0 + inter) >> 7) * tcols : nullptr};
    float acc[2 * R];
    float ss_in = 0.f;
    row1_accumulate<E5M2, TILED, 1, 2 * R, 2, U, MINB>(wr, srow, x, nch, lane, acc, [&] {
        if (f.parts_in && threadIdx.x < 32) ss_in = rms_fold_sum(f.parts_in, f.nparts);
    });
    pdl_trigger_late<MINB>();
    // Butterfly sums: every lane holds every row's total; lane r writes output r.
#pragma unroll
    for (int r = 0; r < 2 * R; r++) acc[r] = warp_sum(acc[r]);
    float rs = 1.f;
    if (f.parts_in) {
        __shared__ float fold_sh[1];
        rs = rms_fold_block_scale(ss_in, cols, f.eps, fold_sh);
        rms_fold_materialize(x, rs, cols, f);
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (lane == r && o0 + r < inter) {
            float a = TILED ? acc[r] : acc[r] * tscale;
            float u = TILED ? acc[R + r] : acc[R + r] * tscale;
            if (f.parts_in) {
                a *= rs;
                u *= rs;
            }
            out[o0 + r] = swiglu_f(a, u);
        }
    }
}

template <int E5M2, bool TILED, int M>
__device__ __forceinline__ void gemv_fp8_nb(const uint8_t* __restrict__ w,
                                            const float* __restrict__ sc, float tscale,
                                            const float* __restrict__ x, float* __restrict__ out,
                                            int rows, int cols, int m) {
    constexpr int R = FP8_NB_ROWS;
    __shared__ __align__(16) float xs[M][32 * FP8_XPAD];
    const int lane = threadIdx.x & 31;
    const int row0 = (blockIdx.x * FP8_NB_WARPS + (threadIdx.x >> 5)) * R;
    const int nch = cols >> 4;
    const int tcols = (cols + 127) >> 7;
    const int ntiles = (nch + 31) >> 5;
    const int nlane = fp8_lane_chunks(nch);
    float acc[R][M];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int j = 0; j < M; j++) acc[r][j] = 0.f;
    const uint4* wr[R];
    const float* sr[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        // Rows past the end (a whole warp may be past it: it must still reach every barrier)
        // re-read the last row; their results are never written.
        const int row = min(row0 + r, rows - 1);
        wr[r] = reinterpret_cast<const uint4*>(w + (size_t)row * cols);
        sr[r] = TILED ? sc + (size_t)(row >> 7) * tcols : nullptr;
    }
    uint4 q[R];
    float s[R];
    {
        const int c = min(lane, nch - 1);
#pragma unroll
        for (int r = 0; r < R; r++) {
            q[r] = __ldg(wr[r] + c);
            s[r] = TILED ? __ldg(sr[r] + (c >> 3)) : 1.f;
        }
    }
    for (int t = 0; t < ntiles; t++) {
        __syncthreads();  // every warp is done with the previous tile
        // Columns [t*512, t*512 + 512) of every activation row; zeros past the end, so the
        // re-read weights of a partial last tile contribute nothing.
        for (int i = threadIdx.x; i < m * 128; i += FP8_NB_WARPS * 32) {
            const int j = i >> 7, g = (i >> 2) & 31, k4 = i & 3;
            const int c = t * 32 + g;
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (c < nch)
                v = __ldg(reinterpret_cast<const float4*>(x + (size_t)j * cols) + x4_index(c, k4, nlane));
            *reinterpret_cast<float4*>(&xs[j][g * FP8_XPAD + k4 * 4]) = v;
        }
        __syncthreads();
        // Decode this tile's weights, then reuse their registers for the next tile's loads,
        // which stay in flight while this tile is multiplied.
        float wf[R][16];
        float scur[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            decode16<E5M2>(q[r], wf[r]);
            scur[r] = s[r];
        }
        {
            const int c = min((t + 1) * 32 + lane, nch - 1);
#pragma unroll
            for (int r = 0; r < R; r++) {
                q[r] = __ldg(wr[r] + c);
                s[r] = TILED ? __ldg(sr[r] + (c >> 3)) : 1.f;
            }
        }
#pragma unroll
        for (int j = 0; j < M; j++) {
            if (j >= m) break;
            const float4* xp = reinterpret_cast<const float4*>(&xs[j][lane * FP8_XPAD]);
            float xv[16];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float4 v = xp[i];
                xv[4 * i] = v.x;
                xv[4 * i + 1] = v.y;
                xv[4 * i + 2] = v.z;
                xv[4 * i + 3] = v.w;
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                float d = 0.f;
#pragma unroll
                for (int k = 0; k < 16; k++) d = fmaf(wf[r][k], xv[k], d);
                acc[r][j] = TILED ? fmaf(d, scur[r], acc[r][j]) : acc[r][j] + d;
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int j = 0; j < M; j++)
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
                acc[r][j] += __shfl_xor_sync(0xffffffffu, acc[r][j], o);
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (row0 + r >= rows) break;
#pragma unroll
            for (int j = 0; j < M; j++) {
                if (j >= m) break;
                out[(size_t)j * rows + row0 + r] = TILED ? acc[r][j] : acc[r][j] * tscale;
            }
        }
    }
}

// Four consecutive outputs (f16 for the tensor-core prefill, f32 for the exact one).
__device__ __forceinline__ void store4(__half* o, const float* f) {
    const __half2 a = __floats2half2_rn(f[0], f[1]), b = __floats2half2_rn(f[2], f[3]);
    *reinterpret_cast<uint2*>(o) =
        make_uint2(*reinterpret_cast<const uint32_t*>(&a), *reinterpret_cast<const uint32_t*>(&b));
}

__device__ __forceinline__ void store4(float* o, const float* f) {
    *reinterpret_cast<float4*>(o) = make_float4(f[0], f[1], f[2], f[3]);
}

template <int E5M2, bool TILED, typename T>
__device__ __forceinline__ void dequant_fp8(const uint8_t* __restrict__ w,
                                            const float* __restrict__ sc, T* __restrict__ out,
                                            int cols, int r0, int nr) {
    const int nch = cols >> 4;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)nr * nch) return;
    const int rl = (int)(i / nch), c = (int)(i % nch);
    const int r = r0 + rl;
    const uint4 q = __ldg(reinterpret_cast<const uint4*>(w + (size_t)r * cols) + c);
    float f[16];
    decode16<E5M2>(q, f);
    if (TILED) {
        // One rounding of code x scale, as the CPU's and transformers' dequantization.
        const float s = __ldg(sc + (size_t)(r >> 7) * ((cols + 127) >> 7) + (c >> 3));
#pragma unroll
        for (int k = 0; k < 16; k++) f[k] *= s;
    }
    // Byte group i of the chunk holds the 4 columns whose activations x4_index names.
    const int nlane = fp8_lane_chunks(nch);
#pragma unroll
    for (int k = 0; k < 4; k++) store4(out + (size_t)rl * cols + 4 * x4_index(c, k, nlane), f + 4 * k);
}

// One-row variants of one format: name suffix, DEC, R, U (see gemv_fp8_row1), and the blocks
// per SM the registers are capped for (ptxas: n1 94 -> 80 registers without spills, 5 -> 6
// blocks; n1w8 keeps what it uses). The deep forms (n1d: 4 rows x 4 steps, n1w8d: 8 rows x 2
// steps, 16 loads in flight per thread instead of 8) are for matrices with few rows: a 5120-row
// matrix is 320 blocks of n1, 2.4 per SM, and Nsight showed those at 9.7 active warps per SM
// and 55% of DRAM bandwidth (latency-bound: too few bytes in flight), against 21.7 warps and
// 72% for the 34816-row one (docs/performance/logs/2026-11-30-s6-ncu-fp8/). n1d6 (4 rows x 6
// steps, 24 loads per thread, 168 registers: 3 blocks per SM; 8 steps spilled) goes further for
// grids of <= 3 blocks per SM.
#define FP8_ROW1(name, sfx, e5m2, tiled, dec, R, U, MINB, SPLIT)                              \
    extern "C" __global__ void __launch_bounds__(FP8R_THREADS, MINB)                           \
        gemv_fp8_##name##_##sfx(const uint8_t* w, const float* sc, float tscale, const float* x, \
                                float* out, int rows, int cols, int m, RmsFold f) {             \
        gemv_fp8_row1<e5m2, tiled, dec, R, U, MINB, SPLIT>(w, sc, tscale, x, out, rows, cols, f); \
    }
// n1w8s2: 8 rows per pair of warps, each warp half the columns, 3 steps (24 loads per thread).
// (n1w16s2, 16 rows per pair with 2 steps, was slower on every 27B shape in session 14.)
#define FP8_ROW1_ALL(name, e5m2, tiled, dec, tag)                                              \
    FP8_ROW1(name, n1##tag, e5m2, tiled, dec, 4, 2, 6, 1)                                       \
    FP8_ROW1(name, n1w8##tag, e5m2, tiled, dec, 8, 1, 7, 1)                                     \
    FP8_ROW1(name, n1d##tag, e5m2, tiled, dec, 4, 4, 4, 1)                                      \
    FP8_ROW1(name, n1w8d##tag, e5m2, tiled, dec, 8, 2, 4, 1)                                    \
    FP8_ROW1(name, n1d6##tag, e5m2, tiled, dec, 4, 6, 3, 1)                                     \
    FP8_ROW1(name, n1w8s2##tag, e5m2, tiled, dec, 8, 3, 3, 2)

// Fused gate|up variants: outputs per warp R, steps in flight U (2R x U 16-byte loads per
// thread), register cap as the plain kernel with the same loads in flight (gu2 ~ n1, gu4 ~ n1w8).
#define FP8_SILU(name, sfx, e5m2, tiled, R, U, MINB)                                          \
    extern "C" __global__ void __launch_bounds__(FP8R_THREADS, MINB)                           \
        gemv_fp8_silu_##name##_##sfx(const uint8_t* w, const float* sc, float tscale,          \
                                     const float* x, float* out, int inter, int cols,          \
                                     RmsFold f) {                                               \
        gemv_fp8_silu_row1<e5m2, tiled, R, U, MINB>(w, sc, tscale, x, out, inter, cols, f);    \
    }
#define FP8_SILU_ALL(name, e5m2, tiled)                                                        \
    FP8_SILU(name, gu1, e5m2, tiled, 1, 4, 6)                                                   \
    FP8_SILU(name, gu2, e5m2, tiled, 2, 2, 6)                                                   \
    FP8_SILU(name, gu4, e5m2, tiled, 4, 1, 7)

#define FP8_KERNELS(name, e5m2, tiled)                                                          \
    FP8_ROW1_ALL(name, e5m2, tiled, 1, )                                                        \
    extern "C" __global__ void __launch_bounds__(128) gemv_fp8_##name##_n4(                    \
        const uint8_t* w, const float* sc, float tscale, const float* x, float* out, int rows, \
        int cols, int m) {                                                                      \
        gemv_fp8_nb<e5m2, tiled, 4>(w, sc, tscale, x, out, rows, cols, m);                     \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(128) gemv_fp8_##name##_n8(                    \
        const uint8_t* w, const float* sc, float tscale, const float* x, float* out, int rows, \
        int cols, int m) {                                                                      \
        gemv_fp8_nb<e5m2, tiled, 8>(w, sc, tscale, x, out, rows, cols, m);                     \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(256) dequant_fp8_##name##_f16(                \
        const uint8_t* w, const float* sc, __half* out, int cols, int r0, int nr) {            \
        dequant_fp8<e5m2, tiled, __half>(w, sc, out, cols, r0, nr);                             \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(256) dequant_fp8_##name##_f32(                \
        const uint8_t* w, const float* sc, float* out, int cols, int r0, int nr) {             \
        dequant_fp8<e5m2, tiled, float>(w, sc, out, cols, r0, nr);                              \
    }

FP8_KERNELS(e4m3_t, 0, false)
FP8_KERNELS(e4m3_b, 0, true)
FP8_KERNELS(e5m2_t, 1, false)
FP8_KERNELS(e5m2_b, 1, true)
// The previous integer decode, for the A/B of the decode (E5M2's byte_perm decode is cheaper on
// every GPU, so it has no such variant).
FP8_ROW1_ALL(e4m3_t, 0, false, 0, _bits)
FP8_ROW1_ALL(e4m3_b, 0, true, 0, _bits)
FP8_SILU_ALL(e4m3_t, 0, false)
FP8_SILU_ALL(e4m3_b, 0, true)
FP8_SILU_ALL(e5m2_t, 1, false)
FP8_SILU_ALL(e5m2_b, 1, true)
