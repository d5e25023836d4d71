//! Turns a raw JSON body into a checked [`ParsedRequest`], or an [`ApiError`] naming the fault.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::backend::{ChatMessage, GenerationRequest, Prompt, SamplingOptions};
use crate::errors::ApiError;
use crate::types::{ChatParams, CommonParams, CompletionParams, RawMessage};

/// Most choices one request may ask for.
pub const MAX_N: i64 = 16;
/// Most stop strings one request may give.
pub const MAX_STOP: usize = 16;
/// Most prompts in one completions request.
pub const MAX_PROMPTS: usize = 64;
/// Default `max_tokens` of `/v1/completions`, as OpenAI's.
pub const COMPLETIONS_DEFAULT_MAX_TOKENS: usize = 16;

/// Which endpoint a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Completions,
}

/// A validated request: one [`GenerationRequest`] per choice plus how to shape the answer.
#[derive(Debug, Clone)]
pub struct ParsedRequest {
    /// The endpoint.
    pub endpoint: Endpoint,
    /// Model id as given.
    pub model: String,
    /// One entry per choice, in choice-index order.
    pub choices: Vec<GenerationRequest>,
    /// Index of the prompt each choice belongs to (for usage and echo).
    pub prompt_of_choice: Vec<usize>,
    /// Stream as SSE.
    pub stream: bool,
    /// Send a usage chunk at the end of a stream.
    pub include_usage: bool,
    /// Report logprobs.
    pub logprobs: bool,
    /// Completions `echo`: the prompt texts to prepend, one per prompt.
    pub echo: Option<Vec<EchoPrompt>>,
}

/// A prompt to echo: its text, or token ids to detokenize.
#[derive(Debug, Clone)]
pub enum EchoPrompt {
    /// Text prompt.
    Text(String),
    /// Token-id prompt.
    Tokens(Vec<u32>),
}

fn from_value<T: DeserializeOwned>(v: &Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let param = if path == "." { None } else { Some(path) };
        let inner = e.into_inner().to_string();
        let message = match &param {
            Some(p) => format!("Invalid value for '{p}': {inner}"),
            None => format!("Invalid request body: {inner}"),
        };
        ApiError::invalid(param, message)
    })
}

/// Parses the body of a generation endpoint.
pub fn parse(endpoint: Endpoint, body: &[u8]) -> Result<ParsedRequest, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::invalid(
            None,
            format!("We could not parse the JSON body of your request: {e}"),
        )
    })?;
    if !value.is_object() {
        return Err(ApiError::invalid(
            None,
            "The request body must be a JSON object",
        ));
    }
    let common: CommonParams = from_value(&value)?;
    if common.model.is_empty() {
        return Err(ApiError::invalid(Some("model".into()), "'model' is empty"));
    }
    match endpoint {
        Endpoint::Chat => parse_chat(common, from_value(&value)?),
        Endpoint::Completions => parse_completions(common, from_value(&value)?),
    }
}

fn range_f(name: &str, v: Option<f64>, lo: f64, hi: f64, default: f64) -> Result<f32, ApiError> {
    match v {
        None => Ok(default as f32),
        Some(x) if x.is_finite() && x >= lo && x <= hi => Ok(x as f32),
        Some(x) => Err(ApiError::invalid(
            Some(name.to_string()),
            format!("{x} is out of range for '{name}': it must be between {lo} and {hi}"),
        )),
    }
}

fn range_i(name: &str, v: Option<i64>, lo: i64, hi: i64) -> Result<Option<i64>, ApiError> {
    match v {
        Some(x) if x < lo || x > hi => Err(ApiError::invalid(
            Some(name.to_string()),
            format!("{x} is out of range for '{name}': it must be between {lo} and {hi}"),
        )),
        other => Ok(other),
    }
}

fn sampling(c: &CommonParams) -> Result<SamplingOptions, ApiError> {
    let top_p = range_f("top_p", c.top_p, 0.0, 1.0, 1.0)?;
    if top_p == 0.0 {
        return Err(ApiError::invalid(
            Some("top_p".into()),
            "0 is out of range for 'top_p': it must be greater than 0 and at most 1",
        ));
    }
    let repetition_penalty = range_f("repetition_penalty", c.repetition_penalty, 0.0, 10.0, 1.0)?;
    if repetition_penalty == 0.0 {
        return Err(ApiError::invalid(
            Some("repetition_penalty".into()),
            "'repetition_penalty' must be greater than 0",
        ));
    }
    let mut logit_bias = BTreeMap::new();
    for (k, &b) in c.logit_bias.iter().flatten() {
        let id: u32 = k.parse().map_err(|_| {
            ApiError::invalid(
                Some("logit_bias".into()),
                format!("Invalid key in 'logit_bias': {k:?} is not a token id"),
            )
        })?;
        if !b.is_finite() || !(-100.0..=100.0).contains(&b) {
            return Err(ApiError::invalid(
                Some("logit_bias".into()),
                format!("Invalid value for 'logit_bias' of token {id}: {b} must be between -100 and 100"),
            ));
        }
        logit_bias.insert(id, b as f32);
    }
    Ok(SamplingOptions {
        temperature: range_f("temperature", c.temperature, 0.0, 2.0, 1.0)?,
        top_p,
        top_k: range_i("top_k", c.top_k, 0, u32::MAX as i64)?.unwrap_or(0) as u32,
        min_p: range_f("min_p", c.min_p, 0.0, 1.0, 0.0)?,
        presence_penalty: range_f("presence_penalty", c.presence_penalty, -2.0, 2.0, 0.0)?,
        frequency_penalty: range_f("frequency_penalty", c.frequency_penalty, -2.0, 2.0, 0.0)?,
        repetition_penalty,
        logit_bias,
        seed: c.seed.map(|s| s as u64),
    })
}

fn stops(v: &Option<Value>) -> Result<Vec<String>, ApiError> {
    let bad = || {
        ApiError::invalid(
            Some("stop".into()),
            format!("'stop' must be a string or a list of at most {MAX_STOP} strings"),
        )
    };
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(a)) if a.len() <= MAX_STOP => a
            .iter()
            .map(|s| s.as_str().map(str::to_string).ok_or_else(bad))
            .collect(),
        Some(_) => Err(bad()),
    }
}

fn max_tokens(name: &str, v: Option<i64>) -> Result<Option<usize>, ApiError> {
    Ok(range_i(name, v, 1, u32::MAX as i64)?.map(|x| x as usize))
}

fn content_text(i: usize, m: &RawMessage) -> Result<String, ApiError> {
    let param = Some(format!("messages[{i}].content"));
    match &m.content {
        None | Some(Value::Null) => {
            if m.role == "assistant" {
                Ok(String::new())
            } else {
                Err(ApiError::invalid(
                    param,
                    format!("messages[{i}] ({}) has no content", m.role),
                ))
            }
        }
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut out = String::new();
            for (j, p) in parts.iter().enumerate() {
                let kind = p.get("type").and_then(Value::as_str);
                match (kind, p.get("text").and_then(Value::as_str)) {
                    (Some("text"), Some(t)) => out.push_str(t),
                    (Some("text"), None) => {
                        return Err(ApiError::invalid(
                            Some(format!("messages[{i}].content[{j}].text")),
                            "a text part needs a string 'text'",
                        ))
                    }
                    (Some(other), _) => {
                        return Err(ApiError::unsupported(
                            &format!("messages[{i}].content[{j}].type"),
                            format!(
                                "content parts of type '{other}' are not supported; only 'text'"
                            ),
                        ))
                    }
                    (None, _) => {
                        return Err(ApiError::invalid(
                            Some(format!("messages[{i}].content[{j}]")),
                            "a content part must be an object with a 'type'",
                        ))
                    }
                }
            }
            Ok(out)
        }
        Some(_) => Err(ApiError::invalid(
            param,
            "content must be a string or an array of content parts",
        )),
    }
}

fn reject_if_set(name: &str, v: &Option<Value>, why: &str) -> Result<(), ApiError> {
    match v {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Array(a)) if a.is_empty() => Ok(()),
        Some(_) => Err(ApiError::unsupported(
            name,
            format!("'{name}' is not supported: {why}"),
        )),
    }
}

fn parse_chat(c: CommonParams, p: ChatParams) -> Result<ParsedRequest, ApiError> {
    reject_if_set(
        "tools",
        &p.tools,
        "this server does not implement tool calling yet",
    )?;
    reject_if_set(
        "functions",
        &p.functions,
        "this server does not implement function calling",
    )?;
    reject_if_set(
        "function_call",
        &p.function_call,
        "this server does not implement function calling",
    )?;
    reject_if_set("audio", &p.audio, "this server produces text only")?;
    reject_if_set(
        "prediction",
        &p.prediction,
        "predicted outputs are not implemented",
    )?;
    match &p.tool_choice {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s == "none" || s == "auto" => {}
        Some(_) => {
            return Err(ApiError::unsupported(
                "tool_choice",
                "'tool_choice' is not supported: this server does not implement tool calling yet",
            ))
        }
    }
    if let Some(m) = &p.modalities {
        if m.as_array().is_none_or(|a| a.iter().any(|x| x != "text")) {
            return Err(ApiError::unsupported(
                "modalities",
                "'modalities' other than [\"text\"] are not supported",
            ));
        }
    }
    if let Some(rf) = &p.response_format {
        match rf.get("type").and_then(Value::as_str) {
            Some("text") => {}
            Some(t) => {
                return Err(ApiError::unsupported(
                    "response_format",
                    format!("response_format of type '{t}' is not supported (structured output is not implemented); only 'text'"),
                ))
            }
            None => {
                return Err(ApiError::invalid(
                    Some("response_format".into()),
                    "'response_format' must be an object with a 'type'",
                ))
            }
        }
    }
    if p.messages.is_empty() {
        return Err(ApiError::invalid(
            Some("messages".into()),
            "'messages' must contain at least one message",
        ));
    }
    let mut messages = Vec::with_capacity(p.messages.len());
    for (i, m) in p.messages.iter().enumerate() {
        let role = match m.role.as_str() {
            "system" | "user" | "assistant" | "tool" => m.role.clone(),
            "developer" => "system".to_string(),
            other => {
                return Err(ApiError::invalid(
                    Some(format!("messages[{i}].role")),
                    format!(
                    "Invalid role '{other}': expected system, developer, user, assistant or tool"
                ),
                ))
            }
        };
        if m.tool_calls.as_ref().is_some_and(|t| !t.is_null()) {
            return Err(ApiError::unsupported(
                &format!("messages[{i}].tool_calls"),
                "assistant tool_calls are not supported: this server does not implement tool calling yet",
            ));
        }
        messages.push(ChatMessage {
            role,
            content: content_text(i, m)?,
            name: m.name.clone(),
        });
    }
    let logprobs = p.logprobs.unwrap_or(false);
    let top = range_i("top_logprobs", p.top_logprobs, 0, 20)?;
    if top.is_some() && !logprobs {
        return Err(ApiError::invalid(
            Some("top_logprobs".into()),
            "'top_logprobs' requires 'logprobs' to be true",
        ));
    }
    let mt = match max_tokens("max_completion_tokens", p.max_completion_tokens)? {
        Some(m) => Some(m),
        None => max_tokens("max_tokens", c.max_tokens)?,
    };
    let template = GenerationRequest {
        model: c.model.clone(),
        prompt: Prompt::Chat(messages),
        max_tokens: mt,
        sampling: sampling(&c)?,
        stop: stops(&c.stop)?,
        logprobs: logprobs.then_some(top.unwrap_or(0) as usize),
    };
    finish(Endpoint::Chat, &c, vec![template], logprobs, None)
}

fn token_list(v: &[Value]) -> Option<Vec<u32>> {
    v.iter()
        .map(|x| x.as_u64().and_then(|t| u32::try_from(t).ok()))
        .collect()
}

fn prompts(v: &Value) -> Result<Vec<EchoPrompt>, ApiError> {
    let bad = || {
        ApiError::invalid(
            Some("prompt".into()),
            "'prompt' must be a string, a list of strings, a list of token ids or a list of token-id lists",
        )
    };
    let out = match v {
        Value::String(s) => vec![EchoPrompt::Text(s.clone())],
        Value::Array(a) if a.is_empty() => return Err(bad()),
        Value::Array(a) if a.iter().all(Value::is_string) => a
            .iter()
            .map(|s| EchoPrompt::Text(s.as_str().unwrap_or_default().to_string()))
            .collect(),
        Value::Array(a) if a.iter().all(Value::is_number) => {
            vec![EchoPrompt::Tokens(token_list(a).ok_or_else(bad)?)]
        }
        Value::Array(a) if a.iter().all(Value::is_array) => a
            .iter()
            .map(|x| {
                let l = x.as_array().map(Vec::as_slice).unwrap_or_default();
                if l.is_empty() {
                    return Err(bad());
                }
                Ok(EchoPrompt::Tokens(token_list(l).ok_or_else(bad)?))
            })
            .collect::<Result<_, _>>()?,
        _ => return Err(bad()),
    };
    if out.len() > MAX_PROMPTS {
        return Err(ApiError::invalid(
            Some("prompt".into()),
            format!("at most {MAX_PROMPTS} prompts per request"),
        ));
    }
    Ok(out)
}

fn parse_completions(c: CommonParams, p: CompletionParams) -> Result<ParsedRequest, ApiError> {
    if p.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::unsupported(
            "suffix",
            "'suffix' is not supported (no fill-in-the-middle)",
        ));
    }
    let n = range_i("n", c.n, 1, MAX_N)?.unwrap_or(1);
    if let Some(b) = p.best_of {
        if b != n && b != 1 {
            return Err(ApiError::unsupported(
                "best_of",
                "'best_of' other than 1 or n is not supported",
            ));
        }
    }
    let logprobs = range_i("logprobs", p.logprobs, 0, 5)?;
    let echo = p.echo.unwrap_or(false);
    if echo && logprobs.is_some() {
        return Err(ApiError::unsupported(
            "echo",
            "'echo' together with 'logprobs' is not supported (prompt logprobs are not computed)",
        ));
    }
    let prompts = prompts(&p.prompt)?;
    let sampling = sampling(&c)?;
    let stop = stops(&c.stop)?;
    let mt = max_tokens("max_tokens", c.max_tokens)?.or(Some(COMPLETIONS_DEFAULT_MAX_TOKENS));
    let templates = prompts
        .iter()
        .map(|pr| GenerationRequest {
            model: c.model.clone(),
            prompt: match pr {
                EchoPrompt::Text(t) => Prompt::Text(t.clone()),
                EchoPrompt::Tokens(t) => Prompt::Tokens(t.clone()),
            },
            max_tokens: mt,
            sampling: sampling.clone(),
            stop: stop.clone(),
            logprobs: logprobs.map(|k| k as usize),
        })
        .collect();
    finish(
        Endpoint::Completions,
        &c,
        templates,
        logprobs.is_some(),
        echo.then_some(prompts),
    )
}

fn finish(
    endpoint: Endpoint,
    c: &CommonParams,
    templates: Vec<GenerationRequest>,
    logprobs: bool,
    echo: Option<Vec<EchoPrompt>>,
) -> Result<ParsedRequest, ApiError> {
    let n = range_i("n", c.n, 1, MAX_N)?.unwrap_or(1) as usize;
    let stream = c.stream.unwrap_or(false);
    let include_usage = c
        .stream_options
        .as_ref()
        .and_then(|o| o.include_usage)
        .unwrap_or(false);
    if c.stream_options.is_some() && !stream {
        return Err(ApiError::invalid(
            Some("stream_options".into()),
            "'stream_options' is only allowed when 'stream' is true",
        ));
    }
    let mut choices = Vec::new();
    let mut prompt_of_choice = Vec::new();
    for (pi, t) in templates.into_iter().enumerate() {
        for i in 0..n {
            let mut g = t.clone();
            // Distinct but reproducible streams per choice.
            g.sampling.seed = g.sampling.seed.map(|s| s.wrapping_add(i as u64));
            choices.push(g);
            prompt_of_choice.push(pi);
        }
    }
    Ok(ParsedRequest {
        endpoint,
        model: c.model.clone(),
        choices,
        prompt_of_choice,
        stream,
        include_usage,
        logprobs,
        echo,
    })
}
