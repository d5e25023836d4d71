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
    /// The reference's own noise floor: its prompt logits as one batch vs token by token
    /// (`rel`, as `rel_diff`), and the leading greedy tokens those two runs share. Quantized
    /// models round activations to int8, so an ulp of accumulation-order difference can flip a
    /// rounding; the CPU differs from itself by this much.
    pub reference_noise_rel: f32,
    /// Leading greedy tokens the reference's batch and token-by-token runs share.
    pub reference_greedy_equal: usize,
    /// The reference's distance from exact arithmetic: its prompt logits against the same CPU
    /// with f32 activations (`Backend::set_exact_arithmetic`), over its largest |logit|. This is
    /// the int8-activation rounding error of the reference itself; a device that rounds its own
    /// activations (bit-identically quantized, but from differently accumulated inputs) can be as
    /// far from the exact forward, so it may differ from the reference by up to twice this.
    pub reference_exact_rel: f32,
    /// Where free-running greedy decoding first differed, if it did.
    pub split: Option<GreedySplit>,
}

/// The first free-running step at which the two devices chose different tokens. Both sides saw
/// the same history up to it, so its logits say how close the choice was: a split where the
/// reference's own top-2 margin is below the logit difference both devices show elsewhere is a
/// near-tie that rounding decides, not a wrong result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GreedySplit {
    /// Generated-token index of the split (equals `greedy_equal`).
    pub step: usize,
    /// The reference's token there and the device's.
    pub tokens: (u32, u32),
    /// The reference's preference for its token over the device's (its top-2 margin when the
    /// device's token is its runner-up), in logits.
    pub reference_margin: f32,
    /// The device's preference for its token over the reference's.
    pub device_margin: f32,
    /// The exact-arithmetic reference's (f32 activations, same history) preference for the
    /// reference's token over the device's: negative when exact arithmetic sides with the device.
    pub exact_margin: f32,
    /// Largest |a - b| over the step's logits.
    pub max_abs_diff: f32,
}

impl GreedySplit {
    /// The split at `step` from the reference's, the device's and the exact reference's logits
    /// of that step (same history on all three).
    fn at(step: usize, reference: &[f32], device: &[f32], exact: &[f32]) -> GreedySplit {
        let (ta, tb) = (
            argmax_margin(reference).0 as usize,
            argmax_margin(device).0 as usize,
        );
        GreedySplit {
            step,
            tokens: (ta as u32, tb as u32),
            reference_margin: reference[ta] - reference[tb],
            device_margin: device[tb] - device[ta],
            exact_margin: exact[ta] - exact[tb],
            max_abs_diff: max_abs(reference, device),
        }
    }
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
    /// Tolerance on `rel_diff`: met when `rel_diff` is within it, or within
    /// `noise_factor` times the reference's own noise floor.
    pub rel_tolerance: f32,
    /// Multiple of the reference's noise floor (the larger of `reference_noise_rel` and
    /// `reference_exact_rel`) also accepted for `rel_diff`.
    pub noise_factor: f32,
    /// Per-prompt results.
    pub prompts: Vec<PromptParity>,
    /// Whether every prompt met the tolerance (or the noise floor) and teacher-forced agreement,
    /// and decoded the same greedy tokens where the reference's own two runs do (with no
    /// teacher-forced mismatch, a free-running divergence can only start at a near-tie of the
    /// reference, and where the reference's batch and token-by-token runs already split, such a
    /// near-tie is within its own rounding noise).
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
        Side::open_with(store, kind, max_seq, false)
    }

    /// A side whose backend runs `exact` arithmetic (f32 activations) when asked.
    fn open_with(
        store: &Arc<TensorStore>,
        kind: DeviceKind,
        max_seq: usize,
        exact: bool,
    ) -> Result<Side> {
        let dev = Device::open(kind).map_err(err)?;
        dev.set_exact_arithmetic(exact);
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

/// The noise floor of one device: `prompt` run as one batch against the same prompt fed one
/// token at a time (mathematically equal; only the accumulation order and, through it, the int8
/// rounding of activations differ), each followed by `steps` free-running greedy tokens. Returns
/// (max |d| of the prompt's last logits, that over the batch side's largest |logit|, leading
/// greedy tokens equal).
fn noise(
    side: &mut Side,
    prompt: &[u32],
    steps: usize,
    max_seq: usize,
) -> Result<(f32, f32, usize)> {
    let whole = side.run(prompt, steps, None)?;
    let mut cache = side.cache(max_seq)?;
    let mut first = Vec::new();
    let mut stepwise = Vec::with_capacity(steps + 1);
    let mut next = 0u32;
    for i in 0..prompt.len() + steps {
        let t = if i < prompt.len() { prompt[i] } else { next };
        let plan = cache.plan(&[(0, &[t])]).map_err(err)?;
        let logits = side
            .dev
            .read_f32(side.model.forward(&plan, &mut cache).map_err(err)?)
            .map_err(err)?;
        if i + 1 >= prompt.len() {
            next = argmax_margin(&logits).0;
            stepwise.push(next);
            if i + 1 == prompt.len() {
                first = logits;
            }
        }
    }
    let d = max_abs(&whole[0], &first);
    let scale = whole[0].iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    let equal = whole
        .iter()
        .map(|l| argmax_margin(l).0)
        .zip(&stepwise)
        .take_while(|(a, b)| a == *b)
        .count()
        .min(steps);
    Ok((d, d / scale, equal))
}

/// [`noise`] of `device` for each prompt: (prompt length, max |d|, rel, greedy tokens equal).
pub fn check_self(
    model: &Path,
    device: DeviceKind,
    prompts: &[Vec<u32>],
    steps: usize,
) -> Result<Vec<(usize, f32, f32, usize)>> {
    let store = Arc::new(TensorStore::open(model).map_err(err)?);
    let max_prompt = prompts.iter().map(Vec::len).max().unwrap_or(1);
    let max_seq = (max_prompt + steps + 1).next_power_of_two().max(256);
    let mut side = Side::open(&store, device, max_seq)?;
    prompts
        .iter()
        .map(|p| {
            let (d, rel, eq) = noise(&mut side, p, steps, max_seq)?;
            Ok((p.len(), d, rel, eq))
        })
        .collect()
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
    noise_factor: f32,
    margin: f32,
) -> Result<ParityReport> {
    let store = Arc::new(TensorStore::open(model).map_err(err)?);
    let max_prompt = prompts.iter().map(Vec::len).max().unwrap_or(1);
    let max_seq = (max_prompt + steps + 1).next_power_of_two().max(256);
    let mut cpu = Side::open(&store, DeviceKind::Cpu, max_seq)?;
    let mut other = Side::open(&store, device, max_seq)?;
    let mut exact = Side::open_with(&store, DeviceKind::Cpu, max_seq, true)?;
    let mut results = Vec::new();
    for prompt in prompts {
        let a = cpu.run(prompt, steps, None)?;
        let exact_logits = exact.run(prompt, 0, None)?;
        let b = other.run(prompt, steps, None)?;
        let scale = a[0].iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
        let d0 = max_abs(&a[0], &b[0]);
        let exact_rel = max_abs(&a[0], &exact_logits[0]) / scale;
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
        let (_, noise_rel, ref_greedy) = noise(&mut cpu, prompt, steps, max_seq)?;
        let split = if greedy_equal < steps {
            let k = greedy_equal;
            let (la, lb) = (&a[k], &b[k]);
            // The exact reference along the same history (k tokens forced).
            let e = exact.run(prompt, k, Some(&greedy_a[..k]))?;
            Some(GreedySplit::at(k, la, lb, &e[k]))
        } else {
            None
        };
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
            reference_noise_rel: noise_rel,
            reference_greedy_equal: ref_greedy,
            reference_exact_rel: exact_rel,
            split,
        });
    }
    let pass = results.iter().all(|r| {
        let floor = r.reference_noise_rel.max(r.reference_exact_rel);
        (r.rel_diff <= rel_tolerance || r.rel_diff <= noise_factor * floor)
            && (r.greedy_equal == steps || r.reference_greedy_equal < steps)
            && r.forced_mismatches == 0
    });
    Ok(ParityReport {
        model: model.display().to_string(),
        reference: cpu.dev.name(),
        device: other.dev.name(),
        margin,
        rel_tolerance,
        noise_factor,
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

/// One weight's matmul (or the embedding lookup) on `device` against the CPU: the op-level
/// bisect of a whole-model parity failure.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OpParity {
    /// Tensor name (the first of its format and shape; `embedding:` for the lookup).
    pub name: String,
    /// Weight format.
    pub format: String,
    /// Output features.
    pub rows: usize,
    /// Input features.
    pub cols: usize,
    /// Activation rows (0 for the embedding).
    pub n: usize,
    /// Largest |a - b|.
    pub max_abs_diff: f32,
    /// That over the CPU's largest |value|.
    pub rel_diff: f32,
    /// Largest |CPU - exact| and |device - exact| over the CPU's largest |value|, exact being
    /// the f64 product of the dequantized weight and the activations as the CPU's int8 blocks
    /// round them: tells which side a difference comes from.
    pub rel_err_cpu_dev: (f32, f32),
}

/// The activations as the CPU's dot for `f` sees them (its int8 blocks, dequantized).
fn act_as_cpu(f: pocket_quant::QuantFormat, x: &[f32]) -> Vec<f32> {
    use pocket_quant::ActFormat;
    match f.activation_format() {
        ActFormat::Q8_0 | ActFormat::Q8_1 => {
            let mut b = Vec::new();
            pocket_quant::quantize_act_q8(x, &mut b);
            b.iter()
                .flat_map(|b| b.qs.map(|q| q as f32 * b.d))
                .collect()
        }
        ActFormat::Q8_K => {
            let mut b = Vec::new();
            pocket_quant::quantize_act_q8k(x, &mut b);
            b.iter()
                .flat_map(|b| b.qs.map(|q| q as f32 * b.d))
                .collect()
        }
        ActFormat::F32 => x.to_vec(),
    }
}

/// For each distinct (format, shape) of the model's 2-D GGML weights: `matmul` on `device` and
/// on the CPU over the same pseudo-random activations of `ns` rows, and the embedding rows of
/// `token_embd.weight` where present.
pub fn check_ops(model: &Path, device: DeviceKind, ns: &[usize]) -> Result<Vec<OpParity>> {
    let store = TensorStore::open(model).map_err(err)?;
    let cpu = Device::open(DeviceKind::Cpu).map_err(err)?;
    let dev = Device::open(device).map_err(err)?;
    let mut seen = std::collections::HashSet::new();
    let mut names: Vec<String> = store.names().map(str::to_string).collect();
    names.sort();
    let mut out = Vec::new();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    };
    for name in names {
        let v = store.tensor(&name).map_err(err)?;
        let pocket_formats::TensorFormat::Ggml(t) = v.format else {
            continue;
        };
        if v.shape.len() != 2 || !seen.insert((format!("{t:?}"), v.shape.to_vec())) {
            continue;
        }
        let (rows, cols) = (v.shape[0], v.shape[1]);
        let f = pocket_quant::QuantFormat::Ggml(t);
        let upload = |d: &Device| {
            d.upload_weight(
                f,
                rows,
                cols,
                pocket_kernels::HostBytes::from_vec(v.data.to_vec()),
                None,
                None,
            )
            .map_err(err)
        };
        let (wa, wb) = (upload(&cpu)?, upload(&dev)?);
        let mut wf = vec![0f32; rows * cols];
        pocket_quant::dequantize(f, v.data, &mut wf).map_err(err)?;
        for &n in ns {
            // Activations like a normed hidden state: mostly O(1), a few larger outliers.
            let x: Vec<f32> = (0..n * cols)
                .map(|i| rnd() * if i % 97 == 0 { 8.0 } else { 1.0 })
                .collect();
            let run = |d: &Device, w: &pocket_kernels::Weight| -> Result<Vec<f32>> {
                let xt = d.upload_f32(&x, &[n, cols]).map_err(err)?;
                let mut o = d.alloc(DType::F32, &[n, rows]).map_err(err)?;
                d.matmul(&xt, w, &mut o).map_err(err)?;
                d.read_f32(&o).map_err(err)
            };
            let (a, b) = (run(&cpu, &wa)?, run(&dev, &wb)?);
            let d = max_abs(&a, &b);
            let scale = a.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
            let xq = if n * cols % 256 == 0
                || !matches!(f.activation_format(), pocket_quant::ActFormat::Q8_K)
            {
                act_as_cpu(f, &x)
            } else {
                x.clone()
            };
            let exact: Vec<f32> = (0..n * rows)
                .map(|k| {
                    let (j, r) = (k / rows, k % rows);
                    let xr = &xq[j * cols..(j + 1) * cols];
                    let wr = &wf[r * cols..(r + 1) * cols];
                    xr.iter()
                        .zip(wr)
                        .map(|(a, b)| *a as f64 * *b as f64)
                        .sum::<f64>() as f32
                })
                .collect();
            out.push(OpParity {
                name: name.clone(),
                format: format!("{t:?}"),
                rows,
                cols,
                n,
                max_abs_diff: d,
                rel_diff: d / scale,
                rel_err_cpu_dev: (max_abs(&a, &exact) / scale, max_abs(&b, &exact) / scale),
            });
        }
        if name == "token_embd.weight" {
            let ids: Vec<u32> = (0..64).map(|i| (i * 7919 % rows) as u32).collect();
            let look = |d: &Device, w: &pocket_kernels::Weight| -> Result<Vec<f32>> {
                let it = d.upload_u32(&ids, &[ids.len()]).map_err(err)?;
                let mut o = d.alloc(DType::F32, &[ids.len(), cols]).map_err(err)?;
                d.embedding(w, &it, &mut o).map_err(err)?;
                d.read_f32(&o).map_err(err)
            };
            let (a, b) = (look(&cpu, &wa)?, look(&dev, &wb)?);
            let d = max_abs(&a, &b);
            let scale = a.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
            out.push(OpParity {
                name: format!("embedding:{name}"),
                format: format!("{t:?}"),
                rows,
                cols,
                n: 0,
                max_abs_diff: d,
                rel_diff: d / scale,
                rel_err_cpu_dev: (0.0, 0.0),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::GreedySplit;

    /// A near-tie: the reference picks token 2 by 0.01, the device token 1 by 0.02, exact
    /// arithmetic sides with the device by 0.005; the step's largest difference is on token 1.
    #[test]
    fn a_split_reports_both_preferences_and_the_exact_one() {
        let reference = [0.0, 1.00, 1.01, -1.0];
        let device = [0.0, 1.03, 1.01, -1.0];
        let exact = [0.0, 1.010, 1.005, -1.0];
        let s = GreedySplit::at(5, &reference, &device, &exact);
        assert_eq!((s.step, s.tokens), (5, (2, 1)));
        assert!((s.reference_margin - 0.01).abs() < 1e-6, "{s:?}");
        assert!((s.device_margin - 0.02).abs() < 1e-6, "{s:?}");
        assert!((s.exact_margin + 0.005).abs() < 1e-6, "{s:?}");
        assert!((s.max_abs_diff - 0.03).abs() < 1e-6, "{s:?}");
    }
}
