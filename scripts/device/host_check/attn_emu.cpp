// Host emulation of decode attention as the host launches it (kernels/attention.cu attn_decode,
// then attn_combine when the launch has more than one split; or, where attn_plan.rs would, the
// cluster form: 8 split blocks run together, merged by attention_cluster.cuh's atc_merge through
// each other's shared memory): one std::thread per CUDA thread, barriers for __syncthreads, warp
// shuffles and the cluster barrier; blocks (clusters) run one after another. The split count
// is chosen as attn.rs does (choose_decode_splits, 132 SMs, DECODE_MIN_KEYS 32) from a bound that
// may exceed the real lengths (a graph bucket). Every buffer the kernels may leave unwritten
// starts as NaN (out, the partials), and register arrays the kernel declares without
// initialising (Kv8 kr/vr: run.sh inserts EMU_POISON after their declaration) start as NaN bit
// patterns, as stale registers may on the GPU: a result that depends on either shows as NaN.
// f16, bf16 and f32 caches; checked against an f64 reference over the same cache values. The
// key staging (attention_stage.cuh) runs with the host's stage_keys, and every cache read a
// thread makes before its pdl_wait() is checked against the rows the previous kernel writes (the
// K/V rows at each sequence's last position): one such read is a failure.
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
#include <atomic>
#define DEVI inline
#define __device__
#define __restrict__
#define __global__
struct uint4 { uint32_t x, y, z, w; };
struct float4 { float x, y, z, w; };
struct __half { uint16_t v; };
struct __nv_bfloat16 { uint16_t v; };
// Reads before pdl_wait() (programmatic dependent launch) may not touch what the previous kernel
// writes: the K/V rows at each sequence's last position (set per launch in g_forbidden). Every
// cache read (__ldg, the staging copies) is checked against them while the thread has not waited.
std::vector<std::pair<const char*, const char*>> g_forbidden;
std::atomic<int> g_early_reads{0};
thread_local bool g_waited;
inline void emu_read(const void* p, size_t n) {
    if (g_waited) return;
    const char* c = (const char*)p;
    for (auto& [lo, hi] : g_forbidden)
        if (c < hi && c + n > lo) g_early_reads++;
}
template <typename T> inline T __ldg(const T* p) { emu_read(p, sizeof(T)); T v; memcpy(&v, p, sizeof(T)); return v; }
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
Dim blockDim;
// The calling thread's block: its barrier, warp barriers, shuffle slots and shared memory.
struct EmuBlock {
    std::barrier<> blk;
    std::vector<std::unique_ptr<std::barrier<>>> warps;
    float shfl[256];
    float4 smem[16384];  // 256 KiB: more than any decode instantiation's shared arrays
    uint4 stage[2 * 16 * 128];  // the dynamic staging area at its largest (attention_stage.cuh)
    explicit EmuBlock(int nt) : blk(nt) {
        for (int i = 0; i < nt / 32; i++) warps.emplace_back(new std::barrier<>(32));
    }
};
thread_local EmuBlock* g_blk;
inline float4* emu_smem() { return g_blk->smem; }
// The cluster being run (cluster launches only): its barrier and blocks, and this block's rank.
std::barrier<>* g_cluster;
std::vector<std::unique_ptr<EmuBlock>>* g_cluster_blocks;
thread_local uint32_t g_rank;
#define ATD_CLUSTER 8
inline uint32_t cluster_rank() { return g_rank; }
inline void cluster_arrive() { g_cluster->arrive_and_wait(); }  // arrive + wait: one barrier phase
inline void cluster_wait() {}
inline float cluster_load(const float* p, uint32_t rank) {
    ptrdiff_t off = (const char*)p - (const char*)g_blk->smem;
    return *(const float*)((const char*)(*g_cluster_blocks)[rank]->smem + off);
}
inline void __syncthreads() { g_blk->blk.arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float v, int o) {
    int t = threadIdx.x, w = t / 32;
    g_blk->shfl[t] = v;
    g_blk->warps[w]->arrive_and_wait();
    float r = g_blk->shfl[(t & ~31) | ((t & 31) ^ o)];
    g_blk->warps[w]->arrive_and_wait();
    return r;
}
inline float warp_sum(float v) { for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o); return v; }
inline float warp_max(float v) { for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o)); return v; }
inline void pdl_wait() { g_waited = true; }
// attention_stage.cuh's primitives: the copy is done at once, so waiting is a no-op.
inline uint4* atd_stage_smem() { return g_blk->stage; }
inline void atd_cp16(uint4* dst, const void* src) { emu_read(src, 16); memcpy(dst, src, 16); }
inline void atd_cp_wait() {}
inline void pdl_trigger() {}
// IEEE single ops and common.cuh's Rust-cast rounding, for quant32_warp (the fused Q8 output).
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline int sat_round_i32(float x) {
    float r = std::round(x);
    if (r != r) return 0;
    return (int)std::fmin(std::fmax(r, -2147483648.f), 2147483520.f);
}
using std::isinf;
#define EMU_POISON(x) memset(&(x), 0xff, sizeof(x))
#define __shared__ static
#include "kern.h"  // generated by run.sh from kernels/attention.cu
#undef __shared__

// Runs `body` for every block of `grid` with `nt` threads: the threads are started once and walk
// the blocks in order, with a barrier between blocks (their static __shared__ arrays are reused).
static void launch(Dim grid, int nt, const std::function<void()>& body) {
    blockDim = {nt, 1, 1};
    std::barrier<> end(nt);
    auto b = std::make_unique<EmuBlock>(nt);
    std::vector<std::thread> th;
    for (int t = 0; t < nt; t++) th.emplace_back([&, t] {
        threadIdx = {t, 0, 0};
        g_blk = b.get();
        for (int z = 0; z < grid.z; z++) for (int y = 0; y < grid.y; y++) for (int x = 0; x < grid.x; x++) {
            blockIdx = {x, y, z};
            g_waited = false;
            body();
            end.arrive_and_wait();
        }
    });
    for (auto& x : th) x.join();
}

// Runs `body` as clusters of grid.z blocks (the whole z extent): for each (x, y) the grid.z * nt
// threads of one cluster run together, each block with its own barriers and shared memory.
static void launch_cluster(Dim grid, int nt, const std::function<void()>& body) {
    blockDim = {nt, 1, 1};
    int cs = grid.z;
    for (int y = 0; y < grid.y; y++) for (int x = 0; x < grid.x; x++) {
        std::vector<std::unique_ptr<EmuBlock>> blocks;
        for (int r = 0; r < cs; r++) blocks.emplace_back(new EmuBlock(nt));
        std::barrier<> cl(cs * nt);
        g_cluster = &cl;
        g_cluster_blocks = &blocks;
        std::vector<std::thread> th;
        for (int t = 0; t < cs * nt; t++) th.emplace_back([&, t] {
            threadIdx = {t % nt, 0, 0};
            blockIdx = {x, y, t / nt};
            g_rank = (uint32_t)(t / nt);
            g_blk = blocks[t / nt].get();
            g_waited = false;
            body();
        });
        for (auto& th1 : th) th1.join();
    }
}

static uint16_t f2h(float f) {  // round to nearest f16 (normal range only, enough here)
    if (f == 0) return 0;
    uint32_t s = f < 0; f = std::fabs(f);
    int e; float m = std::frexp(f, &e);  // f = m * 2^e, m in [0.5,1)
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

// attn.rs choose_decode_splits with 132 SMs.
static int host_splits(int blocks, int keys, bool big_group) {
    int per_sm = big_group ? 2 : 3;
    int s = std::min(per_sm * 132 / std::max(blocks, 1), (keys + 31) / 32);
    return std::clamp(s, 1, 256);
}

// attn_plan.rs stage_keys on sm_90 at the default POCKET_ATTN_STAGE (12): 16-bit caches only.
static int host_stage(bool half, int hd, int keys, int splits) {
    if (!half) return 0;
    int groups = 128 / (hd / 8), per = std::max((keys + splits - 1) / splits, 32);
    return std::min((per + groups - 1) / groups, 12);
}

struct Cfg { int heads, kvh, hd; float softcap; int window; std::vector<int> lens; int bound; };

// attn_plan.rs cluster_merge on sm_90: split launches of groups up to 4 at bounds up to 1024 keys.
static bool host_cluster(int splits, int keys, int G) { return splits > 1 && G <= 4 && keys <= 1024; }

template <typename T>
static int run(const Cfg& c, std::mt19937& rng, bool cluster_ok) {
    using C = Cache<T>;
    std::uniform_real_distribution<float> U(-1, 1);
    int bs = 16, S = c.lens.size(), G = c.heads / c.kvh;
    int mb = 0; for (int l : c.lens) mb = std::max(mb, (l + bs - 1) / bs);
    int nblocks = mb * S;
    std::vector<uint32_t> tables(nblocks); for (int i = 0; i < nblocks; i++) tables[i] = nblocks - 1 - i;
    size_t row = (size_t)c.kvh * c.hd;
    std::vector<typename C::S> kc(nblocks * bs * row), vc(nblocks * bs * row);
    for (auto& v : kc) v = C::enc(U(rng));
    for (auto& v : vc) v = C::enc(U(rng));
    std::vector<float> q(S * c.heads * c.hd); for (auto& v : q) v = 2 * U(rng);
    std::vector<uint32_t> qs(S + 1), sl(S);
    for (int i = 0; i <= S; i++) qs[i] = i;
    int max_len = 0;
    for (int i = 0; i < S; i++) { sl[i] = c.lens[i]; max_len = std::max(max_len, c.lens[i]); }
    int bound = std::max(max_len, c.bound);
    int keys = c.window > 0 ? std::min(bound, c.window) : bound;
    int splits = host_splits(S * c.kvh, keys, G > 4);
    bool cluster = cluster_ok && host_cluster(splits, keys, G);
    if (cluster_ok && !cluster) return 0;  // the split launch, already run
    if (cluster) splits = ATD_CLUSTER;
    std::vector<float> out(S * c.heads * c.hd, NAN), pacc(S * c.heads * splits * c.hd, NAN), pml(S * c.heads * splits * 2, NAN);
    float scale = 1.f / std::sqrt((float)c.hd);
    AttnArgs a{q.data(), kc.data(), vc.data(), qs.data(), sl.data(), tables.data(), out.data(), pacc.data(), pml.data(),
               S, c.heads, c.kvh, c.hd, bs, mb, c.window, splits, scale, c.softcap, 32};
    a.stage_keys = host_stage(sizeof(T) == 2, c.hd, keys, splits);
    g_forbidden.clear();
    for (int s = 0; s < S; s++) {
        int pos = c.lens[s] - 1;
        size_t slot = (size_t)tables[s * mb + pos / bs] * bs + pos % bs;
        size_t sz = sizeof(typename C::S);
        for (const auto* base : {(const char*)kc.data(), (const char*)vc.data()})
            g_forbidden.push_back({base + slot * row * sz, base + (slot + 1) * row * sz});
    }
    int early0 = g_early_reads.load();
    if (cluster) {
        launch_cluster({S, c.kvh, splits}, 128, [&] { attn_decode<T, 4, ATD_CLUSTER, 128>(a); });
    } else {
        launch({S, c.kvh, splits}, 128, [&] { if (G > 4) attn_decode<T, 8, 0, 128>(a); else attn_decode<T, 4, 0, 128>(a); });
    }
    if (splits > 1 && !cluster) {
        int nt = std::min((c.hd + 31) / 32 * 32, 256);
        launch({S, c.heads, 1}, nt, [&] { attn_combine(pacc.data(), pml.data(), out.data(), c.heads, c.hd, splits, sl.data(), c.window, 32, nullptr, nullptr, nullptr, nullptr); });
    }
    int fails = 0;
    if (int e = g_early_reads.load() - early0) {
        printf("  FAIL %d reads of the previous kernel's K/V rows before pdl_wait\n", e);
        fails += e;
    }
    double worst = 0;
    for (int s = 0; s < S; s++) for (int h = 0; h < c.heads; h++) {
        int pos = c.lens[s] - 1, lo = c.window > 0 ? std::max(0, pos - c.window + 1) : 0;
        int kvh = h / G;
        std::vector<double> sc;
        for (int j = lo; j <= pos; j++) {
            size_t slot = (size_t)tables[s * mb + j / bs] * bs + j % bs;
            double d = 0; for (int i = 0; i < c.hd; i++) d += (double)(q[(s * c.heads + h) * c.hd + i] * scale) * C::dec(kc[slot * row + kvh * c.hd + i]);
            if (c.softcap > 0) d = c.softcap * std::tanh(d / c.softcap);
            sc.push_back(d);
        }
        double M = *std::max_element(sc.begin(), sc.end()), L = 0; for (auto& v : sc) { v = std::exp(v - M); L += v; }
        for (int i = 0; i < c.hd; i++) {
            double o = 0;
            for (int j = lo; j <= pos; j++) { size_t slot = (size_t)tables[s * mb + j / bs] * bs + j % bs; o += sc[j - lo] * C::dec(vc[slot * row + kvh * c.hd + i]); }
            o /= L;
            size_t idx = (s * c.heads + h) * c.hd + i;
            double e = std::fabs(o - out[idx]);
            if (!(e <= 1e-5 + 1e-4 * std::fabs(o))) {
                if (fails < 4) printf("  FAIL out[%zu] (seq %d head %d dim %d): %f vs f64 %f\n", idx, s, h, i, out[idx], o);
                fails++;
            }
            if (e == e) worst = std::max(worst, e);
        }
    }
    printf("%s %d/%dx%d lens [", C::name(), c.heads, c.kvh, c.hd);
    for (int i = 0; i < S; i++) printf("%s%d", i ? ", " : "", c.lens[i]);
    printf("] bound %d window %d softcap %g splits %d%s staged %d: worst %.2e, %d failures\n", bound, c.window, c.softcap, splits, cluster ? " (cluster)" : "", a.stage_keys, worst, fails);
    return fails;
}

int main() {
    std::mt19937 rng(5);
    int fails = 0;
    std::vector<Cfg> cfgs = {
        // the failing cuda_attention case, then with a graph bucket bound
        {32, 8, 128, 0, 0, {1000, 37, 300}, 1000}, {32, 8, 128, 0, 0, {1000, 37, 300}, 16384},
        // Qwen2.5-0.5B (group 7, hd 64) and Qwen3.5-27B (group 6, hd 256), sequences of different lengths
        {14, 2, 64, 0, 0, {640, 37, 300, 5, 1}, 0}, {14, 2, 64, 0, 0, {640, 37, 300, 5, 1}, 4096},
        {24, 4, 256, 0, 0, {1000, 37, 300, 2}, 0}, {24, 4, 256, 0, 0, {1000, 37, 300, 2}, 16384},
        // groups 1..8 at each head size, windows, softcap, one split and many
        {8, 2, 128, 0, 0, {300, 37, 1}, 0}, {14, 2, 64, 30, 0, {513}, 0}, {4, 4, 256, 0, 100, {700, 5}, 0},
        {16, 2, 64, 0, 0, {129, 33}, 0}, {2, 1, 64, 0, 0, {77}, 0}, {6, 1, 128, 0, 0, {17, 64, 65}, 0},
        {10, 2, 128, 0, 0, {200, 31}, 0}, {3, 1, 256, 0, 0, {95, 1}, 2048}, {16, 4, 64, 0, 40, {1000, 7}, 0},
        {64, 8, 128, 0, 0, {5, 3}, 0},
    };
    // Each case as the split launch, then again as the cluster where the host would choose it
    // on sm_90.
    for (bool cl : {false, true}) {
        for (auto& c : cfgs) fails += run<__half>(c, rng, cl);
        for (auto& c : cfgs) fails += run<__nv_bfloat16>(c, rng, cl);
        for (auto& c : cfgs) fails += run<float>(c, rng, cl);
    }
    printf("%d failures\n", fails);
    return fails != 0;
}
