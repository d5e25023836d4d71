// Token sampling on the device: one block of 1024 threads per row of logits, so a decode step
// reads back only the chosen ids and their log-probabilities instead of the whole logits matrix.
//
// Per row: the log-normalizer of the raw logits (for the reported log-probability), then either
// the greedy pick (temperature 0, or no params at all) or a draw from softmax(logits / T) after
// top-k, top-p and min-p, with the same rules as the host sampler
// (crates/pocket-models/src/sampling/sampler.rs): top-k keeps the k largest scaled logits, top-p
// the smallest most-probable set whose mass reaches p (over the top-k set), min-p the candidates
// whose probability is at least min_p times the largest. The cut-offs are found by bisection on
// the order-preserving integer image of the floats (exact thresholds, 32 passes over the row each,
// no sort); candidates tied at a cut-off are all kept. The draw inverts the CDF in index order
// with a fixed summation order, so a (seed, counter) pair always gives the same token.
//
// The uniform comes from Philox4x32-10 keyed by the request seed, counter = tokens the sequence
// has drawn so far: reproducible and independent of batch composition.
#include "greedy.cuh"

#define SAMPLE_THREADS 1024

// Order-preserving map of a float to an unsigned integer (larger float, larger key).
DEVI uint32_t fkey(float f) {
    uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Block-wide sum / max with a fixed order (deterministic). `sh` holds 32 floats; the leading
// barrier keeps a previous call's readers from seeing this call's writes.
DEVI float block_sum(float v, float* sh) {
    v = warp_sum(v);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float t = 0.f;
    for (int w = 0; w < nw; w++) t += sh[w];
    return t;
}
DEVI float block_max(float v, float* sh) {
    v = warp_max(v);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float t = -INFINITY;
    for (int w = 0; w < nw; w++) t = fmaxf(t, sh[w]);
    return t;
}

// Philox4x32-10 (Salmon et al. 2011) on counter c with key (k0, k1).
DEVI void philox(uint32_t c[4], uint32_t k0, uint32_t k1) {
#pragma unroll
    for (int r = 0; r < 10; r++) {
        uint32_t hi0 = __umulhi(0xD2511F53u, c[0]), lo0 = 0xD2511F53u * c[0];
        uint32_t hi1 = __umulhi(0xCD9E8D57u, c[2]), lo1 = 0xCD9E8D57u * c[2];
        uint32_t n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0;
        c[1] = lo1;
        c[2] = n2;
        c[3] = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
}

// Calls f(l[i], i) for this thread's i = tid, tid + nt, ... < n, in that order, with ROW_U loads
// in flight per thread: the one-block passes below read a whole row from L2 each, and with one
// load at a time they waited out its latency on every element (~35 us per pass over 128K
// logits on the H200, by Nsight's one-block greedy call). Same elements, same order per thread
// as the plain strided loop, so every sum and pick is unchanged.
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

// params: [rows, 4] f32 (temperature, top_k, top_p, min_p), or null for greedy rows.
// rng: [rows, 4] u32 (seed lo, seed hi, counter lo, counter hi). Row blockIdx.y.
// `multi` 1 (greedy only, params null): grid (slices, rows) of GREEDY_THREADS, greedy.cuh's
// multi-block pick. 2 (params given): grid (slices, rows) of SAMPLE_THREADS; a greedy row
// (temperature <= 0) takes the multi-block pick over all its blocks, any other row is drawn by
// its first block alone (the rest exit). A one-block pass over a 248K-entry row took ~110 us on
// the H200 (Nsight, docs/performance/logs/2026-11-30-s7-profile/), 1.4% of a 27B decode token and
// ~4% of an 8B one, while the engine's graphs always pass params. 0: one block per row, grid
// (1, rows) (POCKET_SMALL_KERNELS=old).
extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS)
    sample_rows(const float* __restrict__ logits, const float* __restrict__ params, const uint32_t* __restrict__ rng,
                uint32_t* __restrict__ ids, float* __restrict__ logprobs, int vocab, int multi) {
    if (multi == 1) {
        greedy_rows<true>(logits, ids, logprobs, vocab);
        return;
    }
    if (multi == 2) {
        // The host writes params before the step; no kernel does, so they may be read before
        // pdl_wait (greedy_rows waits inside).
        if (!(params[blockIdx.y * 4] > 0.f)) {
            greedy_rows<true>(logits, ids, logprobs, vocab);
            return;
        }
        if (blockIdx.x != 0) return;
    }
    __shared__ float sh[32];
    __shared__ float chunk_mass[SAMPLE_THREADS];
    __shared__ int picked;
    const int row = blockIdx.y, tid = threadIdx.x;
    const float* l = logits + (size_t)row * vocab;
    pdl_wait();
    pdl_trigger();

    // Raw maximum (NaN never counts), its first index, and the log-normalizer.
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    row_each(l, vocab, [&](float v, int i) {
        if (v > bv) {  // strict: the first index of a tie within this thread's stride
            bv = v;
            bi = i;
        }
    });
    float m = block_max(bv, sh);
    // First index holding the maximum (the host's strict `>` scan keeps the first).
    float cand = (bv == m && m > -INFINITY) ? (float)bi : 3.0e38f;
    float first = -block_max(-cand, sh);
    float se = 0.f;
    if (m > -INFINITY)
        row_each(l, vocab, [&](float v, int) {
            if (!isnan(v)) se += expf(v - m);
        });
    float log_z = m + logf(block_sum(se, sh));

    float temp = params ? params[row * 4 + 0] : 0.f;
    int id;
    if (!(temp > 0.f) || m == -INFINITY) {
        id = first < 3.0e38f ? (int)first : 0;
    } else {
        const float inv_t = 1.f / temp;
        const int top_k = (int)params[row * 4 + 1];
        const float top_p = params[row * 4 + 2], min_p = params[row * 4 + 3];
        // Scaled maximum over finite logits (m is finite and non-NaN here).
        float fm = -INFINITY;
        row_each(l, vocab, [&](float v, int) {
            if (isfinite(v)) fm = fmaxf(fm, v * inv_t);
        });
        const float mz = block_max(fm, sh);
        // Top-k: the largest key t with at least k candidates at or above it.
        uint32_t tk = 0;
        if (top_k > 0) {
            uint32_t lo = 0, hi = 0xffffffffu;
            while (lo < hi) {
                uint32_t mid = lo + (uint32_t)(((uint64_t)hi - lo + 1) / 2);
                float c = 0.f;
                row_each(l, vocab, [&](float v, int) {
                    if (isfinite(v) && fkey(v * inv_t) >= mid) c += 1.f;
                });
                if (block_sum(c, sh) >= (float)top_k) lo = mid; else hi = mid - 1;
            }
            tk = lo;
        }
#define KEPT_K(v) (isfinite(v) && fkey((v) * inv_t) >= tk)
        // Weights relative to the scaled maximum; the top-k mass.
        float zs = 0.f;
        row_each(l, vocab, [&](float v, int) {
            if (KEPT_K(v)) zs += expf(v * inv_t - mz);
        });
        const float zk = block_sum(zs, sh);
        // Top-p: the largest weight w* whose candidates at or above it carry >= top_p of the mass.
        float wmin = 0.f;
        if (top_p < 1.f) {
            const float target = top_p * zk;
            uint32_t lo = 0, hi = 0x7f800000u;  // positive floats: bits are ordered
            while (lo < hi) {
                uint32_t mid = lo + (hi - lo + 1) / 2;
                float w_mid = __uint_as_float(mid), s = 0.f;
                row_each(l, vocab, [&](float v, int) {
                    if (KEPT_K(v)) {
                        float w = expf(v * inv_t - mz);
                        if (w >= w_mid) s += w;
                    }
                });
                if (block_sum(s, sh) >= target) lo = mid; else hi = mid - 1;
            }
            wmin = __uint_as_float(lo);
        }
        wmin = fmaxf(wmin, min_p);  // min-p: w = p / p_max
        // Inverse CDF in index order: thread t owns a contiguous chunk of the row.
        const int chunk = (vocab + blockDim.x - 1) / blockDim.x;
        const int b = tid * chunk, e = min(vocab, b + chunk);
        float cm = 0.f;
        for (int i = b; i < e; i++) {
            float v = l[i];
            if (KEPT_K(v)) {
                float w = expf(v * inv_t - mz);
                if (w >= wmin) cm += w;
            }
        }
        chunk_mass[tid] = cm;
        __syncthreads();
        if (tid == 0) {
            uint32_t c[4] = {rng[row * 4 + 2], rng[row * 4 + 3], 0u, 0u};
            philox(c, rng[row * 4 + 0], rng[row * 4 + 1]);
            double u = (double)((((uint64_t)c[0] << 32) | c[1]) >> 11) * (1.0 / 9007199254740992.0);
            float total = 0.f;
            int lastj = -1;
            for (int j = 0; j < (int)blockDim.x; j++) {
                total += chunk_mass[j];
                if (chunk_mass[j] > 0.f) lastj = j;
            }
            float target = (float)(u * (double)total);
            int pick = -1;
            float cum = 0.f;
            for (int j = 0; j < (int)blockDim.x && pick < 0; j++) {
                if (chunk_mass[j] > 0.f && cum + chunk_mass[j] > target) {
                    int last = -1;
                    for (int i = j * chunk; i < min(vocab, (j + 1) * chunk); i++) {
                        float v = l[i];
                        if (KEPT_K(v)) {
                            float w = expf(v * inv_t - mz);
                            if (w >= wmin) {
                                last = i;
                                cum += w;
                                if (cum > target) break;
                            }
                        }
                    }
                    pick = last;
                } else {
                    cum += chunk_mass[j];
                }
            }
            if (pick < 0 && lastj >= 0) {  // rounding left the target past the last chunk
                for (int i = lastj * chunk; i < min(vocab, (lastj + 1) * chunk); i++) {
                    float v = l[i];
                    if (KEPT_K(v) && expf(v * inv_t - mz) >= wmin) pick = i;
                }
            }
            picked = pick < 0 ? (first < 3.0e38f ? (int)first : 0) : pick;
        }
#undef KEPT_K
        __syncthreads();
        id = picked;
    }
    if (tid == 0) {
        ids[row] = (uint32_t)id;
        logprobs[row] = l[id] - log_z;
    }
}
