// GEMV tails: the small kernel that follows a decode GEMV (one activation row), run inside the
// GEMV by the last block(s) to finish, so the step launches one kernel fewer.
//
//  * TAIL_SILU: the GEMV is a stacked [gate; up] projection (rows = 2 * inter). Its outputs
//    fall into groups of 256 (rows 256g.. of each half); the last block to finish a group (both
//    halves' rows counted) writes act[256g..] = silu(gate) * up and that chunk's Q8 (and, where
//    inter % 256 == 0, Q8K) blocks, exactly as split.cu's silu_mul_halves_q8 does for one row.
//  * TAIL_NORM: the last block of the grid runs add_rms_norm_q8's body on the whole row:
//    residual += out; normed = rms_norm(residual) * norm_w; Q8 (and Q8K) of normed, with the
//    summation order of norm.cu's one-pass kernel (bit-identical to it).
//
// Completion is counted with the threadfence + atomic counter pattern: each block fences its
// output stores, one thread adds 1 to the group's counter, and the block that brings it to the
// expected count runs the tail and sets the counter back to 0, so a captured graph replays with
// zeroed counters. Consecutive GEMVs may share counters: a GEMV touches them only after
// pdl_wait(), i.e. after the previous kernel (and its reset) has completed.
//
// Why a tail beats a launch on the H200 (decode, Llama-8B shapes): a separate norm or SiLU kernel
// costs ~5 us in the captured graph (drain of the GEMV's last wave, launch, its own ~2 us of
// L2-latency-bound work). The SiLU tails run while other blocks still stream weights (only the
// last group's ~1 us is exposed); the norm tail is ~2 rounds of L2 latency per 4 chunks of 256
// on one SM (~1-2.5 us for 4096 elements), all of it exposed but with no drain/launch gap.
//
// Reusable by any GEMV whose blocks each own R consecutive output rows (R dividing 256) and
// that writes its rows before calling the tail with every thread of the block.
#pragma once
#include "common.cuh"
#include "gate_math.cuh"

#define TAIL_NONE 0
#define TAIL_SILU 1
#define TAIL_NORM 2

// Elements one SiLU tail group covers (one warp of quant_lane).
#define TAIL_GROUP 256
// Chunks of 256 one warp of norm.cu's one-pass kernel holds (NORM_CH there).
#define TAIL_NORM_CH 2

// What the tail writes besides the GEMV's own output.
struct TailArgs {
    float* act;           // TAIL_SILU: silu(gate) * up, [inter]
    float* residual;      // TAIL_NORM: [d], updated in place
    const float* norm_w;  // TAIL_NORM: [d]
    float* normed;        // TAIL_NORM: [d]
    float eps;
    int8_t* xq;  // Q8 of act / normed: quants, per-32 scales, per-32 scaled sums
    float* xd;
    float* xs;
    int8_t* xqk;  // Q8K of the same (only where the row is a multiple of 256)
    float* xdk;
    float* xsk;
    unsigned* counters;  // zero before the launch; zero again after it
};

// Counts this block's arrival at `counter` (expected arrivals `expect`); true in every thread of
// the block that arrives last. Every thread calls it after the block's output stores.
DEVI bool tail_arrive(unsigned* counter, unsigned expect) {
    __shared__ int s_last;
    __threadfence();  // this thread's output stores are visible device-wide before the count
    __syncthreads();
    if (threadIdx.x == 0) s_last = atomicAdd(counter, 1u) == expect - 1;
    __syncthreads();
    if (s_last) __threadfence();  // the other blocks' stores are read after their counts
    return s_last;
}

// Lane's 8 elements of chunk c of the row at p, read through L2 (other SMs wrote them this
// kernel), zeros past the row's nb32 blocks of 32.
DEVI void tail_load8_cg(const float* p, int c, int nb32, float* v) {
    int lane = threadIdx.x & 31;
    if ((lane >> 2) < nb32 - 8 * c) {
        const float4* q = (const float4*)(p + 256 * c + 8 * lane);
        float4 a = __ldcg(q), b = __ldcg(q + 1);
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
        v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else {
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = 0.f;
    }
}
DEVI void tail_load8(const float* p, int c, int nb32, float* v) {
    int lane = threadIdx.x & 31;
    if ((lane >> 2) < nb32 - 8 * c) {
        const float4* q = (const float4*)(p + 256 * c + 8 * lane);
        float4 a = q[0], b = q[1];
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
        v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else {
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = 0.f;
    }
}
DEVI void tail_store8(float* p, int c, int nb32, const float* v) {
    int lane = threadIdx.x & 31;
    if ((lane >> 2) < nb32 - 8 * c) {
        float4* q = (float4*)(p + 256 * c + 8 * lane);
        q[0] = make_float4(v[0], v[1], v[2], v[3]);
        q[1] = make_float4(v[4], v[5], v[6], v[7]);
    }
}

// Quantizes a warp's held chunk c (lane's 8 values in o) into both kinds, as norm.cu's
// norm_quant_held and split.cu's silu_mul_halves_q8 do (both kinds before any store).
DEVI void tail_quant_chunk(const float* o, int c, int nb32, bool want_k, const TailArgs& t) {
    int lane = threadIdx.x & 31;
    size_t e = (size_t)256 * c, b = (size_t)8 * c;
    int q8[8], qk[8], s8, sk;
    float d8, dk;
    quant_lane<false>(o, q8, d8, s8);
    if (want_k) quant_lane<true>(o, qk, dk, sk);
    if ((lane >> 2) < nb32 - 8 * c) store_lane(q8, d8, s8, t.xq + e, t.xd + b, t.xs + b);
    if (want_k) store_lane(qk, dk, sk, t.xqk + e, t.xdk + b, t.xsk + b);
}

// TAIL_SILU for the block owning rows r0 .. r0 + R - 1 of out [2 * inter]. inter % 32 == 0 and
// R divides 256, so a block's rows lie in one group of one half.
// Not inlined (like tail_norm): the tail's registers are allocated apart from the GEMV loop's,
// so its arrays cannot push the loop (64 registers in the 8-blocks-per-SM kernels) into spills.
template <int R>
__device__ __noinline__ void tail_silu(const TailArgs& t, const float* out, int rows, int r0) {
    int inter = rows / 2;
    int g = (r0 < inter ? r0 : r0 - inter) / TAIL_GROUP;
    int gsize = min(TAIL_GROUP, inter - g * TAIL_GROUP);
    if (!tail_arrive(t.counters + g, 2u * (unsigned)((gsize + R - 1) / R))) return;
    if (threadIdx.x < 32) {
        // silu_mul_halves_q8 for chunk g of one row: the same expressions, so the same bits.
        int nb32 = inter / 32;
        float gv[8], uv[8], v[8];
        tail_load8_cg(out, g, nb32, gv);
        tail_load8_cg(out + inter, g, nb32, uv);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            float a = gv[i];
            v[i] = swiglu_f(a, uv[i]);
        }
        tail_store8(t.act, g, nb32, v);
        tail_quant_chunk(v, g, nb32, inter % 256 == 0, t);
        if (threadIdx.x == 0) t.counters[g] = 0u;
    }
}

// Pass 1 for two virtual warps at once (vw2 < 0: only vw): lane's sums of squares over chunks
// vw + k * nwf (k < TAIL_NORM_CH, < nch) with residual += out stored back, each the one-pass
// kernel's per-lane loop for that warp. Both warps' loads are issued before any store (a store
// to the residual would otherwise keep the second warp's loads behind it).
DEVI void tail_norm_add2(const TailArgs& t, const float* out, int vw, int vw2, int nwf, int nch,
                         int nb32, float& ss, float& ss2) {
    ss = 0.f;
    ss2 = 0.f;
#pragma unroll
    for (int k = 0; k < TAIL_NORM_CH; k++) {
        int c = vw + k * nwf, c2 = vw2 + k * nwf;
        if (c >= nch) break;  // warp-uniform; c2 > c
        bool two = vw2 >= 0 && c2 < nch;
        float v[8], dv[8], v2[8], dv2[8];
        tail_load8(t.residual, c, nb32, v);
        tail_load8_cg(out, c, nb32, dv);
        if (two) {
            tail_load8(t.residual, c2, nb32, v2);
            tail_load8_cg(out, c2, nb32, dv2);
        }
#pragma unroll
        for (int i = 0; i < 8; i++) {
            v[i] = v[i] + dv[i];
            ss += v[i] * v[i];
        }
        tail_store8(t.residual, c, nb32, v);
        if (two) {
#pragma unroll
            for (int i = 0; i < 8; i++) {
                v2[i] = v2[i] + dv2[i];
                ss2 += v2[i] * v2[i];
            }
            tail_store8(t.residual, c2, nb32, v2);
        }
    }
}

// Pass 2 for two virtual warps at once: normed = residual * inv * norm_w over their chunks,
// stored and quantized, both warps' loads issued first.
DEVI void tail_norm_out2(const TailArgs& t, int vw, int vw2, int nwf, int nch, int nb32,
                         float inv, bool want_k) {
#pragma unroll
    for (int k = 0; k < TAIL_NORM_CH; k++) {
        int c = vw + k * nwf, c2 = vw2 + k * nwf;
        if (c >= nch) break;
        bool two = vw2 >= 0 && c2 < nch;
        // This thread stored these residual values in pass 1: its own writes, read back.
        float v[8], wv[8], v2[8], wv2[8], o[8];
        tail_load8(t.residual, c, nb32, v);
        tail_load8(t.norm_w, c, nb32, wv);
        if (two) {
            tail_load8(t.residual, c2, nb32, v2);
            tail_load8(t.norm_w, c2, nb32, wv2);
        }
#pragma unroll
        for (int i = 0; i < 8; i++) o[i] = v[i] * inv * wv[i];
        tail_store8(t.normed, c, nb32, o);
        tail_quant_chunk(o, c, nb32, want_k, t);
        if (two) {
#pragma unroll
            for (int i = 0; i < 8; i++) o[i] = v2[i] * inv * wv2[i];
            tail_store8(t.normed, c2, nb32, o);
            tail_quant_chunk(o, c2, nb32, want_k, t);
        }
    }
}

// TAIL_NORM: add_rms_norm_q8's one-pass body over the whole row of d = rows outputs, run by the
// last block of the grid (blockDim.x = NT threads, a multiple of 32). d % 32 == 0 and
// ceil(d / 256) <= 32 * TAIL_NORM_CH (the host checks). The one-pass kernel has nwf =
// min(32, nch) warps, warp w holding chunks w + k * nwf (k < TAIL_NORM_CH); here real warp w
// plays its "virtual" warps w, w + NT / 32, ..., each reduced as that warp would be, so the
// sum of squares (and every output bit) matches the kernel's. The tail is on the step's
// critical path and bound by L2 round trips, not bandwidth: two virtual warps are processed
// per round (their loads in flight together; each pass of a 4096 row is 2 rounds, not 4), and
// the norm weight is prefetched to L2 while pass 1 runs.
template <int NT>
__device__ __noinline__ void tail_norm(const TailArgs& t, const float* out, int d) {
    __shared__ float part[32];
    if (!tail_arrive(t.counters, gridDim.x)) return;
    constexpr int NW = NT / 32;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int nb32 = d / 32, nch = (d + 255) / 256, nwf = min(32, nch);
    for (int l = threadIdx.x; l * 32 < d; l += NT)  // 128-byte lines of the norm weight
        asm volatile("prefetch.global.L2 [%0];" ::"l"(t.norm_w + 32 * l));
    for (int vw = warp; vw < nwf; vw += 2 * NW) {
        int vw2 = vw + NW < nwf ? vw + NW : -1;  // warp-uniform
        float ss, ss2;
        tail_norm_add2(t, out, vw, vw2, nwf, nch, nb32, ss, ss2);
        ss = warp_sum(ss);
        if (lane == 0) part[vw] = ss;
        if (vw2 >= 0) {
            ss2 = warp_sum(ss2);
            if (lane == 0) part[vw2] = ss2;
        }
    }
    __syncthreads();
    float ss = warp_sum(lane < nwf ? part[lane] : 0.f);
    float inv = __fdiv_rn(1.f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)d), t.eps)));
    bool want_k = d % 256 == 0;
    for (int vw = warp; vw < nwf; vw += 2 * NW)
        tail_norm_out2(t, vw, vw + NW < nwf ? vw + NW : -1, nwf, nch, nb32, inv, want_k);
    if (threadIdx.x == 0) t.counters[0] = 0u;
}
