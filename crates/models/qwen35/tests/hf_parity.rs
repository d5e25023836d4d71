//! Parity with Hugging Face transformers 5.17 on tiny random-weight Qwen3.5 text models (fixtures
//! from `scripts/hf_parity_qwen35.py`): logits of the last prompt token and of 16 greedy decode
//! steps, for an 80-token prompt (two 64-token chunks of the delta rule) and a 5-token prompt run
//! as one batch (a mixed prefill, then batched decode).
//!
//! Tolerances (max |Δlogit|, f32 on the CPU):
//! - BF16 safetensors: 1e-3. The fixture's values are bf16-exact, so the checkpoint is the model
//!   transformers ran in f32; what is left is f32 summation order.
//! - GGUF in llama.cpp's `qwen35` layout (written here from the same fixture: BF16 matrices,
//!   norms stored as 1 + w, `ssm_a = -exp(A_log)`, value heads re-tiled): 1e-3, same model.
//! - FP8 E4M3 with 128x128 block scales: 1e-3 against transformers run on the FP8-dequantized
//!   weights (fp8 value x tile scale). Dequantization is exact in f32 up to one rounding of the
//!   product, and our FP8 dot applies the tile scale to partial sums (a reordering of the same
//!   f32 products), so the remaining difference is f32 rounding, as for BF16.
//!
//! The same tolerances hold on CUDA because the tests select the backend's exact prefill
//! ([`pocket_kernels::Backend::set_exact_prefill`]: f32 operands, SGEMM without TF32). The
//! default f16 tensor-core prefill rounds weights and activations to f16 (2^-11 relative each,
//! ~5e-3 on these logits); it is tested against the CPU with a bound derived from that rounding
//! in pocket-kernels' `cuda_fp8` and `cuda_gemv` tests. Decode (the GEMV) is f32 in both modes.

#[path = "../../hf_parity_support.rs"]
mod parity;

use std::path::Path;
use std::sync::Arc;

use parity::{cases, check_row, compare, config, data, hf_tensors, teacher_forced, Logits};
use pocket_formats::{GgmlType, GgufWriter, TensorStore};
use pocket_kernels::{DType, Device};
use pocket_layers::{KvCache, LayerError, Model};
use pocket_model_qwen35::{LoadOptions, Qwen35Model};
use pocket_quant::QuantFormat;

const TOL: f32 = 1e-3;

fn load(path: &Path, dev: &Device) -> (Qwen35Model, KvCache) {
    // f32 prefill on every backend: these tolerances are f32 rounding (see the module docs).
    dev.set_exact_prefill(true);
    let store = Arc::new(TensorStore::open(path).unwrap());
    let opts = LoadOptions {
        max_seq_len: 256,
        max_seqs: 4,
    };
    let model = Qwen35Model::load(store, dev, opts).unwrap();
    let cfg = model.info().kv_cache_config(1024, 256, DType::F32);
    let cache = KvCache::new(dev, cfg).unwrap();
    (model, cache)
}

/// Both prompts as one batch (prefill), then 16 batched decode steps along the greedy tokens.
fn batched(path: &Path, name: &str) {
    let cases = cases(name);
    let want: Vec<Logits> = cases.iter().map(|c| c.logits.clone()).collect();
    for dev in Device::all_for_tests() {
        let (mut model, mut cache) = load(path, &dev);
        let got = teacher_forced(&mut model, &mut cache, &dev, &cases);
        compare(&format!("{name} {path:?} {dev:?}"), &got, &want, &|_| TOL);
    }
}

#[test]
fn bf16_safetensors_matches_transformers() {
    batched(&data("bf16"), "bf16");
}

#[test]
fn fp8_block_scaled_matches_transformers_on_dequantized_weights() {
    let dir = data("fp8");
    let (model, _) = load(&dir, &Device::cpu());
    let notes = model.notes().join("\n");
    assert!(notes.contains("vision tower ignored"), "{notes}");
    assert!(notes.contains("MTP head ignored"), "{notes}");
    batched(&dir, "fp8");
}

/// The whole prompt one token at a time (recurrent form, decode path throughout) must give the
/// logits the chunked prefill gives, and continue identically.
#[test]
fn token_by_token_equals_prefill() {
    let cases = cases("bf16");
    let c = &cases[0];
    for dev in Device::all_for_tests() {
        let (mut model, mut cache) = load(&data("bf16"), &dev);
        let seq: Vec<u32> = c.prompt.iter().chain(&c.tokens).copied().collect();
        for (t, tok) in seq.iter().enumerate().take(seq.len() - 1) {
            let plan = cache.plan(&[(7, std::slice::from_ref(tok))]).unwrap();
            let got = dev
                .read_f32(model.forward(&plan, &mut cache).unwrap())
                .unwrap();
            if t + 1 >= c.prompt.len() {
                let step = t + 1 - c.prompt.len();
                check_row(
                    &format!("token-by-token {dev:?} step {step}"),
                    &got,
                    &c.logits[step],
                    TOL,
                );
            }
        }
        // Chunked prefill of part of the prompt, then the rest token by token.
        let (mut model, mut cache) = load(&data("bf16"), &dev);
        let split = 70;
        let plan = cache.plan(&[(3, &c.prompt[..split])]).unwrap();
        model.forward(&plan, &mut cache).unwrap();
        for (t, tok) in c.prompt.iter().enumerate().skip(split) {
            let plan = cache.plan(&[(3, std::slice::from_ref(tok))]).unwrap();
            let got = dev
                .read_f32(model.forward(&plan, &mut cache).unwrap())
                .unwrap();
            if t + 1 == c.prompt.len() {
                check_row(
                    &format!("prefill {split} + decode {dev:?}"),
                    &got,
                    &c.logits[0],
                    TOL,
                );
            }
        }
    }
}

#[test]
fn continuing_an_unknown_sequence_is_an_error() {
    let dev = Device::cpu();
    let (mut model, mut cache) = load(&data("bf16"), &dev);
    let plan = cache.plan(&[(1, &[5u32, 6, 7][..])]).unwrap();
    model.forward(&plan, &mut cache).unwrap();
    model.free_sequence(1);
    let plan = cache.plan(&[(1, &[8u32][..])]).unwrap();
    match model.forward(&plan, &mut cache) {
        Err(LayerError::UnknownSequence(1)) => {}
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("continued a sequence without its recurrent state"),
    }
}

// ---- GGUF in llama.cpp's qwen35 layout ------------------------------------------------------

/// llama.cpp's `_LinearAttentionVReorderBase`: value heads from grouped order (key head `k`,
/// its `v`-th value head at `k * nvk + v`) to tiled order (`v * nkh + k`), along `axis` of a
/// `[rows, cols]` matrix, for the `span` elements starting at `start` in blocks of `hd`.
#[allow(clippy::too_many_arguments)]
fn reorder_v(
    w: &mut [f32],
    rows: usize,
    cols: usize,
    axis: usize,
    start: usize,
    nkh: usize,
    nvh: usize,
    hd: usize,
) {
    let nvk = nvh / nkh;
    let src = w.to_vec();
    for k in 0..nkh {
        for v in 0..nvk {
            let (from, to) = (start + (k * nvk + v) * hd, start + (v * nkh + k) * hd);
            for e in 0..hd {
                if axis == 0 {
                    w[(to + e) * cols..(to + e + 1) * cols]
                        .copy_from_slice(&src[(from + e) * cols..(from + e + 1) * cols]);
                } else {
                    for r in 0..rows {
                        w[r * cols + to + e] = src[r * cols + from + e];
                    }
                }
            }
        }
    }
}

/// Writes the bf16 fixture as llama.cpp's converter would (names, metadata and transforms).
fn write_gguf(path: &Path) {
    let cfg = config("bf16");
    let u = |k: &str| cfg[k].as_u64().unwrap() as u32;
    let (nkh, nvh) = (
        u("linear_num_key_heads") as usize,
        u("linear_num_value_heads") as usize,
    );
    let (dk, dv) = (
        u("linear_key_head_dim") as usize,
        u("linear_value_head_dim") as usize,
    );
    let a = "qwen35";
    let mut w = GgufWriter::new();
    w.add("general.architecture", a);
    for (k, v) in [
        ("context_length", u("max_position_embeddings")),
        ("embedding_length", u("hidden_size")),
        ("block_count", u("num_hidden_layers")),
        ("feed_forward_length", u("intermediate_size")),
        ("attention.head_count", u("num_attention_heads")),
        ("attention.head_count_kv", u("num_key_value_heads")),
        ("attention.key_length", u("head_dim")),
        ("attention.value_length", u("head_dim")),
        ("rope.dimension_count", u("head_dim") / 4),
        ("ssm.conv_kernel", u("linear_conv_kernel_dim")),
        ("ssm.inner_size", (nvh * dv) as u32),
        ("ssm.state_size", dk as u32),
        ("ssm.time_step_rank", nvh as u32),
        ("ssm.group_count", nkh as u32),
        ("full_attention_interval", 3),
    ] {
        w.add(format!("{a}.{k}"), v);
    }
    w.add(format!("{a}.attention.layer_norm_rms_epsilon"), 1e-6f32);
    w.add(format!("{a}.rope.freq_base"), 10000f32);
    let map = [
        ("input_layernorm.weight", "attn_norm.weight"),
        (
            "post_attention_layernorm.weight",
            "post_attention_norm.weight",
        ),
        ("self_attn.q_proj.weight", "attn_q.weight"),
        ("self_attn.k_proj.weight", "attn_k.weight"),
        ("self_attn.v_proj.weight", "attn_v.weight"),
        ("self_attn.o_proj.weight", "attn_output.weight"),
        ("self_attn.q_norm.weight", "attn_q_norm.weight"),
        ("self_attn.k_norm.weight", "attn_k_norm.weight"),
        ("linear_attn.in_proj_qkv.weight", "attn_qkv.weight"),
        ("linear_attn.in_proj_z.weight", "attn_gate.weight"),
        ("linear_attn.in_proj_b.weight", "ssm_beta.weight"),
        ("linear_attn.in_proj_a.weight", "ssm_alpha.weight"),
        ("linear_attn.out_proj.weight", "ssm_out.weight"),
        ("linear_attn.conv1d.weight", "ssm_conv1d.weight"),
        ("linear_attn.A_log", "ssm_a"),
        ("linear_attn.dt_bias", "ssm_dt.bias"),
        ("linear_attn.norm.weight", "ssm_norm.weight"),
        ("mlp.gate_proj.weight", "ffn_gate.weight"),
        ("mlp.up_proj.weight", "ffn_up.weight"),
        ("mlp.down_proj.weight", "ffn_down.weight"),
    ];
    let mut blobs = Vec::new();
    for (name, mut shape, mut v) in hf_tensors("bf16") {
        let gname = match name.as_str() {
            "model.embed_tokens.weight" => "token_embd.weight".to_string(),
            "model.norm.weight" => "output_norm.weight".to_string(),
            "lm_head.weight" => "output.weight".to_string(),
            _ => {
                let rest = name.strip_prefix("model.layers.").unwrap();
                let (layer, part) = rest.split_once('.').unwrap();
                let g = map.iter().find(|(h, _)| *h == part).unwrap().1;
                format!("blk.{layer}.{g}")
            }
        };
        let qk = 2 * nkh * dk;
        if name.ends_with("norm.weight") && !name.ends_with("linear_attn.norm.weight") {
            v.iter_mut().for_each(|x| *x += 1.0);
        }
        if name.ends_with("A_log") {
            v.iter_mut().for_each(|x| *x = -x.exp());
        }
        if name.ends_with("conv1d.weight") {
            shape = vec![shape[0], shape[2]];
        }
        let (rows, cols) = (shape[0], shape.get(1).copied().unwrap_or(1));
        match () {
            _ if name.ends_with("in_proj_qkv.weight") || name.ends_with("conv1d.weight") => {
                reorder_v(&mut v, rows, cols, 0, qk, nkh, nvh, dv)
            }
            _ if name.ends_with("in_proj_z.weight") => {
                reorder_v(&mut v, rows, cols, 0, 0, nkh, nvh, dv)
            }
            _ if name.ends_with("in_proj_a.weight")
                || name.ends_with("in_proj_b.weight")
                || name.ends_with("A_log")
                || name.ends_with("dt_bias") =>
            {
                reorder_v(&mut v, rows, cols, 0, 0, nkh, nvh, 1)
            }
            _ if name.ends_with("out_proj.weight") => {
                reorder_v(&mut v, rows, cols, 1, 0, nkh, nvh, dv)
            }
            _ => {}
        }
        let matrix = shape.len() == 2 && !name.ends_with("conv1d.weight");
        let t = if matrix {
            GgmlType::BF16
        } else {
            GgmlType::F32
        };
        blobs.push(pocket_quant::quantize(QuantFormat::Ggml(t), &v).unwrap());
        w.add_tensor(&gname, t, &shape).unwrap();
    }
    let refs: Vec<&[u8]> = blobs.iter().map(|b| b.as_slice()).collect();
    w.write_file(path, &refs).unwrap();
}

#[test]
fn gguf_llama_cpp_layout_matches_transformers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("qwen35-tiny-bf16.gguf");
    write_gguf(&path);
    batched(&path, "bf16");
}
