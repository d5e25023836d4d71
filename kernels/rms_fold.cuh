// The residual-add RMSNorm between two one-row decode GEMVs, folded into them (cuda/rms_fold.rs)
// so no norm launch sits between them. RMSNorm(v) = v * g / rms(v) and the scalar 1 / rms(v)
// commutes with the next GEMV: W (v * g * s) = s * W (v * g). So
//  * the producer (the GEMV whose output is added to the residual: o_proj, out_proj, down) also
//    writes residual += out, xg = residual * g and one sum of squares of the new residual per
//    block (parts_out[blockIdx.x]): no block waits for another;
//  * the consumer (the next GEMV, reading xg as its x) sums the parts (every block the same
//    fixed order: deterministic), takes s = 1 / sqrt(sum / d + eps) as norm.cu does, multiplies
//    its outputs by s, and its blocks write the normalized row normed = xg * s, each a share, so
//    every later reader of the norm's output finds it (the materialize kernel does the same when
//    the next reader is not such a GEMV).
// The results differ from the unfused norm only in rounding (the sum of squares is added in
// another order; x * g * s instead of x * s * g).
#pragma once
#include "common.cuh"

// One launch's fold: the producer half (res != null), the consumer half (parts_in != null),
// either or both or neither. Rust mirror: cuda/rms_fold.rs `RmsFoldArgs` (same field order).
struct RmsFold {
    const float* parts_in;  // consumer: the producer's per-block sums of squares
    float* normed;          // consumer: the normalized row, written in shares (null: not needed)
    float* res;             // producer: the residual stream row, += this GEMV's output
    const float* g;         // producer: the norm weight
    float* xg;              // producer: residual * g (the consumer's x)
    float* parts_out;       // producer: one sum of squares per block
    int nparts;             // consumer: length of parts_in (at most RMS_FOLD_MAX_PARTS)
    float eps;              // consumer: the norm's epsilon
};

// Longest parts_in a consumer takes (the host checks): 16 loads per lane, issued together.
#define RMS_FOLD_MAX_PARTS 512

// Σ parts[0..n) in the calling warp, every lane the same value: lane l adds parts l, l + 32, ...
// in order, then the xor butterfly (commutative pairs, so every lane and every block agrees).
DEVI float rms_fold_sum(const float* parts, int n) {
    const int lane = threadIdx.x & 31;
    float v[RMS_FOLD_MAX_PARTS / 32];
#pragma unroll
    for (int k = 0; k < RMS_FOLD_MAX_PARTS / 32; k++) {
        const int i = lane + 32 * k;
        v[k] = i < n ? parts[i] : 0.f;
    }
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < RMS_FOLD_MAX_PARTS / 32; k++) s += v[k];
    return warp_sum(s);
}

// 1 / sqrt(ss / d + eps), rounded as norm.cu's kernels do.
DEVI float rms_fold_inv(float ss, int d, float eps) {
    return __fdiv_rn(1.f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)d), eps)));
}

// The consumer's scale for the whole block from warp 0's sum `ss`; every thread calls it.
DEVI float rms_fold_block_scale(float ss, int d, float eps, float* sh) {
    if (threadIdx.x == 0) sh[0] = rms_fold_inv(ss, d, eps);
    __syncthreads();
    return sh[0];
}

// The consumer block's share of normed = xg * s (x is xg).
DEVI void rms_fold_materialize(const float* x, float s, int d, const RmsFold& f) {
    if (!f.normed) return;
    const int per = (d + gridDim.x - 1) / gridDim.x;
    const int i0 = blockIdx.x * per, i1 = min(i0 + per, d);
    for (int i = i0 + threadIdx.x; i < i1; i += blockDim.x) f.normed[i] = x[i] * s;
}

// The producer's epilogue, called by every thread of the block: `v` is output row `row` where
// `mine`. residual[row] += v; xg[row] = residual[row] * g[row]; the block's sum of the new
// residual's squares (warp sums, then warps in order) to parts_out[blockIdx.x].
DEVI void rms_fold_produce(float v, bool mine, int row, const RmsFold& f) {
    __shared__ float wss[32];
    float sq = 0.f;
    if (mine) {
        const float r = f.res[row] + v;
        f.res[row] = r;
        f.xg[row] = r * f.g[row];
        sq = r * r;
    }
    sq = warp_sum(sq);
    if ((threadIdx.x & 31) == 0) wss[threadIdx.x >> 5] = sq;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.f;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) s += wss[w];
        f.parts_out[blockIdx.x] = s;
    }
}

// The end of a one-row GEMV that may hold a fold's halves, called by every thread of the block:
// `v` is output row `row` where `mine`. The consumer half scales it by 1 / rms (from warp 0's
// `ss_in`) and writes the block's share of the normalized row; then the store; then the
// producer half (rms_fold_produce).
DEVI void rms_fold_gemv_end(float v, bool mine, int row, float ss_in, const float* x, int cols,
                            float* out, const RmsFold& f, float* sh) {
    if (f.parts_in) {
        const float rs = rms_fold_block_scale(ss_in, cols, f.eps, sh);
        v *= rs;
        rms_fold_materialize(x, rs, cols, f);
    }
    if (mine) out[row] = v;
    if (f.res) rms_fold_produce(v, mine, row, f);
}
