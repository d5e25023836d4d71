//! Request bodies as they arrive on the wire, before validation (see [`crate::validate`]).
//!
//! Fields whose shape varies (`content`, `prompt`, `stop`) stay `serde_json::Value` here so that
//! validation can name exactly what was wrong. Unknown fields are ignored, as OpenAI's clients
//! send some (`user`, `metadata`, `store`) that do not change the output.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

/// `stream_options` object.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    /// Send a final chunk with `usage`.
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// Fields shared by `/v1/chat/completions` and `/v1/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct CommonParams {
    /// Model id.
    pub model: String,
    /// Completion length limit.
    #[serde(default)]
    pub max_tokens: Option<i64>,
    /// Sampling temperature in [0, 2].
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Nucleus mass in (0, 1].
    #[serde(default)]
    pub top_p: Option<f64>,
    /// Top-k, 0 or more (extension).
    #[serde(default)]
    pub top_k: Option<i64>,
    /// Min-p in [0, 1] (extension).
    #[serde(default)]
    pub min_p: Option<f64>,
    /// Presence penalty in [-2, 2].
    #[serde(default)]
    pub presence_penalty: Option<f64>,
    /// Frequency penalty in [-2, 2].
    #[serde(default)]
    pub frequency_penalty: Option<f64>,
    /// Repetition penalty, greater than 0 (extension).
    #[serde(default)]
    pub repetition_penalty: Option<f64>,
    /// Token id (as a string) to bias in [-100, 100].
    #[serde(default)]
    pub logit_bias: Option<BTreeMap<String, f64>>,
    /// Sampling seed.
    #[serde(default)]
    pub seed: Option<i64>,
    /// Stop string or list of them.
    #[serde(default)]
    pub stop: Option<Value>,
    /// Choices per prompt.
    #[serde(default)]
    pub n: Option<i64>,
    /// Stream as server-sent events.
    #[serde(default)]
    pub stream: Option<bool>,
    /// Streaming options.
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// End-user id (accepted, only logged).
    #[serde(default)]
    pub user: Option<String>,
}

/// One message of a chat request.
#[derive(Debug, Clone, Deserialize)]
pub struct RawMessage {
    /// `system`, `developer`, `user`, `assistant` or `tool`.
    pub role: String,
    /// String or array of content parts (`null` allowed for assistant messages).
    #[serde(default)]
    pub content: Option<Value>,
    /// Optional speaker name.
    #[serde(default)]
    pub name: Option<String>,
    /// Tool calls of an assistant message (not supported yet).
    #[serde(default)]
    pub tool_calls: Option<Value>,
    /// The call a tool message answers.
    #[serde(default)]
    pub tool_call_id: Option<String>,
}

/// Fields only `/v1/chat/completions` has.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatParams {
    /// The conversation.
    pub messages: Vec<RawMessage>,
    /// Newer name of `max_tokens`.
    #[serde(default)]
    pub max_completion_tokens: Option<i64>,
    /// Return log-probabilities of output tokens.
    #[serde(default)]
    pub logprobs: Option<bool>,
    /// Alternatives per token, 0..=20 (needs `logprobs`).
    #[serde(default)]
    pub top_logprobs: Option<i64>,
    /// Output format (only `text` is supported).
    #[serde(default)]
    pub response_format: Option<Value>,
    /// Tool definitions (not supported yet).
    #[serde(default)]
    pub tools: Option<Value>,
    /// Tool choice (only `none`/`auto` without tools).
    #[serde(default)]
    pub tool_choice: Option<Value>,
    /// Deprecated function definitions (not supported).
    #[serde(default)]
    pub functions: Option<Value>,
    /// Deprecated function choice (not supported).
    #[serde(default)]
    pub function_call: Option<Value>,
    /// Audio output settings (not supported).
    #[serde(default)]
    pub audio: Option<Value>,
    /// Output modalities (only `["text"]`).
    #[serde(default)]
    pub modalities: Option<Value>,
    /// Predicted output (not supported).
    #[serde(default)]
    pub prediction: Option<Value>,
}

/// Fields only `/v1/completions` has.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionParams {
    /// String, list of strings, token ids, or list of token-id lists.
    pub prompt: Value,
    /// Alternatives per token, 0..=5.
    #[serde(default)]
    pub logprobs: Option<i64>,
    /// Prepend the prompt to the completion.
    #[serde(default)]
    pub echo: Option<bool>,
    /// Text after the completion (not supported).
    #[serde(default)]
    pub suffix: Option<String>,
    /// Server-side best-of (only equal to `n`).
    #[serde(default)]
    pub best_of: Option<i64>,
}
