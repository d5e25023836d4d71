// CUDA threads as ucontext fibers for the host emulations (gemv_emu.cpp, sample_emu.cpp): one
// fiber per CUDA thread of a block, the block's fibers taking turns at every barrier
// (__syncthreads, __syncwarp, shuffles), blocks one after another. Include after the CUDA shims.
#pragma once
#include <ucontext.h>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

// Hundreds of OS threads per block are far too slow on a loaded host.
struct Dim { unsigned x, y, z; };
Dim threadIdx, blockIdx, gridDim, blockDim;
struct Fiber { ucontext_t ctx; std::vector<char> stack; bool done; };
std::vector<Fiber> g_fib;
ucontext_t g_sched;
int g_cur;
inline void yield_fiber() { swapcontext(&g_fib[g_cur].ctx, &g_sched); threadIdx = {(unsigned)g_cur, 0, 0}; }
struct Bar { int n, count = 0, gen = 0; };
inline void bar_wait(Bar& b) {
    int g = b.gen;
    if (++b.count == b.n) { b.count = 0; b.gen++; return; }
    while (b.gen == g) yield_fiber();
}
Bar g_block{0};
Bar g_warp[32];
uint32_t g_shfl[1024];
inline void __syncthreads() { bar_wait(g_block); }
inline void __syncwarp() { bar_wait(g_warp[threadIdx.x / 32]); }
// Shuffles of any 32-bit value (float, int, unsigned) through the calling warp.
template <typename V>
inline V __shfl_xor_sync(unsigned, V v, int o) {
    static_assert(sizeof(V) == 4, "32-bit shuffles");
    int t = threadIdx.x, w = t / 32;
    memcpy(&g_shfl[t], &v, 4);
    bar_wait(g_warp[w]);
    V r;
    memcpy(&r, &g_shfl[(t & ~31) | ((t & 31) ^ o)], 4);
    bar_wait(g_warp[w]);
    return r;
}
// A vote across the calling warp: bit j set when lane j's predicate holds.
inline unsigned __ballot_sync(unsigned, bool pred) {
    int t = threadIdx.x, w = t / 32;
    g_shfl[t] = pred ? 1u : 0u;
    bar_wait(g_warp[w]);
    unsigned r = 0;
    for (int j = 0; j < 32; j++) r |= g_shfl[(t & ~31) | j] << j;
    bar_wait(g_warp[w]);
    return r;
}
// The lanes of the calling warp whose value equals this lane's: bit j set for lane j.
inline unsigned __match_any_sync(unsigned, unsigned v) {
    int t = threadIdx.x, w = t / 32;
    g_shfl[t] = v;
    bar_wait(g_warp[w]);
    unsigned r = 0;
    for (int j = 0; j < 32; j++) r |= (g_shfl[(t & ~31) | j] == v ? 1u : 0u) << j;
    bar_wait(g_warp[w]);
    return r;
}
std::function<void()>* g_body;
inline void fiber_main() { g_body->operator()(); g_fib[g_cur].done = true; swapcontext(&g_fib[g_cur].ctx, &g_sched); }

// Runs `blocks` (linear block indices of `grid`, x fastest) one after another, T fibers each.
inline void launch_blocks2(const std::vector<int>& blocks, Dim grid, int T, std::function<void()> body) {
    g_body = &body;
    g_fib.resize(T);
    for (auto& f : g_fib) f.stack.resize(256 << 10);
    g_block = Bar{T};
    for (int w = 0; w < T / 32; w++) g_warp[w] = Bar{32};
    gridDim = grid;
    blockDim = {(unsigned)T, 1, 1};
    for (int b : blocks) {
        blockIdx = {(unsigned)b % grid.x, (unsigned)b / grid.x, 0};
        for (int t = 0; t < T; t++) {
            Fiber& f = g_fib[t];
            f.done = false;
            getcontext(&f.ctx);
            f.ctx.uc_stack.ss_sp = f.stack.data();
            f.ctx.uc_stack.ss_size = f.stack.size();
            f.ctx.uc_link = nullptr;
            makecontext(&f.ctx, fiber_main, 0);
        }
        for (bool left = true; left;) {
            left = false;
            for (int t = 0; t < T; t++) {
                if (g_fib[t].done) continue;
                g_cur = t;
                threadIdx = {(unsigned)t, 0, 0};
                swapcontext(&g_sched, &g_fib[t].ctx);
                left |= !g_fib[t].done;
            }
        }
    }
}
