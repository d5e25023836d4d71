//! Every client error gets an OpenAI-style error body with the right status, and the server keeps
//! serving afterwards.

mod common;

use common::*;
use pocket_server::fake::FakeConfig;
use pocket_server::ServerConfig;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn server() -> TestServer {
    let cfg = ServerConfig {
        max_body_bytes: 64 * 1024,
        ..ServerConfig::default()
    };
    start(FakeConfig::default(), cfg).await
}

fn assert_error(status: u16, v: &Value, want: u16, param: Option<&str>, needle: &str) {
    assert_eq!(status, want, "{v}");
    let e = &v["error"];
    assert!(e["message"].as_str().unwrap().contains(needle), "{v}");
    assert!(e["type"].is_string(), "{v}");
    assert!(e.get("code").is_some() && e.get("param").is_some(), "{v}");
    if let Some(p) = param {
        assert_eq!(e["param"], p, "{v}");
    }
}

fn msgs() -> Value {
    json!([{"role": "user", "content": "hi"}])
}

#[tokio::test]
async fn malformed_and_wrong_types() {
    let s = server().await;
    let a = s.handle.addr;
    let (st, v) = call(
        a,
        "POST",
        "/v1/chat/completions",
        Some("{\"model\": "),
        None,
    )
    .await;
    assert_error(st, &v, 400, None, "could not parse the JSON");
    let (st, v) = call(a, "POST", "/v1/chat/completions", Some("[1,2]"), None).await;
    assert_error(st, &v, 400, None, "JSON object");
    let (st, v) = post(
        a,
        "/v1/chat/completions",
        &json!({"model": "fake-model", "messages": msgs(), "temperature": "hot"}),
    )
    .await;
    assert_error(st, &v, 400, Some("temperature"), "invalid type");
    let (st, v) = post(
        a,
        "/v1/chat/completions",
        &json!({"model": "fake-model", "messages": "hi"}),
    )
    .await;
    assert_error(st, &v, 400, Some("messages"), "invalid type");
    let (st, v) = post(a, "/v1/chat/completions", &json!({"messages": msgs()})).await;
    assert_error(st, &v, 400, None, "model");
    let (st, v) = post(
        a,
        "/v1/chat/completions",
        &json!({"model": "fake-model", "messages": [{"role": "user", "content": 5}]}),
    )
    .await;
    assert_error(
        st,
        &v,
        400,
        Some("messages[0].content"),
        "string or an array",
    );
    let (st, v) = post(
        a,
        "/v1/chat/completions",
        &json!({"model": "fake-model", "messages": [{"role": "robot", "content": "x"}]}),
    )
    .await;
    assert_error(st, &v, 400, Some("messages[0].role"), "Invalid role");
    let (st, v) = post(
        a,
        "/v1/chat/completions",
        &json!({"model": "fake-model", "messages": []}),
    )
    .await;
    assert_error(st, &v, 400, Some("messages"), "at least one");
    let (st, v) = post(
        a,
        "/v1/completions",
        &json!({"model": "fake-model", "prompt": {"a": 1}}),
    )
    .await;
    assert_error(st, &v, 400, Some("prompt"), "must be a string");
    let (st, v) = post(
        a,
        "/v1/chat/completions",
        &json!({"model": "fake-model", "messages": msgs(), "stop": [1]}),
    )
    .await;
    assert_error(st, &v, 400, Some("stop"), "'stop'");
}

#[tokio::test]
async fn out_of_range_parameters() {
    let s = server().await;
    let a = s.handle.addr;
    for (field, value) in [
        ("temperature", json!(2.5)),
        ("temperature", json!(-1)),
        ("top_p", json!(1.5)),
        ("top_p", json!(0)),
        ("presence_penalty", json!(3)),
        ("frequency_penalty", json!(-2.1)),
        ("n", json!(0)),
        ("n", json!(1000)),
        ("max_tokens", json!(0)),
        ("max_tokens", json!(-5)),
        ("top_logprobs", json!(21)),
        ("min_p", json!(2)),
        ("top_k", json!(-1)),
        ("repetition_penalty", json!(0)),
        ("max_completion_tokens", json!(0)),
    ] {
        let mut b = json!({"model": "fake-model", "messages": msgs(), "logprobs": true});
        b[field] = value.clone();
        let (st, v) = post(a, "/v1/chat/completions", &b).await;
        assert_error(st, &v, 400, Some(field), "");
        let _ = value;
    }
    let (st, v) = post(
        a,
        "/v1/chat/completions",
        &json!({"model": "fake-model", "messages": msgs(), "logit_bias": {"5": 101}}),
    )
    .await;
    assert_error(st, &v, 400, Some("logit_bias"), "between -100 and 100");
    let (st, v) = post(
        a,
        "/v1/chat/completions",
        &json!({"model": "fake-model", "messages": msgs(), "logit_bias": {"x": 1}}),
    )
    .await;
    assert_error(st, &v, 400, Some("logit_bias"), "not a token id");
    let (st, v) = post(
        a,
        "/v1/chat/completions",
        &json!({"model": "fake-model", "messages": msgs(), "logit_bias": {"999999": 1}}),
    )
    .await;
    assert_error(st, &v, 400, Some("logit_bias"), "outside the vocabulary");
    let (st, v) = post(
        a,
        "/v1/completions",
        &json!({"model": "fake-model", "prompt": "x", "logprobs": 6}),
    )
    .await;
    assert_error(st, &v, 400, Some("logprobs"), "between 0 and 5");
    let (st, v) = post(
        a,
        "/v1/chat/completions",
        &json!({"model": "fake-model", "messages": msgs(), "top_logprobs": 2}),
    )
    .await;
    assert_error(st, &v, 400, Some("top_logprobs"), "requires 'logprobs'");
    let (st, v) = post(a, "/v1/chat/completions", &json!({"model": "fake-model", "messages": msgs(), "stream_options": {"include_usage": true}})).await;
    assert_error(
        st,
        &v,
        400,
        Some("stream_options"),
        "only allowed when 'stream'",
    );
}

#[tokio::test]
async fn unknown_model_and_context() {
    let s = server().await;
    let a = s.handle.addr;
    let (st, v) = post(
        a,
        "/v1/chat/completions",
        &json!({"model": "gpt-9", "messages": msgs()}),
    )
    .await;
    assert_error(st, &v, 404, Some("model"), "does not exist");
    assert_eq!(v["error"]["code"], "model_not_found");
    let long = "word ".repeat(300);
    let (st, v) = post(
        a,
        "/v1/chat/completions",
        &json!({"model": "fake-model", "messages": [{"role": "user", "content": long}]}),
    )
    .await;
    assert_error(st, &v, 400, None, "maximum context length is 256 tokens");
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    let (st, v) = post(
        a,
        "/v1/completions",
        &json!({"model": "fake-model", "prompt": "a b c", "max_tokens": 254}),
    )
    .await;
    assert_error(st, &v, 400, None, "maximum context length");
    let (st, v) = post(
        a,
        "/v1/completions",
        &json!({"model": "fake-model", "prompt": [4000000]}),
    )
    .await;
    assert_error(st, &v, 400, Some("prompt"), "");
}

#[tokio::test]
async fn unsupported_output_changing_fields() {
    let s = server().await;
    let a = s.handle.addr;
    let cases = [
        (
            "tools",
            json!([{"type": "function", "function": {"name": "f", "parameters": {}}}]),
        ),
        (
            "response_format",
            json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}),
        ),
        ("response_format", json!({"type": "json_object"})),
        ("tool_choice", json!("required")),
        ("functions", json!([{"name": "f"}])),
        ("audio", json!({"voice": "x", "format": "wav"})),
        ("modalities", json!(["text", "audio"])),
    ];
    for (field, value) in cases {
        let mut b = json!({"model": "fake-model", "messages": msgs()});
        b[field] = value;
        let (st, v) = post(a, "/v1/chat/completions", &b).await;
        assert_error(st, &v, 400, Some(field), "not supported");
        assert_eq!(v["error"]["code"], "unsupported_parameter");
    }
    let (st, v) = post(a, "/v1/chat/completions", &json!({"model": "fake-model", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})).await;
    assert_error(st, &v, 400, None, "not supported");
    let (st, v) = post(
        a,
        "/v1/completions",
        &json!({"model": "fake-model", "prompt": "x", "suffix": "y"}),
    )
    .await;
    assert_error(st, &v, 400, Some("suffix"), "not supported");
    let (st, v) = post(
        a,
        "/v1/completions",
        &json!({"model": "fake-model", "prompt": "x", "best_of": 3}),
    )
    .await;
    assert_error(st, &v, 400, Some("best_of"), "not supported");
    let (st, v) = post(
        a,
        "/v1/completions",
        &json!({"model": "fake-model", "prompt": "x", "echo": true, "logprobs": 1}),
    )
    .await;
    assert_error(st, &v, 400, Some("echo"), "not supported");
}

#[tokio::test]
async fn oversized_body_and_paths() {
    let s = server().await;
    let a = s.handle.addr;
    let big = json!({"model": "fake-model", "messages": [{"role": "user", "content": "x".repeat(100_000)}]});
    let (st, v) = post(a, "/v1/chat/completions", &big).await;
    assert_error(st, &v, 413, None, "larger than the limit");
    let (st, v) = call(a, "GET", "/v1/nothing", None, None).await;
    assert_error(st, &v, 404, None, "Unknown path");
    let (st, v) = call(a, "GET", "/v1/chat/completions", None, None).await;
    assert_error(st, &v, 405, None, "not allowed");
    let (st, v) = call(a, "GET", "/v1/models/nope", None, None).await;
    assert_error(st, &v, 404, None, "does not exist");
}

#[tokio::test]
async fn oversized_chunked_body() {
    // No Content-Length: the limit still applies while reading.
    let s = server().await;
    let mut sock = tokio::net::TcpStream::connect(s.handle.addr).await.unwrap();
    let chunk = "x".repeat(8192);
    let mut req = String::from("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n");
    for _ in 0..10 {
        req.push_str(&format!("{:x}\r\n{chunk}\r\n", chunk.len()));
    }
    req.push_str("0\r\n\r\n");
    sock.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = sock.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
}

#[tokio::test]
async fn api_key() {
    let cfg = ServerConfig {
        api_key: Some("sekret".into()),
        ..ServerConfig::default()
    };
    let s = start(FakeConfig::default(), cfg).await;
    let a = s.handle.addr;
    let body = json!({"model": "fake-model", "messages": msgs(), "max_tokens": 1}).to_string();
    let (st, v) = call(a, "POST", "/v1/chat/completions", Some(&body), None).await;
    assert_error(st, &v, 401, None, "didn't provide an API key");
    let (st, v) = call(
        a,
        "POST",
        "/v1/chat/completions",
        Some(&body),
        Some("wrong"),
    )
    .await;
    assert_error(st, &v, 401, None, "Incorrect API key");
    assert_eq!(v["error"]["code"], "invalid_api_key");
    let (st, v) = call(a, "GET", "/v1/models", None, Some("wrong")).await;
    assert_error(st, &v, 401, None, "Incorrect API key");
    let (st, _) = call(
        a,
        "POST",
        "/v1/chat/completions",
        Some(&body),
        Some("sekret"),
    )
    .await;
    assert_eq!(st, 200);
    let (st, _) = call(a, "GET", "/health", None, None).await;
    assert_eq!(st, 200, "health needs no key");
}

#[tokio::test]
async fn garbage_does_not_hurt_others() {
    let s = server().await;
    let a = s.handle.addr;
    for junk in [
        &b"\x00\x01\x02garbage\r\n\r\n"[..],
        b"GET / HTTP/9.9\r\n\r\n",
        b"POST /v1/completions HTTP/1.1\r\ncontent-length: 999\r\n\r\n{",
    ] {
        let mut sock = tokio::net::TcpStream::connect(a).await.unwrap();
        sock.write_all(junk).await.unwrap();
        drop(sock);
    }
    let (st, v) = post(
        a,
        "/v1/completions",
        &json!({"model": "fake-model", "prompt": "still", "max_tokens": 2}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
}
