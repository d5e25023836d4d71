#!/usr/bin/env bash
# One whole device session in the background, so that no device time is lost between tool calls:
#   call 1:  tar -xJf .cache/device/bundle.tar.xz && bash bundle/session.sh start && bash bundle/session.sh wait 560
#   call 2+: bash bundle/session.sh wait 560        (repeat until it prints "session done")
# Stages, in order: llama.cpp's CUDA build (in parallel, on the CPUs), every test binary and the
# kernel benchmarks (run.sh), the synthetic dense files, CUDA-vs-CPU parity (e2e.sh parity), ours
# on the Qwen3.5-27B shape in FP8, the dense bench set beside llama-bench (e2e.sh bench), then ours
# and llama-bench on one 27B-shape GGUF Q8_0 file. Big files are deleted between stages (64 GB
# disk). `wait` packs everything so far into $OUT/session.tgz of the call that is waiting.
set -uo pipefail
BUNDLE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$BUNDLE/.." && pwd)"
STATE=/tmp/pocket-session
mkdir -p "$STATE"

case "${1:-}" in
start)
  : >"$STATE/progress"
  setsid nohup bash "$BUNDLE/session.sh" stages >"$STATE/session.log" 2>&1 </dev/null &
  echo "started"
  ;;
stages)
  cd "$ROOT"
  export OUT="$STATE/out"
  mkdir -p "$OUT"
  stage() { echo "stage $1 $(date -u +%T)" >>"$STATE/progress"; }
  setsid nohup bash "$BUNDLE/e2e.sh" build-llama >/tmp/llama-outer.log 2>&1 </dev/null &
  stage tests
  bash "$BUNDLE/run.sh" >"$OUT/run.log" 2>&1
  stage synth
  bash "$BUNDLE/e2e.sh" synth >"$OUT/synth.log" 2>&1
  stage parity
  bash "$BUNDLE/e2e.sh" parity >"$OUT/parity.log" 2>&1
  cp "$OUT/e2e.log" "$OUT/parity-e2e.log" 2>/dev/null
  export LD_LIBRARY_PATH="/tmp/pocket-lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  BENCH="$BUNDLE/bin/pocket-bench"
  BIG=/tmp/pocket-synth-big
  mkdir -p "$BIG"
  # Ours on the 27B-shape FP8 checkpoint while llama.cpp still builds on the CPUs.
  stage hybrid-fp8
  "$BENCH" run --model synthetic:qwen3.5-27b:fp8 --device cuda --prompt-tokens 512 --gen-tokens 128 \
    --reps 3 --record-dir "$OUT/records" --synth-dir "$BIG" --vocab-dir "$BUNDLE/vocab" \
    >"$OUT/hybrid-fp8.txt" 2>&1
  echo "hybrid-fp8 rc=$?" >>"$STATE/progress"
  rm -rf "$BIG"/*
  stage bench
  LLAMA_WAIT_S=300 bash "$BUNDLE/e2e.sh" bench >"$OUT/bench-e2e.log" 2>&1
  rm -rf /tmp/pocket-synth
  # Ours and llama.cpp on one 27B-shape GGUF Q8_0 file (if this llama.cpp loads `qwen35`).
  stage hybrid-q8_0
  cmp=()
  [ -x /tmp/llama.cpp/build/bin/llama-bench ] && cmp=(--compare-llama-bench /tmp/llama.cpp/build/bin/llama-bench)
  "$BENCH" run --model synthetic:qwen3.5-27b:q8_0 --device cuda --prompt-tokens 512 --gen-tokens 128 \
    --reps 3 "${cmp[@]}" --record-dir "$OUT/records" --synth-dir "$BIG" --vocab-dir "$BUNDLE/vocab" \
    >"$OUT/hybrid-q8_0.txt" 2>&1
  echo "hybrid-q8_0 rc=$?" >>"$STATE/progress"
  echo "session done $(date -u +%T)" >>"$STATE/progress"
  ;;
wait)
  limit="${2:-560}"
  for _ in $(seq 1 "$limit"); do
    grep -q "session done" "$STATE/progress" 2>/dev/null && break
    sleep 1
  done
  cat "$STATE/progress"
  if [ -n "${OUT:-}" ] && [ -d "$STATE/out" ]; then
    tar czf "$OUT/session.tgz" -C "$STATE" out progress session.log 2>/dev/null
  fi
  grep -q "session done" "$STATE/progress" && {
    echo "session done"
    tail -n 40 "$STATE/out/run.log"
    tail -n 25 "$STATE/out/parity.log"
    tail -n 12 "$STATE/out/hybrid-fp8.txt"
    tail -n 15 "$STATE/out/bench-e2e.log"
    tail -n 12 "$STATE/out/hybrid-q8_0.txt"
  }
  ;;
*)
  echo "usage: session.sh start | wait [seconds]" >&2
  exit 2
  ;;
esac
