//! The engine's step API on the tiny transformers-parity fixtures: batched prefill and decode,
//! sequences joining mid-flight, cancellation, and greedy tokens equal to transformers'.

use std::path::PathBuf;

use pocket_models::sampling::SamplingParams;
use pocket_models::{Engine, FinishReason, GenerateParams};
use serde_json::Value;

fn fixture(arch: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../models/llama/tests/data")
        .join(arch)
}

/// (prompt, greedy tokens) of each reference case.
fn reference(arch: &str) -> Vec<(Vec<u32>, Vec<u32>)> {
    let v: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture(arch).join("reference.json")).unwrap(),
    )
    .unwrap();
    let ids = |x: &Value| {
        x.as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap() as u32)
            .collect::<Vec<_>>()
    };
    v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (ids(&c["prompt"]), ids(&c["tokens"])))
        .collect()
}

fn greedy(n: usize) -> GenerateParams {
    GenerateParams {
        max_tokens: n,
        sampling: SamplingParams::greedy(),
        ignore_eos: true,
        ..Default::default()
    }
}

fn engine(arch: &str) -> Engine {
    Engine::builder()
        .model(fixture(arch).to_str().unwrap())
        .max_seq_len(256)
        .build()
        .unwrap()
}

#[test]
fn blocking_generate_matches_transformers_greedy() {
    for arch in ["llama", "qwen2", "qwen3"] {
        let mut e = engine(arch);
        for (prompt, want) in reference(arch) {
            let g = e.generate(prompt, greedy(want.len())).unwrap();
            assert_eq!(g.ids, want, "{arch}");
            assert_eq!(g.finish, FinishReason::Length);
        }
        assert_eq!(e.active(), 0);
        assert_eq!(
            e.cache().free_blocks(),
            e.cache().config().num_blocks,
            "{arch}: blocks leaked"
        );
    }
}

#[test]
fn step_api_batches_and_joins_mid_flight() {
    let refs = reference("qwen2");
    let mut e = engine("qwen2");
    let a = e.add_sequence(refs[0].0.clone(), greedy(8)).unwrap();
    let mut got: Vec<Vec<u32>> = vec![Vec::new(), Vec::new()];
    let mut b = None;
    let mut steps = 0;
    while e.active() > 0 || b.is_none() {
        if steps == 3 {
            // The second sequence joins while the first is decoding: its prefill and the
            // first's decode run in one batch.
            b = Some(e.add_sequence(refs[1].0.clone(), greedy(8)).unwrap());
        }
        for (id, ev) in e.step().unwrap() {
            let slot = if id == a { 0 } else { 1 };
            got[slot].extend(ev.token);
        }
        steps += 1;
        assert!(steps < 50);
    }
    assert_eq!(got[0], refs[0].1);
    assert_eq!(got[1], refs[1].1);
}

#[test]
fn cancel_frees_the_cache() {
    let refs = reference("llama");
    let mut e = engine("llama");
    let total = e.cache().free_blocks();
    let id = e.add_sequence(refs[0].0.clone(), greedy(100)).unwrap();
    e.step().unwrap();
    assert!(e.cache().free_blocks() < total);
    e.cancel(id).unwrap();
    assert_eq!(e.cache().free_blocks(), total);
    assert!(e.cancel(id).is_err());
    assert!(
        e.add_sequence(vec![], greedy(1)).is_err(),
        "empty prompt must be rejected"
    );
    assert!(
        e.add_sequence(vec![100_000], greedy(1)).is_err(),
        "out-of-vocab id must be rejected"
    );
}

#[test]
fn context_limit_ends_with_length() {
    let refs = reference("qwen3");
    let mut e = Engine::builder()
        .model(fixture("qwen3").to_str().unwrap())
        .max_seq_len(14)
        .build()
        .unwrap();
    let g = e.generate(refs[0].0.clone(), greedy(100)).unwrap();
    assert_eq!(g.finish, FinishReason::Length);
    assert_eq!(
        refs[0].0.len() + g.ids.len(),
        14 + 1,
        "the last token is sampled but never cached"
    );
}

#[test]
fn stream_yields_transformers_greedy_then_usage_and_drop_cancels() {
    let mut e = engine("llama");
    let total = e.cache().free_blocks();
    for (prompt, want) in reference("llama") {
        let n_prompt = prompt.len();
        let events: Vec<_> = e
            .generate_stream(prompt, greedy(want.len()))
            .unwrap()
            .map(|ev| ev.unwrap())
            .collect();
        let ids: Vec<u32> = events.iter().filter_map(|ev| ev.token).collect();
        assert_eq!(ids, want, "streamed greedy tokens equal transformers'");
        let last = events.last().unwrap();
        assert_eq!(last.finish, Some(FinishReason::Length));
        let usage = last.usage.expect("usage on the last event");
        assert_eq!(usage.prompt_tokens, n_prompt);
        assert_eq!(usage.completion_tokens, want.len());
        assert!(events[..events.len() - 1]
            .iter()
            .all(|ev| ev.usage.is_none()));
    }
    assert_eq!(
        e.cache().free_blocks(),
        total,
        "finished streams free their blocks"
    );
    // Abandoning a stream after one event cancels the request.
    let (prompt, _) = reference("llama").remove(0);
    {
        let mut s = e.generate_stream(prompt, greedy(50)).unwrap();
        assert!(s.next().unwrap().unwrap().token.is_some());
    }
    assert_eq!(e.active(), 0, "dropped stream cancelled its sequence");
    assert_eq!(
        e.cache().free_blocks(),
        total,
        "dropped stream freed its blocks"
    );
}
