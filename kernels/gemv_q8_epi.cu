// The one-row dp4a GEMV (gemv_q8r.cuh's core, 4 rows per block) with an epilogue that does the
// work of the small kernels beside it in the decode step, so they need no launch of their own
// (host: cuda/gemv_q8_epi.rs). Any of:
//  * the consumer half of a folded residual-add RMSNorm (rms_fold.cuh): the activation is the
//    8-bit quantization of x * g that the producer left, the outputs are scaled by 1 / rms, and
//    the blocks write their shares of `normed`. Block quantization commutes with a positive
//    scale up to rounding (the quants of v s are those of v, the scale is d s), so the outputs
//    are those of the unfused GEMV over the quantized norm, up to rounding.
//  * the producer half: residual += out, xg = residual * g, and per group of 256 outputs the sum
//    of the new residual's squares (parts_out[group]) and xg's 8-bit quantization (q8).
//  * SwiGLU over a stacked [gate; up] weight (inter > 0): block b reads gate rows 2b, 2b + 1 and
//    up rows inter + 2b, inter + 2b + 1, writes out = silu(gate) * up and, per group, out's
//    quantization (q8) for the down projection, which then launches no quantize kernel.
// A group's quantization needs all of its 256 values, which 64 (or 128) blocks compute: every
// block counts its arrival after a fence, and the last one in quantizes the group with one warp
// (common.cuh quant_lane, as quantize_q8 on the same values) and sets the counter back to zero,
// so every launch leaves the counters as it found them.
#include "common.cuh"
#include "gate_math.cuh"
#include "gemv_q8r.cuh"
#include "rms_fold.cuh"

// Where a launch writes the 8-bit copy of the vector it leaves (quantize_q8's two kinds: Q8
// always, Q8K (qk non-null) where the vector's length is a multiple of 256).
struct Q8Out {
    int8_t* q;
    float* d;
    float* s;
    int8_t* qk;
    float* dk;
    float* sk;
};

// One launch's epilogue. Rust mirror: cuda/gemv_q8_epi.rs `Q8EpiArgs` (same field order).
struct Q8Epi {
    RmsFold fold;         // consumer: parts_in, normed, nparts, eps; producer: res, g, xg, parts_out
    const float* xg_in;   // consumer: the x * g row whose quantization is the activation
    Q8Out q8;             // the quantization of xg (producer) or of out (otherwise); q null: none
    int* counters;        // one arrival counter per 256-output group, zero between launches
    int inter;            // > 0: the weight is [gate; up] of `inter` rows each (SwiGLU)
    int nout;             // outputs: rows, or inter
};

// Lane's 8 values of the group at src (L2 loads: other blocks wrote them in this launch), zeros
// past `nvalid` 32-blocks.
DEVI void load8_cg(const float* src, bool valid, float* v) {
    const int lane = threadIdx.x & 31;
    float4 a = make_float4(0.f, 0.f, 0.f, 0.f), b = a;
    if (valid) {
        a = __ldcg((const float4*)src + 2 * lane);
        b = __ldcg((const float4*)src + 2 * lane + 1);
    }
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}

// After this block wrote outputs o0 .. o0 + per of `vec` (and the residual, when producing):
// the last block of the 256-output group quantizes the group and, when producing, writes the sum
// of the residual's squares (lane order, then the xor butterfly: the same bits whichever block
// is last). Called by every thread.
DEVI void epi_group_end(const Q8Epi& e, const float* vec, int o0, int per) {
    __shared__ int last;
    __threadfence();  // this thread's stores, before the block's arrival is counted
    __syncthreads();
    const int g = o0 / 256, len = min(256, e.nout - 256 * g);
    if (threadIdx.x == 0) last = atomicAdd(e.counters + g, 1) == len / per - 1;
    __syncthreads();
    if (!last || threadIdx.x >= 32) return;
    __threadfence();  // the other blocks' stores, counted before ours, are visible past here
    const int lane = threadIdx.x, nvalid = len / 32;
    const bool valid = (lane >> 2) < nvalid;
    const size_t e0 = 256 * (size_t)g, b0 = 8 * (size_t)g;
    float v[8];
    load8_cg(vec + e0, valid, v);
    int q[8], qk[8], sum, sumk;
    float d, dk;
    const bool want_k = e.q8.qk != nullptr && nvalid == 8;
    quant_lane<false>(v, q, d, sum);
    if (want_k) quant_lane<true>(v, qk, dk, sumk);
    if (valid) store_lane(q, d, sum, e.q8.q + e0, e.q8.d + b0, e.q8.s + b0);
    if (want_k) store_lane(qk, dk, sumk, e.q8.qk + e0, e.q8.dk + b0, e.q8.sk + b0);
    if (e.fold.res) {
        float r[8], sq = 0.f;
        load8_cg(e.fold.res + e0, valid, r);
#pragma unroll
        for (int i = 0; i < 8; i++) sq += r[i] * r[i];
        sq = warp_sum(sq);
        if (lane == 0) e.fold.parts_out[g] = sq;
    }
    if (lane == 0) e.counters[g] = 0;
}

template <typename D, int T, int MINB, bool GLU>
__device__ void gemv_q8e(const uint8_t* __restrict__ w, const int8_t* __restrict__ xq,
                         const float* __restrict__ xd, const float* __restrict__ xs, float* out,
                         int rows, int cols, const Q8Epi& e) {
    constexpr int R = GEMVR_ROWS, H = R / 2;
    __shared__ float part[T / 32][R];
    __shared__ float sh[1];
    const int tid = threadIdx.x;
    constexpr int per = GLU ? H : R;  // outputs per block
    int rix[R];
#pragma unroll
    for (int i = 0; i < R; i++) {
        const int o = blockIdx.x * per + i % per;
        rix[i] = GLU ? (i < H ? o : e.inter + o) : min(o, rows - 1);
    }
    gemv_q8r_rows<D, T, R, D::PF, MINB>(w, xq, xd, xs, rows, cols, rix, part);
    const int o0 = blockIdx.x * per;
    float scale = 1.f;
    if (e.fold.parts_in) {
        float ss = 0.f;
        if (tid < 32) ss = rms_fold_sum(e.fold.parts_in, e.fold.nparts);
        scale = rms_fold_block_scale(ss, cols, e.fold.eps, sh);
        rms_fold_materialize(e.xg_in, scale, cols, e.fold);
    }
    const int o = o0 + tid;
    if (tid < per && o < e.nout) {
        float v = gemv_q8r_total<T, R>(part, tid) * scale;
        if (GLU) v = swiglu_f(v, gemv_q8r_total<T, R>(part, tid + H) * scale);
        out[o] = v;
        if (e.fold.res) {
            const float r = e.fold.res[o] + v;
            e.fold.res[o] = r;
            e.fold.xg[o] = r * e.fold.g[o];
        }
    }
    if (e.q8.q) epi_group_end(e, e.fold.res ? e.fold.xg : out, o0, per);
}

// gemv_q8e_<fmt> (plain rows) and gemv_q8g_<fmt> (SwiGLU): gemv_q8r_<fmt>'s block and
// registers; gemv_q8e64_<fmt> and gemv_q8g64_<fmt>: gemv_q8r64_<fmt>'s.
#define DEF_GEMV_Q8E_AS(sym, D, T, MINB, GLU)                                                  \
    extern "C" __global__ void __launch_bounds__(T, MINB) sym(                                \
        const uint8_t* w, const int8_t* xq, const float* xd, const float* xs, float* out,      \
        int rows, int cols, Q8Epi e) {                                                         \
        gemv_q8e<D, T, MINB, GLU>(w, xq, xd, xs, out, rows, cols, e);                          \
    }
#define DEF_GEMV_Q8E(name, D)                                                                  \
    DEF_GEMV_Q8E_AS(gemv_q8e_##name, D, GEMVR_THREADS, Q8rMinBlocks<D>::value, false)          \
    DEF_GEMV_Q8E_AS(gemv_q8g_##name, D, GEMVR_THREADS, Q8rMinBlocks<D>::value, true)
FOR_EACH_Q8(DEF_GEMV_Q8E)

#define DEF_GEMV_Q8E64(name, D)                                                                \
    DEF_GEMV_Q8E_AS(gemv_q8e64_##name, D, 64, 2 * Q8rMinBlocks<D>::value, false)               \
    DEF_GEMV_Q8E_AS(gemv_q8g64_##name, D, 64, 2 * Q8rMinBlocks<D>::value, true)
DEF_GEMV_Q8E64(q4_0, DotQ4_0)
DEF_GEMV_Q8E64(q4_1, DotQ4_1)
DEF_GEMV_Q8E64(q8_0, DotQ8_0)
