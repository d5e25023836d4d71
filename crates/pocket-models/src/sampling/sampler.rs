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
        let log_z = max + sum_exp(logits, max).ln() as f32;
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

    /// Temperature, top-k, top-p, min-p, then a draw from what is left. Linear in the vocabulary
    /// size unless top-p needs an ordering, which is then built only as far as the nucleus reaches.
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
            c.select_nth_unstable_by(k - 1, desc);
            c.truncate(k);
            c.sort_unstable_by(desc);
        }
        // softmax over the survivors (sums in f64)
        let max = c.iter().map(|x| x.1).fold(f32::NEG_INFINITY, f32::max);
        let mut items: Vec<(u32, f64)> = c
            .iter()
            .map(|&(i, l)| (i, f64::from(fast_exp(l - max))))
            .collect();
        let z: f64 = items.iter().map(|x| x.1).sum();
        items.iter_mut().for_each(|x| x.1 /= z);
        if p.top_p < 1.0 {
            let target = f64::from(p.top_p);
            let n = items.len();
            let mut k = 64.min(n);
            loop {
                if k < n {
                    items.select_nth_unstable_by(k - 1, desc_p);
                }
                items[..k].sort_unstable_by(desc_p);
                let mut cum = 0.0;
                let cut = items[..k].iter().position(|x| {
                    cum += x.1;
                    cum >= target
                });
                match cut {
                    Some(i) => {
                        items.truncate(i + 1);
                        break;
                    }
                    None if k == n => break,
                    None => k = (k * 4).min(n),
                }
            }
        }
        if p.min_p > 0.0 {
            // the best survivor has probability exp(0) / z
            let floor = f64::from(p.min_p) / z;
            items.retain(|x| x.1 >= floor);
        }
        let total: f64 = items.iter().map(|x| x.1).sum();
        let mut u = self.uniform() * total;
        for &(id, q) in &items {
            if u < q {
                return Ok(id);
            }
            u -= q;
        }
        items.last().map(|x| x.0).ok_or(SamplingError::NoCandidates)
    }
}

/// Best first by logit, lower id first on ties.
fn desc(a: &(u32, f32), b: &(u32, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// Best first by probability, lower id first on ties.
fn desc_p(a: &(u32, f64), b: &(u32, f64)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// `sum(e^(l - max))` over a row, in eight f32 lanes (vectorizable) combined in f64.
fn sum_exp(logits: &[f32], max: f32) -> f64 {
    let mut lanes = [0f32; 8];
    let chunks = logits.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (lane, &l) in lanes.iter_mut().zip(c) {
            *lane += fast_exp(l - max);
        }
    }
    let mut total: f64 = lanes.iter().map(|&x| f64::from(x)).sum();
    for &l in rest {
        total += f64::from(fast_exp(l - max));
    }
    total
}

/// `e^x` for `x <= 0` (relative error below 1e-6 down to -10, 1e-5 down to -87, where it stops at
/// about 1e-38), written so the compiler can vectorize it: the
/// sampler takes it over the whole vocabulary for every token.
#[inline]
fn fast_exp(x: f32) -> f32 {
    const ROUND: f32 = 12_582_912.0; // 1.5 * 2^23: adding and subtracting rounds to an integer
    let t = x.max(-87.0) * std::f32::consts::LOG2_E; // e^-87 is near f32's smallest normal
    let r = (t + ROUND) - ROUND;
    let f = t - r; // in [-0.5, 0.5]
                   // 2^f by its Taylor series to degree 6
    let p = 1.0
        + f * (std::f32::consts::LN_2
            + f * (0.240_226_5
                + f * (0.055_504_11
                    + f * (0.009_618_129 + f * (0.001_333_355_8 + f * 0.000_154_035_3)))));
    f32::from_bits(((r as i32 + 127) as u32) << 23) * p
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

#[cfg(test)]
mod tests {
    use super::fast_exp;

    #[test]
    fn fast_exp_is_accurate_and_never_garbage() {
        let mut x = -100.0f32;
        while x <= 0.0 {
            let (got, want) = (fast_exp(x), x.exp());
            if x > -87.0 {
                let tol = if x > -10.0 { 1e-6 } else { 1e-5 };
                assert!(((got - want) / want).abs() < tol, "x={x}: {got} vs {want}");
            } else {
                assert!((0.0..1e-37).contains(&got), "x={x}: {got}");
            }
            x += 0.0137;
        }
        assert_eq!(fast_exp(0.0), 1.0);
        assert!(fast_exp(-1e30) < 1e-37);
    }
}
