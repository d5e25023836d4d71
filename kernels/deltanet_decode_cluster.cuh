// The cluster variant of the fused DeltaNet decode step (included by deltanet_decode.cu, whose
// helpers it uses). deltanet_decode_c2 / _c4 are sm_90 only (the compute_75 PTX has no such
// symbols and the host launches them only from the sm_90 cubin); deltanet_decode_c1, the same
// code with CS = 1 (no cluster instruction), builds for every GPU and is there for the A/B of
// the shorter chain below against deltanet_decode.
//
// deltanet_decode_c2 / _c4: a thread-block cluster of CS blocks per (value head, sequence), block
// `rank` owning v columns [rank dv/CS, (rank+1) dv/CS). Why: at batch 1 the value-head kernel
// runs 48 blocks on 132 SMs, each walking one head's 64 KB state through a chain of dependent
// phases; the columns of the delta rule are independent given q, k, g and beta, so CS blocks on
// CS SMs each load, update and store 64/CS KB, and only two sums cross blocks, exchanged through
// distributed shared memory (DSMEM):
//   - the in_ba dot (b, a of the head): each block dots an interleaved 1/CS of the 2 x hidden
//     weight chunks (8-term fmaf chains as gemv_h, summed per thread in chunk order, then over
//     the warp by butterfly, then over warps in order) and pushes its two partials into every
//     block's `sba[rank]`;
//   - the gated RMSNorm's sum of squares over v_dim: each column warp pushes its partial into
//     every block's `sss[rank][warp]`.
// Every block first arrives at a cluster barrier it waits on before its first push (DSMEM of a
// block is valid only once it runs). A push is a remote store followed by
// barrier.cluster.arrive.release; the reader waits with barrier.cluster.wait.acquire and reads
// only its own shared memory, so no block touches another block's shared memory after the last
// barrier and blocks may exit in any order. Each block sums the pushed partials in rank order:
// every block gets the same bits.
//
// Per block (shorter chain than deltanet_decode's): q/k conv + L2 norms computed by every block
// (4 taps x 256 channels, cheap) from the OLD window, the new q/k window written by the key-head
// group's last block to arrive (the arrival counter of deltanet_decode, hpg * CS blocks per
// group); the block's v channels only. One pass over the state instead of two: with S' = decay S,
//   kv = S'^T k = decay (S^T k),  delta = beta (v - kv),
//   o = (S' + k (x) delta)^T q = decay (S^T q) + delta (k . q),
// so S^T k and S^T q are summed in the same pass over the loaded state (before the gates are
// known: the in_ba exchange is off the state's path), and S = S decay, S += k delta is applied
// once delta is known (per element the same two operations as deltanet.cu). Column sums: each
// thread's rows in order, then the lanes of a warp holding the same columns (xor butterfly),
// then the warps in order, then the decay factor; k . q = (sum q k) |q|^-1 |k|^-1 scale.
// Rounding differs from the CPU's (S' summed instead of decay times the sum), within the tests'
// bound as the unfused kernel's different grouping is.
//
// Thread layout: thread tid holds float4 column group cg = tid % CGB (CGB = dv / CS / 4, a power
// of two <= 32, so a warp's lanes with the same cg differ by multiples of CGB) of rows
// rg + RG m, rg = tid / CGB, m < RPT. Columns of the norm and the output: thread c < dv / CS.
#pragma once

// In_ba weight chunks per thread and pass: 3 with 512 threads per cluster (c1, c2: 1536 >= the
// 1280 chunks of a 27B head), 2 with 1024 (c4); fewer registers held across the conv loads.
template <int CS> struct FdcBa {
    static constexpr int U = CS == 4 ? 2 : 3;
};
// Conv taps loaded per thread and pass, and conv channels per thread and pass (loads first).
#define FDC_TAP_U 8
#define FDC_CONV_U 2
// Longest conv kernel of these kernels (Qwen3.5's is 4; the host runs deltanet_decode for longer
// ones): the window of two channels per thread stays in 6 registers instead of 14.
#define FDC_MAX_K 4

// Cluster primitives (cluster.cuh), used only where CS > 1 (deltanet_decode_c1, the one-block
// form of this kernel, also builds for compute_75, where they are empty).
template <int CS> DEVI uint32_t fdc_rank() { return CS > 1 ? cluster_rank() : 0u; }
template <int CS> DEVI void fdc_arrive() {
    if constexpr (CS > 1) cluster_arrive();
}
template <int CS> DEVI void fdc_arrive_relaxed() {
    if constexpr (CS > 1) cluster_arrive_relaxed();
}
template <int CS> DEVI void fdc_wait() {
    if constexpr (CS > 1) cluster_wait();
}
// Stores v at `p` in every block of the cluster (this one's shared memory when CS = 1: the
// readers come after a __syncthreads there).
template <int CS> DEVI void fdc_push(float* p, float v) {
    if constexpr (CS == 1) {
        *p = v;
    } else {
#pragma unroll
        for (uint32_t r = 0; r < (uint32_t)CS; r++) cluster_store(p, r, v);
    }
}

// Requests chunks base + g + gn u (g: the thread's index over the cluster, gn: the cluster's
// threads) of the head's two flattened in_ba rows (b, then a), nch chunks of 8 each.
template <int U>
DEVI void fdc_ba_load(uint4 (&q)[U], const uint8_t* wrow_b, const uint8_t* wrow_a, int base,
                      int g, int gn, int nch) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        int f = base + g + gn * u;
        q[u] = make_uint4(0u, 0u, 0u, 0u);
        if (f < 2 * nch) q[u] = fd_ld16((f < nch ? wrow_b + (size_t)f * 16 : wrow_a + (size_t)(f - nch) * 16));
    }
}

// Dots the loaded chunks with x (one 8-term fmaf chain per chunk, as gemv_h) and adds each to
// this thread's sum of its row (acc[0] b, acc[1] a), in chunk order; the warp's sums come after
// the last pass (two interleaved butterflies instead of one per chunk and row).
template <int U>
DEVI void fdc_ba_dot(const uint4 (&q)[U], const float* __restrict__ xr, float (&acc)[2], int base,
                     int g, int gn, int nch, bool bf) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        int f = base + g + gn * u;
        if (f < 2 * nch) {
            int lr = f / nch;
            const float4* xp = reinterpret_cast<const float4*>(xr) + 2 * (f - lr * nch);
            const float4 xa = xp[0], xb = xp[1];
            const uint4 v = q[u];
            float d = fd_h(v.x, false, bf) * xa.x;
            d = fmaf(fd_h(v.x, true, bf), xa.y, d);
            d = fmaf(fd_h(v.y, false, bf), xa.z, d);
            d = fmaf(fd_h(v.y, true, bf), xa.w, d);
            d = fmaf(fd_h(v.z, false, bf), xb.x, d);
            d = fmaf(fd_h(v.z, true, bf), xb.y, d);
            d = fmaf(fd_h(v.w, false, bf), xb.z, d);
            d = fmaf(fd_h(v.w, true, bf), xb.w, d);
            if (lr == 0)
                acc[0] += d;
            else
                acc[1] += d;
        }
    }
}

template <int CS, int RPT>
DEVI void fdc_run(DND_PARAMS, uint32_t* __restrict__ cnt) {
    extern __shared__ float4 fdc_smem4[];
    float* smem = (float*)fdc_smem4;
    const uint32_t rank = fdc_rank<CS>();
    int hpg = hv / hk;
    int vi = blockIdx.x / CS, kh = vi / hpg, t = vi % hpg, s = blockIdx.y;
    int h = fd_head(kh, t, hk, hpg, tiled);
    int tid = threadIdx.x, nt = blockDim.x;
    int lane = tid % 32, warp = tid / 32, nwarps = nt / 32;
    int C = 2 * hk * dk + hv * dv;
    int dvb = dv / CS, col0 = (int)rank * dvb; // this block's v columns
    int CH = 2 * dk + dvb;                     // its channels: q, k, its v columns
    int CW = (dvb + 31) / 32;                  // warps holding a norm column
    int win = K - 1;
    int CGB = dvb / 4, cg = tid % CGB, rg = tid / CGB;
    bool active = rg < RG;
    int arriver = nwarps > 2 ? 64 : 0;     // arrives at the group counter (no norm work)
    int pusher = nwarps > 1 ? 32 : 0;      // sums and pushes the in_ba partials

    float* red = smem;                     // [nwarps][2][dvb] column partials of S^T k, S^T q
    float* vec = red + nwarps * 2 * dvb;   // [dvb] delta
    float* qn = vec + dvb;                 // [dk] normalised, scaled q
    float* kn = qn + dk;                   // [dk] normalised k
    float* taps = kn + dk;                 // [CH][K]
    float* xc = taps + CH * K;             // [CH] conv outputs
    float* nwin = xc + CH;                 // [win][2 dk] the new q/k window
    float* pba = nwin + win * 2 * dk;      // [16][2] per-warp in_ba sums
    float* sba = pba + 32;                 // [CS][2] in_ba partials pushed by the cluster
    float* sss = sba + 8;                  // [CS][CW] sums of squares pushed by the cluster
    float* misc = sss + 16;                // k.q, decay, last-block flag

    auto chan = [&](int c) -> int {
        if (c < dk) return kh * dk + c;
        if (c < 2 * dk) return hk * dk + kh * dk + (c - dk);
        return 2 * hk * dk + h * dv + col0 + (c - 2 * dk);
    };
    // Weights before the wait: the taps in passes of FDC_TAP_U loads per thread, all issued
    // before the first store (one round trip per pass, one pass at the 27B shape).
    for (int base = 0; base < CH * K; base += nt * FDC_TAP_U) {
        float v[FDC_TAP_U];
#pragma unroll
        for (int u = 0; u < FDC_TAP_U; u++) {
            int idx = base + tid + nt * u;
            v[u] = idx < CH * K ? conv_w[(size_t)chan(idx / K) * K + idx % K] : 0.f;
        }
#pragma unroll
        for (int u = 0; u < FDC_TAP_U; u++) {
            int idx = base + tid + nt * u;
            if (idx < CH * K) taps[idx] = v[u];
        }
    }
    float nw = tid < dvb ? norm_w[col0 + tid] : 0.f;
    float anh = a_neg[h], dtb = dt_bias[h];
    int nch = hidden / 8, g = (int)rank * nt + tid, gn = CS * nt;
    const uint8_t* wrow_b = wb + (size_t)h * hidden * 2;
    const uint8_t* wrow_a = wa + (size_t)h * hidden * 2;
    uint4 q[FdcBa<CS>::U];
    if (wfmt) fdc_ba_load(q, wrow_b, wrow_a, 0, g, gn, nch);
    // DSMEM may be written only once every block of the cluster runs: this arrival, waited for
    // before the first push (long complete by then).
    fdc_arrive_relaxed<CS>();

    // The slot's metadata, state columns and conv history (fd_early_state): none is written by
    // the kernel this one may overlap (see fd_early_state), so with it on they are requested
    // before the wait, all RPT state float4s in flight, and only the projections' outputs
    // (qkv, z, b, a, x) are read after it.
    const bool early = fd_early_state != 0;
    uint32_t r0 = 0, r1 = 0;
    bool has = false;
    float *cst = nullptr, *st = nullptr;
    float4 S[RPT];
    auto meta_and_state = [&]() {
        r0 = query_start[s];
        r1 = query_start[s + 1];
        has = has_state[s] != 0;
        cst = conv_state + (size_t)state_slots[s] * win * C;
        st = state + ((size_t)state_slots[s] * hv + h) * dk * dv + col0;
#pragma unroll
        for (int m = 0; m < RPT; m++) {
            int i = rg + RG * m;
            S[m] = (r1 != r0 && has && active && i < dk) ? *(const float4*)&st[(size_t)i * dv + 4 * cg]
                                                         : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    };
    // Conv + SiLU and the window update (q/k staged: the group's last block writes it), in
    // passes of FDC_CONV_U channels per thread whose loads are all issued first (at the 27B shape
    // 384, 320 or 288 channels over 512, 512 or 256 threads: one pass); the first pass's history
    // is read with the state, its inputs before the in_ba dot, so their round trip overlaps that
    // of x.
    float hist[FDC_CONV_U][FDC_MAX_K - 1], xv[FDC_CONV_U];
    auto hist_load = [&](int cb) {
#pragma unroll
        for (int u = 0; u < FDC_CONV_U; u++) {
            int c = cb + tid + nt * u;
            int ch = c < CH ? chan(c) : 0;
#pragma unroll
            for (int j = 0; j < FDC_MAX_K - 1; j++)
                hist[u][j] = (has && c < CH && j < win) ? cst[(size_t)j * C + ch] : 0.f;
        }
    };
    auto xv_load = [&](int cb) {
#pragma unroll
        for (int u = 0; u < FDC_CONV_U; u++) {
            int c = cb + tid + nt * u;
            xv[u] = c < CH ? qkv[(size_t)r0 * qkv_stride + chan(c)] : 0.f;
        }
    };
    if (early) {
        meta_and_state();
        if (r1 != r0) hist_load(0);
    }

    pdl_wait();
    pdl_trigger();
    if (!early) meta_and_state();
    if (r1 == r0) {
        // No row: the slot written back as read (zeros when fresh); the q/k window by rank 0
        // of the group's first head, the v window and state columns by their block.
        if (!has) {
            for (int idx = tid; idx < win * CH; idx += nt)
                if ((t == 0 && rank == 0) || idx % CH >= 2 * dk) cst[(size_t)(idx / CH) * C + chan(idx % CH)] = 0.f;
            for (int idx = tid; idx < dk * dvb; idx += nt) st[(size_t)(idx / dvb) * dv + idx % dvb] = 0.f;
        }
        return;
    }

    // This column thread's gate inputs (projected) and output gate, used after the state pass.
    float zv = 0.f, bv = 0.f, av = 0.f;
    if (tid < dvb) {
        zv = z[(size_t)r0 * z_stride + h * dv + col0 + tid];
        if (!wfmt) {
            bv = bsrc[(size_t)r0 * b_stride + h];
            av = asrc[(size_t)r0 * a_stride + h];
        }
    }
    if (!early) hist_load(0);
    xv_load(0);
    if (wfmt) {
        const float* xr = x + (size_t)r0 * x_stride;
        float acc[2] = {0.f, 0.f};
        for (int base = 0; base < 2 * nch; base += gn * FdcBa<CS>::U) {
            if (base > 0) fdc_ba_load(q, wrow_b, wrow_a, base, g, gn, nch);
            fdc_ba_dot(q, xr, acc, base, g, gn, nch, wfmt == 2);
        }
        acc[0] = warp_sum(acc[0]);
        acc[1] = warp_sum(acc[1]);
        if (lane == 0) {
            pba[2 * warp] = acc[0];
            pba[2 * warp + 1] = acc[1];
        }
    }
    // A channel's taps were written by other threads (before the wait): all must be in shared
    // memory before the conv reads them. Missing until session 11, whose prefetch (since removed)
    // delayed warp 0 and made the race show (cuda_deltanet_decode, clusters of 4).
    __syncthreads();
    for (int cb = 0; cb < CH; cb += nt * FDC_CONV_U) {
        if (cb > 0) {
            hist_load(cb);
            xv_load(cb);
        }
#pragma unroll
        for (int u = 0; u < FDC_CONV_U; u++) {
            int c = cb + tid + nt * u;
            if (c >= CH) continue;
            int ch = chan(c);
            float acc = 0.f;
#pragma unroll
            for (int j = 0; j < FDC_MAX_K; j++)
                if (j <= win) acc += taps[c * K + j] * (j < win ? hist[u][j] : xv[u]);
            xc[c] = silu_f(acc);
#pragma unroll
            for (int j = 0; j < FDC_MAX_K - 1; j++) {
                if (j < win) {
                    float nv = j + 1 < win ? hist[u][j + 1] : xv[u];
                    if (c < 2 * dk)
                        nwin[j * 2 * dk + c] = nv;
                    else
                        cst[(size_t)j * C + ch] = nv;
                }
            }
        }
    }
    __syncthreads();
    fdc_wait<CS>(); // every block of the cluster has started
    // Every read of the old window is consumed: arrive (the count is used at the end).
    uint32_t arrived = 0;
    if (tid == arriver) arrived = fd_arrive(&cnt[(size_t)s * hk + kh]);
    if (wfmt && tid == pusher) {
        float pb = 0.f, pa = 0.f;
        for (int w = 0; w < nwarps; w++) {
            pb += pba[2 * w];
            pa += pba[2 * w + 1];
        }
        fdc_push<CS>(&sba[2 * rank], pb);
        fdc_push<CS>(&sba[2 * rank + 1], pa);
    }
    if (warp == 0) {
        // q and k L2-normalised (as deltanet_decode), and k . q for the output.
        float sq = 0.f, sk = 0.f, sqk = 0.f;
        for (int i = lane; i < dk; i += 32) {
            float a = xc[i], b = xc[dk + i];
            sq += a * a;
            sk += b * b;
            sqk += a * b;
        }
        sq = warp_sum(sq);
        sk = warp_sum(sk);
        sqk = warp_sum(sqk);
        float iq = rsqrtf(sq + l2_eps) * scale, ik = rsqrtf(sk + l2_eps);
        for (int i = lane; i < dk; i += 32) {
            qn[i] = xc[i] * iq;
            kn[i] = xc[dk + i] * ik;
        }
        if (lane == 0) misc[0] = sqk * iq * ik;
    }
    __syncwarp();
    fdc_arrive<CS>(); // the in_ba partials pushed (waited for after the state pass)
    __syncthreads();

    // S^T k and S^T q of the undecayed state, one pass.
    float4 pk = make_float4(0.f, 0.f, 0.f, 0.f), pq = pk;
    if (active) {
#pragma unroll
        for (int m = 0; m < RPT; m++) {
            int i = rg + RG * m;
            if (i < dk) {
                float k = kn[i], qv = qn[i];
                pk.x += S[m].x * k;
                pk.y += S[m].y * k;
                pk.z += S[m].z * k;
                pk.w += S[m].w * k;
                pq.x += S[m].x * qv;
                pq.y += S[m].y * qv;
                pq.z += S[m].z * qv;
                pq.w += S[m].w * qv;
            }
        }
    }
    for (int off = CGB; off < 32; off <<= 1) {
        pk.x += __shfl_xor_sync(0xffffffffu, pk.x, off);
        pk.y += __shfl_xor_sync(0xffffffffu, pk.y, off);
        pk.z += __shfl_xor_sync(0xffffffffu, pk.z, off);
        pk.w += __shfl_xor_sync(0xffffffffu, pk.w, off);
        pq.x += __shfl_xor_sync(0xffffffffu, pq.x, off);
        pq.y += __shfl_xor_sync(0xffffffffu, pq.y, off);
        pq.z += __shfl_xor_sync(0xffffffffu, pq.z, off);
        pq.w += __shfl_xor_sync(0xffffffffu, pq.w, off);
    }
    if (lane < CGB) {
        *(float4*)&red[2 * warp * dvb + 4 * cg] = pk;
        *(float4*)&red[(2 * warp + 1) * dvb + 4 * cg] = pq;
    }
    __syncthreads();
    fdc_wait<CS>(); // the in_ba partials are here
    // Column phase: gates, delta, o and the norm's partial sum of squares.
    float o = 0.f;
    if (tid < dvb) {
        if (wfmt) {
            for (int r = 0; r < CS; r++) {
                bv += sba[2 * r];
                av += sba[2 * r + 1];
            }
        }
        float sk = 0.f, sq = 0.f;
        for (int w = 0; w < nwarps; w++) {
            sk += red[2 * w * dvb + tid];
            sq += red[(2 * w + 1) * dvb + tid];
        }
        float decay = expf(anh * softplus_f(av + dtb)), beta = sigmoid_f(bv);
        float d = (xc[2 * dk + tid] - decay * sk) * beta;
        o = decay * sq + d * misc[0];
        vec[tid] = d;
        if (tid == 0) misc[1] = decay;
    }
    if (warp < CW) {
        float ss = warp_sum(o * o);
        if (lane == 0) fdc_push<CS>(&sss[rank * CW + warp], ss);
    }
    __syncthreads();
    fdc_arrive<CS>(); // the sums of squares pushed
    // S = S decay + k delta, stored.
    {
        float decay = misc[1];
        float4 d = *(const float4*)&vec[4 * cg];
        if (active) {
#pragma unroll
            for (int m = 0; m < RPT; m++) {
                int i = rg + RG * m;
                if (i < dk) {
                    float k = kn[i];
                    S[m].x *= decay;
                    S[m].y *= decay;
                    S[m].z *= decay;
                    S[m].w *= decay;
                    S[m].x += k * d.x;
                    S[m].y += k * d.y;
                    S[m].z += k * d.z;
                    S[m].w += k * d.w;
                    *(float4*)&st[(size_t)i * dv + 4 * cg] = S[m];
                }
            }
        }
    }
    fdc_wait<CS>();
    if (tid < dvb) {
        float ss = 0.f;
        for (int r = 0; r < CS * CW; r++) ss += sss[r];
        float inv = rsqrtf(ss / (float)dv + norm_eps);
        out[(size_t)r0 * hv * dv + (size_t)h * dv + col0 + tid] = o * inv * nw * silu_f(zv);
    }
    // The group's last block writes the new q/k window and leaves the counter zero.
    if (tid == arriver) {
        bool last = arrived == (uint32_t)(hpg * CS - 1);
        if (last) {
            fd_acquire();
            cnt[(size_t)s * hk + kh] = 0u;
        }
        misc[2] = last ? 1.f : 0.f;
    }
    __syncthreads();
    if (misc[2] != 0.f) {
        float* cw = conv_state + (size_t)state_slots[s] * win * C;
        for (int idx = tid; idx < win * 2 * dk; idx += nt) {
            int c = idx % (2 * dk);
            cw[(size_t)(idx / (2 * dk)) * C + (c < dk ? kh * dk + c : hk * dk + kh * dk + (c - dk))] = nwin[idx];
        }
    }
}

// One block per value head (512 threads at 128 x 128): this kernel's shorter chain without the
// cluster, on every GPU (the A/B of the chain against the split).
extern "C" __global__ void __launch_bounds__(512) deltanet_decode_c1(DND_PARAMS, uint32_t* __restrict__ cnt) {
    fdc_run<1, 8>(DND_ARGS, cnt);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// Two column halves per value head (4 rows per thread: 512 threads at 128 x 128; with 8 rows and
// 256 threads the conv loads hoisted above the in_ba dot spilled).
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(512) deltanet_decode_c2(DND_PARAMS, uint32_t* __restrict__ cnt) {
    fdc_run<2, 4>(DND_ARGS, cnt);
}
// Four column quarters per value head (4 rows per thread: 256 threads at 128 x 128).
extern "C" __global__ void __cluster_dims__(4, 1, 1) __launch_bounds__(512) deltanet_decode_c4(DND_PARAMS, uint32_t* __restrict__ cnt) {
    fdc_run<4, 4>(DND_ARGS, cnt);
}

#endif
