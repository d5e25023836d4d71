#!/usr/bin/env bash
# One whole device session in the background, so that no device time is lost between tool calls
# (the llama.cpp stages need .cache/llamacpp; when it does not fit one call beside the bundle,
# carry it in an earlier call on the same warm machine, as docs/performance/logs/
# 2026-12-02-s15-call1/README.md shows):
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

# SESSION_STAGES picks stages (default: all but profile), e.g.
#   SESSION_STAGES="tests synth parity bench profile" bash bundle/session.sh start
want() { [[ " ${SESSION_STAGES:-tests synth parity hybrid-fp8 bench hybrid-q8_0} " == *" $1 "* ]]; }

case "${1:-}" in
start)
  : >"$STATE/progress"
  SESSION_STAGES="${SESSION_STAGES:-tests synth parity hybrid-fp8 bench hybrid-q8_0}" \
    setsid nohup bash "$BUNDLE/session.sh" stages >"$STATE/session.log" 2>&1 </dev/null &
  echo "started"
  ;;
stages)
  cd "$ROOT"
  export OUT="$STATE/out"
  mkdir -p "$OUT"
  stage() { echo "stage $1 $(date -u +%T)" >>"$STATE/progress"; }
  if want bench || want hybrid-q8_0; then
    setsid nohup bash "$BUNDLE/e2e.sh" build-llama >/tmp/llama-outer.log 2>&1 </dev/null &
  fi
  if want tests; then
    stage tests
    bash "$BUNDLE/run.sh" >"$OUT/run.log" 2>&1
  fi
  if want synth; then
    stage synth
    bash "$BUNDLE/e2e.sh" synth >"$OUT/synth.log" 2>&1
  fi
  if want parity; then
    stage parity
    bash "$BUNDLE/e2e.sh" parity >"$OUT/parity.log" 2>&1
    cp "$OUT/e2e.log" "$OUT/parity-e2e.log" 2>/dev/null
  fi
  export LD_LIBRARY_PATH="/tmp/pocket-lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  BENCH="$BUNDLE/bin/pocket-bench"
  BIG=/tmp/pocket-synth-big
  mkdir -p "$BIG"
  # Ours on the 27B-shape FP8 checkpoint while llama.cpp still builds on the CPUs.
  if want hybrid-fp8; then
    stage hybrid-fp8
    "$BENCH" run --model synthetic:qwen3.5-27b:fp8 --device cuda --prompt-tokens 512 --gen-tokens 128 \
      --reps 3 --record-dir "$OUT/records" --synth-dir "$BIG" --vocab-dir "$BUNDLE/vocab" \
      >"$OUT/hybrid-fp8.txt" 2>&1
    echo "hybrid-fp8 rc=$?" >>"$STATE/progress"
    # HYBRID_AB="VAR=value ...; VAR2=value ..." runs the same file again under each ';'-separated
    # set of switches (A/Bs of the whole step in the same session; not recorded): the first to
    # hybrid-fp8-ab.txt, the next to hybrid-fp8-ab2.txt, ...
    if [ -n "${HYBRID_AB:-}" ]; then
      IFS=';' read -ra ab_sets <<<"$HYBRID_AB"
      for i in "${!ab_sets[@]}"; do
        ab="${ab_sets[$i]}"
        suffix=$([ "$i" = 0 ] || echo "$((i + 1))")
        env $ab "$BENCH" run --model synthetic:qwen3.5-27b:fp8 --device cuda --prompt-tokens 512 \
          --gen-tokens 128 --reps 3 --synth-dir "$BIG" --vocab-dir "$BUNDLE/vocab" \
          >"$OUT/hybrid-fp8-ab$suffix.txt" 2>&1
        echo "hybrid-fp8 ab$suffix ($ab) rc=$?" >>"$STATE/progress"
      done
    fi
    rm -rf "$BIG"/*
  fi
  if want bench; then
    stage bench
    LLAMA_WAIT_S=300 bash "$BUNDLE/e2e.sh" bench >"$OUT/bench-e2e.log" 2>&1
    rm -rf /tmp/pocket-synth
  fi
  # Ours and llama.cpp on one 27B-shape GGUF Q8_0 file (if this llama.cpp loads `qwen35`).
  if want hybrid-q8_0; then
    stage hybrid-q8_0
    cmp=()
    [ -x /tmp/llama.cpp/build/bin/llama-bench ] && cmp=(--compare-llama-bench /tmp/llama.cpp/build/bin/llama-bench)
    "$BENCH" run --model synthetic:qwen3.5-27b:q8_0 --device cuda --prompt-tokens 512 --gen-tokens 128 \
      --reps 3 "${cmp[@]}" --record-dir "$OUT/records" --synth-dir "$BIG" --vocab-dir "$BUNDLE/vocab" \
      >"$OUT/hybrid-q8_0.txt" 2>&1
    echo "hybrid-q8_0 rc=$?" >>"$STATE/progress"
    rm -rf "$BIG"/*
  fi
  # Per-kernel times of the decode steps under Nsight Compute (profile.sh).
  if want profile; then
    stage profile
    OUT="$OUT/profile" PROFILE_DENSE="${PROFILE_DENSE:-llama3-8b:q4_0 smollm-135m:q4_1}" \
      bash "$BUNDLE/profile.sh" >"$OUT/profile.log" 2>&1
  fi
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
    grep -h -A 12 "us in all" "$STATE/out/profile.log" 2>/dev/null
  }
  ;;
*)
  echo "usage: session.sh start | wait [seconds]" >&2
  exit 2
  ;;
esac
