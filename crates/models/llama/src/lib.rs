//! The Llama family: Llama, Qwen2 (QKV bias), Qwen3 (QK-norm), SmolLM2, from GGUF (llama.cpp
//! names and metadata) or Hugging Face safetensors + `config.json`, with one forward pass for
//! every weight format and device.

pub mod config;
pub mod load;
pub mod model;

pub use config::{LlamaConfig, Variant};
pub use model::{LlamaModel, LoadOptions};

/// Architecture names (`general.architecture` / `model_type`) this crate loads.
pub const ARCHITECTURES: &[&str] = &["llama", "qwen2", "qwen3"];
