// Tiled flash attention for prefill: causal GQA over the paged KV cache, for varlen batches
// (crates/pocket-kernels/src/attention.rs has the contract; attention.cu's `attention` is the
// row-per-block kernel this replaces when sequences bring many new rows).
//
// Grid (tiles, kv heads, sequences); 128 threads. A block owns BM consecutive rows of the
// sequence's flattened (new position, group head) list: row f is query position f / G of the
// sequence's new rows and query head kvh * G + f % G. So one K/V tile in shared memory serves every
// query head of the GQA group, and a tile spans only BM / G positions (a narrow causal edge).
// The block walks the keys its rows see in tiles of BN: K and V tiles go to shared memory as f32
// (any cache type), each thread computes a TR x TK block of scores (rows ty * TR + i, keys
// tx + 8 j: conflict-free float4 reads of the padded K rows), masks them (causal, sliding window),
// applies the soft cap, and updates its rows' online softmax (the 8 threads of a row share the
// running max through shuffles; each keeps a partial sum). The probabilities go to shared memory
// transposed, and each thread accumulates its TR rows x D / 8 output dims (float4 at 4 tx + 32 c:
// one 128-byte V row segment per 8 lanes). Blocks are launched heaviest tile first (the last rows
// of a sequence see the most keys).
//
// Needs D in {64, 128, 256} (a template constant), 16-byte aligned q, out and cache rows, and
// the dynamic shared memory of apf_smem_floats() (the host sets the attribute).
#include "common.cuh"

#define APF_THREADS 128

struct PrefillArgs {
    const float* q;
    const void* k_cache;
    const void* v_cache;
    const uint32_t* query_start;
    const uint32_t* seq_lens;
    const uint32_t* block_tables;
    float* out;
    int heads, kv_heads, block_size, max_blocks, window;
    float scale, softcap;
};

// Eight consecutive cache elements: one or two 16-byte loads, widened to f32 on the store.
template <typename T> struct Ld8;
template <> struct Ld8<float> {
    float4 a, b;
    DEVI void load(const float* p) {
        a = __ldg((const float4*)p);
        b = __ldg((const float4*)p + 1);
    }
    DEVI void zero() { a = b = float4{0.f, 0.f, 0.f, 0.f}; }
    DEVI void store(float* s) const {
        ((float4*)s)[0] = a;
        ((float4*)s)[1] = b;
    }
};
DEVI float4 apf_unpack_h(uint32_t x, uint32_t y) {
    return float4{h2f(x & 0xffff), h2f(x >> 16), h2f(y & 0xffff), h2f(y >> 16)};
}
DEVI float4 apf_unpack_bf(uint32_t x, uint32_t y) {
    return float4{bf2f(x & 0xffff), bf2f(x >> 16), bf2f(y & 0xffff), bf2f(y >> 16)};
}
template <> struct Ld8<__half> {
    uint4 r;
    DEVI void load(const __half* p) { r = __ldg((const uint4*)p); }
    DEVI void zero() { r = uint4{0u, 0u, 0u, 0u}; }
    DEVI void store(float* s) const {
        ((float4*)s)[0] = apf_unpack_h(r.x, r.y);
        ((float4*)s)[1] = apf_unpack_h(r.z, r.w);
    }
};
template <> struct Ld8<__nv_bfloat16> {
    uint4 r;
    DEVI void load(const __nv_bfloat16* p) { r = __ldg((const uint4*)p); }
    DEVI void zero() { r = uint4{0u, 0u, 0u, 0u}; }
    DEVI void store(float* s) const {
        ((float4*)s)[0] = apf_unpack_bf(r.x, r.y);
        ((float4*)s)[1] = apf_unpack_bf(r.z, r.w);
    }
};

// Row strides (floats) of the shared tiles. Q and K rows get 4 floats of padding so the 8 lanes
// of a row group, reading keys tx + 8 j at the same dim, hit 8 different 16-byte bank groups.
template <int D, int TR, int TK> struct ApfShape {
    static constexpr int BM = 16 * TR, BN = 8 * TK;
    static constexpr int QS = D + 4, KS = D + 4, VS = D, PS = BM + 4;
    static constexpr int FLOATS = BM * QS + BN * KS + BN * VS + BN * PS;
};

template <int TR> struct PRow;
template <> struct PRow<2> {
    DEVI static void get(const float* p, float* o) {
        float2 v = *(const float2*)p;
        o[0] = v.x; o[1] = v.y;
    }
};
template <> struct PRow<4> {
    DEVI static void get(const float* p, float* o) {
        float4 v = *(const float4*)p;
        o[0] = v.x; o[1] = v.y; o[2] = v.z; o[3] = v.w;
    }
};

template <typename T, int D, int TR, int TK>
__device__ void attn_prefill_tile(const PrefillArgs& a, float* smem) {
    using S = ApfShape<D, TR, TK>;
    constexpr int BM = S::BM, BN = S::BN, QS = S::QS, KS = S::KS, VS = S::VS, PS = S::PS;
    constexpr int DC = D / 32;               // float4 output chunks per thread and row
    constexpr int CH = BN * (D / 8);         // 8-element chunks of one K (or V) tile
    constexpr int NL = CH / APF_THREADS;     // ... per thread
    constexpr int LB = NL < 4 ? NL : 4;      // chunks in flight per load batch (registers)
    static_assert(CH % APF_THREADS == 0 && NL % LB == 0, "tile does not split over the block");
    float* sQ = smem;
    float* sK = sQ + BM * QS;
    float* sV = sK + BN * KS;
    float* sP = sV + BN * VS;  // [BN][PS]: probabilities, key-major

    int tid = threadIdx.x, ty = tid / 8, tx = tid % 8;
    int kvh = blockIdx.y, s = blockIdx.z;
    int tile = gridDim.x - 1 - blockIdx.x;  // heaviest (last) tiles first
    int G = a.heads / a.kv_heads;
    int q0 = (int)a.query_start[s];
    int qlen = (int)a.query_start[s + 1] - q0;
    int nrows = qlen * G;
    int r0 = tile * BM;
    if (r0 >= nrows) return;  // the whole block, before any barrier
    int first = (int)a.seq_lens[s] - qlen;  // position of the sequence's first new row
    int pos_lo = first + r0 / G;
    int pos_hi = first + (min(nrows, r0 + BM) - 1) / G;
    int k_begin = a.window > 0 ? max(0, pos_lo - a.window + 1) : 0;
    int k_end = pos_hi + 1;

    // The Q tile, scaled (as the row kernel scales q before the dot product).
    for (int idx = tid; idx < BM * (D / 4); idx += APF_THREADS) {
        int r = idx / (D / 4), c = idx % (D / 4);
        int f = r0 + r;
        float4 v = float4{0.f, 0.f, 0.f, 0.f};
        if (f < nrows) {
            int qi = f / G, g = f % G;
            v = *(const float4*)(a.q + ((size_t)(q0 + qi) * a.heads + kvh * G + g) * D + 4 * c);
            v.x *= a.scale; v.y *= a.scale; v.z *= a.scale; v.w *= a.scale;
        }
        *(float4*)(sQ + r * QS + 4 * c) = v;
    }
    // This thread's rows: the keys each sees are [klo, pos]; a row past the sequence sees none.
    int pos[TR], klo[TR];
    float4 o[TR][DC];
    float m[TR], l[TR];
#pragma unroll
    for (int i = 0; i < TR; i++) {
        int f = r0 + ty * TR + i;
        pos[i] = f < nrows ? first + f / G : -1;
        klo[i] = a.window > 0 ? max(0, pos[i] - a.window + 1) : 0;
        m[i] = -INFINITY;
        l[i] = 0.f;
#pragma unroll
        for (int c = 0; c < DC; c++) o[i][c] = float4{0.f, 0.f, 0.f, 0.f};
    }

    const T* kc = (const T*)a.k_cache;
    const T* vc = (const T*)a.v_cache;
    const uint32_t* bt = a.block_tables + (size_t)s * a.max_blocks;
    size_t kv_stride = (size_t)a.kv_heads * D;
    size_t col = (size_t)kvh * D;
    // Every thread runs the same trip count: the barriers and row shuffles below see all lanes.
    for (int kb = k_begin; kb < k_end; kb += BN) {
        __syncthreads();  // the previous tile's readers are done (and, first time, Q is stored)
#pragma unroll
        for (int b = 0; b < NL; b += LB) {
            Ld8<T> kr[LB], vr[LB];
#pragma unroll
            for (int u = 0; u < LB; u++) {
                int idx = tid + (b + u) * APF_THREADS;
                int j = kb + idx / (D / 8);
                if (j < k_end) {
                    size_t slot = (size_t)bt[j / a.block_size] * a.block_size + (j % a.block_size);
                    size_t off = slot * kv_stride + col + 8 * (idx % (D / 8));
                    kr[u].load(kc + off);
                    vr[u].load(vc + off);
                } else {
                    // Keys past the block's last row: masked below, but their V rows still meet
                    // a zero probability in the FMAs, and 0 * (stale Inf/NaN bits) is NaN.
                    kr[u].zero();
                    vr[u].zero();
                }
            }
#pragma unroll
            for (int u = 0; u < LB; u++) {
                int idx = tid + (b + u) * APF_THREADS;
                int n = idx / (D / 8), c8 = 8 * (idx % (D / 8));
                kr[u].store(sK + n * KS + c8);
                vr[u].store(sV + n * VS + c8);
            }
        }
        __syncthreads();

        // Scores of rows ty * TR + i against keys tx + 8 j.
        float sc[TR][TK];
#pragma unroll
        for (int i = 0; i < TR; i++) {
#pragma unroll
            for (int j = 0; j < TK; j++) sc[i][j] = 0.f;
        }
#pragma unroll 4
        for (int d = 0; d < D; d += 4) {
            float4 qf[TR], kf[TK];
#pragma unroll
            for (int i = 0; i < TR; i++) qf[i] = *(const float4*)(sQ + (ty * TR + i) * QS + d);
#pragma unroll
            for (int j = 0; j < TK; j++) kf[j] = *(const float4*)(sK + (tx + 8 * j) * KS + d);
#pragma unroll
            for (int i = 0; i < TR; i++) {
#pragma unroll
                for (int j = 0; j < TK; j++) {
                    sc[i][j] += qf[i].x * kf[j].x;
                    sc[i][j] += qf[i].y * kf[j].y;
                    sc[i][j] += qf[i].z * kf[j].z;
                    sc[i][j] += qf[i].w * kf[j].w;
                }
            }
        }
        // Soft cap, mask, online softmax.
#pragma unroll
        for (int i = 0; i < TR; i++) {
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < TK; j++) {
                int key = kb + tx + 8 * j;
                float v = sc[i][j];
                if (a.softcap > 0.f) v = a.softcap * tanhf(v / a.softcap);
                v = key >= klo[i] && key <= pos[i] ? v : -INFINITY;
                sc[i][j] = v;
                mx = fmaxf(mx, v);
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
            float mn = fmaxf(m[i], mx);
            // m = -inf: no key of this row yet (acc and sum are 0); mn = -inf: none in this tile.
            float corr = m[i] == -INFINITY ? 0.f : __expf(m[i] - mn);
            float ps = 0.f;
#pragma unroll
            for (int j = 0; j < TK; j++) {
                float p = sc[i][j] == -INFINITY ? 0.f : __expf(sc[i][j] - mn);
                sc[i][j] = p;
                ps += p;
            }
            l[i] = l[i] * corr + ps;
            m[i] = mn;
#pragma unroll
            for (int c = 0; c < DC; c++) {
                o[i][c].x *= corr; o[i][c].y *= corr; o[i][c].z *= corr; o[i][c].w *= corr;
            }
        }
#pragma unroll
        for (int j = 0; j < TK; j++) {
#pragma unroll
            for (int i = 0; i < TR; i++) sP[(tx + 8 * j) * PS + ty * TR + i] = sc[i][j];
        }
        __syncthreads();

        // P . V for this thread's rows and dims 32 c + 4 tx .. + 3.
#pragma unroll 4
        for (int n = 0; n < BN; n++) {
            float pr[TR];
            PRow<TR>::get(sP + n * PS + ty * TR, pr);
#pragma unroll
            for (int c = 0; c < DC; c++) {
                float4 v = *(const float4*)(sV + n * VS + 32 * c + 4 * tx);
#pragma unroll
                for (int i = 0; i < TR; i++) {
                    o[i][c].x += pr[i] * v.x;
                    o[i][c].y += pr[i] * v.y;
                    o[i][c].z += pr[i] * v.z;
                    o[i][c].w += pr[i] * v.w;
                }
            }
        }
    }
    pdl_trigger();
#pragma unroll
    for (int i = 0; i < TR; i++) {
        float L = l[i];
        L += __shfl_xor_sync(0xffffffffu, L, 1);
        L += __shfl_xor_sync(0xffffffffu, L, 2);
        L += __shfl_xor_sync(0xffffffffu, L, 4);
        int f = r0 + ty * TR + i;
        if (f < nrows) {
            int qi = f / G, g = f % G;
            float* op = a.out + ((size_t)(q0 + qi) * a.heads + kvh * G + g) * D + 4 * tx;
#pragma unroll
            for (int c = 0; c < DC; c++) {
                float4 v = o[i][c];
                if (L > 0.f) {
                    v.x /= L; v.y /= L; v.z /= L; v.w /= L;
                } else {
                    v = float4{0.f, 0.f, 0.f, 0.f};
                }
                *(float4*)(op + 32 * c) = v;
            }
        }
    }
}

// ---- tensor-core variant (POCKET_ATTN_PREFILL=tc): f32 caches, D 64 or 128, sm_80+ -----------
// Same blocks and key walk as above, but each warp owns 16 of the block's BM = 16 * WARPS rows and
// computes S = Q K^T and O += P V with mma.sync m16n8k8 TF32 (f32 accumulate). Q, K, V are
// rounded to TF32 (cvt.rna) as they are stored in shared memory, P as it is written back for the
// second product (the row sums use the unrounded P). Fragment layouts (PTX ISA, m16n8k8 .tf32),
// with g = lane / 4, t = lane % 4: A a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4);
// B b0 (k = t, n = g), b1 (k = t + 4, n = g); C c0 (g, 2t), c1 (g, 2t + 1), c2 (g + 8, 2t),
// c3 (g + 8, 2t + 1). Strides: Q and K rows D + 4, V rows D + 8, P rows BN + 4, so every
// fragment load of a warp hits 32 different banks.
#ifndef APF_EMU
DEVI uint32_t apf_tf32(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint32_t u;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(x));
    return u;
#else
    return __float_as_uint(x);
#endif
}
// c += A B for one warp's fragments.
DEVI void apf_mma(float* c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                  uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}
DEVI void apf_syncwarp() { __syncwarp(); }
#endif
DEVI float apf_round(float x) { return __uint_as_float(apf_tf32(x)); }
DEVI float4 apf_round4(float4 v) {
    return float4{apf_round(v.x), apf_round(v.y), apf_round(v.z), apf_round(v.w)};
}
DEVI uint32_t apf_bits(const float* p) { return __float_as_uint(*p); }

template <int D, int WARPS> struct ApfTcShape {
    static constexpr int BM = 16 * WARPS, BN = 64;
    static constexpr int QS = D + 4, KS = D + 4, VS = D + 8, PS = BN + 4;
    static constexpr int FLOATS = BM * QS + BN * KS + BN * VS + BM * PS;
};

template <int D, int WARPS>
__device__ void attn_prefill_tc_tile(const PrefillArgs& a, float* smem) {
    using S = ApfTcShape<D, WARPS>;
    constexpr int NT = 32 * WARPS, BM = S::BM, BN = S::BN;
    constexpr int QS = S::QS, KS = S::KS, VS = S::VS, PS = S::PS;
    constexpr int NN = BN / 8, ND = D / 8;  // key and output-dim n-tiles of 8
    constexpr int CH = BN * (D / 8), NL = CH / NT, LB = NL < 4 ? NL : 4;
    static_assert(CH % NT == 0 && NL % LB == 0, "tile does not split over the block");
    float* sQ = smem;
    float* sK = sQ + BM * QS;
    float* sV = sK + BN * KS;
    float* sP = sV + BN * VS;  // [BM][PS], each warp its own 16 rows

    int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    int kvh = blockIdx.y, s = blockIdx.z;
    int tile = gridDim.x - 1 - blockIdx.x;
    int G = a.heads / a.kv_heads;
    int q0 = (int)a.query_start[s];
    int qlen = (int)a.query_start[s + 1] - q0;
    int nrows = qlen * G;
    int r0 = tile * BM;
    if (r0 >= nrows) return;
    int first = (int)a.seq_lens[s] - qlen;
    int pos_lo = first + r0 / G;
    int pos_hi = first + (min(nrows, r0 + BM) - 1) / G;
    int k_begin = a.window > 0 ? max(0, pos_lo - a.window + 1) : 0;
    int k_end = pos_hi + 1;

    for (int idx = tid; idx < BM * (D / 4); idx += NT) {
        int r = idx / (D / 4), c = idx % (D / 4);
        int f = r0 + r;
        float4 v = float4{0.f, 0.f, 0.f, 0.f};
        if (f < nrows) {
            int qi = f / G, gh = f % G;
            v = *(const float4*)(a.q + ((size_t)(q0 + qi) * a.heads + kvh * G + gh) * D + 4 * c);
            v.x *= a.scale; v.y *= a.scale; v.z *= a.scale; v.w *= a.scale;
        }
        *(float4*)(sQ + r * QS + 4 * c) = apf_round4(v);
    }
    // Rows warp * 16 + g (h = 0) and + 8 (h = 1).
    int pos[2], klo[2];
    float o[ND][4], m[2], l[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int f = r0 + warp * 16 + g + 8 * h;
        pos[h] = f < nrows ? first + f / G : -1;
        klo[h] = a.window > 0 ? max(0, pos[h] - a.window + 1) : 0;
        m[h] = -INFINITY;
        l[h] = 0.f;
    }
#pragma unroll
    for (int dt = 0; dt < ND; dt++) {
#pragma unroll
        for (int e = 0; e < 4; e++) o[dt][e] = 0.f;
    }
    const float* kc = (const float*)a.k_cache;
    const float* vc = (const float*)a.v_cache;
    const uint32_t* bt = a.block_tables + (size_t)s * a.max_blocks;
    size_t kv_stride = (size_t)a.kv_heads * D;
    size_t col = (size_t)kvh * D;
    const float* qw = sQ + (warp * 16 + g) * QS + t;
    float* pw = sP + (warp * 16 + g) * PS;
    for (int kb = k_begin; kb < k_end; kb += BN) {
        __syncthreads();
#pragma unroll
        for (int b = 0; b < NL; b += LB) {
            Ld8<float> kr[LB], vr[LB];
#pragma unroll
            for (int u = 0; u < LB; u++) {
                int idx = tid + (b + u) * NT;
                int j = kb + idx / (D / 8);
                if (j < k_end) {
                    size_t slot = (size_t)bt[j / a.block_size] * a.block_size + (j % a.block_size);
                    size_t off = slot * kv_stride + col + 8 * (idx % (D / 8));
                    kr[u].load(kc + off);
                    vr[u].load(vc + off);
                } else {
                    kr[u].zero();
                    vr[u].zero();
                }
            }
#pragma unroll
            for (int u = 0; u < LB; u++) {
                int idx = tid + (b + u) * NT;
                int n = idx / (D / 8), c8 = 8 * (idx % (D / 8));
                float4* kd = (float4*)(sK + n * KS + c8);
                float4* vd = (float4*)(sV + n * VS + c8);
                kd[0] = apf_round4(kr[u].a);
                kd[1] = apf_round4(kr[u].b);
                vd[0] = apf_round4(vr[u].a);
                vd[1] = apf_round4(vr[u].b);
            }
        }
        __syncthreads();

        float sc[NN][4];
#pragma unroll
        for (int nt = 0; nt < NN; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) sc[nt][e] = 0.f;
        }
#pragma unroll 4
        for (int kk = 0; kk < D; kk += 8) {
            uint32_t a0 = apf_bits(qw + kk), a1 = apf_bits(qw + 8 * QS + kk);
            uint32_t a2 = apf_bits(qw + kk + 4), a3 = apf_bits(qw + 8 * QS + kk + 4);
#pragma unroll
            for (int nt = 0; nt < NN; nt++) {
                const float* kp = sK + (nt * 8 + g) * KS + kk + t;
                apf_mma(sc[nt], a0, a1, a2, a3, apf_bits(kp), apf_bits(kp + 4));
            }
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float mx = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < NN; nt++) {
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    int key = kb + nt * 8 + 2 * t + e;
                    float v = sc[nt][2 * h + e];
                    if (a.softcap > 0.f) v = a.softcap * tanhf(v / a.softcap);
                    v = key >= klo[h] && key <= pos[h] ? v : -INFINITY;
                    sc[nt][2 * h + e] = v;
                    mx = fmaxf(mx, v);
                }
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            float mn = fmaxf(m[h], mx);
            float corr = m[h] == -INFINITY ? 0.f : __expf(m[h] - mn);
            float ps = 0.f;
#pragma unroll
            for (int nt = 0; nt < NN; nt++) {
                float p0 = sc[nt][2 * h] == -INFINITY ? 0.f : __expf(sc[nt][2 * h] - mn);
                float p1 = sc[nt][2 * h + 1] == -INFINITY ? 0.f : __expf(sc[nt][2 * h + 1] - mn);
                ps += p0 + p1;
                *(float2*)(pw + 8 * h * PS + nt * 8 + 2 * t) = float2{apf_round(p0), apf_round(p1)};
            }
            l[h] = l[h] * corr + ps;
            m[h] = mn;
#pragma unroll
            for (int dt = 0; dt < ND; dt++) {
                o[dt][2 * h] *= corr;
                o[dt][2 * h + 1] *= corr;
            }
        }
        apf_syncwarp();
#pragma unroll 2
        for (int ks = 0; ks < BN; ks += 8) {
            const float* pp = pw + ks + t;
            uint32_t a0 = apf_bits(pp), a1 = apf_bits(pp + 8 * PS);
            uint32_t a2 = apf_bits(pp + 4), a3 = apf_bits(pp + 8 * PS + 4);
            const float* vp = sV + (ks + t) * VS + g;
#pragma unroll
            for (int dt = 0; dt < ND; dt++) {
                apf_mma(o[dt], a0, a1, a2, a3, apf_bits(vp + dt * 8), apf_bits(vp + 4 * VS + dt * 8));
            }
        }
    }
    pdl_trigger();
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float L = l[h];
        L += __shfl_xor_sync(0xffffffffu, L, 1);
        L += __shfl_xor_sync(0xffffffffu, L, 2);
        int f = r0 + warp * 16 + g + 8 * h;
        if (f < nrows) {
            int qi = f / G, gh = f % G;
            float* op = a.out + ((size_t)(q0 + qi) * a.heads + kvh * G + gh) * D + 2 * t;
#pragma unroll
            for (int dt = 0; dt < ND; dt++) {
                float2 v = L > 0.f ? float2{o[dt][2 * h] / L, o[dt][2 * h + 1] / L} : float2{0.f, 0.f};
                *(float2*)(op + dt * 8) = v;
            }
        }
    }
}

// Tile shapes per head size: 32 rows (2 per thread) for every D, so a 512-token prompt of a small
// model still makes a block per SM; 64 keys per tile, 32 at D = 256 (shared memory and registers).
#define APF_CFG_64 2, 8
#define APF_CFG_128 2, 8
#define APF_CFG_256 2, 4

// Everything the block reads (q, the caches, the batch metadata) is written by earlier kernels of
// the step, so nothing is prefetched before pdl_wait(); the trigger comes after the key loop.
#define DEF_APF(name, T, D)                                                                        \
    extern "C" __global__ void __launch_bounds__(APF_THREADS)                                     \
        attn_prefill_##name##_d##D(PrefillArgs a) {                                               \
        extern __shared__ float4 apf_smem[];                                                       \
        pdl_wait();                                                                                \
        attn_prefill_tile<T, D, APF_CFG_##D>(a, (float*)apf_smem);                                 \
    }
DEF_APF(f32, float, 64)
DEF_APF(f32, float, 128)
DEF_APF(f32, float, 256)
DEF_APF(f16, __half, 64)
DEF_APF(f16, __half, 128)
DEF_APF(f16, __half, 256)
DEF_APF(bf16, __nv_bfloat16, 64)
DEF_APF(bf16, __nv_bfloat16, 128)
DEF_APF(bf16, __nv_bfloat16, 256)

// Tensor-core variant: 2 warps (32 rows) per block, as many blocks as the FMA kernel. The body
// needs sm_80 (mma TF32); the compute_75 PTX keeps an empty entry the host never launches there.
#define APF_TC_WARPS 2
#define DEF_APF_TC(D)                                                                              \
    extern "C" __global__ void __launch_bounds__(32 * APF_TC_WARPS) attn_prefill_tc_f32_d##D(     \
        PrefillArgs a) {                                                                           \
        extern __shared__ float4 apf_smem[];                                                       \
        pdl_wait();                                                                                \
        if (APF_TC_OK) attn_prefill_tc_tile<D, APF_TC_WARPS>(a, (float*)apf_smem);                 \
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define APF_TC_OK false
#else
#define APF_TC_OK true
#endif
DEF_APF_TC(64)
DEF_APF_TC(128)
