//! Builds OpenAI-shaped response bodies and stream chunks from backend events.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

use crate::backend::{FinishReason, GenerationEvent, LogprobInfo, TokenLogprob};
use crate::validate::{Endpoint, ParsedRequest};

/// The `system_fingerprint` every response carries.
pub fn system_fingerprint() -> String {
    format!(
        "fp_pocketllm_{}",
        env!("CARGO_PKG_VERSION").replace('.', "_")
    )
}

/// A fresh response id with the given prefix (`chatcmpl-`, `cmpl-`).
pub fn new_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let c = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut x = t ^ c.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 29;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    format!("{prefix}{x:016x}{c:08x}")
}

/// Unix seconds now.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[derive(Debug, Default)]
struct ChoiceAcc {
    text: String,
    chat_lp: Vec<Value>,
    tokens: Vec<String>,
    token_logprobs: Vec<f32>,
    top_logprobs: Vec<Value>,
    text_offset: Vec<usize>,
    pending_lp: Vec<LogprobInfo>,
    finish: Option<FinishReason>,
    completion_tokens: usize,
}

/// What happened to the whole request after one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Still generating.
    Running,
    /// A choice failed with this message.
    Failed(String),
}

/// Accumulates the events of every choice of one request into OpenAI responses.
#[derive(Debug)]
pub struct Assembler {
    endpoint: Endpoint,
    model: String,
    id: String,
    created: u64,
    fingerprint: String,
    logprobs: bool,
    include_usage: bool,
    stream: bool,
    prompt_of_choice: Vec<usize>,
    prompt_tokens: Vec<usize>,
    echo: Vec<String>,
    choices: Vec<ChoiceAcc>,
    started: Instant,
    /// When the first token of any choice arrived.
    pub first_token: Option<Instant>,
}

fn tl_json(t: &TokenLogprob) -> Value {
    json!({"token": t.token, "logprob": t.logprob, "bytes": t.bytes})
}

fn chat_lp_entry(info: &LogprobInfo) -> Value {
    let mut v = tl_json(&info.chosen);
    v["top_logprobs"] = Value::Array(info.top.iter().map(tl_json).collect());
    v
}

impl Assembler {
    /// An assembler for `req`; `echo` holds one text per prompt when echo was asked for.
    pub fn new(req: &ParsedRequest, echo: Vec<String>, started: Instant) -> Self {
        let prompts = req.prompt_of_choice.iter().max().map_or(0, |m| m + 1);
        Self {
            endpoint: req.endpoint,
            model: req.model.clone(),
            id: new_id(match req.endpoint {
                Endpoint::Chat => "chatcmpl-",
                Endpoint::Completions => "cmpl-",
            }),
            created: unix_now(),
            fingerprint: system_fingerprint(),
            logprobs: req.logprobs,
            include_usage: req.include_usage,
            stream: req.stream,
            prompt_of_choice: req.prompt_of_choice.clone(),
            prompt_tokens: vec![0; prompts],
            echo,
            choices: (0..req.choices.len())
                .map(|_| ChoiceAcc::default())
                .collect(),
            started,
            first_token: None,
        }
    }

    /// Prompt and completion token totals.
    pub fn token_counts(&self) -> (usize, usize) {
        (
            self.prompt_tokens.iter().sum(),
            self.choices.iter().map(|c| c.completion_tokens).sum(),
        )
    }

    /// The `usage` object.
    pub fn usage(&self) -> Value {
        let (p, c) = self.token_counts();
        json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c})
    }

    /// Time from arrival to the first token, if one came.
    pub fn ttft(&self) -> Option<std::time::Duration> {
        self.first_token.map(|t| t.duration_since(self.started))
    }

    fn chunk(&self, choices: Vec<Value>) -> Value {
        let mut m = Map::new();
        m.insert("id".into(), self.id.clone().into());
        m.insert(
            "object".into(),
            match self.endpoint {
                Endpoint::Chat => "chat.completion.chunk",
                Endpoint::Completions => "text_completion",
            }
            .into(),
        );
        m.insert("created".into(), self.created.into());
        m.insert("model".into(), self.model.clone().into());
        m.insert("system_fingerprint".into(), self.fingerprint.clone().into());
        m.insert("choices".into(), Value::Array(choices));
        if self.include_usage {
            m.insert("usage".into(), Value::Null);
        }
        Value::Object(m)
    }

    fn delta_choice(
        &self,
        index: usize,
        text: &str,
        lp: &[LogprobInfo],
        first_offset: usize,
    ) -> Value {
        match self.endpoint {
            Endpoint::Chat => json!({
                "index": index,
                "delta": {"content": text},
                "logprobs": if self.logprobs {
                    json!({"content": lp.iter().map(chat_lp_entry).collect::<Vec<_>>(), "refusal": null})
                } else { Value::Null },
                "finish_reason": null,
            }),
            Endpoint::Completions => json!({
                "index": index,
                "text": text,
                "logprobs": if self.logprobs { cmpl_lp(lp, first_offset) } else { Value::Null },
                "finish_reason": null,
            }),
        }
    }

    /// The chunks that open a stream: the assistant role (chat) or the echoed prompt (completions).
    pub fn start_chunks(&self) -> Vec<Value> {
        (0..self.choices.len())
            .filter_map(|i| match self.endpoint {
                Endpoint::Chat => Some(self.chunk(vec![json!({
                    "index": i,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": null,
                    "finish_reason": null,
                })])),
                Endpoint::Completions => {
                    let echo = self.echo.get(self.prompt_of_choice[i])?;
                    Some(self.chunk(vec![self.delta_choice(i, echo, &[], 0)]))
                }
            })
            .collect()
    }

    fn base_len(&self, i: usize) -> usize {
        self.echo
            .get(self.prompt_of_choice[i])
            .map_or(0, |e| e.chars().count())
    }

    fn add_text(&mut self, i: usize, text: &str, lp: Vec<LogprobInfo>) -> Option<Value> {
        let offset = self.base_len(i) + self.choices[i].text.chars().count();
        let chunk = self
            .stream
            .then(|| self.chunk(vec![self.delta_choice(i, text, &lp, offset)]));
        let c = &mut self.choices[i];
        let mut off = offset;
        for info in &lp {
            c.chat_lp.push(chat_lp_entry(info));
            c.tokens.push(info.chosen.token.clone());
            c.token_logprobs.push(info.chosen.logprob);
            c.top_logprobs.push(top_map(info));
            c.text_offset.push(off);
            off += info.chosen.token.chars().count();
        }
        c.text.push_str(text);
        chunk
    }

    /// Takes one event of choice `i`; returns the stream chunks it produces (none unless streaming).
    pub fn on_event(&mut self, i: usize, ev: GenerationEvent) -> (Vec<Value>, Progress) {
        let mut out = Vec::new();
        match ev {
            GenerationEvent::Started { prompt_tokens } => {
                self.prompt_tokens[self.prompt_of_choice[i]] = prompt_tokens;
            }
            GenerationEvent::Token { text, logprob, .. } => {
                if self.first_token.is_none() {
                    self.first_token = Some(Instant::now());
                }
                if let Some(lp) = logprob.filter(|_| self.logprobs) {
                    self.choices[i].pending_lp.push(lp);
                }
                if !text.is_empty() {
                    let lp = std::mem::take(&mut self.choices[i].pending_lp);
                    out.extend(self.add_text(i, &text, lp));
                }
            }
            GenerationEvent::Text(text) => {
                let lp = std::mem::take(&mut self.choices[i].pending_lp);
                out.extend(self.add_text(i, &text, lp));
            }
            GenerationEvent::Finished {
                reason,
                completion_tokens,
            } => {
                let c = &mut self.choices[i];
                c.pending_lp.clear();
                c.finish = Some(reason);
                c.completion_tokens = completion_tokens;
                if self.stream {
                    let choice = match self.endpoint {
                        Endpoint::Chat => json!({
                            "index": i, "delta": {}, "logprobs": null,
                            "finish_reason": reason.as_str(),
                        }),
                        Endpoint::Completions => json!({
                            "index": i, "text": "", "logprobs": null,
                            "finish_reason": reason.as_str(),
                        }),
                    };
                    out.push(self.chunk(vec![choice]));
                }
            }
            GenerationEvent::Error(e) => return (out, Progress::Failed(e)),
        }
        (out, Progress::Running)
    }

    /// The final `usage` chunk of a stream (empty `choices`).
    pub fn usage_chunk(&self) -> Value {
        let mut c = self.chunk(Vec::new());
        c["usage"] = self.usage();
        c
    }

    /// The whole non-streaming response.
    pub fn response(&self) -> Value {
        let choices: Vec<Value> = self
            .choices
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let finish = c.finish.map(FinishReason::as_str);
                match self.endpoint {
                    Endpoint::Chat => json!({
                        "index": i,
                        "message": {"role": "assistant", "content": c.text, "refusal": null},
                        "logprobs": if self.logprobs {
                            json!({"content": c.chat_lp, "refusal": null})
                        } else { Value::Null },
                        "finish_reason": finish,
                    }),
                    Endpoint::Completions => {
                        let echo = self
                            .echo
                            .get(self.prompt_of_choice[i])
                            .cloned()
                            .unwrap_or_default();
                        json!({
                            "index": i,
                            "text": echo + &c.text,
                            "logprobs": if self.logprobs { json!({
                                "tokens": c.tokens,
                                "token_logprobs": c.token_logprobs,
                                "top_logprobs": c.top_logprobs,
                                "text_offset": c.text_offset,
                            }) } else { Value::Null },
                            "finish_reason": finish,
                        })
                    }
                }
            })
            .collect();
        json!({
            "id": self.id,
            "object": match self.endpoint {
                Endpoint::Chat => "chat.completion",
                Endpoint::Completions => "text_completion",
            },
            "created": self.created,
            "model": self.model,
            "system_fingerprint": self.fingerprint,
            "choices": choices,
            "usage": self.usage(),
        })
    }
}

fn top_map(info: &LogprobInfo) -> Value {
    let mut m = Map::new();
    for t in &info.top {
        m.insert(t.token.clone(), json!(t.logprob));
    }
    Value::Object(m)
}

fn cmpl_lp(lp: &[LogprobInfo], first_offset: usize) -> Value {
    let mut off = first_offset;
    let mut offsets = Vec::new();
    for info in lp {
        offsets.push(off);
        off += info.chosen.token.chars().count();
    }
    json!({
        "tokens": lp.iter().map(|i| i.chosen.token.clone()).collect::<Vec<_>>(),
        "token_logprobs": lp.iter().map(|i| i.chosen.logprob).collect::<Vec<_>>(),
        "top_logprobs": lp.iter().map(top_map).collect::<Vec<_>>(),
        "text_offset": offsets,
    })
}
