//! Benchmarks for PocketLLM: synthetic random-weight models at real shapes (GGUF that llama.cpp
//! loads, safetensors BF16/FP8/NVFP4), end-to-end runs with medians after warm-up, run records
//! (JSON + markdown), reports, llama-bench side by side, and the bandwidth roofline.

pub mod blocks;
pub mod error;
pub mod layout;
pub mod mix;
pub mod preset;
pub mod rng;
pub mod stream;
pub mod synth;
pub mod synth_gguf;
pub mod synth_st;
pub mod vocab;

pub use error::{BenchError, Result};
pub mod cli;
pub mod e2e;
#[cfg(feature = "engine")]
pub mod engine;
pub mod llama_bench;
#[cfg(feature = "engine")]
pub mod model_target;
#[cfg(feature = "engine")]
pub mod parity;
pub mod record;
pub mod report;
pub mod roofline;
pub mod runner;
pub mod sets;
pub mod stats;
pub mod sysinfo;
pub mod target;
