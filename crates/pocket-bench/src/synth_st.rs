//! Synthetic safetensors checkpoints (a directory with `model.safetensors` and `config.json`):
//! BF16/F16, FP8 E4M3 with 128x128 `weight_scale_inv`, or NVFP4 in the modelopt layout.

use std::collections::BTreeMap;
use std::path::Path;

use pocket_formats::GgmlType;
use serde_json::{json, Map, Value};

use crate::blocks::nvfp4_global_scale;
use crate::error::{BenchError, Result};
use crate::layout::{hf_layout, Role, TensorDef, WEIGHT_STD};
use crate::mix::StKind;
use crate::preset::{Arch, Preset};
use crate::stream::{Gen, StreamTensor};
use crate::synth::{finish_file, SynthOptions, SynthReport};

/// Roles whose 2-D weights a quantized checkpoint stores in FP8/NVFP4 (the rest stay BF16:
/// embeddings, LM head, norms, router, short conv, and the tiny linear-attention b/a projections).
fn quantized_role(d: &TensorDef) -> bool {
    d.shape.len() == 2
        && matches!(
            d.role,
            Role::AttnQ
                | Role::AttnK
                | Role::AttnV
                | Role::AttnO
                | Role::AttnQkv
                | Role::AttnGate
                | Role::SsmOut
                | Role::FfnGate
                | Role::FfnUp
                | Role::FfnDown
        )
}

struct Entry {
    name: String,
    dtype: &'static str,
    shape: Vec<usize>,
    bytes: u64,
    gen: Gen,
}

fn plain(d: &TensorDef, t: GgmlType) -> Entry {
    Entry {
        name: d.name.clone(),
        dtype: if t == GgmlType::F16 { "F16" } else { "BF16" },
        shape: d.shape.clone(),
        bytes: d.elements() * 2,
        gen: Gen::Ggml(t, d.init),
    }
}

fn entries(p: &Preset, kind: StKind) -> Vec<Entry> {
    let float = if kind == StKind::F16 {
        GgmlType::F16
    } else {
        GgmlType::BF16
    };
    let mut v = Vec::new();
    for d in hf_layout(p) {
        if matches!(kind, StKind::Bf16 | StKind::F16) || !quantized_role(&d) {
            v.push(plain(&d, float));
            continue;
        }
        let (r, c) = (d.shape[0], d.shape[1]);
        match kind {
            StKind::Fp8Block => {
                v.push(Entry {
                    name: d.name.clone(),
                    dtype: "F8_E4M3",
                    shape: d.shape.clone(),
                    bytes: (r * c) as u64,
                    gen: Gen::Fp8,
                });
                let s = [r.div_ceil(128), c.div_ceil(128)];
                v.push(Entry {
                    name: format!("{}_scale_inv", d.name),
                    dtype: "F32",
                    shape: s.to_vec(),
                    bytes: (s[0] * s[1] * 4) as u64,
                    gen: Gen::Fp8ScaleInv(WEIGHT_STD),
                });
            }
            _ => {
                v.push(Entry {
                    name: d.name.clone(),
                    dtype: "U8",
                    shape: vec![r, c / 2],
                    bytes: (r * c / 2) as u64,
                    gen: Gen::Nvfp4Packed,
                });
                v.push(Entry {
                    name: format!("{}_scale", d.name),
                    dtype: "F8_E4M3",
                    shape: vec![r, c / 16],
                    bytes: (r * c / 16) as u64,
                    gen: Gen::Nvfp4Scales,
                });
                for (suffix, val) in [("_scale_2", nvfp4_global_scale(WEIGHT_STD)), ("", 1.0)] {
                    let name = if suffix.is_empty() {
                        d.name.replace(".weight", ".input_scale")
                    } else {
                        format!("{}{suffix}", d.name)
                    };
                    v.push(Entry {
                        name,
                        dtype: "F32",
                        shape: vec![],
                        bytes: 4,
                        gen: Gen::F32Const(val),
                    });
                }
            }
        }
    }
    v
}

/// The Hugging Face `config.json` of `p`.
pub fn hf_config(p: &Preset, kind: StKind) -> Value {
    let (model_type, arch) = match p.arch {
        Arch::Llama => ("llama", "LlamaForCausalLM"),
        Arch::Qwen2 => ("qwen2", "Qwen2ForCausalLM"),
        Arch::Qwen3Moe => ("qwen3_moe", "Qwen3MoeForCausalLM"),
        Arch::Qwen35 => ("qwen3_5_text", "Qwen3_5ForCausalLM"),
        Arch::MinimaxM2 => ("minimax_m2", "MiniMaxM2ForCausalLM"),
    };
    let mut c = json!({
        "model_type": model_type,
        "architectures": [arch],
        "hidden_size": p.hidden,
        "num_hidden_layers": p.layers,
        "num_attention_heads": p.heads,
        "num_key_value_heads": p.kv_heads,
        "head_dim": p.head_dim,
        "intermediate_size": p.moe.map_or(p.ffn, |m| m.ffn),
        "vocab_size": p.vocab,
        "rms_norm_eps": p.rms_eps,
        "rope_theta": p.rope_theta,
        "max_position_embeddings": p.ctx,
        "tie_word_embeddings": p.tied,
        "hidden_act": "silu",
        "torch_dtype": if kind == StKind::F16 { "float16" } else { "bfloat16" },
        "pocket_synthetic": format!("random weights, preset {}", p.name),
    });
    let m: &mut Map<String, Value> = c.as_object_mut().expect("object literal");
    if let Some(moe) = p.moe {
        m.insert("num_experts_per_tok".into(), json!(moe.used));
        if p.arch == Arch::MinimaxM2 {
            m.insert("num_local_experts".into(), json!(moe.experts));
            m.insert("rotary_dim".into(), json!(p.rope_dim));
            m.insert("scoring_func".into(), json!("sigmoid"));
            m.insert("use_qk_norm".into(), json!(true));
            m.insert("qk_norm_type".into(), json!("per_layer"));
        } else {
            m.insert("num_experts".into(), json!(moe.experts));
            m.insert("moe_intermediate_size".into(), json!(moe.ffn));
            m.insert("norm_topk_prob".into(), json!(true));
            m.insert("decoder_sparse_step".into(), json!(1));
            m.insert("mlp_only_layers".into(), json!([]));
        }
    }
    if let Some(l) = p.linear {
        let types: Vec<&str> = (0..p.layers)
            .map(|i| {
                if p.is_full_attention(i) {
                    "full_attention"
                } else {
                    "linear_attention"
                }
            })
            .collect();
        m.insert("layer_types".into(), json!(types));
        m.insert("full_attention_interval".into(), json!(l.interval));
        m.insert("linear_num_key_heads".into(), json!(l.k_heads));
        m.insert("linear_num_value_heads".into(), json!(l.v_heads));
        m.insert("linear_key_head_dim".into(), json!(l.k_dim));
        m.insert("linear_value_head_dim".into(), json!(l.v_dim));
        m.insert("linear_conv_kernel_dim".into(), json!(l.conv));
        m.insert("attn_output_gate".into(), json!(true));
        let prf = p.rope_dim as f64 / p.head_dim as f64;
        m.insert("partial_rotary_factor".into(), json!(prf));
        m.insert(
            "rope_parameters".into(),
            json!({"rope_type": "default", "rope_theta": p.rope_theta, "partial_rotary_factor": prf,
                   "mrope_section": [11, 11, 10], "mrope_interleaved": true}),
        );
    }
    match kind {
        StKind::Fp8Block => {
            m.insert(
                "quantization_config".into(),
                json!({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                       "weight_block_size": [128, 128]}),
            );
        }
        StKind::Nvfp4 => {
            m.insert(
                "quantization_config".into(),
                json!({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}),
            );
        }
        _ => {}
    }
    c
}

/// Writes a synthetic safetensors checkpoint of `p` into the directory `out`.
pub fn write_safetensors(
    p: &Preset,
    kind: StKind,
    out: &Path,
    opts: &SynthOptions,
) -> Result<SynthReport> {
    let start = std::time::Instant::now();
    std::fs::create_dir_all(out).map_err(|e| BenchError::io(out, e))?;
    let list = entries(p, kind);
    let mut header = Map::new();
    header.insert(
        "__metadata__".into(),
        json!({"format": "pt", "pocket_synthetic": p.name}),
    );
    let mut off = 0u64;
    let mut by_type: BTreeMap<String, u64> = BTreeMap::new();
    for e in &list {
        header.insert(
            e.name.clone(),
            json!({"dtype": e.dtype, "shape": e.shape, "data_offsets": [off, off + e.bytes]}),
        );
        off += e.bytes;
        *by_type.entry(e.dtype.to_string()).or_default() += e.bytes;
    }
    let mut text = Value::Object(header).to_string().into_bytes();
    while !text.len().is_multiple_of(8) {
        text.push(b' ');
    }
    let mut head = (text.len() as u64).to_le_bytes().to_vec();
    head.extend_from_slice(&text);
    let tensors: Vec<StreamTensor> = list
        .iter()
        .map(|e| StreamTensor {
            name: e.name.clone(),
            bytes: e.bytes,
            gen: e.gen,
        })
        .collect();
    let config = serde_json::to_string_pretty(&hf_config(p, kind))?;
    let cfg_path = out.join("config.json");
    std::fs::write(&cfg_path, config).map_err(|e| BenchError::io(&cfg_path, e))?;
    let file = out.join("model.safetensors");
    let params = hf_layout(p).iter().map(|d| d.elements()).sum();
    let name = match kind {
        StKind::Bf16 => "st-bf16",
        StKind::F16 => "st-f16",
        StKind::Fp8Block => "fp8",
        StKind::Nvfp4 => "nvfp4",
    };
    finish_file(&file, &head, &tensors, 1, opts, |bytes| SynthReport {
        path: out.to_path_buf(),
        preset: p.name.to_string(),
        format: name.to_string(),
        container: "safetensors".into(),
        file_bytes: bytes,
        weight_bytes: off,
        params,
        tensors: list.len(),
        bytes_by_type: by_type.clone(),
        vocab_file: None,
        seconds: start.elapsed().as_secs_f64(),
    })
}
