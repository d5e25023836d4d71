# Session 17 device call 2: the previous commit's build against the staged keys, and a probe of
# the decode step without its RoPE launch (wrong numbers, timing only: an upper bound on what
# fusing RoPE elsewhere could save), with and without staging.
set -u
mkdir -p /tmp/pocket-lib; ln -sf /usr/lib/x86_64-linux-gnu/libnccl.so.2 /tmp/pocket-lib/libnccl.so
export LD_LIBRARY_PATH=/tmp/pocket-lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
rm -rf bundle; tar -xJf .cache/probe/probe.tar.xz
xz -dc .cache/probe/pocket-bench-old.xz > /tmp/pb-old && chmod +x /tmp/pb-old
cp scripts/device/ab.sh scripts/device/trace.sh scripts/device/trace_layers.py bundle/
echo "== 8B A/B $(date -u +%T)"
AB_MODEL=synthetic:llama3-8b:q4_0 AB_SETS="old=AB_BENCH=/tmp/pb-old;s12=;s0=POCKET_ATTN_STAGE=0;norope12=POCKET_PROBE_SKIP_ROPE=1;norope0=POCKET_PROBE_SKIP_ROPE=1 POCKET_ATTN_STAGE=0" ROUNDS=3 OUT=$BG_OUT/ab-8b BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -6
echo "== traces $(date -u +%T)"
POCKET_PROBE_SKIP_ROPE=1 TRACE_MODELS="llama3-8b:q4_0" TRACE_PLAIN=0 OUT=$BG_OUT/trace-norope12 bash bundle/trace.sh | tail -1
echo "== end $(date -u +%T)"
