//! The model-independent part of the transformers parity tests of the model crates (llama,
//! qwen35): reading a fixture (`tests/data/<fixture>/`: `config.json`, the checkpoint and the
//! `reference.json` of prompts, greedy tokens and logits that `scripts/hf_parity.py` /
//! `scripts/hf_parity_qwen35.py` write), running a model teacher-forced along the reference's
//! tokens, and the max |Δlogit| comparison with its report. Each model's checkpoint rewriting,
//! loading and tolerances stay in its own tests.
//!
//! Included by the test binaries with `#[path = ".../hf_parity_support.rs"] mod ...;` rather than
//! exported by a crate, so that test-only code adds no public API; `env!("CARGO_MANIFEST_DIR")`
//! is therefore the including crate's directory.

// Each including test binary uses a subset.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use pocket_formats::{TensorFormat, TensorStore};
use pocket_kernels::Device;
use pocket_layers::{KvCache, Model};
use pocket_quant::QuantFormat;
use serde_json::Value;

/// The directory of a fixture of the including crate.
pub fn data(fixture: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(fixture)
}

/// The fixture's `config.json`.
pub fn config(fixture: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(data(fixture).join("config.json")).unwrap())
        .unwrap()
}

/// The fixture's `reference.json`.
pub fn reference(fixture: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(data(fixture).join("reference.json")).unwrap())
        .unwrap()
}

/// Per step, per vocabulary entry: one prompt's logits.
pub type Logits = Vec<Vec<f32>>;

/// One prompt of the reference: ids, greedy tokens and per-step logits.
pub struct Case {
    /// Prompt ids.
    pub prompt: Vec<u32>,
    /// transformers' greedy continuation (our runs are teacher-forced along it).
    pub tokens: Vec<u32>,
    /// Logits of the last prompt token and of each decode step (the fixture's weights).
    pub logits: Logits,
    /// The same for the model whose matrices went through gguf-py's Q8_0 round trip (only the
    /// llama fixtures have them).
    pub logits_q8_0: Option<Logits>,
}

/// The reference's prompts.
pub fn cases(fixture: &str) -> Vec<Case> {
    let v = reference(fixture);
    let ids = |x: &Value| {
        x.as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap() as u32)
            .collect()
    };
    let rows = |x: &Value| -> Logits {
        x.as_array()
            .unwrap()
            .iter()
            .map(|r| {
                r.as_array()
                    .unwrap()
                    .iter()
                    .map(|f| f.as_f64().unwrap() as f32)
                    .collect()
            })
            .collect()
    };
    v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            prompt: ids(&c["prompt"]),
            tokens: ids(&c["tokens"]),
            logits: rows(&c["logits"]),
            logits_q8_0: c.get("logits_q8_0").map(rows),
        })
        .collect()
}

/// The fixture's tensors as (name, shape, f32 values).
pub fn hf_tensors(fixture: &str) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let store = TensorStore::open(data(fixture)).unwrap();
    store
        .weights()
        .map(|t| {
            let n: usize = t.shape.iter().product();
            let mut out = vec![0f32; n];
            let TensorFormat::Ggml(g) = t.format else {
                panic!("{}: {:?}", t.name, t.format)
            };
            pocket_quant::dequantize(QuantFormat::Ggml(g), t.data, &mut out).unwrap();
            (t.name.to_string(), t.shape.to_vec(), out)
        })
        .collect()
}

/// Runs `cases`' prompts as one batch (a mixed prefill), then the decode steps batched and
/// teacher-forced along the reference's tokens, on a freshly loaded `model` and `cache`; returns
/// each prompt's logits per step.
pub fn teacher_forced<M: Model + ?Sized>(
    model: &mut M,
    cache: &mut KvCache,
    dev: &Device,
    cases: &[Case],
) -> Vec<Logits> {
    let vocab = model.info().vocab_size;
    let mut out = vec![Vec::new(); cases.len()];
    for step in 0..=cases[0].tokens.len() {
        let inputs: Vec<Vec<u32>> = cases
            .iter()
            .map(|c| match step {
                0 => c.prompt.clone(),
                _ => vec![c.tokens[step - 1]],
            })
            .collect();
        let entries: Vec<(u64, &[u32])> = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| (i as u64, t.as_slice()))
            .collect();
        let plan = cache.plan(&entries).unwrap();
        let got = dev.read_f32(model.forward(&plan, cache).unwrap()).unwrap();
        for (i, o) in out.iter_mut().enumerate() {
            o.push(got[i * vocab..(i + 1) * vocab].to_vec());
        }
    }
    out
}

/// Max |got - want| and where (a NaN counts as the worst).
pub fn max_abs_diff(got: &[f32], want: &[f32]) -> (f32, usize) {
    got.iter()
        .zip(want)
        .enumerate()
        .map(|(j, (a, b))| ((a - b).abs(), j))
        .fold(
            (0f32, 0),
            |m, (d, j)| if d > m.0 || d.is_nan() { (d, j) } else { m },
        )
}

/// The index of the largest logit (the first of equals).
pub fn argmax(v: &[f32]) -> usize {
    v.iter()
        .enumerate()
        .fold(0, |b, (j, x)| if *x > v[b] { j } else { b })
}

/// Max minus min of one step's logits.
pub fn logit_range(want: &[f32]) -> f32 {
    let (lo, hi) = want
        .iter()
        .fold((f32::MAX, f32::MIN), |(l, h), &v| (l.min(v), h.max(v)));
    hi - lo
}

/// Checks one prompt's logits at one step: max |Δ| within `tol`, and the greedy token wherever
/// the reference's top-2 margin exceeds twice the tolerance (below that, rounding may swap them).
pub fn check_row(what: &str, got: &[f32], want: &[f32], tol: f32) {
    let (worst, at) = max_abs_diff(got, want);
    if std::env::var("POCKET_PARITY_VERBOSE").is_ok() {
        eprintln!("{what}: max |Δ| {worst} (tolerance {tol})");
    }
    assert!(
        worst <= tol,
        "{what}: |Δ| {worst} at token {at} (tolerance {tol})"
    );
    let mut sorted: Vec<f32> = want.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    if sorted[0] - sorted[1] > 2.0 * tol {
        assert_eq!(argmax(got), argmax(want), "{what}: greedy token");
    }
}

/// [`check_row`] for every prompt and step of `got` against `want`, with the tolerance
/// `tol(want_row)` of each step.
pub fn compare(what: &str, got: &[Logits], want: &[Logits], tol: &dyn Fn(&[f32]) -> f32) {
    assert_eq!(got.len(), want.len(), "{what}: prompts");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len(), "{what}: steps of case {i}");
        for (step, (row, want)) in g.iter().zip(w).enumerate() {
            check_row(
                &format!("{what}: case {i} step {step}"),
                row,
                want,
                tol(want),
            );
        }
    }
}
