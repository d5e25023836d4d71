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
    float inv = rsqrtf(ss / (float)d + eps);
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
    float inv = rsqrtf(ss / (float)d + eps);
    for (int i = threadIdx.x; i < d; i += blockDim.x) orow[i] = rr[i] * inv * w[i];
}

// ---- norm + activation quantization for the decode GEMV ---------------------------------------
// The same norms, also writing the output's 8-bit blocks of 32 in quantize_q8's layout (xq [rows,
// d], xd and xs [rows, d / 32]) from the same float values, so the GEMVs that read this output
// skip their quantize launch. d is a multiple of 32; one warp per 32-element block.
DEVI void quantize_row(const float* orow, int d, int8_t* xq, float* xd, float* xs) {
    __syncthreads();  // orow was written by other threads of the block
    int lane = threadIdx.x % 32, nw = blockDim.x / 32;
    size_t b0 = (size_t)blockIdx.x * (d / 32);
    for (int b = threadIdx.x / 32; b < d / 32; b += nw) {
        float v = orow[b * 32 + lane];
        float amax = warp_max(fabsf(v));
        float dd = amax / 127.f;
        int q = amax == 0.f ? 0 : __float2int_rn(v / dd);
        xq[(b0 + b) * 32 + lane] = (int8_t)q;
        float sum = warp_sum((float)q);
        if (lane == 0) {
            xd[b0 + b] = dd;
            xs[b0 + b] = dd * sum;
        }
    }
}

extern "C" __global__ void rms_norm_q8(const float* __restrict__ x, const float* __restrict__ w,
                                       float* __restrict__ out, int d, float eps, int8_t* xq,
                                       float* xd, float* xs) {
    const float* xr = x + (size_t)blockIdx.x * d;
    float* orow = out + (size_t)blockIdx.x * d;
    float ss = 0.f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss);
    float inv = rsqrtf(ss / (float)d + eps);
    for (int i = threadIdx.x; i < d; i += blockDim.x) orow[i] = xr[i] * inv * w[i];
    quantize_row(orow, d, xq, xd, xs);
}

extern "C" __global__ void add_rms_norm_q8(float* __restrict__ residual, const float* __restrict__ delta,
                                           const float* __restrict__ w, float* __restrict__ out, int d,
                                           float eps, int8_t* xq, float* xd, float* xs) {
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
    float inv = rsqrtf(ss / (float)d + eps);
    for (int i = threadIdx.x; i < d; i += blockDim.x) orow[i] = rr[i] * inv * w[i];
    quantize_row(orow, d, xq, xd, xs);
}
