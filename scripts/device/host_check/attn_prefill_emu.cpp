// Host emulation of kernels/attention_prefill.cu (attn_prefill_tile, as attn_prefill.rs launches
// it): one std::thread per CUDA thread, barriers for __syncthreads and warp shuffles; shared memory
// and `out` start as NaN. Checked against an f64 reference over the same cache values with the
// CUDA tests' tolerance (2e-5 + 1e-4 |ref|). Run by attn_prefill_emu.sh.
#include <cstdint>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <vector>
#include <thread>
#include <barrier>
#include <algorithm>
#include <random>
#include <functional>
#include <memory>
#define DEVI inline
#define __device__
struct uint4 { uint32_t x, y, z, w; };
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
struct __half { uint16_t v; };
struct __nv_bfloat16 { uint16_t v; };
template <typename T> inline T __ldg(const T* p) { T v; memcpy(&v, p, sizeof(T)); return v; }
inline float h2f(uint16_t h) {
    uint32_t s = (h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023;
    float v = e == 31 ? (m ? NAN : INFINITY)
            : e == 0 ? std::ldexp((float)m, -24) : std::ldexp((float)(m | 1024), (int)e - 25);
    return s ? -v : v;
}
inline float bf2f(uint16_t b) { uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f; }
inline float __expf(float x) { return std::exp(x); }
using std::min; using std::max;
struct Dim { int x, y, z; };
thread_local Dim threadIdx;
thread_local Dim blockIdx;
Dim gridDim;
std::barrier<>* g_block;
std::barrier<>* g_warp[8];
float g_shfl[256];
inline void __syncthreads() { g_block->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float v, int o) {
    int t = threadIdx.x, w = t / 32;
    g_shfl[t] = v;
    g_warp[w]->arrive_and_wait();
    float r = g_shfl[(t & ~31) | ((t & 31) ^ o)];
    g_warp[w]->arrive_and_wait();
    return r;
}
inline void pdl_trigger() {}
inline uint32_t __float_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
// The tensor-core variant's helpers: cvt.rna.tf32.f32 (nearest, ties away from zero, low 13 bits
// cleared) and a warp-collective mma.m16n8k8 TF32 from each lane's fragments (the PTX ISA layout).
#define APF_EMU
inline uint32_t apf_tf32(float x) { return (__float_as_uint(x) + 0x1000u) & ~0x1fffu; }
inline void apf_syncwarp() { g_warp[threadIdx.x / 32]->arrive_and_wait(); }
float g_mA[8][16][8], g_mB[8][8][8];
inline void apf_mma(float* c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    g_mA[w][g][t] = __uint_as_float(a0); g_mA[w][g + 8][t] = __uint_as_float(a1);
    g_mA[w][g][t + 4] = __uint_as_float(a2); g_mA[w][g + 8][t + 4] = __uint_as_float(a3);
    g_mB[w][t][g] = __uint_as_float(b0); g_mB[w][t + 4][g] = __uint_as_float(b1);
    g_warp[w]->arrive_and_wait();
    for (int e = 0; e < 4; e++) {
        int r = g + 8 * (e / 2), n = 2 * t + e % 2;
        float acc = c[e];
        for (int k = 0; k < 8; k++) acc += g_mA[w][r][k] * g_mB[w][k][n];
        c[e] = acc;
    }
    g_warp[w]->arrive_and_wait();
}
#include "kern.h"

static uint16_t f2h(float f) {
    if (f == 0) return 0;
    uint32_t s = f < 0; f = std::fabs(f);
    int e; float m = std::frexp(f, &e);
    int E = e - 1 + 15; if (E <= 0) return (uint16_t)(s << 15);
    uint32_t mant = (uint32_t)std::lround((m * 2 - 1) * 1024);
    if (mant == 1024) { mant = 0; E++; }
    return (uint16_t)((s << 15) | (E << 10) | mant);
}
static uint16_t f2bf(float f) { uint32_t u; memcpy(&u, &f, 4); return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16); }
template <typename T> struct Cache;
template <> struct Cache<__half> { using S = uint16_t; static S enc(float f) { return f2h(f); } static double dec(S v) { return h2f(v); } static const char* name() { return "f16"; } };
template <> struct Cache<__nv_bfloat16> { using S = uint16_t; static S enc(float f) { return f2bf(f); } static double dec(S v) { return bf2f(v); } static const char* name() { return "bf16"; } };
template <> struct Cache<float> { using S = float; static S enc(float f) { return f; } static double dec(S v) { return v; } static const char* name() { return "f32"; } };

static float tf32(float x) { return __uint_as_float(apf_tf32(x)); }
struct Cfg { int heads, kvh, hd; float softcap; int window; std::vector<int> lens, news; };

// TC: the tensor-core variant (T = float, 2 warps); its reference sees q * scale, K and V rounded
// to TF32 as the kernel does, so what remains is P's rounding (relative 2^-11 of each weight).
template <typename T, int D, int TR, int TK, bool TC = false>
static int run(const Cfg& c, std::mt19937& rng) {
    using C = Cache<T>;
    constexpr int BM = TC ? ApfTcShape<D, 2>::BM : ApfShape<D, TR, TK>::BM;
    constexpr int FLOATS = TC ? ApfTcShape<D, 2>::FLOATS : ApfShape<D, TR, TK>::FLOATS;
    std::uniform_real_distribution<float> U(-1, 1);
    int bs = 16, S = c.lens.size(), G = c.heads / c.kvh;
    int mb = 0; for (int l : c.lens) mb = std::max(mb, (l + bs - 1) / bs);
    int nblocks = mb * S;
    std::vector<uint32_t> tables(nblocks); for (int i = 0; i < nblocks; i++) tables[i] = nblocks - 1 - i;
    size_t row = (size_t)c.kvh * D;
    std::vector<typename C::S> kc(nblocks * bs * row), vc(nblocks * bs * row);
    for (auto& v : kc) v = C::enc(U(rng));
    for (auto& v : vc) v = C::enc(U(rng));
    std::vector<uint32_t> qs(S + 1, 0), sl(S);
    int most = 0;
    for (int i = 0; i < S; i++) { qs[i + 1] = qs[i] + c.news[i]; sl[i] = c.lens[i]; most = std::max(most, c.news[i]); }
    int nq = qs[S];
    std::vector<float> q((size_t)nq * c.heads * D); for (auto& v : q) v = 3 * U(rng);
    std::vector<float> out((size_t)nq * c.heads * D, NAN);
    float scale = 1.f / std::sqrt((float)D);
    PrefillArgs a{q.data(), kc.data(), vc.data(), qs.data(), sl.data(), tables.data(), out.data(),
                  c.heads, c.kvh, bs, mb, c.window, scale, c.softcap};
    int tiles = (most * G + BM - 1) / BM;
    gridDim = {tiles, c.kvh, S};
    int nt = TC ? 64 : APF_THREADS;
    std::vector<float4> smem((FLOATS + 3) / 4);
    std::barrier<> blk(nt), end(nt);
    g_block = &blk;
    std::vector<std::unique_ptr<std::barrier<>>> w;
    for (int i = 0; i < nt / 32; i++) { w.emplace_back(new std::barrier<>(32)); g_warp[i] = w.back().get(); }
    std::vector<std::thread> th;
    for (int t = 0; t < nt; t++) th.emplace_back([&, t] {
        threadIdx = {t, 0, 0};
        for (int z = 0; z < gridDim.z; z++) for (int y = 0; y < gridDim.y; y++) for (int x = 0; x < gridDim.x; x++) {
            if (t == 0) { float* f = (float*)smem.data(); for (size_t i = 0; i < smem.size() * 4; i++) f[i] = NAN; }
            end.arrive_and_wait();
            blockIdx = {x, y, z};
            if constexpr (TC) attn_prefill_tc_tile<D, 2>(a, (float*)smem.data());
            else attn_prefill_tile<T, D, TR, TK>(a, (float*)smem.data());
            end.arrive_and_wait();
        }
    });
    for (auto& x : th) x.join();
    // f64 reference.
    double worst = 0; int bad = 0;
    for (int s = 0; s < S; s++) {
        for (int i = 0; i < c.news[s]; i++) {
            int pos = c.lens[s] - c.news[s] + i, r = qs[s] + i;
            int lo = c.window > 0 ? std::max(0, pos - c.window + 1) : 0;
            for (int h = 0; h < c.heads; h++) {
                int kh = h / G;
                std::vector<double> sc;
                for (int t = lo; t <= pos; t++) {
                    size_t slot = (size_t)tables[s * mb + t / bs] * bs + t % bs;
                    double d = 0;
                    for (int e = 0; e < D; e++) {
                        float qe = q[((size_t)r * c.heads + h) * D + e];
                        double ke = C::dec(kc[slot * row + kh * D + e]);
                        if (TC) d += (double)tf32(qe * scale) * tf32((float)ke);
                        else d += (double)qe * ke;
                    }
                    if (!TC) d *= scale;
                    if (c.softcap > 0) d = c.softcap * std::tanh(d / c.softcap);
                    sc.push_back(d);
                }
                double m = *std::max_element(sc.begin(), sc.end()), z = 0;
                for (auto& v : sc) { v = std::exp(v - m); z += v; }
                for (int e = 0; e < D; e++) {
                    double o = 0;
                    for (int t = lo; t <= pos; t++) {
                        size_t slot = (size_t)tables[s * mb + t / bs] * bs + t % bs;
                        double ve = C::dec(vc[slot * row + kh * D + e]);
                        o += sc[t - lo] / z * (TC ? tf32((float)ve) : ve);
                    }
                    float g = out[((size_t)r * c.heads + h) * D + e];
                    double err = std::fabs(g - o);
                    // TC: P rounded to TF32 moves each weight by <= 2^-11 relative: |dO| <= 2^-11 max|v|.
                    double tol = TC ? 6e-4 : 2e-5 + 1e-4 * std::fabs(o);
                    if (!(err <= tol)) { if (bad++ < 3) printf("  bad s%d row%d h%d d%d: %g vs %g\n", s, i, h, e, g, o); }
                    if (err > worst || err != err) worst = err;
                }
            }
        }
    }
    printf("%s%s %d/%dx%d softcap %g window %d: max err %.3g %s\n", TC ? "tc " : "", C::name(), c.heads, c.kvh, D, c.softcap, c.window, worst, bad ? "FAIL" : "ok");
    return bad;
}

int main() {
    std::mt19937 rng(7);
    int fails = 0;
    std::vector<int> lens = {70, 20, 45}, news = {50, 20, 1};
    for (int win : {0, 24}) for (float cap : {0.f, 5.f}) {
        fails += run<float, 64, 2, 8>({9, 3, 64, cap, win, lens, news}, rng);
        fails += run<__half, 64, 2, 8>({14, 2, 64, cap, win, lens, news}, rng);
        fails += run<__nv_bfloat16, 128, 2, 8>({8, 2, 128, cap, win, lens, news}, rng);
        fails += run<float, 256, 2, 4>({6, 1, 256, cap, win, {40, 9}, {33, 5}}, rng);
        fails += run<float, 64, 0, 0, true>({9, 3, 64, cap, win, lens, news}, rng);
        fails += run<float, 128, 0, 0, true>({8, 2, 128, cap, win, lens, news}, rng);
    }
    fails += run<float, 128, 2, 8>({4, 4, 128, 0, 0, {150}, {150}}, rng);
    // Many key tiles; a window that starts the key walk past 0 and leaves whole tiles masked for
    // some rows of a block; a prompt after a cached prefix.
    fails += run<float, 64, 2, 8>({9, 3, 64, 0, 100, {300, 130}, {280, 17}}, rng);
    fails += run<__nv_bfloat16, 64, 2, 8>({14, 2, 64, 0, 0, {260}, {200}}, rng);
    fails += run<float, 64, 0, 0, true>({14, 2, 64, 0, 100, {300, 130}, {280, 17}}, rng);
    fails += run<__half, 256, 2, 4>({24, 4, 256, 0, 0, {80, 3}, {64, 3}}, rng);
    printf(fails ? "FAILED\n" : "all ok\n");
    return fails != 0;
}
