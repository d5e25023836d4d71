// RMSNorm, alone and fused with the residual add. One block per row; rows are `d` long and the
// tensor holds `rows` of them (per-head QK-norm passes [tokens * heads, head_dim]).
#include "common.cuh"
#include "rms_fold.cuh"

// Sum of v over the block (blockDim.x a multiple of 32, at most 1024).
__device__ float block_sum(float v) {
    __shared__ float part[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_sum(v);
    if (lane == 0) part[warp] = v;
    __syncthreads();
    int nw = blockDim.x / 32;
    v = lane < nw ? part[lane] : 0.f;
    v = warp_sum(v);
    __syncthreads();  // `part` is reused by the next call
    return v;
}

extern "C" __global__ void rms_norm(const float* __restrict__ x, const float* __restrict__ w,
                                    float* __restrict__ out, int d, float eps) {
    const float* xr = x + (size_t)blockIdx.x * d;
    float* orow = out + (size_t)blockIdx.x * d;
    pdl_wait();
    pdl_trigger();
    float ss = 0.f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss);
    float inv = __fdiv_rn(1.f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)d), eps)));
    for (int i = threadIdx.x; i < d; i += blockDim.x) orow[i] = xr[i] * inv * w[i];
}

// residual += delta; out = rms_norm(residual) * w. Each thread re-reads only what it wrote.
extern "C" __global__ void add_rms_norm(float* __restrict__ residual, const float* __restrict__ delta,
                                        const float* __restrict__ w, float* __restrict__ out, int d,
                                        float eps) {
    float* rr = residual + (size_t)blockIdx.x * d;
    const float* dr = delta + (size_t)blockIdx.x * d;
    float* orow = out + (size_t)blockIdx.x * d;
    pdl_wait();
    pdl_trigger();
    float ss = 0.f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float v = rr[i] + dr[i];
        rr[i] = v;
        ss += v * v;
    }
    ss = block_sum(ss);
    float inv = __fdiv_rn(1.f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)d), eps)));
    for (int i = threadIdx.x; i < d; i += blockDim.x) orow[i] = rr[i] * inv * w[i];
}

// ---- norm + activation quantization for the decode GEMV ---------------------------------------
// The same norms, also writing the output's 8-bit blocks in quantize_q8's two layouts (Q8: xq
// [rows, d], xd and xs [rows, d / 32]; Q8K, where d is a multiple of 256: xqk, xdk, xsk alike)
// from the same float values, so the GEMVs that read this output skip their quantize launch. d is
// a multiple of 32; one warp per 256 elements (common.cuh quant256, bit-identical to the CPU).
DEVI void quantize_row(const float* orow, int d, int8_t* xq, float* xd, float* xs, int8_t* xqk,
                       float* xdk, float* xsk) {
    __syncthreads();  // orow was written by other threads of the block
    int nw = blockDim.x / 32;
    size_t e0 = (size_t)blockIdx.x * d, b0 = (size_t)blockIdx.x * (d / 32);
    bool want_k = d % 256 == 0;
    for (int c = threadIdx.x / 32; c * 256 < d; c += nw) {
        int nvalid = min(8, d / 32 - 8 * c);
        size_t e = e0 + 256 * c, b = b0 + 8 * c;
        if (want_k)
            quant256<true, true>(orow + 256 * c, nvalid, xq + e, xd + b, xs + b, xqk + e, xdk + b,
                                 xsk + b);
        else
            quant256<true, false>(orow + 256 * c, nvalid, xq + e, xd + b, xs + b, nullptr, nullptr,
                                  nullptr);
    }
}

// The row-per-block kernels above, kept for rows longer than the fast path holds in registers
// (d > 16384) and as the A/B baseline (POCKET_SMALL_KERNELS=old): every thread strides the row,
// the output goes to global memory and is re-read after a barrier to be quantized.
DEVI void rms_norm_q8_strided(const float* xr, const float* w, float* orow, int d, float eps,
                              int8_t* xq, float* xd, float* xs, int8_t* xqk, float* xdk, float* xsk) {
    float ss = 0.f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss);
    float inv = __fdiv_rn(1.f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)d), eps)));
    for (int i = threadIdx.x; i < d; i += blockDim.x) orow[i] = xr[i] * inv * w[i];
    quantize_row(orow, d, xq, xd, xs, xqk, xdk, xsk);
}
DEVI void add_rms_norm_q8_strided(float* rr, const float* dr, const float* w, float* orow, int d,
                                  float eps, int8_t* xq, float* xd, float* xs, int8_t* xqk,
                                  float* xdk, float* xsk) {
    float ss = 0.f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float v = rr[i] + dr[i];
        rr[i] = v;
        ss += v * v;
    }
    ss = block_sum(ss);
    float inv = __fdiv_rn(1.f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)d), eps)));
    for (int i = threadIdx.x; i < d; i += blockDim.x) orow[i] = rr[i] * inv * w[i];
    quantize_row(orow, d, xq, xd, xs, xqk, xdk, xsk);
}

// ---- one-pass decode norms ----------------------------------------------------------------------
// Lane l of warp c holds elements 256c + 8l .. +8 of the row in registers (16-byte loads), which
// is exactly the layout quant_lane reads: the row is read once, normalized, written once and
// quantized from registers by every warp, with no barrier between the write and the quantization.
// A block has ceil(d / 256) warps (at most 32); each warp holds up to NORM_CH chunks of 256.
// The norm weight is loaded before pdl_wait (it is no kernel's output), so under programmatic
// dependent launch it arrives while the previous kernel drains.
#define NORM_CH 2

// Lane's 8 elements of chunk c at p (zeros past the row's `d / 32` blocks). p is 16-byte aligned.
DEVI void load8(const float* p, int c, int d, float* v) {
    int lane = threadIdx.x & 31;
    if ((lane >> 2) < d / 32 - 8 * c) {
        const float4* q = (const float4*)(p + 256 * c + 8 * lane);
        float4 a = q[0], b = q[1];
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
        v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else {
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = 0.f;
    }
}
DEVI void store8(float* p, int c, int d, const float* v) {
    int lane = threadIdx.x & 31;
    if ((lane >> 2) < d / 32 - 8 * c) {
        float4* q = (float4*)(p + 256 * c + 8 * lane);
        q[0] = make_float4(v[0], v[1], v[2], v[3]);
        q[1] = make_float4(v[4], v[5], v[6], v[7]);
    }
}

// Sum over the block of one value per thread, one barrier (the shared slots are used once).
DEVI float block_sum_once(float v) {
    __shared__ float part[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) part[warp] = v;
    __syncthreads();
    return warp_sum(lane < nw ? part[lane] : 0.f);
}

// Normalizes the held chunks (v holds x, or residual + delta), writes them to orow and their Q8
// (and, where d % 256 == 0, Q8K) quantization. Element for element the same operations as the
// strided kernels: out = x * inv * w, inv = 1 / sqrt(ss / d + eps).
DEVI void norm_quant_held(float (*v)[8], float (*wv)[8], float ss, float* orow, int d, float eps,
                          int8_t* xq, float* xd, float* xs, int8_t* xqk, float* xdk, float* xsk) {
    int warp = threadIdx.x >> 5, nw = blockDim.x >> 5, nch = (d + 255) / 256;
    ss = block_sum_once(ss);
    float inv = __fdiv_rn(1.f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)d), eps)));
    size_t e0 = (size_t)blockIdx.x * d, b0 = (size_t)blockIdx.x * (d / 32);
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int k = 0; k < NORM_CH; k++) {
        int c = warp + k * nw;
        if (c >= nch) break;  // warp-uniform
        float o[8];
#pragma unroll
        for (int i = 0; i < 8; i++) o[i] = v[k][i] * inv * wv[k][i];
        store8(orow, c, d, o);
        size_t e = e0 + 256 * c, b = b0 + 8 * c;
        int q8[8], qk[8], s8, sk;
        float d8, dk;
        // Both kinds before any store, so their shuffles and divisions overlap.
        quant_lane<false>(o, q8, d8, s8);
        if (d % 256 == 0) quant_lane<true>(o, qk, dk, sk);
        if ((lane >> 2) < d / 32 - 8 * c) store_lane(q8, d8, s8, xq + e, xd + b, xs + b);
        if (d % 256 == 0) store_lane(qk, dk, sk, xqk + e, xdk + b, xsk + b);
    }
}

// `fast` selects the one-pass path (the launcher sets it where ceil(d / 256) <= 32 * NORM_CH,
// every pointer is 16-byte aligned and the block has min(32, ceil(d / 256)) warps).
extern "C" __global__ void __launch_bounds__(1024)
    rms_norm_q8(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ out, int d,
                float eps, int8_t* xq, float* xd, float* xs, int8_t* xqk, float* xdk, float* xsk,
                int fast) {
    const float* xr = x + (size_t)blockIdx.x * d;
    float* orow = out + (size_t)blockIdx.x * d;
    if (!fast) {
        pdl_wait();
        pdl_trigger();
        rms_norm_q8_strided(xr, w, orow, d, eps, xq, xd, xs, xqk, xdk, xsk);
        return;
    }
    int warp = threadIdx.x >> 5, nw = blockDim.x >> 5, nch = (d + 255) / 256;
    float v[NORM_CH][8], wv[NORM_CH][8];
#pragma unroll
    for (int k = 0; k < NORM_CH; k++)
        if (warp + k * nw < nch) load8(w, warp + k * nw, d, wv[k]);
    pdl_wait();
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < NORM_CH; k++) {
        if (warp + k * nw >= nch) break;
        load8(xr, warp + k * nw, d, v[k]);
#pragma unroll
        for (int i = 0; i < 8; i++) ss += v[k][i] * v[k][i];
    }
    pdl_trigger();
    norm_quant_held(v, wv, ss, orow, d, eps, xq, xd, xs, xqk, xdk, xsk);
}

extern "C" __global__ void __launch_bounds__(1024)
    add_rms_norm_q8(float* __restrict__ residual, const float* __restrict__ delta,
                    const float* __restrict__ w, float* __restrict__ out, int d, float eps, int8_t* xq,
                    float* xd, float* xs, int8_t* xqk, float* xdk, float* xsk, int fast) {
    float* rr = residual + (size_t)blockIdx.x * d;
    const float* dr = delta + (size_t)blockIdx.x * d;
    float* orow = out + (size_t)blockIdx.x * d;
    if (!fast) {
        pdl_wait();
        pdl_trigger();
        add_rms_norm_q8_strided(rr, dr, w, orow, d, eps, xq, xd, xs, xqk, xdk, xsk);
        return;
    }
    int warp = threadIdx.x >> 5, nw = blockDim.x >> 5, nch = (d + 255) / 256;
    float v[NORM_CH][8], wv[NORM_CH][8];
#pragma unroll
    for (int k = 0; k < NORM_CH; k++)
        if (warp + k * nw < nch) load8(w, warp + k * nw, d, wv[k]);
    pdl_wait();
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < NORM_CH; k++) {
        int c = warp + k * nw;
        if (c >= nch) break;
        float dv[8];
        load8(rr, c, d, v[k]);
        load8(dr, c, d, dv);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            v[k][i] = v[k][i] + dv[i];
            ss += v[k][i] * v[k][i];
        }
        store8(rr, c, d, v[k]);
    }
    pdl_trigger();
    norm_quant_held(v, wv, ss, orow, d, eps, xq, xd, xs, xqk, xdk, xsk);
}

// ---- the folded norm's output for a reader that is not a folding GEMV ------------------------
// normed = xg / rms from the producer GEMV's per-block sums of squares (rms_fold.cuh,
// cuda/rms_fold.rs), the same values a consumer GEMV's blocks write. Launch: one block.
extern "C" __global__ void rms_fold_apply(RmsFold f, const float* __restrict__ xg, int d) {
    __shared__ float sh[1];
    pdl_wait();
    pdl_trigger();
    const float ss = threadIdx.x < 32 ? rms_fold_sum(f.parts_in, f.nparts) : 0.f;
    rms_fold_materialize(xg, rms_fold_block_scale(ss, d, f.eps, sh), d, f);
}
