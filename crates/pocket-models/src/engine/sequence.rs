//! Per-sequence state: tokens, sampler, stop checks, streaming detokenization.

use crate::sampling::{Sampler, SamplingParams, StopChecker};
use crate::tokenizer::StreamDecoder;

/// What one request asks for besides its prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateParams {
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Sampling settings (temperature 0 is greedy).
    pub sampling: SamplingParams,
    /// Strings that end generation (never emitted).
    pub stop: Vec<String>,
    /// Keep going past end-of-generation tokens.
    pub ignore_eos: bool,
}

impl Default for GenerateParams {
    fn default() -> Self {
        GenerateParams {
            max_tokens: 128,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            ignore_eos: false,
        }
    }
}

/// Why a sequence finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token or a stop string.
    Stop,
    /// `max_tokens` reached, or the context is full.
    Length,
    /// Cancelled by the caller.
    Cancelled,
    /// The step failed for this sequence (the message says why).
    Error(String),
}

/// One sequence's output from one engine step.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenEvent {
    /// The token sampled this step (`None` when the sequence ended without one: a stop token,
    /// cancellation or an error).
    pub token: Option<u32>,
    /// Its log-probability under the processed distribution.
    pub logprob: Option<f32>,
    /// The most likely tokens `(id, logprob)`, best first, when the sampling params ask for
    /// `top_logprobs` (empty otherwise).
    pub top_logprobs: Vec<(u32, f32)>,
    /// Text safe to show now (may be empty while a stop string or UTF-8 char is incomplete).
    pub text: String,
    /// Set on the sequence's last event.
    pub finish: Option<FinishReason>,
}

/// Engine-side state of one sequence.
pub(crate) struct Sequence {
    /// Prompt and generated tokens, oldest first.
    pub tokens: Vec<u32>,
    /// Tokens not yet in the KV cache (the prompt, then each sampled token).
    pub pending: Vec<u32>,
    /// Tokens generated so far.
    pub generated: usize,
    pub params: GenerateParams,
    pub sampler: Sampler,
    pub stop: StopChecker,
    pub decoder: StreamDecoder,
}
