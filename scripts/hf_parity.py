#!/usr/bin/env python3
"""Reference logits from Hugging Face transformers for tiny random-weight Llama, Qwen2 and Qwen3.

For each architecture this writes crates/models/llama/tests/data/<arch>/:
  config.json, model.safetensors   the model (weights stored as F16; every value is f16-exact, so the
                                   Rust test may widen them to F32 without changing the model)
  reference.json                   two prompts, and for each: the logits of the last prompt token and
                                   of 8 greedy decode steps (f32 model, eager attention), the greedy
                                   tokens, and the same logits for the model whose 2-D weights went
                                   through gguf-py's Q8_0 quantize/dequantize (`logits_q8_0`).

Needs transformers==5.17.0, torch (CPU is enough), gguf==0.19.0 and numpy. Not run by CI; its
outputs are committed.

Two more fixtures exercise features the three above leave unused (smaller: hidden 128, head_dim 32):
  llama3_rope/   Llama with Llama-3.1 RoPE scaling (rope_type llama3, original_max_position_embeddings
                 32, factor 8): the long prompt runs to position 55, past the original context, and
                 the head's frequencies cover all three regimes (kept, divided by factor, smoothed).
  qwen2_swa/     Qwen2 with use_sliding_window, sliding_window 8, max_window_layers 1: transformers
                 makes layer_types[i] "sliding_attention" for i >= max_window_layers, so layer 1
                 attends to the last 8 positions and layer 0 to all; the long prompt has 20 tokens.
For these, reference.json also records `control`: the max |logit difference| of the same weights
with the feature turned off (rope_type default / use_sliding_window false), which shows that the
fixture depends on the feature, and `cache_vs_forward`: transformers' cached greedy logits against
one uncached forward over prompt + tokens (a self-check of the reference).

Usage: hf_parity.py [fixture ...] (default: all). Regenerating one fixture leaves the others alone.
"""

import json
import os
import sys

import numpy as np
import torch
import transformers
from gguf import GGMLQuantizationType, quants

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "models", "llama", "tests", "data")
STEPS = 8
PROMPTS = [[1, 17, 93, 42, 7, 120, 64, 3, 88, 51, 9], [1, 5, 77, 31, 110]]

COMMON = dict(
    vocab_size=128,
    hidden_size=256,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    max_position_embeddings=256,
    rms_norm_eps=1e-5,
    bos_token_id=1,
    eos_token_id=2,
)

SMALL = dict(COMMON, hidden_size=128, head_dim=32)

LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 32}

# name: (config class, model class, config, seed, prompts, Q8_0 reference?, control config changes)
MODELS = {
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
              dict(COMMON, tie_word_embeddings=False,
                   rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
              1234, PROMPTS, True, None),
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM,
              dict(COMMON, tie_word_embeddings=True,
                   rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
              1235, PROMPTS, True, None),
    "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM,
              dict(COMMON, tie_word_embeddings=True,
                   rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
              1236, PROMPTS, True, None),
    "llama3_rope": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
                    dict(SMALL, tie_word_embeddings=False, rope_parameters=LLAMA3_ROPE),
                    1237, [[(5 * i + 3) % 126 + 1 for i in range(48)], [1, 5, 77, 31, 110]], False,
                    dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    "qwen2_swa": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM,
                  dict(SMALL, tie_word_embeddings=True, use_sliding_window=True, sliding_window=8,
                       max_window_layers=1,
                       rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
                  1238, [[(11 * i + 7) % 126 + 1 for i in range(20)], [1, 5, 77, 31, 110]], False,
                  dict(use_sliding_window=False)),
}


def randomize(model, seed):
    """Weights of a useful size (std ~ 1/sqrt(fan_in)), norms near 1, biases small; all f16-exact."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                std = 0.25 if "embed" in name else 1.5 / np.sqrt(p.shape[1])
                v = torch.randn(p.shape, generator=g) * std
            elif "norm" in name:
                v = 1.0 + 0.2 * torch.randn(p.shape, generator=g)
            else:  # biases
                v = 0.3 * torch.randn(p.shape, generator=g)
            p.copy_(v.half().float())


@torch.no_grad()
def greedy_logits(model, prompt):
    """Logits of the last prompt token and of STEPS greedy steps, with the KV cache."""
    ids = torch.tensor([prompt])
    out = model(input_ids=ids, use_cache=True)
    past = out.past_key_values
    logits = [out.logits[0, -1].clone()]
    tokens = []
    for _ in range(STEPS):
        nxt = int(torch.argmax(logits[-1]))
        tokens.append(nxt)
        out = model(input_ids=torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
        past = out.past_key_values
        logits.append(out.logits[0, -1].clone())
    return tokens, logits


@torch.no_grad()
def forced_logits(model, prompt, tokens):
    """Logits along a fixed continuation (teacher-forced)."""
    full = torch.tensor([prompt + tokens])
    out = model(input_ids=full).logits[0]
    return [out[len(prompt) - 1 + i] for i in range(len(tokens) + 1)]


def q8_0_roundtrip(model):
    """Replaces every 2-D weight by its gguf-py Q8_0 quantize -> dequantize image."""
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() == 2:
                w = p.detach().numpy().astype(np.float32)
                q = quants.quantize(w, GGMLQuantizationType.Q8_0)
                p.copy_(torch.from_numpy(quants.dequantize(q, GGMLQuantizationType.Q8_0)))


def max_diff(a, b):
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


def main():
    names = sys.argv[1:] or list(MODELS)
    torch.manual_seed(0)
    for arch in names:
        cfg_cls, model_cls, kwargs, seed, prompts, with_q8, control = MODELS[arch]
        cfg = cfg_cls(**kwargs)
        cfg._attn_implementation = "eager"
        model = model_cls(cfg).float().eval()
        randomize(model, seed)
        if cfg.tie_word_embeddings:
            model.tie_weights()
        d = os.path.join(OUT, arch)
        os.makedirs(d, exist_ok=True)
        ref = {"transformers": transformers.__version__, "torch": torch.__version__, "steps": STEPS, "cases": []}
        for prompt in prompts:
            tokens, logits = greedy_logits(model, prompt)
            ref["cases"].append({"prompt": prompt, "tokens": tokens,
                                 "logits": [l.tolist() for l in logits]})
            if control is not None:
                forced = forced_logits(model, prompt, tokens)
                diff = max_diff(forced, logits)
                assert diff < 1e-4, f"{arch}: cached and uncached transformers differ by {diff}"
                ref["cache_vs_forward"] = max(ref.get("cache_vs_forward", 0.0), diff)
        if with_q8:
            q8 = model_cls(cfg).float().eval()
            q8.load_state_dict(model.state_dict())
            q8_0_roundtrip(q8)
            for case in ref["cases"]:
                case["logits_q8_0"] = [l.tolist() for l in forced_logits(q8, case["prompt"], case["tokens"])]
        if control is not None:
            ccfg = cfg_cls(**dict(kwargs, **control))
            ccfg._attn_implementation = "eager"
            off = model_cls(ccfg).float().eval()
            off.load_state_dict(model.state_dict())
            worst = 0.0
            for case in ref["cases"]:
                got = forced_logits(off, case["prompt"], case["tokens"])
                worst = max(worst, max_diff(got, [torch.tensor(l) for l in case["logits"]]))
            ref["control"] = {"changes": control, "max_abs_diff": worst}
        model.half().save_pretrained(d)
        gen = os.path.join(d, "generation_config.json")  # not read by the tests
        if os.path.exists(gen):
            os.remove(gen)
        with open(os.path.join(d, "reference.json"), "w") as f:
            json.dump(ref, f)
        size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
        print(f"{arch}: {size / 1e6:.2f} MB, greedy {[c['tokens'] for c in ref['cases']]}, "
              f"control {ref.get('control')}, cache_vs_forward {ref.get('cache_vs_forward')}", file=sys.stderr)


if __name__ == "__main__":
    main()
