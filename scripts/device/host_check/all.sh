#!/usr/bin/env bash
# Every CPU check of CUDA kernel logic (g++ with C++20, python3; no GPU): the dp4a work items,
# decode attention and the chunked delta rule (run.sh), the attention prefill
# (attn_prefill_emu.sh), the device sampler (sample_emu.sh) and the one-row GEMVs (gemv_emu.sh;
# its quick set, or `full` for the 27B shapes too). Each extracts the committed kernel sources,
# so a kernel change that breaks them fails here; part of the project's test command
# (scripts/test). faults.sh shows that they can fail (injected faults; not run by this script).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
bash "$HERE/run.sh"
bash "$HERE/attn_prefill_emu.sh"
bash "$HERE/sample_emu.sh"
if [[ "${1:-}" == full ]]; then bash "$HERE/gemv_emu.sh"; else bash "$HERE/gemv_emu.sh" small; fi
