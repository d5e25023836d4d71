// FP8 weights (E4M3 "fn" and E5M2), row-major [rows, cols], one byte per weight, with either one
// f32 scale per tensor (applied to the result) or f32 scales per 128x128 tile
// (`weight_scale_inv`, [ceil(rows/128), ceil(cols/128)], value = fp8 * scale).
//
//  * gemv_fp8_<e4m3|e5m2>_<t|b>_<n1|n8>: decode GEMV for 1..8 activation rows (f32 activations,
//    f32 accumulation). One warp per 2 weight rows (the x loads are shared by both rows); each
//    lane reads 16 weight bytes per row in one 16-byte load, so a warp covers 512 columns per
//    step. A 16-byte chunk never straddles a 128-column tile, so a lane applies one tile scale
//    to its 16-element partial dot. Launch: block 128 (4 warps = 8 rows), grid ceil(rows / 8).
//  * dequant_fp8_<e4m3|e5m2>_<t|b>_f16: rows [r0, r0 + nr) to f16 for the cuBLAS prefill GEMM
//    (tile scale folded in; a per-tensor scale is left to the GEMM's alpha, the raw codes are
//    exact in f16). One thread per 16 bytes; grid ceil(nr * cols / 16 / 256), block 256.
//
// Both need cols % 16 == 0 (16-byte aligned rows); the upload refuses other widths.
//
// Decoding is a bit trick, no table: the 7 magnitude bits of an E4M3 code shifted to the top of
// an f32's exponent/mantissa fields are the same number with exponent bias 127 instead of 7, so
// one multiply by 2^120 fixes the bias; subnormal codes land on f32 subnormals and the multiply
// makes them exact normals (no flush: these files build without -ftz). E5M2 is the same with a
// shift of 21 and 2^112. The one code this maps wrongly is E4M3's NaN (0x7f/0xff -> ±480) and
// E5M2's inf/NaN (-> finite): checkpoints hold no such weights.
#include <cuda_fp16.h>
#include <stdint.h>

#define FP8_WARPS 4
#define FP8_ROWS 2

template <int E5M2>
__device__ __forceinline__ float fp8_to_f32(uint32_t b) {
    if (E5M2) return __uint_as_float(((b & 0x80u) << 24) | ((b & 0x7fu) << 21)) * 0x1p112f;
    return __uint_as_float(((b & 0x80u) << 24) | ((b & 0x7fu) << 20)) * 0x1p120f;
}

template <int E5M2>
__device__ __forceinline__ void decode16(uint4 q, float* f) {
    const uint32_t v[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int k = 0; k < 4; k++) f[4 * i + k] = fp8_to_f32<E5M2>((v[i] >> (8 * k)) & 0xffu);
}

template <int E5M2, bool TILED, int M>
__device__ __forceinline__ void gemv_fp8(const uint8_t* __restrict__ w,
                                         const float* __restrict__ sc, float tscale,
                                         const float* __restrict__ x, float* __restrict__ out,
                                         int rows, int cols, int m) {
    const int lane = threadIdx.x & 31;
    const int row0 = (blockIdx.x * FP8_WARPS + (threadIdx.x >> 5)) * FP8_ROWS;
    if (row0 >= rows) return;
    const int nch = cols >> 4;
    const int tcols = (cols + 127) >> 7;
    float acc[FP8_ROWS][M];
#pragma unroll
    for (int r = 0; r < FP8_ROWS; r++)
#pragma unroll
        for (int j = 0; j < M; j++) acc[r][j] = 0.f;
    const uint4* wr[FP8_ROWS];
    const float* sr[FP8_ROWS];
#pragma unroll
    for (int r = 0; r < FP8_ROWS; r++) {
        // A missing last row re-reads the previous one (never written): no per-load guard.
        const int row = min(row0 + r, rows - 1);
        wr[r] = reinterpret_cast<const uint4*>(w + (size_t)row * cols);
        sr[r] = TILED ? sc + (size_t)(row >> 7) * tcols : nullptr;
    }
    // U steps per iteration (2 for one activation row): every step's loads issue before any
    // arithmetic, so a warp keeps U x 2 x 512 weight bytes in flight (decode is bound by HBM
    // latency x bytes in flight, not by the decode arithmetic).
    constexpr int U = M == 1 ? 2 : 1;
    for (int c0 = lane; c0 < nch; c0 += 32 * U) {
        uint4 q[U][FP8_ROWS];
        float s[U][FP8_ROWS];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = min(c0 + 32 * u, nch - 1);  // past the end: re-read, contribution dropped
#pragma unroll
            for (int r = 0; r < FP8_ROWS; r++) {
                q[u][r] = __ldg(wr[r] + c);
                s[u][r] = TILED ? __ldg(sr[r] + (c >> 3)) : 1.f;
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + 32 * u;
            if (U > 1 && c >= nch) break;
            float wf[FP8_ROWS][16];
#pragma unroll
            for (int r = 0; r < FP8_ROWS; r++) decode16<E5M2>(q[u][r], wf[r]);
#pragma unroll
            for (int j = 0; j < M; j++) {
                if (M > 1 && j >= m) break;
                const float4* xp = reinterpret_cast<const float4*>(x + (size_t)j * cols) + c * 4;
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
                for (int r = 0; r < FP8_ROWS; r++) {
                    float d = 0.f;
#pragma unroll
                    for (int k = 0; k < 16; k++) d = fmaf(wf[r][k], xv[k], d);
                    acc[r][j] = TILED ? fmaf(d, s[u][r], acc[r][j]) : acc[r][j] + d;
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < FP8_ROWS; r++)
#pragma unroll
        for (int j = 0; j < M; j++)
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
                acc[r][j] += __shfl_xor_sync(0xffffffffu, acc[r][j], o);
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < FP8_ROWS; r++) {
            if (row0 + r >= rows) break;
#pragma unroll
            for (int j = 0; j < M; j++) {
                if (M > 1 && j >= m) break;
                out[(size_t)j * rows + row0 + r] = TILED ? acc[r][j] : acc[r][j] * tscale;
            }
        }
    }
}

template <int E5M2, bool TILED>
__device__ __forceinline__ void dequant_fp8_f16(const uint8_t* __restrict__ w,
                                                const float* __restrict__ sc,
                                                __half* __restrict__ out, int cols, int r0,
                                                int nr) {
    const int nch = cols >> 4;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)nr * nch) return;
    const int rl = (int)(i / nch), c = (int)(i % nch);
    const int r = r0 + rl;
    const uint4 q = __ldg(reinterpret_cast<const uint4*>(w + (size_t)r * cols) + c);
    float f[16];
    decode16<E5M2>(q, f);
    const float s = TILED ? __ldg(sc + (size_t)(r >> 7) * ((cols + 127) >> 7) + (c >> 3)) : 1.f;
    uint32_t h[8];
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const __half2 v = __floats2half2_rn(f[2 * k] * s, f[2 * k + 1] * s);
        h[k] = *reinterpret_cast<const uint32_t*>(&v);
    }
    uint4* o = reinterpret_cast<uint4*>(out + (size_t)rl * cols) + 2 * c;
    o[0] = make_uint4(h[0], h[1], h[2], h[3]);
    o[1] = make_uint4(h[4], h[5], h[6], h[7]);
}

#define FP8_KERNELS(name, e5m2, tiled)                                                          \
    extern "C" __global__ void __launch_bounds__(128) gemv_fp8_##name##_n1(                    \
        const uint8_t* w, const float* sc, float tscale, const float* x, float* out, int rows, \
        int cols, int m) {                                                                      \
        gemv_fp8<e5m2, tiled, 1>(w, sc, tscale, x, out, rows, cols, m);                        \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(128) gemv_fp8_##name##_n8(                    \
        const uint8_t* w, const float* sc, float tscale, const float* x, float* out, int rows, \
        int cols, int m) {                                                                      \
        gemv_fp8<e5m2, tiled, 8>(w, sc, tscale, x, out, rows, cols, m);                        \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(256) dequant_fp8_##name##_f16(                \
        const uint8_t* w, const float* sc, __half* out, int cols, int r0, int nr) {            \
        dequant_fp8_f16<e5m2, tiled>(w, sc, out, cols, r0, nr);                                 \
    }

FP8_KERNELS(e4m3_t, 0, false)
FP8_KERNELS(e4m3_b, 0, true)
FP8_KERNELS(e5m2_t, 1, false)
FP8_KERNELS(e5m2_b, 1, true)
