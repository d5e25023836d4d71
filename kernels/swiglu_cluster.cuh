// The SwiGLU of a one-row MLP and the int8 quantization of its output, done by the down
// projection's own blocks (gemv_q8r_swiglu_* in gemv.cu) instead of a silu_mul_halves_q8 launch
// between the gate|up and the down GEMVs: the launch boundary it removes is worth more than the
// block's work here (performance/cuda-dense.md, session 18).
//
// The blocks of a thread-block cluster share the work: each warp of the cluster computes the
// 256-element chunks c = (rank * warps + warp) + k * (cluster warps) of silu(g) * u with
// split.cu's expression and quantizes them with common.cuh's quant_lane (the same bits as
// silu_mul_halves_q8 and the CPU) into the cluster's own region of a global scratch (int8
// blocks, scales, scaled sums: quantize_q8's layout for one row). One cluster barrier (release,
// acquire: it orders global memory at cluster scope) later every block of the cluster reads the
// whole quantized row from there, as the plain kernel reads quantize_q8's. The first cluster also
// writes the float row `h`, so a later reader of the MLP's activation finds it. sm_90 only (the
// cluster forms are built into the sm_90 cubin alone). A first form that pushed the row into
// every block's shared memory (distributed shared memory, 18 KiB per block) made the 8B decode
// 19% slower (performance/cuda-dense.md, session 18).
#pragma once
#include "cluster.cuh"
#include "dot_q8.cuh"
#include "gate_math.cuh"

// The fused kernel's extra inputs: the [gate | up] row (2 * cols floats), the activation row
// the first cluster writes out (cols floats) and the scratch of `region` bytes per cluster.
struct SwigluIn {
    const float* gu;
    float* h;
    int8_t* act;
    int region;
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// Called by every thread of the block after pdl_wait (the gate|up row is the previous kernel's
// output), once, in clusters of C blocks: fills the cluster's scratch region with the
// quantization of kind K (ActK) of silu(g) * u and returns the view the dot products read.
// Needs cols % 256 == 0.
template <int C, bool K>
DEVI Q8Act swiglu_q8_cluster(const SwigluIn& in, int cols) {
    const uint32_t rank = cluster_rank();
    const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const bool writes_h = blockIdx.x < C;
    int8_t* q = in.act + (size_t)(blockIdx.x / C) * in.region;
    float* ds = (float*)(q + cols);
    float* ss = ds + cols / 32;
    for (int c = (int)rank * warps + warp; c * 256 < cols; c += C * warps) {
        const int col = c * 256 + 8 * lane;
        const float4* g = (const float4*)(in.gu + col);
        const float4* u = (const float4*)(in.gu + cols + col);
        float v[8];
#pragma unroll
        for (int h = 0; h < 2; h++) {  // halves: the weights loaded before the wait stay live
            const float4 gh = g[h], uh = u[h];
            v[4 * h] = swiglu_f(gh.x, uh.x);
            v[4 * h + 1] = swiglu_f(gh.y, uh.y);
            v[4 * h + 2] = swiglu_f(gh.z, uh.z);
            v[4 * h + 3] = swiglu_f(gh.w, uh.w);
        }
        if (writes_h) {
            float4* o = (float4*)(in.h + col);
            o[0] = make_float4(v[0], v[1], v[2], v[3]);
            o[1] = make_float4(v[4], v[5], v[6], v[7]);
        }
        int qv[8], sum;
        float d;
        quant_lane<K>(v, qv, d, sum);
        store_lane(qv, d, sum, q + c * 256, ds + c * 8, ss + c * 8);
    }
    cluster_arrive();  // this block's quants are released to the cluster...
    cluster_wait();    // ...and every peer's acquired
    return Q8Act{q, ds, ss};
}
#endif

