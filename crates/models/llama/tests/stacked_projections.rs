//! Stacked Q/K/V and gate/up weights (`LlamaModel::load_with_stacking`) against separate ones, on
//! every device: the fixtures of `hf_parity.rs` (Llama; Qwen2 with QKV biases, which must stack
//! along; Qwen3 with QK-norm) as F32 safetensors and as Q8_0 / Q4_K GGUF. The CPU does not stack
//! by default, so this is where its stacked path meets the references. Stacking only changes
//! which kernel call computes a row; a kernel may then sum in another order (the CPU's tiles
//! depend on the row count), and int8 activations can round the other way after that, so the
//! bound is `hf_parity.rs`'s: 1e-3 for F32 (which must also match transformers within 1e-3),
//! 3% of the step's logit range for quantized weights, with the greedy token kept wherever the
//! margin exceeds twice that. (On these fixtures the CPU's results are in fact identical.)

mod support;

use std::path::Path;
use std::sync::Arc;

use pocket_formats::{GgmlType, TensorStore};
use pocket_kernels::{DType, Device};
use pocket_layers::{KvCache, Model};
use pocket_model_llama::{LlamaModel, LoadOptions};
use support::{
    cases, compare, logit_range, teacher_forced, write_f32_checkpoint, write_gguf, Logits,
};

/// The fixture's prompts as one batch (prefill, then teacher-forced decode), per prompt and step.
fn run(path: &Path, fixture: &str, dev: &Device, stack: bool) -> Vec<Logits> {
    let cases = cases(fixture);
    let store = Arc::new(TensorStore::open(path).unwrap());
    let opts = LoadOptions { max_seq_len: 256 };
    let mut model = LlamaModel::load_with_stacking(store, dev, opts, stack).unwrap();
    let layers = model.info().num_layers;
    let want = if stack { (layers, layers) } else { (0, 0) };
    assert_eq!(
        model.stacked_projections(),
        want,
        "stacked layers (stack {stack})"
    );
    let cfg = model.info().kv_cache_config(1024, 256, DType::F32);
    let mut cache = KvCache::new(dev, cfg).unwrap();
    teacher_forced(&mut model, &mut cache, dev, &cases)
}

/// Largest |Δ| between two runs.
fn max_diff(a: &[Logits], b: &[Logits]) -> f32 {
    a.iter()
        .flatten()
        .flatten()
        .zip(b.iter().flatten().flatten())
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, |m, d| if d > m || d.is_nan() { d } else { m })
}

/// 3% of a step's logit range: `hf_parity.rs`'s bound for int8-rounded activations.
fn q8_tol(want: &[f32]) -> f32 {
    0.03 * logit_range(want)
}

fn check(path: &Path, fixture: &str, what: &str) {
    for dev in Device::all_for_tests() {
        let separate = run(path, fixture, &dev, false);
        let stacked = run(path, fixture, &dev, true);
        let d = max_diff(&separate, &stacked);
        eprintln!(
            "{fixture} {what} {}: stacked vs separate max |Δ| {d}",
            dev.name()
        );
        let name = format!("{fixture} stacked vs separate {what} {}", dev.name());
        if what == "f32" {
            let tol = |_: &[f32]| 1e-3;
            compare(&name, &stacked, &separate, &tol);
            let want: Vec<Logits> = cases(fixture).into_iter().map(|c| c.logits).collect();
            let name = format!("{fixture} stacked {what} {} vs transformers", dev.name());
            compare(&name, &stacked, &want, &tol);
        } else {
            compare(&name, &stacked, &separate, &q8_tol);
        }
    }
}

#[test]
fn stacked_f32_safetensors_match_separate_and_transformers() {
    for fixture in ["llama", "qwen2", "qwen3"] {
        let dir = tempfile::tempdir().unwrap();
        write_f32_checkpoint(fixture, dir.path());
        check(dir.path(), fixture, "f32");
    }
}

#[test]
fn stacked_quantized_gguf_match_separate() {
    for fixture in ["llama", "qwen2", "qwen3"] {
        for ty in [GgmlType::Q8_0, GgmlType::Q4_K] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("model.gguf");
            write_gguf(fixture, ty, None, &path);
            check(&path, fixture, &format!("{ty:?}"));
        }
    }
}
