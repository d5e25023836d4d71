// The decode step of a Gated DeltaNet layer in one launch (every sequence of the batch has one
// row): what causal_conv1d_silu, delta_gates, gated_delta_rule and gated_rms_norm of deltanet.cu
// do, plus the two split_columns of the stacked projections, which it replaces by reading the
// projection outputs in place (each source is a pointer already offset to its first column and a
// row stride, so a stacked [q | k | v | z] row and four separate tensors look alike).
//
// Grid (k_heads * nsub, num_seqs): a block owns hb = hpg / nsub of the hpg = v_heads / k_heads
// value heads that read one key head, for one sequence. nsub = hpg (hb = 1, the default): one block
// per (value head, sequence), 48 blocks at Qwen3.5-27B batch 1 instead of 16. Why: the kernel is
// latency-bound, not bandwidth-bound (a block of the key-head layout walked its 3 heads' 64 KB
// states one after the other at ~28 GB/s per block, 13.9 us per layer on the H200 for 3 MB r+w);
// with a block per value head every block issues all of its one state's loads at once (8 float4s
// per thread, 64 KB per SM in flight) and the three heads of a group run side by side on three
// SMs, so the step costs one head's latency chain instead of three. nsub = 1 (hb = hpg) is the
// previous kernel: the host runs it from 4 sequences, where it measured faster (decode.rs,
// KEY_HEAD_FROM_SEQS); POCKET_DELTANET_SPLIT=0 / =1 force either layout.
//
// The conv-state race: the q/k conv channels belong to the key head, shared by the nsub blocks of
// its group. Every block computes the q/k conv (4 taps, cheap) from the OLD window; the new q/k
// window is staged in shared memory and written only by the LAST block of the group to arrive:
// after its conv reads (values consumed, then __syncthreads) one thread per block does
// atom.add.release.gpu on a per-(key head, sequence) counter (fence.acq_rel in the last one); the block that reads nsub - 1 knows
// every other block of its group has finished reading the old window, writes the new one at its
// end and resets the counter to 0 (the next launch or graph replay finds it zero; every access
// comes after pdl_wait, so launches are ordered). No block waits on another: no spin, no
// deadlock and no assumption on block dispatch order, whatever the number of waves (4 sequences
// at 27B = 192 blocks > 132 SMs). The atomic's result is used only at the block's end, so its
// latency hides behind the state math. Each block writes its own value heads' v window and state.
//
// Per block: the block's conv taps go to shared memory before pdl_wait (weights); after it the first
// value head's state is requested at once (the long-latency load: all 8 float4s per thread issued
// before the first use), then the conv + SiLU of the block's channels with the window update, z,
// the gates and the q/k L2 norms; then per value head (with hb > 1 the next head's rows are
// prefetched to L2, not to registers: 128 registers at 512 threads leave no room for a second
// copy), for each column j:
//   S *= exp(g);  kv = Sᵀk;  delta = beta (v - kv);  S += k ⊗ delta;  o = Sᵀq
//   out = o / rms(o) * w * silu(z)
// State layout as deltanet.cu ([slots, v_heads, k_dim, v_dim] f32). Thread (rg, cg) holds float4
// columns 4cg..4cg+3 of rows i = rg + RG m (m < FD_RPT): a warp reads 32 consecutive float4s of a
// row (512 bytes at v_dim 128), every state byte is read once and written once per step. The column
// sums over i go through shared memory ([RG][dv], then one thread per column adds the RG partials).
// The arithmetic is deltanet.cu's in the same order per element (the row partials are grouped by RG
// instead of by warp, so sums round differently from the unfused kernel, as they do from the CPU).
//
// With wfmt != 0 (1 = F16, 2 = BF16 weights) the block also computes the in_ba projection of its
// own value heads instead of reading its output: b_t = x . Wb[head t], a_t = x . Wa[head t] for
// the hb heads (2 hb rows of `hidden` 16-bit weights, 20 KB per head at 27B), saving that GEMV's launch.
// The rows are flattened into 8-element (16-byte) chunks, thread tid taking chunks tid + nt u;
// the first FD_BA_U per thread are loaded before pdl_wait (weights), the dot with the f32 row x
// (the layer input, not rounded, as gemv_h) follows once it may be read. Each chunk is one
// 8-term fmaf chain as in gemv_h, its partials summed per warp and row by shuffles (a warp's 32
// consecutive chunks span at most two rows when hidden >= 256, more in small test models), added
// by lane 0 per pass in order, and the nwarps partials summed in warp order: deterministic, f32
// throughout.
//
// deltanet_decode_c2 / _c4 (deltanet_decode_cluster.cuh, sm_90 only) split each value head's
// columns over a cluster of 2 or 4 blocks with one pass over the state; the host picks them at
// small batches where this kernel leaves SMs idle.
#include "gate_math.cuh"

// Longest conv kernel (as CONV_MAX_K in deltanet.cu) and state rows per thread.
#define FD_MAX_K 8
#define FD_RPT 8
// in_ba weight chunks (16 bytes) per thread and pass (4: 2048 chunks per pass, a 27B head's two
// rows of 640 in one pass; 8 spilled on sm_90 with the staging registers).
#define FD_BA_U 4

// Non-zero (the default; the host sets it from POCKET_DELTANET_EARLY_STATE): the cluster forms
// read the slot metadata, the state columns and the conv history before pdl_wait. Safe because
// before the wait only the previous kernel of the stream may still run (every kernel before it
// triggers its dependents after its own pdl_wait, so all earlier ones have finished; common.cuh
// names the one exception, which never precedes this kernel), and at decode that is a projection
// GEMV: the state and conv state are written by this kernel in earlier steps, the metadata by
// host uploads.
__constant__ int fd_early_state;

// One thread of the block arrives at the group's counter: returns the count before it. Release at
// gpu scope (the block's earlier reads of the old window, ordered by __syncthreads, come before);
// the last block's acquire is a fence.acq_rel after it (fd_acquire, at the block's end): an
// acquire RMW would make the thread wait for the atomic's round trip here, and the block with it
// at its next barrier.
DEVI uint32_t fd_arrive(uint32_t* c) {
    uint32_t old;
    asm volatile("atom.release.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(c) : "memory");
    return old;
}

// The acquire half for the last block (PTX: a strong read followed by fence.acq_rel is an acquire
// pattern that synchronizes with the other blocks' release RMWs it read from).
DEVI void fd_acquire() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

// The t-th value head reading key head kh.
DEVI int fd_head(int kh, int t, int hk, int hpg, int tiled) { return tiled ? kh + t * hk : kh * hpg + t; }

// Requests the rows of one head's state this thread holds (zeros for a fresh sequence).
DEVI void fd_load(float4 (&S)[FD_RPT], const float* __restrict__ st, bool has, bool active, int rg,
                  int RG, int cg, int dk, int dv) {
#pragma unroll
    for (int m = 0; m < FD_RPT; m++) {
        int i = rg + RG * m;
        S[m] = (has && active && i < dk) ? *(const float4*)&st[(size_t)i * dv + 4 * cg]
                                         : make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

// Asks L2 for the rows fd_load will read (no registers held).
DEVI void fd_prefetch(const float* st, int rg, int RG, int cg, int dk, int dv) {
#pragma unroll
    for (int m = 0; m < FD_RPT; m++) {
        int i = rg + RG * m;
        if (i < dk) asm volatile("prefetch.global.L2 [%0];" ::"l"(&st[(size_t)i * dv + 4 * cg]));
    }
}

// 16 bytes of weights, streamed past L1 (read once per step).
DEVI uint4 fd_ld16(const void* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

// Element 0 (low half) or 1 of a word of two 16-bit floats -> f32 (gemv.cu's h_lo / h_hi).
DEVI float fd_h(uint32_t v, bool hi, bool bf) {
    if (bf) return __uint_as_float(hi ? (v & 0xffff0000u) : (v << 16));
    return __half2float(__ushort_as_half((uint16_t)(hi ? v >> 16 : v & 0xffffu)));
}

// Bytes from the first weight row to row `lr` of the block's 2 hb in_ba rows (b rows of its
// value heads t0.., then their a rows), relative to wb or wa.
DEVI const uint8_t* fd_ba_row(const uint8_t* wb, const uint8_t* wa, int lr, int kh, int t0, int hb,
                              int hk, int hpg, int tiled, int hidden) {
    bool is_b = lr < hb;
    int h = fd_head(kh, t0 + (is_b ? lr : lr - hb), hk, hpg, tiled);
    return (is_b ? wb : wa) + (size_t)h * hidden * 2;
}

// Requests this thread's weight chunks base + tid + nt u of the flattened in_ba rows.
DEVI void fd_ba_load(uint4 (&q)[FD_BA_U], const uint8_t* wb, const uint8_t* wa, int base, int tid,
                     int nt, int nch, int kh, int t0, int hb, int hk, int hpg, int tiled, int hidden) {
    int total = 2 * hb * nch;
#pragma unroll
    for (int u = 0; u < FD_BA_U; u++) {
        int f = base + tid + nt * u;
        q[u] = make_uint4(0u, 0u, 0u, 0u);
        if (f < total) {
            int lr = f / nch;
            q[u] = fd_ld16(fd_ba_row(wb, wa, lr, kh, t0, hb, hk, hpg, tiled, hidden) + (size_t)(f - lr * nch) * 16);
        }
    }
}

// Dots the loaded chunks with x and adds the warp's per-row sums to pba[warp][row] (lane 0).
DEVI void fd_ba_dot(const uint4 (&q)[FD_BA_U], const float* __restrict__ xr, float* pba, int base,
                    int tid, int nt, int nch, int hb, bool bf) {
    int total = 2 * hb * nch, lane = tid % 32, warp = tid / 32;
#pragma unroll
    for (int u = 0; u < FD_BA_U; u++) {
        int f = base + tid + nt * u;
        int lr = f < total ? f / nch : 2 * hb;
        float d = 0.f;
        if (f < total) {
            const float4* xp = reinterpret_cast<const float4*>(xr) + 2 * (f - lr * nch);
            const float4 xa = xp[0], xb = xp[1];
            const uint4 v = q[u];
            d = fd_h(v.x, false, bf) * xa.x;
            d = fmaf(fd_h(v.x, true, bf), xa.y, d);
            d = fmaf(fd_h(v.y, false, bf), xa.z, d);
            d = fmaf(fd_h(v.y, true, bf), xa.w, d);
            d = fmaf(fd_h(v.z, false, bf), xb.x, d);
            d = fmaf(fd_h(v.z, true, bf), xb.y, d);
            d = fmaf(fd_h(v.w, false, bf), xb.z, d);
            d = fmaf(fd_h(v.w, true, bf), xb.w, d);
        }
        // The lanes' rows are consecutive and non-decreasing: one warp sum per row they touch
        // (at most two when hidden >= 256).
        int first = __shfl_sync(0xffffffffu, lr, 0);
        int last = min(__shfl_sync(0xffffffffu, lr, 31), 2 * hb - 1);
        for (int r = first; r <= last; r++) {
            float sr = warp_sum(lr == r ? d : 0.f);
            if (lane == 0) pba[warp * 2 * hb + r] += sr;
        }
    }
}

// The parameters every form of the decode step takes (this kernel, and the cluster forms of
// deltanet_decode_cluster.cuh), in launch order; each form adds its own after them.
#define DND_PARAMS                                                                                 \
    const float *__restrict__ qkv, const float *__restrict__ z, const float *__restrict__ bsrc,    \
        const float *__restrict__ asrc, int qkv_stride, int z_stride, int b_stride, int a_stride,  \
        const float *__restrict__ conv_w, const float *__restrict__ a_neg,                         \
        const float *__restrict__ dt_bias, const float *__restrict__ norm_w,                       \
        float *__restrict__ conv_state, float *__restrict__ state, float *__restrict__ out,        \
        const uint32_t *__restrict__ query_start, const uint32_t *__restrict__ state_slots,        \
        const uint32_t *__restrict__ has_state, int hk, int hv, int dk, int dv, int K, int tiled,  \
        int RG, float l2_eps, float scale, float norm_eps, const uint8_t *__restrict__ wb,         \
        const uint8_t *__restrict__ wa, const float *__restrict__ x, int x_stride, int hidden, int wfmt
#define DND_ARGS                                                                                   \
    qkv, z, bsrc, asrc, qkv_stride, z_stride, b_stride, a_stride, conv_w, a_neg, dt_bias, norm_w,  \
        conv_state, state, out, query_start, state_slots, has_state, hk, hv, dk, dv, K, tiled, RG, \
        l2_eps, scale, norm_eps, wb, wa, x, x_stride, hidden, wfmt

extern "C" __global__ void __launch_bounds__(512) deltanet_decode(DND_PARAMS, int hb, uint32_t* __restrict__ cnt) {
    extern __shared__ float4 smem4[];
    float* smem = (float*)smem4;
    int hpg = hv / hk, nsub = hpg / hb;
    int kh = blockIdx.x / nsub, t0 = (blockIdx.x % nsub) * hb, s = blockIdx.y;
    int tid = threadIdx.x, nt = blockDim.x;
    int lane = tid % 32, warp = tid / 32, nwarps = nt / 32;
    int C = 2 * hk * dk + hv * dv; // conv channels (the qkv row)
    int CH = 2 * dk + hb * dv;     // this block's channels: q, k, then its value heads' v
    bool stage = nsub > 1;         // the q/k window is shared: the group's last block writes it
    // The thread that arrives at the counter: lane 0 of warp 2 (it takes no part in the q/k norms
    // that follow, so the atomic does not delay them).
    int arriver = nwarps > 2 ? 64 : 0;
    int win = K - 1;
    int CG = dv / 4;
    int cg = tid % CG, rg = tid / CG;
    bool active = rg < RG;

    float* red = smem;             // [RG][dv] column partials (16-byte aligned: first)
    float* vec = red + RG * dv;    // [dv] delta of the current head
    float* part = vec + dv;        // [32] per-warp sums of squares
    float* gate = part + 32;       // [hb][2] decay, beta
    float* qn = gate + 2 * hb;     // [dk] normalised, scaled q
    float* kn = qn + dk;           // [dk] normalised k
    float* taps = kn + dk;         // [CH][K]
    float* xc = taps + CH * K;     // [CH] conv outputs
    float* zs = xc + CH;           // [hb][dv] output gate
    float* pba = zs + hb * dv;     // [nwarps][2 hb] in_ba partials (wfmt != 0)
    float* nwin = pba + nwarps * 2 * hb; // [win][2 dk] the new q/k window (stage)
    int* last_flag = (int*)(nwin + win * 2 * dk); // [1] this block is the group's last

    // Local channel c -> channel of the qkv row.
    auto chan = [&](int c) -> int {
        if (c < dk) return kh * dk + c;
        if (c < 2 * dk) return hk * dk + kh * dk + (c - dk);
        int t = (c - 2 * dk) / dv, j = (c - 2 * dk) % dv;
        return 2 * hk * dk + fd_head(kh, t0 + t, hk, hpg, tiled) * dv + j;
    };
    // Weights before the wait.
    for (int idx = tid; idx < CH * K; idx += nt) taps[idx] = conv_w[(size_t)chan(idx / K) * K + idx % K];
    float nw = tid < dv ? norm_w[tid] : 0.f;
    int nch = hidden / 8;
    uint4 q[FD_BA_U];
    if (wfmt) {
        // Lane 0 alone adds to its warp's partials: zero them here, no barrier needed.
        if (lane == 0)
            for (int r = 0; r < 2 * hb; r++) pba[warp * 2 * hb + r] = 0.f;
        fd_ba_load(q, wb, wa, 0, tid, nt, nch, kh, t0, hb, hk, hpg, tiled, hidden);
    }

    pdl_wait();
    pdl_trigger();
    uint32_t r0 = query_start[s], r1 = query_start[s + 1];
    bool has = has_state[s] != 0;
    float* cst = conv_state + (size_t)state_slots[s] * win * C;
    float* hst = state + (size_t)state_slots[s] * hv * dk * dv;
    if (r1 == r0) {
        // No row: the unfused ops write the slot back as they read it (zeros when fresh).
        // With several blocks per group the first writes the q/k window (no block reads it).
        if (!has) {
            for (int idx = tid; idx < win * CH; idx += nt)
                if (t0 == 0 || idx % CH >= 2 * dk) cst[(size_t)(idx / CH) * C + chan(idx % CH)] = 0.f;
            for (int t = 0; t < hb; t++) {
                float* st = hst + (size_t)fd_head(kh, t0 + t, hk, hpg, tiled) * dk * dv;
                for (int idx = tid; idx < dk * dv; idx += nt) st[idx] = 0.f;
            }
        }
        return;
    }

    // The first head's state: the load with the longest latency, in flight during the conv.
    float4 S[FD_RPT];
    fd_load(S, hst + (size_t)fd_head(kh, t0, hk, hpg, tiled) * dk * dv, has, active, rg, RG, cg, dk, dv);

    if (wfmt) {
        // The in_ba projection of this block's heads (the first pass's weights already here).
        const float* xr = x + (size_t)r0 * x_stride;
        for (int base = 0; base < 2 * hb * nch; base += nt * FD_BA_U) {
            if (base > 0) fd_ba_load(q, wb, wa, base, tid, nt, nch, kh, t0, hb, hk, hpg, tiled, hidden);
            fd_ba_dot(q, xr, pba, base, tid, nt, nch, hb, wfmt == 2);
        }
    }
    // The conv reads taps other threads wrote (and, with wfmt, the in_ba partials): all must be
    // in shared memory. This barrier was inside `if (wfmt)`, so without in_ba a late warp's taps
    // could be read before it wrote them (session 11: cuda_deltanet_decode at 8 sequences failed
    // once a prefetch delayed warp 0).
    __syncthreads();

    // Conv + SiLU and the window update, as causal_conv1d_silu for one row.
    for (int c = tid; c < CH; c += nt) {
        int ch = chan(c);
        float hist[FD_MAX_K];
#pragma unroll
        for (int j = 0; j < FD_MAX_K; j++) hist[j] = 0.f;
        if (has) {
#pragma unroll
            for (int j = 0; j < FD_MAX_K - 1; j++)
                if (j < win) hist[j] = cst[(size_t)j * C + ch];
        }
        float xv = qkv[(size_t)r0 * qkv_stride + ch];
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < FD_MAX_K; j++)
            if (j <= win) acc += taps[c * K + j] * (j < win ? hist[j] : xv);
        xc[c] = silu_f(acc);
        bool staged = stage && c < 2 * dk;
#pragma unroll
        for (int j = 0; j < FD_MAX_K - 1; j++) {
            if (j < win) {
                float nv = j + 1 < win ? hist[j + 1] : xv;
                if (staged)
                    nwin[j * 2 * dk + c] = nv;
                else
                    cst[(size_t)j * C + ch] = nv;
            }
        }
    }
    for (int idx = tid; idx < hb * dv; idx += nt) {
        int t = idx / dv, j = idx % dv;
        zs[idx] = z[(size_t)r0 * z_stride + fd_head(kh, t0 + t, hk, hpg, tiled) * dv + j];
    }
    for (int t = tid; t < hb; t += nt) {
        int h = fd_head(kh, t0 + t, hk, hpg, tiled);
        float bv, av;
        if (wfmt) {
            bv = 0.f;
            av = 0.f;
            for (int w = 0; w < nwarps; w++) {
                bv += pba[w * 2 * hb + t];
                av += pba[w * 2 * hb + hb + t];
            }
        } else {
            bv = bsrc[(size_t)r0 * b_stride + h];
            av = asrc[(size_t)r0 * a_stride + h];
        }
        float g = a_neg[h] * softplus_f(av + dt_bias[h]);
        gate[2 * t] = expf(g);
        gate[2 * t + 1] = sigmoid_f(bv);
    }
    __syncthreads();
    // Every thread's reads of the old window are consumed: arrive (the count is used at the end).
    uint32_t arrived = 0;
    if (stage && tid == arriver) arrived = fd_arrive(&cnt[(size_t)s * hk + kh]);
    // q (warp 0) and k (warp 1, or warp 0 again when the block is one warp), L2-normalised.
    for (int which = warp; which < 2; which += nwarps) {
        const float* src = xc + which * dk;
        float ss = 0.f;
        for (int i = lane; i < dk; i += 32) ss += src[i] * src[i];
        ss = warp_sum(ss);
        float inv = rsqrtf(ss + l2_eps) * (which == 0 ? scale : 1.f);
        float* dst = which == 0 ? qn : kn;
        for (int i = lane; i < dk; i += 32) dst[i] = src[i] * inv;
    }
    __syncthreads();

    for (int t = 0; t < hb; t++) {
        int h = fd_head(kh, t0 + t, hk, hpg, tiled);
        float* st = hst + (size_t)h * dk * dv;
        if (t > 0) fd_load(S, st, has, active, rg, RG, cg, dk, dv);
        // The next head's rows to L2 while this one computes (a register copy of them, as the
        // key-head kernel had, spills now that the block also stages the q/k window).
        if (t + 1 < hb && has && active)
            fd_prefetch(hst + (size_t)fd_head(kh, t0 + t + 1, hk, hpg, tiled) * dk * dv, rg, RG, cg, dk, dv);
        float decay = gate[2 * t], beta = gate[2 * t + 1];
        float4 p = make_float4(0.f, 0.f, 0.f, 0.f);
        if (active) {
#pragma unroll
            for (int m = 0; m < FD_RPT; m++) {
                int i = rg + RG * m;
                S[m].x *= decay;
                S[m].y *= decay;
                S[m].z *= decay;
                S[m].w *= decay;
                if (i < dk) {
                    float k = kn[i];
                    p.x += S[m].x * k;
                    p.y += S[m].y * k;
                    p.z += S[m].z * k;
                    p.w += S[m].w * k;
                }
            }
            *(float4*)&red[rg * dv + 4 * cg] = p;
        }
        __syncthreads();
        if (tid < dv) {
            float kv = 0.f;
            for (int rr = 0; rr < RG; rr++) kv += red[rr * dv + tid];
            vec[tid] = (xc[2 * dk + t * dv + tid] - kv) * beta;
        }
        __syncthreads();
        if (active) {
            float4 d = *(const float4*)&vec[4 * cg];
            p = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int m = 0; m < FD_RPT; m++) {
                int i = rg + RG * m;
                if (i < dk) {
                    float k = kn[i], q = qn[i];
                    S[m].x += k * d.x;
                    S[m].y += k * d.y;
                    S[m].z += k * d.z;
                    S[m].w += k * d.w;
                    p.x += S[m].x * q;
                    p.y += S[m].y * q;
                    p.z += S[m].z * q;
                    p.w += S[m].w * q;
                    *(float4*)&st[(size_t)i * dv + 4 * cg] = S[m];
                }
            }
            *(float4*)&red[rg * dv + 4 * cg] = p;
        }
        __syncthreads();
        float o = 0.f;
        if (tid < dv)
            for (int rr = 0; rr < RG; rr++) o += red[rr * dv + tid];
        // The gated RMSNorm of this head's row, as gated_rms_norm.
        float ss = warp_sum(o * o);
        if (lane == 0) part[warp] = ss;
        __syncthreads();
        ss = lane < nwarps ? part[lane] : 0.f;
        ss = warp_sum(ss);
        float inv = rsqrtf(ss / (float)dv + norm_eps);
        if (tid < dv) out[(size_t)r0 * hv * dv + (size_t)h * dv + tid] = o * inv * nw * silu_f(zs[t * dv + tid]);
    }
    if (stage) {
        // The group's last block writes the new q/k window (nwin was written before the head
        // loop's barriers) and leaves the counter zero for the next launch.
        if (tid == arriver) {
            bool last = arrived == (uint32_t)(nsub - 1);
            if (last) {
                fd_acquire();
                cnt[(size_t)s * hk + kh] = 0u;
            }
            *last_flag = last;
        }
        __syncthreads();
        if (*last_flag) {
            // The slot's window again (not kept live across the head loop: registers).
            float* cw = conv_state + (size_t)state_slots[s] * win * C;
            for (int idx = tid; idx < win * 2 * dk; idx += nt) {
                int c = idx % (2 * dk);
                cw[(size_t)(idx / (2 * dk)) * C + (c < dk ? kh * dk + c : hk * dk + kh * dk + (c - dk))] = nwin[idx];
            }
        }
    }
}

// The cluster variant (sm_90): a value head's columns over 2 or 4 blocks.
#include "cluster.cuh"
#include "deltanet_decode_cluster.cuh"
