// The one-row FP8 decode GEMV streamed through shared memory (sm_80+: cp.async). Included by
// gemv_fp8.cu.
//
// Why: the register-fed one-row kernels (gemv_fp8_row1) keep their bytes in flight in registers.
// Their deep forms fill the register file (n1d6: 3 blocks x 128 threads x 168 registers), so the
// next kernel's blocks cannot become resident before this one's blocks exit, and every kernel
// boundary drains HBM and ramps it up again (~3.5 us per 27B GEMV by the session-7 fit). Here
// the bytes in flight live in shared memory, filled by asynchronous 16-byte copies: a block
// holds a bounded ring and few registers, so the next GEMV's blocks fit beside this one's, start
// their copies as soon as this kernel triggers (it is one wave by construction), and HBM keeps
// streaming across the boundary.
//
// Shape: one launch is at most one block per SM. Each warp owns `rpw` <= RING_ROWS consecutive
// rows (the host picks rpw so that the grid fits in one wave) and walks their columns in slabs of
// 32 chunks (512 bytes): piece p holds chunks 32p..32p+31 of every row of the warp, and lane t
// copies and later multiplies chunk 32p + t of every row, with one activation load for all of
// them (as the register-fed kernels share one load over their R rows). A lane reads only what it
// copied, so its own cp.async groups are its only synchronization. Lane t reads chunks t, t + 32,
// ... of each row in increasing order like gemv_fp8_row1: the per-lane sums, the warp sums and
// so the outputs are the same floats as that kernel's. The first S pieces are requested before
// pdl_wait (weights only).
//
// (Session 8 first fed the ring with cp.async.bulk and mbarriers, one lane issuing per warp:
// correct, but 36-47% of HBM bandwidth alone on the 27B shapes.)
#pragma once
#include <stdint.h>

#include "common.cuh"
#include "fp8_row.cuh"
#include "rms_fold.cuh"

// Bytes of one row in one piece (32 lanes x 16 bytes).
#define RING_SLAB 512
// Most rows one warp owns (the accumulators are registers).
#define RING_ROWS 8

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
// 16 bytes of global `src` into shared `dst`, asynchronously (L2 only, as the weights stream).
DEVI void ring_copy16(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(
                     (uint32_t)__cvta_generic_to_shared(dst)),
                 "l"(src)
                 : "memory");
}
DEVI void ring_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
DEVI void ring_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
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
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    extern __shared__ __align__(128) uint8_t ring_sh[];
    __shared__ float fold_sh[1];
    __shared__ float wss[WARPS];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int row0 = (blockIdx.x * WARPS + wid) * rpw;
    const int nr = max(0, min(rpw, rows - row0));
    const int nch = cols >> 4;
    const int npieces = nr > 0 ? (nch + 31) >> 5 : 0;
    const int slot_bytes = rpw * RING_SLAB;
    // This lane's 16 bytes of row 0 in slot 0; row r of slot s is + s * slot_bytes + r * 512.
    uint8_t* mine = ring_sh + (size_t)wid * S * slot_bytes + lane * 16;
    const uint8_t* wl = w + (size_t)row0 * cols + lane * 16;
    // Piece p: this lane's chunk 32p + lane of every row of the warp into slot p % S, as one
    // commit group (empty past the end, so the group count stays in step).
    auto fetch = [&](int p) {
        if (p < npieces && 32 * p + lane < nch) {
            uint8_t* dst = mine + (p % S) * slot_bytes;
            for (int r = 0; r < nr; r++)
                ring_copy16(dst + r * RING_SLAB, wl + (size_t)r * cols + p * RING_SLAB);
        }
        ring_commit();
    };
#pragma unroll
    for (int p = 0; p < S; p++) fetch(p);
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
        // Each lane reads only the bytes it copied itself: its own groups are all it waits for.
        ring_wait<S - 1>();
        const int c = 32 * p + lane;
        if (c < nch) {
            const uint8_t* slot = mine + (p % S) * slot_bytes;
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
        fetch(p + S);
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
    __trap();  // the host launches these only on sm_80 and later
#endif
}
