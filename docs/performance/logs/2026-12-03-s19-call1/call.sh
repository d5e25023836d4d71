# Session 19 device call 1: the GEMV-only bound, timing only (wrong outputs): the 8B Q4_0 decode
# with the SwiGLU and norm launches left out (none), the RoPE launch alone (norope), the decode
# attention alone (noattn), and all four (gemvonly: the step is the GEMVs, the embedding and the
# LM head), against the default, interleaved rounds; then the step trace of gemvonly.
set -u
. scripts/device/probe_setup.sh
S="POCKET_PROBE_SKIP_SILU=1 POCKET_PROBE_SKIP_NORM=1"
echo "== 8B q4_0 A/B $(date -u +%T)"
AB_MODEL=synthetic:llama3-8b:q4_0 AB_SETS="base=;none=$S;norope=POCKET_PROBE_SKIP_ROPE=1;noattn=POCKET_PROBE_SKIP_ATTN=1;gemvonly=$S POCKET_PROBE_SKIP_ROPE=1 POCKET_PROBE_SKIP_ATTN=1" ROUNDS=3 OUT=$BG_OUT/ab-8b-q4_0 BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -7
echo "== trace gemvonly $(date -u +%T)"
env $S POCKET_PROBE_SKIP_ROPE=1 POCKET_PROBE_SKIP_ATTN=1 TRACE_MODELS="llama3-8b:q4_0" TRACE_PLAIN=0 OUT=$BG_OUT/trace-gemvonly bash bundle/trace.sh | tail -1
echo "== trace base $(date -u +%T)"
TRACE_MODELS="llama3-8b:q4_0" TRACE_PLAIN=0 OUT=$BG_OUT/trace-base bash bundle/trace.sh | tail -1
echo "== end $(date -u +%T)"
