//! Decode-step graphs of the Qwen3.5 hybrid (Gated DeltaNet + gated attention) on the GPU: an
//! engine that captures and replays its decode steps gives the same tokens and bit-identical
//! logits as the same engine running those steps eagerly (`POCKET_GRAPHS=0` path), over 64 steps
//! of continuous batching (sequences joining, finishing and being cancelled mid-way, batches of 1
//! to 3), on the BF16 and FP8 fixtures of `pocket-model-qwen35`. The recurrent states are read
//! and written through the device-side slot table the step's graph addresses. Skipped without a
//! GPU (build with `--features pocket-kernels/cuda`).

mod graph_support;

use graph_support::{compare, fixture};
use pocket_models::sampling::SamplingParams;

#[test]
fn hybrid_greedy_graphs_match_eager_over_continuous_batching() {
    for name in ["bf16", "fp8"] {
        compare(&fixture("qwen35", name), SamplingParams::greedy());
    }
}

#[test]
fn hybrid_sampled_graphs_match_eager() {
    let sampling = SamplingParams {
        temperature: 0.9,
        top_k: 40,
        top_p: 0.9,
        min_p: 0.02,
        seed: Some(7),
        ..SamplingParams::greedy()
    };
    compare(&fixture("qwen35", "bf16"), sampling);
}
