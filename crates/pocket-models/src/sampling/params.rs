//! Sampling parameters as a request carries them, with range validation.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::SamplingError;

/// How to pick the next token. Deserializes from OpenAI-style request fields; missing fields take
/// the defaults (temperature 1, every filter off).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplingParams {
    /// Softmax temperature; 0 means greedy (argmax).
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; 0 disables.
    pub top_k: u32,
    /// Nucleus sampling: keep the smallest set of tokens whose probability reaches `top_p`; 1 disables.
    pub top_p: f32,
    /// Drop tokens whose probability is below `min_p` times the best one's; 0 disables.
    pub min_p: f32,
    /// Multiplicative repetition penalty (>1 discourages repeats); 1 disables.
    pub repetition_penalty: f32,
    /// Subtracted once from the logit of every token already present; 0 disables.
    pub presence_penalty: f32,
    /// Subtracted per occurrence from the logit of tokens already present; 0 disables.
    pub frequency_penalty: f32,
    /// How many of the most recent tokens the penalties look at; `None` looks at all of them.
    pub penalty_last_n: Option<usize>,
    /// Added to the logits of the given token ids before anything else.
    pub logit_bias: BTreeMap<u32, f32>,
    /// Seed for the random draw; `None` lets the caller pick (e.g. from the clock).
    pub seed: Option<u64>,
    /// How many of the most likely alternatives to report with each token (0..=20).
    pub top_logprobs: usize,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            penalty_last_n: None,
            logit_bias: BTreeMap::new(),
            seed: None,
            top_logprobs: 0,
        }
    }
}

fn check(name: &'static str, v: f32, ok: bool, allowed: &'static str) -> Result<(), SamplingError> {
    if ok && v.is_finite() {
        Ok(())
    } else {
        Err(SamplingError::OutOfRange {
            name,
            value: v.to_string(),
            allowed,
        })
    }
}

impl SamplingParams {
    /// Greedy decoding (temperature 0).
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            ..Self::default()
        }
    }

    /// Checks every field's range; the error names the first offending field.
    pub fn validate(&self) -> Result<(), SamplingError> {
        check(
            "temperature",
            self.temperature,
            (0.0..=2.0).contains(&self.temperature),
            "0 to 2",
        )?;
        check(
            "top_p",
            self.top_p,
            self.top_p > 0.0 && self.top_p <= 1.0,
            "greater than 0, at most 1",
        )?;
        check(
            "min_p",
            self.min_p,
            (0.0..=1.0).contains(&self.min_p),
            "0 to 1",
        )?;
        check(
            "repetition_penalty",
            self.repetition_penalty,
            self.repetition_penalty > 0.0 && self.repetition_penalty <= 10.0,
            "greater than 0, at most 10",
        )?;
        check(
            "presence_penalty",
            self.presence_penalty,
            (-2.0..=2.0).contains(&self.presence_penalty),
            "-2 to 2",
        )?;
        check(
            "frequency_penalty",
            self.frequency_penalty,
            (-2.0..=2.0).contains(&self.frequency_penalty),
            "-2 to 2",
        )?;
        for &b in self.logit_bias.values() {
            check(
                "logit_bias",
                b,
                (-100.0..=100.0).contains(&b),
                "-100 to 100 per token",
            )?;
        }
        if self.top_logprobs > 20 {
            return Err(SamplingError::OutOfRange {
                name: "top_logprobs",
                value: self.top_logprobs.to_string(),
                allowed: "0 to 20",
            });
        }
        Ok(())
    }

    /// Whether this request is plain greedy decoding.
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }
}
