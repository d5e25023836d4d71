// Thread-block cluster primitives (sm_90), shared by the cluster decode attention
// (attention_cluster.cuh) and the cluster DeltaNet decode step (deltanet_decode_cluster.cuh).
// On older targets a cluster is one block: rank 0, barriers that do nothing, and the "remote"
// shared memory is the block's own (callers there run with one block per cluster).
// host_check/attn_emu.cpp supplies emulated versions of the attention's four.
#pragma once
#include "common.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// This block's rank in its cluster.
DEVI uint32_t cluster_rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
// Arrival that releases this block's earlier writes to the blocks that wait after it.
DEVI void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
// Arrival that orders nothing: only says this block has started (before any DSMEM access).
DEVI void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory"); }
// Waits until every block of the cluster has arrived, acquiring their released writes.
DEVI void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
// Stores v at `p` (an address in this block's shared memory) in block `rank`'s shared memory.
DEVI void cluster_store(float* p, uint32_t rank, float v) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p), ra;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(rank));
    asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(ra), "f"(v) : "memory");
}
// Loads the float at `p` (an address in this block's shared memory) from block `rank`'s copy.
DEVI float cluster_load(const float* p, uint32_t rank) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p), ra;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(ra) : "memory");
    return v;
}
#else
DEVI uint32_t cluster_rank() { return 0u; }
DEVI void cluster_arrive() {}
DEVI void cluster_arrive_relaxed() {}
DEVI void cluster_wait() {}
DEVI void cluster_store(float* p, uint32_t, float v) { *p = v; }
DEVI float cluster_load(const float* p, uint32_t) { return *p; }
#endif
