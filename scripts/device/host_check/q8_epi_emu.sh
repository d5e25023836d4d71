#!/usr/bin/env bash
# CPU check of the dp4a GEMV epilogues (kernels/gemv_q8_epi.cu over gemv_q8r.cuh's core): the
# kernel sources are extracted as they are and run with one fiber per CUDA thread
# (q8_epi_emu.cpp), blocks in a shuffled order (the group's last block is whichever comes last),
# against f64 references: a folded norm's producer, its consumer, and the SwiGLU form, with
# Q4_0 and Q8_0 weights, 128- and 64-thread blocks, widths with and without whole 256-groups.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cp "$HERE"/q8_epi_emu.cpp "$HERE"/fibers.h "$WORK"/
PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$HERE" python3 - "$ROOT" "$WORK" <<'PY'
import sys
root, work = sys.argv[1], sys.argv[2]
from functools import partial
import kernel_src
from kernel_src import between
after = partial(kernel_src.after, root)
common = open(f"{root}/kernels/common.cuh").read()
fmts = between(common, "// The 16 non-linear levels", "// X-macro over every format with a device decoder")
quant = common[common.index("// Rust's `f as i8`"):]
dot = after("dot_q8.cuh", '#include "common.cuh"\n')
dot = dot.replace("#if __CUDA_ARCH__ >= 610\n    return __dp4a(a, b, c);\n#else\n", "").replace("#endif\n}", "}", 1)
fdots = open(f"{root}/kernels/dot_formats.cuh").read()
fdots = fdots[fdots.index("struct DotQ4_0 {"):]
core = after("gemv_q8r.cuh", '#include "dot_formats.cuh"\n')
fold = after("rms_fold.cuh", '#include "common.cuh"\n')
gate = after("gate_math.cuh", '#include "common.cuh"\n')
epi = open(f"{root}/kernels/gemv_q8_epi.cu").read()
epi = between(epi, "struct Q8Out {", "// gemv_q8e_<fmt> (plain rows)")
open(f"{work}/kern.h", "w").write(fmts + quant + dot + fdots + core + fold + gate + epi)
PY
cd "$WORK"
g++ -O1 -std=c++20 -w q8_epi_emu.cpp -o q8_epi_emu
./q8_epi_emu
