#!/usr/bin/env python3
"""Greedy continuations and top-2 margins from llama.cpp (CPU), in reference_forward.py's format.

Uses llama-cpp-python 0.3.36's ctypes bindings over a llama.cpp built from its vendored source
(never committed): put the sdist's `llama_cpp` package on PYTHONPATH and point
LLAMA_CPP_LIB_PATH at the folder holding the built libllama.so / libggml*.so.

usage: llamacpp_reference.py MODEL.gguf PROMPTS.json OUT.json [--steps 32] [--threads 2]
"""

import argparse
import json

import numpy as np
from llama_cpp import Llama


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("prompts")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    llm = Llama(model_path=a.model, n_ctx=512, n_threads=a.threads, n_batch=512, logits_all=True, verbose=False)
    results = []
    for p in json.load(open(a.prompts))["prompts"]:
        llm.reset()
        llm.eval(p["ids"])
        toks, top1, margin = [], [], []
        for _ in range(a.steps):
            logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            order = np.argsort(-logits, kind="stable")
            top1.append(int(order[0]))
            margin.append(float(logits[order[0]] - logits[order[1]]))
            toks.append(int(order[0]))
            llm.eval([toks[-1]])
        results.append({"text": p["text"], "ids": p["ids"], "tokens": toks, "top1": top1, "margin": margin})
        print(p["text"][:40], toks[:12], flush=True)
    json.dump({"model": a.model.split("/")[-1], "reference": "llama.cpp 0c1e570 (llama-cpp-python 0.3.36 source), CPU",
               "steps": a.steps, "results": results}, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
