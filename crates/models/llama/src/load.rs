//! The family's tensor names under either scheme (llama.cpp GGUF or Hugging Face); reading them
//! onto a device (zero-copy on the CPU, any weight format) is pocket-layers' [`TensorSource`].

use std::ops::Deref;
use std::sync::Arc;

use pocket_formats::{StoreKind, TensorStore};
use pocket_kernels::rope::{RopeConfig, RopeTable};
use pocket_kernels::Device;
use pocket_layers::{Result, TensorSource};

/// Which naming scheme the store uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    /// llama.cpp GGUF names (`blk.0.attn_q.weight`).
    Gguf,
    /// Hugging Face names (`model.layers.0.self_attn.q_proj.weight`).
    Hf,
}

/// Per-layer parts of the family, named independently of the file's scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Pre-attention norm.
    AttnNorm,
    /// Q projection.
    Q,
    /// K projection.
    K,
    /// V projection.
    V,
    /// Output projection.
    O,
    /// Per-head Q norm.
    QNorm,
    /// Per-head K norm.
    KNorm,
    /// Pre-MLP norm.
    FfnNorm,
    /// MLP gate.
    Gate,
    /// MLP up.
    Up,
    /// MLP down.
    Down,
}

/// Reads named tensors of one store onto one device: the family's naming scheme over the shared
/// [`TensorSource`] (which it dereferences to for `weight`, `vector`, `values`, `shape`, ...).
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
    /// A loader for `store` onto `dev`.
    pub fn new(store: Arc<TensorStore>, dev: Device) -> Loader {
        let naming = match store.kind() {
            StoreKind::Gguf => Naming::Gguf,
            StoreKind::Safetensors => Naming::Hf,
        };
        Loader {
            src: TensorSource::new(store, dev),
            naming,
        }
    }

    /// The naming scheme.
    pub fn naming(&self) -> Naming {
        self.naming
    }

    /// The file name of a layer part's weight (or bias).
    pub fn layer_name(&self, layer: usize, part: Part, bias: bool) -> String {
        let suffix = if bias { "bias" } else { "weight" };
        match self.naming {
            Naming::Gguf => {
                let p = match part {
                    Part::AttnNorm => "attn_norm",
                    Part::Q => "attn_q",
                    Part::K => "attn_k",
                    Part::V => "attn_v",
                    Part::O => "attn_output",
                    Part::QNorm => "attn_q_norm",
                    Part::KNorm => "attn_k_norm",
                    Part::FfnNorm => "ffn_norm",
                    Part::Gate => "ffn_gate",
                    Part::Up => "ffn_up",
                    Part::Down => "ffn_down",
                };
                format!("blk.{layer}.{p}.{suffix}")
            }
            Naming::Hf => {
                let p = match part {
                    Part::AttnNorm => "input_layernorm",
                    Part::Q => "self_attn.q_proj",
                    Part::K => "self_attn.k_proj",
                    Part::V => "self_attn.v_proj",
                    Part::O => "self_attn.o_proj",
                    Part::QNorm => "self_attn.q_norm",
                    Part::KNorm => "self_attn.k_norm",
                    Part::FfnNorm => "post_attention_layernorm",
                    Part::Gate => "mlp.gate_proj",
                    Part::Up => "mlp.up_proj",
                    Part::Down => "mlp.down_proj",
                };
                format!("model.layers.{layer}.{p}.{suffix}")
            }
        }
    }

    /// Names of the embedding table, final norm and output projection.
    pub fn global_names(&self) -> (&'static str, &'static str, &'static str) {
        match self.naming {
            Naming::Gguf => ("token_embd.weight", "output_norm.weight", "output.weight"),
            Naming::Hf => (
                "model.embed_tokens.weight",
                "model.norm.weight",
                "lm_head.weight",
            ),
        }
    }

    /// The RoPE table for positions `0..max_pos`. A GGUF converted from Llama-3.1 states its
    /// llama3 scaling only as `rope_freqs.weight` (one divisor per rotating pair, as
    /// llama.cpp applies it), not as metadata; such factors are folded in here.
    pub fn rope_table(&self, rope: RopeConfig, max_pos: usize) -> Result<RopeTable> {
        const FREQS: &str = "rope_freqs.weight";
        if self.naming == Naming::Gguf && self.contains(FREQS) {
            let factors = self.values(FREQS, rope.rot_dim / 2)?;
            return Ok(RopeTable::with_freq_factors(rope, max_pos, &factors)?);
        }
        Ok(RopeTable::new(rope, max_pos))
    }
}
