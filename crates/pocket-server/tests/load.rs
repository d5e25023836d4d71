//! The bounded load test over the REAL engine: 32 concurrent streaming clients on loopback, every
//! request completes without an error, and afterwards `/metrics` (scraped over HTTP, as an
//! operator would) shows no running or queued sequence and every KV-cache block free.
//!
//! Always on the tiny llama fixture; with `POCKET_REAL_MODELS=1` on SmolLM2-135M with the
//! server's default batch (8 sequences, so 24 clients wait in the queue and join at token
//! boundaries) and 16 new tokens per request.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{call, clean_stream_chunks, metric, real_models, serve_backend, stream, SMOL};
use pocket_server::engine_backend::{self, EngineOptions};
use pocket_server::{InferenceBackend, ServerConfig};
use serde_json::{json, Value};

const CLIENTS: usize = 32;
const MAX_TOKENS: u64 = 16;

/// One streamed request's outcome: completion tokens (from the usage chunk) and finish reason.
fn check_stream(i: usize, status: u16, events: &[String]) -> (u64, String) {
    let chunks = clean_stream_chunks(&format!("client {i}"), status, events);
    let usage = &chunks.last().expect("a usage chunk")["usage"];
    let n = usage["completion_tokens"].as_u64().expect("usage");
    let finish = chunks
        .iter()
        .rev()
        .find_map(|c| c["choices"][0]["finish_reason"].as_str())
        .expect("a finish chunk")
        .to_string();
    assert!((1..=MAX_TOKENS).contains(&n), "client {i}: {n} tokens");
    assert!(finish == "stop" || finish == "length", "{finish}");
    if finish == "length" {
        assert_eq!(n, MAX_TOKENS, "client {i}");
    }
    (n, finish)
}

/// Runs the 32 clients with `body(i)`, checks each stream, then scrapes `/metrics` until the
/// engine settles; returns the completion tokens in all and the wall time.
async fn load(addr: SocketAddr, path: &str, body: impl Fn(usize) -> Value) -> (u64, Duration) {
    let start = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let b = body(i);
            let path = path.to_string();
            tokio::spawn(async move { stream(addr, &path, &b).await })
        })
        .collect();
    let mut tokens = 0;
    for (i, t) in tasks.into_iter().enumerate() {
        let (st, events) = tokio::time::timeout(Duration::from_secs(900), t)
            .await
            .expect("stream finished in time")
            .unwrap();
        tokens += check_stream(i, st, &events).0;
    }
    let wall = start.elapsed();
    // The engine frees a finished sequence's blocks at its last step; allow the scheduler
    // thread a moment to publish the counters.
    let mut text = String::new();
    for _ in 0..300 {
        let (st, m) = call(addr, "GET", "/metrics", None, None).await;
        assert_eq!(st, 200);
        text = m.as_str().unwrap().to_string();
        let idle = [
            "pocket_running_sequences",
            "pocket_queue_depth",
            "pocket_cache_blocks_used",
        ]
        .iter()
        .all(|k| metric(&text, k) == Some(0.0));
        if idle {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        metric(&text, "pocket_running_sequences"),
        Some(0.0),
        "{text}"
    );
    assert_eq!(metric(&text, "pocket_queue_depth"), Some(0.0), "{text}");
    assert_eq!(
        metric(&text, "pocket_cache_blocks_used"),
        Some(0.0),
        "{text}"
    );
    assert!(metric(&text, "pocket_cache_blocks_total").unwrap() > 0.0);
    let label = if path.contains("chat") {
        "chat"
    } else {
        "completions"
    };
    let ok = format!("pocket_requests_total{{endpoint=\"{label}\",status=\"200\"}}");
    assert_eq!(metric(&text, &ok), Some(CLIENTS as f64), "{text}");
    assert_eq!(
        metric(&text, "pocket_completion_tokens_total"),
        Some(tokens as f64),
        "usage adds up to the server's counter"
    );
    assert_eq!(metric(&text, "pocket_cancelled_total"), Some(0.0));
    (tokens, wall)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tiny_llama_32_streaming_clients() {
    let backend = Arc::new(common::tiny_llama("tiny-llama", 128, 8));
    let h = serve_backend(backend.clone(), ServerConfig::default()).await;
    let (tokens, wall) = load(h.addr, "/v1/completions", |i| {
        json!({"model": "tiny-llama", "prompt": [1, (i * 5 % 120) as u32 + 2, 7],
               "max_tokens": MAX_TOKENS, "temperature": 0.8, "seed": i, "stream": true,
               "stream_options": {"include_usage": true}})
    })
    .await;
    // The fixture has no end-of-sequence token: every client gets all 16.
    assert_eq!(tokens, CLIENTS as u64 * MAX_TOKENS);
    eprintln!("tiny llama: {CLIENTS} clients, {tokens} tokens in {wall:.2?}");
    assert_eq!(backend.stats().cache_blocks_used, 0);
    h.shutdown();
}

/// SmolLM2 under the default server settings (batch 8, queue 64), context 512.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn smollm2_32_streaming_clients() {
    if !real_models() {
        eprintln!("skipping: set POCKET_REAL_MODELS=1");
        return;
    }
    let backend = Arc::new(
        engine_backend::start(&EngineOptions {
            id: None,
            model: SMOL.into(),
            device: pocket_kernels::DeviceKind::Cpu,
            kv_cache: None,
            ctx_size: Some(512),
            max_sequences: 8,
            max_queue: 64,
        })
        .expect("SmolLM2 through the model store"),
    );
    let h = serve_backend(backend.clone(), ServerConfig::default()).await;
    let (tokens, wall) = load(h.addr, "/v1/chat/completions", |i| {
        json!({"model": SMOL, "max_tokens": MAX_TOKENS, "temperature": 0.8,
               "seed": i, "stream": true, "stream_options": {"include_usage": true},
               "messages": [{"role": "user", "content": format!("Tell me about the number {i}.")}]})
    })
    .await;
    eprintln!(
        "SmolLM2: {CLIENTS} streaming clients, {tokens} tokens in {wall:.2?} ({:.1} tok/s)",
        tokens as f64 / wall.as_secs_f64()
    );
    assert_eq!(backend.stats().cache_blocks_used, 0);
    h.shutdown();
}
