// Elementwise and indexing ops: bias, residual add, SwiGLU, row gather, RoPE, KV-cache write,
// quantized embedding lookup and dequantization to f16 (the first prefill GEMM path).
//
// Programmatic dependent launch (common.cuh): every kernel here calls pdl_wait() in every thread
// before it reads an activation, index or position (any of which an earlier kernel may write)
// and before its first global write, then pdl_trigger() so the next kernel can launch while
// this one finishes. Only weights (bias, embedding and dequantized matrices) are read before the
// wait. Every kernel is listed in cuda/kernels/pdl.rs PDL_AWARE; tests/pdl_marking.rs checks the cubin.
#include "common.cuh"
#include "gate_math.cuh"

extern "C" __global__ void add_bias(float* __restrict__ x, const float* __restrict__ b, size_t total, int m) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    float bv = i < total ? b[i % m] : 0.f;  // a weight: loaded while the previous kernel drains
    pdl_wait();
    pdl_trigger();
    if (i < total) x[i] += bv;
}

extern "C" __global__ void add_assign(float* __restrict__ x, const float* __restrict__ y, size_t total) {
    pdl_wait();
    pdl_trigger();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) x[i] += y[i];
}

extern "C" __global__ void silu_mul(const float* __restrict__ g, const float* __restrict__ u,
                                   float* __restrict__ out, size_t total) {
    pdl_wait();
    pdl_trigger();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) {
        float a = g[i];
        out[i] = swiglu_f(a, u[i]);
    }
}

// out[i, :] = src[rows[i], :]; grid.y = i. Rows past `src_rows` are written as NaN so a bad index
// is visible instead of reading another allocation.
extern "C" __global__ void gather_rows(const float* __restrict__ src, const uint32_t* __restrict__ rows,
                                       float* __restrict__ out, int d, int src_rows) {
    pdl_wait();
    pdl_trigger();
    int i = blockIdx.y;
    uint32_t r = rows[i];
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < d; c += gridDim.x * blockDim.x)
        out[(size_t)i * d + c] = r < (uint32_t)src_rows ? src[(size_t)r * d + c] : __int_as_float(0x7fc00000);
}

// x [n, heads, head_dim] rotated in place; one thread per (token, head, pair). `neox` selects the
// rotate-half pairing (i, i + rot/2), otherwise adjacent pairs (2i, 2i + 1).
extern "C" __global__ void rope(float* __restrict__ x, const uint32_t* __restrict__ pos,
                               const float* __restrict__ cos_t, const float* __restrict__ sin_t, int n,
                               int heads, int head_dim, int rot_dim, int neox, int max_pos) {
    pdl_wait();  // before reading `pos` and `x`; the tables' rows depend on `pos`
    pdl_trigger();
    int half = rot_dim / 2;
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t total = (size_t)n * heads * half;
    if (t >= total) return;
    int i = t % half;
    size_t th = t / half;  // token * heads + head
    int tok = th / heads;
    uint32_t p = pos[tok];
    if (p >= (uint32_t)max_pos) return;  // validated on the host where positions are known
    float c = cos_t[(size_t)p * half + i], s = sin_t[(size_t)p * half + i];
    float* h = x + th * head_dim;
    int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    float x0 = h[a], x1 = h[b];
    // Explicit round-to-nearest products and sums: nvcc may not contract them into FMAs, so this
    // equals the CPU backend's rope (plain f32 mul/add) and qkv_rope.cu's copy bit for bit.
    h[a] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    h[b] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

// K/V rows [n, kv_heads * head_dim] f32 into paged caches [blocks * block_size, kv_heads * head_dim].
template <typename T> DEVI T from_f32(float v);
template <> DEVI float from_f32<float>(float v) { return v; }
template <> DEVI uint16_t from_f32<uint16_t>(float v) { return f2h(v); }
struct bf16_tag { uint16_t bits; };
template <> DEVI bf16_tag from_f32<bf16_tag>(float v) { return bf16_tag{f2bf(v)}; }

template <typename T>
__device__ void kv_write(const float* k, const float* v, T* kc, T* vc, const uint32_t* slots, int n, int width) {
    pdl_wait();
    pdl_trigger();
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (size_t)n * width) return;
    int tok = t / width, e = t % width;
    size_t dst = (size_t)slots[tok] * width + e;
    kc[dst] = from_f32<T>(k[t]);
    vc[dst] = from_f32<T>(v[t]);
}
#define DEF_KVW(name, T)                                                                          \
    extern "C" __global__ void kv_write_##name(const float* k, const float* v, T* kc, T* vc,      \
                                               const uint32_t* slots, int n, int width) {         \
        kv_write<T>(k, v, kc, vc, slots, n, width);                                               \
    }
DEF_KVW(f32, float)
DEF_KVW(f16, uint16_t)
DEF_KVW(bf16, bf16_tag)

// Embedding: out[i, :] = dequant(table[ids[i], :]); one thread per 16-element chunk, grid.y = i.
// An id past the table writes NaN (the host cannot see device ids without a sync).
template <typename F>
__device__ void embed(const uint8_t* w, const uint32_t* ids, float* out, int rows, int cols) {
    pdl_wait();  // ids may come from the previous step's sampling kernel
    pdl_trigger();
    int i = blockIdx.y;
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= cols / 16) return;
    uint32_t id = ids[i];
    float v[16];
    if (id < (uint32_t)rows) {
        const uint8_t *row, *aux;
        row_ptrs<F>(w, rows, cols / F::QK, id, row, aux);
        F::decode16(row, aux, k / (F::QK / 16), k % (F::QK / 16), v);
    } else {
#pragma unroll
        for (int j = 0; j < 16; j++) v[j] = __int_as_float(0x7fc00000);
    }
    float4* o = (float4*)(out + (size_t)i * cols + (size_t)k * 16);
#pragma unroll
    for (int q = 0; q < 4; q++) o[q] = make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
}

// Dequantize rows [r0, r0 + nr) of W into f16 `out` [nr, cols] (prefill GEMM through cuBLAS).
template <typename F>
__device__ void dequant_f16(const uint8_t* w, uint16_t* out, int rows, int cols, int r0, int nr) {
    size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    int cpr = cols / 16;
    bool live = k < (size_t)nr * cpr;
    int r = r0 + (live ? k / cpr : 0), c = live ? k % cpr : 0;
    float v[16];
    if (live) {  // the weight is decoded while the previous kernel drains
        const uint8_t *row, *aux;
        row_ptrs<F>(w, rows, cols / F::QK, r, row, aux);
        F::decode16(row, aux, c / (F::QK / 16), c % (F::QK / 16), v);
    }
    // `out` is scratch the previous GEMM may still read.
    pdl_wait();
    pdl_trigger();
    if (!live) return;
    uint32_t h[8];
#pragma unroll
    for (int j = 0; j < 8; j++) h[j] = (uint32_t)f2h(v[2 * j]) | ((uint32_t)f2h(v[2 * j + 1]) << 16);
    uint4* o = (uint4*)(out + ((size_t)(r - r0) * cols + (size_t)c * 16));
    o[0] = make_uint4(h[0], h[1], h[2], h[3]);
    o[1] = make_uint4(h[4], h[5], h[6], h[7]);
}

#define DEF_EMBED(name, F)                                                                        \
    extern "C" __global__ void embed_##name(const uint8_t* w, const uint32_t* ids, float* out,    \
                                            int rows, int cols) {                                 \
        embed<F>(w, ids, out, rows, cols);                                                        \
    }                                                                                             \
    extern "C" __global__ void dequant_f16_##name(const uint8_t* w, uint16_t* out, int rows,      \
                                                  int cols, int r0, int nr) {                     \
        dequant_f16<F>(w, out, rows, cols, r0, nr);                                               \
    }
FOR_EACH_FORMAT(DEF_EMBED)

// f32 -> f16 (activations for the cuBLAS prefill GEMM).
extern "C" __global__ void f32_to_f16(const float* __restrict__ x, uint16_t* __restrict__ y, size_t total) {
    pdl_wait();
    pdl_trigger();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) y[i] = f2h(x[i]);
}

// Prefill activations for the f16 tensor-core GEMM, rounded as the CPU's dot sees them: each
// 32 (K = false) or 256 (K = true) elements quantized to int8 exactly as pocket-quant's
// quantize_act_q8 / quantize_act_q8k (common.cuh quant_lane), then y = f16(q * d). The GEMM then
// multiplies the same activation values as the CPU backend and the decode GEMV (up to the f16
// rounding of q * d), so prefill logits agree with the CPU's. One warp per 256 elements; a row's
// last chunk may be partial for the Q8 kind (total32 counts 32-element blocks).
template <bool K>
__device__ void act_q8_to_f16(const float* __restrict__ x, uint16_t* __restrict__ y, int total32) {
    pdl_wait();
    pdl_trigger();
    int c = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;  // warp-uniform
    if (c * 8 >= total32) return;
    int lane = threadIdx.x & 31, nvalid = min(8, total32 - 8 * c);
    float v[8];
    load_lane8(x + (size_t)c * 256, nvalid, v);
    int q[8], sum;
    float d;
    quant_lane<K>(v, q, d, sum);
    if ((lane >> 2) < nvalid) {
        uint32_t h[4];
#pragma unroll
        for (int i = 0; i < 4; i++)
            h[i] = (uint32_t)f2h(__fmul_rn((float)q[2 * i], d)) | ((uint32_t)f2h(__fmul_rn((float)q[2 * i + 1], d)) << 16);
        ((uint4*)(y + (size_t)c * 256))[lane] = make_uint4(h[0], h[1], h[2], h[3]);
    }
}
extern "C" __global__ void act_q8_f16(const float* x, uint16_t* y, int total32) {
    act_q8_to_f16<false>(x, y, total32);
}
// Only for rows of a multiple of 256 (the K formats' widths).
extern "C" __global__ void act_q8k_f16(const float* x, uint16_t* y, int total32) {
    act_q8_to_f16<true>(x, y, total32);
}

// silu_mul for decode-sized inputs (at most 8 rows of a multiple of 32), also writing the
// output's int8 quantization in both kinds, as the decode norms do (common.cuh quant256 layout;
// Q8K only where d is a multiple of 256), so the down projection launches no quantize kernel.
// The same expression as silu_mul, so `out` is bit-identical to it. One warp per 256 elements
// of the flattened [rows, d] (total32 = rows * d / 32).
extern "C" __global__ void silu_mul_q8(const float* __restrict__ g, const float* __restrict__ u,
                                       float* __restrict__ out, int total32, int d, int8_t* xq,
                                       float* xd, float* xs, int8_t* xqk, float* xdk, float* xsk) {
    pdl_wait();
    pdl_trigger();
    int c = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;  // warp-uniform
    if (c * 8 >= total32) return;
    int lane = threadIdx.x & 31, nvalid = min(8, total32 - 8 * c);
    bool valid = (lane >> 2) < nvalid;
    size_t e = (size_t)c * 256, b = (size_t)c * 8;
    float gv[8], uv[8], v[8];
    load_lane8(g + e, nvalid, gv);
    load_lane8(u + e, nvalid, uv);
#pragma unroll
    for (int i = 0; i < 8; i++) {
        float a = gv[i];
        v[i] = swiglu_f(a, uv[i]);
    }
    if (valid) {
        float4* o = (float4*)(out + e) + 2 * lane;
        o[0] = make_float4(v[0], v[1], v[2], v[3]);
        o[1] = make_float4(v[4], v[5], v[6], v[7]);
    }
    int q[8], sum;
    float dd;
    quant_lane<false>(v, q, dd, sum);
    if (valid) store_lane(q, dd, sum, xq + e, xd + b, xs + b);
    if (d % 256 == 0) {
        quant_lane<true>(v, q, dd, sum);
        store_lane(q, dd, sum, xqk + e, xdk + b, xsk + b);
    }
}
