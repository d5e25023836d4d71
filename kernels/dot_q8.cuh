// dp4a building blocks for the decode GEMV (kernels/gemv.cu) and the integer-dot work items of the
// formats whose weights keep GGML's block layout: Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q5_K, IQ4_XS. Each work
// item follows the contract written in gemv.cu: QK, TPB, PF (work items a thread loads before
// computing), a `Raw` register image, `load(row, aux, blk, part)` and `dot(raw, blk, part, act)`.
#pragma once
#include "common.cuh"

DEVI int dp4a(int a, int b, int c) {
#if __CUDA_ARCH__ >= 610
    return __dp4a(a, b, c);
#else
    const int8_t* pa = (const int8_t*)&a;
    const int8_t* pb = (const int8_t*)&b;
    return c + pa[0] * pb[0] + pa[1] * pb[1] + pa[2] * pb[2] + pa[3] * pb[3];
#endif
}

// Activation view for one row j: int8 quants, per-32 scale and scaled sum.
struct Q8Act {
    const int8_t* q;
    const float* d;
    const float* s;
};

// Byte j (< 12) of the three words holding a K-quant's packed scales, without indexing an array
// (a run-time index into registers would spill to local memory).
DEVI int kbyte(uint32_t y, uint32_t z, uint32_t w, int j) {
    uint32_t word = j < 4 ? y : (j < 8 ? z : w);
    return (word >> (8 * (j & 3))) & 0xff;
}

// Bits 0..3 of h moved to bit 4 of bytes 0..3 (the fifth bit of four 5-bit quants).
DEVI uint32_t spread4(uint32_t h) {
    return ((h & 1) << 4) | ((h & 2) << 11) | ((h & 4) << 18) | ((h & 8) << 25);
}

// Four IQ4 codes (one 4-bit index in each byte of q, values 0..15) mapped to their int8 levels:
// two byte permutes over the 16-entry table, then a per-byte select on bit 3 of the index.
DEVI int iq4_lookup(uint32_t q) {
    const uint32_t t0 = 0xBFAD9881u, t1 = 0xF6EADDCFu, t2 = 0x26190D01u, t3 = 0x71594535u;
    uint32_t sel = (q & 7) | (((q >> 8) & 7) << 4) | (((q >> 16) & 7) << 8) | (((q >> 24) & 7) << 12);
    uint32_t lo = __byte_perm(t0, t1, sel), hi = __byte_perm(t2, t3, sel);
    uint32_t m = ((q >> 3) & 0x01010101u) * 0xFFu;
    return (int)((hi & m) | (lo & ~m));
}

// dp4a of 16 weight bytes (4 words) against 16 activation bytes.
DEVI int dot16(const uint32_t* w, const int4& a) {
    int s = dp4a((int)w[0], a.x, 0);
    s = dp4a((int)w[1], a.y, s);
    s = dp4a((int)w[2], a.z, s);
    return dp4a((int)w[3], a.w, s);
}

// Q5_0: GGML layout { f16 d, u8 qh[4], u8 qs[16] } (22 bytes, 2-byte aligned, read as halves).
struct DotQ5_0 {
    using Fmt = FmtQ5_0;
    static constexpr int QK = 32, TPB = 1, PF = 2;
    struct Raw { uint32_t qh, w[4]; uint16_t d; };
    DEVI static Raw load(const uint8_t* row, const uint8_t*, int blk, int) {
        const uint16_t* b = (const uint16_t*)(row + (size_t)blk * 22);
        Raw r;
        r.d = __ldg(b);
        r.qh = (uint32_t)__ldg(b + 1) | ((uint32_t)__ldg(b + 2) << 16);
#pragma unroll
        for (int i = 0; i < 4; i++) r.w[i] = (uint32_t)__ldg(b + 3 + 2 * i) | ((uint32_t)__ldg(b + 4 + 2 * i) << 16);
        return r;
    }
    DEVI static float dot(const Raw& r, int blk, int, const Q8Act& a) {
        const int4* ap = (const int4*)(a.q + (size_t)blk * 32);
        uint32_t lo[4], hi[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            lo[i] = (r.w[i] & 0x0f0f0f0fu) | spread4(r.qh >> (4 * i));
            hi[i] = ((r.w[i] >> 4) & 0x0f0f0f0fu) | spread4(r.qh >> (16 + 4 * i));
        }
        int s = dot16(lo, ap[0]) + dot16(hi, ap[1]);
        // sum (q - 16) * a = sumi - 16 * sum(a)
        return h2f(r.d) * (a.d[blk] * (float)s - 16.f * a.s[blk]);
    }
};

// Q5_1: GGML layout { f16 d, f16 m, u8 qh[4], u8 qs[16] } (24 bytes, 4-byte aligned).
struct DotQ5_1 {
    using Fmt = FmtQ5_1;
    static constexpr int QK = 32, TPB = 1, PF = 2;
    struct Raw { uint32_t dm, qh, w[4]; };
    DEVI static Raw load(const uint8_t* row, const uint8_t*, int blk, int) {
        const uint32_t* b = (const uint32_t*)(row + (size_t)blk * 24);
        return Raw{__ldg(b), __ldg(b + 1), {__ldg(b + 2), __ldg(b + 3), __ldg(b + 4), __ldg(b + 5)}};
    }
    DEVI static float dot(const Raw& r, int blk, int, const Q8Act& a) {
        const int4* ap = (const int4*)(a.q + (size_t)blk * 32);
        uint32_t lo[4], hi[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            lo[i] = (r.w[i] & 0x0f0f0f0fu) | spread4(r.qh >> (4 * i));
            hi[i] = ((r.w[i] >> 4) & 0x0f0f0f0fu) | spread4(r.qh >> (16 + 4 * i));
        }
        int s = dot16(lo, ap[0]) + dot16(hi, ap[1]);
        float d = h2f(r.dm & 0xffff), m = h2f(r.dm >> 16);
        return d * a.d[blk] * (float)s + m * a.s[blk];
    }
};

// IQ4_NL: GGML layout { f16 d, u8 qs[16] } (18 bytes, 2-byte aligned); codes looked up to int8.
struct DotIQ4_NL {
    using Fmt = FmtIQ4_NL;
    static constexpr int QK = 32, TPB = 1, PF = 2;
    struct Raw { uint32_t w[4]; uint16_t d; };
    DEVI static Raw load(const uint8_t* row, const uint8_t*, int blk, int) {
        const uint16_t* b = (const uint16_t*)(row + (size_t)blk * 18);
        Raw r;
        r.d = __ldg(b);
#pragma unroll
        for (int i = 0; i < 4; i++) r.w[i] = (uint32_t)__ldg(b + 1 + 2 * i) | ((uint32_t)__ldg(b + 2 + 2 * i) << 16);
        return r;
    }
    DEVI static float dot(const Raw& r, int blk, int, const Q8Act& a) {
        const int4* ap = (const int4*)(a.q + (size_t)blk * 32);
        uint32_t lo[4], hi[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            lo[i] = (uint32_t)iq4_lookup(r.w[i] & 0x0f0f0f0fu);
            hi[i] = (uint32_t)iq4_lookup((r.w[i] >> 4) & 0x0f0f0f0fu);
        }
        int s = dot16(lo, ap[0]) + dot16(hi, ap[1]);
        return h2f(r.d) * a.d[blk] * (float)s;
    }
};

// Q5_K: { f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128] } (176 bytes, 16-byte aligned).
// 8 threads per super-block, as Q4_K: thread p reads qs bytes [16p, 16p+16) (low nibbles of
// sub-block 2c, high nibbles of 2c+1, c = p/2, elements 16h..16h+16 with h = p%2) and qh bytes
// [16h, 16h+16), whose bit s is the fifth bit of sub-block s.
struct DotQ5_K {
    using Fmt = FmtQ5_K;
    static constexpr int QK = 256, TPB = 8, PF = 1;
    struct Raw { uint4 hdr, qh, q; };
    DEVI static Raw load(const uint8_t* row, const uint8_t*, int blk, int p) {
        const uint8_t* b = row + (size_t)blk * 176;
        return Raw{__ldg((const uint4*)b), __ldg((const uint4*)(b + 16 + 16 * (p % 2))),
                   __ldg((const uint4*)(b + 48 + 16 * p))};
    }
    DEVI static float dot(const Raw& r, int blk, int p, const Q8Act& a) {
        int c = p / 2, h = p % 2;
        int sub0 = 2 * c, sub1 = 2 * c + 1;
        uint32_t y = r.hdr.y, z = r.hdr.z, w = r.hdr.w;
        int s0, m0, s1, m1;
        if (c < 2) {
            s0 = kbyte(y, z, w, sub0) & 63; m0 = kbyte(y, z, w, sub0 + 4) & 63;
            s1 = kbyte(y, z, w, sub1) & 63; m1 = kbyte(y, z, w, sub1 + 4) & 63;
        } else {
            s0 = (kbyte(y, z, w, sub0 + 4) & 0xF) | ((kbyte(y, z, w, sub0 - 4) >> 6) << 4);
            m0 = (kbyte(y, z, w, sub0 + 4) >> 4) | ((kbyte(y, z, w, sub0) >> 6) << 4);
            s1 = (kbyte(y, z, w, sub1 + 4) & 0xF) | ((kbyte(y, z, w, sub1 - 4) >> 6) << 4);
            m1 = (kbyte(y, z, w, sub1 + 4) >> 4) | ((kbyte(y, z, w, sub1) >> 6) << 4);
        }
        size_t ab0 = (size_t)blk * 8 + sub0, ab1 = ab0 + 1;
        int4 alo = *(const int4*)(a.q + ab0 * 32 + 16 * h);
        int4 ahi = *(const int4*)(a.q + ab1 * 32 + 16 * h);
        uint32_t w4[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
        uint32_t h4[4] = {r.qh.x, r.qh.y, r.qh.z, r.qh.w};
        uint32_t lo[4], hi[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            lo[i] = (w4[i] & 0x0f0f0f0fu) | (((h4[i] >> sub0) & 0x01010101u) << 4);
            hi[i] = ((w4[i] >> 4) & 0x0f0f0f0fu) | (((h4[i] >> sub1) & 0x01010101u) << 4);
        }
        int slo = dot16(lo, alo), shi = dot16(hi, ahi);
        float d = h2f(r.hdr.x & 0xffff), dmin = h2f(r.hdr.x >> 16);
        float res = d * (a.d[ab0] * (float)(s0 * slo) + a.d[ab1] * (float)(s1 * shi));
        // The min term covers whole 32-element activation blocks: the h == 0 thread adds it once.
        if (h == 0) res -= dmin * ((float)m0 * a.s[ab0] + (float)m1 * a.s[ab1]);
        return res;
    }
};

// IQ4_XS: { f16 d, u16 scales_h, u8 scales_l[4], u8 qs[128] } (136 bytes, 8-byte aligned).
// 8 threads per super-block: thread p is sub-block p, qs bytes [16p, 16p+16) (low nibbles are its
// elements 0..15, high nibbles 16..31), scale 6 bits from scales_l and scales_h.
struct DotIQ4_XS {
    using Fmt = FmtIQ4_XS;
    static constexpr int QK = 256, TPB = 8, PF = 2;
    struct Raw { uint2 hdr, q0, q1; };
    DEVI static Raw load(const uint8_t* row, const uint8_t*, int blk, int p) {
        const uint8_t* b = row + (size_t)blk * 136;
        const uint2* qp = (const uint2*)(b + 8 + 16 * p);
        return Raw{__ldg((const uint2*)b), __ldg(qp), __ldg(qp + 1)};
    }
    DEVI static float dot(const Raw& r, int blk, int p, const Q8Act& a) {
        uint32_t sh = r.hdr.x >> 16, sl = r.hdr.y;
        int ls = ((sl >> (8 * (p / 2) + 4 * (p % 2))) & 0xF) | (((sh >> (2 * p)) & 3) << 4);
        size_t ab = (size_t)blk * 8 + p;
        const int4* ap = (const int4*)(a.q + ab * 32);
        uint32_t w4[4] = {r.q0.x, r.q0.y, r.q1.x, r.q1.y};
        uint32_t lo[4], hi[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            lo[i] = (uint32_t)iq4_lookup(w4[i] & 0x0f0f0f0fu);
            hi[i] = (uint32_t)iq4_lookup((w4[i] >> 4) & 0x0f0f0f0fu);
        }
        int s = dot16(lo, ap[0]) + dot16(hi, ap[1]);
        return h2f(r.hdr.x & 0xffff) * (float)(ls - 32) * a.d[ab] * (float)s;
    }
};

// Two adjacent 16-bit loads as one word (for blocks that are only 2-byte aligned).
DEVI uint32_t ld2x16(const uint16_t* p) { return (uint32_t)__ldg(p) | ((uint32_t)__ldg(p + 1) << 16); }

// Q2_K: { u8 scales[16], u8 qs[64], f16 d, f16 dmin } (84 bytes, 4-byte aligned). Element
// 128n + 32s + l is bits 2s of qs[32n + l] with scale byte 8n + 2s + l/16 (low nibble: scale,
// high: min). 8 threads per super-block: thread p = 4n + s covers activation block p.
struct DotQ2_K {
    using Fmt = FmtQ2_K;
    static constexpr int QK = 256, TPB = 8, PF = 1;
    struct Raw { uint32_t q[8], dm; uint16_t sc; };
    DEVI static Raw load(const uint8_t* row, const uint8_t*, int blk, int p) {
        const uint8_t* b = row + (size_t)blk * 84;
        const uint32_t* qs = (const uint32_t*)(b + 16 + 32 * (p / 4));
        Raw r;
#pragma unroll
        for (int i = 0; i < 8; i++) r.q[i] = __ldg(qs + i);
        r.dm = __ldg((const uint32_t*)(b + 80));
        r.sc = __ldg((const uint16_t*)(b + 8 * (p / 4) + 2 * (p % 4)));
        return r;
    }
    DEVI static float dot(const Raw& r, int blk, int p, const Q8Act& a) {
        int sh = 2 * (p % 4);
        size_t ab = (size_t)blk * 8 + p;
        const int4* ap = (const int4*)(a.q + ab * 32);
        float d = h2f(r.dm & 0xffff), dmin = h2f(r.dm >> 16), res = 0.f;
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            int4 av = ap[hf];
            uint32_t q[4];
#pragma unroll
            for (int i = 0; i < 4; i++) q[i] = (r.q[4 * hf + i] >> sh) & 0x03030303u;
            int sumi = dot16(q, av);
            const uint32_t ones[4] = {0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u};
            int suma = dot16(ones, av);
            int sc = (r.sc >> (8 * hf)) & 0xff;
            res += d * (float)((sc & 0xF) * sumi) - dmin * (float)((sc >> 4) * suma);
        }
        return a.d[ab] * res;
    }
};

// Q3_K: { u8 hmask[32], u8 qs[64], u8 scales[12], f16 d } (110 bytes, 2-byte aligned). Element
// 128n + 32s + l is bits 2s of qs[32n + l] plus 4 * bit (4n + s) of hmask[l], minus 4, with the
// 6-bit scale 8n + 2s + l/16 (minus 32). 8 threads per super-block: thread p = 4n + s covers
// activation block p.
struct DotQ3_K {
    using Fmt = FmtQ3_K;
    static constexpr int QK = 256, TPB = 8, PF = 1;
    struct Raw { uint32_t q[8], h[8], sy, sz, sw; uint16_t d; };
    DEVI static Raw load(const uint8_t* row, const uint8_t*, int blk, int p) {
        const uint16_t* b = (const uint16_t*)(row + (size_t)blk * 110);
        const uint16_t* qs = b + 16 + 16 * (p / 4);
        Raw r;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            r.q[i] = ld2x16(qs + 2 * i);
            r.h[i] = ld2x16(b + 2 * i);
        }
        r.sy = ld2x16(b + 48);
        r.sz = ld2x16(b + 50);
        r.sw = ld2x16(b + 52);
        r.d = __ldg(b + 54);
        return r;
    }
    DEVI static float dot(const Raw& r, int blk, int p, const Q8Act& a) {
        int n = p / 4, s = p % 4, sh = 2 * s, hb = 4 * n + s;
        size_t ab = (size_t)blk * 8 + p;
        const int4* ap = (const int4*)(a.q + ab * 32);
        float res = 0.f;
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            int4 av = ap[hf];
            uint32_t q[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                q[i] = ((r.q[4 * hf + i] >> sh) & 0x03030303u) | (((r.h[4 * hf + i] >> hb) & 0x01010101u) << 2);
            }
            const uint32_t fours[4] = {0x04040404u, 0x04040404u, 0x04040404u, 0x04040404u};
            // (q - 4) . a = q . a - 4 * sum(a)
            int sumi = dot16(q, av) - dot16(fours, av);
            int is = 8 * n + 2 * s + hf;
            int lo = is < 8 ? (kbyte(r.sy, r.sz, r.sw, is) & 0xF) : (kbyte(r.sy, r.sz, r.sw, is - 8) >> 4);
            int hi = (kbyte(r.sy, r.sz, r.sw, 8 + (is % 4)) >> (2 * (is / 4))) & 3;
            res += (float)(((lo | (hi << 4)) - 32) * sumi);
        }
        return h2f(r.d) * a.d[ab] * res;
    }
};
