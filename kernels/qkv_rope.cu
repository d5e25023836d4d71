// The attention-input op in one launch: Q/K/V projection rows (+ bias) -> RoPE on Q and K ->
// rotated Q for the attention kernel and K/V into the paged cache. Replaces split_columns3,
// add_bias (up to 3), rope (2) and kv_write_* (elementwise.cu, split.cu), and must equal them
// bit for bit: every element sees the same float operations written the same way (one bias add,
// then the rope kernel's two expressions in explicit __fmul_rn/__fadd_rn/__fsub_rn, then the
// cache's rounding).
#include "common.cuh"

// Mirrors `QkvRopeArgs` in crates/pocket-kernels/src/cuda/qkv_rope.rs (13 pointers, then ints).
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
};

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
    pdl_wait();  // the projection output, positions and slots come from earlier work
    pdl_trigger();
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
