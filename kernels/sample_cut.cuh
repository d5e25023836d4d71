// The cut-offs and the draw of the device sampler (sample.cu), over one row of logits held by one
// block: top-k and top-p thresholds found by bisection over candidates, then an inverse-CDF draw
// in index order. The candidates are either the whole row (read from L2 on every pass) or a
// candidate set compacted into shared memory: the tokens whose weight w = exp(s - max s) is at
// least a power-of-two threshold (s = logit / temperature). A set that holds the k largest (top-k)
// or at least top_p of the mass (top-p alone) contains every token the cut-offs keep, so the
// bisections run over a few thousand entries in shared memory instead of ~60 passes over the row.
// A top-k row whose k-th largest lies below every threshold gets its cut-off by radix selection
// (radix_topk_key) and the candidates at or above it as its set.
#pragma once
#include "greedy.cuh"

// Candidate set: at most CAND_MAX entries (12 bytes each in shared memory), and the CAND_SETS
// thresholds counted in one pass, largest first: 2^-3, 2^-7, 2^-11, 2^-15.
#define CAND_MAX 3072
#define CAND_SETS 4
DEVI float cand_threshold(int b) { return __uint_as_float((uint32_t)(127 - 3 - 4 * b) << 23); }

// A compacted candidate set, in index order: order-preserving key of s, weight, token.
struct CandSet {
    uint32_t key[CAND_MAX];
    float w[CAND_MAX];
    int tok[CAND_MAX];
};

// Order-preserving map of a float to an unsigned integer (larger float, larger key).
DEVI uint32_t fkey(float f) {
    uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Block-wide reduction with a fixed order (deterministic): `warp_total` is v reduced over this
// warp, `op` merges the warps' totals in warp order from `init`. `sh` holds 32 floats; the
// leading barrier keeps a previous call's readers from seeing this call's writes.
template <class Op>
DEVI float block_reduce(float warp_total, float* sh, float init, Op op) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) sh[warp] = warp_total;
    __syncthreads();
    float t = init;
    for (int w = 0; w < nw; w++) t = op(t, sh[w]);
    return t;
}
DEVI float block_sum(float v, float* sh) {
    return block_reduce(warp_sum(v), sh, 0.f, [](float a, float b) { return a + b; });
}
DEVI float block_max(float v, float* sh) {
    return block_reduce(warp_max(v), sh, -INFINITY, [](float a, float b) { return fmaxf(a, b); });
}

// N sums at once, same order as block_sum; `sh` holds N * 32 floats, and warp w's own sum of
// value k stays in sh[k * 32 + w] until the next call (the compaction's per-warp offsets).
template <int N>
DEVI void block_sums(float (&v)[N], float* sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
    for (int k = 0; k < N; k++) v[k] = warp_sum(v[k]);
    __syncthreads();
    if (lane == 0)
        for (int k = 0; k < N; k++) sh[k * 32 + warp] = v[k];
    __syncthreads();
    for (int k = 0; k < N; k++) {
        float t = 0.f;
        for (int w = 0; w < nw; w++) t += sh[k * 32 + w];
        v[k] = t;
    }
}

// Calls f(l[i], i) for this thread's i = tid, tid + nt, ... < n, in that order, with ROW_U loads
// in flight per thread: the one-block passes read a whole row from L2 each, and with one load at
// a time they waited out its latency on every element (~35 us per pass over 128K logits on the
// H200, by Nsight's one-block greedy call). Same elements, same order per thread as the plain
// strided loop.
#define ROW_U 8
template <class F>
DEVI void row_each(const float* __restrict__ l, int n, F f) {
    const int tid = threadIdx.x, nt = blockDim.x;
    int i = tid;
    for (; i + (ROW_U - 1) * nt < n; i += ROW_U * nt) {
        float v[ROW_U];
#pragma unroll
        for (int u = 0; u < ROW_U; u++) v[u] = l[i + u * nt];
#pragma unroll
        for (int u = 0; u < ROW_U; u++) f(v[u], i + u * nt);
    }
    for (; i < n; i += nt) f(l[i], i);
}

// Calls f(v, i, ok) over warp w's segment of a row of n (the row cut into one segment of whole
// 32-element groups per warp), a group per call with lane j on element base + j, groups in index
// order, U groups' loads in flight. Every lane makes every call (ok false past the row's end,
// v then 0), so f may vote across the warp: the compaction writes in index order this way.
template <int U, class F>
DEVI void seg_each(const float* __restrict__ l, int n, F f) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int seg = (n + 32 * nw - 1) / (32 * nw) * 32;
    const int e = min(n, (warp + 1) * seg);
    int i = warp * seg;
    for (; i + 32 * U <= e; i += 32 * U) {
        float v[U];
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = l[i + 32 * u + lane];
#pragma unroll
        for (int u = 0; u < U; u++) f(v[u], i + 32 * u + lane, true);
    }
    for (; i < e; i += 32) {
        const int j = i + lane;
        const bool ok = j < e;
        f(ok ? l[j] : 0.f, j, ok);
    }
}

// Top-k over the whole row by radix selection: the largest key t with at least k candidates at
// or above it (what topk_key finds by bisection in ~32 passes over the row), in 4 passes of 8
// bits. Each pass counts, in 256 bins of the next 8 bits, the candidates whose keys share the
// digits found so far; the lanes of a warp with the same bin add once (match_any), so a pass in
// which most keys share a bin (they do: a row's scaled logits have few distinct top bytes) does
// not queue on one shared-memory address. Integer counts: exact and deterministic. key_of(v,
// key) says whether logit v is a candidate and gives its key; at least k candidates exist.
// hist: 256 shared counters; sel: 2 shared words.
template <class K>
DEVI uint32_t radix_topk_key(const float* __restrict__ l, int n, K key_of, int k, uint32_t* hist,
                             uint32_t* sel) {
    const int tid = threadIdx.x, nt = blockDim.x, lane = tid & 31;
    uint32_t prefix = 0, mask = 0;
    uint32_t rank = (uint32_t)k;  // the wanted key's rank among the candidates under `prefix`
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = tid; b < 256; b += nt) hist[b] = 0u;
        __syncthreads();
        seg_each<ROW_U>(l, n, [&](float v, int, bool ok) {
            uint32_t key = 0;
            const bool in = ok && key_of(v, key) && (key & mask) == prefix;
            const uint32_t bin = in ? (key >> shift) & 255u : 256u;
            const unsigned same = __match_any_sync(0xffffffffu, bin);
            if (in && (same & ((1u << lane) - 1u)) == 0u) atomicAdd(&hist[bin], (unsigned)__popc(same));
        });
        __syncthreads();
        if (tid == 0) {
            uint32_t above = 0;
            int b = 255;
            for (; b > 0 && above + hist[b] < rank; b--) above += hist[b];
            sel[0] = (uint32_t)b;
            sel[1] = rank - above;
        }
        __syncthreads();
        prefix |= sel[0] << shift;
        mask |= 255u << shift;
        rank = sel[1];
    }
    return prefix;
}

// The bisections below visit candidates through `cands(f)`, which calls f(key, w) for each
// candidate of the calling thread (a finite logit: key of s, weight); w is computed only where f
// reads it. `total(x)` sums x over the threads taking part (a block, or one warp for a set in
// shared memory: no block barrier per step), the same on each.

// Top-k: the largest key t with at least k candidates at or above it; no key exceeds `hi`.
template <class C, class R>
DEVI uint32_t topk_key(C cands, R total, int k, uint32_t hi) {
    uint32_t lo = 0;
    while (lo < hi) {
        const uint32_t mid = lo + (uint32_t)(((uint64_t)hi - lo + 1) / 2);
        float c = 0.f;
        cands([&](uint32_t key, float) {
            if (key >= mid) c += 1.f;
        });
        if (total(c) >= (float)k) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// The mass of the candidates at or above key tk.
template <class C, class R>
DEVI float kept_mass(C cands, R total, uint32_t tk) {
    float z = 0.f;
    cands([&](uint32_t key, float w) {
        if (key >= tk) z += w;
    });
    return total(z);
}

// Top-p: the largest weight w* whose candidates (at or above key tk) at or above it carry at least
// `target`; weights lie in [0, 1] (the largest s has weight 1), and positive floats' bits are ordered.
template <class C, class R>
DEVI float topp_weight(C cands, R total, uint32_t tk, float target) {
    uint32_t lo = 0, hi = 0x3f800000u;
    while (lo < hi) {
        const uint32_t mid = lo + (hi - lo + 1) / 2;
        const float w_mid = __uint_as_float(mid);
        float s = 0.f;
        cands([&](uint32_t key, float w) {
            if (key >= tk && w >= w_mid) s += w;
        });
        if (total(s) >= target) lo = mid; else hi = mid - 1;
    }
    return __uint_as_float(lo);
}

// The cut-offs (top-k key, smallest kept weight before min-p) over `cands`, summed by `total`.
// tk_known: the top-k key is `tk` already (the radix selection's, over the whole row: the
// bisection over a set holding every candidate at or above it would find the same key).
template <class C, class R>
DEVI void cut_offs(C cands, R total, int kk, float top_p, float zall, uint32_t key_max, uint32_t& tk,
                   float& wmin, bool tk_known = false) {
    if (!tk_known) tk = kk > 0 ? topk_key(cands, total, kk, key_max) : 0u;
    wmin = 0.f;
    if (top_p < 1.f) {
        const float zk = kk > 0 ? kept_mass(cands, total, tk) : zall;
        wmin = topp_weight(cands, total, tk, top_p * zk);
    }
}

// Inverse CDF in index order over items 0..n: weight(i) is item i's kept weight (0 when cut),
// token(i) its token; u in [0, 1). Thread t owns a contiguous chunk of items; warp 0 sums the
// chunk masses in groups of 32, and thread 0 walks groups, chunks, then items. Returns the token
// (every thread), or -1 when no item has weight. `chunk_mass` holds blockDim.x floats, `gsum` 32.
template <class W, class T>
DEVI int draw_index(int n, W weight, T token, double u, float* chunk_mass, float* gsum, float* sh,
                    int* picked) {
    const int tid = threadIdx.x, nt = blockDim.x, per = nt / 32;
    const int chunk = (n + nt - 1) / nt;
    const int b = min(n, tid * chunk), e = min(n, b + chunk);
    float cm = 0.f;
    for (int i = b; i < e; i++) cm += weight(i);
    chunk_mass[tid] = cm;
    // The last chunk with mass: where rounding that leaves the target past the end draws from.
    const int lastj = (int)block_max(cm > 0.f ? (float)tid : -1.f, sh);  // its barriers publish chunk_mass
    if (tid < 32) {
        float t = 0.f;
        for (int j = tid * per; j < (tid + 1) * per; j++) t += chunk_mass[j];
        gsum[tid] = t;
    }
    __syncthreads();
    if (tid == 0) {
        float total = 0.f;
        for (int g = 0; g < 32; g++) total += gsum[g];
        const float target = (float)(u * (double)total);
        float cum = 0.f;
        int pick = -1;
        for (int g = 0; g < 32 && pick < 0; g++) {
            if (!(gsum[g] > 0.f && cum + gsum[g] > target)) {
                cum += gsum[g];
                continue;
            }
            for (int j = g * per; j < (g + 1) * per && pick < 0; j++) {
                if (!(chunk_mass[j] > 0.f && cum + chunk_mass[j] > target)) {
                    cum += chunk_mass[j];
                    continue;
                }
                for (int i = j * chunk; i < min(n, (j + 1) * chunk); i++) {
                    const float w = weight(i);
                    if (w > 0.f) {
                        pick = i;
                        cum += w;
                        if (cum > target) break;
                    }
                }
            }
        }
        if (pick < 0 && lastj >= 0)
            for (int i = lastj * chunk; i < min(n, (lastj + 1) * chunk); i++)
                if (weight(i) > 0.f) pick = i;
        *picked = pick < 0 ? -1 : token(pick);
    }
    __syncthreads();
    return *picked;
}
