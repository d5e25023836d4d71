//! Queue limits, cancellation on disconnect, timeouts and a bounded loopback load test.

mod common;

use std::time::{Duration, Instant};

use common::*;
use http_body_util::BodyExt;
use pocket_server::fake::FakeConfig;
use pocket_server::{InferenceBackend, ServerConfig};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn slow(max_running: usize, max_queue: usize, delay_ms: u64) -> FakeConfig {
    FakeConfig {
        max_running,
        max_queue,
        token_delay: Duration::from_millis(delay_ms),
        context_length: 4096,
        ..FakeConfig::default()
    }
}

fn long_chat(stream: bool) -> String {
    // logit_bias keeps the fake from ending early: it always emits token 1.
    json!({"model": "fake-model", "messages": [{"role": "user", "content": "go"}],
           "max_tokens": 2000, "stream": stream, "logit_bias": {"1": 100}})
    .to_string()
}

/// Sends a raw request and reads until `want` bytes of response arrived; returns the socket.
async fn raw_request(addr: std::net::SocketAddr, body: &str, want: usize) -> tokio::net::TcpStream {
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    sock.write_all(req.as_bytes()).await.unwrap();
    let mut got = 0;
    let mut buf = [0u8; 4096];
    while got < want {
        let n = sock.read(&mut buf).await.unwrap();
        assert!(n > 0, "server closed early");
        got += n;
    }
    sock
}

#[tokio::test]
async fn queue_full_is_429_and_others_still_served() {
    let s = start(slow(1, 1, 20), ServerConfig::default()).await;
    let a = s.handle.addr;
    let body = long_chat(true);
    let _running = raw_request(a, &body, 1).await;
    assert!(eventually(Duration::from_secs(5), || s.backend.stats().running == 1).await);
    let _queued = raw_request(a, &body, 1).await;
    assert!(eventually(Duration::from_secs(5), || s.backend.stats().queued == 1).await);
    let (st, v) = call(a, "POST", "/v1/chat/completions", Some(&body), None).await;
    assert_eq!(st, 429, "{v}");
    assert_eq!(v["error"]["type"], "rate_limit_error");
    let (st, m) = call(a, "GET", "/metrics", None, None).await;
    assert_eq!(st, 200);
    assert!(m.as_str().unwrap().contains("pocket_queue_depth 1"));
    drop(_running);
    drop(_queued);
    assert!(
        eventually(Duration::from_secs(5), || {
            let st = s.backend.stats();
            st.running == 0 && st.queued == 0 && st.cache_blocks_used == 0
        })
        .await,
        "{:?}",
        s.backend.stats()
    );
    let (st, _) = call(a, "POST", "/v1/chat/completions",
        Some(&json!({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).to_string()), None).await;
    assert_eq!(st, 200);
}

#[tokio::test]
async fn stream_disconnect_cancels_and_frees_cache() {
    let s = start(slow(4, 4, 10), ServerConfig::default()).await;
    let sock = raw_request(s.handle.addr, &long_chat(true), 400).await;
    let st = s.backend.stats();
    assert_eq!(st.running, 1);
    assert!(st.cache_blocks_used > 0);
    drop(sock);
    let t = Instant::now();
    assert!(
        eventually(Duration::from_secs(2), || {
            let st = s.backend.stats();
            st.running == 0 && st.cache_blocks_used == 0
        })
        .await,
        "{:?}",
        s.backend.stats()
    );
    // 2000 tokens at 10 ms would take 20 s: the sequence was cancelled, not finished.
    assert!(t.elapsed() < Duration::from_secs(2));
    let (_, m) = call(s.handle.addr, "GET", "/metrics", None, None).await;
    assert!(
        m.as_str().unwrap().contains("pocket_cancelled_total 1"),
        "{m}"
    );
}

#[tokio::test]
async fn blocking_request_disconnect_cancels() {
    let s = start(slow(4, 4, 10), ServerConfig::default()).await;
    let mut sock = tokio::net::TcpStream::connect(s.handle.addr).await.unwrap();
    let body = long_chat(false);
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    sock.write_all(req.as_bytes()).await.unwrap();
    assert!(eventually(Duration::from_secs(2), || s.backend.stats().running == 1).await);
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(sock);
    assert!(
        eventually(Duration::from_secs(2), || {
            let st = s.backend.stats();
            st.running == 0 && st.cache_blocks_used == 0
        })
        .await,
        "{:?}",
        s.backend.stats()
    );
}

#[tokio::test]
async fn request_timeout() {
    let cfg = ServerConfig {
        request_timeout: Duration::from_millis(200),
        ..ServerConfig::default()
    };
    let s = start(slow(4, 4, 10), cfg).await;
    let (st, v) = call(
        s.handle.addr,
        "POST",
        "/v1/chat/completions",
        Some(&long_chat(false)),
        None,
    )
    .await;
    assert_eq!(st, 504, "{v}");
    assert_eq!(v["error"]["code"], "timeout");
    // Streaming: the stream ends with an error event then [DONE].
    let body: Value = serde_json::from_str(&long_chat(true)).unwrap();
    let (st, events) = stream(s.handle.addr, "/v1/chat/completions", &body).await;
    assert_eq!(st, 200);
    assert_eq!(events.last().unwrap(), "[DONE]");
    let err: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(err["error"]["code"], "timeout");
    assert!(
        eventually(Duration::from_secs(2), || {
            let st = s.backend.stats();
            st.running == 0 && st.cache_blocks_used == 0
        })
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_32_streaming_clients() {
    let s = start(slow(8, 64, 2), ServerConfig::default()).await;
    let a = s.handle.addr;
    let t = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..32 {
        tasks.push(tokio::spawn(async move {
            let body = json!({"model": "fake-model", "max_tokens": 24, "stream": true,
                "stream_options": {"include_usage": true}, "logit_bias": {"3": 100},
                "messages": [{"role": "user", "content": format!("client {i}")}]});
            let resp = send(
                a,
                request(
                    "POST",
                    "/v1/chat/completions",
                    Some(&body.to_string()),
                    None,
                ),
            )
            .await;
            assert_eq!(resp.status(), 200);
            let bytes = resp.into_body().collect().await.unwrap().to_bytes();
            let events = sse_events(&String::from_utf8_lossy(&bytes));
            let chunks = clean_stream_chunks(&format!("client {i}"), 200, &events);
            let usage = chunks.last().expect("a usage chunk");
            assert_eq!(usage["usage"]["completion_tokens"], 24, "client {i}");
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("load test client timed out")
            .expect("client failed");
    }
    assert!(t.elapsed() < Duration::from_secs(60));
    assert!(
        eventually(Duration::from_secs(2), || {
            let st = s.backend.stats();
            st.running == 0 && st.queued == 0 && st.cache_blocks_used == 0
        })
        .await,
        "{:?}",
        s.backend.stats()
    );
    let (_, m) = call(a, "GET", "/metrics", None, None).await;
    let m = m.as_str().unwrap().to_string();
    assert!(
        m.contains("pocket_requests_total{endpoint=\"chat\",status=\"200\"} 32"),
        "{m}"
    );
    assert!(m.contains("pocket_completion_tokens_total 768"), "{m}");
}
