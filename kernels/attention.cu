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
#include "attention_stage.cuh"
#include "cluster.cuh"

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
    // Decode kernel: fewest keys worth a split of their own. The kernel uses
    // dec_splits(keys, splits, min_keys) <= splits of its blocks for the sequence's real length
    // (read on the device), so a graph captured with a large split count stays cheap at short
    // contexts; attn_combine recomputes the same count.
    int min_keys;
    // Decode kernel: query heads per block (0: the whole GQA group). With h > 0 the grid's y is
    // kv_heads * ceil(G / h) and each block serves h heads of its KV head (see attn_dec_hd).
    int heads_per_block;
    // Decode: where xq is non-null, whichever kernel writes `out` (the decode kernel with one
    // split, else attn_combine) also writes its Q8 quantization (common.cuh's Q8 rule: quants
    // [rows, heads * head_dim], scale and scaled sum per 32), so the output projection launches
    // no quantize kernel. Only for rows whose GEMV needs no Q8K (heads * head_dim % 256 != 0).
    int8_t* xq;
    float* xd;
    float* xs;
    // Output gate (Qwen3.5): where non-null, whichever kernel writes `out` writes
    // out * sigmoid(gate) instead (gate [rows, heads, head_dim], as `out`), and quantizes that.
    const float* gate;
    // Decode kernel: keys per lane group whose K/V rows are staged in dynamic shared memory before
    // pdl_wait() (attention_stage.cuh; 16-bit caches only, 0 = none). The launch passes
    // 2 * stage_keys * 128 * 16 bytes of dynamic shared memory.
    int stage_keys;
};

// sigmoid_mul's arithmetic (deltanet.cu): v * (1 / (1 + expf(-g))).
DEVI float gate_mul(float v, float g) { return v * (1.f / (1.f + expf(-g))); }
DEVI float gate_out(float v, const float* gate, size_t i) {
    return gate != nullptr ? gate_mul(v, gate[i]) : v;
}

// Splits the decode kernel really uses for `nkeys` keys: one per `min_keys` keys, at most `splits`.
DEVI int dec_splits(int nkeys, int splits, int min_keys) {
    if (min_keys < 1) return splits;  // no minimum: every split block takes part
    int e = (nkeys + min_keys - 1) / min_keys;
    return e < 1 ? 1 : (e > splits ? splits : e);
}

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
            a.out[rh * a.head_dim + d] = gate_out(L > 0.f ? o / L : 0.f, a.gate, rh * a.head_dim + d);
        } else {
            a.part_acc[(rh * a.splits + split) * a.head_dim + d] = o;
        }
    }
    if (a.splits > 1 && threadIdx.x == 0) {
        a.part_ml[(rh * a.splits + split) * 2] = M;
        a.part_ml[(rh * a.splits + split) * 2 + 1] = L;
    }
}

// q and the newest cache rows are the previous kernels' output, so this kernel (the generic and
// prefill-shaped path) prefetches nothing before pdl_wait() (the decode kernel below does: its
// metadata and older keys, attention_stage.cuh); the trigger lets the next kernel (the combine or
// the output projection) get scheduled while this one runs, and its own pdl_wait() keeps it
// correct.
#define DEF_ATTN(name, T)                                                                          \
    extern "C" __global__ void __launch_bounds__(128) attn_##name(AttnArgs a) {                   \
        pdl_wait();                                                                                \
        pdl_trigger();                                                                             \
        attention<T>(a);                                                                           \
    }
DEF_ATTN(f32, float)
DEF_ATTN(f16, __half)
DEF_ATTN(bf16, __nv_bfloat16)

// Merges the splits of each (row, head): grid (rows, heads), head_dim threads rounded up to a warp
// (up to 256), at most ATC_MAX_SPLITS splits; applies the output gate where `gate` is non-null.
// The split weights are computed once per block in shared memory (one split per thread), so the per-dimension loop is loads and FMAs only.
// dec_seq_lens != null: the partials come from the decode kernel (row = sequence), which used
// dec_splits(...) of the splits; when that is 1 its block already wrote `out` and this returns.
#define ATC_MAX_SPLITS 256

// Q8 quantization of one 32-element block held one element per lane (lane i: element i), with
// quant_lane<false>'s operations (common.cuh), so the block equals quantize_q8's bit for bit:
// quants at q[0..32), scale and scaled sum at *d and *s. The whole warp must call it.
DEVI void quant32_warp(float v, int8_t* q, float* d, float* s) {
    int lane = threadIdx.x & 31;
    float am = warp_max(fmaxf(0.f, fabsf(v)));
    float dd = __fdiv_rn(am, 127.f);
    float id = __fdiv_rn(1.f, dd);
    if (isinf(id)) id = 0.f;
    int qi = (int)(int8_t)min(max(sat_round_i32(__fmul_rn(v, id)), -128), 127);
    q[lane] = (int8_t)qi;
    float sum = warp_sum((float)qi);  // |sum| <= 4096: exact in f32
    if (lane == 0) {
        *d = dd;
        *s = __fmul_rn(dd, sum);
    }
}

extern "C" __global__ void attn_combine(const float* __restrict__ part_acc, const float* __restrict__ part_ml,
                                        float* __restrict__ out, int heads, int head_dim, int splits,
                                        const uint32_t* __restrict__ dec_seq_lens, int window, int min_keys,
                                        int8_t* xq, float* xd, float* xs, const float* gate) {
    pdl_wait();
    pdl_trigger();
    __shared__ float sw[ATC_MAX_SPLITS];
    __shared__ float sred[8];
    int tid = threadIdx.x, nt = blockDim.x;
    int n = splits;
    if (dec_seq_lens != nullptr) {
        int pos = (int)dec_seq_lens[blockIdx.x] - 1;
        int k_lo = window > 0 ? max(0, pos - window + 1) : 0;
        n = dec_splits(pos - k_lo + 1, splits, min_keys);
        if (n == 1) return;
    }
    size_t rh = (size_t)blockIdx.x * heads + blockIdx.y;
    // The gate (head_dim <= nt: one element per thread) is loaded now, not behind the reductions.
    float gv = gate != nullptr && tid < head_dim ? gate[rh * head_dim + tid] : 0.f;
    const float* ml = part_ml + rh * splits * 2;
    const float* acc = part_acc + rh * splits * head_dim;
    float mx = -INFINITY;
    for (int k = tid; k < n; k += nt) mx = fmaxf(mx, ml[2 * k]);
    mx = warp_max(mx);
    if (tid % 32 == 0) sred[tid / 32] = mx;
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < nt / 32; w++) M = fmaxf(M, sred[w]);
    __syncthreads();
    float ls = 0.f;
    for (int k = tid; k < n; k += nt) {
        float ms = ml[2 * k];
        float w = ms == -INFINITY ? 0.f : __expf(ms - M);
        sw[k] = w;
        ls += ml[2 * k + 1] * w;
    }
    ls = warp_sum(ls);
    if (tid % 32 == 0) sred[tid / 32] = ls;
    __syncthreads();
    float L = 0.f;
    for (int w = 0; w < nt / 32; w++) L += sred[w];
    for (int d = tid; d < head_dim; d += nt) {
        float o0 = 0.f, o1 = 0.f, o2 = 0.f, o3 = 0.f;
        int k = 0;
        for (; k + 4 <= n; k += 4) {
            o0 += acc[(size_t)k * head_dim + d] * sw[k];
            o1 += acc[(size_t)(k + 1) * head_dim + d] * sw[k + 1];
            o2 += acc[(size_t)(k + 2) * head_dim + d] * sw[k + 2];
            o3 += acc[(size_t)(k + 3) * head_dim + d] * sw[k + 3];
        }
        for (; k < n; k++) o0 += acc[(size_t)k * head_dim + d] * sw[k];
        float v = L > 0.f ? ((o0 + o1) + (o2 + o3)) / L : 0.f;
        if (gate != nullptr) v = gate_mul(v, d == tid ? gv : gate[rh * head_dim + d]);
        out[rh * head_dim + d] = v;
        // xq only with head_dim a multiple of 32 (the decode heads): whole warps reach here.
        if (xq != nullptr) {
            size_t e = rh * head_dim + (d & ~31);
            quant32_warp(v, xq + e, xd + e / 32, xs + e / 32);
        }
    }
}

// ---- decode: one query row per sequence, lanes over dims of a few keys at once -----------------
// Grid (sequences, kv heads, splits); 128 threads. The block serves all G query heads of its KV
// head, so each K and V row is read once for the whole GQA group. Threads form KG = 128 / TPK
// groups of TPK = HD / 8 lanes; a group owns one key at a time and each lane holds 8 of its dims
// (16-byte loads of f16/bf16 rows). Per iteration a group issues the K and V loads of U keys
// (grp, grp + KG, ...) together, forms the G x U partial dot products, and reduces them across its
// TPK lanes in one interleaved butterfly (HD and G are template constants, so every loop unrolls
// and the G x U shuffle chains overlap instead of running one key at a time). Each group keeps an
// online softmax per query head; the groups merge in shared memory (the per-group weights are
// computed once, then every output is KG independent loads and FMAs).
// Splits: the kernel reads the sequence's length and uses dec_splits(keys, splits, min_keys) of
// its split blocks (the rest exit at once); with one, block 0 writes `out` and no partials.
// Needs HD in {64, 128, 256}, G <= GM and 16-byte aligned q and cache rows.
#define ATD_THREADS 128

template <typename T> struct Kv8;
template <> struct Kv8<__half> {
    uint4 r;
    DEVI void load(const __half* p) { r = __ldg((const uint4*)p); }
    DEVI void zero() { r = uint4{0u, 0u, 0u, 0u}; }
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
    DEVI void zero() { r = uint4{0u, 0u, 0u, 0u}; }
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
    DEVI void zero() { a = b = float4{0.f, 0.f, 0.f, 0.f}; }
    DEVI void get(float* o) const {
        o[0] = a.x; o[1] = a.y; o[2] = a.z; o[3] = a.w;
        o[4] = b.x; o[5] = b.y; o[6] = b.z; o[7] = b.w;
    }
};

// Keys per group per iteration: as many K/V loads in flight as the registers allow without
// spilling (f32 rows are twice the registers of f16/bf16 ones; GM > 4 holds twice the q and acc).
// One or two heads per block (the short-context head split) leave room for 4 f32 keys, so a
// head_dim-64 block covers 64 keys per iteration and a 256-key context in 4 (attn.rs
// SHORT_MAX_ITERS runs those with one split: no combine launch). (Twice these keys in the
// cluster form made the 8B decode 3.7% slower: performance/cuda-dense.md, session 16.)
template <typename T, int GM> struct AtdUnroll {
    static constexpr int U = sizeof(T) == 4 ? (GM <= 2 ? 4 : 2) : (GM > 4 ? 2 : 4);
};

// Shared memory of a block of NT threads: accumulators [KG][GM][HD] (KG * HD = 8 * NT), maxima,
// sums and merge weights [KG][GM] (KG * GM <= NT), and per head the merged max and sum; the
// cluster form (CS > 0) adds its split's unnormalized rows [GM][HD] for the cluster merge.
#define ATD_SMEM_FLOATS(GM, CS, NT) (8 * (NT) * (GM) + 3 * (NT) + 2 * 8 + ((CS) > 0 ? (GM) * 256 : 0))

#include "attention_cluster.cuh"

// The query heads of block y: Gb heads from h0 of KV head kvh's G (all G with heads_per_block 0).
// Fewer heads per block shorten each thread's dependent chain (the G x U scores, exps and
// accumulators of an iteration, the merge) at the price of re-reading the K/V rows per block
// (from L2); the host asks for it at short contexts, where the chain is the kernel's time.
struct AtdHeads {
    int G, kvh, h0, Gb;
};
DEVI AtdHeads atd_heads(const AttnArgs& a) {
    int G = a.heads / a.kv_heads;
    int hpb = a.heads_per_block > 0 ? min(a.heads_per_block, G) : G;
    int nhb = (G + hpb - 1) / hpb;
    int hb = (int)blockIdx.y % nhb;
    return AtdHeads{G, (int)blockIdx.y / nhb, hb * hpb, min(hpb, G - hb * hpb)};
}

// CS = 0: split partials go to global memory for attn_combine; CS > 0: the launch has exactly CS
// splits, one cluster, merged by atc_merge (attention_cluster.cuh). NT threads per block.
template <typename T, int GM, int HD, int CS, int NT>
__device__ void attn_dec_hd(const AttnArgs& a, float* smem) {
    constexpr int TPK = HD / 8, KG = NT / TPK, U = AtdUnroll<T, GM>::U;
    AtdHeads hs = atd_heads(a);
    int s = blockIdx.x, kvh = hs.kvh, split = blockIdx.z;
    int tid = threadIdx.x;
    int G = hs.Gb;                                                    // this block's heads
    size_t hbase = (size_t)s * a.heads + (size_t)kvh * hs.G + hs.h0;  // its first (row, head)
    int grp = tid / TPK, dl = tid % TPK;

    // The sequence's length and block table are host uploads: read before pdl_wait(), with the
    // first keys' K/V rows staged behind them (attention_stage.cuh).
    int pos = (int)a.seq_lens[s] - 1;
    int k_lo = a.window > 0 ? max(0, pos - a.window + 1) : 0;
    int nkeys = pos - k_lo + 1;
    int nsplit = dec_splits(nkeys, a.splits, a.min_keys);
    // The whole block leaves: no barrier is skipped by part of it. A cluster's blocks all stay
    // (an empty split merges with weight 0) unless one split does everything, which every block
    // of the cluster sees alike (its sequence's length), so none then waits at a cluster barrier.
    if (CS == 0 ? split >= nsplit : nsplit == 1 && split > 0) return;
    int per = (nkeys + nsplit - 1) / nsplit;
    int k_begin = k_lo + split * per, k_end = min(pos + 1, k_begin + per);
    const T* kc = (const T*)a.k_cache;
    const T* vc = (const T*)a.v_cache;
    const uint32_t* bt = a.block_tables + (size_t)s * a.max_blocks;
    size_t kv_stride = (size_t)a.kv_heads * HD;
    size_t col = (size_t)kvh * HD + 8 * dl;
    // This thread's keys k_begin + grp + KG * i for i < staged sit in the staging area; the key
    // at `pos` is the previous kernel's output and is read after the wait.
    uint4* stage = atd_stage_smem();
    int staged = 0;
    if constexpr (sizeof(T) == 2) {
        for (int i = 0; i < a.stage_keys; i++) {
            int j = k_begin + grp + KG * i;
            if (j >= k_end || j >= pos) break;
            size_t slot = (size_t)bt[j / a.block_size] * a.block_size + (j % a.block_size);
            atd_cp16(stage + (2 * i) * NT + tid, kc + slot * kv_stride + col);
            atd_cp16(stage + (2 * i + 1) * NT + tid, vc + slot * kv_stride + col);
            staged = i + 1;
        }
    }
    pdl_wait();
    pdl_trigger();
    float q[GM][8], acc[GM][8], m[GM], l[GM];
#pragma unroll
    for (int g = 0; g < GM; g++) {
        if (g < G) {
            const float4* qp = (const float4*)(a.q + (hbase + g) * HD + 8 * dl);
            float4 x = qp[0], y = qp[1];
            q[g][0] = x.x; q[g][1] = x.y; q[g][2] = x.z; q[g][3] = x.w;
            q[g][4] = y.x; q[g][5] = y.y; q[g][6] = y.z; q[g][7] = y.w;
        }
#pragma unroll
        for (int i = 0; i < 8; i++) {
            q[g][i] = g < G ? q[g][i] * a.scale : 0.f;
            acc[g][i] = 0.f;
        }
        m[g] = -INFINITY;
        l[g] = 0.f;
    }
    if (staged > 0) atd_cp_wait();
    // Every thread runs the same trip count, so the group shuffles below see all lanes.
    for (int base = k_begin, i0 = 0; base < k_end; base += KG * U, i0 += U) {
        Kv8<T> kr[U], vr[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            int j = base + grp + KG * u;
            if (i0 + u < staged) {
                if constexpr (sizeof(T) == 2) {
                    kr[u].r = stage[(2 * (i0 + u)) * NT + tid];
                    vr[u].r = stage[(2 * (i0 + u) + 1) * NT + tid];
                }
            } else if (j < k_end) {
                size_t slot = (size_t)bt[j / a.block_size] * a.block_size + (j % a.block_size);
                kr[u].load(kc + slot * kv_stride + col);
                vr[u].load(vc + slot * kv_stride + col);
            } else {
                // A key past the split's end still goes through the FMAs below with weight 0,
                // and 0 * (stale register bits: Inf/NaN) is NaN: give it zero rows instead.
                kr[u].zero();
                vr[u].zero();
            }
        }
        float sc[U][GM];
#pragma unroll
        for (int u = 0; u < U; u++) {
            float kf[8];
            kr[u].get(kf);
#pragma unroll
            for (int g = 0; g < GM; g++) {
                float d = 0.f;
#pragma unroll
                for (int i = 0; i < 8; i++) d += q[g][i] * kf[i];
                sc[u][g] = d;
            }
        }
        // One butterfly over the group's lanes for all U x GM dot products at once.
#pragma unroll
        for (int o = TPK / 2; o > 0; o >>= 1) {
#pragma unroll
            for (int u = 0; u < U; u++) {
#pragma unroll
                for (int g = 0; g < GM; g++) sc[u][g] += __shfl_xor_sync(0xffffffffu, sc[u][g], o);
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            bool live = base + grp + KG * u < k_end;
#pragma unroll
            for (int g = 0; g < GM; g++) {
                float d = sc[u][g];
                if (a.softcap > 0.f) d = a.softcap * tanhf(d / a.softcap);
                sc[u][g] = live ? d : -INFINITY;
            }
        }
#pragma unroll
        for (int g = 0; g < GM; g++) {
            float mx = m[g];
#pragma unroll
            for (int u = 0; u < U; u++) mx = fmaxf(mx, sc[u][g]);
            if (mx == -INFINITY) continue;  // no key of this group yet
            float corr = m[g] == -INFINITY ? 0.f : __expf(m[g] - mx);
            l[g] *= corr;
#pragma unroll
            for (int i = 0; i < 8; i++) acc[g][i] *= corr;
#pragma unroll
            for (int u = 0; u < U; u++) {
                float p = sc[u][g] == -INFINITY ? 0.f : __expf(sc[u][g] - mx);
                float vf[8];
                vr[u].get(vf);
                l[g] += p;
#pragma unroll
                for (int i = 0; i < 8; i++) acc[g][i] += p * vf[i];
            }
            m[g] = mx;
        }
    }
    // Merge the KG groups.
    float* sacc = smem;                          // [KG][GM][HD]
    float* sm = sacc + 8 * NT * GM;              // [KG][GM]
    float* sl = sm + NT;                         // [KG][GM]
    float* sw = sl + NT;                         // [KG][GM]: exp(m - M) of each group and head
    float* sL = sw + NT;                         // [GM]: merged sum
    float* sM = sL + 8;                          // [GM]: merged max
    float* so = sM + 8;                          // [GM][HD]: unnormalized rows (CS > 0)
#pragma unroll
    for (int g = 0; g < GM; g++) {
        if (dl == 0) {
            sm[grp * GM + g] = m[g];
            sl[grp * GM + g] = l[g];
        }
        float4* dst = (float4*)(sacc + (grp * GM + g) * HD + 8 * dl);
        dst[0] = float4{acc[g][0], acc[g][1], acc[g][2], acc[g][3]};
        dst[1] = float4{acc[g][4], acc[g][5], acc[g][6], acc[g][7]};
    }
    bool gated = a.gate != nullptr && nsplit == 1;
    __syncthreads();
    if (tid < KG * GM) {
        int g = tid % GM;
        float M = -INFINITY;
#pragma unroll
        for (int k = 0; k < KG; k++) M = fmaxf(M, sm[k * GM + g]);
        float mk = sm[tid];
        sw[tid] = mk == -INFINITY ? 0.f : __expf(mk - M);
        if (tid < GM) {
            float L = 0.f;
#pragma unroll
            for (int k = 0; k < KG; k++) {
                float ms = sm[k * GM + g];
                L += sl[k * GM + g] * (ms == -INFINITY ? 0.f : __expf(ms - M));
            }
            sL[g] = L;
            sM[g] = M;
        }
    }
    __syncthreads();
    for (int idx = tid; idx < G * HD; idx += NT) {
        int g = idx / HD, d = idx % HD;
        float o = 0.f;
#pragma unroll
        for (int k = 0; k < KG; k++) o += sacc[(k * GM + g) * HD + d] * sw[k * GM + g];
        float L = sL[g];
        size_t rh = hbase + g;
        if (nsplit == 1) {
            float v = L > 0.f ? o / L : 0.f;
            if (gated) v = gate_mul(v, a.gate[rh * HD + d]);
            a.out[rh * HD + d] = v;
            // A warp covers 32 consecutive dims of one head (HD and G * HD multiples of 32).
            if (a.xq != nullptr) {
                size_t e = rh * HD + (d & ~31);
                quant32_warp(v, a.xq + e, a.xd + e / 32, a.xs + e / 32);
            }
        } else if (CS > 0) {
            so[g * HD + d] = o;
        } else {
            a.part_acc[(rh * a.splits + split) * HD + d] = o;
            if (d == 0) {
                a.part_ml[(rh * a.splits + split) * 2] = sM[g];
                a.part_ml[(rh * a.splits + split) * 2 + 1] = L;
            }
        }
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (CS > 0) {
        if (nsplit > 1) atc_merge<HD, NT>(a, so, sM, sL, G, hbase);
    }
#endif
}

// GM is the largest group the entry serves; smaller groups take a smaller instantiation so no
// registers or FMAs go to absent heads (Qwen3.5's group of 6 in the 8-head entry).
template <typename T, int GM, int CS, int NT>
__device__ void attn_dec_g(const AttnArgs& a, float* smem) {
    switch (a.head_dim) {
    case 64: attn_dec_hd<T, GM, 64, CS, NT>(a, smem); break;
    case 128: attn_dec_hd<T, GM, 128, CS, NT>(a, smem); break;
    case 256: attn_dec_hd<T, GM, 256, CS, NT>(a, smem); break;
    default: break;  // the host sends other head sizes to `attention`
    }
}

template <typename T, int GM, int CS, int NT>
__device__ void attn_decode(const AttnArgs& a) {
    __shared__ float4 smem4[(ATD_SMEM_FLOATS(GM, CS, NT) + 3) / 4];
    float* smem = (float*)smem4;
    int gb = atd_heads(a).Gb;  // block-uniform
    if (gb == 1) {
        attn_dec_g<T, 1, CS, NT>(a, smem);
    } else if (gb == 2) {
        attn_dec_g<T, 2, CS, NT>(a, smem);
    } else if (GM > 4 && gb <= 6) {
        attn_dec_g<T, (GM > 4 ? 6 : GM), CS, NT>(a, smem);
    } else {
        attn_dec_g<T, GM, CS, NT>(a, smem);
    }
}

#define DEF_ATTN_DECODE(name, T)                                                                   \
    extern "C" __global__ void __launch_bounds__(ATD_THREADS) attn_dec_##name##_g4(AttnArgs a) {  \
        attn_decode<T, 4, 0, ATD_THREADS>(a);                                                      \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(ATD_THREADS) attn_dec_##name##_g8(AttnArgs a) {  \
        attn_decode<T, 8, 0, ATD_THREADS>(a);                                                      \
    }
DEF_ATTN_DECODE(f32, float)
DEF_ATTN_DECODE(f16, __half)
DEF_ATTN_DECODE(bf16, __nv_bfloat16)

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// The cluster forms (sm_90 cubin only; groups up to 4, as the host uses them): grid z =
// ATD_CLUSTER splits, one cluster. (Blocks of 256 threads, twice the keys per key-loop iteration,
// made the 8B decode 3-4% slower in session 16, clusters of 16 blocks 6-7%; both removed, the
// second is in git history at 54446a1.)
#define DEF_ATTN_DECODE_CLUSTER(name, T)                                                           \
    extern "C" __global__ void __cluster_dims__(1, 1, ATD_CLUSTER) __launch_bounds__(ATD_THREADS) \
        attn_dec_c8_##name##_g4(AttnArgs a) {                                                      \
        attn_decode<T, 4, ATD_CLUSTER, ATD_THREADS>(a);                                            \
    }
DEF_ATTN_DECODE_CLUSTER(f32, float)
DEF_ATTN_DECODE_CLUSTER(f16, __half)
DEF_ATTN_DECODE_CLUSTER(bf16, __nv_bfloat16)
#endif
