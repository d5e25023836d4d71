//! Test helpers: start a server on a loopback port and talk HTTP/1.1 to it with hyper's client.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use pocket_server::fake::{FakeBackend, FakeConfig};
use pocket_server::{Server, ServerConfig, ServerHandle};
use serde_json::Value;
use tokio::net::TcpStream;

/// Whether the tests on real checkpoints run (`POCKET_REAL_MODELS=1`).
pub fn real_models() -> bool {
    std::env::var("POCKET_REAL_MODELS").is_ok_and(|v| v == "1")
}

/// The real checkpoint the engine-backed tests serve.
pub const SMOL: &str = "smollm2-135m-instruct";

/// Asserts that a streamed reply ended cleanly (status 200, last event `[DONE]`, no error event)
/// and returns its events before `[DONE]` parsed as JSON chunks. `who` names the client in failures.
pub fn clean_stream_chunks(who: &str, status: u16, events: &[String]) -> Vec<Value> {
    assert_eq!(status, 200, "{who}: {events:?}");
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "{who}: {events:?}"
    );
    assert!(
        !events.iter().any(|e| e.contains("\"error\"")),
        "{who}: {events:?}"
    );
    events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).expect("chunk json"))
        .collect()
}

/// A running test server and its backend.
pub struct TestServer {
    pub handle: ServerHandle,
    pub backend: FakeBackend,
}

impl TestServer {
    /// The backend's counters, after in-flight cancellations settle.
    pub fn backend_stats(&self) -> pocket_server::BackendStats {
        use pocket_server::InferenceBackend;
        for _ in 0..200 {
            let st = self.backend.stats();
            if st.running == 0 && st.queued == 0 && st.cache_blocks_used == 0 {
                return st;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.backend.stats()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.handle.shutdown();
    }
}

/// Starts a fake-backed server on 127.0.0.1 with a free port.
pub async fn start(fake: FakeConfig, config: ServerConfig) -> TestServer {
    let backend = FakeBackend::new(fake);
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let server = Server::bind(addr, Arc::new(backend.clone()), config)
        .await
        .expect("bind");
    TestServer {
        handle: server.spawn().expect("spawn"),
        backend,
    }
}

/// Opens one connection and sends one request.
pub async fn send(addr: SocketAddr, req: Request<Full<Bytes>>) -> Response<Incoming> {
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (mut sender, conn) = http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    sender.send_request(req).await.expect("send")
}

/// Builds a request with an optional JSON body and bearer key.
pub fn request(
    method: &str,
    path: &str,
    body: Option<&str>,
    key: Option<&str>,
) -> Request<Full<Bytes>> {
    let mut b = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost");
    if body.is_some() {
        b = b.header("content-type", "application/json");
    }
    if let Some(k) = key {
        b = b.header("authorization", format!("Bearer {k}"));
    }
    b.body(Full::new(Bytes::from(body.unwrap_or("").to_string())))
        .unwrap()
}

/// Sends and returns the status and the body parsed as JSON (or as a string when not JSON).
pub async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    key: Option<&str>,
) -> (u16, Value) {
    let resp = send(addr, request(method, path, body, key)).await;
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    let v = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, v)
}

/// POSTs JSON without a key.
pub async fn post(addr: SocketAddr, path: &str, body: &Value) -> (u16, Value) {
    call(addr, "POST", path, Some(&body.to_string()), None).await
}

/// Streams a POST and returns every SSE `data:` payload in order (including `[DONE]`).
pub async fn stream(addr: SocketAddr, path: &str, body: &Value) -> (u16, Vec<String>) {
    let resp = send(addr, request("POST", path, Some(&body.to_string()), None)).await;
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    (status, sse_events(&String::from_utf8_lossy(&bytes)))
}

/// Splits an SSE text into its `data:` payloads.
pub fn sse_events(text: &str) -> Vec<String> {
    text.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .map(str::to_string)
        .collect()
}

/// Waits until `f` holds, up to `within`.
pub async fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < end {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    f()
}

/// Token ids as text for a model without a tokenizer: id 7 is " 7"; a text prompt is
/// whitespace-separated ids.
pub struct IdCodec {
    pub vocab: usize,
}

impl pocket_server::scheduler::TextCodec for IdCodec {
    fn encode(
        &self,
        prompt: &pocket_server::Prompt,
    ) -> Result<Vec<u32>, pocket_server::SubmitError> {
        use pocket_server::{Prompt, SubmitError};
        let bad = |m: &str| SubmitError::Invalid {
            param: Some("prompt".into()),
            message: m.to_string(),
        };
        match prompt {
            Prompt::Tokens(t) => Ok(t.clone()),
            Prompt::Text(t) => t
                .split_whitespace()
                .map(|w| w.parse().map_err(|_| bad("ids only")))
                .collect(),
            Prompt::Chat(_) => Err(bad("no chat template")),
        }
    }
    fn decode(&self, ids: &[u32]) -> String {
        ids.iter().map(|i| format!(" {i}")).collect()
    }
    fn token_bytes(&self, id: u32) -> Vec<u8> {
        format!(" {id}").into_bytes()
    }
    fn vocab_size(&self) -> usize {
        self.vocab
    }
}

/// The tiny random-weight llama fixture (no tokenizer) behind a scheduler, served as `id`, with
/// sequences of `max_seq` tokens and `max_sequences` running at once.
pub fn tiny_llama(
    id: &str,
    max_seq: usize,
    max_sequences: usize,
) -> pocket_server::scheduler::SchedulerBackend {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../models/llama/tests/data/llama");
    let engine = pocket_models::Engine::builder()
        .model(dir.to_string_lossy().into_owned())
        .max_seq_len(max_seq)
        .cache_tokens(max_seq * max_sequences)
        .build()
        .expect("tiny engine");
    assert!(engine.tokenizer().is_none(), "the fixture has no tokenizer");
    let vocab = engine.model().info().vocab_size;
    pocket_server::engine_backend::serve_engine(
        engine,
        Arc::new(IdCodec { vocab }),
        id,
        max_sequences,
        64,
    )
}

/// Starts a server over any backend on a free loopback port.
pub async fn serve_backend(
    backend: Arc<dyn pocket_server::InferenceBackend>,
    config: ServerConfig,
) -> ServerHandle {
    let server = Server::bind("127.0.0.1:0".parse().unwrap(), backend, config)
        .await
        .expect("bind");
    server.spawn().expect("spawn")
}

/// The value of an unlabelled (or exactly labelled) sample in Prometheus text, e.g.
/// `metric(text, "pocket_cache_blocks_used")` or `metric(text, "x{model=\"a\"}")`.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}
