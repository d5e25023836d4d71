# Session 14 device call 3: the 8B A/Bs of the dp4a epilogues again, their module now triggering
# the next kernel early like gemv_q8r (call 2 ran them with the late trigger), and the trace.
mkdir -p bundle/bin bundle/vocab
mkdir -p /tmp/pocket-lib; ln -sf /usr/lib/x86_64-linux-gnu/libnccl.so.2 /tmp/pocket-lib/libnccl.so
gunzip -c .cache/probe/pocket-bench.gz > bundle/bin/pocket-bench && chmod +x bundle/bin/pocket-bench
gunzip -c .cache/probe/ggml-vocab-llama-bpe.gguf.gz > bundle/vocab/ggml-vocab-llama-bpe.gguf
cp scripts/device/ab.sh scripts/device/trace.sh scripts/device/trace_layers.py bundle/
echo "== 8B q4_0 A/B $(date -u +%T)"
AB_MODEL=synthetic:llama3-8b:q4_0 AB_SETS="both=;fold=POCKET_GATE_UP_FUSED=0;glu=POCKET_RMS_FOLD=0;unfused=POCKET_RMS_FOLD=0 POCKET_GATE_UP_FUSED=0" ROUNDS=2 OUT=$BG_OUT/ab-q4_0 BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -5
echo "== 8B trace $(date -u +%T)"
TRACE_PLAIN=0 TRACE_MODELS="llama3-8b:q4_0" OUT=$BG_OUT BUNDLE=$PWD/bundle bash bundle/trace.sh | tail -2
rm -rf /tmp/big/*
echo "== 8B q4_k_m A/B $(date -u +%T)"
AB_MODEL=synthetic:llama3-8b:q4_k_m AB_SETS="both=;fold=POCKET_GATE_UP_FUSED=0;unfused=POCKET_RMS_FOLD=0 POCKET_GATE_UP_FUSED=0" ROUNDS=1 OUT=$BG_OUT/ab-q4_k_m BUNDLE=$PWD/bundle bash bundle/ab.sh | tail -4
echo "== end $(date -u +%T)"
