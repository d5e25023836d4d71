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

// Warp 0, after its lanes < per wrote outputs o0 .. o0 + per of `vec` (and the residual, when
// producing): the last block of the 256-output group quantizes the group and, when producing,
// writes the sum of the residual's squares (lane order, then the xor butterfly: the same bits
// whichever block is last). Only the writing lanes fence and only lane 0 counts, so the other
// warps of the block have already left (their slots free for the next blocks).
DEVI void epi_group_end(const Q8Epi& e, const float* vec, int o0, int per) {
    const int lane = threadIdx.x & 31;
    if (lane < per) __threadfence();  // this lane's stores, before the block's arrival counts
    __syncwarp();
    const int g = o0 / 256, len = min(256, e.nout - 256 * g);
    int last = 0;
    if (lane == 0) last = atomicAdd(e.counters + g, 1) == len / per - 1;
    if (!__shfl_sync(0xffffffffu, last, 0)) return;
    __threadfence();  // the other blocks' stores, counted before ours, are visible past here
    const int nvalid = len / 32;
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
    constexpr int per = GLU ? H : R;  // outputs per block
    __shared__ float part[T / 32][R];
    __shared__ float scale_sh;
    const int tid = threadIdx.x;
    int rix[R];
#pragma unroll
    for (int i = 0; i < R; i++) {
        const int o = blockIdx.x * per + i % per;
        rix[i] = GLU ? (i < H ? o : e.inter + o) : min(o, rows - 1);
    }
    // The epilogue's inputs from the previous kernel are read right after its pdl_wait() (into
    // shared memory, so no register stays live through the main loop): the fold's parts (warp
    // 0 turns them into the scale), the residual rows this block adds to, and the first element
    // per thread of this block's share of `normed` (rms_fold_materialize's share); the norm
    // weight beside them.
    __shared__ float xg_sh[T], res_sh[per], g_sh[per];
    const int share = (cols + gridDim.x - 1) / gridDim.x;
    gemv_q8r_rows<D, T, R, D::PF, MINB>(w, xq, xd, xs, rows, cols, rix, part, [&] {
        if (e.fold.parts_in) {
            if (tid < 32) {
                const float ss = rms_fold_sum(e.fold.parts_in, e.fold.nparts);
                if (tid == 0) scale_sh = rms_fold_inv(ss, cols, e.fold.eps);
            }
            const int i = (int)blockIdx.x * share + tid;
            if (e.fold.normed && tid < share && i < cols) xg_sh[tid] = e.xg_in[i];
        }
        const int o = (int)blockIdx.x * per + tid;
        if (e.fold.res && tid < per && o < e.nout) {
            res_sh[tid] = e.fold.res[o];
            g_sh[tid] = e.fold.g[o];
        }
    });
    // The core's closing barrier published the shared values.
    const float scale = e.fold.parts_in ? scale_sh : 1.f;
    if (e.fold.parts_in && e.fold.normed) {
        const int i0 = min((int)blockIdx.x * share, cols), i1 = min(i0 + share, cols);
        if (i0 + tid < i1) e.fold.normed[i0 + tid] = xg_sh[tid] * scale;
        for (int i = i0 + tid + T; i < i1; i += T) e.fold.normed[i] = e.xg_in[i] * scale;
    }
    const int o = (int)blockIdx.x * per + tid;
    const bool mine = tid < per && o < e.nout;
    if (tid >= 32) return;
    if (mine) {
        float v = gemv_q8r_total<T, R>(part, tid) * scale;
        if (GLU) v = swiglu_f(v, gemv_q8r_total<T, R>(part, tid + H) * scale);
        out[o] = v;
        if (e.fold.res) {
            const float r = res_sh[tid] + v;
            e.fold.res[o] = r;
            e.fold.xg[o] = r * g_sh[tid];
        }
    }
    if (e.q8.q) epi_group_end(e, e.fold.res ? e.fold.xg : out, blockIdx.x * per, per);
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
