//! The sampler: logits in, one token (with log-probabilities) out.
//!
//! Order of operations: logit bias, penalties (over the history window), then log-probabilities
//! are taken from that processed distribution (before temperature and truncation); then greedy,
//! or temperature, top-k, top-p, min-p, and a seeded draw.

use std::collections::HashMap;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{SamplingError, SamplingParams};

/// One sampled token.
#[derive(Debug, Clone, PartialEq)]
pub struct SampledToken {
    /// The token id.
    pub id: u32,
    /// Natural-log probability of `id` under the processed distribution.
    pub logprob: f32,
    /// The most likely tokens and their log-probabilities, best first (`top_logprobs` of them).
    pub top_logprobs: Vec<(u32, f32)>,
}

/// A seeded sampler for one request.
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    rng: ChaCha8Rng,
}

/// Sorts (id, logit) best first; ties go to the lower id so results are deterministic.
fn sort_desc(c: &mut [(u32, f32)]) {
    c.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
}

impl Sampler {
    /// Validates `params` and seeds the random stream (`params.seed`, if set, wins over `seed`).
    pub fn new(params: SamplingParams, seed: u64) -> Result<Self, SamplingError> {
        params.validate()?;
        let rng = ChaCha8Rng::seed_from_u64(params.seed.unwrap_or(seed));
        Ok(Self { params, rng })
    }

    /// The parameters in use.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// A uniform draw in [0, 1).
    fn uniform(&mut self) -> f64 {
        (self.rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Applies bias and penalties to `logits` in place, then picks a token. `history` is every
    /// token of the sequence so far (prompt and generated), oldest first.
    pub fn sample(
        &mut self,
        logits: &mut [f32],
        history: &[u32],
    ) -> Result<SampledToken, SamplingError> {
        let n = logits.len();
        if n == 0 {
            return Err(SamplingError::NoCandidates);
        }
        for (&id, &b) in &self.params.logit_bias {
            let slot = logits
                .get_mut(id as usize)
                .ok_or(SamplingError::BiasTokenOutOfRange { id, vocab: n })?;
            *slot += b;
        }
        self.apply_penalties(logits, history);

        // log-softmax of the processed logits, for the reported log-probabilities
        let max = logits
            .iter()
            .copied()
            .filter(|x| !x.is_nan())
            .fold(f32::NEG_INFINITY, f32::max);
        if !max.is_finite() {
            return Err(SamplingError::NoCandidates);
        }
        let log_z = max
            + logits
                .iter()
                .map(|&l| {
                    if l.is_nan() {
                        0.0
                    } else {
                        ((l - max) as f64).exp()
                    }
                })
                .sum::<f64>()
                .ln() as f32;
        let logprob = |l: f32| l - log_z;

        let id = if self.params.is_greedy() {
            argmax(logits)
        } else {
            self.draw(logits)?
        };
        let top_logprobs = if self.params.top_logprobs > 0 {
            let k = self.params.top_logprobs.min(n);
            let mut c: Vec<(u32, f32)> = logits
                .iter()
                .enumerate()
                .filter(|(_, l)| !l.is_nan())
                .map(|(i, &l)| (i as u32, l))
                .collect();
            if c.len() > k {
                c.select_nth_unstable_by(k - 1, |a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                c.truncate(k);
            }
            sort_desc(&mut c);
            c.into_iter().map(|(i, l)| (i, logprob(l))).collect()
        } else {
            Vec::new()
        };
        Ok(SampledToken {
            id,
            logprob: logprob(logits[id as usize]),
            top_logprobs,
        })
    }

    fn apply_penalties(&self, logits: &mut [f32], history: &[u32]) {
        let p = &self.params;
        if p.repetition_penalty == 1.0 && p.presence_penalty == 0.0 && p.frequency_penalty == 0.0 {
            return;
        }
        let window = match p.penalty_last_n {
            Some(last) => &history[history.len().saturating_sub(last)..],
            None => history,
        };
        let mut counts: HashMap<u32, u32> = HashMap::new();
        for &t in window {
            *counts.entry(t).or_default() += 1;
        }
        for (&t, &c) in &counts {
            let Some(l) = logits.get_mut(t as usize) else {
                continue;
            };
            if p.repetition_penalty != 1.0 {
                *l = if *l > 0.0 {
                    *l / p.repetition_penalty
                } else {
                    *l * p.repetition_penalty
                };
            }
            *l -= c as f32 * p.frequency_penalty + p.presence_penalty;
        }
    }

    /// Temperature, top-k, top-p, min-p, then a draw from what is left.
    fn draw(&mut self, logits: &[f32]) -> Result<u32, SamplingError> {
        let p = &self.params;
        let inv_t = 1.0 / p.temperature;
        let mut c: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .filter(|(_, l)| l.is_finite())
            .map(|(i, &l)| (i as u32, l * inv_t))
            .collect();
        if c.is_empty() {
            return Err(SamplingError::NoCandidates);
        }
        let k = p.top_k as usize;
        if k > 0 && k < c.len() {
            c.select_nth_unstable_by(k - 1, |a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            c.truncate(k);
        }
        sort_desc(&mut c);
        // softmax over the survivors (in f64 for stable sums)
        let max = c[0].1;
        let mut probs: Vec<f64> = c.iter().map(|&(_, l)| ((l - max) as f64).exp()).collect();
        let z: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|x| *x /= z);
        let mut keep = probs.len();
        if p.top_p < 1.0 {
            let mut cum = 0.0;
            for (i, &q) in probs.iter().enumerate() {
                cum += q;
                if cum >= p.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
        }
        if p.min_p > 0.0 {
            let floor = probs[0] * p.min_p as f64;
            keep = keep.min(probs.iter().take_while(|&&q| q >= floor).count().max(1));
        }
        let total: f64 = probs[..keep].iter().sum();
        let mut u = self.uniform() * total;
        for (i, &q) in probs[..keep].iter().enumerate() {
            if u < q {
                return Ok(c[i].0);
            }
            u -= q;
        }
        Ok(c[keep - 1].0)
    }
}

/// Index of the largest finite logit (lowest id on ties).
fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut best_v = f32::NEG_INFINITY;
    for (i, &l) in logits.iter().enumerate() {
        if l > best_v {
            best = i;
            best_v = l;
        }
    }
    best as u32
}
