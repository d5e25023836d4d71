// The decode attention's key staging (attention.cu, attn_dec_hd): before pdl_wait() each thread
// copies the K and V rows of its own first keys of the split into dynamic shared memory with
// cp.async, so the HBM round trips of those keys overlap the previous kernels (the RoPE and
// cache write, which lets this launch before it waits, and the projection before it) instead of
// following them. Safe because no kernel that may still run then writes what this reads early:
// the projection writes its output rows and the RoPE kernel q and the K/V row at each sequence's
// last position, which is never staged; the sequence lengths and block tables are host uploads,
// the earlier rows were written in earlier steps, and every kernel before the projection has
// finished (the projection triggers after its own pdl_wait(), common.cuh). The host_check
// emulation supplies its own versions of these three primitives.
#pragma once
#include "common.cuh"

// The staging area: [2 * stage_keys][NT] 16-byte slots (K then V of a key), one column per
// thread, so a thread reads back only what it copied and no barrier is needed.
DEVI uint4* atd_stage_smem() {
    extern __shared__ uint4 atd_stage_dyn[];
    return atd_stage_dyn;
}

// Starts a 16-byte copy from global memory (L2, not L1) to shared memory.
DEVI void atd_cp16(uint4* dst, const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
#else
    *dst = __ldg((const uint4*)src);
#endif
}

// Waits for this thread's copies (cp.async.wait_all also commits the open group).
DEVI void atd_cp_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}
