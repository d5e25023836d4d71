//! The seam between the HTTP layer and whatever generates tokens.
//!
//! The server speaks only to [`InferenceBackend`]: a deterministic fake implements it for tests
//! ([`crate::fake::FakeBackend`]) and an adapter over the pocket-models Engine implements it for
//! real serving. A backend tokenizes, renders chat templates, applies stop strings and sampling,
//! and reports each generated token as a [`GenerationEvent`] on a per-request channel.

use std::collections::BTreeMap;
use std::fmt;

use tokio::sync::mpsc;

/// A model a backend can serve, as listed by `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelInfo {
    /// The id clients put in the `model` field.
    pub id: String,
    /// Unix seconds when the model was loaded.
    pub created: u64,
    /// Who owns the model (shown as `owned_by`).
    pub owned_by: String,
    /// Context length in tokens (prompt plus completion).
    pub context_length: usize,
}

/// One chat message after validation: role plus plain text content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, `tool` (or `developer`, mapped to `system`).
    pub role: String,
    /// The text content, text parts joined.
    pub content: String,
    /// An optional speaker name.
    pub name: Option<String>,
}

/// What to generate from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    /// Chat messages, rendered by the model's chat template with a generation prompt.
    Chat(Vec<ChatMessage>),
    /// Raw text, tokenized as is.
    Text(String),
    /// Token ids, used as is.
    Tokens(Vec<u32>),
}

/// Sampling settings, already range-checked by the server.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingOptions {
    /// Softmax temperature; 0 means greedy.
    pub temperature: f32,
    /// Nucleus sampling mass in (0, 1].
    pub top_p: f32,
    /// Keep only the k most likely tokens; 0 disables.
    pub top_k: u32,
    /// Drop tokens below `min_p` times the top probability; 0 disables.
    pub min_p: f32,
    /// OpenAI presence penalty in [-2, 2].
    pub presence_penalty: f32,
    /// OpenAI frequency penalty in [-2, 2].
    pub frequency_penalty: f32,
    /// Multiplicative repetition penalty (1 disables).
    pub repetition_penalty: f32,
    /// Additive bias per token id, in [-100, 100].
    pub logit_bias: BTreeMap<u32, f32>,
    /// Seed for reproducible sampling.
    pub seed: Option<u64>,
}

impl Default for SamplingOptions {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            min_p: 0.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repetition_penalty: 1.0,
            logit_bias: BTreeMap::new(),
            seed: None,
        }
    }
}

/// One sequence to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationRequest {
    /// Model id, one of [`InferenceBackend::models`].
    pub model: String,
    /// The prompt.
    pub prompt: Prompt,
    /// At most this many new tokens; `None` means up to the context length.
    pub max_tokens: Option<usize>,
    /// Sampling settings.
    pub sampling: SamplingOptions,
    /// Stop strings: generation ends before the first occurrence of any, which is not returned.
    pub stop: Vec<String>,
    /// How many alternatives per generated token to report (0 = none); `None` = no logprobs.
    pub logprobs: Option<usize>,
}

/// Why a sequence ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// End-of-sequence token or a stop string.
    Stop,
    /// `max_tokens` or the context length was reached.
    Length,
}

impl FinishReason {
    /// The OpenAI wire name (`stop`, `length`).
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// A token and its log-probability.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    /// The token's text (may be a partial UTF-8 piece, shown lossily).
    pub token: String,
    /// The token's raw bytes.
    pub bytes: Vec<u8>,
    /// Natural-log probability under the sampling distribution before filtering.
    pub logprob: f32,
}

/// Log-probability details for one generated token.
#[derive(Debug, Clone, PartialEq)]
pub struct LogprobInfo {
    /// The chosen token.
    pub chosen: TokenLogprob,
    /// The most likely alternatives, best first.
    pub top: Vec<TokenLogprob>,
}

/// What a backend reports for one request, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum GenerationEvent {
    /// The sequence was admitted; its prompt is this many tokens long.
    Started {
        /// Number of prompt tokens.
        prompt_tokens: usize,
    },
    /// One generated token. `text` is the new text it completes (may be empty while a multi-byte
    /// character or a possible stop string is pending).
    Token {
        /// Newly visible text.
        text: String,
        /// The token id.
        token_id: u32,
        /// Log-probabilities when requested.
        logprob: Option<LogprobInfo>,
    },
    /// Text held back (a possible stop string that never completed) released at the end.
    Text(String),
    /// The sequence finished; no more events follow.
    Finished {
        /// Why it ended.
        reason: FinishReason,
        /// Total generated tokens, including a stop token or stop-string tokens.
        completion_tokens: usize,
    },
    /// The backend failed this sequence; no more events follow.
    Error(String),
}

/// Why a request could not be submitted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SubmitError {
    /// No such model.
    #[error("The model `{0}` does not exist")]
    UnknownModel(String),
    /// The prompt does not leave room for even one new token.
    #[error("This model's maximum context length is {context_length} tokens. However, your prompt is {prompt_tokens} tokens long, leaving no room for the completion")]
    PromptTooLong {
        /// Prompt length in tokens.
        prompt_tokens: usize,
        /// The model's context length.
        context_length: usize,
    },
    /// prompt + max_tokens exceeds the context.
    #[error("This model's maximum context length is {context_length} tokens. However, you requested {requested} tokens ({prompt_tokens} in the messages, {max_tokens} in the completion). Please reduce the length of the messages or completion")]
    ContextExceeded {
        /// Prompt length in tokens.
        prompt_tokens: usize,
        /// Requested completion tokens.
        max_tokens: usize,
        /// Sum of both.
        requested: usize,
        /// The model's context length.
        context_length: usize,
    },
    /// The request is invalid for this model (bad token id, empty prompt, template failure...).
    #[error("{message}")]
    Invalid {
        /// The offending parameter, if one.
        param: Option<String>,
        /// What was wrong.
        message: String,
    },
    /// The waiting queue is full.
    #[error("The server is at capacity ({queued} requests waiting); retry later")]
    QueueFull {
        /// Requests waiting when this one arrived.
        queued: usize,
    },
    /// The backend is shutting down or failed.
    #[error("The inference backend is unavailable: {0}")]
    Unavailable(String),
}

/// Counters a backend exposes for `/metrics`, `/health` and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackendStats {
    /// Sequences accepted but not yet in the running batch.
    pub queued: usize,
    /// Sequences in the running batch.
    pub running: usize,
    /// KV-cache blocks in use.
    pub cache_blocks_used: usize,
    /// KV-cache blocks in all.
    pub cache_blocks_total: usize,
}

/// Runs a callback once when dropped; used to cancel a sequence when its consumer goes away.
pub struct CancelOnDrop(Option<Box<dyn FnOnce() + Send>>);

impl CancelOnDrop {
    /// Wraps `f`, to run on drop.
    pub fn new(f: impl FnOnce() + Send + 'static) -> Self {
        Self(Some(Box::new(f)))
    }

    /// Drops without running the callback.
    pub fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

impl fmt::Debug for CancelOnDrop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CancelOnDrop")
    }
}

/// The receiving end of one submitted sequence. Dropping it cancels the sequence and frees its cache.
#[derive(Debug)]
pub struct GenerationHandle {
    /// Events for this sequence, ending with `Finished` or `Error`.
    pub events: mpsc::UnboundedReceiver<GenerationEvent>,
    _cancel: CancelOnDrop,
}

impl GenerationHandle {
    /// Builds a handle from a receiver and the cancel action to run when it is dropped.
    pub fn new(events: mpsc::UnboundedReceiver<GenerationEvent>, cancel: CancelOnDrop) -> Self {
        Self {
            events,
            _cancel: cancel,
        }
    }

    /// Waits for the next event; `None` once the backend dropped its sender.
    pub async fn next(&mut self) -> Option<GenerationEvent> {
        self.events.recv().await
    }
}

/// A token generator the server can drive. Implementations must be cheap to call from async code:
/// `submit` only enqueues; generation happens elsewhere (a scheduler thread or task).
pub trait InferenceBackend: Send + Sync + 'static {
    /// Models this backend serves.
    fn models(&self) -> Vec<ModelInfo>;

    /// Validates and enqueues one sequence. Errors that depend on the prompt (unknown model, too
    /// long, full queue) are reported here, before any event.
    fn submit(&self, req: GenerationRequest) -> Result<GenerationHandle, SubmitError>;

    /// Enqueues sequences that belong together (the `n` choices of one request, in order). A
    /// backend that batches should admit them at the same step where there is room; this
    /// default submits them one at a time. On an error the handles already made are dropped,
    /// which cancels their sequences.
    fn submit_all(
        &self,
        reqs: Vec<GenerationRequest>,
    ) -> Result<Vec<GenerationHandle>, SubmitError> {
        reqs.into_iter().map(|r| self.submit(r)).collect()
    }

    /// Turns token ids back into text (for `echo` with token-id prompts).
    fn detokenize(&self, model: &str, tokens: &[u32]) -> Result<String, SubmitError>;

    /// Current queue and cache counters.
    fn stats(&self) -> BackendStats;

    /// Counters per served model, for backends that keep separate ones (one engine per model).
    /// The default reports [`InferenceBackend::stats`] under the one model id when there is one
    /// model, and nothing otherwise (the counters are not split by model then).
    fn model_stats(&self) -> Vec<(String, BackendStats)> {
        match self.models().as_slice() {
            [one] => vec![(one.id.clone(), self.stats())],
            _ => Vec::new(),
        }
    }
}
