//! Stacked Q/K/V (gated: `[query | gate]` rows first), gate/up, and the Gated DeltaNet's
//! `[q | k | v | z]` and `[b | a]` weights (`Qwen35Model::load_with_stacking`) against separate
//! ones, on every device (CUDA where present), for the BF16 and the FP8 block-scaled fixtures
//! (FP8 stacks its 128x128 tile scales along; its BF16 `b`/`a` stack as BF16). The CPU does not
//! stack by default, so this is where its stacked path meets the references: its logits must be
//! within `hf_parity.rs`'s tolerance (1e-3) of the separate path's and of transformers'. (A kernel
//! may sum a row in another order once the row count changes, so exact equality is not asked.)

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pocket_formats::TensorStore;
use pocket_kernels::{DType, Device};
use pocket_layers::{KvCache, Model};
use pocket_model_qwen35::{LoadOptions, Qwen35Model};
use serde_json::Value;

const TOL: f32 = 1e-3;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// Per prompt: (prompt ids, greedy tokens, per-step logits) of the reference.
type Case = (Vec<u32>, Vec<u32>, Vec<Vec<f32>>);

fn cases(name: &str) -> Vec<Case> {
    let text = std::fs::read_to_string(data(name).join("reference.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let ids = |x: &Value| -> Vec<u32> {
        x.as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap() as u32)
            .collect()
    };
    let floats = |r: &Value| -> Vec<f32> {
        r.as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_f64().unwrap() as f32)
            .collect()
    };
    v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let logits = c["logits"].as_array().unwrap().iter().map(floats).collect();
            (ids(&c["prompt"]), ids(&c["tokens"]), logits)
        })
        .collect()
}

/// Both prompts as one batch (prefill), then batched decode along the greedy tokens; the logits
/// per step, all prompts concatenated.
fn run(name: &str, blocks: usize, linear: usize, dev: &Device, stack: bool) -> Vec<Vec<f32>> {
    // f32 prefill on every backend, as in hf_parity: the 1e-3 bounds are f32 rounding.
    dev.set_exact_prefill(true);
    let store = Arc::new(TensorStore::open(data(name)).unwrap());
    let opts = LoadOptions {
        max_seq_len: 256,
        max_seqs: 4,
    };
    let mut model = Qwen35Model::load_with_stacking(store, dev, opts, stack).unwrap();
    // Both fixtures: 2 full-attention layers among `blocks`, every part stackable.
    let want = if stack { (2, blocks) } else { (0, 0) };
    assert_eq!(model.stacked_projections(), want, "{name}: stacked layers");
    // ... and `linear` Gated DeltaNet layers, both of whose pairs stack.
    let want = if stack { (linear, linear) } else { (0, 0) };
    assert_eq!(
        model.stacked_deltanet_projections(),
        want,
        "{name}: stacked deltanet layers"
    );
    let cfg = model.info().kv_cache_config(1024, 256, DType::F32);
    let mut cache = KvCache::new(dev, cfg).unwrap();
    let cases = cases(name);
    let mut out = Vec::new();
    for step in 0..=cases[0].1.len() {
        let inputs: Vec<Vec<u32>> = cases
            .iter()
            .map(|c| match step {
                0 => c.0.clone(),
                _ => vec![c.1[step - 1]],
            })
            .collect();
        let entries: Vec<(u64, &[u32])> = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| (i as u64, t.as_slice()))
            .collect();
        let plan = cache.plan(&entries).unwrap();
        out.push(
            dev.read_f32(model.forward(&plan, &mut cache).unwrap())
                .unwrap(),
        );
    }
    out
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, |m, d| if d > m || d.is_nan() { d } else { m })
}

fn check(name: &str, blocks: usize, linear: usize) {
    let cases = cases(name);
    for dev in Device::all_for_tests() {
        let separate = run(name, blocks, linear, &dev, false);
        let stacked = run(name, blocks, linear, &dev, true);
        for (step, (s, f)) in separate.iter().zip(&stacked).enumerate() {
            let d = max_diff(s, f);
            assert!(
                d <= TOL,
                "{name} {} step {step}: stacked vs separate |Δ| {d}",
                dev.name()
            );
            let vocab = f.len() / cases.len();
            for (i, c) in cases.iter().enumerate() {
                let got = &f[i * vocab..(i + 1) * vocab];
                let w = max_diff(got, &c.2[step]);
                assert!(
                    w <= TOL,
                    "{name} {} case {i} step {step}: stacked vs transformers |Δ| {w}",
                    dev.name()
                );
            }
        }
    }
}

#[test]
fn stacked_bf16_matches_separate_and_transformers() {
    check("bf16", 6, 4);
}

#[test]
fn stacked_fp8_matches_separate_and_transformers() {
    check("fp8", 4, 2);
}
