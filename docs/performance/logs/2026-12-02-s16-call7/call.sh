# Session 16 device call 7: 16-block clusters (attn_dec_c16_*, non-portable size) against 8 and
# the split launch. Tests, parity through both cluster sizes, then the interleaved 8B Q4_0 A/B.
set -u
mkdir -p /tmp/pocket-lib; ln -sf /usr/lib/x86_64-linux-gnu/libnccl.so.2 /tmp/pocket-lib/libnccl.so
export LD_LIBRARY_PATH=/tmp/pocket-lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
rm -rf bundle; tar -xJf .cache/probe/probe.tar.xz
mkdir -p $BG_OUT/tests
cp scripts/device/ab.sh bundle/
echo "== tests $(date -u +%T)"
for exe in bundle/bin/test-*; do n=$(basename $exe); [[ $n == *bench* ]] && continue
  timeout 120 $exe --test-threads=4 --nocapture > $BG_OUT/tests/$n.log 2>&1; rc=$?
  echo "$n rc=$rc $(grep '^test result' $BG_OUT/tests/$n.log | tail -1 | cut -c1-60)"; done
echo "== attention sweep $(date -u +%T)"
timeout 100 bundle/bin/test-cuda_bench_attn_decode --ignored --nocapture bench_attention_decode_shapes > $BG_OUT/sweep.log 2>&1
sed -n '/==== summary/,$p' $BG_OUT/sweep.log | grep -E "(8B|SmolLM2).*ctx +(640|1024) " | sed 's/ *GB\/s)//g' | cut -c1-150
echo "== parity $(date -u +%T)"
for c in 16; do POCKET_ATTN_CLUSTER=$c timeout 100 bundle/bin/pocket-bench parity --model synthetic:smollm-135m:q4_1 --device cuda --steps 64 \
  --prompt-lengths 300,600 --synth-dir /tmp/pocket-synth --vocab-dir bundle/vocab > $BG_OUT/parity-c$c.log 2>&1
  grep -E "^parity" $BG_OUT/parity-c$c.log | cut -c1-110 | sed "s/^/c$c /"; done
echo "== 8B A/B $(date -u +%T)"
AB_MODEL=synthetic:llama3-8b:q4_0 AB_SETS="c8=;c16=POCKET_ATTN_CLUSTER=16;split=POCKET_ATTN_CLUSTER=0" ROUNDS=2 OUT=$BG_OUT/ab-8b BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -4
echo "== end $(date -u +%T)"
