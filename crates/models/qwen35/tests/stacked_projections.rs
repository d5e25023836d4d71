//! Stacked Q/K/V (gated: `[query | gate]` rows first), gate/up, and the Gated DeltaNet's
//! `[q | k | v | z]` and `[b | a]` weights (`Qwen35Model::load_with_stacking`) against separate
//! ones, on every device (CUDA where present), for the BF16 and the FP8 block-scaled fixtures
//! (FP8 stacks its 128x128 tile scales along; its BF16 `b`/`a` stack as BF16). The CPU does not
//! stack by default, so this is where its stacked path meets the references: its logits must be
//! within `hf_parity.rs`'s tolerance (1e-3) of the separate path's and of transformers'. (A kernel
//! may sum a row in another order once the row count changes, so exact equality is not asked.)

#[path = "../../hf_parity_support.rs"]
mod parity;

use std::sync::Arc;

use parity::{cases, data, max_abs_diff, teacher_forced, Logits};
use pocket_formats::TensorStore;
use pocket_kernels::{DType, Device};
use pocket_layers::{KvCache, Model};
use pocket_model_qwen35::{LoadOptions, Qwen35Model};

const TOL: f32 = 1e-3;

/// Both prompts as one batch (prefill), then batched decode along the greedy tokens; the logits
/// per prompt and step.
fn run(name: &str, blocks: usize, linear: usize, dev: &Device, stack: bool) -> Vec<Logits> {
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
    teacher_forced(&mut model, &mut cache, dev, &cases(name))
}

fn check(name: &str, blocks: usize, linear: usize) {
    let cases = cases(name);
    for dev in Device::all_for_tests() {
        let separate = run(name, blocks, linear, &dev, false);
        let stacked = run(name, blocks, linear, &dev, true);
        for (i, c) in cases.iter().enumerate() {
            for (step, (s, f)) in separate[i].iter().zip(&stacked[i]).enumerate() {
                let (d, _) = max_abs_diff(s, f);
                assert!(
                    d <= TOL,
                    "{name} {} case {i} step {step}: stacked vs separate |Δ| {d}",
                    dev.name()
                );
                let (w, _) = max_abs_diff(f, &c.logits[step]);
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
