// Host emulation of the one-row GEMVs: kernels/gemv_fp8.cu's gemv_fp8_row1 (every FP8_ROW1_ALL
// variant) and gemv_fp8_row1_mma (fp8_row_mma.cuh, the tensor-core variants), and kernels/gemv.cu's
// gemv_h: one fiber per CUDA thread, barriers for __syncthreads, __syncwarp, shuffles and the
// warp-collective mma, blocks one after another; against an f64 reference. Sources are extracted
// as they are by gemv_emu.sh.
#include <cstdint>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <vector>
#include <ucontext.h>
#include <random>
#include <functional>
#include <algorithm>
#include <string>
#define DEVI inline
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __constant__ static
struct uint4 { uint32_t x, y, z, w; };
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return {a, b, c, d}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
template <typename T> inline T __ldg(const T* p) { T v; memcpy(&v, p, sizeof(T)); return v; }
template <typename T> inline T __ldcg(const T* p) { return __ldg(p); }
#define __align__(n) __attribute__((aligned(n)))
inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
    uint8_t b[8]; memcpy(b, &x, 4); memcpy(b + 4, &y, 4);
    uint32_t r = 0;
    for (int k = 0; k < 4; k++) r |= (uint32_t)b[(s >> (4 * k)) & 7] << (8 * k);
    return r;
}
inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
inline uint32_t __float_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline void __trap() { fprintf(stderr, "__trap\n"); abort(); }
// f16 through the compiler's _Float16 (IEEE binary16, round to nearest even, subnormals kept).
struct __half { uint16_t v; };
struct __half2_raw { uint16_t x, y; };
struct __half2 { uint16_t x, y; operator __half2_raw() const { return {x, y}; } };
inline uint16_t f2h_bits(float f) { _Float16 h = (_Float16)f; uint16_t u; memcpy(&u, &h, 2); return u; }
inline float h2f_bits(uint16_t u) { _Float16 h; memcpy(&h, &u, 2); return (float)h; }
inline __half __ushort_as_half(uint16_t v) { return {v}; }
inline float __half2float(__half h) { return h2f_bits(h.v); }
inline __half2 __floats2half2_rn(float a, float b) { return {f2h_bits(a), f2h_bits(b)}; }
inline float2 __half22float2(__half2 h) { return {h2f_bits(h.x), h2f_bits(h.y)}; }
using std::min; using std::max;
#include "fibers.h"
inline float warp_sum(float v) { for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o); return v; }
inline float warp_max(float v) { for (int o = 16; o > 0; o >>= 1) v = std::fmax(v, __shfl_xor_sync(0xffffffffu, v, o)); return v; }
inline void pdl_wait() {}
inline void pdl_trigger() {}
template <int MINB = 0> inline void pdl_trigger_early() {}
template <int MINB = 0> inline void pdl_trigger_late() {}
// cvt.rn.f16x2.e4m3x2 on the host: each code's exact f16 (E4M3 NaN -> f16 NaN), low byte to
// the low half.
inline uint32_t emu_e4m3_f16(uint32_t c) {
    uint32_t s = (c >> 7) & 1, e = (c >> 3) & 15, m = c & 7, h;
    if (e == 15 && m == 7) h = 0x7e00;
    else if (e > 0) h = ((e + 8) << 10) | (m << 7);
    else if (m == 0) h = 0;
    else { int k = m >= 4 ? 2 : m >= 2 ? 1 : 0; h = ((k + 6) << 10) | (((m - (1u << k)) << (10 - k)) & 1023); }
    return h | (s << 15);
}
inline uint32_t emu_cvt_e4m3x2(uint32_t v) { return emu_e4m3_f16(v & 255) | (emu_e4m3_f16((v >> 8) & 255) << 16); }
// mma.sync.m16n8k16 f32.f16.f16.f32 for the calling lane's warp (PTX ISA fragment layout): every
// lane deposits its fragments, then computes its own d from the whole matrices (products exact,
// summed in f64 and rounded once; the tensor cores' own summation order and rounding are not
// modelled: the reference's bound covers both).
float g_mA[8][16][16], g_mB[8][16][8], g_mC[8][16][8];
inline void emu_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    auto lo = [](uint32_t v) { return h2f_bits(v & 0xffff); };
    auto hi = [](uint32_t v) { return h2f_bits(v >> 16); };
    g_mA[w][g][2 * t] = lo(a[0]); g_mA[w][g][2 * t + 1] = hi(a[0]);
    g_mA[w][g + 8][2 * t] = lo(a[1]); g_mA[w][g + 8][2 * t + 1] = hi(a[1]);
    g_mA[w][g][2 * t + 8] = lo(a[2]); g_mA[w][g][2 * t + 9] = hi(a[2]);
    g_mA[w][g + 8][2 * t + 8] = lo(a[3]); g_mA[w][g + 8][2 * t + 9] = hi(a[3]);
    g_mB[w][2 * t][g] = lo(b0); g_mB[w][2 * t + 1][g] = hi(b0);
    g_mB[w][2 * t + 8][g] = lo(b1); g_mB[w][2 * t + 9][g] = hi(b1);
    bar_wait(g_warp[w]);
    for (int e = 0; e < 4; e++) {
        const int r = g + 8 * (e / 2), n = 2 * t + e % 2;
        double acc = d[e];
        for (int k = 0; k < 16; k++) acc += (double)g_mA[w][r][k] * g_mB[w][k][n];
        d[e] = (float)acc;
    }
    bar_wait(g_warp[w]);
}
#ifdef EMU_CVT
#define __CUDA_ARCH__ 900
#endif
// Reads of 16-byte weight chunks, per chunk (ld_stream16 counts them when set).
uint8_t* g_reads = nullptr;
const uint8_t* g_base = nullptr;
size_t g_nchunks = 0;
inline uint4 ld_stream16(const void* p) {
    uint4 v;
    memcpy(&v, p, 16);
    if (g_reads) {
        size_t i = ((const uint8_t*)p - g_base) / 16;
        if (i >= g_nchunks) { fprintf(stderr, "weight read out of bounds\n"); abort(); }
        g_reads[i]++;
    }
    return v;
}
#define __shared__ static
#include "kern.h"  // generated by gemv_emu.sh from kernels/
#undef __shared__

// Runs `blocks` (block indices of a one-dimensional grid of `grid`) one after another.
void launch_blocks(const std::vector<int>& blocks, int grid, int T, std::function<void()> body) {
    launch_blocks2(blocks, {(unsigned)grid, 1, 1}, T, std::move(body));
}
// The first and last `edge` blocks and `mid` random ones (all of them if that is as many).
std::vector<int> sample_blocks(int grid, int edge, int mid, std::mt19937& rng) {
    std::vector<int> b;
    if (grid <= 2 * edge + mid) {
        for (int i = 0; i < grid; i++) b.push_back(i);
        return b;
    }
    for (int i = 0; i < edge; i++) b.push_back(i), b.push_back(grid - 1 - i);
    std::uniform_int_distribution<int> D(edge, grid - 1 - edge);
    for (int i = 0; i < mid; i++) b.push_back(D(rng));
    std::sort(b.begin(), b.end());
    b.erase(std::unique(b.begin(), b.end()), b.end());
    return b;
}

double e4m3(uint8_t c) {
    int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1 + m / 8.0, e - 7);
    return s ? -v : v;
}
double e5m2(uint8_t c) {
    int s = c >> 7, e = (c >> 2) & 31, m = c & 3;
    double v = e == 0 ? std::ldexp(m / 4.0, -14) : std::ldexp(1 + m / 4.0, e - 15);
    return s ? -v : v;
}
uint16_t f2bf(float f) { uint32_t u; memcpy(&u, &f, 4); return (uint16_t)((u + 0x8000) >> 16); }

int fails = 0;
uint64_t g_rng = 0x9E3779B97F4A7C15ull;
inline uint32_t xs32() { g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17; return (uint32_t)(g_rng >> 16); }
inline float unif() { return (xs32() & 0xffffff) / 8388608.0f - 1.0f; }  // [-1, 1)

// The column of code `b` (byte index in the row) in the device's tile-lane order (fp8_row.cuh
// `fp8_lanes`): chunk k of a whole 128-column tile holds columns 4k + 32i + m at byte 4i + m.
int lane_col(int b, int cols, bool lanes) {
    const int whole = lanes ? (cols / 128) * 128 : 0;
    if (b >= whole) return b;
    const int tile = b / 128, k = (b % 128) / 16, i = (b % 16) / 4, m = b % 4;
    return 128 * tile + 4 * k + 32 * i + m;
}

// Compares the rows of the emulated blocks with the f64 reference (NaN or off by more than
// 1e-5 of the row's |w x| sum fails), checks that no other row was written, and that every
// 16-byte chunk of weight was read as often as `want_reads` says: no column or row skipped.
void report(const char* what, int rows, int R, const std::vector<int>& blocks,
            const std::vector<float>& out, std::function<void(int, double&, double&)> ref,
            size_t per_row, std::function<int(int, size_t)> want_reads) {
    std::vector<uint8_t> in(rows, 0);
    for (int b : blocks)
        for (int i = 0; i < R; i++)
            if (b * R + i < rows) in[b * R + i] = 1;
    double worst = 0;
    long bad_writes = 0, bad_reads = 0, nin = 0;
    for (int r = 0; r < rows; r++) {
        if (!in[r]) { bad_writes += !std::isnan(out[r]); continue; }
        nin++;
        double want, mag;
        ref(r, want, mag);
        double err = std::isnan(out[r]) ? INFINITY : std::fabs(out[r] - want) / (1e-5 * mag + 1e-6);
        worst = std::max(worst, err);
    }
    for (int r = 0; r < rows; r++)
        for (size_t c = 0; c < per_row; c++) bad_reads += g_reads[(size_t)r * per_row + c] != want_reads(r, c);
    bool ok = worst <= 1 && bad_writes == 0 && bad_reads == 0;
    printf("%-30s [%6d x %5zu] %5zu/%d blocks, %6ld rows: worst err/bound %.4f, stray writes %ld, "
           "wrong read counts %ld %s\n",
           what, rows, per_row * 16, blocks.size(), (rows + R - 1) / R, nin, worst, bad_writes,
           bad_reads, ok ? "ok" : "FAIL");
    if (!ok) fails++;
}

// The FP8 one-row kernels' kinds: the warp-per-rows template (R rows per warp, U steps) or the
// tensor-core one (M slabs of 16 rows per block, U tiles).
enum class Kind { Row1, Mma };

// FP8 weight of row parts stacked as pocket-layers' stacked_weight lays them out: codes one part
// after another, each part's [ceil(rows_i / 128), ceil(cols / 128)] tile scales after the
// previous part's (parts but the last have rows % 128 == 0). The reference reads each part's own
// scales by the row's index inside its part.
template <Kind K, int E5M2, bool TILED, int DEC, int R, int U>
void check_fp8(std::vector<int> parts, int cols, bool lanes, int edge = 1 << 20, int mid = 0) {
    // Rows per block: 4 warps of R rows, or M = R slabs of 16.
    constexpr int RB = K == Kind::Row1 ? 4 * R : 16 * R;
    int rows = 0;
    for (int p : parts) rows += p;
    std::vector<uint8_t> w((size_t)rows * cols);
    for (auto& c : w) { c = xs32() & 255; if ((c & 0x7f) == 0x7f || (E5M2 && ((c >> 2) & 31) == 31)) c = 0; }
    int tc = (cols + 127) / 128;
    std::vector<std::vector<float>> psc;
    std::vector<float> sc;
    for (int p : parts) {
        std::vector<float> s(((p + 127) / 128) * tc);
        for (auto& v : s) v = std::ldexp(1.0f + 0.5f * unif(), (int)(unif() * 4));
        sc.insert(sc.end(), s.begin(), s.end());
        psc.push_back(std::move(s));
    }
    // Activations over several binades (the mma variants scale each tile by a power of two).
    std::vector<float> x(cols);
    for (auto& v : x) v = std::ldexp(unif(), (int)(xs32() % 9) - 4);
    float tscale = 0.75f;
    std::vector<float> out(rows, NAN);
    const size_t per_row = cols / 16;
    std::vector<uint8_t> reads(w.size() / 16, 0);
    g_reads = reads.data(); g_base = w.data(); g_nchunks = reads.size();
    fp8_lanes = lanes ? 1 : 0;
    std::mt19937 rng(rows ^ cols);
    const int grid = (rows + RB - 1) / RB;
    auto blocks = sample_blocks(grid, edge, mid, rng);
    const RmsFold nofold{};
    launch_blocks(blocks, grid, 128, [&] {
        if constexpr (K == Kind::Row1)
            gemv_fp8_row1<E5M2, TILED, DEC, R, U, 1>(w.data(), sc.data(), tscale, x.data(), out.data(), rows, cols, nofold);
        else
            gemv_fp8_row1_mma<E5M2, TILED, R, U, 1>(w.data(), sc.data(), tscale, x.data(), out.data(), rows, cols, nofold);
    });
    char name[80];
    snprintf(name, 80, "fp8 %s%s %s%dU%d d%d%s%s", E5M2 ? "e5m2" : "e4m3", TILED ? "_b" : "_t",
             K == Kind::Row1 ? "R" : "mma M", R, U, DEC, lanes ? " lanes" : "", parts.size() > 1 ? " st" : "");
    // Rows of the sampled blocks map onto weight rows (a missing last row re-reads the last);
    // a row-group of Row1 wholly past the end reads nothing.
    std::vector<int> slots(rows, 0);
    for (int b : blocks)
        for (int i = 0; i < RB; i++) {
            int r = b * RB + i;
            if (K == Kind::Row1 && r - i % R >= rows) continue;
            slots[std::min(r, rows - 1)]++;
        }
    // Mma: the last tile's lanes past the row's end re-read its last chunk.
    const int extra = K == Kind::Mma ? (int)(8 * ((per_row + 7) / 8) - per_row) : 0;
    report(name, rows, RB, blocks, out, [&](int r, double& s, double& m) {
        int p = 0, rr = r;
        while (rr >= parts[p]) rr -= parts[p++];
        s = 0; m = 0;
        for (int b = 0; b < cols; b++) {
            const int c = lane_col(b, cols, lanes);
            uint8_t q = w[(size_t)r * cols + b];
            double v = (E5M2 ? e5m2(q) : e4m3(q)) * (TILED ? psc[p][(rr / 128) * tc + c / 128] : tscale);
            s += v * x[c]; m += std::fabs(v * x[c]);
        }
    }, per_row, [&](int r, size_t c) { return slots[r] * (1 + (c + 1 == per_row ? extra : 0)); });
    g_reads = nullptr;
}

template <bool BF, int R, int T>
void check_h(int rows, int cols, int edge = 1 << 20, int mid = 0) {
    std::vector<uint16_t> w((size_t)rows * cols);
    for (size_t i = 0; i < w.size(); i++) {
        if (BF) w[i] = f2bf(unif());
        else  // random normal f16: sign, exponent 10..17, mantissa
            w[i] = (uint16_t)(((xs32() & 1) << 15) | ((10 + xs32() % 8) << 10) | (xs32() & 1023));
    }
    auto wd = [&](size_t i) -> double {
        if (!BF) return h2f_bits(w[i]);
        uint32_t u = (uint32_t)w[i] << 16; float f; memcpy(&f, &u, 4); return f;
    };
    std::vector<float> x(cols);
    for (auto& v : x) v = unif();
    std::vector<float> out(rows, NAN);
    std::vector<uint8_t> reads(w.size() * 2 / 16, 0);
    g_reads = reads.data(); g_base = reinterpret_cast<const uint8_t*>(w.data()); g_nchunks = reads.size();
    std::mt19937 rng(rows ^ cols);
    const int grid = (rows + R - 1) / R;
    auto blocks = sample_blocks(grid, edge, mid, rng);
    launch_blocks(blocks, grid, T, [&] {
        gemv_h<BF, R, T>(reinterpret_cast<const uint8_t*>(w.data()), x.data(), out.data(), rows, cols);
    });
    std::vector<int> slots(rows, 0);
    for (int b : blocks)
        for (int i = 0; i < R; i++) slots[std::min(b * R + i, rows - 1)]++;
    char name[64];
    snprintf(name, 64, "gemv_h %s r%d", BF ? "bf16" : "f16", R);
    report(name, rows, R, blocks, out, [&](int r, double& s, double& m) {
        s = 0; m = 0;
        for (int c = 0; c < cols; c++) { double p = wd((size_t)r * cols + c) * x[c]; s += p; m += std::fabs(p); }
    }, (size_t)cols * 2 / 16, [&](int r, size_t) { return slots[r]; });
    g_reads = nullptr;
}

// Every one-row variant of kernels/gemv_fp8.cu (FP8_ROW1_ALL: R, U; the tensor-core ones:
// M, U, on the sm_89+ path only) on one case, in both weight orders.
template <int E5M2, bool TILED, int DEC>
void all_variants(std::vector<int> parts, int cols, int edge = 1 << 20, int mid = 0) {
    for (bool lanes : {false, true}) {
        check_fp8<Kind::Row1, E5M2, TILED, DEC, 4, 2>(parts, cols, lanes, edge, mid);
        check_fp8<Kind::Row1, E5M2, TILED, DEC, 8, 1>(parts, cols, lanes, edge, mid);
        check_fp8<Kind::Row1, E5M2, TILED, DEC, 4, 4>(parts, cols, lanes, edge, mid);
        check_fp8<Kind::Row1, E5M2, TILED, DEC, 8, 2>(parts, cols, lanes, edge, mid);
        check_fp8<Kind::Row1, E5M2, TILED, DEC, 4, 6>(parts, cols, lanes, edge, mid);
#ifdef EMU_CVT
        if (DEC == 1) {
            check_fp8<Kind::Mma, E5M2, TILED, DEC, 1, 6>(parts, cols, lanes, edge, mid);
            check_fp8<Kind::Mma, E5M2, TILED, DEC, 2, 3>(parts, cols, lanes, edge, mid);
        }
#endif
    }
}

int main(int argc, char** argv) {
    bool big = argc < 2 || std::string(argv[1]) != "small";
    all_variants<0, true, 1>({37}, 8208);  // a second column step of every variant
    all_variants<0, true, 0>({37}, 8208);
    all_variants<0, true, 1>({1027}, 5120, 4, 8);
    all_variants<0, true, 1>({131}, 4112);
    all_variants<0, true, 1>({131}, 1040);  // a partial last tile in both directions
    all_variants<0, true, 1>({256, 131}, 1040);  // stacked, partial last tile of the last part
    all_variants<1, true, 1>({3}, 16);
    all_variants<1, false, 1>({67}, 512);
    all_variants<1, false, 0>({67}, 512);
    all_variants<0, false, 1>({9}, 1040);
    all_variants<0, false, 0>({9}, 1040);
    all_variants<1, true, 1>({5}, 2048);
    check_h<true, 1, 256>(7, 8200);
    check_h<true, 1, 256>(7, 8208);
    check_h<true, 1, 256>(48, 520);
    check_h<true, 4, 128>(11, 4104);
    check_h<true, 4, 128>(1101, 4112, 8, 16);
    check_h<false, 1, 256>(5, 1032);
    check_h<false, 4, 128>(13, 8);
    if (big) {
        // Qwen3.5-27B decode shapes: the FP8 E4M3 128x128 GEMVs, [qkv | z] stacked.
        all_variants<0, true, 1>({10240, 6144}, 5120, 24, 40);
        all_variants<0, true, 1>({5120}, 6144, 24, 40);
        all_variants<0, true, 1>({5120}, 17408, 24, 40);
        all_variants<0, true, 1>({34816}, 5120, 24, 40);
        all_variants<0, true, 1>({14336}, 5120, 24, 40);
        // [b | a] stacked BF16 (96 rows, r1, every block) and the LM head (r4), plus odd counts.
        check_h<true, 1, 256>(96, 5120);
        check_h<true, 4, 128>(248320, 5120, 24, 40);
        check_h<true, 4, 128>(248321, 5120, 8, 8);
        check_h<true, 4, 128>(248323, 5120, 8, 8);
        check_h<true, 4, 128>(1025, 5120, 8, 8);
    }
    printf("%s\n", fails ? "FAILURES" : "all ok");
    return fails != 0;
}
