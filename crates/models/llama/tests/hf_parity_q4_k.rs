//! Q4_K GGUF parity with transformers 5.17 on the tiny Llama, Qwen2 and Qwen3 fixtures
//! (`scripts/hf_parity.py`), with a tolerance derived from measured quantization error.
//!
//! gguf-py has no Q4_K quantizer, so transformers cannot be run on the very Q4_K-rounded
//! weights (as the Q8_0 test does). The error is split in two parts, each bounded on its own:
//!
//! 1. **Weights.** Rounding a matrix perturbs the logits, to first order, in proportion to the
//!    perturbation. The fixture measures that response: `logits_q8_0 - logits` is transformers'
//!    own logit change for Q8_0-rounded weights, with RMS `r8`. With `e8` and `e4` the relative
//!    RMS weight error of Q8_0 and Q4_K on these matrices (measured here with pocket-quant's
//!    quantizers, which are byte-exact with gguf-py's Q8_0 and ggml's `quantize_row_q4_K_ref`),
//!    Q4_K weights should move the logits by RMS `p4 = r8 * e4 / e8`. Our model on the Q4_K
//!    weights stored as F32 (exact arithmetic otherwise: the F32 path matches transformers to
//!    1e-3) must have an RMS deviation within [p4 / 2, 2 p4] of the f32 reference (the model of
//!    the error holds), and no logit beyond 5 p4 (the largest of 128 roughly normal deviations
//!    is about 3 sigma; 5 allows for heavier tails through the softmax and SiLU).
//! 2. **Activations.** The Q4_K matmul rounds activations to Q8_K (int8 per 256, as llama.cpp
//!    does). Against our own Q4_K-as-F32 run, this is the Q8_0 test's activation error with
//!    blocks of 256 instead of 32: the largest of 256 normal values is about 1.3 times the
//!    largest of 32 (2.9 vs 2.2 sigma), so the step and the Q8_0 bound of 3% of each step's
//!    logit range scale to 4%.
//! 3. **End to end** against transformers' f32 logits: the sum of both bounds, and the greedy
//!    token wherever the reference's top-2 margin exceeds twice that.

mod support;

use pocket_formats::GgmlType;
use pocket_kernels::Device;
use pocket_quant::QuantFormat;
use support::{cases, compare, hf_tensors, logit_range, run_model, write_gguf, Logits};

/// Relative RMS error `sqrt(Σ(q(w) - w)² / Σw²)` over every matrix of the fixture.
fn weight_rel_rmse(fixture: &str, ty: GgmlType) -> f64 {
    let f = QuantFormat::Ggml(ty);
    let (mut err, mut norm) = (0f64, 0f64);
    for (_, shape, w) in hf_tensors(fixture) {
        if shape.len() != 2 {
            continue;
        }
        let q = pocket_quant::quantize(f, &w).unwrap();
        let mut back = vec![0f32; w.len()];
        pocket_quant::dequantize(f, &q, &mut back).unwrap();
        for (a, b) in w.iter().zip(&back) {
            err += ((b - a) as f64).powi(2);
            norm += (*a as f64).powi(2);
        }
    }
    (err / norm).sqrt()
}

/// RMS of the element-wise difference over every prompt, step and token.
fn rms_diff(a: &[Logits], b: &[Logits]) -> f64 {
    let (mut s, mut n) = (0f64, 0usize);
    for (x, y) in a.iter().zip(b) {
        for (r, t) in x.iter().zip(y) {
            for (p, q) in r.iter().zip(t) {
                s += ((p - q) as f64).powi(2);
                n += 1;
            }
        }
    }
    (s / n as f64).sqrt()
}

fn q4_k(fixture: &str) {
    let cs = cases(fixture);
    let f32_ref: Vec<Logits> = cs.iter().map(|c| c.logits.clone()).collect();
    let q8_ref: Vec<Logits> = cs.iter().map(|c| c.logits_q8_0.clone().unwrap()).collect();
    let (e8, e4) = (
        weight_rel_rmse(fixture, GgmlType::Q8_0),
        weight_rel_rmse(fixture, GgmlType::Q4_K),
    );
    let r8 = rms_diff(&q8_ref, &f32_ref);
    let p4 = r8 * e4 / e8;
    let weight_tol = (5.0 * p4) as f32;

    let dir = tempfile::tempdir().unwrap();
    let rounded = dir.path().join("q4_k_as_f32.gguf");
    write_gguf(fixture, GgmlType::F32, Some(GgmlType::Q4_K), &rounded);
    let quant = dir.path().join("q4_k.gguf");
    write_gguf(fixture, GgmlType::Q4_K, None, &quant);
    for dev in Device::all_for_tests() {
        let what = format!("{fixture} Q4_K on {dev:?}");
        // 1. Weights.
        let w4 = run_model(&rounded, fixture, &dev);
        let m = rms_diff(&w4, &f32_ref);
        eprintln!(
            "{what}: weight rel. RMSE Q8_0 {e8:.5} Q4_K {e4:.5}; transformers' Q8_0 logit RMS {r8:.4} \
             -> predicted Q4_K {p4:.4}, measured {m:.4}"
        );
        assert!(
            m > p4 / 2.0 && m < 2.0 * p4,
            "{what}: logit RMS {m} of Q4_K-rounded weights is not within a factor 2 of the predicted {p4}"
        );
        compare(&format!("{what}, weights as F32"), &w4, &f32_ref, &|_| {
            weight_tol
        });
        // 2. Activations.
        let q = run_model(&quant, fixture, &dev);
        let act_tol = |want: &[f32]| 0.04 * logit_range(want);
        compare(&format!("{what}, Q8_K activations"), &q, &w4, &act_tol);
        // 3. End to end.
        compare(&format!("{what}, end to end"), &q, &f32_ref, &|want| {
            weight_tol + act_tol(want)
        });
    }
}

#[test]
fn llama_gguf_q4_k() {
    q4_k("llama");
}

#[test]
fn qwen2_gguf_q4_k() {
    q4_k("qwen2");
}

#[test]
fn qwen3_gguf_q4_k() {
    q4_k("qwen3");
}
