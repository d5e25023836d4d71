// RMSNorm, alone and fused with the residual add. One block per row; rows are `d` long and the
// tensor holds `rows` of them (per-head QK-norm passes [tokens * heads, head_dim]).
#include "common.cuh"

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

extern "C" __global__ void rms_norm_q8(const float* __restrict__ x, const float* __restrict__ w,
                                       float* __restrict__ out, int d, float eps, int8_t* xq,
                                       float* xd, float* xs, int8_t* xqk, float* xdk, float* xsk) {
    const float* xr = x + (size_t)blockIdx.x * d;
    float* orow = out + (size_t)blockIdx.x * d;
    float ss = 0.f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss);
    float inv = __fdiv_rn(1.f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)d), eps)));
    for (int i = threadIdx.x; i < d; i += blockDim.x) orow[i] = xr[i] * inv * w[i];
    quantize_row(orow, d, xq, xd, xs, xqk, xdk, xsk);
}

extern "C" __global__ void add_rms_norm_q8(float* __restrict__ residual, const float* __restrict__ delta,
                                           const float* __restrict__ w, float* __restrict__ out, int d,
                                           float eps, int8_t* xq, float* xd, float* xs,
                                           int8_t* xqk, float* xdk, float* xsk) {
    float* rr = residual + (size_t)blockIdx.x * d;
    const float* dr = delta + (size_t)blockIdx.x * d;
    float* orow = out + (size_t)blockIdx.x * d;
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
