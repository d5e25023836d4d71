// FP8 (E4M3 "fn" and E5M2) weight rows as the one-row decode kernels read them: the code
// decoders, the streaming weight load, the tile-lane activation index and the main loop every
// one-row kernel shares (row1_accumulate). Included by gemv_fp8.cu.
//
// Decoding (exact: every E4M3 and E5M2 value is an f16, and every f16 an f32), about 1.5
// instructions per code before the FMA:
//  * E4M3 on sm_89+ (the sm_90 cubin): `cvt.rn.f16x2.e4m3x2`, one instruction per 2 codes, then
//    one f16 -> f32 conversion per code.
//  * E5M2 everywhere: a code is the top byte of the f16 of the same value, so one byte_perm per
//    2 codes makes an f16 pair, then one conversion per code.
//  * E4M3 in the compute_75 PTX (and the `_bits` kernels): a bit trick, no table: the 7
//    magnitude bits placed at the top of an f32's exponent/mantissa fields (exponent 0000eeee,
//    mantissa mmm0...) are the same number with exponent bias 127 instead of 7, so one multiply
//    by 2^120 fixes the bias; subnormal codes land on f32 subnormals and the multiply makes them
//    exact normals (no flush: these files build without -ftz). The bits are assembled four codes
//    at a time (two shifts and masks for 4 codes, one byte_perm per 2 codes making a bf16 pair,
//    one shift or mask each to unpack): about 3.5 instructions per code with the multiply, which
//    made the one-row GEMV issue-bound next to HBM on the H200 (53-72% of the copy bandwidth).
//    It maps E4M3's NaN (0x7f/0xff) to ±480 and E5M2's inf/NaN to finite values, the f16 paths
//    keep them non-finite: checkpoints hold no such weights.
#pragma once
#include <cuda_fp16.h>
#include <stdint.h>

#include "common.cuh"

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


// Two f16 packed in a word (element 0 low) -> f32, exactly.
__device__ __forceinline__ void h2x2_f32(uint32_t h, float* f) {
    f[0] = __half2float(__ushort_as_half((unsigned short)(h & 0xffffu)));
    f[1] = __half2float(__ushort_as_half((unsigned short)(h >> 16)));
}

// E4M3 through the f16 conversion only where FP8_CVT_E4M3 (sm_89+).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define FP8_CVT_E4M3 1
#else
#define FP8_CVT_E4M3 0
#endif

// Four codes of `v` (byte k = code k) -> their exact values f[0..4). DEC 1: through f16 (see the
// top of the file); DEC 0: the bit trick.
template <int E5M2, int DEC>
__device__ __forceinline__ void decode4(uint32_t v, float* f) {
    if (DEC == 1 && E5M2) {
        h2x2_f32(__byte_perm(v, 0u, 0x1404), f);
        h2x2_f32(__byte_perm(v, 0u, 0x3424), f + 2);
        return;
    }
#if FP8_CVT_E4M3
    if (DEC == 1) {
        // Two codes per conversion to an f16 pair (element 0 low).
        uint32_t h01, h23;
        asm("{.reg .b16 lo, hi;\n\t"
            "mov.b32 {lo, hi}, %2;\n\t"
            "cvt.rn.f16x2.e4m3x2 %0, lo;\n\t"
            "cvt.rn.f16x2.e4m3x2 %1, hi;}"
            : "=r"(h01), "=r"(h23)
            : "r"(v));
        h2x2_f32(h01, f);
        h2x2_f32(h23, f + 2);
        return;
    }
#endif
    const float bias = E5M2 ? 0x1p112f : 0x1p120f;
    decode4_raw<E5M2>(v, f);
#pragma unroll
    for (int k = 0; k < 4; k++) f[k] *= bias;
}

// 16 codes -> their exact values.
template <int E5M2, int DEC = 1>
__device__ __forceinline__ void decode16(uint4 q, float* f) {
    decode4<E5M2, DEC>(q.x, f);
    decode4<E5M2, DEC>(q.y, f + 4);
    decode4<E5M2, DEC>(q.z, f + 8);
    decode4<E5M2, DEC>(q.w, f + 12);
}

// 16 bytes of a weight row, read-only and not kept in L1 (streamed once per launch).
__device__ __forceinline__ uint4 ld_stream16(const void* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

// Tile-lane order (`fp8_lanes`, set by the host at open with the upload's choice,
// cuda/matmul_fp8.rs): within every whole 128-column tile of a row, 16-byte chunk k (k = 0..7)
// holds the codes of columns 4k + 32i + m (i, m = 0..3; byte 4i + m), not 16k..16k+15. The
// activation a chunk multiplies is then four float4 at x[4k + 32i], and the eight lanes reading
// one tile's chunks read 128 contiguous bytes per load: each x load of a warp touches four
// 128-byte lines, where the row-major order's 64-byte lane stride touched sixteen half-used ones
// (Nsight, session 6, 34816x5120: 33% of the global-load sectors were excess from uncoalesced
// access, the amount this stride wastes by our count). A partial last tile keeps the row-major
// order. 0 = the checkpoint's row-major order everywhere.
__constant__ int fp8_lanes;

// Chunks of a row in tile-lane order: those of its whole tiles (0 in row-major order).
__device__ __forceinline__ int fp8_lane_chunks(int nch) { return fp8_lanes ? (nch & ~7) : 0; }

// Index (in float4) of the i-th float4 of activation chunk c's 16 values (see fp8_lanes; c below
// nlane is in tile-lane order).
__device__ __forceinline__ int x4_index(int c, int i, int nlane) {
    return c < nlane ? 32 * (c >> 3) + (c & 7) + 8 * i : 4 * c + i;
}

// The 16 activation values chunk c multiplies, in its byte order (through L1: every row group of
// the SM reads the same activation row). CX: through L2 only (ld.global.cg), for an activation
// written earlier in the same launch by other blocks (persist_probe.cu), which the read-only path
// may not see.
template <bool CX = false>
__device__ __forceinline__ void load_x16(const float* __restrict__ x, int c, int nlane,
                                         float* xv) {
    const float4* xp = reinterpret_cast<const float4*>(x);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float4 t = CX ? __ldcg(xp + x4_index(c, i, nlane)) : __ldg(xp + x4_index(c, i, nlane));
        xv[4 * i] = t.x;
        xv[4 * i + 1] = t.y;
        xv[4 * i + 2] = t.z;
        xv[4 * i + 3] = t.w;
    }
}

// Σ code value x xv over one 16-byte chunk, in column order (f32).
template <int E5M2, int DEC>
__device__ __forceinline__ float dot16(uint4 q, const float* xv) {
    float wf[16];
    decode16<E5M2, DEC>(q, wf);
    float d = 0.f;
#pragma unroll
    for (int k = 0; k < 16; k++) d = fmaf(wf[k], xv[k], d);
    return d;
}

// ---- one activation row: one template for every variant ------------------------------------
// Each warp owns R consecutive weight rows and splits their columns: lane t takes 16-byte
// chunks t, t + 32, t + 64, ... Each step a thread holds U chunks of each of its R rows in
// registers (U x R independent 16-byte loads); as it finishes a chunk, it issues the load of the
// same slot of the next step into the freed registers, so U x R loads stay in flight while it
// computes (decode is bound by HBM latency x bytes in flight). Weights bypass L1
// (ld.global.nc.L1::no_allocate) so the activation row, which every group on an SM reads, stays
// there. R divides 128 and groups start at multiples of R, so a group's rows share one 128-row
// tile and each chunk needs one tile scale, loaded with its weights. Sums: f32, 16 products per
// chunk in column order, then one tile-scale FMA per chunk; warp sums by shuffles.
// The first step's weights are loaded before pdl_wait() (no kernel of the step writes them).
#define FP8R_THREADS 128

// Chunk c of each of the NR rows, and its tile scale of each of the NS scale sets (TILED).
template <bool TILED, int NR, int NS>
__device__ __forceinline__ void row1_load_chunk(const uint4* const (&wr)[NR],
                                                const float* const (&srow)[NS], int c,
                                                uint4 (&q)[NR], float (&s)[NS]) {
#pragma unroll
    for (int r = 0; r < NR; r++) q[r] = ld_stream16(wr[r] + c);
    if (TILED) {
#pragma unroll
        for (int k = 0; k < NS; k++) s[k] = __ldg(srow[k] + (c >> 3));
    }
}

// The main loop of every one-row kernel: lane `gt` of a warp accumulates the dot of x with NR
// weight rows `wr` into acc[NR] (partial sums over its chunks, not yet reduced over the warp). The rows form NS equal sets, set k all in one 128-row tile whose tile-scale
// row is srow[k] (NS = 1: gemv_fp8_row1; NS = 2: the gate rows and the up rows of
// gemv_fp8_silu_row1). Calls pdl_wait() after the first step's weight loads, before x, then
// after_wait() (the folded norm's partial sums are requested there, see rms_fold.cuh). CX: see
// load_x16.
// T: chunks between a lane's consecutive chunks (32: the warp splits the row; 64: two warps
// split it, lane gt taking chunks gt, gt + 64, ... with gt = lane or lane + 32).
template <int E5M2, bool TILED, int DEC, int NR, int NS, int U, int MINB, bool CX = false,
          int T = 32, class AfterWait>
__device__ __forceinline__ void row1_accumulate(const uint4* const (&wr)[NR],
                                                const float* const (&srow)[NS],
                                                const float* __restrict__ x, int nch, int gt,
                                                float (&acc)[NR], AfterWait after_wait) {
    static_assert(NR % NS == 0, "equal scale sets");
    constexpr int STEP = T * U;  // chunks per row per step
    constexpr int PER = NR / NS;
    const int nlane = fp8_lane_chunks(nch);
#pragma unroll
    for (int r = 0; r < NR; r++) acc[r] = 0.f;
    uint4 q[U][NR];
    float s[U][NS];
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int c = gt + T * u;
#pragma unroll
        for (int k = 0; k < NS; k++) s[u][k] = 1.f;
#pragma unroll
        for (int r = 0; r < NR; r++) q[u][r] = make_uint4(0u, 0u, 0u, 0u);
        if (c < nch) row1_load_chunk<TILED>(wr, srow, c, q[u], s[u]);
    }
    // The activation is the previous kernel's output: read it only after the wait.
    pdl_wait();
    pdl_trigger_early<MINB>();
    after_wait();
    for (int c0 = gt; c0 < nch; c0 += STEP) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + T * u;
            if (c >= nch) break;  // and so is every later chunk of this thread
            float xv[16];
            load_x16<CX>(x, c, nlane, xv);
#pragma unroll
            for (int r = 0; r < NR; r++) {
                const float d = dot16<E5M2, DEC>(q[u][r], xv);
                acc[r] = TILED ? fmaf(d, s[u][r / PER], acc[r]) : acc[r] + d;
            }
            // This slot of the next step, into the registers just read.
            const int cn = c + STEP;
            if (cn < nch) row1_load_chunk<TILED>(wr, srow, cn, q[u], s[u]);
        }
    }
}

// A row group's R weight-row pointers from row0 (a missing last row re-reads the previous one;
// its result is never written) and its tile-scale row (all R rows share one 128-row tile).
template <bool TILED, int R>
__device__ __forceinline__ void row1_group(const uint8_t* __restrict__ w,
                                           const float* __restrict__ sc, int rows, int cols,
                                           int row0, const uint4* (&wr)[R],
                                           const float* (&srow)[1]) {
#pragma unroll
    for (int r = 0; r < R; r++)
        wr[r] = reinterpret_cast<const uint4*>(w + (size_t)min(row0 + r, rows - 1) * cols);
    srow[0] = TILED ? sc + (size_t)(row0 >> 7) * ((cols + 127) >> 7) : nullptr;
}

// Butterfly sums of a warp's R partial sums: lane r < R returns row r's total times `scale`
// (the per-tensor scale; 1 with tile scales), the other lanes 0.
template <int R>
__device__ __forceinline__ float row1_lane_total(float (&acc)[R], int lane, float scale) {
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = warp_sum(acc[r]);
    float v = 0.f;
#pragma unroll
    for (int r = 0; r < R; r++)
        if (lane == r) v = acc[r] * scale;
    return v;
}

