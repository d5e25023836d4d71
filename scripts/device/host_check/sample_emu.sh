#!/usr/bin/env bash
# CPU check of the device sampler (kernels/sample.cu with greedy.cuh): the kernel sources are
# extracted as they are and run with one fiber per CUDA thread (sample_emu.cpp): the launch with
# per-row parameters over several blocks per row against the one-block launch and a float64
# reference, greedy and sampled rows mixed.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cp "$HERE"/sample_emu.cpp "$HERE"/fibers.h "$WORK"/
PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$HERE" python3 - "$ROOT" "$WORK" <<'PY'
import sys
root, work = sys.argv[1], sys.argv[2]
from functools import partial
import kernel_src
after = partial(kernel_src.after, root)
greedy = after("greedy.cuh", '#include "common.cuh"\n')
cut = after("sample_cut.cuh", '#include "greedy.cuh"\n')
sample = after("sample.cu", '#include "sample_cut.cuh"\n')
open(f"{work}/kern.h", "w").write(greedy + cut + sample)
PY
cd "$WORK"
g++ -O1 -std=c++20 -w sample_emu.cpp -o sample_emu
./sample_emu
