// dp4a work items of the formats with 16-byte or word weight loads (repacked Q4_0, Q8_0, Q6_K;
// reordered Q4_K; Q4_1) for the decode GEMV (kernels/gemv.cu, which states the work-item
// contract); the other formats' work items and the dp4a building blocks are in dot_q8.cuh.
#pragma once
#include "common.cuh"
#include "dot_q8.cuh"

struct DotQ4_0 {  // repacked: 16 quant bytes per block + f16 scales apart
    using Fmt = FmtQ4_0;
    static constexpr int QK = 32, TPB = 1, PF = 2;
    struct Raw { uint4 q; uint16_t d; };
    DEVI static Raw load(const uint8_t* row, const uint8_t* aux, int blk, int) {
        return Raw{__ldg((const uint4*)(row + (size_t)blk * 16)), __ldg(((const uint16_t*)aux) + blk)};
    }
    DEVI static float dot(const Raw& r, int blk, int, const Q8Act& a) {
        const int4* ap = (const int4*)(a.q + (size_t)blk * 32);
        int4 a0 = ap[0], a1 = ap[1];
        uint32_t w4[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
        int lo[4] = {a0.x, a0.y, a0.z, a0.w}, hi[4] = {a1.x, a1.y, a1.z, a1.w};
        int s = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            s = dp4a((int)(w4[i] & 0x0f0f0f0f), lo[i], s);
            s = dp4a((int)((w4[i] >> 4) & 0x0f0f0f0f), hi[i], s);
        }
        // sum (q - 8) * a = sumi - 8 * sum(a)
        return h2f(r.d) * (a.d[blk] * (float)s - 8.f * a.s[blk]);
    }
};

struct DotQ8_0 {  // repacked: 32 quant bytes per block; two threads per block
    using Fmt = FmtQ8_0;
    static constexpr int QK = 32, TPB = 2, PF = 2;
    struct Raw { int4 q; uint16_t d; };
    DEVI static Raw load(const uint8_t* row, const uint8_t* aux, int blk, int part) {
        return Raw{__ldg((const int4*)(row + (size_t)blk * 32 + part * 16)), __ldg(((const uint16_t*)aux) + blk)};
    }
    DEVI static float dot(const Raw& r, int blk, int part, const Q8Act& a) {
        int4 av = *(const int4*)(a.q + (size_t)blk * 32 + part * 16);
        int s = dp4a(r.q.x, av.x, 0);
        s = dp4a(r.q.y, av.y, s);
        s = dp4a(r.q.z, av.z, s);
        s = dp4a(r.q.w, av.w, s);
        return h2f(r.d) * a.d[blk] * (float)s;
    }
};

struct DotQ4_1 {  // GGML layout { d, m, qs[16] }: 20 bytes, 4-byte aligned
    using Fmt = FmtQ4_1;
    static constexpr int QK = 32, TPB = 1, PF = 2;
    struct Raw { uint32_t dm, w[4]; };
    DEVI static Raw load(const uint8_t* row, const uint8_t*, int blk, int) {
        const uint32_t* b = (const uint32_t*)(row + (size_t)blk * 20);
        return Raw{__ldg(b), {__ldg(b + 1), __ldg(b + 2), __ldg(b + 3), __ldg(b + 4)}};
    }
    DEVI static float dot(const Raw& r, int blk, int, const Q8Act& a) {
        const int4* ap = (const int4*)(a.q + (size_t)blk * 32);
        int4 a0 = ap[0], a1 = ap[1];
        int lo[4] = {a0.x, a0.y, a0.z, a0.w}, hi[4] = {a1.x, a1.y, a1.z, a1.w};
        int s = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            s = dp4a((int)(r.w[i] & 0x0f0f0f0f), lo[i], s);
            s = dp4a((int)((r.w[i] >> 4) & 0x0f0f0f0f), hi[i], s);
        }
        float d = h2f(r.dm & 0xffff), m = h2f(r.dm >> 16);
        return d * a.d[blk] * (float)s + m * a.s[blk];
    }
};

// Q4_K (reordered, common.cuh FmtQ4_K): 8 threads per 144-byte super-block; thread p is
// sub-block p, one activation block: a 16-byte load of its quants (low nibbles = elements 0..15,
// high = 16..31, as Q4_0) and a 16-byte load of the block's header (d, dmin, 12 scale bytes; the 8
// threads of a super-block read the same 16 bytes). The 6-bit scale and min of sub-block p are
// selected without branches (p < 4: bytes p and p + 4; else the nibbles of byte p + 4 and the top
// two bits of bytes p - 4 and p).
struct DotQ4_K {
    using Fmt = FmtQ4_K;
    static constexpr int QK = 256, TPB = 8, PF = 1;
    struct Raw { uint4 q, hdr; };
    DEVI static Raw load(const uint8_t* row, const uint8_t*, int blk, int p) {
        const uint8_t* b = row + (size_t)blk * 144;
        return Raw{__ldg((const uint4*)(b + 16 + 16 * p)), __ldg((const uint4*)b)};
    }
    DEVI static float dot(const Raw& r, int blk, int p, const Q8Act& a) {
        int sh = 8 * (p & 3);
        uint32_t yb = r.hdr.y >> sh, zb = r.hdr.z >> sh, wb = r.hdr.w >> sh;
        int sc = p < 4 ? (int)(yb & 63) : (int)((wb & 15) | ((yb >> 2) & 48));
        int m = p < 4 ? (int)(zb & 63) : (int)(((wb >> 4) & 15) | ((zb >> 2) & 48));
        size_t ab = (size_t)blk * 8 + p;
        const int4* ap = (const int4*)(a.q + ab * 32);
        int4 a0 = ap[0], a1 = ap[1];
        uint32_t w4[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
        int lo[4] = {a0.x, a0.y, a0.z, a0.w}, hi[4] = {a1.x, a1.y, a1.z, a1.w};
        int s = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            s = dp4a((int)(w4[i] & 0x0f0f0f0f), lo[i], s);
            s = dp4a((int)((w4[i] >> 4) & 0x0f0f0f0f), hi[i], s);
        }
        float d = h2f(r.hdr.x & 0xffff), dmin = h2f(r.hdr.x >> 16);
        // sum (d sc q - dmin m) a = d a_d (sc sumi) - dmin m a_s (a_s = a_d * sum of the block's
        // quants); |sc sumi| <= 63 * 15 * 127 * 32 is exact in f32.
        return d * a.d[ab] * (float)(sc * s) - dmin * (float)m * a.s[ab];
    }
};

// Q6_K (repacked, common.cuh): 8 threads per super-block; thread p covers elements 128n + 32k +
// (0..32) with n = p/4, k = p%4: quants from ql (nibble k/2) and qh (bits 2k), one scale per 16
// elements. Four 16-byte loads of quants, two 2-byte loads of companion bytes.
struct DotQ6_K {
    using Fmt = FmtQ6_K;
    static constexpr int QK = 256, TPB = 8, PF = 1;
    struct Raw { uint32_t l[8], h[8]; uint16_t d, sc; };
    DEVI static Raw load(const uint8_t* row, const uint8_t* aux, int blk, int p) {
        const uint8_t* b = row + (size_t)blk * 192;
        const uint8_t* ax = aux + (size_t)blk * 18;
        int n = p / 4, k = p % 4;
        const uint4* ql = (const uint4*)(b + 64 * n + 32 * (k & 1));
        const uint4* qh = (const uint4*)(b + 128 + 32 * n);
        uint4 l0 = __ldg(ql), l1 = __ldg(ql + 1), h0 = __ldg(qh), h1 = __ldg(qh + 1);
        Raw r = {{l0.x, l0.y, l0.z, l0.w, l1.x, l1.y, l1.z, l1.w},
                 {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w},
                 __ldg((const uint16_t*)(ax + 16)),
                 __ldg((const uint16_t*)(ax + 8 * n + 2 * k))};
        return r;
    }
    DEVI static float dot(const Raw& r, int blk, int p, const Q8Act& a) {
        int n = p / 4, k = p % 4;
        int shl = (k >> 1) * 4, shh = 2 * k;
        size_t ab = (size_t)blk * 8 + 4 * n + k;
        const int4* ap = (const int4*)(a.q + ab * 32);
        int s[2] = {0, 0};
#pragma unroll
        for (int half = 0; half < 2; half++) {
            int4 av = ap[half];
            int aw[4] = {av.x, av.y, av.z, av.w};
            int t = 0, off = 0;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                uint32_t q = ((r.l[4 * half + i] >> shl) & 0x0f0f0f0f) | (((r.h[4 * half + i] >> shh) & 0x03030303) << 4);
                // q is 0..63 per byte; (q - 32) . a = q . a - 32 * sum(a)
                t = dp4a((int)q, aw[i], t);
                off = dp4a(0x20202020, aw[i], off);
            }
            s[half] = t - off;
        }
        float sc0 = (float)(int8_t)(r.sc & 0xff), sc1 = (float)(int8_t)(r.sc >> 8);
        return h2f(r.d) * a.d[ab] * (sc0 * (float)s[0] + sc1 * (float)s[1]);
    }
};
