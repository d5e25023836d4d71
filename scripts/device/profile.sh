#!/usr/bin/env bash
# Per-kernel time of a few decode steps under Nsight Compute (one metric: gpu__time_duration), for
# the 8B Q4_0, SmolLM2 Q4_1 and Qwen3.5-27B FP8 synthetic models. Run from the repository root on
# the device with the bundle unpacked:  bash bundle/profile.sh   (writes $OUT/profile-*.csv and a
# summary per model: kernels by total time, and the sum per decode step).
set -uo pipefail
BUNDLE="${BUNDLE:-$(cd "$(dirname "$0")" && pwd)}"
OUT="${OUT:-/tmp/pocket-profile}"
mkdir -p "$OUT" /tmp/pocket-prof
export LD_LIBRARY_PATH="/usr/local/nvidia/lib64:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
NCU="$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)"
BENCH="$BUNDLE/bin/pocket-bench"
GEN="${PROFILE_GEN:-4}"
# PROFILE_PROMPT=512 PROFILE_GEN=1 PROFILE_REPS=1 profiles a prefill instead of decode steps.
PROMPT="${PROFILE_PROMPT:-1}"
REPS="${PROFILE_REPS:-3}"
TAG="${PROFILE_TAG:-}"
profile() { # name model-arg...
  local name=$1$TAG; shift
  timeout 300 "$NCU" --clock-control none --cache-control none --metrics gpu__time_duration.sum \
    --csv --page raw --log-file "$OUT/profile-$name.ncu.log" \
    "$BENCH" run "$@" --device cuda --prompt-tokens "$PROMPT" --gen-tokens "$GEN" --reps "$REPS" --warmup 0 \
    --vocab-dir "$BUNDLE/vocab" >"$OUT/profile-$name.csv" 2>"$OUT/profile-$name.err"
  echo "ncu $name rc=$?"
  # Steps: 3 repetitions of a one-token prefill and GEN decode steps.
  python3 "$BUNDLE/profile_summary.py" "$OUT/profile-$name.ncu.log" "$((REPS * GEN + REPS))" | tee "$OUT/profile-$name.txt"
  xz -T0 "$OUT/profile-$name.ncu.log"
}
for spec in ${PROFILE_DENSE-llama3-8b:q4_0 smollm-135m:q4_1}; do
  f="/tmp/pocket-prof/${spec/:/-}.gguf"
  [ -e "$f" ] || "$BENCH" synth "${spec%%:*}" "${spec##*:}" --out "$f" --vocab-dir "$BUNDLE/vocab" >/dev/null 2>&1
  profile "${spec/:/-}" --model "$f"
done
rm -f /tmp/pocket-prof/*.gguf
if [ "${PROFILE_HYBRID:-1}" = 1 ]; then
  profile qwen3.5-27b-fp8 --model synthetic:qwen3.5-27b:fp8 --synth-dir /tmp/pocket-prof
  rm -rf /tmp/pocket-prof/*
fi
