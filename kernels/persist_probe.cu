// Measurement probe for docs/architecture/persistent-decode.md (plan step 1; no model uses it):
// what a grid-wide barrier costs, and whether one-row FP8 GEMVs chained inside one persistent
// launch, each loading its first weights before the barrier that publishes its input, beat the
// same GEMVs as separate launches with programmatic dependent launch.
//
//  * persist_barriers(bar, rounds): `rounds` grid barriers and nothing else.
//  * persist_fp8_chain(w1, s1, w2, s2, xa, xb, r1, c1, layers, bar): for each layer l,
//    xb = W1_l xa then xa = W2_l xb, W1_l [r1, c1] and W2_l [c1, r1] the l-th row blocks of the
//    stacked weights w1 [layers * r1, c1] and w2 [layers * c1, r1] (FP8 E4M3 with 128x128 tile
//    scales in the device layout of cuda/matmul_fp8.rs; r1 and c1 multiples of 128), each phase
//    a warp per 4 rows with 6 steps of loads in flight (the main loop of the deep n1d6 GEMV,
//    fp8_row.cuh). The barrier sits between a phase's weight preload and its first activation
//    read (row1_accumulate's after_wait).
//  * persist_fp8_chain_late: the same with the barrier before the phase's first weight loads,
//    to tell the barrier's saving from the preload's.
//  * probe_read_rows(w, rows, cols, sink): the one-row GEMV's weight reads alone (a warp per 4
//    rows, 6 steps of 16-byte loads in flight, as n1d6) with no decode, activation or FMA: an
//    xor of the words. probe_read_stream(w, n16, sink): the same bytes read grid-stride, 8
//    loads in flight per thread. Together with the GEMV on the same weight they tell the
//    memory system's time for one such read from the kernel's own (tests/cuda_bench_persist.rs,
//    session 12). sink[0] is written only if the xor hits a value random data never gives.
//
// Launch (cuda/persist_probe.rs): block 128, every block resident at once (at most
// PERSIST_MINB per SM), max(r1, c1) / 4 warps at most; bar: two words zeroed once (every
// launch leaves the count at zero; the generation may start anywhere).
#include "common.cuh"
#include "fp8_row.cuh"

#define PERSIST_MINB 3

DEVI unsigned ld_acquire_u32(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// Every block of the grid waits here until all have arrived. bar[0] counts arrivals, bar[1] is
// the generation: a block reads the generation before it arrives, the last arrival resets the
// count and advances the generation, the others spin until it moves. Writes before the barrier
// are visible to reads after it through L2 (the fences; readers use ld.global.cg).
DEVI void grid_barrier(unsigned* bar) {
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned gen = ld_acquire_u32(bar + 1);
        __threadfence();
        if (atomicAdd(bar, 1u) == gridDim.x - 1) {
            atomicExch(bar, 0u);
            __threadfence();
            atomicAdd(bar + 1, 1u);
        } else {
            while (ld_acquire_u32(bar + 1) == gen) {
            }
        }
        __threadfence();
    }
    __syncthreads();
}

// One phase: out = W x for this warp's 4 rows (if it has any). Every thread of every block
// passes the barrier exactly once and at one place in the code: after its first weight loads
// (PRELOAD; a warp without rows runs the same main loop over no columns, so it loads nothing and
// still meets the barrier there) or before them.
template <bool PRELOAD>
DEVI void chain_phase(const uint8_t* w, const float* sc, const float* x, float* out, int rows,
                      int cols, unsigned* bar) {
    const int lane = threadIdx.x & 31;
    const int row0 = (blockIdx.x * (FP8R_THREADS / 32) + threadIdx.x / 32) * 4;
    const bool has = row0 < rows;
    if (!PRELOAD) grid_barrier(bar);
    const uint4* wr[4];
    const float* srow[1];
    row1_group<true, 4>(w, sc, rows, cols, has ? row0 : 0, wr, srow);
    float acc[4];
    row1_accumulate<0, true, 1, 4, 1, 6, 0, true>(wr, srow, x, has ? cols >> 4 : 0, lane, acc,
                                                  [&] {
                                                      if (PRELOAD) grid_barrier(bar);
                                                  });
    const float v = row1_lane_total<4>(acc, lane, 1.f);
    if (has && lane < 4 && row0 + lane < rows) out[row0 + lane] = v;
}

template <bool PRELOAD>
DEVI void chain(const uint8_t* w1, const float* s1, const uint8_t* w2, const float* s2, float* xa,
                float* xb, int r1, int c1, int layers, unsigned* bar) {
    const size_t tr = r1 >> 7, tc = c1 >> 7;  // 128-row/column tiles of W1_l
    for (int l = 0; l < layers; l++) {
        chain_phase<PRELOAD>(w1 + (size_t)l * r1 * c1, s1 + l * tr * tc, xa, xb, r1, c1, bar);
        chain_phase<PRELOAD>(w2 + (size_t)l * c1 * r1, s2 + l * tc * tr, xb, xa, c1, r1, bar);
    }
}

#define PERSIST_CHAIN(name, preload)                                                            \
    extern "C" __global__ void __launch_bounds__(FP8R_THREADS, PERSIST_MINB)                    \
        name(const uint8_t* w1, const float* s1, const uint8_t* w2, const float* s2, float* xa, \
             float* xb, int r1, int c1, int layers, unsigned* bar) {                           \
        chain<preload>(w1, s1, w2, s2, xa, xb, r1, c1, layers, bar);                           \
    }
PERSIST_CHAIN(persist_fp8_chain, true)
PERSIST_CHAIN(persist_fp8_chain_late, false)

extern "C" __global__ void __launch_bounds__(FP8R_THREADS) persist_barriers(unsigned* bar,
                                                                            int rounds) {
    for (int i = 0; i < rounds; i++) grid_barrier(bar);
}

// See the top of the file. Grid: rows / 16 blocks of 128 threads (n1d6's).
extern "C" __global__ void __launch_bounds__(FP8R_THREADS, 3)
    probe_read_rows(const uint8_t* w, int rows, int cols, unsigned* sink) {
    constexpr int R = 4, U = 6, STEP = 32 * U;
    const int lane = threadIdx.x & 31;
    const int row0 = (blockIdx.x * (FP8R_THREADS / 32) + threadIdx.x / 32) * R;
    if (row0 >= rows) return;
    const uint4* wr[R];
    const float* srow[1];
    row1_group<false, R>(w, nullptr, rows, cols, row0, wr, srow);
    const int nch = cols >> 4;
    uint4 q[U][R];
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int c = lane + 32 * u;
#pragma unroll
        for (int r = 0; r < R; r++) q[u][r] = c < nch ? ld_stream16(wr[r] + c) : make_uint4(0u, 0u, 0u, 0u);
    }
    unsigned acc = 0u;
    for (int c0 = lane; c0 < nch; c0 += STEP) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + 32 * u;
            if (c >= nch) break;
#pragma unroll
            for (int r = 0; r < R; r++) acc ^= q[u][r].x ^ q[u][r].y ^ q[u][r].z ^ q[u][r].w;
            const int cn = c + STEP;
            if (cn < nch) {
#pragma unroll
                for (int r = 0; r < R; r++) q[u][r] = ld_stream16(wr[r] + cn);
            }
        }
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;
}

// See the top of the file. Grid-stride over n16 16-byte words, 8 loads in flight per thread.
extern "C" __global__ void __launch_bounds__(256) probe_read_stream(const uint4* w, long long n16,
                                                                    unsigned* sink) {
    constexpr int U = 8;
    const long long nt = (long long)gridDim.x * blockDim.x;
    unsigned acc = 0u;
    for (long long i0 = (long long)blockIdx.x * blockDim.x + threadIdx.x; i0 < n16; i0 += nt * U) {
        uint4 q[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const long long i = i0 + nt * u;
            q[u] = i < n16 ? ld_stream16(w + i) : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int u = 0; u < U; u++) acc ^= q[u].x ^ q[u].y ^ q[u].z ^ q[u].w;
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;
}

// ---- A persistent stream through a shared-memory ring (session 19) ----------------------------
// probe_ring_stream(w, bounds, units, waves, stage_bytes, stages, mode, bar, ready, epoch, sums):
// one block per SM reads its share of every unit of w in order (unit u is the 16-byte words
// [bounds[u], bounds[u + 1]) of w, split evenly over the grid; `waves` consecutive units make
// one phase, the bytes of one weight) through a ring of `stages` shared-memory stages of
// `stage_bytes`, each filled by one `cp.async.bulk` that completes on the stage's mbarrier, and
// sums the words it reads into sums[block] (wrapping u32; the test checks that every word was
// read once). No arithmetic beyond the sum: the memory system's and the ring's time for the byte
// stream a persistent decode layer would read (docs/architecture/persistent-decode.md).
//  mode bit 0: a grid barrier between phases, where a GEMV phase waits for the previous one's
//              output;
//  mode bit 1: the ring's loads run ahead across phases (the next phase's first bytes are in
//              flight while the block waits), else a phase's loads start when it does;
//  mode bit 2: dataflow instead of a barrier. A phase's waves are its output rows in order and
//              a unit's chunks its columns in order (weights laid out so, as an upload-time
//              repack would), so chunk j of n of a unit of phase p needs the previous phase's
//              waves up to (j + 1) * waves / n: the block waits until every block has counted
//              that unit done in ready[] (ready[u] reaches epoch * gridDim.x; the counters
//              start at zero and each launch passes the next epoch).
// Launch: gridDim.x <= the SMs (every block resident: the barrier and the waits), RING_THREADS
// threads, stages * stage_bytes bytes of dynamic shared memory, stage_bytes a multiple of 16,
// stages <= RING_MAX_STAGES. sm_90 only (the bulk copies); elsewhere it writes nothing.
#define RING_THREADS 256
#define RING_MAX_STAGES 16

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
DEVI void ring_issue(uint32_t dst, const void* src, uint32_t bytes, uint32_t mbar) {
    // The stage's previous contents were read through the generic proxy; order those reads
    // before the async proxy's write.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(mbar), "r"(bytes)
                 : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
            "r"(dst),
        "l"(src), "r"(bytes), "r"(mbar)
        : "memory");
}

DEVI void ring_wait(uint32_t mbar, uint32_t parity) {
    uint32_t done = 0;
    while (!done) {
        asm volatile(
            "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            " selp.u32 %0, 1, 0, p;\n}" : "=r"(done) : "r"(mbar), "r"(parity) : "memory");
    }
}

DEVI unsigned long long globaltimer_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

DEVI unsigned warp_sum_u32(unsigned v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// This block's words [begin, end) of unit p.
DEVI void ring_share(const unsigned* bounds, int p, long long& begin, long long& end) {
    const long long lo = bounds[p], n = (long long)bounds[p + 1] - lo;
    const long long per = (n + gridDim.x - 1) / gridDim.x;
    begin = lo + min(n, per * blockIdx.x);
    end = lo + min(n, per * (blockIdx.x + 1));
}
#endif

extern "C" __global__ void __launch_bounds__(RING_THREADS, 1)
    probe_ring_stream(const uint4* w, const unsigned* bounds, int units, int waves,
                      int stage_bytes, int stages, int mode, unsigned* bar, unsigned* ready,
                      unsigned epoch, unsigned* sums) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint4 ring[];
    __shared__ __align__(8) uint64_t full[RING_MAX_STAGES];
    const int tid = threadIdx.x;
    const long long stage_words = stage_bytes / 16;
    const uint32_t ring0 = (uint32_t)__cvta_generic_to_shared(ring);
    const uint32_t full0 = (uint32_t)__cvta_generic_to_shared(full);
    if (tid == 0) {
        for (int s = 0; s < stages; s++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(full0 + 8 * s) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    // The producer (thread 0): the next chunk to load (unit pp, word poff of [.., pend)) and the
    // number of chunks issued; every thread counts the chunks consumed.
    int pp = 0;
    long long poff = 0, pend = 0;
    long long issued = 0, consumed = 0;
    if (tid == 0) ring_share(bounds, 0, poff, pend);
    // Issues chunks while a stage is free and the next chunk's unit is at most `limit`.
    auto refill = [&](int limit) {
        while (issued - consumed < stages) {
            while (poff >= pend && pp < units) {
                if (++pp < units) ring_share(bounds, pp, poff, pend);
            }
            if (pp >= units || pp > limit) return;
            const long long n = min(stage_words, pend - poff);
            const int s = (int)(issued % stages);
            ring_issue(ring0 + (uint32_t)(s * stage_bytes), w + poff, (uint32_t)(n * 16),
                       full0 + 8 * s);
            poff += n;
            issued++;
        }
    };
    const bool ahead = mode & 2, dataflow = mode & 4;
    const unsigned target = epoch * gridDim.x;
    if (tid == 0) refill(ahead ? units : waves - 1);
    unsigned acc = 0u;
    int satisfied = -1;  // every unit up to this one is known done on every block (dataflow)
    for (int u = 0; u < units; u++) {
        const int p = u / waves;
        const int limit = ahead ? units : (p + 1) * waves - 1;
        if (u > 0 && u % waves == 0) {
            if (mode & 1) grid_barrier(bar);
            if (tid == 0) refill(limit);
        }
        long long begin, end;
        ring_share(bounds, u, begin, end);
        const long long chunks = (end - begin + stage_words - 1) / stage_words;
        long long j = 0;
        for (long long off = begin; off < end; off += stage_words, j++) {
            if (dataflow && p > 0) {
                const long long last = min((long long)waves - 1, ((j + 1) * waves - 1) / chunks);
                const int need = (p - 1) * waves + (int)last;
                if (need > satisfied) {
                    if (tid == 0) {
                        // A wait that cannot end (a caller's epoch or ready words wrong) fails
                        // the launch after 0.2 s instead of hanging it.
                        const unsigned long long t0 = globaltimer_ns();
                        while ((int)(ld_acquire_u32(ready + need) - target) < 0) {
                            if (globaltimer_ns() - t0 > 200000000ull) __trap();
                        }
                    }
                    __syncthreads();
                    satisfied = need;
                }
            }
            const long long n = min(stage_words, end - off);
            const int s = (int)(consumed % stages);
            ring_wait(full0 + 8 * s, (uint32_t)((consumed / stages) & 1));
            const uint4* st = ring + s * stage_words;
            for (long long i = tid; i < n; i += RING_THREADS) {
                const uint4 v = st[i];
                acc += v.x + v.y + v.z + v.w;
            }
            __syncthreads();  // every thread is done with stage s
            consumed++;
            if (tid == 0) refill(limit);
        }
        // The unit's reads all precede this (the __syncthreads above); publish it.
        if (dataflow && tid == 0) {
            __threadfence();
            atomicAdd(ready + u, 1u);
        }
    }
    acc = warp_sum_u32(acc);
    __shared__ unsigned part[RING_THREADS / 32];
    if ((tid & 31) == 0) part[tid / 32] = acc;
    __syncthreads();
    if (tid == 0) {
        unsigned t = 0u;
        for (int i = 0; i < RING_THREADS / 32; i++) t += part[i];
        sums[blockIdx.x] = t;
    }
#endif
}
