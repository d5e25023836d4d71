# Session 19 device call 3: the 8B Q4_0 layer's byte stream through a shared-memory ring, phases
# separated by grid barriers or by dataflow waits on the previous phase's waves of rows
# (tests/cuda_bench_persist.rs bench_ring_stream).
set -u
. scripts/device/probe_setup.sh
echo "== ring stream $(date -u +%T)"
timeout 150 bundle/bin/test-cuda_bench_persist --ignored --nocapture --exact bench_ring_stream 2>&1 | tee $BG_OUT/ring.log | tail -32
echo "== end $(date -u +%T)"
