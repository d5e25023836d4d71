#!/usr/bin/env bash
# Shows that the host emulations can fail: each fault below is injected into a copy of kernels/
# and the emulation that covers it must report FAIL (exit non-zero). Not part of scripts/test
# (each fault reruns a whole emulation, ~10 min in all); run it after changing an emulation or
# the kernels it extracts:  bash scripts/device/host_check/faults.sh
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
# name | kernel file | text | replacement | emulation (with arguments); no field may hold a '|'
FAULTS=(
  "radix passes ignore the digits found|sample_cut.cuh|const bool in = ok && key_of(v, key) && (key & mask) == prefix;|const bool in = ok && key_of(v, key);|sample_emu.sh"
  "a weight set taken without k candidates|sample.cu|const bool holds = kk > 0 ? c >= (float)kk :|const bool holds = kk > 0 ? true :|sample_emu.sh"
  "one-row GEMV skips a slot's last refill|fp8_row.cuh|if (cn < nch) row1_load_chunk|if (cn + 32 < nch) row1_load_chunk|gemv_emu.sh small"
  "cluster merge drops rank 0's sum|attention_cluster.cuh|            L += l[r] * w;|            if (r > 0) L += l[r] * w;|run.sh"
  "decode attention stages the new key before the wait|attention.cu|j >= pos) break;|j > pos) break;|run.sh"
  "staged keys read back from the wrong slot|attention.cu|kr[u].r = stage[(2 * (i0 + u)) * NT + tid];|kr[u].r = stage[(2 * (i0 + u) + 1) * NT + tid];|run.sh"
)
bad=0
for f in "${FAULTS[@]}"; do
  IFS='|' read -r name file text repl emu <<<"$f"
  work="$(mktemp -d)"
  mkdir -p "$work/scripts/device"
  cp -r "$ROOT/kernels" "$work/"
  cp -r "$HERE" "$work/scripts/device/"
  python3 - "$work/kernels/$file" "$text" "$repl" <<'PY' || { echo "$name: text not found in $file"; bad=1; rm -rf "$work"; continue; }
import sys
p, old, new = sys.argv[1], sys.argv[2], sys.argv[3]
s = open(p).read()
if s.count(old) != 1:
    sys.exit(1)
open(p, "w").write(s.replace(old, new))
PY
  if bash "$work/scripts/device/host_check/"$emu >"$work/log" 2>&1; then
    echo "NOT CAUGHT: $name ($emu passed)"
    bad=1
  else
    echo "caught: $name ($emu: $(grep -c FAIL "$work/log") FAIL lines)"
  fi
  rm -rf "$work"
done
exit $bad
