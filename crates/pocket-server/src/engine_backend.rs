//! The real backend: a pocket-models [`Engine`] driven by the [`SchedulerBackend`].
//!
//! The scheduler does detokenization and stop strings itself (the engine gets none), so the
//! engine only samples tokens. A second tokenizer, loaded from the same checkpoint, serves prompt
//! encoding and chat templates on the request threads.

use std::sync::Arc;

use pocket_formats::TensorStore;
use pocket_kernels::DeviceKind;
use pocket_models::chat_template::{ChatMessage as TplMessage, ChatTemplate, RenderOptions};
use pocket_models::engine::{Engine, FinishReason as EngineFinish, GenerateParams};
use pocket_models::sampling::SamplingParams;
use pocket_models::store::ModelStore;
use pocket_models::tokenizer::Tokenizer;

use crate::backend::{FinishReason, ModelInfo, Prompt, SamplingOptions, SubmitError};
use crate::scheduler::{SchedulerBackend, SchedulerConfig, StepEngine, StepToken, TextCodec};

/// Settings for loading a model behind the server.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Store alias or path.
    pub model: String,
    /// Device to run on.
    pub device: DeviceKind,
    /// Context length per sequence; `None` = the model's (capped at 4096 by the engine default).
    pub ctx_size: Option<usize>,
    /// Sequences generated together.
    pub max_sequences: usize,
    /// Waiting requests allowed.
    pub max_queue: usize,
}

/// Parses `cpu`, `cuda`, `cuda:N`.
pub fn parse_device(s: &str) -> Result<DeviceKind, String> {
    match s {
        "cpu" => Ok(DeviceKind::Cpu),
        "cuda" | "gpu" => Ok(DeviceKind::Cuda(0)),
        _ => s
            .strip_prefix("cuda:")
            .and_then(|n| n.parse().ok())
            .map(DeviceKind::Cuda)
            .ok_or_else(|| format!("unknown device {s:?}: use cpu, cuda or cuda:N")),
    }
}

struct EngineStep {
    engine: Engine,
    stop_ids: Vec<u32>,
    total_blocks: usize,
}

impl StepEngine for EngineStep {
    fn add_sequence(
        &mut self,
        prompt: &[u32],
        s: &SamplingOptions,
        max_tokens: usize,
        top_logprobs: Option<usize>,
    ) -> Result<u64, String> {
        let sampling = SamplingParams {
            temperature: s.temperature,
            top_k: s.top_k,
            top_p: s.top_p,
            min_p: s.min_p,
            repetition_penalty: s.repetition_penalty,
            presence_penalty: s.presence_penalty,
            frequency_penalty: s.frequency_penalty,
            penalty_last_n: None,
            logit_bias: s.logit_bias.clone(),
            seed: s.seed,
            top_logprobs: top_logprobs.unwrap_or(0),
        };
        let params = GenerateParams {
            max_tokens,
            sampling,
            stop: Vec::new(),
            ignore_eos: false,
        };
        self.engine
            .add_sequence(prompt.to_vec(), params)
            .map_err(|e| e.to_string())
    }

    fn step(&mut self) -> Result<Vec<(u64, StepToken)>, String> {
        let events = self.engine.step().map_err(|e| e.to_string())?;
        Ok(events
            .into_iter()
            .map(|(id, ev)| {
                let (finished, error) = match ev.finish {
                    None => (None, None),
                    Some(EngineFinish::Stop) => (Some(FinishReason::Stop), None),
                    Some(EngineFinish::Length) => (Some(FinishReason::Length), None),
                    Some(EngineFinish::Cancelled) => (None, Some("cancelled".to_string())),
                    Some(EngineFinish::Error(e)) => (None, Some(e)),
                };
                let is_eos = finished == Some(FinishReason::Stop)
                    && ev.token.is_some_and(|t| self.stop_ids.contains(&t));
                let logprobs = ev.logprob.map(|l| (l, ev.top_logprobs));
                (
                    id,
                    StepToken {
                        token: ev.token,
                        logprobs,
                        finished,
                        is_eos,
                        error,
                    },
                )
            })
            .collect())
    }

    fn cancel(&mut self, id: u64) {
        let _ = self.engine.cancel(id);
    }

    fn cache_blocks(&self) -> (usize, usize) {
        let free = self.engine.cache().free_blocks();
        (self.total_blocks.saturating_sub(free), self.total_blocks)
    }
}

struct Codec {
    tok: Tokenizer,
    template: Option<ChatTemplate>,
    vocab: usize,
}

impl TextCodec for Codec {
    fn encode(&self, prompt: &Prompt) -> Result<Vec<u32>, SubmitError> {
        let bad = |e: String| SubmitError::Invalid {
            param: Some("messages".into()),
            message: e,
        };
        match prompt {
            Prompt::Tokens(t) => Ok(t.clone()),
            Prompt::Text(t) => self
                .tok
                .encode(t, true, false)
                .map_err(|e| bad(e.to_string())),
            Prompt::Chat(msgs) => {
                let tpl = self.template.as_ref().ok_or_else(|| {
                    bad("this model has no chat template; use /v1/completions".into())
                })?;
                let msgs: Vec<TplMessage> = msgs
                    .iter()
                    .map(|m| TplMessage::new(m.role.clone(), m.content.clone()))
                    .collect();
                let opts = RenderOptions {
                    add_generation_prompt: true,
                    bos_token: self.tok.bos_token().map(str::to_string),
                    eos_token: self.tok.eos_token().map(str::to_string),
                    ..Default::default()
                };
                let text = tpl.render(&msgs, &opts).map_err(|e| bad(e.to_string()))?;
                // The template writes BOS itself where the model wants one.
                self.tok
                    .encode(&text, false, true)
                    .map_err(|e| bad(e.to_string()))
            }
        }
    }

    fn decode(&self, ids: &[u32]) -> String {
        self.tok.decode(ids, true).unwrap_or_default()
    }

    fn token_bytes(&self, id: u32) -> Vec<u8> {
        self.tok
            .decode(&[id], false)
            .unwrap_or_default()
            .into_bytes()
    }

    fn vocab_size(&self) -> usize {
        self.vocab
    }
}

/// Loads the model (fetching it through the store on first use) and starts its scheduler.
pub fn start(opts: &EngineOptions) -> Result<SchedulerBackend, String> {
    let store = ModelStore::new().with_progress(true);
    let resolved = store.resolve(&opts.model).map_err(|e| e.to_string())?;
    let mut b = Engine::builder()
        .model(resolved.path.to_string_lossy().into_owned())
        .device(opts.device);
    if let Some(n) = opts.ctx_size {
        b = b.max_seq_len(n);
    }
    let ctx = opts.ctx_size.unwrap_or(4096);
    // Room for every running sequence at full length.
    b = b.cache_tokens(ctx * opts.max_sequences.max(1));
    let engine = b.build().map_err(|e| e.to_string())?;
    let info = engine.model().info().clone();
    let tensors = TensorStore::open(&resolved.path).map_err(|e| e.to_string())?;
    let tok = match tensors.gguf() {
        Some(g) => Tokenizer::from_gguf(g).map_err(|e| e.to_string())?,
        None => Tokenizer::from_tokenizer_json(&resolved.path.join("tokenizer.json"))
            .map_err(|e| e.to_string())?,
    };
    let template = match tok.chat_template() {
        Some(src) => Some(ChatTemplate::new(src).map_err(|e| e.to_string())?),
        None => None,
    };
    let codec = Codec {
        tok,
        template,
        vocab: info.vocab_size,
    };
    Ok(serve_engine(
        engine,
        Arc::new(codec),
        &opts.model,
        opts.max_sequences,
        opts.max_queue,
    ))
}

/// Starts a scheduler over an already built [`Engine`], with `codec` for prompt encoding and
/// detokenization (the engine's own tokenizer only decides which tokens end a sequence).
/// `model_id` is the name clients use; the context length is the engine cache's.
pub fn serve_engine(
    engine: Engine,
    codec: Arc<dyn TextCodec>,
    model_id: &str,
    max_sequences: usize,
    max_queue: usize,
) -> SchedulerBackend {
    let stop_ids = engine
        .tokenizer()
        .map(|t| t.stop_token_ids().to_vec())
        .unwrap_or_default();
    let total_blocks = engine.cache().config().num_blocks;
    let context_length = engine.cache().config().max_seq_len;
    let cfg = SchedulerConfig {
        model: ModelInfo {
            id: model_id.to_string(),
            created: crate::response::unix_now(),
            owned_by: "pocketllm".into(),
            context_length,
        },
        max_running: max_sequences,
        max_queue,
    };
    SchedulerBackend::start(
        EngineStep {
            engine,
            stop_ids,
            total_blocks,
        },
        codec,
        cfg,
    )
}
