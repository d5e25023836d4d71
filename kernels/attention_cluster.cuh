// The decode attention's key splits merged inside a thread-block cluster (sm_90), included by
// attention.cu.
//
// attn_dec_c8_*: grid (sequences, KV heads x head groups, 8), a cluster of the 8 split blocks
// of one (sequence, head group). Each block leaves its split's merged partial (per query head: the
// running max, the sum and the unnormalized output row) in its own shared memory; after a cluster
// barrier every block reads all 8 partials through distributed shared memory and finishes a
// share of the group's outputs (normalization, output gate, Q8 copy), which attn_combine would
// otherwise do in a second launch after the partials' round trip through global memory.
// A split with no keys (a context shorter than 8 x min_keys) leaves max -inf and sum 0: weight 0.

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define ATD_CLUSTER 8

// The merge of the cluster's partials for outputs [0, G * HD) of the block's heads (host_check's
// attn_emu runs it on emulated cluster.cuh primitives): `so` [G][HD] the unnormalized rows,
// `sM` / `sL` [G] the maxima and sums, at the same offsets in every block.
// Writes `out` (gated where a.gate is set) and its Q8 copy where a.xq is set. The whole block
// calls it; G * HD is a multiple of 32, so a warp's 32 outputs are one Q8 block of one head.
template <int HD, int NT>
DEVI void atc_merge(const AttnArgs& a, const float* so, const float* sM, const float* sL, int G,
                    size_t hbase) {
    uint32_t rank = cluster_rank();
    cluster_arrive();
    cluster_wait();  // every partial of the cluster is written and visible
    for (int base = (int)rank * NT; base < G * HD; base += ATD_CLUSTER * NT) {
        int idx = base + (int)threadIdx.x;
        if (idx - (int)(threadIdx.x & 31) >= G * HD) break;  // whole warps leave together
        int g = idx / HD, d = idx % HD;
        float m[ATD_CLUSTER], l[ATD_CLUSTER], o[ATD_CLUSTER];
#pragma unroll
        for (int r = 0; r < ATD_CLUSTER; r++) {
            m[r] = cluster_load(sM + g, r);
            l[r] = cluster_load(sL + g, r);
            o[r] = cluster_load(so + g * HD + d, r);
        }
        float M = -INFINITY;
#pragma unroll
        for (int r = 0; r < ATD_CLUSTER; r++) M = fmaxf(M, m[r]);
        float L = 0.f, acc = 0.f;
#pragma unroll
        for (int r = 0; r < ATD_CLUSTER; r++) {
            float w = m[r] == -INFINITY ? 0.f : __expf(m[r] - M);
            L += l[r] * w;
            acc += o[r] * w;
        }
        float v = L > 0.f ? acc / L : 0.f;
        size_t rh = hbase + g;
        if (a.gate != nullptr) v = gate_mul(v, a.gate[rh * HD + d]);
        a.out[rh * HD + d] = v;
        if (a.xq != nullptr) {
            size_t e = rh * HD + (d & ~31);
            quant32_warp(v, a.xq + e, a.xd + e / 32, a.xs + e / 32);
        }
    }
    // No block may leave (freeing its shared memory) while another still reads it.
    cluster_arrive();
    cluster_wait();
}
#endif
