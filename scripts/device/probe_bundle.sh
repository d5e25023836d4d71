#!/usr/bin/env bash
# A small device bundle for a quick A/B: the release `pocket-bench` and the named test binaries
# only (stripped), two or three llama.cpp vocabularies, packed into .cache/probe/probe.tar.xz
# (one xz stream with a wide dictionary: every binary embeds the same kernels, so the copies
# after the first cost little; five binaries came to 6-8 MB in session 16, against ~19 MB for
# `cargo xtask device-bundle`). Carry `.cache/probe`; on the device `tar -xJf
# .cache/probe/probe.tar.xz` gives bundle/bin/pocket-bench and bundle/bin/test-<name>.
#
#   bash scripts/device/probe_bundle.sh pocket-kernels:cuda_attention pocket-models:engine_graphs
#
# Arguments: PACKAGE:TEST for each test binary. VOCABS (default "llama-bpe gpt-2 qwen2") names
# the ggml-vocab-<name>.gguf files taken from ../shared/data/tokenizer-vectors.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bundle/bin" "$STAGE/bundle/vocab" .cache/probe
cargo build --release -p pocket-bench --bins
cp target/release/pocket-bench "$STAGE/bundle/bin/"
for spec in "$@"; do
  pkg="${spec%%:*}"
  test="${spec#*:}"
  [ "$pkg" != "$spec" ] || { echo "want PACKAGE:TEST, got $spec" >&2; exit 2; }
  exe=$(cargo test --release --no-run -p "$pkg" --test "$test" --message-format=json |
    python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])' | tail -n 1)
  [ -n "$exe" ] || { echo "no test binary for $spec" >&2; exit 1; }
  cp "$exe" "$STAGE/bundle/bin/test-$test"
done
strip "$STAGE"/bundle/bin/*
for v in ${VOCABS:-llama-bpe gpt-2 qwen2}; do
  cp "$ROOT/../shared/data/tokenizer-vectors/ggml-vocab-$v.gguf" "$STAGE/bundle/vocab/"
done
tar -C "$STAGE" -cf - bundle | xz -T1 --lzma2=preset=6,dict=192MiB >.cache/probe/probe.tar.xz
ls -la .cache/probe/probe.tar.xz
