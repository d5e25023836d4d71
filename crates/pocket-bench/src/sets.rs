//! Named bench sets: the runs an issue's evidence needs, runnable in one command on a machine
//! without cargo (`pocket-bench set cuda ...`).

use crate::error::{BenchError, Result};

/// One run of a set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetEntry {
    /// Model spec for our engine.
    pub model: &'static str,
    /// Model spec for llama-bench when it differs (e.g. GGUF Q8_0 beside our FP8 safetensors).
    pub llama_model: Option<&'static str>,
    /// Prompt tokens.
    pub prompt: usize,
    /// Generated tokens.
    pub gen: usize,
}

const fn e(model: &'static str) -> SetEntry {
    SetEntry {
        model,
        llama_model: None,
        prompt: 512,
        gen: 128,
    }
}

/// The runs of set `name`.
pub fn set(name: &str) -> Result<Vec<SetEntry>> {
    Ok(match name {
        // issue 7: dense family on the H200 (SmolLM2 Q4_1, Qwen2.5-0.5B Q4_K_M, Llama-3-8B shapes)
        "cuda" | "dense" => vec![
            e("synthetic:smollm-135m:q4_1"),
            e("synthetic:qwen2.5-0.5b:q4_k_m"),
            e("synthetic:llama3-8b:q4_0"),
            e("synthetic:llama3-8b:q4_k_m"),
            e("synthetic:llama3-8b:q8_0"),
        ],
        // issue 9: the Qwen3.5-27B shape, ours from FP8 safetensors, llama.cpp from GGUF Q8_0
        "hybrid" => vec![SetEntry {
            llama_model: Some("synthetic:qwen3.5-27b:q8_0"),
            ..e("synthetic:qwen3.5-27b:fp8")
        }],
        // MoE shapes (the DESIGN.md anchor is Qwen3-30B-A3B Q4_K_M)
        "moe" => vec![e("synthetic:qwen3-30b-a3b:q4_k_m")],
        // small shapes that also run on a laptop CPU
        "cpu" => vec![
            e("synthetic:smollm-135m:q4_1"),
            e("synthetic:qwen2.5-0.5b:q4_k_m"),
        ],
        other => {
            return Err(BenchError::Usage(format!(
                "unknown set `{other}` (cuda, hybrid, moe, cpu)"
            )))
        }
    })
}
