# Session 14 device call 2: every test binary; the 8B Q4_0 A/B of each dp4a epilogue on and off;
# the 8B step trace; the 27B GEMV bench (n1w16s2) and the 27B step trace with n1w8s2 the default.
mkdir -p /tmp/pocket-lib; ln -sf /usr/lib/x86_64-linux-gnu/libnccl.so.2 /tmp/pocket-lib/libnccl.so
export LD_LIBRARY_PATH=/tmp/pocket-lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $BG_OUT/tests
echo "== tests $(date -u +%T)"
for exe in bundle/bin/test-*; do n=$(basename $exe); [[ $n == *cuda_bench* ]] && continue
  timeout 200 $exe --test-threads=4 --nocapture > $BG_OUT/tests/$n.log 2>&1; rc=$?
  echo "$n rc=$rc $(grep '^test result' $BG_OUT/tests/$n.log | tail -1 | cut -c1-60)"; done
echo "== 8B q4_0 A/B $(date -u +%T)"
AB_MODEL=synthetic:llama3-8b:q4_0 AB_SETS="both=;fold=POCKET_GATE_UP_FUSED=0;glu=POCKET_RMS_FOLD=0;unfused=POCKET_RMS_FOLD=0 POCKET_GATE_UP_FUSED=0" ROUNDS=2 OUT=$BG_OUT/ab-q4_0 BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -5
rm -rf /tmp/big/*
echo "== 8B trace $(date -u +%T)"
TRACE_PLAIN=0 TRACE_MODELS="llama3-8b:q4_0" OUT=$BG_OUT BUNDLE=$PWD/bundle bash bundle/trace.sh | tail -2
echo "== 27B GEMV bench $(date -u +%T)"
bundle/bin/test-pocket_kernels-cuda_bench_fp8 --ignored --nocapture --test-threads=1 bench_fp8_gemv_27b > $BG_OUT/bench_fp8_gemv_27b.log 2>&1; echo "rc=$?"
grep -E "warp16s2|warp8s2" $BG_OUT/bench_fp8_gemv_27b.log | grep " f16 " | awk '!seen[$0]++' | head -14
echo "== 27B trace $(date -u +%T)"
TRACE_MODELS="qwen3.5-27b:fp8" OUT=$BG_OUT BUNDLE=$PWD/bundle bash bundle/trace.sh | tail -2
echo "== end $(date -u +%T)"
