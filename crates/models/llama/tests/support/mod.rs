//! The Llama-family side of the transformers parity tests (`scripts/hf_parity.py`'s fixtures):
//! rewriting the fixture as F32 safetensors or as a llama.cpp-style GGUF, and running our model
//! teacher-forced along the reference's tokens. Fixture access, the teacher-forced run and the
//! comparison are shared with the qwen35 tests (`crates/models/hf_parity_support.rs`).

// Shared by three test binaries (`hf_parity`, `hf_parity_q4_k`, `stacked_projections`); each
// uses a subset.
#![allow(dead_code)]

#[path = "../../../hf_parity_support.rs"]
mod common;

use std::path::Path;
use std::sync::Arc;

use pocket_formats::{GgmlType, GgufWriter, SafetensorsWriter, TensorFormat, TensorStore};
use pocket_kernels::{DType, Device};
use pocket_layers::{KvCache, Model};
use pocket_model_llama::{LlamaModel, LoadOptions};
use pocket_quant::QuantFormat;
use serde_json::Value;

pub use common::*;

/// Writes the fixture as an F32 safetensors checkpoint (with its config.json) into `dir`.
pub fn write_f32_checkpoint(fixture: &str, dir: &Path) {
    let tensors = hf_tensors(fixture);
    let bytes: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, _, v)| v.iter().flat_map(|x| x.to_le_bytes()).collect())
        .collect();
    let mut w = SafetensorsWriter::new();
    for ((name, shape, _), b) in tensors.iter().zip(&bytes) {
        w.add(name, TensorFormat::Ggml(GgmlType::F32), shape, b)
            .unwrap();
    }
    w.write_file(dir.join("model.safetensors")).unwrap();
    std::fs::copy(data(fixture).join("config.json"), dir.join("config.json")).unwrap();
}

/// llama.cpp's name for a Hugging Face tensor name.
fn gguf_name(hf: &str) -> String {
    if hf == "model.embed_tokens.weight" {
        return "token_embd.weight".into();
    }
    if hf == "model.norm.weight" {
        return "output_norm.weight".into();
    }
    if hf == "lm_head.weight" {
        return "output.weight".into();
    }
    let rest = hf.strip_prefix("model.layers.").unwrap();
    let (layer, part) = rest.split_once('.').unwrap();
    let map = [
        ("input_layernorm", "attn_norm"),
        ("post_attention_layernorm", "ffn_norm"),
        ("self_attn.q_proj", "attn_q"),
        ("self_attn.k_proj", "attn_k"),
        ("self_attn.v_proj", "attn_v"),
        ("self_attn.o_proj", "attn_output"),
        ("self_attn.q_norm", "attn_q_norm"),
        ("self_attn.k_norm", "attn_k_norm"),
        ("mlp.gate_proj", "ffn_gate"),
        ("mlp.up_proj", "ffn_up"),
        ("mlp.down_proj", "ffn_down"),
    ];
    let (stem, suffix) = part.rsplit_once('.').unwrap();
    let g = map.iter().find(|(h, _)| *h == stem).unwrap().1;
    format!("blk.{layer}.{g}.{suffix}")
}

/// convert_hf_to_gguf.py's `LlamaModel.permute`: rows `[h, 2, d/2]` -> `[h, d/2, 2]`, so that
/// RoPE over adjacent pairs equals Hugging Face's rotation of halves.
fn permute_rows(w: &[f32], rows: usize, cols: usize, heads: usize) -> Vec<f32> {
    let hd = rows / heads;
    let mut out = vec![0f32; w.len()];
    for h in 0..heads {
        for i in 0..hd / 2 {
            for j in 0..2 {
                let dst = h * hd + 2 * i + j;
                let src = h * hd + j * (hd / 2) + i;
                out[dst * cols..(dst + 1) * cols].copy_from_slice(&w[src * cols..(src + 1) * cols]);
            }
        }
    }
    out
}

/// `rope_freqs.weight` as convert_hf_to_gguf.py's `LlamaModel.generate_extra_tensors` writes it
/// for `rope_type: llama3`: one divisor per rotating pair (1 for short wavelengths, `factor` for
/// long ones, smoothed between). The converter reads `original_max_position_embeddings` from the
/// top level with a default of 8192, which is Llama-3.1's value; the fixture's 32 sits in
/// `rope_parameters`, where transformers reads it, so that is used here.
fn llama3_rope_factors(rp: &Value, head_dim: usize) -> Vec<f32> {
    let f = |k: &str| rp[k].as_f64().unwrap();
    let (base, factor, lo, hi, old) = (
        f("rope_theta"),
        f("factor"),
        f("low_freq_factor"),
        f("high_freq_factor"),
        f("original_max_position_embeddings"),
    );
    (0..head_dim / 2)
        .map(|i| {
            let freq = 1.0 / base.powf(2.0 * i as f64 / head_dim as f64);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            let k = if wavelen < old / hi {
                1.0
            } else if wavelen > old / lo {
                factor
            } else {
                let smooth = (old / wavelen - lo) / (hi - lo);
                1.0 / ((1.0 - smooth) / factor + smooth)
            };
            k as f32
        })
        .collect()
}

/// Writes the fixture as a llama.cpp-style GGUF with every matrix in `ty` (norms stay F32); with
/// `roundtrip`, matrices are first rounded through that format and stored as `ty`.
pub fn write_gguf(fixture: &str, ty: GgmlType, roundtrip: Option<GgmlType>, path: &Path) {
    let cfg = config(fixture);
    let arch = cfg["model_type"].as_str().unwrap().to_string();
    let u = |k: &str| cfg[k].as_u64().unwrap() as u32;
    let rp = &cfg["rope_parameters"];
    let mut w = GgufWriter::new();
    w.add("general.architecture", arch.as_str());
    w.add(
        format!("{arch}.context_length"),
        u("max_position_embeddings"),
    );
    w.add(format!("{arch}.embedding_length"), u("hidden_size"));
    w.add(format!("{arch}.block_count"), u("num_hidden_layers"));
    w.add(
        format!("{arch}.feed_forward_length"),
        u("intermediate_size"),
    );
    w.add(
        format!("{arch}.attention.head_count"),
        u("num_attention_heads"),
    );
    w.add(
        format!("{arch}.attention.head_count_kv"),
        u("num_key_value_heads"),
    );
    w.add(format!("{arch}.attention.key_length"), u("head_dim"));
    w.add(format!("{arch}.attention.value_length"), u("head_dim"));
    w.add(format!("{arch}.rope.dimension_count"), u("head_dim"));
    w.add(
        format!("{arch}.attention.layer_norm_rms_epsilon"),
        cfg["rms_norm_eps"].as_f64().unwrap() as f32,
    );
    w.add(
        format!("{arch}.rope.freq_base"),
        rp["rope_theta"].as_f64().unwrap() as f32,
    );
    let (heads, kv) = (
        u("num_attention_heads") as usize,
        u("num_key_value_heads") as usize,
    );
    let mut blobs = Vec::new();
    for (name, shape, mut v) in hf_tensors(fixture) {
        if arch == "llama" && shape.len() == 2 {
            if name.ends_with("q_proj.weight") {
                v = permute_rows(&v, shape[0], shape[1], heads);
            } else if name.ends_with("k_proj.weight") {
                v = permute_rows(&v, shape[0], shape[1], kv);
            }
        }
        let t = if shape.len() == 2 { ty } else { GgmlType::F32 };
        if let (Some(r), 2) = (roundtrip, shape.len()) {
            let f = QuantFormat::Ggml(r);
            let q = pocket_quant::quantize(f, &v).unwrap();
            pocket_quant::dequantize(f, &q, &mut v).unwrap();
        }
        blobs.push(pocket_quant::quantize(QuantFormat::Ggml(t), &v).unwrap());
        w.add_tensor(&gguf_name(&name), t, &shape).unwrap();
    }
    if rp["rope_type"] == "llama3" {
        // Llama-3.1 GGUFs carry the scaling as this tensor and no rope.scaling metadata.
        let f = llama3_rope_factors(rp, u("head_dim") as usize);
        w.add_tensor("rope_freqs.weight", GgmlType::F32, &[f.len()])
            .unwrap();
        blobs.push(f.iter().flat_map(|x| x.to_le_bytes()).collect());
    }
    let refs: Vec<&[u8]> = blobs.iter().map(|b| b.as_slice()).collect();
    w.write_file(path, &refs).unwrap();
}

/// Runs the fixture's prompts as one batch through prefill and the decode steps, teacher-forced
/// along the reference's tokens, on `dev`; returns each prompt's logits per step.
pub fn run_model(path: &Path, fixture: &str, dev: &Device) -> Vec<Logits> {
    // The tolerances of these tests are the CPU's arithmetic (f32 products, int8 activations
    // rounded as pocket-quant rounds them). CUDA's default prefill adds f16 rounding of weights
    // and activations (tested against the CPU with its own bound in pocket-kernels' cuda_gemv),
    // so the model's maths is checked here through the backend's exact prefill.
    dev.set_exact_prefill(true);
    let store = Arc::new(TensorStore::open(path).unwrap());
    let mut model = LlamaModel::load(store, dev, LoadOptions { max_seq_len: 256 }).unwrap();
    let cfg = model.info().kv_cache_config(1024, 256, DType::F32);
    let mut cache = KvCache::new(dev, cfg).unwrap();
    teacher_forced(&mut model, &mut cache, dev, &cases(fixture))
}

/// Runs the model at `path` on every device and checks it against the reference logits that
/// `pick` selects.
pub fn run(path: &Path, fixture: &str, pick: fn(&Case) -> &Logits, tol: &dyn Fn(&[f32]) -> f32) {
    let want: Vec<Logits> = cases(fixture).iter().map(|c| pick(c).clone()).collect();
    for dev in Device::all_for_tests() {
        let got = run_model(path, fixture, &dev);
        compare(
            &format!("{fixture} {} on {dev:?}", path.display()),
            &got,
            &want,
            tol,
        );
    }
}
