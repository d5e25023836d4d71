#!/usr/bin/env bash
# CPU check of the one-row GEMVs (kernels/gemv_fp8.cu gemv_fp8_row1, every variant and decode;
# kernels/gemv.cu gemv_h):
# the kernel sources are extracted as they are and run with one host thread per CUDA thread
# (gemv_emu.cpp) against an f64 reference, on shapes with partial last blocks and column passes,
# and on the Qwen3.5-27B decode shapes (stacked FP8 [qkv|z] with each part's own tile scales, the
# 248320-row BF16 LM head; sampled blocks there), counting every 16-byte weight read.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cp "$HERE"/gemv_emu.cpp "$WORK"/
python3 - "$ROOT" "$WORK" <<'PY'
import re, sys
root, work = sys.argv[1], sys.argv[2]
g8 = open(f"{root}/kernels/gemv_fp8.cu").read()
dec = g8[g8.index("// Four codes of `v`"):g8.index("// 16 bytes of a weight row, read-only")]
# cvt.rn.f16x2.e4m3x2 (the sm_89+ decode) emulated on the host: gemv_emu.cpp's emu_cvt_e4m3x2;
# built once with __CUDA_ARCH__ 900 (that path) and once without (the integer decode).
asm_re = re.compile(r'asm\("\{\.reg \.b16 lo, hi;.*?: "r"\(v\)\);', re.S)
assert asm_re.search(dec), "cvt asm block not found"
dec = asm_re.sub("h01 = emu_cvt_e4m3x2(v & 0xffffu); h23 = emu_cvt_e4m3x2(v >> 16);", dec)
k = g8[g8.index("// x[16c .. 16c + 16)"):g8.index("template <int E5M2, bool TILED, int M>")]
plain = ("extern uint8_t* g_reads; extern const uint8_t* g_base;\n"
         "inline uint4 ld_stream16(const void* p) { uint4 v; memcpy(&v, p, 16);\n"
         "  if (g_reads) __atomic_fetch_add(&g_reads[((const uint8_t*)p - g_base) / 16], 1, __ATOMIC_RELAXED);\n"
         "  return v; }\n")
g = open(f"{root}/kernels/gemv.cu").read()
h = g[g.index("#define GEMVH_U 4"):g.index("#define DEF_GEMV_H")]
h = re.sub(r"DEVI uint4 ld_stream16\(const void\* p\) \{.*?\n\}\n", "", h, flags=re.S)
open(f"{work}/kern.h", "w").write(dec + plain + k + h)
PY
cd "$WORK"
g++ -O1 -std=c++20 -w -DEMU_CVT gemv_emu.cpp -o gemv_emu_cvt
g++ -O1 -std=c++20 -w gemv_emu.cpp -o gemv_emu
echo "== E4M3 through the f16 conversion (sm_89+ path, cvt emulated)"
./gemv_emu_cvt "$@"
echo "== E4M3 through the integer decode (compute_75 path)"
./gemv_emu "$@"
