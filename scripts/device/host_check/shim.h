// Host shim: compile the device work items as plain C++ to check their arithmetic on the CPU.
#pragma once
#include <cstdint>
#include <cstring>
#include <cmath>
#define __device__
#define __forceinline__ inline
#define __constant__ static
#define __global__
#define DEVI inline
struct uint4 { uint32_t x, y, z, w; };
struct uint2 { uint32_t x, y; };
struct int4 { int x, y, z, w; };
template <typename T> inline T __ldg(const T* p) { T v; memcpy(&v, p, sizeof(T)); return v; }
inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
    uint8_t b[8]; memcpy(b, &x, 4); memcpy(b + 4, &y, 4);
    uint32_t r = 0;
    for (int k = 0; k < 4; k++) r |= (uint32_t)b[(s >> (4 * k)) & 7] << (8 * k);
    return r;
}
inline float h2f(uint16_t h) {
    uint32_t s = (h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? std::ldexp((float)m, -24) : std::ldexp((float)(m | 1024), (int)e - 25);
    return s ? -v : v;
}
struct float4 { float x, y, z, w; };
inline float bf2f(uint16_t b) { uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f; }
inline uint16_t ld_u16(const uint8_t* p) { return (uint16_t)p[0] | ((uint16_t)p[1] << 8); }
inline uint32_t ld_u32_a2(const uint8_t* p) { uint32_t v; memcpy(&v, p, 4); return v; }
