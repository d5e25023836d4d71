//! Qwen3.5 (and the Qwen3.8 checkpoints of the same text architecture): a `layer_types` schedule
//! of Gated DeltaNet and gated full-attention blocks with dense SwiGLU MLPs, loaded from Hugging
//! Face safetensors (BF16, or FP8 E4M3 with 128x128 block scales) or llama.cpp's `qwen35` GGUF.
//! The recurrent state of the DeltaNet layers lives in a per-sequence state cache beside the
//! paged KV cache of the attention layers (pocket-layers' `Attention` with its output gate on).
//! Vision towers and MTP heads are skipped.

pub mod config;
pub mod load;
pub mod model;

pub use config::{LayerKind, Qwen35Config};
pub use model::{LoadOptions, Qwen35Model};

/// Architecture names (`general.architecture` / `model_type`) this crate loads.
pub const ARCHITECTURES: &[&str] = &["qwen35", "qwen3_5", "qwen3_5_text"];
