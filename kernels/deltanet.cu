// Gated DeltaNet (Qwen3.5's linear-attention layers): the short causal conv with its state window,
// the delta-rule gates, the gated delta rule itself, the gated RMSNorm, the half split and the
// sigmoid gate. crates/pocket-kernels/src/recurrent.rs has the varlen / state-slot contract; the
// host validates the metadata from its u32 shadows before launching, so kernels trust it.
#include "common.cuh"

DEVI float silu_f(float x) { return x / (1.f + expf(-x)); }
DEVI float sigmoid_f(float x) { return 1.f / (1.f + expf(-x)); }
// torch's softplus (beta 1, threshold 20: linear above it).
DEVI float softplus_f(float x) { return x > 20.f ? x : log1pf(expf(x)); }

// ---- causal conv1d + SiLU -----------------------------------------------------------------------
// One thread per (sequence, channel), grid (ceil(C / blockDim), num_seqs). The thread keeps the
// K-1 previous inputs of its channel in registers and walks the sequence's rows in order, so the
// state window is read once and written once per call; consecutive threads touch consecutive
// channels (coalesced). K <= CONV_MAX_K (the host checks; Qwen3.5 uses 4).
#define CONV_MAX_K 8
extern "C" __global__ void causal_conv1d_silu(const float* __restrict__ x, const float* __restrict__ w,
                                              float* __restrict__ conv_state, float* __restrict__ out,
                                              const uint32_t* __restrict__ query_start,
                                              const uint32_t* __restrict__ state_slots,
                                              const uint32_t* __restrict__ has_state, int C, int K) {
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    int s = blockIdx.y;
    if (ch >= C) return;
    int win = K - 1;
    float wr[CONV_MAX_K], hist[CONV_MAX_K];
#pragma unroll
    for (int j = 0; j < CONV_MAX_K; j++) {
        wr[j] = j < K ? w[(size_t)ch * K + j] : 0.f;
        hist[j] = 0.f;
    }
    float* st = conv_state + (size_t)state_slots[s] * win * C;
    if (has_state[s]) {
#pragma unroll
        for (int j = 0; j < CONV_MAX_K - 1; j++)
            if (j < win) hist[j] = st[(size_t)j * C + ch];
    }
    uint32_t r0 = query_start[s], r1 = query_start[s + 1];
    for (uint32_t r = r0; r < r1; r++) {
        float xv = x[(size_t)r * C + ch];
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < CONV_MAX_K; j++)
            if (j <= win) acc += wr[j] * (j < win ? hist[j] : xv);
        out[(size_t)r * C + ch] = silu_f(acc);
        // Shift the window by one row.
#pragma unroll
        for (int j = 0; j < CONV_MAX_K - 2; j++)
            if (j + 1 < win) hist[j] = hist[j + 1];
#pragma unroll
        for (int j = 0; j < CONV_MAX_K - 1; j++)
            if (j == win - 1) hist[j] = xv;
    }
#pragma unroll
    for (int j = 0; j < CONV_MAX_K - 1; j++)
        if (j < win) st[(size_t)j * C + ch] = hist[j];
}

// ---- gates ---------------------------------------------------------------------------------------
// g = a_neg[h] * softplus(alpha + dt_bias[h]) (log-space decay), beta = sigmoid(b); [n, H].
extern "C" __global__ void delta_gates(const float* __restrict__ alpha, const float* __restrict__ b,
                                       const float* __restrict__ a_neg, const float* __restrict__ dt_bias,
                                       float* __restrict__ g, float* __restrict__ beta, size_t total, int H) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    int h = (int)(i % H);
    g[i] = a_neg[h] * softplus_f(alpha[i] + dt_bias[h]);
    beta[i] = sigmoid_f(b[i]);
}

// ---- the gated delta rule ------------------------------------------------------------------------
// The columns of a head's state S [dk, dv] f32 evolve independently (kv, delta and o of column j
// read only column j), so a block owns one (sequence, value head, 32-column slab): grid
// (num_seqs, v_heads, ceil(dv / 32)), 32 * R threads with R = ceil(dk / DR_RPT). Warp r holds rows
// i = r + R m (m < DR_RPT) of the slab in registers, lane = column: every load and store of S is a
// 128-byte row segment per warp, and S crosses memory exactly once per call (read at the start,
// written at the end) whatever the number of tokens. Per token:
//   S *= exp(g);  kv = Sᵀk;  S += k ⊗ beta (v - kv);  o = Sᵀq
// with the column sums over i reduced across the R warps through shared memory. At the 27B shape
// (dk = dv = 128, 48 heads) a decode step is 192 blocks of 256 threads.
//
// Decode (one row per sequence) and prefill use this one kernel. For prefill it scans the
// sequence's tokens in order with the state on chip: exact (the arithmetic of the recurrent
// reference) and one pass over the state per sequence instead of per token, but the token loop is
// serial. The follow-up is transformers' chunked WY/UT form on tensor cores (64-token chunks: a
// triangular solve per chunk, then chunk-level GEMMs), which parallelises inside a chunk.
//
// Shared memory (dynamic): q and k of the current token (normalised, [dk] each) and two [R][32]
// reduction buffers (kv and o), so a token needs three barriers.
#define DR_RPT 16
extern "C" __global__ void __launch_bounds__(512)
gated_delta_rule(const float* __restrict__ qkv, const float* __restrict__ g, const float* __restrict__ beta,
                 float* __restrict__ state, float* __restrict__ out,
                 const uint32_t* __restrict__ query_start, const uint32_t* __restrict__ state_slots,
                 const uint32_t* __restrict__ has_state, int hk, int hv, int dk, int dv, int tiled,
                 float l2_eps, float scale) {
    extern __shared__ float smem[];
    int s = blockIdx.x, h = blockIdx.y;
    int R = blockDim.x / 32;
    int lane = threadIdx.x % 32, r = threadIdx.x / 32;
    int j = blockIdx.z * 32 + lane;
    float* qs = smem;               // [dk]
    float* ks = qs + dk;            // [dk]
    float* red_kv = ks + dk;        // [R][32]
    float* red_o = red_kv + R * 32; // [R][32]
    int kh = tiled ? h % hk : h / (hv / hk);
    int width = 2 * hk * dk + hv * dv;
    bool col = j < dv;

    float S[DR_RPT];
    float* st = state + ((size_t)state_slots[s] * hv + h) * dk * dv;
    bool has = has_state[s] != 0;
#pragma unroll
    for (int m = 0; m < DR_RPT; m++) {
        int i = r + R * m;
        S[m] = (has && col && i < dk) ? st[(size_t)i * dv + j] : 0.f;
    }
    uint32_t r0 = query_start[s], r1 = query_start[s + 1];
    for (uint32_t row = r0; row < r1; row++) {
        const float* x = qkv + (size_t)row * width;
        // q (warp 0) and k (warp 1, or warp 0 again when the block is one warp), L2-normalised.
        for (int which = r; which < 2; which += R) {
            const float* src = x + (size_t)(which * hk + kh) * dk;
            float ss = 0.f;
            for (int i = lane; i < dk; i += 32) ss += src[i] * src[i];
            ss = warp_sum(ss);
            float inv = rsqrtf(ss + l2_eps) * (which == 0 ? scale : 1.f);
            float* dst = which == 0 ? qs : ks;
            for (int i = lane; i < dk; i += 32) dst[i] = src[i] * inv;
        }
        float decay = expf(g[(size_t)row * hv + h]);
        float b = beta[(size_t)row * hv + h];
        float v = col ? x[2 * hk * dk + h * dv + j] : 0.f;
        __syncthreads();
        float part = 0.f;
#pragma unroll
        for (int m = 0; m < DR_RPT; m++) {
            int i = r + R * m;
            S[m] *= decay;
            if (i < dk) part += S[m] * ks[i];
        }
        red_kv[r * 32 + lane] = part;
        __syncthreads();
        float kv = 0.f;
        for (int rr = 0; rr < R; rr++) kv += red_kv[rr * 32 + lane];
        float delta = (v - kv) * b;
        part = 0.f;
#pragma unroll
        for (int m = 0; m < DR_RPT; m++) {
            int i = r + R * m;
            if (i < dk) {
                S[m] += ks[i] * delta;
                part += S[m] * qs[i];
            }
        }
        red_o[r * 32 + lane] = part;
        __syncthreads();
        if (r == 0 && col) {
            float o = 0.f;
            for (int rr = 0; rr < R; rr++) o += red_o[rr * 32 + lane];
            out[(size_t)row * hv * dv + h * dv + j] = o;
        }
    }
    if (col) {
#pragma unroll
        for (int m = 0; m < DR_RPT; m++) {
            int i = r + R * m;
            if (i < dk) st[(size_t)i * dv + j] = S[m];
        }
    }
}

// ---- gated RMSNorm, half split, sigmoid gate -----------------------------------------------------
// out = x / rms(x) * w * silu(gate), one block per row of d.
extern "C" __global__ void gated_rms_norm(const float* __restrict__ x, const float* __restrict__ gate,
                                          const float* __restrict__ w, float* __restrict__ out, int d,
                                          float eps) {
    __shared__ float part[32];
    const float* xr = x + (size_t)blockIdx.x * d;
    const float* gr = gate + (size_t)blockIdx.x * d;
    float* orow = out + (size_t)blockIdx.x * d;
    float ss = 0.f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) ss += xr[i] * xr[i];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    ss = warp_sum(ss);
    if (lane == 0) part[warp] = ss;
    __syncthreads();
    ss = lane < (int)(blockDim.x / 32) ? part[lane] : 0.f;
    ss = warp_sum(ss);
    float inv = rsqrtf(ss / (float)d + eps);
    for (int i = threadIdx.x; i < d; i += blockDim.x) orow[i] = xr[i] * inv * w[i] * silu_f(gr[i]);
}

// first[r, c] = x[r, c], second[r, c] = x[r, d + c], one thread per output element.
extern "C" __global__ void split_halves(const float* __restrict__ x, float* __restrict__ first,
                                        float* __restrict__ second, size_t total, int d) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    size_t r = i / d, c = i % d;
    first[i] = x[r * 2 * d + c];
    second[i] = x[r * 2 * d + d + c];
}

// x *= sigmoid(gate).
extern "C" __global__ void sigmoid_mul(float* __restrict__ x, const float* __restrict__ gate, size_t total) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) x[i] *= sigmoid_f(gate[i]);
}
