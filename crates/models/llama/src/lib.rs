//! The Llama family: Llama, Qwen2 (QKV bias), Qwen3 (QK-norm), SmolLM2.
