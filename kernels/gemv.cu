// Decode GEMV: out[j, r] = sum_c x[j, c] * W[r, c] for a few activation rows j (n <= GEMV_MAX_N),
// reading W's quantized blocks directly.
//
// Two families:
//  * gemv_f_<fmt>: dequantize 16 elements at a time to f32 (common.cuh decoders) and FMA against
//    the f32 activations. Serves every format; the reference GPU path.
//  * gemv_q8_<fmt>: the activation is quantized once to 8-bit blocks of 32 (quantize_q8) and the
//    weight quants meet it in dp4a integer dot products, so dequantization arithmetic stays off
//    the critical path and the loop is bound by weight bytes. Formats with a repacked layout
//    (Q4_0, Q8_0) get 16-byte weight loads.
//
//  * gemv_q8r_<fmt>: the n = 1 default, the same work items with 4 rows per 128-thread block and
//    the columns split over the whole block (see below).
//
//  * n = 1 variants of the dp4a GEMV, chosen per shape by the host (gemv_q8.rs `q8_one_row`) or
//    forced for A/B with POCKET_GEMV_Q8 = r (gemv_q8r_*), r64 (gemv_q8r64_*, 64 threads),
//    w (gemv_q8w_*, a warp per row), r1 (gemv_q8r1_*, one row per block), legacy (the session-3
//    choice) or auto. A persistent grid over row groups with loads pipelined across groups
//    (gemv_q8p_*) was measured on the H200 in session 4, lost on every shape (0.56-0.91x) and
//    was removed.
//
//  * gemv_h_<f16|bf16>_r<1|4>: the n = 1 path for 16-bit float weights: R rows per block, the
//    columns split over the whole block, 16-byte weight loads (see below).
//
// Launch (gemv_f, gemv_q8): block = 128 threads = 4 warps, one warp per weight row;
// grid.x = ceil(rows / 4).
#include "common.cuh"
#include "dot_q8.cuh"
#include "dot_formats.cuh"

#define GEMV_MAX_N 8
#define GEMV_WARPS 4

template <typename F, int NMAX>
__device__ void gemv_f(const uint8_t* __restrict__ w, const float* __restrict__ x,
                       float* __restrict__ out, int rows, int cols, int n) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int r = blockIdx.x * GEMV_WARPS + warp;
    if (r >= rows) return;
    size_t nb = cols / F::QK;
    const uint8_t *row, *aux;
    row_ptrs<F>(w, rows, nb, r, row, aux);
    constexpr int CPB = F::QK / 16;  // 16-element chunks per block
    int nchunks = cols / 16;
    float acc[NMAX];
#pragma unroll
    for (int j = 0; j < NMAX; j++) acc[j] = 0.f;
    for (int k = lane; k < nchunks; k += 32) {
        float v[16];
        F::decode16(row, aux, k / CPB, k % CPB, v);
#pragma unroll
        for (int j = 0; j < NMAX; j++) {
            if (j < n) {
                const float4* xp = (const float4*)(x + (size_t)j * cols + (size_t)k * 16);
                float s = 0.f;
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    float4 xv = xp[q];
                    s += v[4 * q] * xv.x + v[4 * q + 1] * xv.y + v[4 * q + 2] * xv.z + v[4 * q + 3] * xv.w;
                }
                acc[j] += s;
            }
        }
    }
#pragma unroll
    for (int j = 0; j < NMAX; j++) {
        if (j < n) {
            float s = warp_sum(acc[j]);
            if (lane == 0) out[(size_t)j * rows + r] = s;
        }
    }
}

// `_n1` serves the pure decode case (one activation row) with no per-row guards; `_n8` serves
// 1..=8 rows, loading each weight block once for all of them.
#define DEF_GEMV_F(name, F)                                                                    \
    extern "C" __global__ void __launch_bounds__(128) gemv_f_##name##_n1(                     \
        const uint8_t* w, const float* x, float* out, int rows, int cols, int n) {             \
        gemv_f<F, 1>(w, x, out, rows, cols, 1);                                                \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(128) gemv_f_##name##_n8(                     \
        const uint8_t* w, const float* x, float* out, int rows, int cols, int n) {             \
        gemv_f<F, 8>(w, x, out, rows, cols, n);                                                \
    }
FOR_EACH_FORMAT(DEF_GEMV_F)

// ---- activation quantization ------------------------------------------------------------------

// x [total32 * 32] f32 (n rows of cols) -> both activation kinds of common.cuh's quant256:
// Q8 (xq int8, xd, xs per 32-block) and, where `want_k` (cols a multiple of 256), Q8K (xqk, xdk,
// xsk in the same layout). One warp per 256 elements; a row's last chunk may be partial (Q8 only).
extern "C" __global__ void quantize_q8(const float* __restrict__ x, int8_t* __restrict__ xq,
                                       float* __restrict__ xd, float* __restrict__ xs,
                                       int8_t* __restrict__ xqk, float* __restrict__ xdk,
                                       float* __restrict__ xsk, int total32, int want_k) {
    int c = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;  // warp-uniform
    if (c * 8 >= total32) return;
    int nvalid = min(8, total32 - 8 * c);
    size_t e = (size_t)c * 256, b = (size_t)c * 8;
    if (want_k && nvalid == 8)
        quant256<true, true>(x + e, nvalid, xq + e, xd + b, xs + b, xqk + e, xdk + b, xsk + b);
    else
        quant256<true, false>(x + e, nvalid, xq + e, xd + b, xs + b, nullptr, nullptr, nullptr);
}

// ---- dp4a GEMV ----------------------------------------------------------------------------------

// Each format: TPB (threads per block of weights), a `Raw` register image of one work item's
// weight bytes, `load(row, aux, blk, part)` that issues its global loads, and `dot(raw, blk, part,
// act)` over the part's elements. Loading is split from arithmetic so the GEMV loop can put
// several work items' loads in flight before it consumes the first (decode GEMV is bound by bytes
// in flight per SM, not by arithmetic). The work items: dot_formats.cuh (Q4_0, Q8_0, Q4_1, Q4_K,
// Q6_K) and dot_q8.cuh (the rest).

// Whether a work item's activations are the Q8K kind (per-256 scale, as the CPU's K and IQ4_XS
// dots) rather than Q8 (per-32 scale); the host passes the matching buffers (matmul.rs).
template <typename D> struct ActK { static constexpr bool value = D::QK == 256; };

// Work items each lane loads before computing: U x 16+ bytes in flight per lane.
#define GEMV_PREFETCH 4

// PDL: the launch may overlap the previous kernel (gemv_q8w_*): the first pass's weight loads
// are issued before pdl_wait(), the activations read after it.
template <typename D, int NMAX, bool PDL = false>
__device__ void gemv_q8(const uint8_t* __restrict__ w, const int8_t* __restrict__ xq,
                        const float* __restrict__ xd, const float* __restrict__ xs,
                        float* __restrict__ out, int rows, int cols, int n) {
    using F = typename D::Fmt;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int r = blockIdx.x * GEMV_WARPS + warp;
    if (r >= rows) return;
    int nb = cols / D::QK;
    const uint8_t *row, *aux;
    row_ptrs<F>(w, rows, nb, r, row, aux);
    float acc[NMAX];
#pragma unroll
    for (int j = 0; j < NMAX; j++) acc[j] = 0.f;
    int items = nb * D::TPB;
    bool waited = false;
    for (int it0 = lane; it0 < items; it0 += 32 * GEMV_PREFETCH) {
        typename D::Raw raw[GEMV_PREFETCH];
#pragma unroll
        for (int u = 0; u < GEMV_PREFETCH; u++) {
            int it = it0 + 32 * u;
            if (it < items) raw[u] = D::load(row, aux, it / D::TPB, it % D::TPB);
        }
        if (PDL && !waited) {
            pdl_wait();
            pdl_trigger_early();
            waited = true;
        }
#pragma unroll
        for (int u = 0; u < GEMV_PREFETCH; u++) {
            int it = it0 + 32 * u;
            if (it < items) {
#pragma unroll
                for (int j = 0; j < NMAX; j++) {
                    if (j < n) {
                        Q8Act a{xq + (size_t)j * cols, xd + (size_t)j * (cols / 32), xs + (size_t)j * (cols / 32)};
                        acc[j] += D::dot(raw[u], it / D::TPB, it % D::TPB, a);
                    }
                }
            }
        }
    }
    if (PDL) {
        if (!waited) {
            pdl_wait();
            pdl_trigger_early();
        }
        pdl_trigger_late();
    }
#pragma unroll
    for (int j = 0; j < NMAX; j++) {
        if (j < n) {
            float s = warp_sum(acc[j]);
            if (lane == 0) out[(size_t)j * rows + r] = s;
        }
    }
}

#define DEF_GEMV_Q8(name, D)                                                                   \
    extern "C" __global__ void __launch_bounds__(128) gemv_q8_##name##_n1(                    \
        const uint8_t* w, const int8_t* xq, const float* xd, const float* xs, float* out,      \
        int rows, int cols, int n) {                                                           \
        gemv_q8<D, 1>(w, xq, xd, xs, out, rows, cols, 1);                                      \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(128) gemv_q8_##name##_n8(                    \
        const uint8_t* w, const int8_t* xq, const float* xd, const float* xs, float* out,      \
        int rows, int cols, int n) {                                                           \
        gemv_q8<D, 8>(w, xq, xd, xs, out, rows, cols, n);                                      \
    }
// X-macro over every format with a dp4a work item: (suffix, struct).
#define FOR_EACH_Q8(X) \
    X(q4_0, DotQ4_0)   \
    X(q4_1, DotQ4_1)   \
    X(q5_0, DotQ5_0)   \
    X(q5_1, DotQ5_1)   \
    X(q8_0, DotQ8_0)   \
    X(iq4_nl, DotIQ4_NL) \
    X(q2_k, DotQ2_K)   \
    X(q3_k, DotQ3_K)   \
    X(q4_k, DotQ4_K)   \
    X(q5_k, DotQ5_K)   \
    X(q6_k, DotQ6_K)   \
    X(iq4_xs, DotIQ4_XS)
FOR_EACH_Q8(DEF_GEMV_Q8)

// gemv_q8w_<fmt>: the n = 1 warp-per-row kernel made PDL-aware, for short rows (<= 64 work items).
// Every lane has at most 2 items of its row, all loads of the row are issued at once, and no
// shared memory or barrier is needed. Measured on the H200 it beat gemv_q8r only on Q5_0 rows of
// tall matrices (Qwen2.5-0.5B's 9728 x 896 gate|up), where the host picks it (gemv_q8.rs); also
// Q3_K's one-row kernel (prefers_warp_per_row).
#define DEF_GEMV_Q8W(name, D)                                                                  \
    extern "C" __global__ void __launch_bounds__(128) gemv_q8w_##name(                        \
        const uint8_t* w, const int8_t* xq, const float* xd, const float* xs, float* out,      \
        int rows, int cols) {                                                                  \
        gemv_q8<D, 1, true>(w, xq, xd, xs, out, rows, cols, 1);                                \
    }
FOR_EACH_Q8(DEF_GEMV_Q8W)

// ---- several rows per block, K split over the block (the n = 1 default) ------------------------
// Block = GEMVR_THREADS threads over GEMVR_ROWS weight rows. Every thread takes work items
// tid, tid + GEMVR_THREADS, ... of all the block's rows, so the activation it loads serves
// GEMVR_ROWS rows (a quarter of the L2 traffic of a warp per row), each warp's loads of one row
// are 512 contiguous bytes, and each thread has GEMVR_ROWS x PF independent loads in flight. Warp
// sums meet in shared memory. A 4096-column row is one loop pass; the grid is rows / 4 blocks.
#define GEMVR_THREADS 128
#define GEMVR_ROWS 4

// R rows per block (GEMVR_ROWS, or 1 for gemv_q8r1), PF work items per thread and row per pass.
// MINB: the blocks per SM the kernel's __launch_bounds__ guarantee (common.cuh pdl_is_early).
template <typename D, int T, int R = GEMVR_ROWS, int PF = D::PF, int MINB = 0>
__device__ void gemv_q8r(const uint8_t* __restrict__ w, const int8_t* __restrict__ xq,
                         const float* __restrict__ xd, const float* __restrict__ xs,
                         float* __restrict__ out, int rows, int cols) {
    using F = typename D::Fmt;
    __shared__ float part[T / 32][R];
    int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    int r0 = blockIdx.x * R;
    int nb = cols / D::QK, items = nb * D::TPB;
    const uint8_t *row[R], *aux[R];
#pragma unroll
    for (int i = 0; i < R; i++) row_ptrs<F>(w, rows, nb, min(r0 + i, rows - 1), row[i], aux[i]);
    float acc[R];
#pragma unroll
    for (int i = 0; i < R; i++) acc[i] = 0.f;
    Q8Act a{xq, xd, xs};
    bool waited = false;
    for (int it0 = tid; it0 < items; it0 += T * PF) {
        typename D::Raw raw[PF][R];
#pragma unroll
        for (int u = 0; u < PF; u++) {
            int it = it0 + T * u;
            if (it < items) {
#pragma unroll
                for (int i = 0; i < R; i++) raw[u][i] = D::load(row[i], aux[i], it / D::TPB, it % D::TPB);
            }
        }
        // load() reads weights only; the activation blocks come from the previous kernels.
        if (!waited) {
            pdl_wait();
            pdl_trigger_early<MINB>();
            waited = true;
        }
#pragma unroll
        for (int u = 0; u < PF; u++) {
            int it = it0 + T * u;
            if (it < items) {
#pragma unroll
                for (int i = 0; i < R; i++) acc[i] += D::dot(raw[u][i], it / D::TPB, it % D::TPB, a);
            }
        }
    }
    if (!waited) {
        pdl_wait();
        pdl_trigger_early<MINB>();
    }
    pdl_trigger_late<MINB>();
#pragma unroll
    for (int i = 0; i < R; i++) {
        float s = warp_sum(acc[i]);
        if (lane == 0) part[warp][i] = s;
    }
    __syncthreads();
    if (tid < R && r0 + tid < rows) {
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < T / 32; k++) s += part[k][tid];
        out[r0 + tid] = s;
    }
}

// Blocks per SM to fit: 8 (64 registers, a 4096-row matrix in one wave) where the work item
// compiles without spills at 64 registers, else 1 (the compiler's choice).
template <typename D> struct Q8rMinBlocks { static constexpr int value = 1; };
template <> struct Q8rMinBlocks<DotQ4_0> { static constexpr int value = 8; };
template <> struct Q8rMinBlocks<DotQ4_1> { static constexpr int value = 8; };
template <> struct Q8rMinBlocks<DotQ8_0> { static constexpr int value = 8; };
template <> struct Q8rMinBlocks<DotQ2_K> { static constexpr int value = 8; };
template <> struct Q8rMinBlocks<DotQ4_K> { static constexpr int value = 8; };

#define DEF_GEMV_Q8R(name, D)                                                                  \
    extern "C" __global__ void __launch_bounds__(GEMVR_THREADS, Q8rMinBlocks<D>::value)       \
        gemv_q8r_##name(                                                                       \
        const uint8_t* w, const int8_t* xq, const float* xd, const float* xs, float* out,      \
        int rows, int cols) {                                                                  \
        gemv_q8r<D, GEMVR_THREADS, GEMVR_ROWS, D::PF, Q8rMinBlocks<D>::value>(                 \
            w, xq, xd, xs, out, rows, cols);                                                   \
    }
FOR_EACH_Q8(DEF_GEMV_Q8R)

// gemv_q8r64_<fmt>: the same with 64-thread blocks, for rows that fit one loop pass of 64 x PF
// work items (Q4_0/Q4_1 at 4096 columns: 2 items per thread per row instead of 1 of 2, so all of
// a thread's PF x 4 loads are useful). 16 blocks of 64 fit an SM at 64 registers, twice the rows
// in flight of the 128-thread kernel: a 6144x4096 matrix is one wave instead of 1.45.
#define DEF_GEMV_Q8R64(name, D)                                                                \
    extern "C" __global__ void __launch_bounds__(64, 2 * Q8rMinBlocks<D>::value)              \
        gemv_q8r64_##name(                                                                     \
        const uint8_t* w, const int8_t* xq, const float* xd, const float* xs, float* out,      \
        int rows, int cols) {                                                                  \
        gemv_q8r<D, 64, GEMVR_ROWS, D::PF, 2 * Q8rMinBlocks<D>::value>(                        \
            w, xq, xd, xs, out, rows, cols);                                                   \
    }
// The formats with a 32-element work item that compile at 64 registers (Q8rMinBlocks = 8).
DEF_GEMV_Q8R64(q4_0, DotQ4_0)
DEF_GEMV_Q8R64(q4_1, DotQ4_1)
DEF_GEMV_Q8R64(q8_0, DotQ8_0)

// gemv_q8r1_<fmt>: one row per 128-thread block, 2 work items per thread per pass, for small
// matrices of medium rows (Qwen2.5-0.5B's 896 x 4864 down projection: 152 items a row, one pass
// instead of gemv_q8r's two dependent passes of 4 rows per thread; 896 blocks instead of 224).
#define DEF_GEMV_Q8R1(name, D)                                                                 \
    extern "C" __global__ void __launch_bounds__(GEMVR_THREADS) gemv_q8r1_##name(             \
        const uint8_t* w, const int8_t* xq, const float* xd, const float* xs, float* out,      \
        int rows, int cols) {                                                                  \
        gemv_q8r<D, GEMVR_THREADS, 1, 2>(w, xq, xd, xs, out, rows, cols);                      \
    }
FOR_EACH_Q8(DEF_GEMV_Q8R1)

// ---- 16-bit float weights, one activation row, K split over the block -----------------------
// gemv_f's warp per row, one 32-byte decode per lane per step, is latency-bound on small matrices
// (48 x 5120 BF16: 12 blocks, 7.4 us for 0.5 MB) and issues 8 bytes per load on large ones.
// Here a block of T threads takes R rows; thread t reads 8-element (16-byte) chunks t, t + T, ...
// of every row, all of a pass's R x GEMVH_U loads issued before any arithmetic, weights past L1
// (the activation row, read by every block of an SM, stays there). Warp sums meet in shared
// memory and one thread per row adds them in a fixed order (deterministic).
//  * r1: T = 256, one row per block (rows < ~1k: 96 x 5120 is 96 blocks, a 5120-column row one
//    pass of 640 chunks).
//  * r4: T = 128, four rows per block (large matrices, the LM head).
// Needs cols % 8 == 0 and 16-byte aligned x (the host checks and otherwise takes gemv_f).
#define GEMVH_U 4

DEVI uint4 ld_stream16(const void* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

// Two 16-bit floats packed in a word -> f32 (element 0 in the low half, as stored).
template <bool BF> DEVI float h_lo(uint32_t v) {
    return BF ? __uint_as_float(v << 16) : __half2float(__ushort_as_half((uint16_t)(v & 0xffffu)));
}
template <bool BF> DEVI float h_hi(uint32_t v) {
    return BF ? __uint_as_float(v & 0xffff0000u) : __half2float(__ushort_as_half((uint16_t)(v >> 16)));
}

template <bool BF, int R, int T>
__device__ void gemv_h(const uint8_t* __restrict__ w, const float* __restrict__ x,
                       float* __restrict__ out, int rows, int cols) {
    constexpr int U = GEMVH_U;
    __shared__ float part[T / 32][R];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int r0 = blockIdx.x * R;
    const int nch = cols / 8;
    const uint4* wr[R];
#pragma unroll
    for (int i = 0; i < R; i++)
        wr[i] = reinterpret_cast<const uint4*>(w + (size_t)min(r0 + i, rows - 1) * cols * 2);
    float acc[R];
#pragma unroll
    for (int i = 0; i < R; i++) acc[i] = 0.f;
    bool waited = false;
    for (int c0 = tid; c0 < nch; c0 += T * U) {
        uint4 q[U][R];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + T * u;
#pragma unroll
            for (int i = 0; i < R; i++) {
                q[u][i] = make_uint4(0u, 0u, 0u, 0u);
                if (c < nch) q[u][i] = ld_stream16(wr[i] + c);
            }
        }
        if (!waited) {
            pdl_wait();  // x is the previous kernel's output
            pdl_trigger_early();
            waited = true;
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + T * u;
            if (c >= nch) break;
            const float4* xp = reinterpret_cast<const float4*>(x) + 2 * c;
            const float4 xa = __ldg(xp), xb = __ldg(xp + 1);
#pragma unroll
            for (int i = 0; i < R; i++) {
                const uint4 v = q[u][i];
                float d = h_lo<BF>(v.x) * xa.x;
                d = fmaf(h_hi<BF>(v.x), xa.y, d);
                d = fmaf(h_lo<BF>(v.y), xa.z, d);
                d = fmaf(h_hi<BF>(v.y), xa.w, d);
                d = fmaf(h_lo<BF>(v.z), xb.x, d);
                d = fmaf(h_hi<BF>(v.z), xb.y, d);
                d = fmaf(h_lo<BF>(v.w), xb.z, d);
                d = fmaf(h_hi<BF>(v.w), xb.w, d);
                acc[i] += d;
            }
        }
    }
    if (!waited) {
        pdl_wait();
        pdl_trigger_early();
    }
    pdl_trigger_late();
#pragma unroll
    for (int i = 0; i < R; i++) {
        const float s = warp_sum(acc[i]);
        if (lane == 0) part[warp][i] = s;
    }
    __syncthreads();
    if (tid < R && r0 + tid < rows) {
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < T / 32; k++) s += part[k][tid];
        out[r0 + tid] = s;
    }
}

#define DEF_GEMV_H(name, bf)                                                                   \
    extern "C" __global__ void __launch_bounds__(256) gemv_h_##name##_r1(                     \
        const uint8_t* w, const float* x, float* out, int rows, int cols) {                    \
        gemv_h<bf, 1, 256>(w, x, out, rows, cols);                                             \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(128) gemv_h_##name##_r4(                     \
        const uint8_t* w, const float* x, float* out, int rows, int cols) {                    \
        gemv_h<bf, 4, 128>(w, x, out, rows, cols);                                             \
    }
DEF_GEMV_H(f16, false)
DEF_GEMV_H(bf16, true)

// ---- fused variant: activation quantized per block into shared memory --------------------------
// For one activation row (decode). Each block first quantizes x (cols floats, read from L2) into
// shared memory, then its warps run the same dp4a dot over GEMVS_RPW rows each. This removes the
// separate quantize_q8 launch and the global round trip of the quantized activation; the cost is
// one L2 read of x per block, amortized over GEMVS_WARPS * GEMVS_RPW rows.
#define GEMVS_WARPS 8
#define GEMVS_RPW 2

template <typename D>
__device__ void gemv_q8s(const uint8_t* __restrict__ w, const float* __restrict__ x,
                         float* __restrict__ out, int rows, int cols) {
    extern __shared__ __align__(16) unsigned char smem[];
    int8_t* sq = (int8_t*)smem;
    float* sd = (float*)(smem + cols);
    float* ss = sd + cols / 32;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    // The kind the CPU pairs with this format (ActK), written to the same shared layout.
    for (int c = warp; c * 256 < cols; c += GEMVS_WARPS) {
        int nvalid = min(8, cols / 32 - 8 * c);
        if (ActK<D>::value)
            quant256<false, true>(x + 256 * c, nvalid, nullptr, nullptr, nullptr, sq + 256 * c,
                                  sd + 8 * c, ss + 8 * c);
        else
            quant256<true, false>(x + 256 * c, nvalid, sq + 256 * c, sd + 8 * c, ss + 8 * c,
                                  nullptr, nullptr, nullptr);
    }
    __syncthreads();
    using F = typename D::Fmt;
    int nb = cols / D::QK;
    int items = nb * D::TPB;
    Q8Act a{sq, sd, ss};
#pragma unroll
    for (int i = 0; i < GEMVS_RPW; i++) {
        int r = (blockIdx.x * GEMVS_WARPS + warp) * GEMVS_RPW + i;
        if (r >= rows) break;
        const uint8_t *row, *aux;
        row_ptrs<F>(w, rows, nb, r, row, aux);
        float acc = 0.f;
        for (int it0 = lane; it0 < items; it0 += 32 * GEMV_PREFETCH) {
            typename D::Raw raw[GEMV_PREFETCH];
#pragma unroll
            for (int u = 0; u < GEMV_PREFETCH; u++) {
                int it = it0 + 32 * u;
                if (it < items) raw[u] = D::load(row, aux, it / D::TPB, it % D::TPB);
            }
#pragma unroll
            for (int u = 0; u < GEMV_PREFETCH; u++) {
                int it = it0 + 32 * u;
                if (it < items) acc += D::dot(raw[u], it / D::TPB, it % D::TPB, a);
            }
        }
        acc = warp_sum(acc);
        if (lane == 0) out[r] = acc;
    }
}

#define DEF_GEMV_Q8S(name, D)                                                                  \
    extern "C" __global__ void __launch_bounds__(256) gemv_q8s_##name(                        \
        const uint8_t* w, const float* x, float* out, int rows, int cols) {                    \
        gemv_q8s<D>(w, x, out, rows, cols);                                                    \
    }
// Only the formats it was measured with (run 5): the variant is kept for comparison.
DEF_GEMV_Q8S(q4_0, DotQ4_0)
DEF_GEMV_Q8S(q4_1, DotQ4_1)
DEF_GEMV_Q8S(q8_0, DotQ8_0)
DEF_GEMV_Q8S(q4_k, DotQ4_K)
DEF_GEMV_Q8S(q6_k, DotQ6_K)
