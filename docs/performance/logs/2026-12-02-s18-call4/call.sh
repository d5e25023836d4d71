# Session 18 device call 4: the fused SwiGLU down GEMV's test with the Q4_K shape fixed, and
# the 8B A/B with the gate|up GEMV triggering late (POCKET_PDL_EARLY=wave: only one-wave GEMVs
# early), since call 3's trace showed the gate|up slower with a 1024-block successor.
set -u
. scripts/device/probe_setup.sh
mkdir -p $BG_OUT/tests
echo "== tests $(date -u +%T)"
for exe in bundle/bin/test-*; do n=$(basename $exe)
  timeout 120 $exe --test-threads=4 --nocapture > $BG_OUT/tests/$n.log 2>&1; rc=$?
  echo "$n rc=$rc $(grep '^test result' $BG_OUT/tests/$n.log | tail -1 | cut -c1-60)"; done
echo "== 8B q4_0 A/B $(date -u +%T)"
AB_MODEL=synthetic:llama3-8b:q4_0 AB_SETS="c8=;c8wave=POCKET_PDL_EARLY=wave;split=POCKET_SWIGLU_DOWN=0;splitwave=POCKET_SWIGLU_DOWN=0 POCKET_PDL_EARLY=wave" ROUNDS=3 OUT=$BG_OUT/ab-8b-q4_0 BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -5
echo "== trace $(date -u +%T)"
POCKET_PDL_EARLY=wave TRACE_MODELS="llama3-8b:q4_0" TRACE_PLAIN=0 OUT=$BG_OUT/trace-c8wave bash bundle/trace.sh | tail -1
echo "== end $(date -u +%T)"
