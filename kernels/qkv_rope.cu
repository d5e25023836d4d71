// The attention-input op in one launch: Q/K/V projection rows (+ bias) -> RoPE on Q and K ->
// rotated Q for the attention kernel and K/V into the paged cache. Replaces split_columns3,
// add_bias (up to 3), rope (2) and kv_write_* (elementwise.cu, split.cu), and must equal them
// bit for bit: every element sees the same float operations written the same way (one bias add,
// then the rope kernel's two expressions in explicit __fmul_rn/__fadd_rn/__fsub_rn, then the
// cache's rounding).
#include "common.cuh"

// Mirrors `QkvRopeArgs` in crates/pocket-kernels/src/cuda/qkv_rope.rs (13 pointers, then ints,
// then the QK-norm / gate fields read by qkv_rope_kv_write_norm_* only).
struct QkvRopeArgs {
    const float* q;       // query head h of token t at q + t * q_stride + h * q_head_stride
    const float* k;       // key head h of token t at k + t * k_stride + h * head_dim
    const float* v;       // value head h alike
    const float* q_bias;  // indexed as a row of q (h * q_head_stride + e); null: no bias
    const float* k_bias;
    const float* v_bias;
    const uint32_t* pos;  // [n]
    const float* cos_t;   // [max_pos, rot_dim / 2]
    const float* sin_t;
    const uint32_t* slots;  // [n] cache slot of each token
    float* q_out;           // [n, heads, head_dim]
    void* k_cache;          // [slots, kv_heads, head_dim]
    void* v_cache;
    int n, heads, kv_heads, head_dim, rot_dim, neox, max_pos;
    int q_stride, k_stride, v_stride, q_head_stride;
    const float* q_norm;  // [head_dim] RMSNorm weight of each query head; null: no norm
    const float* k_norm;  // alike for the key heads
    float* gate_out;      // [n, heads, head_dim]: the gate half of each [query | gate] head; or null
    float q_eps, k_eps;
    // Non-zero: let the next kernel (the attention) launch before waiting for the projection, so
    // its blocks do their early work (attention_stage.cuh) beside the projection's tail. Safe
    // because that kernel reads nothing this one or the projection writes before its own wait.
    int trigger_first;
};

// Waits for the projection output; the dependents launch before (trigger_first) or after.
DEVI void qkv_rope_wait(const QkvRopeArgs& a) {
    if (a.trigger_first) pdl_trigger();
    pdl_wait();  // the projection output, positions and slots come from earlier work
    if (!a.trigger_first) pdl_trigger();
}

template <typename T> DEVI T cache_from_f32(float v);
template <> DEVI float cache_from_f32<float>(float v) { return v; }
template <> DEVI uint16_t cache_from_f32<uint16_t>(float v) { return f2h(v); }
struct bf16_bits { uint16_t bits; };
template <> DEVI bf16_bits cache_from_f32<bf16_bits>(float v) { return bf16_bits{f2bf(v)}; }

// One thread per (token, head unit, element pair). Units [0, heads) are query heads,
// [heads, heads + kv_heads) key heads, then value heads. A query or key thread with pair index
// j < rot_dim / 2 rotates the pair (j, j + rot/2) (NeoX) or (2j, 2j + 1); the others copy two
// of the head's trailing unrotated elements (partial rotary). A value thread copies elements
// (2j, 2j + 1). Consecutive threads read consecutive pairs of one head.
template <typename T>
__device__ void qkv_rope_kv_write(const QkvRopeArgs& a) {
    qkv_rope_wait(a);
    int hp = a.head_dim / 2, units = a.heads + 2 * a.kv_heads;
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t total = (size_t)a.n * units * hp;
    if (t >= total) return;
    // 32-bit index arithmetic wherever the launch fits (always in decode): a 64-bit division by
    // a runtime value is a long subroutine in front of every load of the thread.
    int j, u, tok;
    if (total <= 0xffffffffu) {
        uint32_t t32 = (uint32_t)t, tu = t32 / (uint32_t)hp;
        j = (int)(t32 - tu * (uint32_t)hp);
        tok = (int)(tu / (uint32_t)units);
        u = (int)(tu - (uint32_t)tok * (uint32_t)units);
    } else {
        j = (int)(t % hp);
        size_t tu = t / hp;
        u = (int)(tu % units), tok = (int)(tu / units);
    }
    // The position (rotated units) and the cache slot (K/V units) are issued with the source
    // loads rather than after them, so a thread waits for two dependent round trips (these, then
    // the cos/sin table) instead of three.
    uint32_t p = u < a.heads + a.kv_heads ? a.pos[tok] : 0u;
    uint32_t slot = u >= a.heads ? a.slots[tok] : 0u;
    const float *src, *bias;
    int head;
    if (u < a.heads) {
        head = u;
        src = a.q + (size_t)tok * a.q_stride + (size_t)head * a.q_head_stride;
        bias = a.q_bias ? a.q_bias + (size_t)head * a.q_head_stride : nullptr;
    } else if (u < a.heads + a.kv_heads) {
        head = u - a.heads;
        src = a.k + (size_t)tok * a.k_stride + (size_t)head * a.head_dim;
        bias = a.k_bias ? a.k_bias + (size_t)head * a.head_dim : nullptr;
    } else {
        head = u - a.heads - a.kv_heads;
        src = a.v + (size_t)tok * a.v_stride + (size_t)head * a.head_dim;
        bias = a.v_bias ? a.v_bias + (size_t)head * a.head_dim : nullptr;
    }
    bool is_v = u >= a.heads + a.kv_heads;
    int half = a.rot_dim / 2;
    bool rotate = !is_v && j < half;
    int ea, eb;
    if (is_v) {
        ea = 2 * j, eb = 2 * j + 1;
    } else if (rotate) {
        ea = a.neox ? j : 2 * j, eb = a.neox ? j + half : 2 * j + 1;
    } else {
        ea = a.rot_dim + 2 * (j - half), eb = ea + 1;
    }
    float x0 = src[ea], x1 = src[eb];
    if (bias) {
        // add_bias: x[i] += b[i % m] (a lone add: nothing to contract)
        x0 = __fadd_rn(x0, bias[ea]);
        x1 = __fadd_rn(x1, bias[eb]);
    }
    if (rotate) {
        if (p < (uint32_t)a.max_pos) {  // validated on the host; rope skips such tokens too
            float c = a.cos_t[(size_t)p * half + j], s = a.sin_t[(size_t)p * half + j];
            // The rope kernel's expressions with explicit round-to-nearest intrinsics (no FMA
            // contraction left to nvcc, whose choice differed between the two kernels): equal to
            // the rope kernel and to the CPU backend's plain f32 mul/add bit for bit.
            float r0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
            float r1 = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
            x0 = r0;
            x1 = r1;
        }
    }
    if (u < a.heads) {
        float* o = a.q_out + ((size_t)tok * a.heads + head) * a.head_dim;
        o[ea] = x0;
        o[eb] = x1;
    } else {
        size_t row = (size_t)slot * a.kv_heads * a.head_dim + (size_t)head * a.head_dim;
        T* c = (T*)(is_v ? a.v_cache : a.k_cache) + row;
        c[ea] = cache_from_f32<T>(x0);
        c[eb] = cache_from_f32<T>(x1);
    }
}

extern "C" __global__ void qkv_rope_kv_write_f32(QkvRopeArgs a) { qkv_rope_kv_write<float>(a); }
extern "C" __global__ void qkv_rope_kv_write_f16(QkvRopeArgs a) { qkv_rope_kv_write<uint16_t>(a); }
extern "C" __global__ void qkv_rope_kv_write_bf16(QkvRopeArgs a) { qkv_rope_kv_write<bf16_bits>(a); }

// ---- with per-head QK-norm and/or the output gate (Qwen3, Qwen3.5) -----------------------------
// RMSNorm needs each head's sum of squares, so one block serves one (head unit, token): grid
// (n, heads + 2 * kv_heads), blockDim = head_dim / 2 rounded up to a warp; thread j owns the same
// element pair as in qkv_rope_kv_write (rotated pair, trailing unrotated pair, or value pair).
// Per element: the bias add, then rms_norm's arithmetic (norm.cu: inv = 1 / sqrt(ss / d + eps),
// out = x * inv * w, each op rounded once; the sum of squares is reduced in another order than
// the CPU's sequential sum, so q and k match the CPU to a few ulps, not bit for bit), then the
// rope expressions above. Query threads of a gated layer also copy their pair of the head's gate
// half (+ bias) to gate_out.

// Sum of v over the block (blockDim.x a multiple of 32, at most 1024); every thread must call it.
DEVI float qkn_block_sum(float v) {
    __shared__ float part[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_sum(v);
    if (lane == 0) part[warp] = v;
    __syncthreads();
    int nw = blockDim.x / 32;
    v = lane < nw ? part[lane] : 0.f;
    return warp_sum(v);
}

template <typename T>
__device__ void qkv_norm_rope_kv_write(const QkvRopeArgs& a) {
    int tok = blockIdx.x, u = blockIdx.y, j = threadIdx.x;
    int hp = a.head_dim / 2, half = a.rot_dim / 2;
    bool is_q = u < a.heads, is_v = u >= a.heads + a.kv_heads;
    int head = is_q ? u : (is_v ? u - a.heads - a.kv_heads : u - a.heads);
    bool live = j < hp;
    bool rotate = !is_v && j < half;
    int ea, eb;
    if (is_v) {
        ea = 2 * j, eb = 2 * j + 1;
    } else if (rotate) {
        ea = a.neox ? j : 2 * j, eb = a.neox ? j + half : 2 * j + 1;
    } else {
        ea = a.rot_dim + 2 * (j - half), eb = ea + 1;
    }
    const float* bias;
    const float* nw = is_q ? a.q_norm : (is_v ? nullptr : a.k_norm);  // block-uniform
    if (is_q) {
        bias = a.q_bias ? a.q_bias + (size_t)head * a.q_head_stride : nullptr;
    } else {
        bias = is_v ? a.v_bias : a.k_bias;
        bias = bias ? bias + (size_t)head * a.head_dim : nullptr;
    }
    // Weights (bias, norm) are no step's output: loaded before the wait.
    float b0 = 0.f, b1 = 0.f, w0 = 0.f, w1 = 0.f;
    if (live && bias) b0 = bias[ea], b1 = bias[eb];
    if (live && nw) w0 = nw[ea], w1 = nw[eb];
    qkv_rope_wait(a);
    uint32_t p = is_v ? 0u : a.pos[tok];
    uint32_t slot = is_q ? 0u : a.slots[tok];
    const float* src;
    if (is_q) {
        src = a.q + (size_t)tok * a.q_stride + (size_t)head * a.q_head_stride;
    } else if (!is_v) {
        src = a.k + (size_t)tok * a.k_stride + (size_t)head * a.head_dim;
    } else {
        src = a.v + (size_t)tok * a.v_stride + (size_t)head * a.head_dim;
    }
    float x0 = 0.f, x1 = 0.f;
    if (live) {
        x0 = src[ea], x1 = src[eb];
        if (bias) {
            x0 = __fadd_rn(x0, b0);
            x1 = __fadd_rn(x1, b1);
        }
        if (is_q && a.gate_out) {
            // split_halves' copy of the gate half (+ add_bias on the projection row).
            const float* gs = src + a.head_dim;
            float g0 = gs[2 * j], g1 = gs[2 * j + 1];
            if (bias) {
                g0 = __fadd_rn(g0, bias[a.head_dim + 2 * j]);
                g1 = __fadd_rn(g1, bias[a.head_dim + 2 * j + 1]);
            }
            float* go = a.gate_out + ((size_t)tok * a.heads + head) * a.head_dim;
            go[2 * j] = g0;
            go[2 * j + 1] = g1;
        }
    }
    if (nw) {
        float ss = qkn_block_sum(__fadd_rn(__fmul_rn(x0, x0), __fmul_rn(x1, x1)));
        float eps = is_q ? a.q_eps : a.k_eps;
        float inv = __fdiv_rn(1.f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)a.head_dim), eps)));
        x0 = __fmul_rn(__fmul_rn(x0, inv), w0);
        x1 = __fmul_rn(__fmul_rn(x1, inv), w1);
    }
    if (!live) return;
    if (rotate && p < (uint32_t)a.max_pos) {  // validated on the host; rope skips such tokens too
        float c = a.cos_t[(size_t)p * half + j], s = a.sin_t[(size_t)p * half + j];
        float r0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        float r1 = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
        x0 = r0;
        x1 = r1;
    }
    if (is_q) {
        float* o = a.q_out + ((size_t)tok * a.heads + head) * a.head_dim;
        o[ea] = x0;
        o[eb] = x1;
    } else {
        size_t row = (size_t)slot * a.kv_heads * a.head_dim + (size_t)head * a.head_dim;
        T* c = (T*)(is_v ? a.v_cache : a.k_cache) + row;
        c[ea] = cache_from_f32<T>(x0);
        c[eb] = cache_from_f32<T>(x1);
    }
}

extern "C" __global__ void qkv_rope_kv_write_norm_f32(QkvRopeArgs a) { qkv_norm_rope_kv_write<float>(a); }
extern "C" __global__ void qkv_rope_kv_write_norm_f16(QkvRopeArgs a) { qkv_norm_rope_kv_write<uint16_t>(a); }
extern "C" __global__ void qkv_rope_kv_write_norm_bf16(QkvRopeArgs a) {
    qkv_norm_rope_kv_write<bf16_bits>(a);
}
