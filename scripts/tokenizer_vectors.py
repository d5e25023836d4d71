#!/usr/bin/env python3
"""Writes llama.cpp tokenization vectors for a GGUF model the store fetches, in llama.cpp's
test-tokenizer-0 format: the texts of ../shared/data/tokenizer-vectors/*.inp (one file, all
five are the same), and one `.out` line of ids per text (no BOS, no special-token parsing).

The reference is llama.cpp itself through llama-cpp-python (`Llama(..., vocab_only=True)`); the
output goes to crates/pocket-models/tests/data/tokenizer/<alias>.out and is checked by
tests/tokenizer_models.rs against the fetched model (POCKET_TEST_REAL_FETCH=1).

Usage: python3 scripts/tokenizer_vectors.py ALIAS PATH/TO/MODEL.gguf
(llama-cpp-python must be importable; LLAMA_CPP_LIB_PATH may point at a built libllama.so folder.)

Checked: run on ../shared's ggml-vocab-qwen2.gguf and ggml-vocab-llama-spm.gguf it reproduces their
.out files byte for byte (llama-cpp-python 0.3.36); on the fetched Qwen2.5-Coder-0.5B it gives
ggml-vocab-qwen2.gguf.out exactly.
"""

import pathlib
import sys

import llama_cpp

ROOT = pathlib.Path(__file__).resolve().parent.parent
INP = ROOT.parent / "shared" / "data" / "tokenizer-vectors" / "ggml-vocab-qwen2.gguf.inp"
OUT_DIR = ROOT / "crates" / "pocket-models" / "tests" / "data" / "tokenizer"


def main():
    alias, model = sys.argv[1], sys.argv[2]
    texts = INP.read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    assert texts[-1] == "", "the .inp file ends with a separator"
    texts = texts[:-1]
    llm = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
    lines = []
    for t in texts:
        ids = llm.tokenize(t.encode("utf-8"), add_bos=False, special=False) if t else []
        lines.append("".join(f" {i}" for i in ids))
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    out = OUT_DIR / f"{alias}.out"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {out.relative_to(ROOT)}: {len(lines)} texts (llama-cpp-python {llama_cpp.__version__})")


if __name__ == "__main__":
    main()
