//! Device parity: the same checkpoint on two devices (CPU and CUDA), compared on prompt logits,
//! free-running greedy decoding, and top-1 under teacher forcing.
//!
//! Real checkpoints cannot travel to the GPU machine, so GPU correctness of whole models is shown
//! here: a synthetic model of a real checkpoint's shape and formats runs on both devices from the
//! same file, and the CPU side is the one proven against transformers and llama.cpp.

use std::path::Path;
use std::sync::Arc;

use pocket_formats::TensorStore;
use pocket_kernels::{DType, Device, DeviceKind};
use pocket_models::model::{KvCache, Model};
use pocket_models::registry::{load_model, LoadOptions};

use crate::error::{BenchError, Result};

/// What one prompt showed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PromptParity {
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
    /// Largest |a - b| over the prompt's last-token logits.
    pub max_abs_diff: f32,
    /// That difference over the largest |logit| of the reference device.
    pub rel_diff: f32,
    /// Leading greedy tokens equal on both devices (free-running).
    pub greedy_equal: usize,
    /// Tokens decoded.
    pub greedy_len: usize,
    /// Teacher-forced steps (along the reference's tokens) whose top-1 differed although the
    /// reference's top-2 margin exceeded `margin`.
    pub forced_mismatches: usize,
    /// Largest |a - b| over every teacher-forced step's logits.
    pub forced_max_abs_diff: f32,
}

/// Parity of one model over several prompts.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ParityReport {
    /// Model file.
    pub model: String,
    /// Reference device.
    pub reference: String,
    /// Device under test.
    pub device: String,
    /// Margin threshold used for teacher-forced comparisons.
    pub margin: f32,
    /// Tolerance on `rel_diff`.
    pub rel_tolerance: f32,
    /// Per-prompt results.
    pub prompts: Vec<PromptParity>,
    /// Whether every prompt met the tolerance, greedy equality and teacher-forced agreement.
    pub pass: bool,
}

fn err(e: impl std::fmt::Display) -> BenchError {
    BenchError::Model(e.to_string())
}

fn argmax_margin(row: &[f32]) -> (u32, f32) {
    let (mut best, mut second) = (0usize, f32::NEG_INFINITY);
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            second = row[best];
            best = i;
        } else if i != best && v > second {
            second = v;
        }
    }
    (best as u32, row[best] - second)
}

struct Side {
    dev: Device,
    model: Box<dyn Model>,
}

impl Side {
    fn open(store: &Arc<TensorStore>, kind: DeviceKind, max_seq: usize) -> Result<Side> {
        let dev = Device::open(kind).map_err(err)?;
        let model = load_model(
            store.clone(),
            &dev,
            LoadOptions {
                max_seq_len: max_seq,
            },
        )
        .map_err(err)?;
        Ok(Side { dev, model })
    }

    fn cache(&self, max_seq: usize) -> Result<KvCache> {
        let cfg = self
            .model
            .info()
            .kv_cache_config(max_seq, max_seq, DType::F32);
        KvCache::new(&self.dev, cfg).map_err(err)
    }

    /// Logits after `prompt`, then after each of `forced` fed one at a time; `None` in `forced`
    /// means "feed this side's own argmax" (free-running greedy).
    fn run(
        &mut self,
        prompt: &[u32],
        steps: usize,
        forced: Option<&[u32]>,
    ) -> Result<Vec<Vec<f32>>> {
        let max_seq = prompt.len() + steps + 1;
        let mut cache = self.cache(max_seq.next_power_of_two().max(256))?;
        let mut out = Vec::with_capacity(steps + 1);
        let mut input = prompt.to_vec();
        for step in 0..=steps {
            let plan = cache.plan(&[(0, &input)]).map_err(err)?;
            let logits = self
                .dev
                .read_f32(self.model.forward(&plan, &mut cache).map_err(err)?)
                .map_err(err)?;
            let next = match forced {
                Some(f) if step < f.len() => f[step],
                _ => argmax_margin(&logits).0,
            };
            out.push(logits);
            input = vec![next];
        }
        Ok(out)
    }
}

fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            if x.is_finite() && y.is_finite() {
                (x - y).abs()
            } else {
                f32::INFINITY
            }
        })
        .fold(0.0, f32::max)
}

/// Compares `model` on `device` against the CPU over `prompts`, decoding `steps` greedy tokens.
pub fn check(
    model: &Path,
    device: DeviceKind,
    prompts: &[Vec<u32>],
    steps: usize,
    rel_tolerance: f32,
    margin: f32,
) -> Result<ParityReport> {
    let store = Arc::new(TensorStore::open(model).map_err(err)?);
    let max_prompt = prompts.iter().map(Vec::len).max().unwrap_or(1);
    let max_seq = (max_prompt + steps + 1).next_power_of_two().max(256);
    let mut cpu = Side::open(&store, DeviceKind::Cpu, max_seq)?;
    let mut other = Side::open(&store, device, max_seq)?;
    let mut results = Vec::new();
    for prompt in prompts {
        let a = cpu.run(prompt, steps, None)?;
        let b = other.run(prompt, steps, None)?;
        let scale = a[0].iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
        let d0 = max_abs(&a[0], &b[0]);
        let greedy_a: Vec<u32> = a.iter().map(|l| argmax_margin(l).0).collect();
        let greedy_b: Vec<u32> = b.iter().map(|l| argmax_margin(l).0).collect();
        let greedy_equal = greedy_a
            .iter()
            .zip(&greedy_b)
            .take_while(|(x, y)| x == y)
            .count();
        // Teacher forcing along the CPU's tokens: every step sees the same history.
        let forced = &greedy_a[..steps];
        let bf = other.run(prompt, steps, Some(forced))?;
        let mut mismatches = 0;
        let mut forced_diff = 0f32;
        for (la, lb) in a.iter().zip(&bf) {
            forced_diff = forced_diff.max(max_abs(la, lb));
            let (ta, m) = argmax_margin(la);
            if m > margin && argmax_margin(lb).0 != ta {
                mismatches += 1;
            }
        }
        results.push(PromptParity {
            prompt_tokens: prompt.len(),
            max_abs_diff: d0,
            rel_diff: d0 / scale,
            greedy_equal: greedy_equal.min(steps),
            greedy_len: steps,
            forced_mismatches: mismatches,
            forced_max_abs_diff: forced_diff,
        });
    }
    let pass = results.iter().all(|r| {
        r.rel_diff <= rel_tolerance && r.greedy_equal == steps && r.forced_mismatches == 0
    });
    Ok(ParityReport {
        model: model.display().to_string(),
        reference: cpu.dev.name(),
        device: other.dev.name(),
        margin,
        rel_tolerance,
        prompts: results,
        pass,
    })
}

/// Deterministic prompts of the given lengths over token ids `[offset, offset + span)`.
pub fn prompts(lengths: &[usize], vocab: usize) -> Vec<Vec<u32>> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let span = vocab.clamp(2, 32_000) as u64;
    lengths
        .iter()
        .map(|&n| {
            (0..n)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (100 + state % (span - 100).max(1)) as u32
                })
                .collect()
        })
        .collect()
}
