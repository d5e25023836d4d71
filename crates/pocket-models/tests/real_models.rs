//! Real checkpoints against independent references (runs only with `POCKET_REAL_MODELS=1`; the
//! store fetches the models on first use).
//!
//! References are committed under `crates/models/llama/tests/data/real/`:
//! `<alias>.numpy.json` from `scripts/reference_forward.py` (f32 numpy over gguf-py's
//! dequantizer) and, where built, `<alias>.llamacpp.json` from llama.cpp (CPU). For each prompt:
//! our greedy tokens must equal a reference's for at least as many tokens as the references
//! agree with each other, and, teacher-forced along each reference's 32-token continuation, our
//! top-1 must equal the reference's wherever its top-2 margin exceeds 0.5 (issue #5).
//!
//! Each model runs twice. The exact-arithmetic path (`Backend::set_exact_arithmetic`: f32
//! activations, the numpy reference's arithmetic) is held to that full rule on every prompt. The
//! fast default path (int8 activations, llama.cpp's scheme) is held to the teacher-forced rule and
//! fails a free-running divergence only where the reference it followed had a margin over 0.5;
//! shorter greedy agreement at a smaller margin is a known limitation of int8 activations (their
//! roundings flip with ulp-level summation-order changes and SmolLM2 Q4_1 amplifies them; see
//! docs/models/smollm2.md) and is printed as `KNOWN LIMITATION`, never silently passed.

use std::path::PathBuf;
use std::sync::Arc;

use pocket_formats::TensorStore;
use pocket_kernels::{DType, Device};
use pocket_models::model::{KvCache, Model};
use pocket_models::registry::{load_model, LoadOptions};
use pocket_models::sampling::SamplingParams;
use pocket_models::store::ModelStore;
use pocket_models::tokenizer::Tokenizer;
use pocket_models::{Engine, GenerateParams};
use serde_json::Value;

fn enabled() -> bool {
    let on = std::env::var("POCKET_REAL_MODELS").is_ok_and(|v| v == "1");
    if !on {
        eprintln!("skipped: set POCKET_REAL_MODELS=1 to run the real-checkpoint tests");
    }
    on
}

/// One reference continuation.
struct RefRun {
    text: String,
    ids: Vec<u32>,
    tokens: Vec<u32>,
    top1: Vec<u32>,
    margin: Vec<f32>,
}

fn load_refs(alias: &str, which: &str) -> Option<Vec<RefRun>> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../models/llama/tests/data/real")
        .join(format!("{alias}.{which}.json"));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(p).ok()?).ok()?;
    let u = |x: &Value| {
        x.as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap() as u32)
            .collect()
    };
    Some(
        v["results"]
            .as_array()?
            .iter()
            .map(|r| RefRun {
                text: r["text"].as_str().unwrap_or_default().to_string(),
                ids: u(&r["ids"]),
                tokens: u(&r["tokens"]),
                top1: u(&r["top1"]),
                margin: r["margin"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|m| m.as_f64().unwrap() as f32)
                    .collect(),
            })
            .collect(),
    )
}

/// Top-2 margin below which two correct int8-activation implementations may pick differently.
const NEAR_TIE: f32 = 0.1;

/// A reference's top-2 margin above which every path must pick its top-1 (issue #5).
const CONFIDENT: f32 = 0.5;

fn top2_margin(row: &[f32]) -> f32 {
    let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    for &v in row {
        if v > a {
            b = a;
            a = v;
        } else if v > b {
            b = v;
        }
    }
    a - b
}

fn prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn argmax(row: &[f32]) -> u32 {
    row.iter()
        .enumerate()
        .fold(0, |b, (i, v)| if *v > row[b] { i } else { b }) as u32
}

/// Our top-1 after the prompt and after each token of `forced` (teacher-forced).
fn forced_top1(model: &mut dyn Model, dev: &Device, prompt: &[u32], forced: &[u32]) -> Vec<u32> {
    let cfg = model.info().kv_cache_config(4096, 4096, DType::F32);
    let mut cache = KvCache::new(dev, cfg).unwrap();
    let mut out = Vec::new();
    let mut input = prompt.to_vec();
    for step in 0..=forced.len() {
        let plan = cache.plan(&[(0, &input)]).unwrap();
        let logits = dev
            .read_f32(model.forward(&plan, &mut cache).unwrap())
            .unwrap();
        out.push(argmax(&logits));
        if step < forced.len() {
            input = vec![forced[step]];
        }
    }
    out
}

/// Which CPU arithmetic a check runs, and so which rule it is held to.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// The default int8-activation matmuls (llama.cpp's scheme).
    Fast,
    /// `Backend::set_exact_arithmetic`: f32 activations, the numpy reference's arithmetic.
    Exact,
}

fn check_model(alias: &str, mode: Mode) {
    let store = ModelStore::new();
    let path = store.resolve(alias).unwrap().path;
    let tensors = Arc::new(TensorStore::open(&path).unwrap());
    let tok = Tokenizer::from_gguf(tensors.gguf().unwrap()).unwrap();
    let dev = Device::cpu();
    dev.set_exact_arithmetic(mode == Mode::Exact);
    let t0 = std::time::Instant::now();
    let mut model = load_model(tensors.clone(), &dev, LoadOptions { max_seq_len: 4096 }).unwrap();
    let numpy = load_refs(alias, "numpy").expect("numpy reference fixture");
    let llamacpp = load_refs(alias, "llamacpp");
    let mut failures = Vec::new();
    for (i, r) in numpy.iter().enumerate() {
        let other = llamacpp.as_ref().map(|l| &l[i]);
        assert_eq!(
            tok.encode(&r.text, true, true).unwrap(),
            r.ids,
            "{alias} prompt {i}: tokenization"
        );
        if let Some(o) = other {
            assert_eq!(
                o.ids, r.ids,
                "{alias} prompt {i}: references disagree on the prompt ids"
            );
        }
        // Our greedy continuation (the model's own argmax, fed back).
        let mut ours = Vec::new();
        let mut our_margin = Vec::new();
        {
            let cfg = model.info().kv_cache_config(4096, 4096, DType::F32);
            let mut cache = KvCache::new(&dev, cfg).unwrap();
            let mut input = r.ids.clone();
            for _ in 0..r.tokens.len() {
                let plan = cache.plan(&[(0, &input)]).unwrap();
                let logits = dev
                    .read_f32(model.forward(&plan, &mut cache).unwrap())
                    .unwrap();
                let t = argmax(&logits);
                ours.push(t);
                our_margin.push(top2_margin(&logits));
                input = vec![t];
            }
        }
        let refs_agree = other.map_or(0, |o| prefix(&o.tokens, &r.tokens));
        let ours_agree =
            prefix(&ours, &r.tokens).max(other.map_or(0, |o| prefix(&ours, &o.tokens)));
        eprintln!(
            "{alias} {mode:?} prompt {i}: ours agrees with a reference for {ours_agree} tokens, the references with each other for {refs_agree}"
        );
        // Exact mode (f32 activations, the numpy reference's arithmetic) has no activation
        // rounding to flip: it is held to the full rule, any shortfall fails. The fast path's int8
        // activation roundings (ours and llama.cpp's alike) move SmolLM2's top-2 margins by about
        // 0.1-0.3 logits and flip with ulp-level summation-order changes, so it is held to the
        // teacher-forced rule below plus: a free-running divergence fails where the reference we
        // followed was confident there (margin > CONFIDENT, the teacher-forced threshold), is a
        // near-tie where both margins are under NEAR_TIE, and is otherwise reported as the known
        // limitation (docs/models/smollm2.md, Known limitations).
        let k = ours_agree;
        let ref_margin_at_k = [Some(r), other]
            .into_iter()
            .flatten()
            .filter_map(|rr| rr.margin.get(k).copied())
            .fold(f32::INFINITY, f32::min);
        // The margin of the reference(s) whose tokens we followed up to the divergence.
        let followed_margin = [Some(r), other]
            .into_iter()
            .flatten()
            .filter(|rr| prefix(&ours, &rr.tokens) == k)
            .filter_map(|rr| rr.margin.get(k).copied())
            .fold(f32::NEG_INFINITY, f32::max);
        let near_tie =
            k < our_margin.len() && our_margin[k] < NEAR_TIE && ref_margin_at_k < NEAR_TIE;
        if ours_agree >= refs_agree {
            // Meets the full rule.
        } else if mode == Mode::Exact {
            failures.push(format!(
                "prompt {i} (exact): greedy agreement {ours_agree} < the references' {refs_agree} (our margin there {:?}, the followed reference's {followed_margin}; ours {ours:?}, numpy {:?})",
                our_margin.get(k), r.tokens
            ));
        } else if near_tie {
            eprintln!(
                "{alias} prompt {i}: KNOWN LIMITATION (fast path): greedy agreement {ours_agree} < the references' {refs_agree}; \
                 the first differing step is a near-tie (our top-2 margin {:.4}, the references' {:.4})",
                our_margin[k], ref_margin_at_k
            );
        } else if followed_margin > CONFIDENT {
            failures.push(format!(
                "prompt {i} (fast): greedy agreement {ours_agree} < the references' {refs_agree} at a step where the reference's margin is {followed_margin} (ours {ours:?}, numpy {:?}, margins {:?})",
                r.tokens, r.margin
            ));
        } else {
            eprintln!(
                "{alias} prompt {i}: KNOWN LIMITATION (int8 activations, fast path): greedy agreement {ours_agree} < the references' {refs_agree} \
                 at a step where our top-2 margin is {:?} and the followed reference's {followed_margin:.4} (under {CONFIDENT}); \
                 the exact path is held to the full rule (ours {ours:?}, numpy {:?})",
                our_margin.get(k),
                r.tokens
            );
        }
        for (name, rr) in [("numpy", Some(r)), ("llama.cpp", other)] {
            let Some(rr) = rr else { continue };
            let top = forced_top1(
                model.as_mut(),
                &dev,
                &rr.ids,
                &rr.tokens[..rr.tokens.len() - 1],
            );
            for (k, (&m, &want)) in rr.margin.iter().zip(&rr.top1).enumerate() {
                if m > CONFIDENT && top[k] != want {
                    failures.push(format!(
                        "prompt {i} step {k}: top-1 {} vs {name}'s {want} (margin {m})",
                        top[k]
                    ));
                }
            }
        }
    }
    eprintln!(
        "{alias} {mode:?}: checks took {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{alias} ({mode:?}):\n{}",
        failures.join("\n")
    );
}

#[test]
fn smollm2_paris() {
    if !enabled() {
        return;
    }
    let mut e = Engine::builder()
        .model("smollm2-135m-instruct")
        .build()
        .unwrap();
    let params = GenerateParams {
        max_tokens: 4,
        sampling: SamplingParams::greedy(),
        ..Default::default()
    };
    let g = e
        .generate_text("The capital of France is", true, params, |_| {})
        .unwrap();
    assert!(g.text.starts_with(" Paris."), "got {:?}", g.text);
}

#[test]
fn smollm2_matches_references() {
    if enabled() {
        check_model("smollm2-135m-instruct", Mode::Fast);
    }
}

#[test]
fn smollm2_exact_matches_references() {
    if enabled() {
        check_model("smollm2-135m-instruct", Mode::Exact);
    }
}

#[test]
fn qwen25_coder_matches_references() {
    if enabled() {
        check_model("qwen2.5-coder-0.5b-instruct", Mode::Fast);
    }
}

#[test]
fn qwen25_coder_exact_matches_references() {
    if enabled() {
        check_model("qwen2.5-coder-0.5b-instruct", Mode::Exact);
    }
}

/// Prompts of the reference runs, per alias.
fn prompts(alias: &str) -> &'static [&'static str] {
    match alias {
        "smollm2-135m-instruct" => &[
            "The capital of France is",
            "Once upon a time, there was a little",
            "def fibonacci(n):\n",
        ],
        _ => &[
            "def quicksort(arr):\n",
            "The capital of France is",
            "// A function that reverses a string in C\n",
        ],
    }
}

/// Fixture tooling: with `POCKET_WRITE_PROMPTS=1`, tokenizes the prompts with our tokenizer into
/// `<alias>.prompts.json`, the input of `scripts/reference_forward.py` and of the llama.cpp run.
#[test]
fn write_prompt_ids() {
    if std::env::var("POCKET_WRITE_PROMPTS").is_err() {
        return;
    }
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/llama/tests/data/real");
    std::fs::create_dir_all(&dir).unwrap();
    for alias in ["smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct"] {
        let path = ModelStore::new().resolve(alias).unwrap().path;
        let tok = Tokenizer::from_gguf_path(&path).unwrap();
        let list: Vec<Value> = prompts(alias)
            .iter()
            .map(|t| serde_json::json!({ "text": t, "ids": tok.encode(t, true, true).unwrap() }))
            .collect();
        let out = serde_json::json!({ "model": alias, "prompts": list });
        std::fs::write(
            dir.join(format!("{alias}.prompts.json")),
            serde_json::to_string_pretty(&out).unwrap(),
        )
        .unwrap();
        eprintln!("{alias}: {}", path.display());
    }
}
