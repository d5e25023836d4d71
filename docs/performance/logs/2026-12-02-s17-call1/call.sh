# Session 17 device call 1: decode attention keys staged before pdl_wait (POCKET_ATTN_STAGE).
# Tests (stage on/off bit equality in cuda_attention), parity, interleaved 8B/SmolLM2 A/B, traces.
set -u
mkdir -p /tmp/pocket-lib; ln -sf /usr/lib/x86_64-linux-gnu/libnccl.so.2 /tmp/pocket-lib/libnccl.so
export LD_LIBRARY_PATH=/tmp/pocket-lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
rm -rf bundle; tar -xJf .cache/probe/probe.tar.xz
mkdir -p $BG_OUT/tests
cp scripts/device/ab.sh scripts/device/trace.sh scripts/device/trace_layers.py bundle/
echo "== tests $(date -u +%T)"
for exe in bundle/bin/test-*; do n=$(basename $exe); [[ $n == *bench* ]] && continue
  timeout 200 $exe --test-threads=4 --nocapture > $BG_OUT/tests/$n.log 2>&1; rc=$?
  echo "$n rc=$rc $(grep '^test result' $BG_OUT/tests/$n.log | tail -1 | cut -c1-60)"; done
echo "== attention sweep $(date -u +%T)"
for st in 12 0; do POCKET_ATTN_STAGE=$st timeout 100 bundle/bin/test-cuda_bench_attn_decode --ignored --nocapture bench_attention_decode_shapes > $BG_OUT/sweep-s$st.log 2>&1
  sed -n '/==== summary/,$p' $BG_OUT/sweep-s$st.log | grep -E "(8B|SmolLM2).*ctx +(640|1024) " | sed 's/ *GB\/s)//g' | cut -c1-150 | sed "s/^/s$st /"; done
echo "== parity $(date -u +%T)"
for m in smollm-135m:q4_1 qwen2.5-0.5b:q4_k_m; do timeout 150 bundle/bin/pocket-bench parity --model synthetic:$m --device cuda --steps 64 \
  --prompt-lengths 300,600 --synth-dir /tmp/pocket-synth --vocab-dir bundle/vocab > $BG_OUT/parity-$m.log 2>&1
  grep -E "^parity" $BG_OUT/parity-$m.log | cut -c1-110 | sed "s/^/$m /"; done
echo "== 8B A/B $(date -u +%T)"
AB_MODEL=synthetic:llama3-8b:q4_0 AB_SETS="s12=;s0=POCKET_ATTN_STAGE=0;s16=POCKET_ATTN_STAGE=16" ROUNDS=3 OUT=$BG_OUT/ab-8b BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -5
echo "== SmolLM2 A/B $(date -u +%T)"
AB_MODEL=synthetic:smollm-135m:q4_1 AB_SETS="s12=;s0=POCKET_ATTN_STAGE=0" ROUNDS=2 OUT=$BG_OUT/ab-smol BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -4
echo "== traces $(date -u +%T)"
for st in 12 0; do POCKET_ATTN_STAGE=$st TRACE_MODELS="llama3-8b:q4_0" TRACE_PLAIN=0 OUT=$BG_OUT/trace-s$st bash bundle/trace.sh | tail -3 | sed "s/^/s$st /"; done
echo "== end $(date -u +%T)"
