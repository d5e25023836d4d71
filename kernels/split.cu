// Ops over the outputs of stacked projection weights: the column split of a fused [q | k | v] row
// and SwiGLU over the halves of a fused [gate | up] row (no split copy before the down GEMV).
#include "common.cuh"
#include "gate_math.cuh"

// x [n, w0 + w1 + w2] -> a [n, w0], b [n, w1], c [n, w2] (c unused when w2 == 0, b when w1 == 0);
// one thread per element of x, reading x coalesced.
extern "C" __global__ void split_columns3(const float* __restrict__ x, float* __restrict__ a,
                                          float* __restrict__ b, float* __restrict__ c, size_t total,
                                          int w0, int w1, int w2) {
    pdl_wait();
    pdl_trigger();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    int w = w0 + w1 + w2;
    size_t r = i / w;
    int col = (int)(i % w);
    float v = x[i];
    if (col < w0)
        a[r * w0 + col] = v;
    else if (col < w0 + w1)
        b[r * w1 + (col - w0)] = v;
    else
        c[r * w2 + (col - w0 - w1)] = v;
}

// out [n, d] = silu(x[:, :d]) * x[:, d:] for x [n, 2d]; the expression of elementwise.cu's
// silu_mul, so the fused path matches the split one bit for bit.
extern "C" __global__ void silu_mul_halves(const float* __restrict__ x, float* __restrict__ out,
                                           size_t total, int d) {
    pdl_wait();
    pdl_trigger();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    size_t r = i / d, col = i % d;
    const float* row = x + r * 2 * d;
    float a = row[col];
    out[i] = swiglu_f(a, row[d + col]);
}

// silu_mul_halves for decode-sized inputs (at most 8 rows, d a multiple of 32), also writing the
// output's int8 quantization in both kinds like elementwise.cu's silu_mul_q8 (Q8K only where d is
// a multiple of 256), so the down projection launches no quantize kernel. One warp per 256
// elements of the flattened out [rows, d] (total32 = rows * d / 32); a lane's 8 elements never
// straddle a row since d is a multiple of 8. Any block size that is a multiple of 32 works: the
// launcher uses 64 threads (two warps per block spread the work over more SMs, which hides the
// latency of the few dependent steps per lane better than 8 warps on one SM).
extern "C" __global__ void silu_mul_halves_q8(const float* __restrict__ x, float* __restrict__ out,
                                              int total32, int d, int8_t* xq, float* xd, float* xs,
                                              int8_t* xqk, float* xdk, float* xsk) {
    pdl_wait();
    pdl_trigger();
    int c = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;  // warp-uniform
    if (c * 8 >= total32) return;
    int lane = threadIdx.x & 31, nvalid = min(8, total32 - 8 * c);
    bool valid = (lane >> 2) < nvalid;
    size_t e = (size_t)c * 256, b = (size_t)c * 8;
    float v[8];
    if (valid) {
        // 32-bit row/column split (rows * d <= 8 * d fits an int): a 64-bit division is a long
        // subroutine on the path to every load of the kernel.
        int el = c * 256 + 8 * lane, r = el / d, col = el - r * d;
        const float* g = x + (size_t)r * 2 * d + col;
        float4 g0 = ((const float4*)g)[0], g1 = ((const float4*)g)[1];
        float4 u0 = ((const float4*)(g + d))[0], u1 = ((const float4*)(g + d))[1];
        float gv[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
        float uv[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
#pragma unroll
        for (int i = 0; i < 8; i++) {
            float a = gv[i];
            v[i] = swiglu_f(a, uv[i]);
        }
        float4* o = (float4*)(out + e) + 2 * lane;
        o[0] = make_float4(v[0], v[1], v[2], v[3]);
        o[1] = make_float4(v[4], v[5], v[6], v[7]);
    } else {
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = 0.f;
    }
    // Both kinds before any store, so their shuffles and divisions overlap.
    int q[8], qk[8], sum, sumk;
    float dd, ddk;
    quant_lane<false>(v, q, dd, sum);
    if (d % 256 == 0) quant_lane<true>(v, qk, ddk, sumk);
    if (valid) store_lane(q, dd, sum, xq + e, xd + b, xs + b);
    if (d % 256 == 0) store_lane(qk, ddk, sumk, xqk + e, xdk + b, xsk + b);
}
