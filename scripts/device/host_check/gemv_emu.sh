#!/usr/bin/env bash
# CPU check of the one-row GEMVs (kernels/gemv_fp8.cu gemv_fp8_row1, every variant and decode;
# kernels/gemv.cu gemv_h): the kernel sources are extracted as they are and run with one fiber
# per CUDA thread (gemv_emu.cpp) against an f64 reference, on shapes with partial last blocks,
# tiles and column passes, in both FP8 weight orders (row-major and tile-lane), and on the
# Qwen3.5-27B decode shapes (stacked FP8 [qkv|z] with each part's own tile scales, the
# 248320-row BF16 LM head; sampled blocks there), counting every 16-byte weight read. `small`
# skips the 27B shapes.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cp "$HERE"/gemv_emu.cpp "$HERE"/fibers.h "$WORK"/
PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$HERE" python3 - "$ROOT" "$WORK" <<'PY'
import re, sys
root, work = sys.argv[1], sys.argv[2]
from functools import partial
import kernel_src
from kernel_src import between
after = partial(kernel_src.after, root)
row = after("fp8_row.cuh", '#include "common.cuh"\n')
# cvt.rn.f16x2.e4m3x2 (the sm_89+ decode) emulated on the host: gemv_emu.cpp's emu_cvt_e4m3x2;
# built once with __CUDA_ARCH__ 900 (that path) and once without (the integer decode).
cvt = re.compile(r'asm\("\{\.reg \.b16 lo, hi;.*?: "r"\(v\)\);', re.S)
assert cvt.search(row), "cvt asm block not found"
row = cvt.sub("h01 = emu_cvt_e4m3x2(v & 0xffffu); h23 = emu_cvt_e4m3x2(v >> 16);", row)
# ld_stream16 is the emulator's (it counts reads).
ld = re.compile(r"// 16 bytes of a weight row, read-only.*?\n}\n", re.S)
assert ld.search(row), "ld_stream16 not found"
row = ld.sub("", row)
fold = after("rms_fold.cuh", '#include "common.cuh"\n')
g8 = open(f"{root}/kernels/gemv_fp8.cu").read()
row1 = between(g8, "template <int E5M2, bool TILED, int DEC, int R, int U, int MINB, int SPLIT = 1>",
               "// ---- one activation row of a stacked")
g = open(f"{root}/kernels/gemv.cu").read()
h = between(g, "#define GEMVH_U 4", "#define DEF_GEMV_H")
h = re.sub(r"DEVI uint4 ld_stream16\(const void\* p\) \{.*?\n\}\n", "", h, flags=re.S)
open(f"{work}/kern.h", "w").write(row + fold + row1 + h)
PY
cd "$WORK"
g++ -O1 -std=c++20 -w -DEMU_CVT gemv_emu.cpp -o gemv_emu_cvt
g++ -O1 -std=c++20 -w gemv_emu.cpp -o gemv_emu
echo "== E4M3 through the f16 conversion (sm_89+ path, cvt emulated)"
./gemv_emu_cvt "$@"
echo "== E4M3 through the integer decode (compute_75 path)"
./gemv_emu "$@"
