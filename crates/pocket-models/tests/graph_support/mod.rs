//! Shared by the decode-graph tests: an engine on the GPU with graphs on or off, and one 64-step
//! continuous-batching script whose tokens and logits the two must agree on.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use pocket_kernels::{Device, DeviceKind};
use pocket_models::model::SeqId;
use pocket_models::sampling::SamplingParams;
use pocket_models::{Engine, FinishReason, GenerateParams};

/// A model crate's test fixture: `crates/models/<model_crate>/tests/data/<name>`.
pub fn fixture(model_crate: &str, name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../models")
        .join(model_crate)
        .join("tests/data")
        .join(name)
}

/// An engine on the first GPU over `model`, decode graphs on or off; `None` without a GPU.
pub fn gpu_engine(model: &Path, graphs: bool) -> Option<Engine> {
    if let Err(e) = Device::open(DeviceKind::Cuda(0)) {
        eprintln!("skipped: {e}");
        return None;
    }
    let mut e = Engine::builder()
        .model(model.to_str().unwrap())
        .device(DeviceKind::Cuda(0))
        .max_seq_len(256)
        .build()
        .unwrap();
    e.set_decode_graphs(graphs);
    Some(e)
}

/// `n` new tokens with `sampling`, end-of-sequence ignored.
pub fn params(n: usize, sampling: SamplingParams) -> GenerateParams {
    GenerateParams {
        max_tokens: n,
        sampling,
        ignore_eos: true,
        ..Default::default()
    }
}

/// One step's record: every event's (sequence, token, logprob bits) and the decode logits.
pub type Trace = Vec<(Vec<(SeqId, Option<u32>, Option<u32>)>, Option<Vec<f32>>)>;

/// 64 steps: A alone, B joins at step 3, C at step 9 (batch of 3), B is cancelled at step 30,
/// A finishes after 40 tokens, D joins at step 45; sampling as given for all.
pub fn script(e: &mut Engine, sampling: &SamplingParams) -> Trace {
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

/// Runs [`script`] on `model` with graphs on and off and asserts equal tokens and logits.
pub fn compare(model: &Path, sampling: SamplingParams) {
    let arch = model.display();
    let (Some(mut on), Some(mut off)) = (gpu_engine(model, true), gpu_engine(model, false)) else {
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
