# Session 18 device call 2: the SwiGLU moved into the down GEMV (gemv_q8r_swiglu_*, on by
# default in this build; POCKET_SWIGLU_DOWN=0 is the separate silu_mul_halves_q8 launch): tests,
# parity, 8B A/B in three formats, SmolLM2 A/B, step trace.
set -u
. scripts/device/probe_setup.sh
mkdir -p $BG_OUT/tests
echo "== tests $(date -u +%T)"
for exe in bundle/bin/test-*; do n=$(basename $exe)
  timeout 200 $exe --test-threads=4 --nocapture > $BG_OUT/tests/$n.log 2>&1; rc=$?
  echo "$n rc=$rc $(grep '^test result' $BG_OUT/tests/$n.log | tail -1 | cut -c1-60)"; done
echo "== parity $(date -u +%T)"
for m in smollm-135m:q4_1 qwen2.5-0.5b:q4_k_m; do timeout 150 bundle/bin/pocket-bench parity --model synthetic:$m --device cuda --steps 64 \
  --prompt-lengths 300,600 --synth-dir /tmp/pocket-synth --vocab-dir bundle/vocab > $BG_OUT/parity-${m/:/-}.log 2>&1
  grep -E "^parity.*(PASS|FAIL)" $BG_OUT/parity-${m/:/-}.log | cut -c1-110; done
for f in q4_0 q4_k_m q8_0; do echo "== 8B $f A/B $(date -u +%T)"
  AB_MODEL=synthetic:llama3-8b:$f AB_SETS="fused=;split=POCKET_SWIGLU_DOWN=0" ROUNDS=3 OUT=$BG_OUT/ab-8b-$f BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -3; done
echo "== SmolLM2 A/B $(date -u +%T)"
AB_MODEL=synthetic:smollm-135m:q4_1 AB_SETS="fused=;split=POCKET_SWIGLU_DOWN=0" ROUNDS=2 OUT=$BG_OUT/ab-smol BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -3
echo "== trace $(date -u +%T)"
TRACE_MODELS="llama3-8b:q4_0" TRACE_PLAIN=0 OUT=$BG_OUT/trace bash bundle/trace.sh | tail -1
echo "== end $(date -u +%T)"
