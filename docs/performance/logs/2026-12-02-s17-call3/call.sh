# Session 17 device call 3: the whole test set and parity on the bundle of this session's code,
# the 27B FP8 run, then after.sh (interleaved A/Bs and a step trace).
set -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
tar -xJf .cache/device/bundle.tar.xz
echo "== session stages $(date -u +%T)"
BENCH_FILTER="bench_decode_step_8b" SESSION_STAGES="tests synth parity hybrid-fp8" bash bundle/session.sh stages
cp -r /tmp/pocket-session/out $BG_OUT/session
cat /tmp/pocket-session/progress
tail -n 45 $BG_OUT/session/run.log
grep -E "^parity|PASS|FAIL" $BG_OUT/session/parity.log | tail -6
grep -E "decode|prefill" $BG_OUT/session/hybrid-fp8.txt | tail -3
bash .cache/device/after.sh
