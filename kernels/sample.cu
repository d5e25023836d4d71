// Token sampling on the device: one block of 1024 threads per row of logits, so a decode step
// reads back only the chosen ids and their log-probabilities instead of the whole logits matrix.
//
// Per row: the log-normalizer of the raw logits (for the reported log-probability), then either
// the greedy pick (temperature 0, or no params at all) or a draw from softmax(logits / T) after
// top-k, top-p and min-p, with the same rules as the host sampler
// (crates/pocket-models/src/sampling/sampler.rs): top-k keeps the k largest scaled logits, top-p
// the smallest most-probable set whose mass reaches p (over the top-k set), min-p the candidates
// whose probability is at least min_p times the largest. The cut-offs are found by bisection on
// the order-preserving integer image of the floats (exact thresholds, no sort); candidates tied
// at a cut-off are all kept. The draw inverts the CDF in index order with a fixed summation
// order, so a (seed, counter) pair always gives the same token.
//
// Passes over a sampled row: one for the maximum, its index and the log-normalizer (online, as
// the greedy pick); with top-k or top-p, one counting the candidate sets (sample_cut.cuh) and one
// compacting the smallest that holds the cut-offs into shared memory, where the bisections run;
// one for the draw's chunk masses. A top-k row that no weight set holds finds its k-th largest by
// radix selection (4 passes) and takes the tokens at or above it as its set (2 passes more). Only
// a row whose cut-offs still fit no set of <= CAND_MAX tokens (top-p alone on a nearly flat
// distribution, k > CAND_MAX, or ties) bisects over the whole row, ~30 passes per cut-off.
//
// The uniform comes from Philox4x32-10 keyed by the request seed, counter = tokens the sequence
// has drawn so far: reproducible and independent of batch composition.
#include "sample_cut.cuh"

#define SAMPLE_THREADS 1024

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

// Which candidate set a sampled row used (-1: the whole row); the host emulation records it.
#ifndef SAMPLE_NOTE_SET
#define SAMPLE_NOTE_SET(row, set)
#endif
// Whether a row may use a candidate set; the host emulation compares against the whole-row path.
#ifndef SAMPLE_SETS_ON
#define SAMPLE_SETS_ON true
#endif

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
    // Stats of the candidate pass: finite count and mass, then count and mass per set.
    constexpr int NST = 2 + 2 * CAND_SETS;
    __shared__ float sh[NST * 32];
    __shared__ int shi[32];
    __shared__ float chunk_mass[SAMPLE_THREADS];
    __shared__ float gsum[32];
    __shared__ float bcast[2];
    __shared__ int first_sh, picked;
    __shared__ uint32_t cut_sh[2];
    __shared__ CandSet cs;
    __shared__ uint32_t radix_hist[256];
    const int row = blockIdx.y, tid = threadIdx.x;
    const float* l = logits + (size_t)row * vocab;
    pdl_wait();
    pdl_trigger();

    // Maximum (NaN never counts), its first index and the log-normalizer in one pass, merged as
    // the greedy pick merges them; and the largest finite logit.
    float m = -INFINITY, se = 0.f, vf = -INFINITY;
    int bi = 0x7fffffff;
    row_each(l, vocab, [&](float v, int i) {
        greedy_add<true>(m, se, bi, v, i);
        if (isfinite(v)) vf = fmaxf(vf, v);
    });
    greedy_block<true>(m, se, bi, sh, sh + 32, shi);
    if (tid == 0) {
        bcast[0] = m;
        bcast[1] = se;
        first_sh = (bi == 0x7fffffff || m == -INFINITY) ? 0 : bi;
    }
    vf = block_max(vf, sh + 64);  // its barriers publish thread 0's values
    m = bcast[0];
    const float log_z = m + logf(bcast[1]);
    const int first = first_sh;

    const float temp = params ? params[row * 4 + 0] : 0.f;
    int id = first;
    if (temp > 0.f && m > -INFINITY) {
        const float inv_t = 1.f / temp;
        const int top_k = (int)params[row * 4 + 1];
        const float top_p = params[row * 4 + 2], min_p = params[row * 4 + 3];
        // s = v / T rounded once (no contraction), so every pass computes the same keys and
        // weights; the largest s is the largest finite logit's (scaling is monotone).
        const float mz = __fmul_rn(vf, inv_t);
        const uint32_t key_max = fkey(mz);
        auto scaled = [&](float v) { return __fmul_rn(v, inv_t); };
        auto weight = [&](float s) { return expf(s - mz); };

        float st[NST];
#pragma unroll
        for (int k = 0; k < NST; k++) st[k] = 0.f;
        if (top_k > 0 || top_p < 1.f) {
            seg_each<ROW_U>(l, vocab, [&](float v, int, bool ok) {
                if (ok && isfinite(v)) {
                    const float w = weight(scaled(v));
                    st[0] += 1.f;
                    st[1] += w;
#pragma unroll
                    for (int b = 0; b < CAND_SETS; b++)
                        if (w >= cand_threshold(b)) {
                            st[2 + b] += 1.f;
                            st[2 + CAND_SETS + b] += w;
                        }
                }
            });
            block_sums(st, sh);
        }
        // Top-k at or past the finite count keeps every finite logit.
        const int kk = (top_k > 0 && top_k < (int)st[0]) ? top_k : 0;
        const bool cut = kk > 0 || top_p < 1.f;
        // The smallest set that holds the cut-offs: the k largest, or (top-p alone) at least
        // top_p of the mass, with a margin for the other summation order of the bisection.
        // (Unrolled with constant indices: st stays in registers.)
        int set = -1, nc = 0;
#pragma unroll
        for (int b = CAND_SETS - 1; b >= 0; b--) {
            const float c = st[2 + b], mass = st[2 + CAND_SETS + b];
            const bool holds = kk > 0 ? c >= (float)kk : mass >= top_p * st[1] * (1.f + 1e-5f);
            if (cut && SAMPLE_SETS_ON && c >= 1.f && c <= (float)CAND_MAX && holds) {
                set = b;
                nc = (int)c;
            }
        }
        // Top-k whose k largest no weight set holds (the k-th lies below 2^-15 of the top, or a
        // set overflows): the k-th largest key by radix selection (4 passes), then, where they
        // fit, the candidates at or above it are the set (set CAND_SETS; ties may add to k).
        bool by_key = false;
        uint32_t key_floor = 0;
        if (set < 0 && kk > 0 && kk <= CAND_MAX && SAMPLE_SETS_ON) {
            auto key_of = [&](float v, uint32_t& key) {
                if (!isfinite(v)) return false;
                key = fkey(scaled(v));
                return true;
            };
            const uint32_t tk_row = radix_topk_key(l, vocab, key_of, kk, radix_hist, cut_sh);
            float at_or_above[1] = {0.f};
            seg_each<ROW_U>(l, vocab, [&](float v, int, bool ok) {
                if (ok && isfinite(v) && fkey(scaled(v)) >= tk_row) at_or_above[0] += 1.f;
            });
            block_sums(at_or_above, sh);
            if (at_or_above[0] <= (float)CAND_MAX) {
                by_key = true;
                key_floor = tk_row;
                set = CAND_SETS;
                nc = (int)at_or_above[0];
            }
        }
        SAMPLE_NOTE_SET(row, cut ? set : -2);
        if (set >= 0) {
            // Compaction in index order: warp w starts after the earlier warps' counts, which
            // block_sums left in sh (row 0 for the set by key, 2 + set for a weight set).
            const int lane = tid & 31, warp = tid >> 5;
            const float thr = by_key ? 0.f : cand_threshold(set);
            const int counts = by_key ? 0 : 2 + set;
            int base = 0;
            for (int w = 0; w < warp; w++) base += (int)sh[counts * 32 + w];
            seg_each<ROW_U>(l, vocab, [&](float v, int i, bool ok) {
                const float s = scaled(v);
                const bool in = ok && isfinite(v) && (by_key ? fkey(s) >= key_floor : weight(s) >= thr);
                const unsigned bal = __ballot_sync(0xffffffffu, in);
                const int p = base + __popc(bal & ((1u << lane) - 1u));
                if (in && p < CAND_MAX) {
                    cs.key[p] = fkey(s);
                    cs.w[p] = weight(s);
                    cs.tok[p] = i;
                }
                base += __popc(bal);
            });
            __syncthreads();
        }
        // The set by key holds exactly the tokens at or above the radix selection's top-k key.
        uint32_t tk = by_key ? key_floor : 0u;
        float wmin = 0.f;
        if (set >= 0) {
            // Warp 0 bisects the set alone: each step is a warp sum, not two block barriers
            // (~60 steps for top-k and top-p together; top-p alone for the set by key).
            if (tid < 32) {
                auto set_cands = [&](auto f) {
                    for (int j = tid; j < nc; j += 32) f(cs.key[j], cs.w[j]);
                };
                cut_offs(set_cands, [](float x) { return warp_sum(x); }, kk, top_p, st[1], key_max, tk,
                         wmin, by_key);
                if (tid == 0) {
                    cut_sh[0] = tk;
                    cut_sh[1] = __float_as_uint(wmin);
                }
            }
            __syncthreads();
            tk = cut_sh[0];
            wmin = __uint_as_float(cut_sh[1]);
        } else if (cut) {
            auto row_cands = [&](auto f) {
                row_each(l, vocab, [&](float v, int) {
                    if (isfinite(v)) {
                        const float s = scaled(v);
                        f(fkey(s), weight(s));
                    }
                });
            };
            cut_offs(row_cands, [&](float x) { return block_sum(x, sh); }, kk, top_p, st[1], key_max, tk,
                     wmin);
        }
        wmin = fmaxf(wmin, min_p);  // min-p: w = p / p_max

        uint32_t c[4] = {rng[row * 4 + 2], rng[row * 4 + 3], 0u, 0u};
        philox(c, rng[row * 4 + 0], rng[row * 4 + 1]);
        const double u = (double)((((uint64_t)c[0] << 32) | c[1]) >> 11) * (1.0 / 9007199254740992.0);
        int tok;
        if (set >= 0) {
            tok = draw_index(
                nc, [&](int j) { return (cs.key[j] >= tk && cs.w[j] >= wmin) ? cs.w[j] : 0.f; },
                [&](int j) { return cs.tok[j]; }, u, chunk_mass, gsum, sh, &picked);
        } else {
            tok = draw_index(
                vocab,
                [&](int i) {
                    const float v = l[i];
                    if (!isfinite(v)) return 0.f;
                    const float s = scaled(v), w = weight(s);
                    return (fkey(s) >= tk && w >= wmin) ? w : 0.f;
                },
                [](int i) { return i; }, u, chunk_mass, gsum, sh, &picked);
        }
        id = tok < 0 ? first : tok;
    }
    if (tid == 0) {
        ids[row] = (uint32_t)id;
        logprobs[row] = l[id] - log_z;
    }
}
