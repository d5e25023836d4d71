//! Decode-step graphs of the Qwen3.5 hybrid (Gated DeltaNet + gated attention) on the GPU: an
//! engine that captures and replays its decode steps gives the same tokens and bit-identical
//! logits as the same engine running those steps eagerly (`POCKET_GRAPHS=0` path), over 64 steps
//! of continuous batching (sequences joining, finishing and being cancelled mid-way, batches of 1
//! to 3), on the BF16 and FP8 fixtures of `pocket-model-qwen35`. The recurrent states are read
//! and written through the device-side slot table the step's graph addresses. Skipped without a
//! GPU (build with `--features pocket-kernels/cuda`).

use std::path::PathBuf;

use pocket_kernels::{Device, DeviceKind};
use pocket_models::model::SeqId;
use pocket_models::sampling::SamplingParams;
use pocket_models::{Engine, FinishReason, GenerateParams};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../models/qwen35/tests/data")
        .join(name)
}

fn gpu_engine(arch: &str, graphs: bool) -> Option<Engine> {
    if let Err(e) = Device::open(DeviceKind::Cuda(0)) {
        eprintln!("skipped: {e}");
        return None;
    }
    let mut e = Engine::builder()
        .model(fixture(arch).to_str().unwrap())
        .device(DeviceKind::Cuda(0))
        .max_seq_len(256)
        .build()
        .unwrap();
    e.set_decode_graphs(graphs);
    Some(e)
}

fn params(n: usize, sampling: SamplingParams) -> GenerateParams {
    GenerateParams {
        max_tokens: n,
        sampling,
        ignore_eos: true,
        ..Default::default()
    }
}

/// One step's record: every event's (sequence, token, logprob bits) and the decode logits.
type Trace = Vec<(Vec<(SeqId, Option<u32>, Option<u32>)>, Option<Vec<f32>>)>;

/// 64 steps: A alone, B joins at step 3, C at step 9 (batch of 3), B is cancelled at step 30,
/// A finishes after 40 tokens, D joins at step 45; sampling as given for all.
fn script(e: &mut Engine, sampling: &SamplingParams) -> Trace {
    let p = |n| params(n, sampling.clone());
    let a = e.add_sequence(vec![1, 5, 9, 33, 2], p(40)).unwrap();
    let mut ids = vec![a];
    let mut trace = Trace::new();
    for step in 0..64 {
        match step {
            3 => ids.push(
                e.add_sequence(vec![7, 8, 9, 10, 11, 12, 13], p(60))
                    .unwrap(),
            ),
            9 => ids.push(e.add_sequence((20..57).collect(), p(50)).unwrap()),
            30 => e.cancel(ids[1]).unwrap(),
            45 => ids.push(e.add_sequence(vec![3, 4], p(30)).unwrap()),
            _ => {}
        }
        let evs = e.step().unwrap();
        for (id, ev) in &evs {
            if let Some(reason) = &ev.finish {
                eprintln!("step {step}: sequence {id} finished: {reason:?}");
                // Only max_tokens ends a sequence in this script (eos is ignored).
                assert_eq!(
                    *reason,
                    FinishReason::Length,
                    "step {step}: sequence {id} ended early"
                );
            }
        }
        let rec = evs
            .iter()
            .map(|(id, ev)| (*id, ev.token, ev.logprob.map(f32::to_bits)))
            .collect();
        trace.push((rec, e.last_decode_logits().unwrap()));
    }
    trace
}

fn compare(arch: &str, sampling: SamplingParams) {
    let (Some(mut on), Some(mut off)) = (gpu_engine(arch, true), gpu_engine(arch, false)) else {
        return;
    };
    let a = script(&mut on, &sampling);
    let b = script(&mut off, &sampling);
    assert!(
        on.decode_graphs() > 0,
        "{arch}: no decode graph was captured"
    );
    assert_eq!(off.decode_graphs(), 0, "{arch}: graphs captured while off");
    let decode_steps = a.iter().filter(|s| s.1.is_some()).count();
    assert!(
        decode_steps > 40,
        "{arch}: only {decode_steps} decode steps"
    );
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert_eq!(x.0, y.0, "{arch}: step {i}: tokens differ");
        assert_eq!(x.1, y.1, "{arch}: step {i}: logits differ");
    }
}

#[test]
fn hybrid_greedy_graphs_match_eager_over_continuous_batching() {
    for name in ["bf16", "fp8"] {
        compare(name, SamplingParams::greedy());
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
    compare("bf16", sampling);
}
