# Session 18 device call 3: the SwiGLU in the down GEMV, second form (each cluster quantizes into
# its own region of a global scratch; clusters of 8 by default, POCKET_SWIGLU_DOWN=4 or 0 = the
# separate silu_mul_halves_q8 launch): tests, parity, 8B A/B, step traces.
set -u
. scripts/device/probe_setup.sh
mkdir -p $BG_OUT/tests
echo "== tests $(date -u +%T)"
for exe in bundle/bin/test-*; do n=$(basename $exe)
  timeout 120 $exe --test-threads=4 --nocapture > $BG_OUT/tests/$n.log 2>&1; rc=$?
  echo "$n rc=$rc $(grep '^test result' $BG_OUT/tests/$n.log | tail -1 | cut -c1-60)"; done
echo "== parity $(date -u +%T)"
for m in smollm-135m:q4_1 qwen2.5-0.5b:q4_k_m; do timeout 100 bundle/bin/pocket-bench parity --model synthetic:$m --device cuda --steps 64 \
  --prompt-lengths 300,600 --synth-dir /tmp/pocket-synth --vocab-dir bundle/vocab > $BG_OUT/parity-${m/:/-}.log 2>&1
  grep -E "^parity.*(PASS|FAIL)" $BG_OUT/parity-${m/:/-}.log | cut -c1-110; done
echo "== 8B q4_0 A/B $(date -u +%T)"
AB_MODEL=synthetic:llama3-8b:q4_0 AB_SETS="c8=;c4=POCKET_SWIGLU_DOWN=4;split=POCKET_SWIGLU_DOWN=0" ROUNDS=3 OUT=$BG_OUT/ab-8b-q4_0 BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -4
echo "== traces $(date -u +%T)"
TRACE_MODELS="llama3-8b:q4_0" TRACE_PLAIN=0 OUT=$BG_OUT/trace-c8 bash bundle/trace.sh | tail -1
POCKET_SWIGLU_DOWN=0 TRACE_MODELS="llama3-8b:q4_0" TRACE_PLAIN=0 OUT=$BG_OUT/trace-split bash bundle/trace.sh | tail -1
echo "== end $(date -u +%T)"
