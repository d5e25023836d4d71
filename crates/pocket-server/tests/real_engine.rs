//! The server over the REAL pocket-models Engine, on a loopback socket.
//!
//! Always: the tiny random-weight llama fixture (`crates/models/llama/tests/data/llama`, no
//! tokenizer) with token-id prompts; its codec shows each token as ` <id>` so stop strings,
//! streaming text and logprob tokens can be checked.
//! With `POCKET_REAL_MODELS=1` (set by scripts/test): SmolLM2-135M-Instruct through the model store
//! (chat, completions, streaming, n=2, stop, seeds, logprobs, and the official `openai` client
//! suite when `POCKET_PYTHON` is set).

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use common::{clean_stream_chunks, post, real_models, stream, SMOL};
use pocket_server::engine_backend::{self, EngineOptions};
use pocket_server::scheduler::SchedulerBackend;
use pocket_server::{InferenceBackend, Server, ServerConfig, ServerHandle};
use serde_json::{json, Value};

struct Real {
    handle: ServerHandle,
    backend: Arc<SchedulerBackend>,
}

impl Real {
    fn addr(&self) -> SocketAddr {
        self.handle.addr
    }

    /// Waits until nothing runs or waits and every cache block is free; returns the stats.
    async fn settled(&self) -> pocket_server::BackendStats {
        for _ in 0..500 {
            let st = self.backend.stats();
            if st.running == 0 && st.queued == 0 && st.cache_blocks_used == 0 {
                return st;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.backend.stats()
    }
}

impl Drop for Real {
    fn drop(&mut self) {
        self.handle.shutdown();
    }
}

async fn serve(backend: SchedulerBackend, api_key: Option<&str>) -> Real {
    let backend = Arc::new(backend);
    let server = Server::bind(
        "127.0.0.1:0".parse().unwrap(),
        backend.clone(),
        ServerConfig {
            api_key: api_key.map(str::to_string),
            ..ServerConfig::default()
        },
    )
    .await
    .expect("bind");
    Real {
        handle: server.spawn().expect("spawn"),
        backend,
    }
}

const TINY: &str = "tiny-llama";

async fn tiny(max_sequences: usize) -> Real {
    serve(common::tiny_llama(TINY, 256, max_sequences), None).await
}

fn text(v: &Value, i: usize) -> String {
    v["choices"][i]["text"].as_str().expect("text").to_string()
}

/// Concatenated completion text and finish reason of a streamed completion, with checks on the
/// event order: content chunks, one finish chunk, the usage chunk, `[DONE]`.
fn streamed_completion(events: &[String]) -> (String, String, u64) {
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "{events:?}"
    );
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).expect("chunk json"))
        .collect();
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]), "usage chunk last: {usage}");
    let mut out = String::new();
    let mut finish = None;
    for c in &chunks[..chunks.len() - 1] {
        assert_eq!(c["object"], "text_completion");
        assert!(finish.is_none(), "nothing after the finish chunk: {c}");
        out.push_str(c["choices"][0]["text"].as_str().unwrap());
        if let Some(f) = c["choices"][0]["finish_reason"].as_str() {
            finish = Some(f.to_string());
        }
    }
    let n = usage["usage"]["completion_tokens"].as_u64().unwrap();
    (out, finish.expect("a finish chunk"), n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_llama_completions_stream_n_stop_seed_logprobs() {
    let s = tiny(4).await;
    let addr = s.addr();
    let prompt = json!([1, 17, 42, 99, 5]);
    let greedy = json!({"model": TINY, "prompt": prompt, "max_tokens": 12, "temperature": 0});

    // A plain completion: 12 tokens, each " <id>", finish "length", usage counted.
    let (st, a) = post(addr, "/v1/completions", &greedy).await;
    assert_eq!(st, 200, "{a}");
    let ga = text(&a, 0);
    assert_eq!(ga.split_whitespace().count(), 12, "{ga:?}");
    assert_eq!(a["choices"][0]["finish_reason"], "length");
    assert_eq!(a["usage"]["prompt_tokens"], 5);
    assert_eq!(a["usage"]["completion_tokens"], 12);
    // Greedy is deterministic.
    let (_, b) = post(addr, "/v1/completions", &greedy).await;
    assert_eq!(text(&b, 0), ga);

    // Streaming gives the same text, in order, ending with finish, usage, [DONE].
    let mut sreq = greedy.clone();
    sreq["stream"] = json!(true);
    sreq["stream_options"] = json!({"include_usage": true});
    let (st, events) = stream(addr, "/v1/completions", &sreq).await;
    assert_eq!(st, 200);
    let (streamed, finish, n) = streamed_completion(&events);
    assert_eq!(streamed, ga);
    assert_eq!((finish.as_str(), n), ("length", 12));

    // Stop string: two consecutive greedy tokens; the text ends just before them.
    let words: Vec<&str> = ga.split_whitespace().collect();
    let stop = format!(" {} {}", words[3], words[4]);
    let cut = ga.find(&stop).unwrap();
    let mut req = greedy.clone();
    req["stop"] = json!([stop]);
    let (st, v) = post(addr, "/v1/completions", &req).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(text(&v, 0), ga[..cut], "stop {stop:?} in {ga:?}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");

    // n=2 with a seed: two different choices, the whole response reproducible.
    let sampled = json!({"model": TINY, "prompt": prompt, "max_tokens": 12, "temperature": 1.0,
                         "n": 2, "seed": 1234});
    let (st, x) = post(addr, "/v1/completions", &sampled).await;
    assert_eq!(st, 200, "{x}");
    let (_, y) = post(addr, "/v1/completions", &sampled).await;
    assert_eq!(x["choices"].as_array().unwrap().len(), 2);
    assert_eq!(x["choices"][1]["index"], 1);
    assert_eq!((text(&x, 0), text(&x, 1)), (text(&y, 0), text(&y, 1)));
    assert_ne!(text(&x, 0), text(&x, 1), "seed + i per choice");
    assert_eq!(x["usage"]["completion_tokens"], 24);
    let mut other = sampled.clone();
    other["seed"] = json!(99);
    let (_, z) = post(addr, "/v1/completions", &other).await;
    assert_ne!(text(&z, 0), text(&x, 0), "another seed, another sample");

    // Logprobs with alternatives from the real sampler: greedy picks the best one.
    let mut lreq = greedy.clone();
    lreq["logprobs"] = json!(3);
    let (st, l) = post(addr, "/v1/completions", &lreq).await;
    assert_eq!(st, 200, "{l}");
    let lp = &l["choices"][0]["logprobs"];
    let chosen = lp["token_logprobs"].as_array().unwrap();
    let tops = lp["top_logprobs"].as_array().unwrap();
    assert_eq!((chosen.len(), tops.len()), (12, 12));
    for (c, t) in chosen.iter().zip(tops) {
        let t = t.as_object().unwrap();
        assert_eq!(t.len(), 3, "{t:?}");
        let best = t
            .values()
            .map(|v| v.as_f64().unwrap())
            .fold(f64::MIN, f64::max);
        let c = c.as_f64().unwrap();
        assert!(
            c <= 0.0 && (c - best).abs() < 1e-4,
            "chosen {c} best {best}"
        );
    }
    assert_eq!(lp["tokens"].as_array().unwrap().concat_text(), ga);

    let st = s.settled().await;
    assert_eq!((st.running, st.queued, st.cache_blocks_used), (0, 0, 0));
    assert!(st.cache_blocks_total > 0);
}

trait ConcatText {
    fn concat_text(&self) -> String;
}

impl ConcatText for Vec<Value> {
    fn concat_text(&self) -> String {
        self.iter().map(|v| v.as_str().unwrap()).collect()
    }
}

/// 12 streaming clients against a batch of 4 (so 8 wait in the queue and join at token
/// boundaries): all finish, greedy text equals the one-at-a-time answer, every block is freed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_llama_concurrent_streams_free_every_block() {
    let s = tiny(4).await;
    let addr = s.addr();
    let prompts: Vec<Value> = (0..12u32)
        .map(|i| json!([1, (i * 7) % 128, (i * 13 + 3) % 128]))
        .collect();
    let mut solo = Vec::new();
    for p in &prompts {
        let (st, v) = post(
            addr,
            "/v1/completions",
            &json!({"model": TINY, "prompt": p, "max_tokens": 16, "temperature": 0}),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        solo.push(text(&v, 0));
    }
    let tasks: Vec<_> = prompts
        .iter()
        .map(|p| {
            let body = json!({"model": TINY, "prompt": p, "max_tokens": 16, "temperature": 0,
                              "stream": true, "stream_options": {"include_usage": true}});
            tokio::spawn(async move { stream(addr, "/v1/completions", &body).await })
        })
        .collect();
    for (i, t) in tasks.into_iter().enumerate() {
        let (st, events) = tokio::time::timeout(Duration::from_secs(300), t)
            .await
            .expect("stream finished in time")
            .unwrap();
        assert_eq!(st, 200);
        let (out, finish, n) = streamed_completion(&events);
        assert_eq!((finish.as_str(), n), ("length", 16), "request {i}");
        assert_eq!(out, solo[i], "batched greedy = solo greedy, request {i}");
    }
    let st = s.settled().await;
    assert_eq!((st.running, st.queued, st.cache_blocks_used), (0, 0, 0));

    // A client that goes away mid-stream frees its blocks too.
    let body = json!({"model": TINY, "prompt": [1, 2, 3], "max_tokens": 200, "stream": true});
    let resp = common::send(
        addr,
        common::request("POST", "/v1/completions", Some(&body.to_string()), None),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    use http_body_util::BodyExt;
    let _first = body.frame().await;
    assert!(s.backend.stats().cache_blocks_used > 0 || s.backend.stats().running > 0);
    drop(body);
    let st = s.settled().await;
    assert_eq!((st.running, st.queued, st.cache_blocks_used), (0, 0, 0));
}

async fn smollm2(api_key: Option<&str>) -> Real {
    let b = engine_backend::start(&EngineOptions {
        id: None,
        model: SMOL.into(),
        device: pocket_kernels::DeviceKind::Cpu,
        kv_cache: None,
        ctx_size: Some(512),
        max_sequences: 8,
        max_queue: 64,
    })
    .expect("SmolLM2 through the model store");
    serve(b, api_key).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smollm2_chat_completions_stream_n_stop_seed_logprobs() {
    if !real_models() {
        eprintln!("skipping: set POCKET_REAL_MODELS=1");
        return;
    }
    let s = smollm2(None).await;
    let addr = s.addr();

    let (st, v) = post(
        addr,
        "/v1/completions",
        &json!({"model": SMOL, "prompt": "The capital of France is", "max_tokens": 4,
                "temperature": 0}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert!(text(&v, 0).contains("Paris"), "{v}");

    let msgs = json!([{"role": "user", "content": "What is the capital of France?"}]);
    let chat = json!({"model": SMOL, "messages": msgs, "max_tokens": 12, "temperature": 0});
    let (st, v) = post(addr, "/v1/chat/completions", &chat).await;
    assert_eq!(st, 200, "{v}");
    let answer = v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    // The 135M Q4_1 model does not reliably answer "Paris" here (greedy gave
    // "L'Étoile, la Marseillaise," when this was written), so only the shape is checked.
    assert!(!answer.trim().is_empty(), "{v}");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");

    // Streaming chat: role delta first, content deltas, finish chunk, usage chunk, [DONE].
    let mut sreq = chat.clone();
    sreq["stream"] = json!(true);
    sreq["stream_options"] = json!({"include_usage": true});
    let (st, events) = stream(addr, "/v1/chat/completions", &sreq).await;
    assert_eq!(st, 200);
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    let fin = &chunks[chunks.len() - 2];
    assert!(fin["choices"][0]["finish_reason"].is_string(), "{fin}");
    let streamed: String = chunks[1..chunks.len() - 2]
        .iter()
        .map(|c| c["choices"][0]["delta"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(streamed, answer);
    assert_eq!(
        usage["usage"]["completion_tokens"],
        v["usage"]["completion_tokens"]
    );

    // Stop string (the answer's second word): the greedy answer cut before it.
    let word = answer
        .split_whitespace()
        .nth(1)
        .expect("two words")
        .to_string();
    let cut_at = answer.find(&word).unwrap();
    let mut req = chat.clone();
    req["stop"] = json!([word]);
    let (_, v) = post(addr, "/v1/chat/completions", &req).await;
    assert_eq!(v["choices"][0]["message"]["content"], answer[..cut_at]);
    assert_eq!(v["choices"][0]["finish_reason"], "stop");

    // n=2 with a seed: reproducible.
    let sampled = json!({"model": SMOL, "messages": msgs, "max_tokens": 10, "temperature": 1.0,
                         "n": 2, "seed": 7});
    let (st, x) = post(addr, "/v1/chat/completions", &sampled).await;
    assert_eq!(st, 200, "{x}");
    let (_, y) = post(addr, "/v1/chat/completions", &sampled).await;
    assert_eq!(x["choices"].as_array().unwrap().len(), 2);
    for i in 0..2 {
        assert_eq!(
            x["choices"][i]["message"]["content"],
            y["choices"][i]["message"]["content"]
        );
    }

    // Chat logprobs with 3 alternatives each.
    let mut lreq = chat.clone();
    lreq["max_tokens"] = json!(4);
    lreq["logprobs"] = json!(true);
    lreq["top_logprobs"] = json!(3);
    let (st, l) = post(addr, "/v1/chat/completions", &lreq).await;
    assert_eq!(st, 200, "{l}");
    for e in l["choices"][0]["logprobs"]["content"].as_array().unwrap() {
        let tops = e["top_logprobs"].as_array().unwrap();
        assert_eq!(tops.len(), 3, "{e}");
        let best = tops
            .iter()
            .map(|t| t["logprob"].as_f64().unwrap())
            .fold(f64::MIN, f64::max);
        assert!((e["logprob"].as_f64().unwrap() - best).abs() < 1e-4, "{e}");
    }

    let st = s.settled().await;
    assert_eq!((st.running, st.queued, st.cache_blocks_used), (0, 0, 0));
}

/// 8 concurrent streaming chats on SmolLM2 (the full batch), then every block is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smollm2_concurrent_streams_free_every_block() {
    if !real_models() {
        eprintln!("skipping: set POCKET_REAL_MODELS=1");
        return;
    }
    let s = smollm2(None).await;
    let addr = s.addr();
    let tasks: Vec<_> = (0..10)
        .map(|i| {
            let body = json!({"model": SMOL, "max_tokens": 8, "stream": true, "seed": i,
                "messages": [{"role": "user", "content": format!("Say a word about {i}.")}]});
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
    let st = s.settled().await;
    assert_eq!((st.running, st.queued, st.cache_blocks_used), (0, 0, 0));
}

/// The official `openai` Python client suite against SmolLM2 (logprobs with alternatives
/// included). Needs `POCKET_REAL_MODELS=1` and `POCKET_PYTHON` with `openai`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smollm2_official_openai_client_suite() {
    if !real_models() {
        eprintln!("skipping: set POCKET_REAL_MODELS=1");
        return;
    }
    let Some(py) = std::env::var("POCKET_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
    else {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(
            !ci,
            "POCKET_PYTHON is not set under CI: run through scripts/test"
        );
        eprintln!("skipping: POCKET_PYTHON not set");
        return;
    };
    let s = smollm2(Some("suite-key")).await;
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/openai_client");
    let child = tokio::process::Command::new(&py)
        .args(["-m", "unittest", "discover", "-v", "-s"])
        .arg(&dir)
        .env("POCKET_BASE_URL", format!("http://{}/v1", s.addr()))
        .env("POCKET_API_KEY", "suite-key")
        .env("POCKET_MODEL", SMOL)
        .env("NO_PROXY", "*")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn python");
    let out = tokio::time::timeout(Duration::from_secs(900), child.wait_with_output())
        .await
        .expect("python suite timed out")
        .expect("python suite");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    assert!(out.status.success(), "openai client suite failed:\n{text}");
    let st = s.settled().await;
    assert_eq!((st.running, st.queued, st.cache_blocks_used), (0, 0, 0));
}
