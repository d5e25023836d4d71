//! The hyper-parameters of the family, read from GGUF metadata or a Hugging Face `config.json`.

use pocket_formats::{GgufMetadata, ModelConfig};
use pocket_kernels::rope::{RopeConfig, RopeLayout, RopeScaling};
use pocket_layers::{LayerError, Result};

/// Which member of the family (they differ only in optional parts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// Llama 2/3 and SmolLM2: no biases, no QK-norm.
    Llama,
    /// Qwen2 / Qwen2.5: biases on Q, K and V.
    Qwen2,
    /// Qwen3: per-head RMSNorm on Q and K, no biases.
    Qwen3,
}

impl Variant {
    /// The variant of an architecture name (`general.architecture` or `model_type`).
    pub fn from_name(name: &str) -> Option<Variant> {
        match name {
            "llama" => Some(Variant::Llama),
            "qwen2" => Some(Variant::Qwen2),
            "qwen3" => Some(Variant::Qwen3),
            _ => None,
        }
    }

    /// The canonical architecture name.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Llama => "llama",
            Variant::Qwen2 => "qwen2",
            Variant::Qwen3 => "qwen3",
        }
    }
}

/// Shapes and settings of a model of the family.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    /// Family member.
    pub variant: Variant,
    /// Vocabulary size (rows of the embedding table).
    pub vocab_size: usize,
    /// Hidden size.
    pub hidden_size: usize,
    /// Transformer blocks.
    pub num_layers: usize,
    /// Query heads.
    pub num_heads: usize,
    /// Key/value heads.
    pub num_kv_heads: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f32,
    /// RoPE settings (layout depends on the file: see [`LlamaConfig::from_gguf`]).
    pub rope: RopeConfig,
    /// Trained context length.
    pub max_context: usize,
    /// Biases on Q, K and V.
    pub qkv_bias: bool,
    /// Per-head RMSNorm on Q and K.
    pub qk_norm: bool,
    /// Attention window of each layer: `Some(w)`: a query sees the last `w` positions (itself
    /// included); `None`: full causal attention.
    pub layer_windows: Vec<Option<usize>>,
}

fn cfg_err(msg: impl Into<String>) -> LayerError {
    LayerError::Config(msg.into())
}

impl LlamaConfig {
    /// Reads llama.cpp's GGUF keys (`{arch}.block_count`, ...). The vocabulary size comes from
    /// the embedding table's rows (`vocab_rows`) when the metadata does not state it.
    ///
    /// llama.cpp's converter permutes the Q and K rows of `llama` checkpoints so that RoPE rotates
    /// adjacent pairs; Qwen2/Qwen3 GGUFs keep Hugging Face's halves (NeoX).
    pub fn from_gguf(md: &GgufMetadata, vocab_rows: usize) -> Result<LlamaConfig> {
        let arch = md.architecture()?.to_string();
        let variant = Variant::from_name(&arch)
            .ok_or_else(|| cfg_err(format!("architecture `{arch}` is not in the llama family")))?;
        let k = |s: &str| format!("{arch}.{s}");
        let u = |s: &str| -> Result<usize> { Ok(md.get_u32_or_first(&k(s))? as usize) };
        let uo = |s: &str| -> Result<Option<usize>> {
            if md.contains(&k(s)) {
                Ok(Some(md.get_u32_or_first(&k(s))? as usize))
            } else {
                Ok(None)
            }
        };
        let hidden = u("embedding_length")?;
        let num_layers = u("block_count")?;
        let heads = u("attention.head_count")?;
        let kv_heads = uo("attention.head_count_kv")?.unwrap_or(heads);
        if heads == 0 {
            return Err(cfg_err("attention.head_count is 0"));
        }
        let head_dim = uo("attention.key_length")?.unwrap_or(hidden / heads);
        let rot_dim = uo("rope.dimension_count")?.unwrap_or(head_dim);
        let theta = md.get_f32_opt(&k("rope.freq_base"))?.unwrap_or(10000.0);
        let scaling = match md.get_str_opt(&k("rope.scaling.type"))? {
            None | Some("none") => RopeScaling::None,
            Some("linear") => RopeScaling::Linear {
                factor: md.get_f32(&k("rope.scaling.factor"))?,
            },
            Some("yarn") => RopeScaling::Yarn {
                factor: md.get_f32(&k("rope.scaling.factor"))?,
                original_max_position: u("rope.scaling.original_context_length")?,
                beta_fast: md
                    .get_f32_opt(&k("rope.scaling.yarn_beta_fast"))?
                    .unwrap_or(32.0),
                beta_slow: md
                    .get_f32_opt(&k("rope.scaling.yarn_beta_slow"))?
                    .unwrap_or(1.0),
                attn_factor: md.get_f32_opt(&k("rope.scaling.attn_factor"))?,
            },
            Some(other) => return Err(cfg_err(format!("rope scaling `{other}` is not supported"))),
        };
        let layout = match variant {
            Variant::Llama => RopeLayout::Interleaved,
            Variant::Qwen2 | Variant::Qwen3 => RopeLayout::NeoX,
        };
        let c = LlamaConfig {
            variant,
            vocab_size: uo("vocab_size")?.unwrap_or(vocab_rows),
            hidden_size: hidden,
            num_layers,
            num_heads: heads,
            num_kv_heads: kv_heads,
            head_dim,
            intermediate_size: u("feed_forward_length")?,
            rms_norm_eps: md
                .get_f32_opt(&k("attention.layer_norm_rms_epsilon"))?
                .unwrap_or(1e-5),
            rope: RopeConfig {
                theta,
                rot_dim,
                layout,
                scaling,
            },
            max_context: uo("context_length")?.unwrap_or(4096),
            qkv_bias: variant == Variant::Qwen2,
            qk_norm: variant == Variant::Qwen3,
            // llama.cpp's converter writes no window for these architectures and llama.cpp runs
            // every layer with full attention, so a GGUF does too.
            layer_windows: vec![None; num_layers],
        };
        c.validate()
    }

    /// Reads a Hugging Face `config.json` (transformers 4.x `rope_theta`/`rope_scaling` or 5.x
    /// `rope_parameters`). RoPE rotates halves (NeoX), as `rotate_half` does.
    pub fn from_hf(cfg: &ModelConfig) -> Result<LlamaConfig> {
        let mt = cfg
            .model_type()
            .ok_or_else(|| cfg_err("config.json has no model_type"))?;
        let variant = Variant::from_name(mt)
            .ok_or_else(|| cfg_err(format!("model_type `{mt}` is not in the llama family")))?;
        let hidden = cfg.get_usize("hidden_size")?;
        let heads = cfg.get_usize("num_attention_heads")?;
        if heads == 0 {
            return Err(cfg_err("num_attention_heads is 0"));
        }
        let head_dim = cfg.get_usize_opt("head_dim")?.unwrap_or(hidden / heads);
        let rp = cfg
            .get("rope_parameters")
            .or_else(|| cfg.get("rope_scaling"));
        let rp_f = |key: &str| rp.and_then(|v| v.get(key)).and_then(|v| v.as_f64());
        let theta = cfg
            .get_f64_opt("rope_theta")?
            .or_else(|| rp_f("rope_theta"))
            .unwrap_or(10000.0) as f32;
        let rope_type = rp
            .and_then(|v| v.get("rope_type").or_else(|| v.get("type")))
            .and_then(|v| v.as_str())
            .unwrap_or("default");
        let need =
            |key: &str| rp_f(key).ok_or_else(|| cfg_err(format!("rope scaling needs `{key}`")));
        let scaling = match rope_type {
            "default" => RopeScaling::None,
            "linear" => RopeScaling::Linear {
                factor: need("factor")? as f32,
            },
            "llama3" => RopeScaling::Llama3 {
                factor: need("factor")? as f32,
                low_freq_factor: need("low_freq_factor")? as f32,
                high_freq_factor: need("high_freq_factor")? as f32,
                original_max_position: need("original_max_position_embeddings")? as usize,
            },
            "yarn" => RopeScaling::Yarn {
                factor: need("factor")? as f32,
                original_max_position: rp_f("original_max_position_embeddings")
                    .map(|v| v as usize)
                    .or(cfg.get_usize_opt("max_position_embeddings")?)
                    .ok_or_else(|| cfg_err("yarn needs original_max_position_embeddings"))?,
                beta_fast: rp_f("beta_fast").unwrap_or(32.0) as f32,
                beta_slow: rp_f("beta_slow").unwrap_or(1.0) as f32,
                attn_factor: rp_f("attention_factor").map(|v| v as f32),
            },
            other => return Err(cfg_err(format!("rope type `{other}` is not supported"))),
        };
        let partial = cfg.get_f64_opt("partial_rotary_factor")?.unwrap_or(1.0);
        let num_layers = cfg.get_usize("num_hidden_layers")?;
        let c = LlamaConfig {
            variant,
            vocab_size: cfg.get_usize("vocab_size")?,
            hidden_size: hidden,
            num_layers,
            num_heads: heads,
            num_kv_heads: cfg.get_usize_opt("num_key_value_heads")?.unwrap_or(heads),
            head_dim,
            intermediate_size: cfg.get_usize("intermediate_size")?,
            rms_norm_eps: cfg.get_f64_opt("rms_norm_eps")?.unwrap_or(1e-6) as f32,
            rope: RopeConfig {
                theta,
                rot_dim: ((head_dim as f64 * partial) as usize) & !1,
                layout: RopeLayout::NeoX,
                scaling,
            },
            max_context: cfg
                .get_usize_opt("max_position_embeddings")?
                .unwrap_or(4096),
            qkv_bias: match variant {
                Variant::Qwen2 => true,
                _ => cfg.get_bool_opt("attention_bias")?.unwrap_or(false),
            },
            qk_norm: variant == Variant::Qwen3,
            layer_windows: hf_layer_windows(cfg, variant, num_layers)?,
        };
        c.validate()
    }

    /// Rejects inconsistent shapes.
    fn validate(self) -> Result<LlamaConfig> {
        let ok = self.hidden_size > 0
            && self.num_layers > 0
            && self.num_kv_heads > 0
            && self.num_heads.is_multiple_of(self.num_kv_heads)
            && self.head_dim > 0
            && self.rope.rot_dim <= self.head_dim
            && self.rope.rot_dim.is_multiple_of(2)
            && self.rope.rot_dim > 0
            && self.vocab_size > 0
            && self.layer_windows.len() == self.num_layers
            && self.layer_windows.iter().all(|w| *w != Some(0));
        if !ok {
            return Err(cfg_err(format!(
                "inconsistent model configuration {self:?}"
            )));
        }
        Ok(self)
    }
}

/// Per-layer attention windows of a Hugging Face config, as transformers 5.17's `Qwen2Config` /
/// `Qwen3Config` decide them: `sliding_window` counts only when `use_sliding_window` is true;
/// a layer slides when `layer_types[i]` is `"sliding_attention"`, and without `layer_types`,
/// when `i >= max_window_layers` (default 28). Llama has no window.
fn hf_layer_windows(
    cfg: &ModelConfig,
    variant: Variant,
    num_layers: usize,
) -> Result<Vec<Option<usize>>> {
    let full = vec![None; num_layers];
    if variant == Variant::Llama || !cfg.get_bool_opt("use_sliding_window")?.unwrap_or(false) {
        return Ok(full);
    }
    // transformers' dataclass default is 4096; an explicit null turns the window off.
    let window = match cfg.json().get("sliding_window") {
        Some(serde_json::Value::Null) => return Ok(full),
        _ => cfg.get_usize_opt("sliding_window")?.unwrap_or(4096),
    };
    if window == 0 {
        return Err(cfg_err("sliding_window is 0"));
    }
    match cfg.get("layer_types").and_then(|v| v.as_array()) {
        Some(types) => {
            if types.len() != num_layers {
                return Err(cfg_err(format!(
                    "layer_types has {} entries for {num_layers} layers",
                    types.len()
                )));
            }
            types
                .iter()
                .map(|t| match t.as_str() {
                    Some("sliding_attention") => Ok(Some(window)),
                    Some("full_attention") => Ok(None),
                    _ => Err(cfg_err(format!("layer type {t} is not supported"))),
                })
                .collect()
        }
        None => {
            let first = cfg.get_usize_opt("max_window_layers")?.unwrap_or(28);
            Ok((0..num_layers)
                .map(|i| (i >= first).then_some(window))
                .collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qwen2(extra: serde_json::Value) -> LlamaConfig {
        let mut v = serde_json::json!({
            "model_type": "qwen2", "vocab_size": 16, "hidden_size": 8, "num_hidden_layers": 4,
            "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 8,
        });
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        LlamaConfig::from_hf(&ModelConfig::from_value(v)).unwrap()
    }

    #[test]
    fn qwen2_sliding_window_layers() {
        // Qwen2.5 releases state a window but leave it off.
        let off = qwen2(serde_json::json!({
            "use_sliding_window": false, "sliding_window": 32768, "max_window_layers": 2
        }));
        assert_eq!(off.layer_windows, vec![None; 4]);
        let on = qwen2(serde_json::json!({
            "use_sliding_window": true, "sliding_window": 8, "max_window_layers": 3
        }));
        assert_eq!(on.layer_windows, vec![None, None, None, Some(8)]);
        let default_layers = qwen2(serde_json::json!({"use_sliding_window": true}));
        assert_eq!(default_layers.layer_windows, vec![None; 4]);
        let typed = qwen2(serde_json::json!({
            "use_sliding_window": true, "sliding_window": 5, "max_window_layers": 0,
            "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]
        }));
        assert_eq!(typed.layer_windows, vec![Some(5), None, Some(5), None]);
        let null = qwen2(serde_json::json!({
            "use_sliding_window": true, "sliding_window": null, "max_window_layers": 0
        }));
        assert_eq!(null.layer_windows, vec![None; 4]);
    }

    #[test]
    fn bad_layer_types_are_errors() {
        let mut v = serde_json::json!({
            "model_type": "qwen2", "vocab_size": 16, "hidden_size": 8, "num_hidden_layers": 2,
            "num_attention_heads": 2, "intermediate_size": 8, "use_sliding_window": true,
            "layer_types": ["full_attention"]
        });
        assert!(LlamaConfig::from_hf(&ModelConfig::from_value(v.clone())).is_err());
        v["layer_types"] = serde_json::json!(["full_attention", "chunked_attention"]);
        assert!(LlamaConfig::from_hf(&ModelConfig::from_value(v.clone())).is_err());
        v["layer_types"] = serde_json::json!(["full_attention", "sliding_attention"]);
        v["sliding_window"] = serde_json::json!(0);
        assert!(LlamaConfig::from_hf(&ModelConfig::from_value(v)).is_err());
    }
}
