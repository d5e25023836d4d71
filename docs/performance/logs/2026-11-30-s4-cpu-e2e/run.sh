#!/bin/bash
# Interleaved rounds: each round runs both models with llama-bench beside (same invocation).
cd /work/main
for round in ${ROUNDS:-1 2}; do
 for m in /root/.cache/pocketllm/models/qwen2.5-coder-0.5b-instruct/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf /root/.cache/pocketllm/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf; do
  echo "== round $round $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  target/release/pocket-bench run --model $m --device cpu --threads 2 --prompt-tokens 512 --gen-tokens 128 --reps 3 --compare-llama-bench /tmp/lcpp/build-cpu/bin/llama-bench --record-dir /tmp/cpu-s4/records 2>&1
 done
done
echo "== done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
