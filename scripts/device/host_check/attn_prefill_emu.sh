#!/usr/bin/env bash
# CPU check of the tiled prefill attention kernel (kernels/attention_prefill.cu), no GPU needed:
# extracts the kernel body from the source as it is and runs attn_prefill_emu.cpp (g++, C++20).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cp "$HERE"/attn_prefill_emu.cpp "$WORK"/emu.cpp
python3 - "$ROOT" "$WORK" <<'PY'
import sys
root, work = sys.argv[1], sys.argv[2]
src = open(f"{root}/kernels/attention_prefill.cu").read()
body = src[src.index("#define APF_THREADS 128"):src.index("// Tile shapes per head size")]
open(f"{work}/kern.h", "w").write(body)
PY
cd "$WORK"
g++ -O1 -std=c++20 -w -pthread emu.cpp -o emu
./emu
