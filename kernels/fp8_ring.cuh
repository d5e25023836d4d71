// The one-row FP8 decode GEMV streamed through a shared-memory ring (sm_90: cp.async.bulk and
// mbarrier). Included by gemv_fp8.cu.
//
// Why: the register-fed one-row kernels (gemv_fp8_row1) keep their bytes in flight in registers.
// Their deep forms fill the register file (n1d6: 3 blocks x 128 threads x 168 registers), so the
// next kernel's blocks cannot become resident before this one's blocks exit, and every kernel
// boundary drains HBM and ramps it up again (~3.5 us per 27B GEMV by the session-7 fit). Here
// the bytes in flight live in shared memory, filled by bulk copies that one lane per warp issues:
// a block holds a bounded ring and few registers, so the next GEMV's blocks fit beside this
// one's, start their copies as soon as this kernel triggers (it is one wave by construction), and
// HBM keeps streaming across the boundary.
//
// Shape: one launch is at most one block per SM. Each warp owns `rpw` <= RING_ROWS consecutive
// rows (the host picks rpw so that the grid fits in one wave) and walks their columns in slabs of
// 32 chunks (512 bytes): piece p holds chunks 32p..32p+31 of every row of the warp, one bulk copy
// per row, all completing on the slot's mbarrier. Lane t multiplies chunk 32p + t of every row
// with one activation load (as the register-fed kernels share one load over their R rows), so it
// reads chunks t, t + 32, ... of each row in increasing order like gemv_fp8_row1: the per-lane
// sums, the warp sums and so the outputs are the same floats as that kernel's. The first S pieces
// are requested before pdl_wait (weights only).
#pragma once
#include <stdint.h>

#include "common.cuh"
#include "fp8_row.cuh"
#include "rms_fold.cuh"

// Bytes of one row in one piece (32 lanes x 16 bytes).
#define RING_SLAB 512
// Most rows one warp owns (the accumulators are registers).
#define RING_ROWS 8

// Shared-memory address of a generic pointer into shared memory.
DEVI uint32_t smem_addr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
DEVI void ring_bar_init(uint64_t* bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)) : "memory");
}

// The slot's barrier expects `bytes` more before its phase completes (and this arrival).
DEVI void ring_expect(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
                 "r"(bytes)
                 : "memory");
}

// Requests `bytes` of global `src` into shared `dst`, counted on `bar` when they land.
DEVI void ring_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
            smem_addr(dst)),
        "l"(src), "r"(bytes), "r"(smem_addr(bar))
        : "memory");
}

// Waits until `bar` has completed the phase of the given parity.
DEVI void ring_wait(uint64_t* bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile(
            "{ .reg .pred p;\n\t"
            "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
            "selp.u32 %0, 1, 0, p; }"
            : "=r"(done)
            : "r"(smem_addr(bar)), "r"(parity)
            : "memory");
    } while (!done);
}
#endif

// out[row] = W[row] . x for rows [0, rows), W FP8 with tile scales (TILED) or one tensor scale,
// with the folded norm's halves in `f` as gemv_fp8_row1 (rms_fold.cuh). WARPS warps per block, S
// ring slots per warp; dynamic shared memory WARPS x S x rpw x RING_SLAB bytes.
template <int E5M2, bool TILED, int DEC, int WARPS, int S>
__device__ __forceinline__ void gemv_fp8_ring(const uint8_t* __restrict__ w,
                                              const float* __restrict__ sc, float tscale,
                                              const float* __restrict__ x,
                                              float* __restrict__ out, int rows, int cols, int rpw,
                                              const RmsFold& f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t ring_sh[];
    __shared__ __align__(8) uint64_t bars[WARPS][S];
    __shared__ float fold_sh[1];
    __shared__ float wss[WARPS];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int row0 = (blockIdx.x * WARPS + wid) * rpw;
    const int nr = max(0, min(rpw, rows - row0));
    const int nch = cols >> 4;
    const int npieces = nr > 0 ? (nch + 31) >> 5 : 0;
    const int slot_bytes = rpw * RING_SLAB;
    uint8_t* slots = ring_sh + (size_t)wid * S * slot_bytes;
    uint64_t* bar = bars[wid];
    // Lane 0: piece p of every row of the warp into slot p % S.
    auto fetch = [&](int p) {
        const int off = p * RING_SLAB;
        const uint32_t bytes = (uint32_t)min(RING_SLAB, cols - off);
        uint8_t* dst = slots + (p % S) * slot_bytes;
        ring_expect(bar + p % S, bytes * nr);
        for (int r = 0; r < nr; r++)
            ring_copy(dst + r * RING_SLAB, w + (size_t)(row0 + r) * cols + off, bytes, bar + p % S);
    };
    if (lane == 0) {
        for (int s = 0; s < S; s++) ring_bar_init(bar + s);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        for (int p = 0; p < min(S, npieces); p++) fetch(p);
    }
    __syncwarp();
    // The activation is the previous kernel's output: read it only after the wait.
    pdl_wait();
    pdl_trigger_early<1>();
    float rs = 1.f;
    if (f.parts_in) {
        float ss_in = 0.f;
        if (wid == 0) ss_in = rms_fold_sum(f.parts_in, f.nparts);
        rs = rms_fold_block_scale(ss_in, cols, f.eps, fold_sh);
        rms_fold_materialize(x, rs, cols, f);
    }
    const int nlane = fp8_lane_chunks(nch);
    const int tcols = (cols + 127) >> 7;
    float acc[RING_ROWS];
    const float* srow[RING_ROWS];
#pragma unroll
    for (int r = 0; r < RING_ROWS; r++) {
        acc[r] = 0.f;
        srow[r] = TILED ? sc + (size_t)(min(row0 + r, rows - 1) >> 7) * tcols : nullptr;
    }
    for (int p = 0; p < npieces; p++) {
        ring_wait(bar + p % S, (uint32_t)((p / S) & 1));
        const int c = 32 * p + lane;
        if (c < nch) {
            const uint8_t* slot = slots + (p % S) * slot_bytes + lane * 16;
            float xv[16];
            load_x16(x, c, nlane, xv);
#pragma unroll
            for (int r = 0; r < RING_ROWS; r++) {
                if (r < nr) {
                    const uint4 q = *reinterpret_cast<const uint4*>(slot + r * RING_SLAB);
                    const float d = dot16<E5M2, DEC>(q, xv);
                    acc[r] = TILED ? fmaf(d, __ldg(srow[r] + (c >> 3)), acc[r]) : acc[r] + d;
                }
            }
        }
        // Every lane is done with this slot before its next piece is requested into it.
        __syncwarp();
        if (lane == 0 && p + S < npieces) fetch(p + S);
    }
    pdl_trigger_late<1>();
    float sq = 0.f;
#pragma unroll
    for (int r = 0; r < RING_ROWS; r++) {
        if (r < nr) {
            const float v = warp_sum(acc[r]) * (TILED ? 1.f : tscale) * rs;
            const int row = row0 + r;
            if (lane == 0) {
                out[row] = v;
                if (f.res) {
                    const float rr = f.res[row] + v;
                    f.res[row] = rr;
                    f.xg[row] = rr * f.g[row];
                    sq += rr * rr;
                }
            }
        }
    }
    if (f.res) {
        // The block's sum of squares of its new residual rows: warps in order.
        if (lane == 0) wss[wid] = sq;
        __syncthreads();
        if (threadIdx.x == 0) {
            float s = 0.f;
            for (int i = 0; i < WARPS; i++) s += wss[i];
            f.parts_out[blockIdx.x] = s;
        }
    }
#else
    __trap();  // the host launches these only on sm_90 and later
#endif
}
