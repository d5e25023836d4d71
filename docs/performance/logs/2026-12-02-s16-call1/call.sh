# Session 16 device call 1: the cluster-merged decode attention (attn_dec_c8_*).
# Tests (attention against the CPU / f64 references, graphs against eager), the decode-attention
# shape sweep with and without the cluster, whole-model parity through the cluster path (Qwen2.5
# 0.5B shape, prompts past 256 keys), then interleaved whole-step A/Bs (8B Q4_0, 27B FP8).
set -u
mkdir -p /tmp/pocket-lib; ln -sf /usr/lib/x86_64-linux-gnu/libnccl.so.2 /tmp/pocket-lib/libnccl.so
export LD_LIBRARY_PATH=/tmp/pocket-lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
tar -xJf .cache/probe/probe.tar.xz
mkdir -p $BG_OUT/tests bundle
cp scripts/device/ab.sh bundle/
echo "== tests $(date -u +%T)"
for exe in bundle/bin/test-*; do n=$(basename $exe); [[ $n == *bench* ]] && continue
  timeout 300 $exe --test-threads=4 --nocapture > $BG_OUT/tests/$n.log 2>&1; rc=$?
  echo "$n rc=$rc $(grep '^test result' $BG_OUT/tests/$n.log | tail -1 | cut -c1-60)"; done
echo "== attention sweep $(date -u +%T)"
timeout 200 bundle/bin/test-cuda_bench_attn_decode --ignored --nocapture bench_attention_decode_shapes > $BG_OUT/sweep.log 2>&1
sed -n '/==== summary/,$p' $BG_OUT/sweep.log | grep -E "ctx +(640|1024|2048|4096) " | sed 's/ *GB\/s)//g' | cut -c1-150
echo "== parity $(date -u +%T)"
timeout 300 bundle/bin/pocket-bench parity --model synthetic:qwen2.5-0.5b:q4_k_m --device cuda --steps 64 \
  --prompt-lengths 7,300,600 --synth-dir /tmp/pocket-synth --vocab-dir bundle/vocab > $BG_OUT/parity.log 2>&1
grep -E "^parity" $BG_OUT/parity.log | cut -c1-160
echo "== 8B A/B $(date -u +%T)"
AB_MODEL=synthetic:llama3-8b:q4_0 AB_SETS="cluster=;combine=POCKET_ATTN_CLUSTER=0" ROUNDS=3 OUT=$BG_OUT/ab-8b BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -3
rm -rf /tmp/big/*
echo "== 27B A/B $(date -u +%T)"
AB_SETS="cluster=;combine=POCKET_ATTN_CLUSTER=0" ROUNDS=2 OUT=$BG_OUT/ab-27b BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -3
echo "== end $(date -u +%T)"
