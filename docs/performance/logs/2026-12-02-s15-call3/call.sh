# Session 15 device call 3: every test binary with the f16 KV cache the GPU engine's default,
# then the 27B FP8 and 8B Q4_0 decode (and prefill) with f16 (default) against f32 caches,
# interleaved.
mkdir -p /tmp/pocket-lib; ln -sf /usr/lib/x86_64-linux-gnu/libnccl.so.2 /tmp/pocket-lib/libnccl.so
export LD_LIBRARY_PATH=/tmp/pocket-lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $BG_OUT/tests
echo "== tests $(date -u +%T)"
for exe in bundle/bin/test-*; do n=$(basename $exe); [[ $n == *cuda_bench* ]] && continue
  timeout 200 $exe --test-threads=4 --nocapture > $BG_OUT/tests/$n.log 2>&1; rc=$?
  echo "$n rc=$rc $(grep '^test result' $BG_OUT/tests/$n.log | tail -1 | cut -c1-60)"; done
echo "== 27B A/B $(date -u +%T)"
AB_SETS="f16=;f32=--kv-cache f32" ROUNDS=2 OUT=$BG_OUT/ab-27b BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -3
rm -rf /tmp/big/*
echo "== 8B A/B $(date -u +%T)"
AB_MODEL=synthetic:llama3-8b:q4_0 AB_SETS="f16=;f32=--kv-cache f32" ROUNDS=2 OUT=$BG_OUT/ab-8b BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -3
grep -h "prefill pp512" $BG_OUT/ab-*/ab/*.txt | cut -c1-60
echo "== end $(date -u +%T)"
