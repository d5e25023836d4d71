//! Qwen3.5 text hyper-parameters, from a Hugging Face `config.json` (`qwen3_5` with a
//! `text_config`, or `qwen3_5_text`) or from llama.cpp's `qwen35` GGUF metadata, the checkpoint
//! quantization check and the load options.

use pocket_formats::{GgufMetadata, ModelConfig};
use pocket_kernels::rope::{RopeConfig, RopeLayout, RopeScaling};
use pocket_layers::{LayerError, Result};
use serde_json::Value;

/// Options that shape a load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadOptions {
    /// Longest sequence the engine will run (sizes the RoPE table); capped at the model's context.
    pub max_seq_len: usize,
    /// Sequences that can hold recurrent state at once (slots of the state cache).
    pub max_seqs: usize,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            max_seq_len: 8192,
            max_seqs: 16,
        }
    }
}

/// The token mixer of one layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerKind {
    /// Gated DeltaNet (`linear_attention`).
    Linear,
    /// Gated full attention (`full_attention`).
    Full,
}

/// Shapes and settings of a Qwen3.5 text model.
#[derive(Debug, Clone, PartialEq)]
pub struct Qwen35Config {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Hidden size.
    pub hidden_size: usize,
    /// The mixer of each layer, in order (`layer_types`).
    pub layers: Vec<LayerKind>,
    /// Query heads of the full-attention layers.
    pub num_heads: usize,
    /// Key/value heads of the full-attention layers.
    pub num_kv_heads: usize,
    /// Head dimension of the full-attention layers.
    pub head_dim: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// RMSNorm epsilon (all norms).
    pub rms_norm_eps: f32,
    /// RoPE of the full-attention layers (partial rotary, halves).
    pub rope: RopeConfig,
    /// Trained context length.
    pub max_context: usize,
    /// DeltaNet query/key heads.
    pub linear_k_heads: usize,
    /// DeltaNet value heads.
    pub linear_v_heads: usize,
    /// DeltaNet query/key head dimension.
    pub linear_k_dim: usize,
    /// DeltaNet value head dimension.
    pub linear_v_dim: usize,
    /// DeltaNet short-conv kernel length.
    pub conv_kernel: usize,
    /// Whether `lm_head` is the embedding table.
    pub tie_word_embeddings: bool,
}

fn cfg_err(msg: impl Into<String>) -> LayerError {
    LayerError::Config(msg.into())
}

/// `model_type` values whose text model this crate runs.
pub const MODEL_TYPES: &[&str] = &["qwen3_5", "qwen3_5_text"];

impl Qwen35Config {
    /// Full-attention layers (those with a KV cache).
    pub fn num_full_layers(&self) -> usize {
        self.layers
            .iter()
            .filter(|k| **k == LayerKind::Full)
            .count()
    }

    /// DeltaNet layers (those with recurrent state).
    pub fn num_linear_layers(&self) -> usize {
        self.layers.len() - self.num_full_layers()
    }

    /// Reads a Hugging Face config: the text part of a `qwen3_5` checkpoint (its `text_config`)
    /// or a `qwen3_5_text` one. Also returns whether the checkpoint declares a vision tower.
    pub fn from_hf(cfg: &ModelConfig) -> Result<(Qwen35Config, bool)> {
        let mt = cfg
            .model_type()
            .ok_or_else(|| cfg_err("config.json has no model_type"))?;
        if !MODEL_TYPES.contains(&mt) {
            return Err(cfg_err(format!("model_type `{mt}` is not qwen3_5")));
        }
        let has_vision = cfg.get("vision_config").is_some();
        let text = match cfg.get("text_config") {
            Some(t) => ModelConfig::from_value(t.clone()),
            None => ModelConfig::from_value(cfg.json().clone()),
        };
        let c = &text;
        let hidden = c.get_usize("hidden_size")?;
        let heads = c.get_usize("num_attention_heads")?;
        let head_dim = c
            .get_usize_opt("head_dim")?
            .unwrap_or(hidden / heads.max(1));
        let rp = c.get("rope_parameters").or_else(|| c.get("rope_scaling"));
        let rp_f = |k: &str| rp.and_then(|v| v.get(k)).and_then(Value::as_f64);
        let rope_type = rp
            .and_then(|v| v.get("rope_type").or_else(|| v.get("type")))
            .and_then(Value::as_str)
            .unwrap_or("default");
        if rope_type != "default" {
            return Err(cfg_err(format!("rope type `{rope_type}` is not supported")));
        }
        let theta = rp_f("rope_theta")
            .or(c.get_f64_opt("rope_theta")?)
            .unwrap_or(10000.0);
        let partial = rp_f("partial_rotary_factor")
            .or(c.get_f64_opt("partial_rotary_factor")?)
            .unwrap_or(0.25);
        let n_layers = c.get_usize("num_hidden_layers")?;
        let layers = match c.get("layer_types").and_then(Value::as_array) {
            Some(a) => a
                .iter()
                .map(|v| match v.as_str() {
                    Some("linear_attention") => Ok(LayerKind::Linear),
                    Some("full_attention") | Some("attention") => Ok(LayerKind::Full),
                    other => Err(cfg_err(format!("unknown layer type {other:?}"))),
                })
                .collect::<Result<Vec<_>>>()?,
            None => {
                let every = c.get_usize_opt("full_attention_interval")?.unwrap_or(4);
                interval_schedule(n_layers, every)?
            }
        };
        if layers.len() != n_layers {
            return Err(cfg_err(format!(
                "{} layer_types for {n_layers} layers",
                layers.len()
            )));
        }
        let tie = match c.get_bool_opt("tie_word_embeddings")? {
            Some(t) => t,
            None => cfg.get_bool_opt("tie_word_embeddings")?.unwrap_or(false),
        };
        let out = Qwen35Config {
            vocab_size: c.get_usize("vocab_size")?,
            hidden_size: hidden,
            layers,
            num_heads: heads,
            num_kv_heads: c.get_usize_opt("num_key_value_heads")?.unwrap_or(heads),
            head_dim,
            intermediate_size: c.get_usize("intermediate_size")?,
            rms_norm_eps: c.get_f64_opt("rms_norm_eps")?.unwrap_or(1e-6) as f32,
            rope: RopeConfig {
                theta: theta as f32,
                rot_dim: ((head_dim as f64 * partial) as usize) & !1,
                layout: RopeLayout::NeoX,
                scaling: RopeScaling::None,
            },
            max_context: c.get_usize_opt("max_position_embeddings")?.unwrap_or(32768),
            linear_k_heads: c.get_usize_opt("linear_num_key_heads")?.unwrap_or(16),
            linear_v_heads: c.get_usize_opt("linear_num_value_heads")?.unwrap_or(32),
            linear_k_dim: c.get_usize_opt("linear_key_head_dim")?.unwrap_or(128),
            linear_v_dim: c.get_usize_opt("linear_value_head_dim")?.unwrap_or(128),
            conv_kernel: c.get_usize_opt("linear_conv_kernel_dim")?.unwrap_or(4),
            tie_word_embeddings: tie,
        };
        Ok((out.validate()?, has_vision))
    }

    /// Reads llama.cpp's `qwen35` GGUF keys. `block_count` includes any MTP (`nextn`) blocks,
    /// which are not run; the vocabulary size falls back to the embedding table's rows.
    pub fn from_gguf(md: &GgufMetadata, vocab_rows: usize) -> Result<Qwen35Config> {
        let arch = md.architecture()?.to_string();
        if arch != "qwen35" {
            return Err(cfg_err(format!("architecture `{arch}` is not qwen35")));
        }
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
        let heads = u("attention.head_count")?;
        let head_dim = uo("attention.key_length")?.unwrap_or(hidden / heads.max(1));
        let nextn = uo("nextn_predict_layers")?.unwrap_or(0);
        let n_layers = u("block_count")?
            .checked_sub(nextn)
            .ok_or_else(|| cfg_err("nextn_predict_layers exceeds block_count"))?;
        let every = uo("full_attention_interval")?.unwrap_or(4);
        let v_heads = u("ssm.time_step_rank")?;
        let inner = u("ssm.inner_size")?;
        let out = Qwen35Config {
            vocab_size: uo("vocab_size")?.unwrap_or(vocab_rows),
            hidden_size: hidden,
            layers: interval_schedule(n_layers, every)?,
            num_heads: heads,
            num_kv_heads: uo("attention.head_count_kv")?.unwrap_or(heads),
            head_dim,
            intermediate_size: u("feed_forward_length")?,
            rms_norm_eps: md
                .get_f32_opt(&k("attention.layer_norm_rms_epsilon"))?
                .unwrap_or(1e-6),
            rope: RopeConfig {
                theta: md.get_f32_opt(&k("rope.freq_base"))?.unwrap_or(10000.0),
                rot_dim: uo("rope.dimension_count")?.unwrap_or(head_dim / 4),
                layout: RopeLayout::NeoX,
                scaling: RopeScaling::None,
            },
            max_context: uo("context_length")?.unwrap_or(32768),
            linear_k_heads: u("ssm.group_count")?,
            linear_v_heads: v_heads,
            linear_k_dim: u("ssm.state_size")?,
            linear_v_dim: inner / v_heads.max(1),
            conv_kernel: u("ssm.conv_kernel")?,
            tie_word_embeddings: false,
        };
        out.validate()
    }

    /// Rejects inconsistent shapes.
    fn validate(self) -> Result<Qwen35Config> {
        let ok = self.hidden_size > 0
            && !self.layers.is_empty()
            && self.num_heads > 0
            && self.num_kv_heads > 0
            && self.num_heads.is_multiple_of(self.num_kv_heads)
            && self.head_dim > 0
            && self.rope.rot_dim > 0
            && self.rope.rot_dim <= self.head_dim
            && self.vocab_size > 0
            && self.linear_k_heads > 0
            && self.linear_v_heads.is_multiple_of(self.linear_k_heads)
            && self.linear_v_heads > 0
            && self.linear_k_dim > 0
            && self.linear_v_dim > 0
            && self.conv_kernel >= 2;
        if !ok {
            return Err(cfg_err(format!(
                "inconsistent qwen3.5 configuration {self:?}"
            )));
        }
        Ok(self)
    }
}

/// transformers' default schedule: every `every`-th layer is full attention, the rest DeltaNet.
fn interval_schedule(n: usize, every: usize) -> Result<Vec<LayerKind>> {
    if every == 0 {
        return Err(cfg_err("full_attention_interval is 0"));
    }
    Ok((0..n)
        .map(|i| {
            if (i + 1) % every == 0 {
                LayerKind::Full
            } else {
                LayerKind::Linear
            }
        })
        .collect())
}

/// Accepts unquantized checkpoints and Qwen's FP8 layout (E4M3, 128x128 blocks); rejects others
/// with the reason.
pub(crate) fn check_quantization(c: &ModelConfig) -> Result<()> {
    let Some(q) = c.get("quantization_config") else {
        return Ok(());
    };
    let method = q.get("quant_method").and_then(|v| v.as_str()).unwrap_or("");
    if method != "fp8" {
        return Err(LayerError::Config(format!(
            "quantization method `{method}` is not supported (fp8 with 128x128 blocks is)"
        )));
    }
    let block: Option<Vec<u64>> = q
        .get("weight_block_size")
        .and_then(|v| v.as_array())
        .map(|a| a.iter().filter_map(|x| x.as_u64()).collect());
    if block.as_deref() != Some(&[128, 128][..]) {
        return Err(LayerError::Config(format!(
            "fp8 weight_block_size {block:?} is not supported (only [128, 128])"
        )));
    }
    Ok(())
}
