//! The continuous-batching adapter over a mock step engine, driven through real HTTP.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use http_body_util::BodyExt;
use hyper::body::Body;
use pocket_server::backend::{FinishReason, ModelInfo, Prompt, SamplingOptions, SubmitError};
use pocket_server::scheduler::{
    SchedulerBackend, SchedulerConfig, StepEngine, StepToken, TextCodec,
};
use pocket_server::{InferenceBackend, Server, ServerConfig, ServerHandle};
use serde_json::{json, Value};

const EOS: u32 = 1;

#[derive(Default)]
struct Log {
    batch_sizes: Vec<usize>,
}

struct Seq {
    prompt_len: usize,
    generated: usize,
    max: usize,
    eos_after: Option<usize>,
    logprobs: Option<usize>,
}

struct MockEngine {
    seqs: Vec<(u64, Seq)>,
    next: u64,
    log: Arc<Mutex<Log>>,
}

fn blocks(tokens: usize) -> usize {
    tokens.div_ceil(16)
}

impl StepEngine for MockEngine {
    fn add_sequence(
        &mut self,
        prompt: &[u32],
        _s: &SamplingOptions,
        max_tokens: usize,
        top: Option<usize>,
    ) -> Result<u64, String> {
        self.next += 1;
        let eos_after = (prompt[0] == 2).then_some(3);
        self.seqs.push((
            self.next,
            Seq {
                prompt_len: prompt.len(),
                generated: 0,
                max: max_tokens,
                eos_after,
                logprobs: top,
            },
        ));
        Ok(self.next)
    }

    fn step(&mut self) -> Result<Vec<(u64, StepToken)>, String> {
        std::thread::sleep(Duration::from_millis(2));
        self.log.lock().unwrap().batch_sizes.push(self.seqs.len());
        let mut out = Vec::new();
        for (id, s) in &mut self.seqs {
            s.generated += 1;
            let eos = s.eos_after == Some(s.generated);
            let token = if eos {
                EOS
            } else {
                10 + (s.generated as u32 % 20)
            };
            let finished = if eos {
                Some(FinishReason::Stop)
            } else if s.generated >= s.max {
                Some(FinishReason::Length)
            } else {
                None
            };
            let logprobs = s.logprobs.map(|k| {
                (
                    -0.1,
                    (0..k as u32)
                        .map(|i| (token + i, -0.1 - i as f32))
                        .collect(),
                )
            });
            out.push((
                *id,
                StepToken {
                    token: Some(token),
                    logprobs,
                    finished,
                    is_eos: eos,
                    error: None,
                },
            ));
        }
        self.seqs
            .retain(|(_, s)| !(s.eos_after == Some(s.generated) || s.generated >= s.max));
        Ok(out)
    }

    fn cancel(&mut self, id: u64) {
        self.seqs.retain(|(i, _)| *i != id);
    }

    fn cache_blocks(&self) -> (usize, usize) {
        (
            self.seqs
                .iter()
                .map(|(_, s)| blocks(s.prompt_len + s.generated))
                .sum(),
            1024,
        )
    }
}

struct MockCodec;

impl TextCodec for MockCodec {
    fn encode(&self, p: &Prompt) -> Result<Vec<u32>, SubmitError> {
        let words = |t: &str| -> Vec<u32> {
            t.split_whitespace()
                .map(|w| {
                    w.strip_prefix('w')
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(5)
                })
                .collect()
        };
        Ok(match p {
            Prompt::Text(t) => words(t),
            Prompt::Tokens(t) => t.clone(),
            Prompt::Chat(m) => m.iter().flat_map(|m| words(&m.content)).collect(),
        })
    }
    fn decode(&self, ids: &[u32]) -> String {
        ids.iter()
            .filter(|&&i| i != EOS)
            .map(|i| format!(" w{i}"))
            .collect()
    }
    fn token_bytes(&self, id: u32) -> Vec<u8> {
        format!(" w{id}").into_bytes()
    }
    fn vocab_size(&self) -> usize {
        64
    }
}

async fn serve(
    max_running: usize,
    max_queue: usize,
) -> (ServerHandle, Arc<SchedulerBackend>, Arc<Mutex<Log>>) {
    let log = Arc::new(Mutex::new(Log::default()));
    let engine = MockEngine {
        seqs: Vec::new(),
        next: 0,
        log: log.clone(),
    };
    let cfg = SchedulerConfig {
        model: ModelInfo {
            id: "mock".into(),
            created: 0,
            owned_by: "test".into(),
            context_length: 4096,
        },
        max_running,
        max_queue,
    };
    let backend = Arc::new(SchedulerBackend::start(engine, Arc::new(MockCodec), cfg));
    let server = Server::bind(
        "127.0.0.1:0".parse::<SocketAddr>().unwrap(),
        backend.clone(),
        ServerConfig::default(),
    )
    .await
    .unwrap();
    (server.spawn().unwrap(), backend, log)
}

fn chat(prompt: &str, max_tokens: usize, stream: bool) -> Value {
    json!({"model": "mock", "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
           "stream": stream, "stream_options": if stream { json!({"include_usage": true}) } else { Value::Null }})
}

fn settled(b: &SchedulerBackend) -> bool {
    let s = b.stats();
    s.running == 0 && s.queued == 0 && s.cache_blocks_used == 0
}

#[tokio::test]
async fn new_sequence_joins_running_batch() {
    let (h, backend, log) = serve(4, 8).await;
    // A: long stream. Read part of it, then run B to completion while A is still going.
    let resp = send(
        h.addr,
        request(
            "POST",
            "/v1/chat/completions",
            Some(&chat("w3 w4", 400, true).to_string()),
            None,
        ),
    )
    .await;
    let mut body = resp.into_body();
    let mut got = 0;
    while got < 5 {
        let f = body.frame().await.unwrap().unwrap();
        if f.is_data() {
            got += 1;
        }
    }
    let (st, v) = post(h.addr, "/v1/chat/completions", &chat("w7", 5, false)).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v["choices"][0]["message"]["content"],
        " w11 w12 w13 w14 w15"
    );
    assert_eq!(v["usage"]["completion_tokens"], 5);
    assert!(!body.is_end_stream(), "A is still running while B finished");
    assert!(
        log.lock().unwrap().batch_sizes.contains(&2),
        "B joined A's batch"
    );
    let rest = body.collect().await.unwrap().to_bytes();
    let events = sse_events(&String::from_utf8_lossy(&rest));
    assert_eq!(events.last().unwrap(), "[DONE]");
    let usage: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(usage["usage"]["completion_tokens"], 400);
    assert!(eventually(Duration::from_secs(2), || settled(&backend)).await);
}

#[tokio::test]
async fn eos_stop_strings_and_logprobs() {
    let (h, backend, _) = serve(4, 8).await;
    let (_, v) = post(h.addr, "/v1/chat/completions", &chat("w2 w9", 50, false)).await;
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        v["choices"][0]["message"]["content"], " w11 w12",
        "EOS is not shown"
    );
    assert_eq!(v["usage"]["completion_tokens"], 3, "EOS is counted");
    let mut b = chat("w9", 50, false);
    b["stop"] = json!("w13 w");
    b["logprobs"] = json!(true);
    b["top_logprobs"] = json!(2);
    let (_, v) = post(h.addr, "/v1/chat/completions", &b).await;
    assert_eq!(v["choices"][0]["message"]["content"], " w11 w12 ");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["choices"][0]["logprobs"]["content"][0]["token"], " w11");
    assert_eq!(
        v["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert!(
        eventually(Duration::from_secs(2), || settled(&backend)).await,
        "stop string cancelled the engine sequence"
    );
    let (st, v) = post(
        h.addr,
        "/v1/chat/completions",
        &json!({"model": "mock", "messages": [{"role": "user", "content": "w1 ".repeat(5000)}]}),
    )
    .await;
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["error"]["code"], "context_length_exceeded");
}

#[tokio::test]
async fn disconnect_cancels_in_engine() {
    let (h, backend, _) = serve(4, 8).await;
    let resp = send(
        h.addr,
        request(
            "POST",
            "/v1/chat/completions",
            Some(&chat("w3", 4000, true).to_string()),
            None,
        ),
    )
    .await;
    let mut body = resp.into_body();
    let _ = body.frame().await;
    let _ = body.frame().await;
    assert_eq!(backend.stats().running, 1);
    drop(body);
    assert!(
        eventually(Duration::from_secs(2), || settled(&backend)).await,
        "{:?}",
        backend.stats()
    );
}

#[tokio::test]
async fn full_queue_is_429() {
    let (h, backend, _) = serve(1, 1).await;
    let long = chat("w3", 3000, true).to_string();
    let a = send(
        h.addr,
        request("POST", "/v1/chat/completions", Some(&long), None),
    )
    .await;
    let b = send(
        h.addr,
        request("POST", "/v1/chat/completions", Some(&long), None),
    )
    .await;
    assert!(
        eventually(Duration::from_secs(2), || {
            let s = backend.stats();
            s.running == 1 && s.queued == 1
        })
        .await
    );
    let (st, v) = call(h.addr, "POST", "/v1/chat/completions", Some(&long), None).await;
    assert_eq!(st, 429, "{v}");
    drop(a);
    drop(b);
    assert!(
        eventually(Duration::from_secs(2), || settled(&backend)).await,
        "{:?}",
        backend.stats()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_32_streaming_clients_through_scheduler() {
    let (h, backend, log) = serve(8, 64).await;
    let mut tasks = Vec::new();
    for i in 0..32 {
        let addr = h.addr;
        tasks.push(tokio::spawn(async move {
            let (st, events) = stream(
                addr,
                "/v1/chat/completions",
                &chat(&format!("w{}", 3 + i % 50), 20, true),
            )
            .await;
            let chunks = clean_stream_chunks("client", st, &events);
            let usage = chunks.last().expect("a usage chunk");
            assert_eq!(usage["usage"]["completion_tokens"], 20);
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("timed out")
            .expect("client failed");
    }
    assert!(
        eventually(Duration::from_secs(2), || settled(&backend)).await,
        "{:?}",
        backend.stats()
    );
    let max = log
        .lock()
        .unwrap()
        .batch_sizes
        .iter()
        .copied()
        .max()
        .unwrap();
    assert_eq!(max, 8, "batch filled to --max-sequences, never beyond");
}

/// The `n` choices of one request are admitted at the same token boundary, so every step runs
/// all of them (with the choices submitted one by one, the first could run a step alone). Twenty
/// requests of `n = 4`, three tokens each: every logged step has a batch of exactly 4.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn choices_of_one_request_start_together() {
    let (h, backend, log) = serve(8, 8).await;
    for i in 0..20 {
        log.lock().unwrap().batch_sizes.clear();
        let mut body = chat("w3 w4", 3, false);
        body["n"] = json!(4);
        let (st, v) = post(h.addr, "/v1/chat/completions", &body).await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["choices"].as_array().unwrap().len(), 4);
        assert!(eventually(Duration::from_secs(5), || settled(&backend)).await);
        let sizes = log.lock().unwrap().batch_sizes.clone();
        assert_eq!(sizes, [4, 4, 4], "request {i}");
    }
    h.shutdown();
}
