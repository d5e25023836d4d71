// FP8 weights (E4M3 "fn" and E5M2), row-major [rows, cols], one byte per weight, with either one
// f32 scale per tensor (applied to the result) or f32 scales per 128x128 tile
// (`weight_scale_inv`, [ceil(rows/128), ceil(cols/128)], value = fp8 * scale).
//
//  * gemv_fp8_<e4m3|e5m2>_<t|b>_n1: decode GEMV for one activation row (f32 activation and
//    accumulation). One warp per 4 weight rows (each x load serves all 4); each lane reads 16
//    weight bytes per row in one 16-byte load, so a warp covers 512 columns per step, and two
//    steps' loads issue before any arithmetic (4 x 2 x 16 = 128 bytes in flight per lane: decode
//    is bound by HBM latency x bytes in flight). A 16-byte chunk never straddles a 128-column
//    tile, so a lane applies one tile scale to its 16-element partial dot.
//    Launch: block 128 (4 warps = 16 rows), grid ceil(rows / 16).
//  * gemv_fp8_<e4m3|e5m2>_<t|b>_n1k<2|4>: the one-row default. 2 or 4 weight rows per 128-thread
//    block with the columns split over the whole block (not over one warp), so a 5120-row matrix
//    is 2560 or 1280 blocks (the n1 kernel's 320 blocks, 2.4 per SM, left the SMs with too few
//    bytes in flight and unevenly loaded). Each pass, a thread issues all its loads (up to
//    FP8K_U chunks of 16 bytes per row) before any arithmetic; weights bypass L1
//    (ld.global.nc.L1::no_allocate) so the activation row, which every block on an SM reads,
//    stays there. Warp sums meet in shared memory and one thread per row adds them in a fixed
//    order (deterministic). Weight loads of the first pass issue before pdl_wait().
//    Launch: block FP8K_THREADS, grid ceil(rows / R).
//  * gemv_fp8_<e4m3|e5m2>_<t|b>_<n4|n8>: the same for 2..4 / 5..8 activation rows. The block's
//    activations go through shared memory 512 columns at a time (all rows of x, f32), so each
//    weight byte is loaded and decoded once and used for every activation row, and x is read
//    from L2 once per block instead of once per warp (the old per-warp __ldg of 8 rows of x ran
//    at 10% of HBM bandwidth: it was L2-bound). The next tile's weights are loaded before the
//    current one is multiplied. Launch: block 256 (8 warps x 4 rows = 32 rows), grid
//    ceil(rows / 32); a warp past the last row still joins the barriers.
//  * dequant_fp8_<e4m3|e5m2>_<t|b>_<f16|f32>: rows [r0, r0 + nr) to f16 (tensor-core prefill) or
//    f32 (exact prefill, SGEMM) for cuBLAS (tile scale folded in; a per-tensor scale is left to
//    the GEMM's alpha, the raw codes are exact in f16). One thread per 16 bytes;
//    grid ceil(nr * cols / 16 / 256), block 256.
//
// All need cols % 16 == 0 (16-byte aligned rows); the upload refuses other widths.
//
// Decoding is a bit trick, no table: the 7 magnitude bits of an E4M3 code placed at the top of
// an f32's exponent/mantissa fields (exponent 0000eeee, mantissa mmm0...) are the same number
// with exponent bias 127 instead of 7, so one multiply by 2^120 fixes the bias; subnormal codes
// land on f32 subnormals and the multiply makes them exact normals (no flush: these files build
// without -ftz). E5M2 is the same with exponent 000eeeee and 2^112. The bits are assembled four
// codes at a time: one word of sign|high-exponent bytes and one of low-exponent|mantissa bytes
// (two shifts and masks for 4 codes), then one byte_perm per 2 codes makes the top halves of two
// f32s (a bf16 pair), unpacked with one shift or mask each: about 3 integer ops per code instead
// of 6 (at one FMA per weight, the decode's issue slots were the GEMV's limit next to HBM).
// The one code this maps wrongly is E4M3's NaN (0x7f/0xff -> ±480) and E5M2's inf/NaN
// (-> finite): checkpoints hold no such weights.
#include <cuda_fp16.h>
#include <stdint.h>

#include "common.cuh"

#define FP8_N1_WARPS 4
#define FP8_N1_ROWS 4
#define FP8_NB_WARPS 4
#define FP8_NB_ROWS 4
// Floats per 16-column group of the shared activation tile: 16 plus 4 of padding, so the 8 lanes
// of a quarter-warp reading 16-byte pieces of groups lane*20 hit 8 distinct 4-bank groups.
#define FP8_XPAD 20

// Four codes of `v` (byte k = code k) -> f[k] = code * 2^-120 (E4M3) or 2^-112 (E5M2), exactly.
template <int E5M2>
__device__ __forceinline__ void decode4_raw(uint32_t v, float* f) {
    uint32_t hi, lo;
    if (E5M2) {
        // s eeeee mm -> f32 top 16 bits: s 000 e4e3e2e1 | e0 m1 m0 00000
        hi = (v & 0x80808080u) | ((v >> 3) & 0x0f0f0f0fu);
        lo = (v << 5) & 0xe0e0e0e0u;
    } else {
        // s eeee mmm -> f32 top 16 bits: s 0000 e3e2e1 | e0 m2m1m0 0000
        hi = (v & 0x80808080u) | ((v >> 4) & 0x07070707u);
        lo = (v << 4) & 0xf0f0f0f0u;
    }
    const uint32_t p01 = __byte_perm(lo, hi, 0x5140);  // [hi1 lo1 hi0 lo0]
    const uint32_t p23 = __byte_perm(lo, hi, 0x7362);  // [hi3 lo3 hi2 lo2]
    f[0] = __uint_as_float(p01 << 16);
    f[1] = __uint_as_float(p01 & 0xffff0000u);
    f[2] = __uint_as_float(p23 << 16);
    f[3] = __uint_as_float(p23 & 0xffff0000u);
}

// 16 codes -> their exact values (times `mul`, which the caller keeps exact: a power of two).
template <int E5M2>
__device__ __forceinline__ void decode16(uint4 q, float* f) {
    const float bias = E5M2 ? 0x1p112f : 0x1p120f;
    decode4_raw<E5M2>(q.x, f);
    decode4_raw<E5M2>(q.y, f + 4);
    decode4_raw<E5M2>(q.z, f + 8);
    decode4_raw<E5M2>(q.w, f + 12);
#pragma unroll
    for (int k = 0; k < 16; k++) f[k] *= bias;
}

template <int E5M2, bool TILED>
__device__ __forceinline__ void gemv_fp8_n1(const uint8_t* __restrict__ w,
                                            const float* __restrict__ sc, float tscale,
                                            const float* __restrict__ x, float* __restrict__ out,
                                            int rows, int cols) {
    constexpr int R = FP8_N1_ROWS;
    const int lane = threadIdx.x & 31;
    const int row0 = (blockIdx.x * FP8_N1_WARPS + (threadIdx.x >> 5)) * R;
    if (row0 >= rows) return;
    const int nch = cols >> 4;
    const int tcols = (cols + 127) >> 7;
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.f;
    const uint4* wr[R];
    const float* sr[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        // A missing last row re-reads the previous one (never written): no per-load guard.
        const int row = min(row0 + r, rows - 1);
        wr[r] = reinterpret_cast<const uint4*>(w + (size_t)row * cols);
        sr[r] = TILED ? sc + (size_t)(row >> 7) * tcols : nullptr;
    }
    constexpr int U = 2;
    for (int c0 = lane; c0 < nch; c0 += 32 * U) {
        uint4 q[U][R];
        float s[U][R];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = min(c0 + 32 * u, nch - 1);  // past the end: re-read, contribution dropped
#pragma unroll
            for (int r = 0; r < R; r++) {
                q[u][r] = __ldg(wr[r] + c);
                s[u][r] = TILED ? __ldg(sr[r] + (c >> 3)) : 1.f;
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + 32 * u;
            if (c >= nch) break;
            const float4* xp = reinterpret_cast<const float4*>(x) + c * 4;
            float xv[16];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float4 t = __ldg(xp + i);
                xv[4 * i] = t.x;
                xv[4 * i + 1] = t.y;
                xv[4 * i + 2] = t.z;
                xv[4 * i + 3] = t.w;
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                float wf[16];
                decode16<E5M2>(q[u][r], wf);
                float d = 0.f;
#pragma unroll
                for (int k = 0; k < 16; k++) d = fmaf(wf[k], xv[k], d);
                acc[r] = TILED ? fmaf(d, s[u][r], acc[r]) : acc[r] + d;
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (row0 + r >= rows) break;
            out[row0 + r] = TILED ? acc[r] : acc[r] * tscale;
        }
    }
}

#define FP8K_THREADS 128
#define FP8K_U 4

// 16 bytes of a weight row, read-only and not kept in L1 (streamed once per launch).
__device__ __forceinline__ uint4 ld_stream16(const void* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

template <int E5M2, bool TILED, int R>
__device__ __forceinline__ void gemv_fp8_n1k(const uint8_t* __restrict__ w,
                                             const float* __restrict__ sc, float tscale,
                                             const float* __restrict__ x, float* __restrict__ out,
                                             int rows, int cols) {
    constexpr int T = FP8K_THREADS, U = FP8K_U;
    __shared__ float part[T / 32][R];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int row0 = blockIdx.x * R;
    const int nch = cols >> 4;
    const int tcols = (cols + 127) >> 7;
    const uint4* wr[R];
    const float* sr[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        // A missing last row re-reads the previous one (its result is never written).
        const int row = min(row0 + r, rows - 1);
        wr[r] = reinterpret_cast<const uint4*>(w + (size_t)row * cols);
        sr[r] = TILED ? sc + (size_t)(row >> 7) * tcols : nullptr;
    }
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.f;
    bool waited = false;
    for (int c0 = tid; c0 < nch; c0 += T * U) {
        uint4 q[U][R];
        float s[U][R];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + T * u;
#pragma unroll
            for (int r = 0; r < R; r++) {
                q[u][r] = make_uint4(0u, 0u, 0u, 0u);
                s[u][r] = 0.f;
                if (c < nch) {
                    q[u][r] = ld_stream16(wr[r] + c);
                    s[u][r] = TILED ? __ldg(sr[r] + (c >> 3)) : 1.f;
                }
            }
        }
        // The activation is the previous kernel's output: read it only after the wait.
        if (!waited) {
            pdl_wait();
            waited = true;
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + T * u;
            if (c >= nch) break;
            const float4* xp = reinterpret_cast<const float4*>(x) + c * 4;
            float xv[16];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float4 t = __ldg(xp + i);
                xv[4 * i] = t.x;
                xv[4 * i + 1] = t.y;
                xv[4 * i + 2] = t.z;
                xv[4 * i + 3] = t.w;
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                float wf[16];
                decode16<E5M2>(q[u][r], wf);
                float d = 0.f;
#pragma unroll
                for (int k = 0; k < 16; k++) d = fmaf(wf[k], xv[k], d);
                acc[r] = TILED ? fmaf(d, s[u][r], acc[r]) : acc[r] + d;
            }
        }
    }
    if (!waited) pdl_wait();  // a thread with no chunk still waits before the block writes
    pdl_trigger();
#pragma unroll
    for (int r = 0; r < R; r++) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
        if (lane == 0) part[warp][r] = acc[r];
    }
    __syncthreads();
    if (tid < R && row0 + tid < rows) {
        float v = 0.f;
#pragma unroll
        for (int k = 0; k < T / 32; k++) v += part[k][tid];
        out[row0 + tid] = TILED ? v : v * tscale;
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
            if (c < nch) v = __ldg(reinterpret_cast<const float4*>(x + (size_t)j * cols) + c * 4 + k4);
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

__device__ __forceinline__ void store16(__half* o, const float* f) {
    uint32_t h[8];
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const __half2 v = __floats2half2_rn(f[2 * k], f[2 * k + 1]);
        h[k] = *reinterpret_cast<const uint32_t*>(&v);
    }
    uint4* p = reinterpret_cast<uint4*>(o);
    p[0] = make_uint4(h[0], h[1], h[2], h[3]);
    p[1] = make_uint4(h[4], h[5], h[6], h[7]);
}

__device__ __forceinline__ void store16(float* o, const float* f) {
    float4* p = reinterpret_cast<float4*>(o);
#pragma unroll
    for (int i = 0; i < 4; i++) p[i] = make_float4(f[4 * i], f[4 * i + 1], f[4 * i + 2], f[4 * i + 3]);
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
    store16(out + (size_t)rl * cols + 16 * c, f);
}

#define FP8_KERNELS(name, e5m2, tiled)                                                          \
    extern "C" __global__ void __launch_bounds__(128) gemv_fp8_##name##_n1(                    \
        const uint8_t* w, const float* sc, float tscale, const float* x, float* out, int rows, \
        int cols, int m) {                                                                      \
        gemv_fp8_n1<e5m2, tiled>(w, sc, tscale, x, out, rows, cols);                           \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(FP8K_THREADS) gemv_fp8_##name##_n1k2(        \
        const uint8_t* w, const float* sc, float tscale, const float* x, float* out, int rows, \
        int cols, int m) {                                                                      \
        gemv_fp8_n1k<e5m2, tiled, 2>(w, sc, tscale, x, out, rows, cols);                       \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(FP8K_THREADS) gemv_fp8_##name##_n1k4(        \
        const uint8_t* w, const float* sc, float tscale, const float* x, float* out, int rows, \
        int cols, int m) {                                                                      \
        gemv_fp8_n1k<e5m2, tiled, 4>(w, sc, tscale, x, out, rows, cols);                       \
    }                                                                                           \
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
