# Session 16 device call 3: the cluster kernels back to call 1's keys in flight, only for groups
# up to 4 and bounds up to 1024 keys, in blocks of 128 threads (On, the default) or 256 (Wide).
# Tests, the decode-attention sweep, parity through the cluster path, then interleaved
# whole-step A/Bs (8B Q4_0, SmolLM2-135M Q4_1): on / wide / off.
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
sed -n '/==== summary/,$p' $BG_OUT/sweep.log | grep -E "ctx +(128|640|1024) " | sed 's/ *GB\/s)//g' | cut -c1-150
echo "== parity $(date -u +%T)"
timeout 300 bundle/bin/pocket-bench parity --model synthetic:smollm-135m:q4_1 --device cuda --steps 64 \
  --prompt-lengths 7,300,600 --synth-dir /tmp/pocket-synth --vocab-dir bundle/vocab > $BG_OUT/parity.log 2>&1
grep -E "^parity" $BG_OUT/parity.log | cut -c1-160
echo "== 8B A/B $(date -u +%T)"
AB_MODEL=synthetic:llama3-8b:q4_0 AB_SETS="on=;wide=POCKET_ATTN_CLUSTER=wide;off=POCKET_ATTN_CLUSTER=0" ROUNDS=3 OUT=$BG_OUT/ab-8b BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -4
rm -rf /tmp/big/*
echo "== SmolLM2 A/B $(date -u +%T)"
AB_MODEL=synthetic:smollm-135m:q4_1 AB_SETS="on=;wide=POCKET_ATTN_CLUSTER=wide;off=POCKET_ATTN_CLUSTER=0" ROUNDS=2 OUT=$BG_OUT/ab-smol BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -4
echo "== end $(date -u +%T)"
