#!/usr/bin/env bash
# Whole-step A/B of the 27B FP8 decode on the GPU machine, interleaved so that drift between
# rounds hits every setting alike (decode speed moves by up to 1.5% between device calls, so
# only settings timed in the same call are compared).
#
#   AB_SETS="default=;ring8=POCKET_FP8_RING=8" ROUNDS=2 bash bundle/ab.sh
#
# AB_SETS: ';'-separated `name=VAR=value VAR2=value ... [--run-flag value ...]` (an empty list
# after `name=` is the defaults; `AB_BENCH=path` there runs that pocket-bench instead of the
# bundle's, for an A/B against another commit's build). AB_MODEL: the synthetic model (default synthetic:qwen3.5-27b:fp8). Each run's output
# goes to $OUT/ab/<name>-<round>.txt; a table of decode tok/s per setting and round comes last.
set -u
BUNDLE="${BUNDLE:-$(cd "$(dirname "$0")" && pwd)}"
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT/ab" /tmp/pocket-lib /tmp/big
export LD_LIBRARY_PATH="/tmp/pocket-lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
MODEL="${AB_MODEL:-synthetic:qwen3.5-27b:fp8}"
IFS=';' read -ra sets <<<"${AB_SETS:-default=}"
for r in $(seq 1 "${ROUNDS:-2}"); do
  for s in "${sets[@]}"; do
    name="${s%%=*}"
    vars="${s#*=}"
    # Leading VAR=value words go to the environment, the rest (e.g. --kv-cache f32) to the run.
    envs=()
    args=()
    for w in $vars; do
      if [ ${#args[@]} -eq 0 ] && [[ $w == *=* ]]; then envs+=("$w"); else args+=("$w"); fi
    done
    # AB_BENCH=path among them runs another build of pocket-bench (e.g. the previous commit's).
    exe="$BUNDLE/bin/pocket-bench"
    for e in "${envs[@]}"; do [[ $e == AB_BENCH=* ]] && exe="${e#AB_BENCH=}"; done
    env "${envs[@]}" timeout "${AB_TIMEOUT:-300}" "$exe" run --model "$MODEL" --device cuda \
      --prompt-tokens 512 --gen-tokens 128 --reps 3 --synth-dir /tmp/big --vocab-dir "$BUNDLE/vocab" \
      "${args[@]}" >"$OUT/ab/$name-$r.txt" 2>&1
  done
done
echo "==== decode tg128 tok/s (median of 3) per setting and round: $MODEL ===="
for s in "${sets[@]}"; do
  name="${s%%=*}"
  line="$(printf '%-12s' "$name")"
  for r in $(seq 1 "${ROUNDS:-2}"); do
    v=$(grep -o 'decode tg128: ours [0-9.]*' "$OUT/ab/$name-$r.txt" | awk '{print $4}')
    line+=" $(printf '%8s' "${v:-FAIL}")"
  done
  echo "$line  (${s#*=})"
done
