#!/usr/bin/env bash
# End-to-end stage of a device run (after bundle/run.sh's checks): whole-model CUDA-vs-CPU parity
# on synthetic checkpoints of the real models' shapes and formats, then the issue-7 bench set side
# by side with llama.cpp's llama-bench built on the machine from the carried source tarball
# (.cache/llamacpp/llama.cpp-*.tar.xz, llama-cpp-python 0.3.36's vendored llama.cpp 0c1e57098).
# Usage, from the repository root on the GPU machine:
#   setsid bash bundle/e2e.sh build-llama &   (then) bash bundle/e2e.sh synth|parity|bench|all
set -uo pipefail
BUNDLE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$BUNDLE/.." && pwd)"
OUT="${OUT:-/tmp/pocket-out}"
WHAT="${1:-all}"
mkdir -p "$OUT" /tmp/pocket-lib /tmp/pocket-synth
[ -e /usr/lib/x86_64-linux-gnu/libnccl.so.2 ] && ln -sf /usr/lib/x86_64-linux-gnu/libnccl.so.2 /tmp/pocket-lib/libnccl.so
export LD_LIBRARY_PATH="/tmp/pocket-lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
BENCH="$BUNDLE/bin/pocket-bench"
VOCAB="$BUNDLE/vocab"
LOG="$OUT/e2e.log"
: >"$LOG"

# llama.cpp's CUDA build runs on the CPUs while the GPU works; `build-llama` is meant to be started
# in the background (setsid) at the start of a run, and `bench` waits for its marker file.
LLAMA_BENCH=/tmp/llama.cpp/build/bin/llama-bench
if [ "$WHAT" = build-llama ]; then
  tarball=$(ls "$ROOT"/.cache/llamacpp/llama.cpp-*.tar.xz 2>/dev/null | head -n 1)
  [ -n "$tarball" ] || { echo "no llama.cpp tarball under .cache/llamacpp" >/tmp/llama-build.done; exit 1; }
  ( cd /tmp && tar -xJf "$tarball" && cd llama.cpp &&
    cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_FA_ALL_QUANTS=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF \
      -DCMAKE_BUILD_TYPE=Release >/tmp/llama-cmake.log 2>&1 &&
    cmake --build build --target llama-bench -j "$(nproc)" >/tmp/llama-build.log 2>&1 )
  echo "rc=$?" >/tmp/llama-build.done
  exit 0
fi

if [ "$WHAT" = synth ]; then
  for spec in smollm-135m:q4_1 qwen2.5-0.5b:q4_k_m llama3-8b:q4_0 llama3-8b:q4_k_m llama3-8b:q8_0; do
    f="/tmp/pocket-synth/${spec/:/-}.gguf"
    [ -e "$f" ] || "$BENCH" synth "${spec%%:*}" "${spec##*:}" --out "$f" --vocab-dir "$VOCAB" >>"$LOG" 2>&1
  done
  ls -la /tmp/pocket-synth
  exit 0
fi

summary=()
if [ "$WHAT" != bench ]; then
  for model in synthetic:smollm-135m:q4_1 synthetic:qwen2.5-0.5b:q4_k_m; do
    "$BENCH" parity --model "$model" --device cuda --steps 64 --prompt-lengths 7,33,130 \
      --synth-dir /tmp/pocket-synth --vocab-dir "$VOCAB" --json >>"$LOG" 2>&1
    rc=$?
    line=$(grep -E "^parity $model:" "$LOG" | tail -n 1)
    summary+=("${line:-parity $model: no result (rc $rc)}")
    # Every prompt line of this model (each model runs once), including any "greedy split" line.
    grep -E "^parity $model prompt" "$LOG"
  done
  # Hybrid (Qwen3.5: Gated DeltaNet + gated attention; kernels/deltanet.cu): the first small
  # qwen3.5 preset pocket-bench knows. The 27B is left out: its CPU reference is far too slow here.
  hybrid=$("$BENCH" presets 2>/dev/null | grep -oE '^\| qwen3\.5-[^ ]+' | sed 's/^| //' | grep -vx 'qwen3.5-27b' | head -n 1)
  if [ -n "$hybrid" ]; then
    model="synthetic:$hybrid:q8_0"
    "$BENCH" parity --model "$model" --device cuda --steps 64 --prompt-lengths 7,33,130 \
      --synth-dir /tmp/pocket-synth --vocab-dir "$VOCAB" --json >>"$LOG" 2>&1
    rc=$?
    line=$(grep -E "^parity $model:" "$LOG" | tail -n 1)
    grep -E "^parity $model prompt" "$LOG"
    echo "${line:-parity $model: no result (rc $rc)}"
  else
    echo "parity qwen3.5 hybrid: SKIPPED (pocket-bench has no small qwen3.5 preset)" | tee -a "$LOG"
  fi
fi

if [ "$WHAT" != parity ]; then
  for _ in $(seq 1 ${LLAMA_WAIT_S:-420}); do [ -e /tmp/llama-build.done ] && break; sleep 1; done
  cmp=()
  if [ -x "$LLAMA_BENCH" ]; then cmp=(--compare-llama-bench "$LLAMA_BENCH"); else
    echo "llama-bench not built; see /tmp/llama-build.log" | tee -a "$LOG"; tail -n 20 /tmp/llama-build.log 2>/dev/null; fi
  "$BENCH" set cuda --device cuda --reps 3 "${cmp[@]}" --record-dir "$OUT/records" \
    --synth-dir /tmp/pocket-synth --vocab-dir "$VOCAB" >"$OUT/bench.txt" 2>>"$LOG"
  echo "bench set rc=$?" >>"$LOG"
fi

echo
echo "==================== e2e summary ===================="
grep -E "^parity .*(PASS|FAIL|SKIPPED)|^parity .* prompt" "$LOG"
[ -f "$OUT/bench.txt" ] && tail -n 12 "$OUT/bench.txt"
