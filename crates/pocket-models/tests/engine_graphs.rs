//! Decode-step graphs on the GPU: an engine that captures and replays its decode steps gives the
//! same tokens and bit-identical logits as the same engine running those steps eagerly
//! (`POCKET_GRAPHS=0` path), over 64 steps of continuous batching (sequences joining, finishing
//! and being cancelled mid-way, batches of 1 to 3); seeded sampling on the device is
//! reproducible. Skipped without a GPU (build with `--features pocket-kernels/cuda`).

mod graph_support;

use std::path::PathBuf;

use graph_support::{compare, gpu_engine, params};
use pocket_models::sampling::SamplingParams;
use pocket_models::Engine;

fn llama(arch: &str) -> PathBuf {
    graph_support::fixture("llama", arch)
}

#[test]
fn greedy_graphs_match_eager_over_continuous_batching() {
    for arch in ["llama", "qwen2", "qwen3"] {
        compare(&llama(arch), SamplingParams::greedy());
    }
}

#[test]
fn sampled_graphs_match_eager_and_reproduce() {
    let sampling = SamplingParams {
        temperature: 0.9,
        top_k: 40,
        top_p: 0.9,
        min_p: 0.02,
        seed: Some(7),
        ..SamplingParams::greedy()
    };
    compare(&llama("llama"), sampling.clone());
    // The same seed on a fresh engine draws the same tokens.
    let (Some(mut x), Some(mut y)) = (
        gpu_engine(&llama("llama"), true),
        gpu_engine(&llama("llama"), true),
    ) else {
        return;
    };
    let gx = x
        .generate(vec![1, 2, 3], params(48, sampling.clone()))
        .unwrap();
    let gy = y.generate(vec![1, 2, 3], params(48, sampling)).unwrap();
    assert_eq!(gx.ids, gy.ids);
}

/// A greedy and a penalised request with top log-probabilities, side by side to the end.
fn mixed_run(e: &mut Engine) -> (Vec<u32>, Vec<u32>, usize) {
    let pen = SamplingParams {
        repetition_penalty: 1.3,
        top_logprobs: 2,
        ..SamplingParams::greedy()
    };
    let g = e
        .add_sequence(vec![4, 5, 6], params(32, SamplingParams::greedy()))
        .unwrap();
    let h = e.add_sequence(vec![9, 9, 9], params(32, pen)).unwrap();
    let (mut a, mut b, mut tops) = (Vec::new(), Vec::new(), 0);
    while e.active() > 0 {
        for (id, ev) in e.step().unwrap() {
            if id == g {
                a.extend(ev.token);
            } else if id == h {
                b.extend(ev.token);
                tops += usize::from(ev.top_logprobs.len() == 2);
            }
        }
    }
    (a, b, tops)
}

#[test]
fn host_only_requests_fall_back_per_row() {
    // The penalised row is sampled on the host from the step's logits read back (after a graph
    // replay, once captured), the greedy row on the device; both agree with the engine that
    // never captures.
    let (Some(mut on), Some(mut off)) = (
        gpu_engine(&llama("llama"), true),
        gpu_engine(&llama("llama"), false),
    ) else {
        return;
    };
    let x = mixed_run(&mut on);
    let y = mixed_run(&mut off);
    assert_eq!(
        x.2, 32,
        "every penalised token reports its top log-probabilities"
    );
    assert_eq!((x.0.len(), x.1.len()), (32, 32));
    assert_eq!(x, y);
}
