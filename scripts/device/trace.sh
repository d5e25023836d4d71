#!/usr/bin/env bash
# Step trace of the decode step on the GPU machine (cuda/step_trace.rs, POCKET_STEP_TRACE=1):
# each kernel's share of the replayed graph's critical path, overlap with its neighbours
# included, for synthetic models, each beside an untraced run of the same file in the same call
# (a traced replay waits for its stamps, so its tok/s is not the model's).
#
#   bash bundle/trace.sh            TRACE_MODELS="qwen3.5-27b:fp8 llama3-8b:q4_0" (the default)
#   TRACE_PLAIN=0 skips the untraced runs (an A/B in the same call already has them).
#
# Output: $OUT/trace/<model>/graph-<n>.txt (one report per captured graph), graph-<n>.layers.txt
# (trace_layers.py: means per layer type) for the decode graph, and
# $OUT/trace/<model>-{plain,traced}.txt (pocket-bench's output); a table comes last.
set -u
BUNDLE="${BUNDLE:-$(cd "$(dirname "$0")" && pwd)}"
OUT="${OUT:-/tmp/out}"
SYN=/tmp/pocket-trace-synth
mkdir -p "$OUT/trace" "$SYN" /tmp/pocket-lib
[ -e /usr/lib/x86_64-linux-gnu/libnccl.so.2 ] && ln -sf /usr/lib/x86_64-linux-gnu/libnccl.so.2 /tmp/pocket-lib/libnccl.so
export LD_LIBRARY_PATH="/tmp/pocket-lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
BENCH="$BUNDLE/bin/pocket-bench"
rows=()
for spec in ${TRACE_MODELS:-qwen3.5-27b:fp8 llama3-8b:q4_0}; do
  tag="${spec/:/-}"
  modes="plain traced"; [ "${TRACE_PLAIN:-1}" = 0 ] && modes=traced
  for mode in $modes; do
    vars=""
    [ "$mode" = traced ] && vars="POCKET_STEP_TRACE=1 POCKET_STEP_TRACE_DIR=$OUT/trace/$tag"
    env $vars timeout "${TRACE_TIMEOUT:-300}" "$BENCH" run --model "synthetic:$spec" --device cuda \
      --prompt-tokens 512 --gen-tokens 128 --reps 3 --synth-dir "$SYN" --vocab-dir "$BUNDLE/vocab" \
      >"$OUT/trace/$tag-$mode.txt" 2>&1
  done
  rm -rf "${SYN:?}"/*
  tok=$(grep -o 'decode tg128: ours [0-9.]*' "$OUT/trace/$tag-plain.txt" 2>/dev/null | awk '{print $4}')
  [ "${TRACE_PLAIN:-1}" = 0 ] && tok="-"
  # The decode graph is the one with the most replays.
  best=""; most=0
  for g in "$OUT/trace/$tag"/graph-*.txt; do
    [ -e "$g" ] || continue
    n=$(head -n 1 "$g" | grep -oE '[0-9]+ replays' | awk '{print $1}')
    if [ "${n:-0}" -gt "$most" ]; then most=$n; best=$g; fi
  done
  span=$( [ -n "$best" ] && sed -n 3p "$best" | grep -oE '[0-9.]+ us' )
  rows+=("$(printf '%-18s plain decode %8s tok/s   traced graph: %s replays, first-to-last stamp %s' \
    "$tag" "${tok:-FAIL}" "$most" "${span:-none}")")
  if [ -n "$best" ]; then
    # Per-layer means (trace_layers.py) beside the report.
    python3 "$BUNDLE/trace_layers.py" "$best" >"${best%.txt}.layers.txt" 2>&1
    echo "==== $tag: $(basename "$best") (top kernels) ===="
    sed -n '1,3p' "$best"
    sed -n '/^kernel /,/^$/p' "$best" | head -n 16
  fi
done
echo "==== step trace summary ===="
for r in "${rows[@]}"; do echo "$r"; done
