# Session 14 device call 4: the 27B FP8 decode with n1w8s2 the default under PDL's trigger
# policies (POCKET_PDL_EARLY: default = dp4a early and FP8 early where one wave; dp4a = FP8 late;
# all = every GEMV early).
mkdir -p bundle/bin bundle/vocab /tmp/pocket-lib
ln -sf /usr/lib/x86_64-linux-gnu/libnccl.so.2 /tmp/pocket-lib/libnccl.so
gunzip -c .cache/probe/pocket-bench.gz > bundle/bin/pocket-bench && chmod +x bundle/bin/pocket-bench
gunzip -c .cache/probe/ggml-vocab-qwen2.gguf.gz > bundle/vocab/ggml-vocab-qwen2.gguf
cp scripts/device/ab.sh bundle/
echo "== 27B A/B $(date -u +%T)"
AB_SETS="default=;dp4a=POCKET_PDL_EARLY=dp4a;all=POCKET_PDL_EARLY=all" ROUNDS=2 OUT=$BG_OUT/ab-27b BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -4
echo "== end $(date -u +%T)"
