# Session 15 device call 2: decode-attention split count and head split, interleaved A/B.
# 27B FP8: default / POCKET_ATTN_SPLITS=4 / head split (2 heads per block at any context) with 4
# splits; 8B Q4_0: default / POCKET_ATTN_SPLITS=4.
mkdir -p bundle/bin bundle/vocab /tmp/pocket-lib
ln -sf /usr/lib/x86_64-linux-gnu/libnccl.so.2 /tmp/pocket-lib/libnccl.so
gunzip -c .cache/probe/pocket-bench.gz > bundle/bin/pocket-bench && chmod +x bundle/bin/pocket-bench
gunzip -c .cache/probe/ggml-vocab-qwen2.gguf.gz > bundle/vocab/ggml-vocab-qwen2.gguf
gunzip -c .cache/probe/ggml-vocab-llama-bpe.gguf.gz > bundle/vocab/ggml-vocab-llama-bpe.gguf
cp scripts/device/ab.sh bundle/
echo "== 27B A/B $(date -u +%T)"
AB_SETS="default=;s4=POCKET_ATTN_SPLITS=4;hs2s4=POCKET_ATTN_HEAD_SPLIT_KEYS=4096 POCKET_ATTN_HEADS=2 POCKET_ATTN_SPLITS=4" ROUNDS=3 OUT=$BG_OUT/ab-27b BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -4
rm -rf /tmp/big/*
echo "== 8B A/B $(date -u +%T)"
AB_MODEL=synthetic:llama3-8b:q4_0 AB_SETS="default=;s4=POCKET_ATTN_SPLITS=4;s8=POCKET_ATTN_SPLITS=8" ROUNDS=2 OUT=$BG_OUT/ab-8b BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -4
echo "== end $(date -u +%T)"
