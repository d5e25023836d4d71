//! Response shapes of every endpoint, over a real loopback socket against the fake backend.

mod common;

use common::*;
use pocket_server::fake::FakeConfig;
use pocket_server::ServerConfig;
use serde_json::{json, Value};

async fn server() -> TestServer {
    start(FakeConfig::default(), ServerConfig::default()).await
}

fn chat(extra: Value) -> Value {
    let mut b = json!({"model": "fake-model", "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hello"}, {"type": "text", "text": " there"}]},
    ]});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

#[tokio::test]
async fn health_models_metrics() {
    let s = server().await;
    let (st, v) = call(s.handle.addr, "GET", "/health", None, None).await;
    assert_eq!(st, 200);
    assert_eq!(v["status"], "ok");
    let (st, v) = call(s.handle.addr, "GET", "/v1/models", None, None).await;
    assert_eq!(st, 200);
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"][0]["id"], "fake-model");
    assert_eq!(v["data"][0]["object"], "model");
    assert!(v["data"][0]["created"].is_u64());
    assert!(v["data"][0]["owned_by"].is_string());
    let (st, v) = call(s.handle.addr, "GET", "/v1/models/fake-model", None, None).await;
    assert_eq!((st, v["id"].as_str()), (200, Some("fake-model")));

    let (st, _) = post(
        s.handle.addr,
        "/v1/chat/completions",
        &chat(json!({"max_tokens": 3})),
    )
    .await;
    assert_eq!(st, 200);
    let (st, m) = call(s.handle.addr, "GET", "/metrics", None, None).await;
    assert_eq!(st, 200);
    let m = m.as_str().unwrap();
    assert!(
        m.contains("pocket_requests_total{endpoint=\"chat\",status=\"200\"} 1"),
        "{m}"
    );
    assert!(m.contains("pocket_completion_tokens_total 3"), "{m}");
    assert!(m.contains("pocket_queue_depth 0"), "{m}");
    assert!(
        m.contains("pocket_time_to_first_token_seconds_count 1"),
        "{m}"
    );
    assert!(m.contains("pocket_tokens_per_second"), "{m}");
    assert!(m.contains("pocket_prompt_tokens_total"), "{m}");
}

#[tokio::test]
async fn chat_completion_shape() {
    let s = server().await;
    let (st, v) = post(
        s.handle.addr,
        "/v1/chat/completions",
        &chat(json!({"max_tokens": 4})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(v["object"], "chat.completion");
    assert!(v["created"].as_u64().unwrap() > 1_600_000_000);
    assert_eq!(v["model"], "fake-model");
    assert!(v["system_fingerprint"].as_str().unwrap().starts_with("fp_"));
    let c = &v["choices"][0];
    assert_eq!(c["index"], 0);
    assert_eq!(c["message"]["role"], "assistant");
    assert_eq!(c["finish_reason"], "length");
    assert!(c["logprobs"].is_null());
    let text = c["message"]["content"].as_str().unwrap();
    assert_eq!(text.split_whitespace().count(), 4, "{text}");
    let u = &v["usage"];
    assert_eq!(u["completion_tokens"], 4);
    assert!(u["prompt_tokens"].as_u64().unwrap() > 0);
    assert_eq!(
        u["total_tokens"].as_u64(),
        Some(u["prompt_tokens"].as_u64().unwrap() + 4)
    );
}

#[tokio::test]
async fn natural_end_is_stop() {
    let s = server().await;
    let (st, v) = post(s.handle.addr, "/v1/chat/completions", &chat(json!({}))).await;
    assert_eq!(st, 200);
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn chat_stream_order_and_usage() {
    let s = server().await;
    let body = chat(json!({"max_tokens": 5, "temperature": 0, "stream": true,
                           "stream_options": {"include_usage": true}}));
    let (st, events) = stream(s.handle.addr, "/v1/chat/completions", &body).await;
    assert_eq!(st, 200);
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let id = chunks[0]["id"].as_str().unwrap();
    for c in &chunks {
        assert_eq!(c["id"], id);
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["model"], "fake-model");
        assert!(c["system_fingerprint"].is_string());
    }
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"].as_array().unwrap().len(), 0);
    assert_eq!(usage["usage"]["completion_tokens"], 5);
    let fin = &chunks[chunks.len() - 2];
    assert_eq!(fin["choices"][0]["finish_reason"], "length");
    assert_eq!(fin["choices"][0]["delta"], json!({}));
    assert!(fin["usage"].is_null());
    let streamed: String = chunks[1..chunks.len() - 2]
        .iter()
        .map(|c| {
            assert!(c["choices"][0]["finish_reason"].is_null());
            c["choices"][0]["delta"]["content"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    // Greedy: the same request without streaming gives the same text.
    let mut plain = body.clone();
    plain["stream"] = json!(false);
    plain.as_object_mut().unwrap().remove("stream_options");
    let (_, v) = post(s.handle.addr, "/v1/chat/completions", &plain).await;
    assert_eq!(
        v["choices"][0]["message"]["content"].as_str().unwrap(),
        streamed
    );
}

#[tokio::test]
async fn stream_without_usage_has_no_usage_chunk() {
    let s = server().await;
    let body = chat(json!({"max_tokens": 2, "stream": true}));
    let (_, events) = stream(s.handle.addr, "/v1/chat/completions", &body).await;
    assert_eq!(events.last().unwrap(), "[DONE]");
    for e in &events[..events.len() - 1] {
        let c: Value = serde_json::from_str(e).unwrap();
        assert!(c.get("usage").is_none(), "{c}");
        assert_eq!(c["choices"].as_array().unwrap().len(), 1);
    }
}

#[tokio::test]
async fn n_two_and_seed() {
    let s = server().await;
    let body = chat(json!({"max_tokens": 6, "n": 2, "seed": 7, "temperature": 1.0}));
    let (st, a) = post(s.handle.addr, "/v1/chat/completions", &body).await;
    assert_eq!(st, 200);
    let (_, b) = post(s.handle.addr, "/v1/chat/completions", &body).await;
    let ch = a["choices"].as_array().unwrap();
    assert_eq!(ch.len(), 2);
    assert_eq!(
        (ch[0]["index"].as_u64(), ch[1]["index"].as_u64()),
        (Some(0), Some(1))
    );
    assert_ne!(ch[0]["message"]["content"], ch[1]["message"]["content"]);
    assert_eq!(a["choices"], b["choices"], "same seed, same choices");
    assert_eq!(a["usage"]["completion_tokens"], 12);
}

#[tokio::test]
async fn stop_strings() {
    let s = server().await;
    let (_, v) = post(
        s.handle.addr,
        "/v1/chat/completions",
        &chat(json!({"max_tokens": 12, "temperature": 0})),
    )
    .await;
    let text = v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let words: Vec<&str> = text.split_whitespace().collect();
    let stop = format!("{} {}", words[2], &words[3][..2]);
    let (_, v) = post(
        s.handle.addr,
        "/v1/chat/completions",
        &chat(json!({"max_tokens": 12, "temperature": 0, "stop": [stop.clone(), "zzz"]})),
    )
    .await;
    let got = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        got,
        &text[..text.find(&stop).unwrap()],
        "stop string and what follows are cut"
    );
    // Streamed: same cut.
    let (_, events) = stream(
        s.handle.addr,
        "/v1/chat/completions",
        &chat(json!({"max_tokens": 12, "temperature": 0, "stop": stop, "stream": true})),
    )
    .await;
    let streamed: String = events[..events.len() - 1]
        .iter()
        .filter_map(|e| {
            serde_json::from_str::<Value>(e).unwrap()["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(streamed, got);
}

#[tokio::test]
async fn chat_logprobs() {
    let s = server().await;
    let (st, v) = post(
        s.handle.addr,
        "/v1/chat/completions",
        &chat(json!({"max_tokens": 3, "logprobs": true, "top_logprobs": 2})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let lp = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(lp.len(), 3);
    let text: String = lp.iter().map(|e| e["token"].as_str().unwrap()).collect();
    assert_eq!(
        text,
        v["choices"][0]["message"]["content"].as_str().unwrap()
    );
    for e in lp {
        assert!(e["logprob"].as_f64().unwrap() <= 0.0);
        assert!(e["bytes"].is_array());
        assert_eq!(e["top_logprobs"].as_array().unwrap().len(), 2);
    }
}

#[tokio::test]
async fn completions_prompt_forms() {
    let s = server().await;
    let a = s.handle.addr;
    let (st, v) = post(
        a,
        "/v1/completions",
        &json!({"model": "fake-model", "prompt": "once upon a time"}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert!(v["id"].as_str().unwrap().starts_with("cmpl-"));
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["usage"]["prompt_tokens"], 4);
    assert!(v["choices"][0]["text"].is_string());
    // Default max_tokens is 16 as with OpenAI; the fake stops naturally within 16.
    assert!(v["usage"]["completion_tokens"].as_u64().unwrap() <= 16);

    let (st, v) = post(
        a,
        "/v1/completions",
        &json!({"model": "fake-model", "prompt": ["a b", "c d e"], "n": 2, "max_tokens": 2}),
    )
    .await;
    assert_eq!(st, 200);
    assert_eq!(v["choices"].as_array().unwrap().len(), 4);
    assert_eq!(v["usage"]["prompt_tokens"], 5);
    assert_eq!(v["usage"]["completion_tokens"], 8);

    let (st, v) = post(
        a,
        "/v1/completions",
        &json!({"model": "fake-model", "prompt": [1, 2, 3], "max_tokens": 2, "echo": true}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["usage"]["prompt_tokens"], 3);
    assert!(v["choices"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with(" bravo charlie delta"));

    let (st, v) = post(
        a,
        "/v1/completions",
        &json!({"model": "fake-model", "prompt": [[1, 2], [3]], "max_tokens": 1}),
    )
    .await;
    assert_eq!(st, 200);
    assert_eq!(v["choices"].as_array().unwrap().len(), 2);

    let (st, v) = post(
        a,
        "/v1/completions",
        &json!({"model": "fake-model", "prompt": "hi there", "max_tokens": 3, "echo": true}),
    )
    .await;
    assert_eq!(st, 200);
    assert!(v["choices"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("hi there "));
}

#[tokio::test]
async fn completions_logprobs_and_stream() {
    let s = server().await;
    let a = s.handle.addr;
    let (st, v) = post(
        a,
        "/v1/completions",
        &json!({"model": "fake-model", "prompt": "x y", "max_tokens": 3, "logprobs": 2}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let lp = &v["choices"][0]["logprobs"];
    assert_eq!(lp["tokens"].as_array().unwrap().len(), 3);
    assert_eq!(lp["token_logprobs"].as_array().unwrap().len(), 3);
    assert_eq!(lp["top_logprobs"][0].as_object().unwrap().len(), 2);
    assert_eq!(lp["text_offset"][0], 0);

    let (st, events) = stream(a, "/v1/completions", &json!({"model": "fake-model", "prompt": "x y", "max_tokens": 3, "stream": true, "stream_options": {"include_usage": true}})).await;
    assert_eq!(st, 200);
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert!(chunks.iter().all(|c| c["object"] == "text_completion"));
    assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], 3);
    assert_eq!(
        chunks[chunks.len() - 2]["choices"][0]["finish_reason"],
        "length"
    );
}

#[tokio::test]
async fn unsupported_fields_ok_when_harmless() {
    let s = server().await;
    let (st, v) = post(s.handle.addr, "/v1/chat/completions", &chat(json!({
        "max_tokens": 2, "user": "u1", "response_format": {"type": "text"}, "tools": [],
        "tool_choice": "none", "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1,
        "presence_penalty": 0.5, "frequency_penalty": 0.5, "logit_bias": {"5": 100}, "metadata": {"a": "b"}
    }))).await;
    assert_eq!(st, 200, "{v}");
    // logit_bias 100 forces token 5 in the fake.
    assert_eq!(v["choices"][0]["message"]["content"], " foxtrot foxtrot");
}

#[tokio::test]
async fn tool_messages_accepted() {
    let s = server().await;
    let (st, v) = post(
        s.handle.addr,
        "/v1/chat/completions",
        &json!({"model": "fake-model", "max_tokens": 2, "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": null},
            {"role": "tool", "content": "sunny", "tool_call_id": "call_1"},
            {"role": "developer", "content": "answer"},
        ]}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
}
