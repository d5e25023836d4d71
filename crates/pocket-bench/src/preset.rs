//! Model presets: the real shapes of the models we benchmark, with the vocabulary file that gives
//! their GGUF a real tokenizer.

use crate::error::{BenchError, Result};

/// Architecture family of a preset (decides tensor names and metadata).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// Llama / SmolLM (GGUF `llama`).
    Llama,
    /// Qwen2 / Qwen2.5: Q, K, V biases (GGUF `qwen2`).
    Qwen2,
    /// Qwen3 MoE: QK-norm, routed experts (GGUF `qwen3moe`).
    Qwen3Moe,
    /// Qwen3.5 hybrid: Gated DeltaNet + gated attention (GGUF `qwen35`).
    Qwen35,
    /// MiniMax-M2: MoE with sigmoid routing and full-width QK-norm (GGUF `minimax-m2`).
    MinimaxM2,
}

impl Arch {
    /// The GGUF `general.architecture` value.
    pub fn gguf_name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3Moe => "qwen3moe",
            Arch::Qwen35 => "qwen35",
            Arch::MinimaxM2 => "minimax-m2",
        }
    }
}

/// Routed-expert shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moe {
    /// Experts per layer.
    pub experts: usize,
    /// Experts used per token.
    pub used: usize,
    /// Each expert's intermediate size.
    pub ffn: usize,
}

/// Gated DeltaNet (linear attention) shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinearAttn {
    /// Every `interval`-th layer is full attention, the others linear.
    pub interval: usize,
    /// Key heads.
    pub k_heads: usize,
    /// Value heads.
    pub v_heads: usize,
    /// Key head dimension.
    pub k_dim: usize,
    /// Value head dimension.
    pub v_dim: usize,
    /// Short-convolution width.
    pub conv: usize,
}

impl LinearAttn {
    /// Width of the key projection (all heads).
    pub fn key_dim(&self) -> usize {
        self.k_heads * self.k_dim
    }
    /// Width of the value projection (all heads).
    pub fn value_dim(&self) -> usize {
        self.v_heads * self.v_dim
    }
    /// Channels of the short convolution (q, k and v).
    pub fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }
}

/// A model shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Preset {
    /// Preset name (`llama3-8b`).
    pub name: &'static str,
    /// What it imitates.
    pub about: &'static str,
    /// Family.
    pub arch: Arch,
    /// Hidden size.
    pub hidden: usize,
    /// Transformer blocks.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// Dense MLP width (0 for pure-MoE models).
    pub ffn: usize,
    /// Vocabulary rows.
    pub vocab: usize,
    /// Output projection shares the embedding.
    pub tied: bool,
    /// RoPE base.
    pub rope_theta: f32,
    /// Rotated dimensions per head.
    pub rope_dim: usize,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// Trained context.
    pub ctx: usize,
    /// Routed experts, if any.
    pub moe: Option<Moe>,
    /// Linear-attention layers, if any.
    pub linear: Option<LinearAttn>,
    /// The llama.cpp vocab GGUF whose tokenizer the GGUF copies (padded or cut to `vocab`).
    pub vocab_file: &'static str,
    /// llama.cpp treats the shape as its 70B type (bigger attn_v in K-quant mixes).
    pub llama_70b: bool,
}

impl Preset {
    /// Whether layer `il` is a full-attention layer.
    pub fn is_full_attention(&self, il: usize) -> bool {
        match self.linear {
            Some(l) => (il + 1).is_multiple_of(l.interval),
            None => true,
        }
    }
}

#[allow(clippy::too_many_arguments)]
const fn dense(
    name: &'static str,
    about: &'static str,
    arch: Arch,
    dims: [usize; 7],
    tied: bool,
    rope_theta: f32,
    rms_eps: f32,
    ctx: usize,
    vocab_file: &'static str,
) -> Preset {
    let [hidden, layers, heads, kv_heads, head_dim, ffn, vocab] = dims;
    Preset {
        name,
        about,
        arch,
        hidden,
        layers,
        heads,
        kv_heads,
        head_dim,
        ffn,
        vocab,
        tied,
        rope_theta,
        rope_dim: head_dim,
        rms_eps,
        ctx,
        moe: None,
        linear: None,
        vocab_file,
        llama_70b: false,
    }
}

/// Every preset.
pub fn presets() -> Vec<Preset> {
    let gpt2 = "ggml-vocab-gpt-2.gguf";
    let l3 = "ggml-vocab-llama-bpe.gguf";
    let qw = "ggml-vocab-qwen2.gguf";
    let mut v = vec![
        dense(
            "smollm-135m",
            "SmolLM2-135M",
            Arch::Llama,
            [576, 30, 9, 3, 64, 1536, 49152],
            true,
            100000.0,
            1e-5,
            8192,
            gpt2,
        ),
        dense(
            "qwen2.5-0.5b",
            "Qwen2.5-0.5B",
            Arch::Qwen2,
            [896, 24, 14, 2, 64, 4864, 151936],
            true,
            1_000_000.0,
            1e-6,
            32768,
            qw,
        ),
        dense(
            "llama3-8b",
            "Llama-3-8B",
            Arch::Llama,
            [4096, 32, 32, 8, 128, 14336, 128256],
            false,
            500000.0,
            1e-5,
            8192,
            l3,
        ),
        Preset {
            llama_70b: true,
            ..dense(
                "llama3-70b",
                "Llama-3-70B",
                Arch::Llama,
                [8192, 80, 64, 8, 128, 28672, 128256],
                false,
                500000.0,
                1e-5,
                8192,
                l3,
            )
        },
        Preset {
            moe: Some(Moe {
                experts: 128,
                used: 8,
                ffn: 768,
            }),
            ..dense(
                "qwen3-30b-a3b",
                "Qwen3-30B-A3B",
                Arch::Qwen3Moe,
                [2048, 48, 32, 4, 128, 0, 151936],
                false,
                1_000_000.0,
                1e-6,
                40960,
                qw,
            )
        },
        Preset {
            moe: Some(Moe {
                experts: 256,
                used: 8,
                ffn: 1536,
            }),
            rope_dim: 64,
            ..dense(
                "minimax-m2",
                "MiniMax-M2 (230B-A10B)",
                Arch::MinimaxM2,
                [3072, 62, 48, 8, 128, 0, 200064],
                false,
                5_000_000.0,
                1e-6,
                196608,
                l3,
            )
        },
        Preset {
            linear: Some(LinearAttn {
                interval: 4,
                k_heads: 16,
                v_heads: 48,
                k_dim: 128,
                v_dim: 128,
                conv: 4,
            }),
            rope_dim: 64,
            ..dense(
                "qwen3.5-27b",
                "Qwen3.5-27B text model (48 Gated DeltaNet + 16 gated attention layers)",
                Arch::Qwen35,
                [5120, 64, 24, 4, 256, 17408, 248320],
                false,
                10_000_000.0,
                1e-6,
                262144,
                qw,
            )
        },
        // Small enough for CPU-vs-CUDA parity of the hybrid path in seconds: 8 layers, 6 Gated
        // DeltaNet and 2 gated attention (interval 4 as in the real model), head sizes of the
        // real model (attention 256 with 64 rotated, DeltaNet 128), the real Qwen2 vocabulary.
        Preset {
            linear: Some(LinearAttn {
                interval: 4,
                k_heads: 2,
                v_heads: 4,
                k_dim: 128,
                v_dim: 128,
                conv: 4,
            }),
            rope_dim: 64,
            ..dense(
                "qwen3.5-tiny",
                "a small Qwen3.5 text model (6 Gated DeltaNet + 2 gated attention layers)",
                Arch::Qwen35,
                [512, 8, 4, 2, 256, 1536, 151936],
                false,
                10_000_000.0,
                1e-6,
                262144,
                qw,
            )
        },
    ];
    v.shrink_to_fit();
    v
}

/// The preset called `name`.
pub fn preset(name: &str) -> Result<Preset> {
    let all = presets();
    all.iter().find(|p| p.name == name).cloned().ok_or_else(|| {
        BenchError::UnknownPreset(
            name.to_string(),
            all.iter().map(|p| p.name).collect::<Vec<_>>().join(", "),
        )
    })
}
