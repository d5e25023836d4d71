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
