//! Weights from a [`TensorStore`] onto a device under either naming scheme: Hugging Face
//! (`model.layers.N...`, or `model.language_model.layers.N...` in checkpoints with a vision
//! tower) or llama.cpp's `qwen35` GGUF names. Reading them (matrices in their block format: BF16,
//! FP8 E4M3 with 128x128 block scales, any GGUF type; borrowed from the mapped file on the CPU)
//! is pocket-layers' [`TensorSource`].

use std::ops::Deref;
use std::sync::Arc;

use pocket_formats::{StoreKind, TensorStore};
use pocket_kernels::Device;
use pocket_layers::{LayerError, Result, TensorSource};

/// Which naming scheme (and value conventions) the store uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Naming {
    /// llama.cpp's converter: RMSNorm scales stored as `1 + w`, `ssm_a = -exp(A_log)`, value
    /// heads re-tiled.
    Gguf,
    /// Hugging Face: zero-centred RMSNorm scales, `A_log`, grouped value heads; text tensors
    /// under `prefix` (`model.` or `model.language_model.`).
    Hf {
        /// Prefix of the text model's tensors.
        prefix: String,
    },
}

/// Per-layer parts, named independently of the scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Pre-mixer norm.
    AttnNorm,
    /// Pre-MLP norm.
    FfnNorm,
    /// Attention `[query | gate]` projection.
    Q,
    /// Attention K projection.
    K,
    /// Attention V projection.
    V,
    /// Attention output projection.
    O,
    /// Per-head query norm.
    QNorm,
    /// Per-head key norm.
    KNorm,
    /// DeltaNet `[q | k | v]` projection.
    InQkv,
    /// DeltaNet output gate projection.
    InZ,
    /// DeltaNet beta projection.
    InB,
    /// DeltaNet decay projection.
    InA,
    /// DeltaNet output projection.
    Out,
    /// DeltaNet conv taps.
    Conv,
    /// DeltaNet `A_log` (HF) or `ssm_a` (GGUF).
    A,
    /// DeltaNet decay bias.
    DtBias,
    /// DeltaNet gated-norm scale.
    GatedNorm,
    /// MLP gate.
    Gate,
    /// MLP up.
    Up,
    /// MLP down.
    Down,
}

/// Reads named tensors of one store onto one device: this model's naming scheme over the shared
/// [`TensorSource`] (which it dereferences to for `weight`, `values`, `shape`, ...).
pub struct Loader {
    src: TensorSource,
    naming: Naming,
}

impl Deref for Loader {
    type Target = TensorSource;

    fn deref(&self) -> &TensorSource {
        &self.src
    }
}

impl Loader {
    /// A loader for `store` onto `dev`; for safetensors, finds the text model's prefix.
    pub fn new(store: Arc<TensorStore>, dev: Device) -> Result<Loader> {
        let naming = match store.kind() {
            StoreKind::Gguf => Naming::Gguf,
            StoreKind::Safetensors => {
                let prefix = ["model.language_model.", "model."]
                    .into_iter()
                    .find(|p| store.contains(&format!("{p}embed_tokens.weight")))
                    .ok_or_else(|| {
                        LayerError::Checkpoint(
                            "no `model.embed_tokens.weight` or `model.language_model.embed_tokens.weight`"
                                .into(),
                        )
                    })?;
                Naming::Hf {
                    prefix: prefix.to_string(),
                }
            }
        };
        Ok(Loader {
            src: TensorSource::new(store, dev),
            naming,
        })
    }

    /// The naming scheme.
    pub fn naming(&self) -> &Naming {
        &self.naming
    }

    /// The name of a layer part.
    pub fn layer_name(&self, layer: usize, part: Part) -> String {
        match &self.naming {
            Naming::Gguf => {
                let p = match part {
                    Part::AttnNorm => "attn_norm.weight",
                    Part::FfnNorm => "post_attention_norm.weight",
                    Part::Q => "attn_q.weight",
                    Part::K => "attn_k.weight",
                    Part::V => "attn_v.weight",
                    Part::O => "attn_output.weight",
                    Part::QNorm => "attn_q_norm.weight",
                    Part::KNorm => "attn_k_norm.weight",
                    Part::InQkv => "attn_qkv.weight",
                    Part::InZ => "attn_gate.weight",
                    Part::InB => "ssm_beta.weight",
                    Part::InA => "ssm_alpha.weight",
                    Part::Out => "ssm_out.weight",
                    Part::Conv => "ssm_conv1d.weight",
                    Part::A => "ssm_a",
                    Part::DtBias => "ssm_dt.bias",
                    Part::GatedNorm => "ssm_norm.weight",
                    Part::Gate => "ffn_gate.weight",
                    Part::Up => "ffn_up.weight",
                    Part::Down => "ffn_down.weight",
                };
                format!("blk.{layer}.{p}")
            }
            Naming::Hf { prefix } => {
                let p = match part {
                    Part::AttnNorm => "input_layernorm.weight",
                    Part::FfnNorm => "post_attention_layernorm.weight",
                    Part::Q => "self_attn.q_proj.weight",
                    Part::K => "self_attn.k_proj.weight",
                    Part::V => "self_attn.v_proj.weight",
                    Part::O => "self_attn.o_proj.weight",
                    Part::QNorm => "self_attn.q_norm.weight",
                    Part::KNorm => "self_attn.k_norm.weight",
                    Part::InQkv => "linear_attn.in_proj_qkv.weight",
                    Part::InZ => "linear_attn.in_proj_z.weight",
                    Part::InB => "linear_attn.in_proj_b.weight",
                    Part::InA => "linear_attn.in_proj_a.weight",
                    Part::Out => "linear_attn.out_proj.weight",
                    Part::Conv => "linear_attn.conv1d.weight",
                    Part::A => "linear_attn.A_log",
                    Part::DtBias => "linear_attn.dt_bias",
                    Part::GatedNorm => "linear_attn.norm.weight",
                    Part::Gate => "mlp.gate_proj.weight",
                    Part::Up => "mlp.up_proj.weight",
                    Part::Down => "mlp.down_proj.weight",
                };
                format!("{prefix}layers.{layer}.{p}")
            }
        }
    }

    /// Names of the embedding table, final norm and output projection.
    pub fn global_names(&self) -> (String, String, String) {
        match &self.naming {
            Naming::Gguf => (
                "token_embd.weight".into(),
                "output_norm.weight".into(),
                "output.weight".into(),
            ),
            Naming::Hf { prefix } => (
                format!("{prefix}embed_tokens.weight"),
                format!("{prefix}norm.weight"),
                "lm_head.weight".into(),
            ),
        }
    }
}
