# Session 17 device call C: after the session stages, interleaved A/Bs of the two launch changes
# (RoPE kernel triggering the attention first, keys staged) and a step trace.
set -u
export LD_LIBRARY_PATH=/tmp/pocket-lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64
cp scripts/device/ab.sh bundle/ 2>/dev/null
echo "== 8B A/B $(date -u +%T)"
AB_MODEL=synthetic:llama3-8b:q4_0 AB_SETS="both=;stage=POCKET_ROPE_EARLY=0;neither=POCKET_ROPE_EARLY=0 POCKET_ATTN_STAGE=0" ROUNDS=3 OUT=$BG_OUT/ab-8b BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -4
echo "== SmolLM2 A/B $(date -u +%T)"
AB_MODEL=synthetic:smollm-135m:q4_1 AB_SETS="both=;neither=POCKET_ROPE_EARLY=0 POCKET_ATTN_STAGE=0" ROUNDS=2 OUT=$BG_OUT/ab-smol BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -3
echo "== trace $(date -u +%T)"
TRACE_MODELS="llama3-8b:q4_0" TRACE_PLAIN=0 OUT=$BG_OUT/trace bash bundle/trace.sh | tail -1
echo "== 27B A/B $(date -u +%T)"
AB_MODEL=synthetic:qwen3.5-27b:fp8 AB_SETS="both=;neither=POCKET_ROPE_EARLY=0 POCKET_ATTN_STAGE=0" ROUNDS=2 OUT=$BG_OUT/ab-27b BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -3
echo "== end $(date -u +%T)"
