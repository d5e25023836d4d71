//! The per-row inputs of the device sampler (`Backend::sample_rows`, kernels/sample.cu).

use super::SamplingParams;

/// A row's `[temperature, top_k, top_p, min_p]` and `[seed lo, seed hi, counter lo, counter hi]`
/// for the device sampler, or `None` when the request needs the host sampler (logit bias,
/// repetition / presence / frequency penalties, or top log-probabilities).
///
/// The seed is the request's seed, else `default_seed` (the sequence id, as the host sampler
/// uses); `counter` is how many tokens the sequence has drawn, so a seed gives one token stream
/// whatever else shares the batch.
pub fn device_row(
    params: &SamplingParams,
    default_seed: u64,
    counter: u64,
) -> Option<([f32; 4], [u32; 4])> {
    let host_only = !params.logit_bias.is_empty()
        || params.repetition_penalty != 1.0
        || params.presence_penalty != 0.0
        || params.frequency_penalty != 0.0
        || params.top_logprobs > 0;
    if host_only {
        return None;
    }
    let seed = params.seed.unwrap_or(default_seed);
    Some((
        [
            params.temperature,
            params.top_k as f32,
            params.top_p,
            params.min_p,
        ],
        [
            seed as u32,
            (seed >> 32) as u32,
            counter as u32,
            (counter >> 32) as u32,
        ],
    ))
}
