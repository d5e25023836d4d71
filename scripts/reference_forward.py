#!/usr/bin/env python3
"""An independent f32 numpy forward of Llama/Qwen2 GGUF checkpoints over gguf-py 0.19.0's dequantizer.

Every weight is dequantized to f32 with `gguf.quants.dequantize` and the model is run in plain
numpy (f32 activations, no activation quantization), with a KV cache. For each prompt (token ids)
it records the greedy continuation and, at every step along it (teacher-forced along its own
continuation), the top-1 token and the top-1 minus top-2 logit margin.

usage: reference_forward.py MODEL.gguf PROMPTS.json OUT.json [--steps 32]
PROMPTS.json: {"prompts": [{"text": "...", "ids": [...]}, ...]}  (ids from our tokenizer)
"""

import argparse
import json

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    v = f.parts[f.data[0]]
    if f.types and f.types[0].name == "STRING":
        return bytes(v).decode()
    return v.tolist()[0] if hasattr(v, "tolist") else v


class Model:
    def __init__(self, path):
        r = GGUFReader(path)
        arch = field(r, "general.architecture")
        self.arch = arch
        k = lambda s, d=None: field(r, f"{arch}.{s}", d)
        self.n_layer = int(k("block_count"))
        self.hidden = int(k("embedding_length"))
        self.n_head = int(k("attention.head_count"))
        self.n_kv = int(k("attention.head_count_kv", self.n_head))
        self.head_dim = int(k("attention.key_length", self.hidden // self.n_head))
        self.eps = float(k("attention.layer_norm_rms_epsilon", 1e-5))
        theta = float(k("rope.freq_base", 10000.0))
        rot = int(k("rope.dimension_count", self.head_dim))
        self.inv_freq = 1.0 / theta ** (np.arange(0, rot, 2, dtype=np.float64) / rot)
        self.neox = arch in ("qwen2", "qwen3")
        self.t = {}
        for t in r.tensors:
            shape = tuple(int(x) for x in reversed(t.shape.tolist()))
            self.t[t.name] = dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float32)
        self.out = self.t.get("output.weight", self.t["token_embd.weight"])

    def norm(self, x, w):
        x64 = x.astype(np.float64)
        return (x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + self.eps)).astype(np.float32) * w

    def rope(self, x, pos):
        # x: [n, heads, head_dim]
        ang = np.outer(pos, self.inv_freq)  # [n, rot/2]
        cos, sin = np.cos(ang)[:, None, :].astype(np.float32), np.sin(ang)[:, None, :].astype(np.float32)
        half = self.inv_freq.shape[0]
        y = x.copy()
        if self.neox:
            a, b = x[..., :half], x[..., half:2 * half]
            y[..., :half] = a * cos - b * sin
            y[..., half:2 * half] = a * sin + b * cos
        else:
            a, b = x[..., 0:2 * half:2], x[..., 1:2 * half:2]
            y[..., 0:2 * half:2] = a * cos - b * sin
            y[..., 1:2 * half:2] = a * sin + b * cos
        return y

    def forward(self, ids, cache):
        """Logits of the last token; `cache` is a list of (K, V) per layer, extended in place."""
        n = len(ids)
        start = cache[0][0].shape[0] if cache else 0
        pos = np.arange(start, start + n)
        x = self.t["token_embd.weight"][ids]
        g = self.n_head // self.n_kv
        for l in range(self.n_layer):
            p = f"blk.{l}."
            h = self.norm(x, self.t[p + "attn_norm.weight"])
            q = h @ self.t[p + "attn_q.weight"].T
            kk = h @ self.t[p + "attn_k.weight"].T
            v = h @ self.t[p + "attn_v.weight"].T
            if p + "attn_q.bias" in self.t:
                q, kk, v = q + self.t[p + "attn_q.bias"], kk + self.t[p + "attn_k.bias"], v + self.t[p + "attn_v.bias"]
            q = q.reshape(n, self.n_head, self.head_dim)
            kk = kk.reshape(n, self.n_kv, self.head_dim)
            v = v.reshape(n, self.n_kv, self.head_dim)
            if p + "attn_q_norm.weight" in self.t:
                q = self.norm(q, self.t[p + "attn_q_norm.weight"])
                kk = self.norm(kk, self.t[p + "attn_k_norm.weight"])
            q, kk = self.rope(q, pos), self.rope(kk, pos)
            if len(cache) <= l:
                cache.append((kk, v))
            else:
                cache[l] = (np.concatenate([cache[l][0], kk]), np.concatenate([cache[l][1], v]))
            K, V = cache[l]
            total = K.shape[0]
            Kx = np.repeat(K, g, axis=1)  # [total, heads, d]
            Vx = np.repeat(V, g, axis=1)
            s = np.einsum("nhd,thd->hnt", q, Kx) / np.sqrt(self.head_dim)
            mask = pos[:, None] < np.arange(total)[None, :]
            s = np.where(mask[None], -np.inf, s)
            s = s - s.max(-1, keepdims=True)
            w = np.exp(s)
            w /= w.sum(-1, keepdims=True)
            o = np.einsum("hnt,thd->nhd", w, Vx).reshape(n, -1)
            x = x + o @ self.t[p + "attn_output.weight"].T
            h = self.norm(x, self.t[p + "ffn_norm.weight"])
            gate = h @ self.t[p + "ffn_gate.weight"].T
            up = h @ self.t[p + "ffn_up.weight"].T
            act = gate / (1.0 + np.exp(-gate)) * up
            x = x + act @ self.t[p + "ffn_down.weight"].T
        x = self.norm(x[-1:], self.t["output_norm.weight"])
        return (x @ self.out.T)[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("prompts")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=32)
    a = ap.parse_args()
    m = Model(a.model)
    prompts = json.load(open(a.prompts))["prompts"]
    results = []
    for p in prompts:
        cache = []
        logits = m.forward(p["ids"], cache)
        toks, top1, margin = [], [], []
        for _ in range(a.steps):
            order = np.argsort(-logits, kind="stable")
            top1.append(int(order[0]))
            margin.append(float(logits[order[0]] - logits[order[1]]))
            toks.append(int(order[0]))
            logits = m.forward([toks[-1]], cache)
        results.append({"text": p["text"], "ids": p["ids"], "tokens": toks, "top1": top1, "margin": margin})
        print(p["text"][:40], toks[:12], flush=True)
    json.dump({"model": a.model.split("/")[-1], "reference": "numpy f32 over gguf-py 0.19.0 dequantize",
               "steps": a.steps, "results": results}, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
