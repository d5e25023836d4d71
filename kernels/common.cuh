// Shared device helpers: half/bfloat conversions, warp reductions, and one decoder per GGML block
// format. Every kernel that reads quantized weights (GEMV, embedding, dequantize-for-GEMM) goes
// through these decoders, so a format's layout is written down once on the device side.
#pragma once
#include <stdint.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define DEVI __device__ __forceinline__

DEVI float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
DEVI float bf2f(uint16_t b) { return __uint_as_float(((uint32_t)b) << 16); }
DEVI uint16_t f2h(float f) { return __half_as_ushort(__float2half_rn(f)); }
DEVI uint16_t f2bf(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }

// Unaligned little-endian loads from byte pointers (GGML blocks are only 2-byte aligned).
DEVI uint16_t ld_u16(const uint8_t* p) { return (uint16_t)p[0] | ((uint16_t)p[1] << 8); }
DEVI uint32_t ld_u32_a2(const uint8_t* p) {
    const uint16_t* q = (const uint16_t*)p;
    return (uint32_t)q[0] | ((uint32_t)q[1] << 16);
}

// Programmatic dependent launch (sm_90+). A kernel launched with the PDL attribute (kernels.rs
// marks which) may start while the previous kernel on the stream still runs. Before pdl_wait() it
// may only read data no kernel of the step writes (weights, shapes); it must not write global
// memory. After pdl_wait() every earlier kernel has finished and its writes are visible.
// pdl_trigger() lets the next kernel launch once every block of this one has called it or exited.
// Every kernel triggers after its own pdl_wait(), so before the wait only the previous kernel may
// still run, except after the RoPE/cache write (qkv_rope.cu trigger_first), which triggers first:
// the attention after it may run beside the projection too, and reads neither's output early.
// Both are no-ops on older GPUs and when the launch did not carry the attribute.
// Step trace (cuda/step_trace.rs, `POCKET_STEP_TRACE=1`; sm_90 only): the host sets pdl_trace
// to a device buffer [count, stamps...] (0 = off) and block 0 of every kernel appends the
// %globaltimer at which its pdl_wait() returned. With PDL that is when the previous kernel of the
// stream had finished, so consecutive stamps of a replayed graph give each kernel's share of the
// step's critical path, overlap with its neighbours included (isolated timings cannot show that).
__constant__ unsigned long long pdl_trace;
// Stamps the trace buffer holds per step (cuda/step_trace.rs TRACE_CAP).
#define PDL_TRACE_CAP 4096
DEVI void pdl_trace_mark() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (pdl_trace == 0ull) return;
    if ((blockIdx.x | blockIdx.y | blockIdx.z | threadIdx.x | threadIdx.y | threadIdx.z) != 0u) return;
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    unsigned long long* buf = reinterpret_cast<unsigned long long*>(pdl_trace);
    const unsigned long long i = atomicAdd(buf, 1ull);
    if (i < PDL_TRACE_CAP) buf[1 + i] = t;
#endif
}
DEVI void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    pdl_trace_mark();
#endif
}
DEVI void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Where the decode GEMVs let the next kernel launch, set per module by the host
// (cuda/mod.rs `PdlEarly`, `POCKET_PDL_EARLY`), a bit mask: bit 0 = every GEMV of the module
// right after its own pdl_wait(), so the next kernel's blocks take the SM slots this one's tail
// frees and issue their weight loads there; bit 1 = only launches whose grid fits in one wave at
// the kernel's guaranteed occupancy (MINB blocks per SM, its __launch_bounds__; 0 = never
// counted as one wave): every block of such a grid is resident already, so the next kernel's
// blocks can only take slots no block of this one still needs. Otherwise after the main loop.
// A GEMV calls both; exactly one of them triggers. pdl_sms: the GPU's SM count (host-set).
__constant__ int pdl_early;
__constant__ int pdl_sms;
template <int MINB>
DEVI bool pdl_is_early() {
    if (pdl_early & 1) return true;
    return MINB > 0 && (pdl_early & 2) &&
           gridDim.x * gridDim.y * gridDim.z <= (unsigned)(pdl_sms * MINB);
}
template <int MINB = 0>
DEVI void pdl_trigger_early() {
    if (pdl_is_early<MINB>()) pdl_trigger();
}
template <int MINB = 0>
DEVI void pdl_trigger_late() {
    if (!pdl_is_early<MINB>()) pdl_trigger();
}

DEVI float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
DEVI float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// The 16 non-linear levels of IQ4_NL / IQ4_XS.
__constant__ int8_t IQ4NL_VALUES[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                        1,    13,   25,  38,  53,  69,  89,  113};

// ---- block formats ------------------------------------------------------------------------------
// Each format struct gives QK (elements per block), BYTES (bytes per block in the device layout)
// and `decode16(row_ptr, aux_row, blk, chunk, out)`, which writes elements
// [blk * QK + chunk * 16, +16) of one row. `row_ptr` points at the row's first block; `aux_row` at
// the row's first companion entry for repacked formats (unused otherwise).
//
// Repacked layouts (chosen at upload so the GEMV can issue 16-byte loads): Q4_0, Q8_0 and Q6_K keep
// all quants of the matrix first (`rows * nb * BYTES` bytes, row-major by block) and the companion
// bytes after them (`rows * nb * AUX`: the f16 scale of Q4_0/Q8_0; Q6_K's 16 scales and d). Q4_K
// keeps GGML's blocks with its quants reordered by sub-block (FmtQ4_K). Every other format keeps
// GGML's block layout.

struct FmtF32 {
    static constexpr int QK = 16, BYTES = 64;
    DEVI static void decode16(const uint8_t* row, const uint8_t*, int blk, int, float* out) {
        const float4* p = (const float4*)(row + (size_t)blk * BYTES);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float4 v = p[i];
            out[4 * i] = v.x; out[4 * i + 1] = v.y; out[4 * i + 2] = v.z; out[4 * i + 3] = v.w;
        }
    }
};

struct FmtF16 {
    static constexpr int QK = 16, BYTES = 32;
    DEVI static void decode16(const uint8_t* row, const uint8_t*, int blk, int, float* out) {
        const uint4* p = (const uint4*)(row + (size_t)blk * BYTES);
#pragma unroll
        for (int i = 0; i < 2; i++) {
            uint4 v = p[i];
            uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int j = 0; j < 4; j++) {
                out[8 * i + 2 * j] = h2f(w[j] & 0xffff);
                out[8 * i + 2 * j + 1] = h2f(w[j] >> 16);
            }
        }
    }
};

struct FmtBF16 {
    static constexpr int QK = 16, BYTES = 32;
    DEVI static void decode16(const uint8_t* row, const uint8_t*, int blk, int, float* out) {
        const uint4* p = (const uint4*)(row + (size_t)blk * BYTES);
#pragma unroll
        for (int i = 0; i < 2; i++) {
            uint4 v = p[i];
            uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int j = 0; j < 4; j++) {
                out[8 * i + 2 * j] = bf2f(w[j] & 0xffff);
                out[8 * i + 2 * j + 1] = bf2f(w[j] >> 16);
            }
        }
    }
};

// Q4_0, repacked: quants 16 bytes per block (low nibbles = elements 0..15, high = 16..31).
struct FmtQ4_0 {
    static constexpr int QK = 32, BYTES = 16, AUX = 2;
    DEVI static void decode16(const uint8_t* row, const uint8_t* aux, int blk, int chunk, float* out) {
        float d = h2f(((const uint16_t*)aux)[blk]);
        uint4 v = *(const uint4*)(row + (size_t)blk * 16);
        uint32_t w[4] = {v.x, v.y, v.z, v.w};
        int sh = chunk * 4;
#pragma unroll
        for (int j = 0; j < 16; j++) out[j] = (float)((int)((w[j / 4] >> (8 * (j % 4) + sh)) & 15) - 8) * d;
    }
};

// Q8_0, repacked: quants 32 bytes per block.
struct FmtQ8_0 {
    static constexpr int QK = 32, BYTES = 32, AUX = 2;
    DEVI static void decode16(const uint8_t* row, const uint8_t* aux, int blk, int chunk, float* out) {
        float d = h2f(((const uint16_t*)aux)[blk]);
        uint4 v = *(const uint4*)(row + (size_t)blk * 32 + chunk * 16);
        uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 16; j++) out[j] = (float)(int8_t)((w[j / 4] >> (8 * (j % 4))) & 255) * d;
    }
};

// Q4_1: { f16 d, f16 m, u8 qs[16] }, x = q * d + m.
struct FmtQ4_1 {
    static constexpr int QK = 32, BYTES = 20;
    DEVI static void decode16(const uint8_t* row, const uint8_t*, int blk, int chunk, float* out) {
        const uint8_t* b = row + (size_t)blk * BYTES;
        float d = h2f(((const uint16_t*)b)[0]), m = h2f(((const uint16_t*)b)[1]);
        const uint8_t* qs = b + 4;
        int sh = chunk * 4;
#pragma unroll
        for (int j = 0; j < 16; j++) out[j] = (float)((qs[j] >> sh) & 15) * d + m;
    }
};

// Q5_0: { f16 d, u8 qh[4], u8 qs[16] }, fifth bit of element j in bit j of qh.
struct FmtQ5_0 {
    static constexpr int QK = 32, BYTES = 22;
    DEVI static void decode16(const uint8_t* row, const uint8_t*, int blk, int chunk, float* out) {
        const uint8_t* b = row + (size_t)blk * BYTES;
        float d = h2f(((const uint16_t*)b)[0]);
        uint32_t qh = ld_u32_a2(b + 2);
        const uint8_t* qs = b + 6;
        int sh = chunk * 4;
#pragma unroll
        for (int j = 0; j < 16; j++) {
            int q = ((qs[j] >> sh) & 15) | (((qh >> (j + 16 * chunk)) & 1) << 4);
            out[j] = (float)(q - 16) * d;
        }
    }
};

// Q5_1: { f16 d, f16 m, u8 qh[4], u8 qs[16] }.
struct FmtQ5_1 {
    static constexpr int QK = 32, BYTES = 24;
    DEVI static void decode16(const uint8_t* row, const uint8_t*, int blk, int chunk, float* out) {
        const uint8_t* b = row + (size_t)blk * BYTES;
        float d = h2f(((const uint16_t*)b)[0]), m = h2f(((const uint16_t*)b)[1]);
        uint32_t qh = *(const uint32_t*)(b + 4);
        const uint8_t* qs = b + 8;
        int sh = chunk * 4;
#pragma unroll
        for (int j = 0; j < 16; j++) {
            int q = ((qs[j] >> sh) & 15) | (((qh >> (j + 16 * chunk)) & 1) << 4);
            out[j] = (float)q * d + m;
        }
    }
};

// IQ4_NL: { f16 d, u8 qs[16] } with a non-linear code book.
struct FmtIQ4_NL {
    static constexpr int QK = 32, BYTES = 18;
    DEVI static void decode16(const uint8_t* row, const uint8_t*, int blk, int chunk, float* out) {
        const uint8_t* b = row + (size_t)blk * BYTES;
        float d = h2f(((const uint16_t*)b)[0]);
        const uint8_t* qs = b + 2;
        int sh = chunk * 4;
#pragma unroll
        for (int j = 0; j < 16; j++) out[j] = (float)IQ4NL_VALUES[(qs[j] >> sh) & 15] * d;
    }
};

// 6-bit scale and min of sub-block j of a Q4_K / Q5_K super-block.
DEVI void scale_min_k4(int j, const uint8_t* q, int& sc, int& m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// Q2_K: { u8 scales[16], u8 qs[64], f16 d, f16 dmin }: 16 sub-blocks of 16.
struct FmtQ2_K {
    static constexpr int QK = 256, BYTES = 84;
    DEVI static void decode16(const uint8_t* row, const uint8_t*, int blk, int chunk, float* out) {
        const uint8_t* b = row + (size_t)blk * BYTES;
        float d = h2f(ld_u16(b + 80)), dmin = h2f(ld_u16(b + 82));
        // Element e = 128*n + 32*s + l (l < 32) uses qs[32n + l] >> 2s with scale 8n + 2s + l/16.
        int e0 = chunk * 16;
        int n = e0 / 128, s = (e0 % 128) / 32, l0 = e0 % 32;
        uint8_t sc = b[8 * n + 2 * s + l0 / 16];
        float dl = d * (sc & 0xF), ml = dmin * (sc >> 4);
        const uint8_t* qs = b + 16 + 32 * n + l0;
#pragma unroll
        for (int j = 0; j < 16; j++) out[j] = dl * (float)((qs[j] >> (2 * s)) & 3) - ml;
    }
};

// Q3_K: { u8 hmask[32], u8 qs[64], u8 scales[12], f16 d }: 16 sub-blocks of 16, 6-bit scales.
struct FmtQ3_K {
    static constexpr int QK = 256, BYTES = 110;
    DEVI static int scale(const uint8_t* s, int is) {
        // 16 six-bit scales: low 4 bits in s[0..8], high 2 bits in s[8..12].
        int lo = (is < 8) ? (s[is] & 0xF) : (s[is - 8] >> 4);
        int hi = (s[8 + (is % 4)] >> (2 * (is / 4))) & 3;
        return (lo | (hi << 4)) - 32;
    }
    DEVI static void decode16(const uint8_t* row, const uint8_t*, int blk, int chunk, float* out) {
        const uint8_t* b = row + (size_t)blk * BYTES;
        float d = h2f(ld_u16(b + 108));
        int e0 = chunk * 16;
        int n = e0 / 128, s = (e0 % 128) / 32, l0 = e0 % 32;
        int is = 8 * n + 2 * s + l0 / 16;
        float dl = d * (float)scale(b + 96, is);
        const uint8_t* qs = b + 32 + 32 * n + l0;
        const uint8_t* hm = b + l0;
        uint8_t mbit = (uint8_t)(1u << (4 * n + s));
#pragma unroll
        for (int j = 0; j < 16; j++) {
            int q = ((qs[j] >> (2 * s)) & 3) - ((hm[j] & mbit) ? 0 : 4);
            out[j] = dl * (float)q;
        }
    }
};

// Q4_K, reordered at upload (cuda/repack.rs): GGML's 144-byte block { f16 d, f16 dmin,
// u8 scales[12], u8 qs[128] } with the quants rearranged so that qs[16s..16s+16] is sub-block s
// (low nibbles = its elements 0..15, high = 16..31, as Q4_0; GGML interleaves sub-blocks 2c and
// 2c+1 in the nibbles of qs[32c..32c+32]). Header and quants stay in one block: 144 = 9 x 16
// bytes, so both are 16-byte aligned already, and a split layout's second pointer per row made
// gemv_q8r_q4_k spill at its 64-register bound.
struct FmtQ4_K {
    static constexpr int QK = 256, BYTES = 144;
    DEVI static void decode16(const uint8_t* row, const uint8_t*, int blk, int chunk, float* out) {
        const uint8_t* b = row + (size_t)blk * BYTES;
        float d = h2f(((const uint16_t*)b)[0]), dmin = h2f(((const uint16_t*)b)[1]);
        int sub = chunk / 2;
        int sc, m;
        scale_min_k4(sub, b + 4, sc, m);
        float dl = d * sc, ml = dmin * m;
        uint4 v = *(const uint4*)(b + 16 + 16 * sub);
        uint32_t w[4] = {v.x, v.y, v.z, v.w};
        int sh = (chunk & 1) * 4;
#pragma unroll
        for (int j = 0; j < 16; j++) out[j] = dl * (float)((w[j / 4] >> (8 * (j % 4) + sh)) & 15) - ml;
    }
};

// Q5_K: { f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128] }.
struct FmtQ5_K {
    static constexpr int QK = 256, BYTES = 176;
    DEVI static void decode16(const uint8_t* row, const uint8_t*, int blk, int chunk, float* out) {
        const uint8_t* b = row + (size_t)blk * BYTES;
        float d = h2f(((const uint16_t*)b)[0]), dmin = h2f(((const uint16_t*)b)[1]);
        int e0 = chunk * 16;
        int sub = e0 / 32;
        int sc, m;
        scale_min_k4(sub, b + 4, sc, m);
        float dl = d * sc, ml = dmin * m;
        int l0 = e0 % 32;
        const uint8_t* qh = b + 16 + l0;
        const uint8_t* qs = b + 48 + 32 * (sub / 2) + l0;
        int sh = (sub & 1) * 4;
#pragma unroll
        for (int j = 0; j < 16; j++) {
            int q = ((qs[j] >> sh) & 15) | (((qh[j] >> sub) & 1) << 4);
            out[j] = dl * (float)q - ml;
        }
    }
};

// Q6_K, repacked: GGML's { u8 ql[128], u8 qh[64], i8 scales[16], f16 d } split into 192 quant
// bytes per block (16-byte aligned) and 18 companion bytes (scales, then d). 16 sub-blocks of 16.
struct FmtQ6_K {
    static constexpr int QK = 256, BYTES = 192, AUX = 18;
    DEVI static void decode16(const uint8_t* row, const uint8_t* aux, int blk, int chunk, float* out) {
        const uint8_t* b = row + (size_t)blk * BYTES;
        const uint8_t* a = aux + (size_t)blk * AUX;
        float d = h2f(ld_u16(a + 16));
        // Element e = 128*n + 32*k + l: ql[64n + l + 32*(k&1)] nibble (k>>1), qh[32n + l] bits 2k.
        int e0 = chunk * 16;
        int n = e0 / 128, k = (e0 % 128) / 32, l0 = e0 % 32;
        float dl = d * (float)(int8_t)a[8 * n + l0 / 16 + 2 * k];
        const uint8_t* ql = b + 64 * n + 32 * (k & 1) + l0;
        const uint8_t* qh = b + 128 + 32 * n + l0;
        int shl = (k >> 1) * 4, shh = 2 * k;
#pragma unroll
        for (int j = 0; j < 16; j++) {
            int q = (((ql[j] >> shl) & 15) | (((qh[j] >> shh) & 3) << 4)) - 32;
            out[j] = dl * (float)q;
        }
    }
};

// IQ4_XS: { f16 d, u16 scales_h, u8 scales_l[4], u8 qs[128] }: 8 sub-blocks of 32, 6-bit scales.
struct FmtIQ4_XS {
    static constexpr int QK = 256, BYTES = 136;
    DEVI static void decode16(const uint8_t* row, const uint8_t*, int blk, int chunk, float* out) {
        const uint8_t* b = row + (size_t)blk * BYTES;
        float d = h2f(((const uint16_t*)b)[0]);
        uint16_t sh_bits = ((const uint16_t*)b)[1];
        int e0 = chunk * 16;
        int ib = e0 / 32;
        int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh_bits >> (2 * ib)) & 3) << 4);
        float dl = d * (float)(ls - 32);
        // Sub-block ib: qs[16*ib .. +16]; low nibbles are elements 0..15, high nibbles 16..31.
        const uint8_t* qs = b + 8 + 16 * ib;
        int sh = ((e0 % 32) / 16) * 4;
#pragma unroll
        for (int j = 0; j < 16; j++) out[j] = dl * (float)IQ4NL_VALUES[(qs[j] >> sh) & 15];
    }
};

template <typename F> struct Repacked { static constexpr bool value = false; };
template <> struct Repacked<FmtQ4_0> { static constexpr bool value = true; };
template <> struct Repacked<FmtQ8_0> { static constexpr bool value = true; };
template <> struct Repacked<FmtQ6_K> { static constexpr bool value = true; };

// Pointers to one row's blocks and companion entries.
template <typename F>
DEVI void row_ptrs(const uint8_t* w, size_t rows, size_t nb, size_t r, const uint8_t*& row,
                   const uint8_t*& aux) {
    row = w + r * nb * F::BYTES;
    if constexpr (Repacked<F>::value) {
        aux = w + rows * nb * F::BYTES + r * nb * F::AUX;
    } else {
        aux = nullptr;
    }
}

// X-macro over every format with a device decoder: (suffix, struct).
#define FOR_EACH_FORMAT(X) \
    X(f32, FmtF32)         \
    X(f16, FmtF16)         \
    X(bf16, FmtBF16)       \
    X(q4_0, FmtQ4_0)       \
    X(q4_1, FmtQ4_1)       \
    X(q5_0, FmtQ5_0)       \
    X(q5_1, FmtQ5_1)       \
    X(q8_0, FmtQ8_0)       \
    X(q2_k, FmtQ2_K)       \
    X(q3_k, FmtQ3_K)       \
    X(q4_k, FmtQ4_K)       \
    X(q5_k, FmtQ5_K)       \
    X(q6_k, FmtQ6_K)       \
    X(iq4_nl, FmtIQ4_NL)   \
    X(iq4_xs, FmtIQ4_XS)

// ---- activation quantization, bit-identical to the CPU's (pocket-quant act.rs) -------------------
// The int8 activations the dp4a GEMVs read must equal the CPU backend's, or the two backends'
// logits drift apart by the quantization noise (docs/performance/cuda-dense.md, parity). Two kinds,
// as the CPU pairs them with weight formats:
//  * Q8 (32-element formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL; `quantize_act_q8`):
//    d = amax / 127, id = 1 / d (0 where not finite), q = round_half_away(v * id), s = d * sum(q).
//  * Q8K (K and IQ4_XS formats; `quantize_act_q8k` = ggml's quantize_row_q8_K): per 256 elements,
//    max = the first element of largest |v|, iscale = -127 / max, q = min(127, round_half_away(
//    iscale * v)), d = 1 / iscale (all zero where iscale is not finite). Stored, like Q8, as per-32 rows of (d, d * sum32(q)) so the
//    GEMV work items read both kinds the same way.
// Every operation is a single IEEE-rounded f32 op (__fdiv_rn, __fmul_rn: no contraction, no
// approximate reciprocal), so the results equal Rust's f32 arithmetic bit for bit.

// Rust's `f as i8` / `as i32` on an already rounded value: saturating, NaN to 0.
DEVI int sat_round_i32(float x) {
    float r = roundf(x);  // half away from zero, as Rust's f32::round
    if (r != r) return 0;
    return (int)fminf(fmaxf(r, -2147483648.f), 2147483520.f);
}

// One warp's share of quantizing 256 elements (lane l holds elements 8l..8l+8 in v; lanes whose
// 32-element block is past the data hold zeros): the lane's eight quants, its block's scale and
// the sum of its block's quants. K selects the Q8K rule (one scale for all 256), else Q8 (one per
// 32: each group of 4 lanes).
template <bool K>
DEVI void quant_lane(const float* v, int* q, float& d, int& sum) {
    int lane = threadIdx.x & 31;
    if (!K) {
        float am = 0.f;
#pragma unroll
        for (int i = 0; i < 8; i++) am = fmaxf(am, fabsf(v[i]));
        am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, 1));
        am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, 2));
        d = __fdiv_rn(am, 127.f);
        // 1 / d, or 0 where not finite (d = 0 or a subnormal d): all-zero quants (act.rs
        // `inverse_scale`), never the saturated pattern.
        float id = __fdiv_rn(1.f, d);
        if (isinf(id)) id = 0.f;
#pragma unroll
        for (int i = 0; i < 8; i++) q[i] = (int)(int8_t)min(max(sat_round_i32(__fmul_rn(v[i], id)), -128), 127);
    } else {
        // First element of largest |v| (strict >, as the CPU's scan; zeros and NaN never win).
        float best = 0.f, bval = 0.f;
        int bidx = 0x7fffffff;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            float a = fabsf(v[i]);
            if (a > best) { best = a; bval = v[i]; bidx = 8 * lane + i; }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            float ob = __shfl_xor_sync(0xffffffffu, best, o);
            float ov = __shfl_xor_sync(0xffffffffu, bval, o);
            int oi = __shfl_xor_sync(0xffffffffu, bidx, o);
            if (ob > best || (ob == best && oi < bidx)) { best = ob; bval = ov; bidx = oi; }
        }
        float iscale = 0.f;
        d = 0.f;
        if (best != 0.f) {
            iscale = __fdiv_rn(-127.f, bval);
            // An infinite scale (|max| < ~3.7e-37) gives an all-zero block, as q8k_block.
            if (isinf(iscale)) iscale = 0.f;
            else d = __fdiv_rn(1.f, iscale);
        }
        // `((iscale * v).round() as i32).min(127) as i8`
#pragma unroll
        for (int i = 0; i < 8; i++) q[i] = iscale == 0.f ? 0 : (int)(int8_t)min(sat_round_i32(__fmul_rn(iscale, v[i])), 127);
    }
    sum = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) sum += q[i];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
}

// Lane l's eight elements of the 256 at src, zeros for lanes past `nvalid32` blocks.
DEVI void load_lane8(const float* src, int nvalid32, float* v) {
    int lane = threadIdx.x & 31;
    if ((lane >> 2) < nvalid32) {
        float4 a = ((const float4*)src)[2 * lane], b = ((const float4*)src)[2 * lane + 1];
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
        v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else {
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = 0.f;
    }
}

// Stores one lane's quants (8 bytes at element offset 8l of q) and, from the first lane of each
// group of 4, its block's scale and d * sum (at block offset l / 4 of ds, ss).
DEVI void store_lane(const int* qv, float d, int sum, int8_t* q, float* ds, float* ss) {
    int lane = threadIdx.x & 31;
    uint32_t p0 = 0u, p1 = 0u;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        p0 |= ((uint32_t)(qv[i] & 0xff)) << (8 * i);
        p1 |= ((uint32_t)(qv[4 + i] & 0xff)) << (8 * i);
    }
    ((uint2*)q)[lane] = make_uint2(p0, p1);
    if ((lane & 3) == 0) {
        ds[lane >> 2] = d;
        ss[lane >> 2] = __fmul_rn(d, (float)sum);
    }
}

// One warp quantizes the `nvalid32` (1..8) 32-element blocks at `src`. Q8 writes q8/d8/s8 (bytes
// at element offsets, scales at 32-block offsets from the given pointers); K (only with
// nvalid32 == 8) writes qk/dk/sk. Either set may be skipped.
template <bool Q8, bool K>
DEVI void quant256(const float* src, int nvalid32, int8_t* q8, float* d8, float* s8, int8_t* qk,
                   float* dk, float* sk) {
    int lane = threadIdx.x & 31;
    float v[8];
    load_lane8(src, nvalid32, v);
    int q[8], sum;
    float d;
    if (Q8) {
        quant_lane<false>(v, q, d, sum);
        if ((lane >> 2) < nvalid32) store_lane(q, d, sum, q8, d8, s8);
    }
    if (K) {
        quant_lane<true>(v, q, d, sum);
        store_lane(q, d, sum, qk, dk, sk);
    }
}
