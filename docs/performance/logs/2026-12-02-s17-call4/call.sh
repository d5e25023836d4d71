# Session 17 device call 4: the one-pass decode norms triggering their successor first
# (POCKET_NORM_EARLY=1, off by default in this build) against the defaults; tests and parity
# with it on.
set -u
mkdir -p /tmp/pocket-lib; ln -sf /usr/lib/x86_64-linux-gnu/libnccl.so.2 /tmp/pocket-lib/libnccl.so
export LD_LIBRARY_PATH=/tmp/pocket-lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
rm -rf bundle; tar -xJf .cache/probe/probe.tar.xz
mkdir -p $BG_OUT/tests
cp scripts/device/ab.sh scripts/device/trace.sh scripts/device/trace_layers.py bundle/
echo "== tests (norm early on) $(date -u +%T)"
for exe in bundle/bin/test-*; do n=$(basename $exe)
  POCKET_NORM_EARLY=1 timeout 200 $exe --test-threads=4 --nocapture > $BG_OUT/tests/$n.log 2>&1; rc=$?
  echo "$n rc=$rc $(grep '^test result' $BG_OUT/tests/$n.log | tail -1 | cut -c1-60)"; done
echo "== parity (norm early on) $(date -u +%T)"
for m in smollm-135m:q4_1 qwen2.5-0.5b:q4_k_m; do POCKET_NORM_EARLY=1 timeout 150 bundle/bin/pocket-bench parity --model synthetic:$m --device cuda --steps 64 \
  --prompt-lengths 300,600 --synth-dir /tmp/pocket-synth --vocab-dir bundle/vocab > $BG_OUT/parity-${m/:/-}.log 2>&1
  grep -E "^parity.*(PASS|FAIL)" $BG_OUT/parity-${m/:/-}.log | cut -c1-110; done
echo "== 8B A/B $(date -u +%T)"
AB_MODEL=synthetic:llama3-8b:q4_0 AB_SETS="late=;first=POCKET_NORM_EARLY=1" ROUNDS=4 OUT=$BG_OUT/ab-8b BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -3
echo "== SmolLM2 A/B $(date -u +%T)"
AB_MODEL=synthetic:smollm-135m:q4_1 AB_SETS="late=;first=POCKET_NORM_EARLY=1" ROUNDS=2 OUT=$BG_OUT/ab-smol BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -3
echo "== trace $(date -u +%T)"
POCKET_NORM_EARLY=1 TRACE_MODELS="llama3-8b:q4_0" TRACE_PLAIN=0 OUT=$BG_OUT/trace bash bundle/trace.sh | tail -1
echo "== end $(date -u +%T)"
