# Session 14 device call: every test binary, then the 8B A/Bs (fold + fused SwiGLU on/off), the
# 8B step trace, the 27B n1w8s2 A/B and GEMV bench. Runs under scripts/device/bg.sh (BG_OUT set).
mkdir -p /tmp/pocket-lib; ln -sf /usr/lib/x86_64-linux-gnu/libnccl.so.2 /tmp/pocket-lib/libnccl.so
export LD_LIBRARY_PATH=/tmp/pocket-lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $BG_OUT/tests
echo "== tests $(date -u +%T)"
for exe in bundle/bin/test-*; do n=$(basename $exe); [[ $n == *cuda_bench* ]] && continue
  timeout 200 $exe --test-threads=4 --nocapture > $BG_OUT/tests/$n.log 2>&1; rc=$?
  echo "$n rc=$rc $(grep '^test result' $BG_OUT/tests/$n.log | tail -1 | cut -c1-60)"; done
U="POCKET_RMS_FOLD=0 POCKET_GATE_UP_FUSED=0"
for m in q4_0 q4_k_m q8_0; do
  echo "== 8B $m A/B $(date -u +%T)"
  AB_MODEL=synthetic:llama3-8b:$m AB_SETS="fused=;unfused=$U" ROUNDS=2 OUT=$BG_OUT/ab-$m BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -4
  rm -rf /tmp/big/*
done
echo "== 8B trace $(date -u +%T)"
TRACE_PLAIN=0 TRACE_MODELS="llama3-8b:q4_0 llama3-8b:q4_k_m" OUT=$BG_OUT BUNDLE=$PWD/bundle bash bundle/trace.sh | tail -4
echo "== 27B s2 A/B $(date -u +%T)"
AB_SETS="default=;s2=POCKET_FP8_SPLIT8=1" ROUNDS=2 OUT=$BG_OUT/ab-27b BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -4
echo "== 27B GEMV bench $(date -u +%T)"
bundle/bin/test-pocket_kernels-cuda_bench_fp8 --ignored --nocapture --test-threads=1 bench_fp8_gemv_27b > $BG_OUT/bench_fp8_gemv_27b.log 2>&1; echo "rc=$?"
grep -E "warp8s2|n1d6" $BG_OUT/bench_fp8_gemv_27b.log | head -12
echo "== end $(date -u +%T)"
