# Session 17 device call 5: after the review's move of the staging opt-in to open
# (attn_plan::opt_in_stage_smem), the isolated decode attention with staging on and off.
set -u
. scripts/device/probe_setup.sh
for st in 12 0; do POCKET_ATTN_STAGE=$st timeout 60 bundle/bin/test-cuda_bench_attn_decode --ignored --nocapture bench_attention_decode_shapes > $BG_OUT/sweep-s$st.log 2>&1
  sed -n '/==== summary/,$p' $BG_OUT/sweep-s$st.log | grep -E "F16 (8B|SmolLM2).*ctx +640 .*cluster" | cut -c1-120 | sed "s/^/s$st /"; done
