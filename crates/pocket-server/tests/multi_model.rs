//! Several models from one server process, each with its own engine, scheduler and cache, over a
//! real loopback socket.
//!
//! Always: the tiny llama fixture loaded twice with different settings (`tiny-short`: context 64,
//! batch 2; `tiny-long`: context 256, batch 4). With `POCKET_REAL_MODELS=1`: SmolLM2 twice through
//! [`engine_backend::start_all`] (the path `--model a=... --model b=...` takes), and the startup
//! memory check refusing what does not fit.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{
    call, clean_stream_chunks, metric, post, real_models, serve_backend, stream, tiny_llama, SMOL,
};
use pocket_server::engine_backend::{self, EngineOptions};
use pocket_server::{InferenceBackend, MultiBackend, ServerConfig};
use serde_json::{json, Value};

const SHORT: &str = "tiny-short";
const LONG: &str = "tiny-long";

fn text(v: &Value) -> String {
    v["choices"][0]["text"].as_str().expect("text").to_string()
}

/// Waits until nothing runs or waits and every cache block of every model is free.
async fn settled(b: &MultiBackend) -> pocket_server::BackendStats {
    for _ in 0..500 {
        let st = b.stats();
        if st.running == 0 && st.queued == 0 && st.cache_blocks_used == 0 {
            return st;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    b.stats()
}

/// Concatenated text and completion tokens of a streamed completion ending in usage + [DONE].
fn streamed(events: &[String]) -> (String, u64) {
    let chunks = clean_stream_chunks("stream", 200, events);
    let usage = chunks.last().unwrap()["usage"]["completion_tokens"]
        .as_u64()
        .expect("usage chunk");
    let out = chunks[..chunks.len() - 1]
        .iter()
        .map(|c| c["choices"][0]["text"].as_str().unwrap().to_string())
        .collect();
    (out, usage)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_engines_routed_by_model_with_their_own_limits() {
    let short = Arc::new(tiny_llama(SHORT, 64, 2));
    let long = Arc::new(tiny_llama(LONG, 256, 4));
    let multi = Arc::new(
        MultiBackend::new(vec![
            short.clone() as Arc<dyn InferenceBackend>,
            long.clone() as Arc<dyn InferenceBackend>,
        ])
        .unwrap(),
    );
    let h = serve_backend(multi.clone(), ServerConfig::default()).await;
    let addr = h.addr;

    // /v1/models lists both, each with its own context length.
    let (st, v) = call(addr, "GET", "/v1/models", None, None).await;
    assert_eq!(st, 200, "{v}");
    let listed: Vec<(String, u64)> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["id"].as_str().unwrap().to_string(),
                m["context_length"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(listed, [(SHORT.to_string(), 64), (LONG.to_string(), 256)]);
    let (st, m) = call(addr, "GET", &format!("/v1/models/{LONG}"), None, None).await;
    assert_eq!((st, m["id"].as_str()), (200, Some(LONG)));

    // Same weights on both engines: the same greedy answer, each request served by its engine.
    let prompt = json!([1, 17, 42, 99, 5]);
    let greedy =
        |model: &str| json!({"model": model, "prompt": prompt, "max_tokens": 12, "temperature": 0});
    let (st, a) = post(addr, "/v1/completions", &greedy(SHORT)).await;
    assert_eq!(st, 200, "{a}");
    let (st, b) = post(addr, "/v1/completions", &greedy(LONG)).await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(
        (a["model"].as_str(), b["model"].as_str()),
        (Some(SHORT), Some(LONG))
    );
    assert_eq!(text(&a).split_whitespace().count(), 12);
    assert_eq!(text(&a), text(&b));

    // A 70-token prompt fits the long model's context, not the short one's.
    let ids: Vec<u32> = (1..=70).collect();
    let big = |model: &str| json!({"model": model, "prompt": ids, "max_tokens": 4});
    let (st, e) = post(addr, "/v1/completions", &big(SHORT)).await;
    assert_eq!(st, 400, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("64 tokens"),
        "{e}"
    );
    let (st, ok) = post(addr, "/v1/completions", &big(LONG)).await;
    assert_eq!(st, 200, "{ok}");

    // An unknown model: OpenAI's 404 model_not_found on `model`.
    let (st, e) = post(addr, "/v1/completions", &greedy("tiny-other")).await;
    assert_eq!(st, 404, "{e}");
    assert_eq!(e["error"]["code"], "model_not_found");
    assert_eq!(e["error"]["param"], "model");

    // Concurrent streams to both models at once: 6 each, more than either batch holds, so
    // both queues fill and drain; every stream equals its solo greedy answer.
    let prompts: Vec<Value> = (0..6u32)
        .map(|i| json!([1, (i * 7) % 128, (i * 13 + 3) % 128]))
        .collect();
    let mut solo = Vec::new();
    for p in &prompts {
        let (st, v) = post(
            addr,
            "/v1/completions",
            &json!({"model": LONG, "prompt": p, "max_tokens": 16, "temperature": 0}),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        solo.push(text(&v));
    }
    let mut tasks = Vec::new();
    for (i, p) in prompts.iter().enumerate() {
        for model in [SHORT, LONG] {
            let body = json!({"model": model, "prompt": p, "max_tokens": 16, "temperature": 0,
                              "stream": true, "stream_options": {"include_usage": true}});
            tasks.push((
                i,
                model,
                tokio::spawn(async move { stream(addr, "/v1/completions", &body).await }),
            ));
        }
    }
    let mut saw_both_busy = false;
    for _ in 0..200 {
        if short.stats().running > 0 && long.stats().running > 0 {
            saw_both_busy = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    for (i, model, t) in tasks {
        let (st, events) = tokio::time::timeout(Duration::from_secs(300), t)
            .await
            .expect("stream finished in time")
            .unwrap();
        assert_eq!(st, 200, "{model} {i}");
        let (out, n) = streamed(&events);
        assert_eq!(n, 16, "{model} {i}");
        assert_eq!(
            out, solo[i],
            "{model} request {i}: batched greedy = solo greedy"
        );
    }
    assert!(saw_both_busy, "both engines generated at the same time");

    // Every block of both caches is free again, per model in /metrics and /health.
    let st = settled(&multi).await;
    assert_eq!((st.running, st.queued, st.cache_blocks_used), (0, 0, 0));
    assert_eq!(
        st.cache_blocks_total,
        short.stats().cache_blocks_total + long.stats().cache_blocks_total
    );
    let (_, m) = call(addr, "GET", "/metrics", None, None).await;
    let m = m.as_str().unwrap().to_string();
    for id in [SHORT, LONG] {
        let used = format!("pocket_model_cache_blocks_used{{model=\"{id}\"}}");
        let total = format!("pocket_model_cache_blocks_total{{model=\"{id}\"}}");
        assert_eq!(metric(&m, &used), Some(0.0), "{m}");
        assert!(metric(&m, &total).unwrap() > 0.0, "{m}");
    }
    assert_eq!(metric(&m, "pocket_cache_blocks_used"), Some(0.0));
    let (_, health) = call(addr, "GET", "/health", None, None).await;
    let ids: Vec<&str> = health["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [SHORT, LONG]);
    h.shutdown();
}

fn fixture() -> String {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../models/llama/tests/data/llama")
        .to_string_lossy()
        .into_owned()
}

fn opts(id: &str, model: &str, ctx: usize, seqs: usize) -> EngineOptions {
    EngineOptions {
        id: Some(id.into()),
        model: model.into(),
        device: pocket_kernels::DeviceKind::Cpu,
        kv_cache: None,
        ctx_size: Some(ctx),
        max_sequences: seqs,
        max_queue: 64,
    }
}

/// Startup refuses, before loading anything, models whose weights exceed the memory budget, and
/// names each model's share; a model that cannot load is named too.
#[test]
fn startup_refuses_what_does_not_fit_or_load() {
    let path = fixture();
    let w = engine_backend::weight_bytes(std::path::Path::new(&path)).unwrap();
    assert!(w > 0);
    let two = [opts("a", &path, 64, 1), opts("b", &path, 64, 1)];
    // Room for one copy of the weights, not two.
    let err = engine_backend::start_all(&two, Some(w + w / 2))
        .err()
        .expect("refused");
    assert!(err.contains("weights alone take"), "{err}");
    assert!(err.contains("a 0.") && err.contains("b 0."), "{err}");
    assert!(err.contains("--memory-budget"), "{err}");
    // Enough room, but the fixture has no tokenizer: the server cannot serve it as text.
    let err = engine_backend::start_all(&two, None)
        .err()
        .expect("refused");
    assert!(err.contains("cannot load model `a`"), "{err}");
    // Two names for one model are refused.
    let err = MultiBackend::new(vec![
        Arc::new(tiny_llama("same", 64, 1)) as Arc<dyn InferenceBackend>,
        Arc::new(tiny_llama("same", 64, 1)),
    ])
    .err()
    .unwrap();
    assert!(err.contains("`same` is given twice"), "{err}");
}

/// SmolLM2 served twice from one process (`--model smol-a=... --model smol-b=...`) with different
/// context and batch sizes: both listed, concurrent chats to both complete, every block freed;
/// and a memory budget that fits both weights but not both KV caches is refused at startup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smollm2_twice_concurrently_and_the_memory_check() {
    if !real_models() {
        eprintln!("skipping: set POCKET_REAL_MODELS=1");
        return;
    }
    let both = [opts("smol-a", SMOL, 512, 4), opts("smol-b", SMOL, 256, 2)];
    let multi = Arc::new(engine_backend::start_all(&both, None).expect("two SmolLM2 engines"));
    let h = serve_backend(multi.clone(), ServerConfig::default()).await;
    let addr = h.addr;
    let (_, v) = call(addr, "GET", "/v1/models", None, None).await;
    let listed: Vec<(&str, u64)> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["id"].as_str().unwrap(),
                m["context_length"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(listed, [("smol-a", 512), ("smol-b", 256)]);
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let model = if i % 2 == 0 { "smol-a" } else { "smol-b" };
            let body = json!({"model": model, "max_tokens": 8, "stream": true, "seed": i,
                "messages": [{"role": "user", "content": format!("Name a colour, {i}.")}]});
            tokio::spawn(async move { stream(addr, "/v1/chat/completions", &body).await })
        })
        .collect();
    for t in tasks {
        let (st, events) = tokio::time::timeout(Duration::from_secs(600), t)
            .await
            .expect("in time")
            .unwrap();
        clean_stream_chunks("chat", st, &events);
    }
    let st = settled(&multi).await;
    assert_eq!((st.running, st.queued, st.cache_blocks_used), (0, 0, 0));
    h.shutdown();
    drop(multi);

    // Both weights fit, the second KV cache does not.
    let path = pocket_models::store::ModelStore::new()
        .resolve(SMOL)
        .unwrap()
        .path;
    let w = engine_backend::weight_bytes(&path).unwrap();
    let err = engine_backend::start_all(&both, Some(2 * w + 1))
        .err()
        .expect("refused");
    assert!(err.contains("KV cache"), "{err}");
    assert!(err.contains("smol-a: weights"), "{err}");
}
