#!/usr/bin/env bash
# CPU checks of CUDA kernel logic, no GPU needed (g++ with C++20):
#  * dot_check: every dp4a work item (kernels/dot_q8.cuh and dot_formats.cuh) against the format's
#    decode16 reference decoder, on random blocks and int8 activations.
#  * attn_emu: the decode attention kernel (kernels/attention.cu, attn_decode) run with one host
#    thread per CUDA thread (barriers for __syncthreads and shuffles) against an f64 reference,
#    as the split launch with attn_combine and, where the host picks it, as the sm_90 cluster
#    form (8 blocks together, attention_cluster.cuh's merge through each other's shared memory);
#    the keys staged before pdl_wait (attention_stage.cuh) with a check that no read before the
#    wait touches the previous kernel's K/V rows.
#  * delta_emu: the chunked delta-rule prefill (kernels/deltanet.cu, delta_chunk_prep/_scan) the
#    same way, against an f64 token-by-token reference.
# The kernel sources are extracted from kernels/ as they are, so this checks the committed code.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cp "$HERE"/shim.h "$HERE"/dot_check.cpp "$HERE"/attn_emu.cpp "$HERE"/delta_emu.cpp "$WORK"/
python3 - "$ROOT" "$WORK" <<'PY'
import sys
root, work = sys.argv[1], sys.argv[2]
src = open(f"{root}/kernels/common.cuh").read()
fmt = src[src.index("// The 16 non-linear levels"):src.index("template <typename F> struct Repacked")]
dot = open(f"{root}/kernels/dot_q8.cuh").read().replace('#pragma once\n#include "common.cuh"\n', "")
dot = dot.replace("#if __CUDA_ARCH__ >= 610\n    return __dp4a(a, b, c);\n#else\n", "").replace("#endif\n}", "}", 1)
gdots = open(f"{root}/kernels/dot_formats.cuh").read()
gdots = gdots[gdots.index("struct DotQ4_0 {"):]
open(f"{work}/dots.h", "w").write('#pragma once\n#include "shim.h"\n' + fmt + dot + gdots)
a = open(f"{root}/kernels/attention.cu").read()
args = a[a.index("struct AttnArgs {"):a.index("template <typename T>\n__device__ void attention(")]
dec = a[a.index("#define ATD_THREADS 128"):a.index("#define DEF_ATTN_DECODE")]
# The cluster merge (attention_cluster.cuh, sm_90 code): its merge function runs on attn_emu.cpp's
# emulation of cluster.cuh's primitives, shared memory comes per block from the emulation, and
# the merge call in the kernel is taken as on sm_90.
inc = '#include "attention_cluster.cuh"\n'
assert inc in dec, "attn_emu: cluster include not found"
cl = open(f"{root}/kernels/attention_cluster.cuh").read()
merge = cl[cl.index("template <int HD, int NT>"):cl.rindex("#endif")]
dec = dec.replace(inc, "")
arch = "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\n    if constexpr (CS > 0)"
assert arch in dec, "attn_emu: cluster merge call not found"
dec = dec.replace(arch, "#if 1\n    if constexpr (CS > 0)")
smem = "__shared__ float4 smem4[(ATD_SMEM_FLOATS(GM, CS, NT) + 3) / 4];"
assert smem in dec, "attn_emu: decode shared memory not found"
dec = dec.replace(smem, "float4* smem4 = emu_smem();")
hd = "template <typename T, int GM, int HD, int CS, int NT>\n__device__ void attn_dec_hd"
assert hd in dec, "attn_emu: attn_dec_hd not found"
dec = dec.replace(hd, merge + hd, 1)
comb = a[a.index("#define ATC_MAX_SPLITS"):a.index("// ---- decode:")].replace('extern "C" ', "")
# Uninitialised register arrays start as NaN bits in the emulation (stale registers on the GPU).
decl = "Kv8<T> kr[U], vr[U];"
assert decl in dec, "attn_emu: Kv8 declaration not found"
dec = dec.replace(decl, decl + " EMU_POISON(kr); EMU_POISON(vr);")
open(f"{work}/kern.h", "w").write(args + comb + dec)
d = open(f"{root}/kernels/deltanet.cu").read()
d = d[d.index("#define DC_T 64"):].replace("extern __shared__ float smem[];", "float* smem = g_smem;")
open(f"{work}/delta_kern.h", "w").write(d.replace('extern "C" ', ""))
PY
cd "$WORK"
g++ -O1 -std=c++17 -w dot_check.cpp -o dot_check
g++ -O1 -std=c++20 -w -pthread attn_emu.cpp -o attn_emu
./dot_check | tail -n 13
./attn_emu
g++ -O1 -std=c++20 -w -pthread delta_emu.cpp -o delta_emu
./delta_emu
