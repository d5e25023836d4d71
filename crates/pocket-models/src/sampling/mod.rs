//! Sampling: turning a row of logits into the next token (greedy, temperature, top-k, top-p,
//! min-p, penalties, logit bias, seeded randomness, log-probabilities) and deciding when to stop
//! (EOS/EOT ids, stop strings split across tokens, held-back text while streaming).
//!
//! ```
//! use pocket_models::sampling::{Sampler, SamplingParams};
//! let params = SamplingParams { temperature: 0.0, top_logprobs: 2, ..Default::default() };
//! let mut sampler = Sampler::new(params, 42)?;
//! let mut logits = vec![0.5, 2.0, -1.0, 1.0];
//! let tok = sampler.sample(&mut logits, &[])?;
//! assert_eq!(tok.id, 1);
//! assert_eq!(tok.top_logprobs[0].0, 1);
//! assert_eq!(tok.top_logprobs[1].0, 3);
//! # Ok::<(), pocket_models::sampling::SamplingError>(())
//! ```

pub mod device;
mod params;
mod sampler;
mod stop;
mod text;

pub use device::device_row;
pub use params::SamplingParams;
pub use sampler::{SampledToken, Sampler};
pub use stop::{StopChecker, StopReason, StopStep};
pub use text::TextStream;

/// Errors from sampling parameters or from sampling itself.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SamplingError {
    /// A parameter is outside its allowed range.
    #[error("{name} = {value} is out of range: {allowed}")]
    OutOfRange {
        /// Parameter name as in the request.
        name: &'static str,
        /// The value given.
        value: String,
        /// What is allowed.
        allowed: &'static str,
    },
    /// A logit-bias entry names a token outside the vocabulary.
    #[error("logit_bias names token {id}, but the vocabulary has {vocab} tokens")]
    BiasTokenOutOfRange {
        /// The token id.
        id: u32,
        /// Vocabulary size (length of the logits row).
        vocab: usize,
    },
    /// The logits row is empty or holds no finite value.
    #[error("logits row has no finite value to sample from")]
    NoCandidates,
}
