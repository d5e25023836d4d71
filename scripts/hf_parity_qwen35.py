#!/usr/bin/env python3
"""Reference logits from Hugging Face transformers 5.17 for tiny random-weight Qwen3.5 text models.

Writes crates/models/qwen35/tests/data/<name>/:

  bf16/   config.json (model_type qwen3_5_text), model.safetensors with every tensor stored as BF16
          (all values are bf16-exact, so the f32 reference model is the same model), and
          reference.json: two prompts (one longer than a 64-token chunk, so the chunked delta rule
          crosses a chunk boundary) with the logits of the last prompt token and of STEPS greedy
          decode steps, run with transformers' cache (chunked delta rule for the prompt, recurrent
          for each decode step), eager attention, f32.
  fp8/    the Qwen FP8 release layout: config.json of a `qwen3_5` (vision + text) checkpoint with a
          `quantization_config` (fp8, e4m3, 128x128 blocks); projection weights as F8_E4M3 with
          f32 `weight_scale_inv` per 128x128 tile; norms, conv, A_log, dt_bias, in_proj_a/b,
          embeddings and lm_head in BF16; text tensors under `model.language_model.`, a small fake
          vision tower under `model.visual.` (to be ignored) and an `mtp.` tensor (ignored).
          reference.json holds transformers' logits for the same text model with its FP8 weights
          dequantized (fp8 value x tile scale, in f32).

Needs transformers==5.17.0 and torch (CPU). Not run by CI; its outputs are committed.
"""

import json
import os
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "models", "qwen35", "tests", "data")
STEPS = 16
PROMPTS = [
    [(7 * i + 3) % 250 + 1 for i in range(80)],  # 80 tokens: two chunks of the 64-token delta rule
    [1, 5, 77, 31, 110],
]

BF16_CFG = dict(
    vocab_size=256,
    hidden_size=128,
    intermediate_size=192,
    num_hidden_layers=6,
    # llama.cpp's GGUF states the schedule only as `full_attention_interval` (3 here).
    layer_types=["linear_attention", "linear_attention", "full_attention"] * 2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=32,
    linear_value_head_dim=24,
    linear_conv_kernel_dim=4,
    max_position_embeddings=512,
    rms_norm_eps=1e-6,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
    tie_word_embeddings=False,
    bos_token_id=1,
    eos_token_id=2,
)

FP8_CFG = dict(
    BF16_CFG,
    hidden_size=192,
    intermediate_size=256,
    num_hidden_layers=4,
    layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
    head_dim=64,
    linear_key_head_dim=64,
    linear_value_head_dim=64,
)

# Projections the FP8 release quantizes; everything else stays BF16.
FP8_SUFFIXES = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
                "in_proj_qkv.weight", "in_proj_z.weight", "out_proj.weight",
                "gate_proj.weight", "up_proj.weight", "down_proj.weight")


def randomize(model, seed):
    """Weights of a useful size, every value bf16-exact."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                v = torch.log(torch.rand(p.shape, generator=g) * 4 + 0.05)
            elif name.endswith("dt_bias"):
                v = 0.5 * torch.randn(p.shape, generator=g)
            elif "conv1d" in name:
                v = 0.5 * torch.randn(p.shape, generator=g)
            elif name.endswith("linear_attn.norm.weight"):
                v = 1.0 + 0.2 * torch.randn(p.shape, generator=g)  # plain scale (not 1-centred)
            elif "norm" in name:
                v = 0.2 * torch.randn(p.shape, generator=g)  # zero-centred: applied as 1 + w
            elif p.dim() == 2:
                std = 0.25 if "embed" in name else 1.5 / np.sqrt(p.shape[1])
                v = torch.randn(p.shape, generator=g) * std
            else:
                raise ValueError(f"unexpected parameter {name}")
            p.copy_(v.bfloat16().float())


@torch.no_grad()
def greedy_logits(model, prompt):
    """Logits of the last prompt token and of STEPS greedy steps, with transformers' cache."""
    out = model(input_ids=torch.tensor([prompt]), use_cache=True)
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


def reference(model):
    ref = {"transformers": transformers.__version__, "torch": torch.__version__, "steps": STEPS,
           "cases": []}
    for prompt in PROMPTS:
        tokens, logits = greedy_logits(model, prompt)
        ref["cases"].append({"prompt": prompt, "tokens": tokens, "logits": [l.tolist() for l in logits]})
    return ref


def build(cfg_kwargs, seed):
    cfg = Qwen3_5TextConfig(**cfg_kwargs)
    cfg._attn_implementation = "eager"
    model = Qwen3_5ForCausalLM(cfg).float().eval()
    randomize(model, seed)
    return cfg, model


def fp8_quantize(w):
    """E4M3 weight and f32 scale_inv per 128x128 tile (w ~= fp8 * scale_inv), as Qwen's FP8 releases."""
    rows, cols = w.shape
    tr, tc = -(-rows // 128), -(-cols // 128)
    scale = torch.zeros(tr, tc, dtype=torch.float32)
    q = torch.zeros(rows, cols, dtype=torch.float8_e4m3fn)
    for i in range(tr):
        for j in range(tc):
            blk = w[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]
            s = blk.abs().max().clamp(min=1e-12) / 448.0
            scale[i, j] = s
            q[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] = (blk / s).to(torch.float8_e4m3fn)
    deq = q.float() * scale.repeat_interleave(128, 0)[:rows].repeat_interleave(128, 1)[:, :cols]
    return q, scale, deq


def write_bf16(d):
    cfg, model = build(BF16_CFG, 4321)
    ref = reference(model)
    model.to(torch.bfloat16).save_pretrained(d)
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(ref, f)
    return ref


def write_fp8(d):
    cfg, model = build(FP8_CFG, 8765)
    tensors = {}
    deq_state = {}
    for name, p in model.state_dict().items():
        hf = name.replace("model.", "model.language_model.", 1) if name.startswith("model.") else name
        if name.endswith(FP8_SUFFIXES):
            q, s, deq = fp8_quantize(p.float())
            tensors[hf] = q.contiguous()
            tensors[hf + "_scale_inv"] = s.contiguous()
            deq_state[name] = deq
        else:
            tensors[hf] = p.to(torch.bfloat16).contiguous()
            deq_state[name] = p.to(torch.bfloat16).float()
    # A stand-in vision tower and MTP tensor: present in real checkpoints, ignored by the text model.
    g = torch.Generator().manual_seed(1)
    tensors["model.visual.patch_embed.proj.weight"] = torch.randn(16, 3, 2, 4, 4, generator=g).bfloat16()
    tensors["model.visual.merger.linear_fc2.weight"] = torch.randn(192, 16, generator=g).bfloat16()
    tensors["mtp.fc.weight"] = torch.randn(192, 384, generator=g).bfloat16()
    model.load_state_dict(deq_state)
    ref = reference(model)
    text = cfg.to_dict()
    text.pop("transformers_version", None)
    full = {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": text,
        "vision_config": {"model_type": "qwen3_5_vision", "depth": 1, "hidden_size": 16,
                          "out_hidden_size": 192},
        "tie_word_embeddings": False,
        "quantization_config": {
            "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
            "weight_block_size": [128, 128],
            "modules_to_not_convert": ["lm_head", "model.visual", "mtp", "in_proj_a", "in_proj_b"],
        },
    }
    os.makedirs(d, exist_ok=True)
    save_file(tensors, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(full, f, indent=2)
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(ref, f)
    return ref


def main():
    torch.manual_seed(0)
    for name, fn in (("bf16", write_bf16), ("fp8", write_fp8)):
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        ref = fn(d)
        sizes = {x: os.path.getsize(os.path.join(d, x)) for x in os.listdir(d)}
        print(f"{name}: {sizes}, greedy {[c['tokens'] for c in ref['cases']]}", file=sys.stderr)


if __name__ == "__main__":
    main()
