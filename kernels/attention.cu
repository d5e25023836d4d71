// Causal GQA attention over a paged KV cache, for varlen batches (prefill, decode and mixed in one
// call; crates/pocket-kernels/src/attention.rs has the contract).
//
// Grid (query rows, heads, splits); 4 warps per block. Each warp walks its share of the keys with
// an online softmax (running max, running sum, rescaled accumulator): no T x T score matrix ever
// exists. The four warps merge through shared memory. With splits > 1 (flash-decoding: few query
// rows, long contexts) each block writes an unnormalized partial (max, sum, acc) and
// attn_combine merges the splits.
//
// head_dim <= 256: each lane holds dims lane + 32 i, i < 8.
#include "common.cuh"

#define ATT_WARPS 4
#define ATT_DPL 8

template <typename T> DEVI float ld_kv(const T* p);
template <> DEVI float ld_kv<float>(const float* p) { return *p; }
template <> DEVI float ld_kv<__half>(const __half* p) { return __half2float(*p); }
template <> DEVI float ld_kv<__nv_bfloat16>(const __nv_bfloat16* p) { return __bfloat162float(*p); }

struct AttnArgs {
    const float* q;
    const void* k_cache;
    const void* v_cache;
    const uint32_t* query_start;
    const uint32_t* seq_lens;
    const uint32_t* block_tables;
    float* out;
    float* part_acc;  // [rows, heads, splits, head_dim] when splits > 1
    float* part_ml;   // [rows, heads, splits, 2]
    int num_seqs, heads, kv_heads, head_dim, block_size, max_blocks, window, splits;
    float scale, softcap;
};

template <typename T>
__device__ void attention(const AttnArgs& a) {
    int row = blockIdx.x, h = blockIdx.y, split = blockIdx.z;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    // Sequence owning this query row: the last s with query_start[s] <= row.
    int lo_s = 0, hi_s = a.num_seqs - 1;
    while (lo_s < hi_s) {
        int mid = (lo_s + hi_s + 1) / 2;
        if (a.query_start[mid] <= (uint32_t)row) lo_s = mid; else hi_s = mid - 1;
    }
    int s = lo_s;
    int qlen = a.query_start[s + 1] - a.query_start[s];
    int pos = (int)a.seq_lens[s] - qlen + (row - (int)a.query_start[s]);
    int k_lo = a.window > 0 ? max(0, pos - a.window + 1) : 0;
    int nkeys = pos - k_lo + 1;
    int per = (nkeys + a.splits - 1) / a.splits;
    int k_begin = k_lo + split * per, k_end = min(pos + 1, k_begin + per);

    int kvh = h / (a.heads / a.kv_heads);
    float qv[ATT_DPL], acc[ATT_DPL];
    const float* qp = a.q + ((size_t)row * a.heads + h) * a.head_dim;
#pragma unroll
    for (int i = 0; i < ATT_DPL; i++) {
        int d = lane + 32 * i;
        qv[i] = d < a.head_dim ? qp[d] * a.scale : 0.f;
        acc[i] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    const T* kc = (const T*)a.k_cache;
    const T* vc = (const T*)a.v_cache;
    const uint32_t* bt = a.block_tables + (size_t)s * a.max_blocks;
    size_t kv_stride = (size_t)a.kv_heads * a.head_dim;
    for (int j = k_begin + warp; j < k_end; j += ATT_WARPS) {
        size_t slot = (size_t)bt[j / a.block_size] * a.block_size + (j % a.block_size);
        const T* kp = kc + slot * kv_stride + (size_t)kvh * a.head_dim;
        const T* vp = vc + slot * kv_stride + (size_t)kvh * a.head_dim;
        // K and V of the key are loaded together: the V load does not wait for the score, so a
        // key costs one memory round trip instead of two.
        float kv[ATT_DPL], vv[ATT_DPL];
#pragma unroll
        for (int i = 0; i < ATT_DPL; i++) {
            int d = lane + 32 * i;
            kv[i] = d < a.head_dim ? ld_kv<T>(kp + d) : 0.f;
            vv[i] = d < a.head_dim ? ld_kv<T>(vp + d) : 0.f;
        }
        float sc = 0.f;
#pragma unroll
        for (int i = 0; i < ATT_DPL; i++) sc += qv[i] * kv[i];
        sc = warp_sum(sc);
        if (a.softcap > 0.f) sc = a.softcap * tanhf(sc / a.softcap);
        float m_new = fmaxf(m, sc);
        float corr = __expf(m - m_new);  // m = -inf on the first key: corr = 0
        float p = __expf(sc - m_new);
        l = l * corr + p;
#pragma unroll
        for (int i = 0; i < ATT_DPL; i++) acc[i] = acc[i] * corr + p * vv[i];
        m = m_new;
    }
    // Merge the warps.
    __shared__ float sm[ATT_WARPS], sl[ATT_WARPS];
    __shared__ float sacc[ATT_WARPS][32 * ATT_DPL];
    if (lane == 0) {
        sm[warp] = m;
        sl[warp] = l;
    }
#pragma unroll
    for (int i = 0; i < ATT_DPL; i++) sacc[warp][lane + 32 * i] = acc[i];
    __syncthreads();
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < ATT_WARPS; w++) M = fmaxf(M, sm[w]);
    float L = 0.f, wgt[ATT_WARPS];
#pragma unroll
    for (int w = 0; w < ATT_WARPS; w++) {
        wgt[w] = sm[w] == -INFINITY ? 0.f : __expf(sm[w] - M);
        L += sl[w] * wgt[w];
    }
    size_t rh = (size_t)row * a.heads + h;
    for (int d = threadIdx.x; d < a.head_dim; d += blockDim.x) {
        float o = 0.f;
#pragma unroll
        for (int w = 0; w < ATT_WARPS; w++) o += sacc[w][d] * wgt[w];
        if (a.splits == 1) {
            a.out[rh * a.head_dim + d] = L > 0.f ? o / L : 0.f;
        } else {
            a.part_acc[(rh * a.splits + split) * a.head_dim + d] = o;
        }
    }
    if (a.splits > 1 && threadIdx.x == 0) {
        a.part_ml[(rh * a.splits + split) * 2] = M;
        a.part_ml[(rh * a.splits + split) * 2 + 1] = L;
    }
}

extern "C" __global__ void __launch_bounds__(128) attn_f32(AttnArgs a) { attention<float>(a); }
extern "C" __global__ void __launch_bounds__(128) attn_f16(AttnArgs a) { attention<__half>(a); }
extern "C" __global__ void __launch_bounds__(128) attn_bf16(AttnArgs a) { attention<__nv_bfloat16>(a); }

// Merges the splits of each (row, head): grid (rows, heads), head_dim threads (up to 256).
extern "C" __global__ void attn_combine(const float* __restrict__ part_acc, const float* __restrict__ part_ml,
                                        float* __restrict__ out, int heads, int head_dim, int splits) {
    size_t rh = (size_t)blockIdx.x * heads + blockIdx.y;
    float M = -INFINITY;
    for (int s = 0; s < splits; s++) M = fmaxf(M, part_ml[(rh * splits + s) * 2]);
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float L = 0.f, o = 0.f;
        for (int s = 0; s < splits; s++) {
            float ms = part_ml[(rh * splits + s) * 2];
            float w = ms == -INFINITY ? 0.f : __expf(ms - M);
            L += part_ml[(rh * splits + s) * 2 + 1] * w;
            o += part_acc[(rh * splits + s) * head_dim + d] * w;
        }
        out[rh * head_dim + d] = L > 0.f ? o / L : 0.f;
    }
}

// ---- decode: one query row per sequence, lanes over keys, one pass over each KV head ----------
// Grid (sequences, kv heads, splits); 128 threads. The block serves all G query heads of its KV
// head, so each K and V row is read once for the whole GQA group. Threads form groups of
// TPK = head_dim / 8 lanes; a group owns one key at a time and each lane holds 8 of its dims
// (16-byte loads of f16/bf16 rows, 256 contiguous bytes per key at head_dim 128). A group walks
// keys grp, grp + KG, ... (KG = 128 / TPK groups), ATD_UNROLL keys per iteration with their K and
// V loads issued together, and keeps its own online softmax per query head. The groups merge in
// shared memory at the end; splits > 1 write the same partials as `attention` for attn_combine.
// Needs head_dim in {8, 16, 32, 64, 128, 256}, G <= GM and 16-byte aligned cache rows.
#define ATD_THREADS 128
#define ATD_UNROLL 4

template <typename T> struct Kv8;
template <> struct Kv8<__half> {
    uint4 r;
    DEVI void load(const __half* p) { r = __ldg((const uint4*)p); }
    DEVI void get(float* o) const {
        uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            o[2 * i] = h2f(w[i] & 0xffff);
            o[2 * i + 1] = h2f(w[i] >> 16);
        }
    }
};
template <> struct Kv8<__nv_bfloat16> {
    uint4 r;
    DEVI void load(const __nv_bfloat16* p) { r = __ldg((const uint4*)p); }
    DEVI void get(float* o) const {
        uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            o[2 * i] = bf2f(w[i] & 0xffff);
            o[2 * i + 1] = bf2f(w[i] >> 16);
        }
    }
};
template <> struct Kv8<float> {
    float4 a, b;
    DEVI void load(const float* p) {
        a = __ldg((const float4*)p);
        b = __ldg((const float4*)p + 1);
    }
    DEVI void get(float* o) const {
        o[0] = a.x; o[1] = a.y; o[2] = a.z; o[3] = a.w;
        o[4] = b.x; o[5] = b.y; o[6] = b.z; o[7] = b.w;
    }
};

template <typename T, int GM>
__device__ void attn_decode(const AttnArgs& a) {
    int s = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
    int tid = threadIdx.x;
    int G = a.heads / a.kv_heads;
    int tpk = a.head_dim / 8, kg = ATD_THREADS / tpk;
    int grp = tid / tpk, dl = tid % tpk;
    int pos = (int)a.seq_lens[s] - 1;
    int k_lo = a.window > 0 ? max(0, pos - a.window + 1) : 0;
    int nkeys = pos - k_lo + 1;
    int per = (nkeys + a.splits - 1) / a.splits;
    int k_begin = k_lo + split * per, k_end = min(pos + 1, k_begin + per);

    float q[GM][8], acc[GM][8], m[GM], l[GM];
#pragma unroll
    for (int g = 0; g < GM; g++) {
        const float* qp = a.q + ((size_t)s * a.heads + kvh * G + min(g, G - 1)) * a.head_dim + 8 * dl;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            q[g][i] = g < G ? qp[i] * a.scale : 0.f;
            acc[g][i] = 0.f;
        }
        m[g] = -INFINITY;
        l[g] = 0.f;
    }
    const T* kc = (const T*)a.k_cache;
    const T* vc = (const T*)a.v_cache;
    const uint32_t* bt = a.block_tables + (size_t)s * a.max_blocks;
    size_t kv_stride = (size_t)a.kv_heads * a.head_dim;
    size_t col = (size_t)kvh * a.head_dim + 8 * dl;
    // Every thread runs the same trip count, so the group shuffles below see all lanes.
    for (int base = k_begin; base < k_end; base += kg * ATD_UNROLL) {
        Kv8<T> kr[ATD_UNROLL], vr[ATD_UNROLL];
#pragma unroll
        for (int u = 0; u < ATD_UNROLL; u++) {
            int j = base + grp + kg * u;
            if (j < k_end) {
                size_t slot = (size_t)bt[j / a.block_size] * a.block_size + (j % a.block_size);
                kr[u].load(kc + slot * kv_stride + col);
                vr[u].load(vc + slot * kv_stride + col);
            }
        }
        float sc[ATD_UNROLL][GM];
#pragma unroll
        for (int u = 0; u < ATD_UNROLL; u++) {
            int j = base + grp + kg * u;
            float kf[8];
            kr[u].get(kf);
#pragma unroll
            for (int g = 0; g < GM; g++) {
                float d = 0.f;
#pragma unroll
                for (int i = 0; i < 8; i++) d += q[g][i] * kf[i];
                for (int o = tpk / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
                if (a.softcap > 0.f) d = a.softcap * tanhf(d / a.softcap);
                sc[u][g] = j < k_end ? d : -INFINITY;
            }
        }
#pragma unroll
        for (int g = 0; g < GM; g++) {
            float mx = m[g];
#pragma unroll
            for (int u = 0; u < ATD_UNROLL; u++) mx = fmaxf(mx, sc[u][g]);
            if (mx == -INFINITY) continue;  // no key of this group yet
            float corr = m[g] == -INFINITY ? 0.f : __expf(m[g] - mx);
            l[g] *= corr;
#pragma unroll
            for (int i = 0; i < 8; i++) acc[g][i] *= corr;
#pragma unroll
            for (int u = 0; u < ATD_UNROLL; u++) {
                if (sc[u][g] == -INFINITY) continue;
                float p = __expf(sc[u][g] - mx);
                float vf[8];
                vr[u].get(vf);
                l[g] += p;
#pragma unroll
                for (int i = 0; i < 8; i++) acc[g][i] += p * vf[i];
            }
            m[g] = mx;
        }
    }
    // Merge the KG groups: [group][head] maxima and sums, [group][head][dim] accumulators.
    __shared__ float sm[ATD_THREADS][GM], sl[ATD_THREADS][GM];
    __shared__ float sacc[ATD_THREADS * 8 * GM];
#pragma unroll
    for (int g = 0; g < GM; g++) {
        if (dl == 0) {
            sm[grp][g] = m[g];
            sl[grp][g] = l[g];
        }
#pragma unroll
        for (int i = 0; i < 8; i++) sacc[((size_t)grp * GM + g) * a.head_dim + 8 * dl + i] = acc[g][i];
    }
    __syncthreads();
    for (int idx = tid; idx < G * a.head_dim; idx += ATD_THREADS) {
        int g = idx / a.head_dim, d = idx % a.head_dim;
        float M = -INFINITY;
        for (int k = 0; k < kg; k++) M = fmaxf(M, sm[k][g]);
        float L = 0.f, o = 0.f;
        for (int k = 0; k < kg; k++) {
            float w = sm[k][g] == -INFINITY ? 0.f : __expf(sm[k][g] - M);
            L += sl[k][g] * w;
            o += sacc[((size_t)k * GM + g) * a.head_dim + d] * w;
        }
        size_t rh = (size_t)s * a.heads + kvh * G + g;
        if (a.splits == 1) {
            a.out[rh * a.head_dim + d] = L > 0.f ? o / L : 0.f;
        } else {
            a.part_acc[(rh * a.splits + split) * a.head_dim + d] = o;
            if (d == 0) {
                a.part_ml[(rh * a.splits + split) * 2] = M;
                a.part_ml[(rh * a.splits + split) * 2 + 1] = L;
            }
        }
    }
}

#define DEF_ATTN_DECODE(name, T)                                                                   \
    extern "C" __global__ void __launch_bounds__(ATD_THREADS) attn_dec_##name##_g4(AttnArgs a) {  \
        attn_decode<T, 4>(a);                                                                      \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(ATD_THREADS) attn_dec_##name##_g8(AttnArgs a) {  \
        attn_decode<T, 8>(a);                                                                      \
    }
DEF_ATTN_DECODE(f32, float)
DEF_ATTN_DECODE(f16, __half)
DEF_ATTN_DECODE(bf16, __nv_bfloat16)
