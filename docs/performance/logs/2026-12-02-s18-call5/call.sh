# Session 18 device call 5: upper bounds, timing only (wrong outputs): the 8B Q4_0 decode with
# the SwiGLU launch (POCKET_PROBE_SKIP_SILU=1), the two residual-add norms
# (POCKET_PROBE_SKIP_NORM=1) or all three left out, against the default, interleaved rounds.
set -u
. scripts/device/probe_setup.sh
echo "== 8B q4_0 A/B $(date -u +%T)"
AB_MODEL=synthetic:llama3-8b:q4_0 AB_SETS="base=;nosilu=POCKET_PROBE_SKIP_SILU=1;nonorm=POCKET_PROBE_SKIP_NORM=1;none=POCKET_PROBE_SKIP_SILU=1 POCKET_PROBE_SKIP_NORM=1" ROUNDS=3 OUT=$BG_OUT/ab-8b-q4_0 BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -5
echo "== trace $(date -u +%T)"
POCKET_PROBE_SKIP_SILU=1 POCKET_PROBE_SKIP_NORM=1 TRACE_MODELS="llama3-8b:q4_0" TRACE_PLAIN=0 OUT=$BG_OUT/trace-none bash bundle/trace.sh | tail -1
echo "== end $(date -u +%T)"
