// Gated DeltaNet (Qwen3.5's linear-attention layers): the short causal conv with its state window,
// the delta-rule gates, the gated delta rule itself, the gated RMSNorm, the half split and the
// sigmoid gate. crates/pocket-kernels/src/recurrent.rs has the varlen / state-slot contract; the
// host validates the metadata from its u32 shadows before launching, so kernels trust it.
#include "gate_math.cuh"

// ---- causal conv1d + SiLU -----------------------------------------------------------------------
// One thread per (sequence, channel), grid (ceil(C / blockDim), num_seqs). The thread keeps the
// K-1 previous inputs of its channel in registers and walks the sequence's rows in order, so the
// state window is read once and written once per call; consecutive threads touch consecutive
// channels (coalesced). K <= CONV_MAX_K (the host checks; Qwen3.5 uses 4).
#define CONV_MAX_K 8
extern "C" __global__ void causal_conv1d_silu(const float* __restrict__ x, const float* __restrict__ w,
                                              float* __restrict__ conv_state, float* __restrict__ out,
                                              const uint32_t* __restrict__ query_start,
                                              const uint32_t* __restrict__ state_slots,
                                              const uint32_t* __restrict__ has_state, int C, int K) {
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    int s = blockIdx.y;
    if (ch >= C) return;
    int win = K - 1;
    float wr[CONV_MAX_K], hist[CONV_MAX_K];
#pragma unroll
    for (int j = 0; j < CONV_MAX_K; j++) {
        wr[j] = j < K ? w[(size_t)ch * K + j] : 0.f;
        hist[j] = 0.f;
    }
    // The conv weight is a weight (may be read before the wait); x and the state are not.
    pdl_wait();
    pdl_trigger();
    float* st = conv_state + (size_t)state_slots[s] * win * C;
    if (has_state[s]) {
#pragma unroll
        for (int j = 0; j < CONV_MAX_K - 1; j++)
            if (j < win) hist[j] = st[(size_t)j * C + ch];
    }
    uint32_t r0 = query_start[s], r1 = query_start[s + 1];
    for (uint32_t r = r0; r < r1; r++) {
        float xv = x[(size_t)r * C + ch];
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < CONV_MAX_K; j++)
            if (j <= win) acc += wr[j] * (j < win ? hist[j] : xv);
        out[(size_t)r * C + ch] = silu_f(acc);
        // Shift the window by one row.
#pragma unroll
        for (int j = 0; j < CONV_MAX_K - 2; j++)
            if (j + 1 < win) hist[j] = hist[j + 1];
#pragma unroll
        for (int j = 0; j < CONV_MAX_K - 1; j++)
            if (j == win - 1) hist[j] = xv;
    }
#pragma unroll
    for (int j = 0; j < CONV_MAX_K - 1; j++)
        if (j < win) st[(size_t)j * C + ch] = hist[j];
}

// ---- gates ---------------------------------------------------------------------------------------
// g = a_neg[h] * softplus(alpha + dt_bias[h]) (log-space decay), beta = sigmoid(b); [n, H].
extern "C" __global__ void delta_gates(const float* __restrict__ alpha, const float* __restrict__ b,
                                       const float* __restrict__ a_neg, const float* __restrict__ dt_bias,
                                       float* __restrict__ g, float* __restrict__ beta, size_t total, int H) {
    pdl_wait();
    pdl_trigger();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    int h = (int)(i % H);
    g[i] = a_neg[h] * softplus_f(alpha[i] + dt_bias[h]);
    beta[i] = sigmoid_f(b[i]);
}

// ---- the gated delta rule ------------------------------------------------------------------------
// The columns of a head's state S [dk, dv] f32 evolve independently (kv, delta and o of column j
// read only column j), so a block owns one (sequence, value head, 32-column slab): grid
// (num_seqs, v_heads, ceil(dv / 32)), 32 * R threads with R = ceil(dk / DR_RPT). Warp r holds rows
// i = r + R m (m < DR_RPT) of the slab in registers, lane = column: every load and store of S is a
// 128-byte row segment per warp, and S crosses memory exactly once per call (read at the start,
// written at the end) whatever the number of tokens. Per token:
//   S *= exp(g);  kv = Sᵀk;  S += k ⊗ beta (v - kv);  o = Sᵀq
// with the column sums over i reduced across the R warps through shared memory. At the 27B shape
// (dk = dv = 128, 48 heads) a decode step is 192 blocks of 256 threads.
//
// Decode (one row per sequence) and prefill use this one kernel. For prefill it scans the
// sequence's tokens in order with the state on chip: exact (the arithmetic of the recurrent
// reference) and one pass over the state per sequence instead of per token, but the token loop is
// serial. Longer prefills take the chunked WY/UT form below (delta_chunk_prep / delta_chunk_scan);
// this scan stays the decode kernel, the short-prompt path and the POCKET_DELTA_PREFILL=scan one.
//
// Shared memory (dynamic): q and k of the current token (normalised, [dk] each) and two [R][32]
// reduction buffers (kv and o), so a token needs three barriers.
#define DR_RPT 16
extern "C" __global__ void __launch_bounds__(512)
gated_delta_rule(const float* __restrict__ qkv, const float* __restrict__ g, const float* __restrict__ beta,
                 float* __restrict__ state, float* __restrict__ out,
                 const uint32_t* __restrict__ query_start, const uint32_t* __restrict__ state_slots,
                 const uint32_t* __restrict__ has_state, int hk, int hv, int dk, int dv, int tiled,
                 float l2_eps, float scale) {
    extern __shared__ float smem[];
    int s = blockIdx.x, h = blockIdx.y;
    int R = blockDim.x / 32;
    int lane = threadIdx.x % 32, r = threadIdx.x / 32;
    int j = blockIdx.z * 32 + lane;
    float* qs = smem;               // [dk]
    float* ks = qs + dk;            // [dk]
    float* red_kv = ks + dk;        // [R][32]
    float* red_o = red_kv + R * 32; // [R][32]
    int kh = tiled ? h % hk : h / (hv / hk);
    int width = 2 * hk * dk + hv * dv;
    bool col = j < dv;
    pdl_wait();
    pdl_trigger();

    float S[DR_RPT];
    float* st = state + ((size_t)state_slots[s] * hv + h) * dk * dv;
    bool has = has_state[s] != 0;
#pragma unroll
    for (int m = 0; m < DR_RPT; m++) {
        int i = r + R * m;
        S[m] = (has && col && i < dk) ? st[(size_t)i * dv + j] : 0.f;
    }
    uint32_t r0 = query_start[s], r1 = query_start[s + 1];
    for (uint32_t row = r0; row < r1; row++) {
        const float* x = qkv + (size_t)row * width;
        // q (warp 0) and k (warp 1, or warp 0 again when the block is one warp), L2-normalised.
        for (int which = r; which < 2; which += R) {
            const float* src = x + (size_t)(which * hk + kh) * dk;
            float ss = 0.f;
            for (int i = lane; i < dk; i += 32) ss += src[i] * src[i];
            ss = warp_sum(ss);
            float inv = rsqrtf(ss + l2_eps) * (which == 0 ? scale : 1.f);
            float* dst = which == 0 ? qs : ks;
            for (int i = lane; i < dk; i += 32) dst[i] = src[i] * inv;
        }
        float decay = expf(g[(size_t)row * hv + h]);
        float b = beta[(size_t)row * hv + h];
        float v = col ? x[2 * hk * dk + h * dv + j] : 0.f;
        __syncthreads();
        float part = 0.f;
#pragma unroll
        for (int m = 0; m < DR_RPT; m++) {
            int i = r + R * m;
            S[m] *= decay;
            if (i < dk) part += S[m] * ks[i];
        }
        red_kv[r * 32 + lane] = part;
        __syncthreads();
        float kv = 0.f;
        for (int rr = 0; rr < R; rr++) kv += red_kv[rr * 32 + lane];
        float delta = (v - kv) * b;
        part = 0.f;
#pragma unroll
        for (int m = 0; m < DR_RPT; m++) {
            int i = r + R * m;
            if (i < dk) {
                S[m] += ks[i] * delta;
                part += S[m] * qs[i];
            }
        }
        red_o[r * 32 + lane] = part;
        __syncthreads();
        if (r == 0 && col) {
            float o = 0.f;
            for (int rr = 0; rr < R; rr++) o += red_o[rr * 32 + lane];
            out[(size_t)row * hv * dv + h * dv + j] = o;
        }
    }
    if (col) {
#pragma unroll
        for (int m = 0; m < DR_RPT; m++) {
            int i = r + R * m;
            if (i < dk) st[(size_t)i * dv + j] = S[m];
        }
    }
}

// ---- gated RMSNorm, half split, sigmoid gate -----------------------------------------------------
// out = x / rms(x) * w * silu(gate), one block per row of d.
extern "C" __global__ void gated_rms_norm(const float* __restrict__ x, const float* __restrict__ gate,
                                          const float* __restrict__ w, float* __restrict__ out, int d,
                                          float eps) {
    __shared__ float part[32];
    pdl_wait();
    pdl_trigger();
    const float* xr = x + (size_t)blockIdx.x * d;
    const float* gr = gate + (size_t)blockIdx.x * d;
    float* orow = out + (size_t)blockIdx.x * d;
    float ss = 0.f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) ss += xr[i] * xr[i];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    ss = warp_sum(ss);
    if (lane == 0) part[warp] = ss;
    __syncthreads();
    ss = lane < (int)(blockDim.x / 32) ? part[lane] : 0.f;
    ss = warp_sum(ss);
    float inv = rsqrtf(ss / (float)d + eps);
    for (int i = threadIdx.x; i < d; i += blockDim.x) orow[i] = xr[i] * inv * w[i] * silu_f(gr[i]);
}

// first[r, c] = x[r, c], second[r, c] = x[r, d + c], one thread per output element.
extern "C" __global__ void split_halves(const float* __restrict__ x, float* __restrict__ first,
                                        float* __restrict__ second, size_t total, int d) {
    pdl_wait();
    pdl_trigger();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    size_t r = i / d, c = i % d;
    first[i] = x[r * 2 * d + c];
    second[i] = x[r * 2 * d + d + c];
}

// x *= sigmoid(gate).
extern "C" __global__ void sigmoid_mul(float* __restrict__ x, const float* __restrict__ gate, size_t total) {
    pdl_wait();
    pdl_trigger();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) x[i] *= sigmoid_f(gate[i]);
}

// ---- chunked prefill of the gated delta rule (WY / UT transform) ---------------------------------
// transformers' `torch_chunk_gated_delta_rule` and the CPU's `chunked_form`
// (crates/pocket-kernels/src/cpu/delta_rule.rs), in two kernels per piece of a prefill:
//   delta_chunk_prep  one block per (chunk, value head, sequence), all chunks at once: normalises
//                     q and k, takes γ = cumsum(g) inside the chunk, builds
//                     A[i,j] = β_i (k_i·k_j) e^(γi-γj) (strictly lower) and
//                     P[i,j] = (q_i·k_j) e^(γi-γj) (j <= i), solves (I + A) W = β e^γ k and
//                     (I + A) U = β v by forward substitution (each thread owns one column, so the
//                     64 steps need no barrier), and writes W, U, e^γ q, e^(γlast-γ) k, P, e^γlast.
//   delta_chunk_scan  one block per (sequence, value head, 32-column slab of the state), walking
//                     the chunks in order with its [dk, 32] slab of S in shared memory:
//                     vn = U - W S;  o = (e^γ q) S + P vn;  S = e^γlast S + (e^(γlast-γ) k)ᵀ vn.
// Only the second kernel is serial in the chunks, and its work per chunk is three small GEMMs
// instead of 64 dependent token steps with three barriers each. This is the plain-FMA first step:
// the GEMMs run from shared memory with register tiles (8 outputs per thread, float4 broadcast
// loads); moving them to mma.sync tensor cores is the follow-up. Padded rows (past the end of the
// sequence) and padded columns (dk, dv rounded up to 32) are written as zeros by the prep kernel so
// the scan needs no bounds checks in its inner loops.
#define DC_T 64
#define DC_THREADS 256

// Floats of one (sequence, chunk, head) item of the scratch: W, e^γ q and e^(γlast-γ) k
// [64][ldk], U [64][ldv], P [64][64], then e^γlast padded to 4 floats (keeps items 16-byte aligned).
DEVI size_t dc_item(int ldk, int ldv) { return (size_t)DC_T * (3 * ldk + ldv + DC_T) + 4; }

extern "C" __global__ void __launch_bounds__(DC_THREADS)
delta_chunk_prep(const float* __restrict__ qkv, const float* __restrict__ g, const float* __restrict__ beta,
                 float* __restrict__ scratch, const uint32_t* __restrict__ query_start, int hk, int hv,
                 int dk, int dv, int tiled, float l2_eps, float scale, int c0, int pc) {
    extern __shared__ float smem[];
    int cl = blockIdx.x, h = blockIdx.y, s = blockIdx.z;
    int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    int ldk = (dk + 31) & ~31, ldv = (dv + 31) & ~31;
    int ks = ldk + 1;                 // odd row stride: lanes reading different rows of K hit different banks
    float* Ks = smem;                 // [64][ks] normalised k
    float* Qs = Ks + DC_T * ks;       // [64][ks] normalised, scaled q
    float* A = Qs + DC_T * ks;        // [64][64], 16-byte aligned rows (the solve reads float4s)
    float* gam = A + DC_T * DC_T;
    float* bet = gam + DC_T;
    float* bw = bet + DC_T;           // β e^γ, the scale of W's right-hand side
    pdl_wait();
    pdl_trigger();
    uint32_t r0 = query_start[s], r1 = query_start[s + 1];
    uint32_t t0 = r0 + (uint32_t)(c0 + cl) * DC_T;
    if (t0 >= r1) return;
    int m = (int)min((uint32_t)DC_T, r1 - t0);
    int kh = tiled ? h % hk : h / (hv / hk);
    size_t width = 2 * (size_t)hk * dk + (size_t)hv * dv;
    float* item = scratch + ((size_t)(s * pc + cl) * hv + h) * dc_item(ldk, ldv);
    float* W = item;
    float* U = W + DC_T * ldk;
    float* Qg = U + DC_T * ldv;
    float* Kd = Qg + DC_T * ldk;
    float* P = Kd + DC_T * ldk;
    float* gl = P + DC_T * DC_T;

    // q and k rows, L2-normalised (a warp per row), zero past the sequence and past dk.
    for (int t = warp; t < DC_T; t += DC_THREADS / 32) {
        float iq = 0.f, ik = 0.f;
        const float* x = qkv + (size_t)(t0 + t) * width;
        if (t < m) {
            float sq = 0.f, sk = 0.f;
            for (int i = lane; i < dk; i += 32) {
                float a = x[(size_t)kh * dk + i], b = x[(size_t)(hk + kh) * dk + i];
                sq += a * a;
                sk += b * b;
            }
            sq = warp_sum(sq);
            sk = warp_sum(sk);
            iq = rsqrtf(sq + l2_eps) * scale;
            ik = rsqrtf(sk + l2_eps);
        }
        for (int i = lane; i < ks; i += 32) {
            bool in = t < m && i < dk;
            Qs[t * ks + i] = in ? x[(size_t)kh * dk + i] * iq : 0.f;
            Ks[t * ks + i] = in ? x[(size_t)(hk + kh) * dk + i] * ik : 0.f;
        }
    }
    if (tid < DC_T) {
        bool in = tid < m;
        gam[tid] = in ? g[(size_t)(t0 + tid) * hv + h] : 0.f;
        bet[tid] = in ? beta[(size_t)(t0 + tid) * hv + h] : 0.f;
    }
    __syncthreads();
    if (tid == 0) {
        // Sequential, as the CPU sums it (64 adds).
        float acc = 0.f;
        for (int i = 0; i < DC_T; i++) {
            acc += gam[i];
            gam[i] = acc;
        }
        gl[0] = expf(gam[m - 1]);
        gl[1] = gl[2] = gl[3] = 0.f;
    }
    __syncthreads();

    if (tid < DC_T) bw[tid] = bet[tid] * expf(gam[tid]);
    // A (kept here) and P (to the scratch) in 4 x 4 register tiles: thread (ti, tj) of a 16 x 16
    // grid owns rows i = ti + 16a and columns j = tj + 16b, so per d it loads 4 K[j] (at the odd
    // stride, 16 consecutive rows per warp: conflict-free), 4 K[i] and 4 Q[i] (two rows per warp:
    // broadcasts) for 32 FMAs. Each entry is one sequential sum over d, as on the CPU.
    {
        int ti = tid / 16, tj = tid % 16;
        float dkk[4][4], dqk[4][4];
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int b = 0; b < 4; b++) dkk[a][b] = dqk[a][b] = 0.f;
        for (int d = 0; d < dk; d++) {
            float ki[4], qi[4], kj[4];
#pragma unroll
            for (int a = 0; a < 4; a++) {
                ki[a] = Ks[(ti + 16 * a) * ks + d];
                qi[a] = Qs[(ti + 16 * a) * ks + d];
                kj[a] = Ks[(tj + 16 * a) * ks + d];
            }
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int b = 0; b < 4; b++) {
                    dkk[a][b] += ki[a] * kj[b];
                    dqk[a][b] += qi[a] * kj[b];
                }
        }
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int b = 0; b < 4; b++) {
                int i = ti + 16 * a, j = tj + 16 * b;
                float av = 0.f, pv = 0.f;
                if (i < m && j <= i) {
                    float dec = expf(gam[i] - gam[j]);
                    if (j < i) av = bet[i] * dkk[a][b] * dec;
                    pv = dqk[a][b] * dec;
                }
                A[i * DC_T + j] = av;
                P[i * DC_T + j] = pv;
            }
    }
    // e^γ q and e^(γlast-γ) k (zero rows past m: Q and K are zero there).
    float glast = gam[m - 1];
    for (int idx = tid; idx < DC_T * ldk; idx += DC_THREADS) {
        int t = idx / ldk, i = idx % ldk;
        Qg[idx] = Qs[t * ks + i] * expf(gam[t]);
        Kd[idx] = Ks[t * ks + i] * expf(glast - gam[t]);
    }
    __syncthreads();

    // Forward substitution, one column of [W | U] per thread with the column in registers (the
    // loops are unrolled, so x[] needs no local memory), rows of A read as float4 broadcasts:
    // x_i = init_i - sum_{j<i} A[i,j] x_j in the CPU's order. The float4 groups run past j = i-1
    // into A's zero upper triangle: those terms subtract 0 * (finite x_j), which changes nothing.
    // Rows past m start at zero and their A rows are zero, so they stay zero.
    for (int c = tid; c < ldk + ldv; c += DC_THREADS) {
        float x[DC_T];
        if (c < ldk) {
#pragma unroll
            for (int i = 0; i < DC_T; i++) x[i] = i < m ? bw[i] * Ks[i * ks + c] : 0.f;
        } else {
            int cv = c - ldk;
            const float* v = qkv + (size_t)t0 * width + 2 * (size_t)hk * dk + (size_t)h * dv + cv;
#pragma unroll
            for (int i = 0; i < DC_T; i++) x[i] = (i < m && cv < dv) ? bet[i] * v[(size_t)i * width] : 0.f;
        }
#pragma unroll
        for (int i = 1; i < DC_T; i++) {
            float acc = x[i];
#pragma unroll
            for (int j = 0; j < i; j += 4) {
                float4 a = *(const float4*)&A[i * DC_T + j];
                acc -= a.x * x[j];
                if (j + 1 < DC_T) acc -= a.y * x[j + 1];
                if (j + 2 < DC_T) acc -= a.z * x[j + 2];
                if (j + 3 < DC_T) acc -= a.w * x[j + 3];
            }
            x[i] = acc;
        }
        // Straight to the scratch: consecutive threads write consecutive columns.
        if (c < ldk) {
#pragma unroll
            for (int i = 0; i < DC_T; i++) W[i * ldk + c] = x[i];
        } else {
#pragma unroll
            for (int i = 0; i < DC_T; i++) U[i * ldv + c - ldk] = x[i];
        }
    }
}

// Copies n floats (a multiple of 4, 16-byte aligned) from global to shared memory.
DEVI void dc_stage(float* __restrict__ dst, const float* __restrict__ src, int n) {
    for (int i = threadIdx.x; i < n / 4; i += blockDim.x)
        ((float4*)dst)[i] = ((const float4*)src)[i];
}

extern "C" __global__ void __launch_bounds__(DC_THREADS)
delta_chunk_scan(const float* __restrict__ scratch, float* __restrict__ state, float* __restrict__ out,
                 const uint32_t* __restrict__ query_start, const uint32_t* __restrict__ state_slots,
                 const uint32_t* __restrict__ has_state, int hv, int dk, int dv, int c0, int pc,
                 int first) {
    extern __shared__ float smem[];
    int s = blockIdx.x, h = blockIdx.y;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int j = blockIdx.z * 32 + lane;
    bool col = j < dv;
    int ldk = (dk + 31) & ~31, ldv = (dv + 31) & ~31;
    int rpw = ldk / (DC_THREADS / 32); // state rows per warp in the update: a multiple of 4, <= 16
    float* Ss = smem;                  // [ldk][32] the slab of S
    float* X = Ss + ldk * 32;          // [64][ldk] W, then e^γ q, then e^(γlast-γ) k
    float* Pb = X + DC_T * ldk;        // [64][64]
    float* Vn = Pb + DC_T * DC_T;      // [64][32] vn of the slab
    pdl_wait();
    pdl_trigger();
    float* st = state + ((size_t)state_slots[s] * hv + h) * dk * dv;
    bool has = !first || has_state[s] != 0;
    for (int i = warp; i < ldk; i += DC_THREADS / 32)
        Ss[i * 32 + lane] = (has && col && i < dk) ? st[(size_t)i * dv + j] : 0.f;
    uint32_t r0 = query_start[s], r1 = query_start[s + 1];
    int nch = (int)((r1 - r0 + DC_T - 1) / DC_T);
    int cend = min(nch, c0 + pc);
    size_t isz = dc_item(ldk, ldv);
    for (int c = c0; c < cend; c++) {
        const float* W = scratch + ((size_t)(s * pc + c - c0) * hv + h) * isz;
        const float* U = W + DC_T * ldk;
        const float* Qg = U + DC_T * ldv;
        const float* Kd = Qg + DC_T * ldk;
        const float* P = Kd + DC_T * ldk;
        float glast = P[DC_T * DC_T];
        uint32_t t0 = r0 + (uint32_t)c * DC_T;
        int m = (int)min((uint32_t)DC_T, r1 - t0);
        float acc[8];

        __syncthreads(); // the previous chunk's update of Ss is done and X is free
        dc_stage(X, W, DC_T * ldk);
        __syncthreads();
        // vn = U - W S: warp w owns rows 8w..8w+7, lane the column.
#pragma unroll
        for (int r = 0; r < 8; r++) acc[r] = 0.f;
        for (int i = 0; i < ldk; i += 4) {
            float s0 = Ss[i * 32 + lane], s1 = Ss[(i + 1) * 32 + lane];
            float s2 = Ss[(i + 2) * 32 + lane], s3 = Ss[(i + 3) * 32 + lane];
#pragma unroll
            for (int r = 0; r < 8; r++) {
                float4 w = *(const float4*)&X[(warp * 8 + r) * ldk + i];
                acc[r] += w.x * s0 + w.y * s1 + w.z * s2 + w.w * s3;
            }
        }
#pragma unroll
        for (int r = 0; r < 8; r++) {
            int t = warp * 8 + r;
            Vn[t * 32 + lane] = (col ? U[t * ldv + j] : 0.f) - acc[r];
        }
        __syncthreads();
        dc_stage(X, Qg, DC_T * ldk);
        dc_stage(Pb, P, DC_T * DC_T);
        __syncthreads();
        // o = (e^γ q) S + P vn.
#pragma unroll
        for (int r = 0; r < 8; r++) acc[r] = 0.f;
        for (int i = 0; i < ldk; i += 4) {
            float s0 = Ss[i * 32 + lane], s1 = Ss[(i + 1) * 32 + lane];
            float s2 = Ss[(i + 2) * 32 + lane], s3 = Ss[(i + 3) * 32 + lane];
#pragma unroll
            for (int r = 0; r < 8; r++) {
                float4 q = *(const float4*)&X[(warp * 8 + r) * ldk + i];
                acc[r] += q.x * s0 + q.y * s1 + q.z * s2 + q.w * s3;
            }
        }
        for (int jj = 0; jj < DC_T; jj += 4) {
            float v0 = Vn[jj * 32 + lane], v1 = Vn[(jj + 1) * 32 + lane];
            float v2 = Vn[(jj + 2) * 32 + lane], v3 = Vn[(jj + 3) * 32 + lane];
#pragma unroll
            for (int r = 0; r < 8; r++) {
                float4 p = *(const float4*)&Pb[(warp * 8 + r) * DC_T + jj];
                acc[r] += p.x * v0 + p.y * v1 + p.z * v2 + p.w * v3;
            }
        }
        if (col) {
#pragma unroll
            for (int r = 0; r < 8; r++) {
                int t = warp * 8 + r;
                if (t < m) out[(size_t)(t0 + t) * hv * dv + (size_t)h * dv + j] = acc[r];
            }
        }
        __syncthreads();
        dc_stage(X, Kd, DC_T * ldk);
        __syncthreads();
        // S = e^γlast S + (e^(γlast-γ) k)ᵀ vn: warp w owns state rows rpw*w .. rpw*w + rpw - 1.
        float sn[16];
#pragma unroll
        for (int r = 0; r < 16; r++) sn[r] = r < rpw ? glast * Ss[(warp * rpw + r) * 32 + lane] : 0.f;
        for (int jj = 0; jj < DC_T; jj++) {
            float v = Vn[jj * 32 + lane];
#pragma unroll
            for (int q4 = 0; q4 < 4; q4++) {
                if (4 * q4 < rpw) {
                    float4 k = *(const float4*)&X[jj * ldk + warp * rpw + 4 * q4];
                    sn[4 * q4] += k.x * v;
                    sn[4 * q4 + 1] += k.y * v;
                    sn[4 * q4 + 2] += k.z * v;
                    sn[4 * q4 + 3] += k.w * v;
                }
            }
        }
#pragma unroll
        for (int r = 0; r < 16; r++)
            if (r < rpw) Ss[(warp * rpw + r) * 32 + lane] = sn[r];
    }
    __syncthreads();
    if (col)
        for (int i = warp; i < dk; i += DC_THREADS / 32) st[(size_t)i * dv + j] = Ss[i * 32 + lane];
}
