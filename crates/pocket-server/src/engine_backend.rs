//! The real backend: a pocket-models [`Engine`] driven by the [`SchedulerBackend`].
//!
//! The scheduler does detokenization and stop strings itself (the engine gets none), so the
//! engine only samples tokens. A second tokenizer, loaded from the same checkpoint, serves prompt
//! encoding and chat templates on the request threads.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pocket_formats::TensorStore;
use pocket_kernels::{DType, Device, DeviceKind};
use pocket_models::chat_template::{ChatMessage as TplMessage, ChatTemplate, RenderOptions};
use pocket_models::engine::{Engine, FinishReason as EngineFinish, GenerateParams};
use pocket_models::sampling::SamplingParams;
use pocket_models::store::ModelStore;
use pocket_models::tokenizer::Tokenizer;

use crate::backend::{
    FinishReason, InferenceBackend, ModelInfo, Prompt, SamplingOptions, SubmitError,
};
use crate::multi::MultiBackend;
use crate::scheduler::{SchedulerBackend, SchedulerConfig, StepEngine, StepToken, TextCodec};

/// Settings for loading a model behind the server.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// The name clients put in the `model` field; `None` = `model` itself.
    pub id: Option<String>,
    /// Store alias or path.
    pub model: String,
    /// Device to run on.
    pub device: DeviceKind,
    /// KV cache element type; `None` = the engine's default for the device.
    pub kv_cache: Option<DType>,
    /// Context length per sequence; `None` = the model's (capped at 4096 by the engine default).
    pub ctx_size: Option<usize>,
    /// Sequences generated together.
    pub max_sequences: usize,
    /// Waiting requests allowed.
    pub max_queue: usize,
}

impl EngineOptions {
    /// The name clients use for this model.
    pub fn served_id(&self) -> &str {
        self.id.as_deref().unwrap_or(&self.model)
    }
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
    let path = resolve(&opts.model)?;
    Ok(load(opts, &path)?.0)
}

fn resolve(model: &str) -> Result<PathBuf, String> {
    let store = ModelStore::new().with_progress(true);
    let resolved = store.resolve(model).map_err(|e| format!("{model}: {e}"))?;
    Ok(resolved.path)
}

/// Builds the engine and scheduler of one model from its resolved path; also returns the bytes
/// of its KV cache.
fn load(opts: &EngineOptions, path: &Path) -> Result<(SchedulerBackend, u64), String> {
    let mut b = Engine::builder()
        .model(path.to_string_lossy().into_owned())
        .device(opts.device);
    if let Some(n) = opts.ctx_size {
        b = b.max_seq_len(n);
    }
    if let Some(t) = opts.kv_cache {
        b = b.cache_dtype(t);
    }
    let ctx = opts.ctx_size.unwrap_or(4096);
    // Room for every running sequence at full length.
    b = b.cache_tokens(ctx * opts.max_sequences.max(1));
    let engine = b.build().map_err(|e| e.to_string())?;
    let kv_bytes = engine.cache().config().bytes() as u64;
    let info = engine.model().info().clone();
    let tensors = TensorStore::open(path).map_err(|e| e.to_string())?;
    let tok = match tensors.gguf() {
        Some(g) => Tokenizer::from_gguf(g).map_err(|e| e.to_string())?,
        None => Tokenizer::from_tokenizer_json(&path.join("tokenizer.json"))
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
    let backend = serve_engine(
        engine,
        Arc::new(codec),
        opts.served_id(),
        opts.max_sequences,
        opts.max_queue,
    );
    Ok((backend, kv_bytes))
}

fn gib(b: u64) -> String {
    format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
}

/// Bytes of every tensor in the checkpoint at `path` (what loading its weights takes).
pub fn weight_bytes(path: &Path) -> Result<u64, String> {
    let store = TensorStore::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(store.tensors().map(|t| t.data.len() as u64).sum())
}

/// Memory the models may use on `device`: `budget` when given, else what the device reports
/// free (host: `MemAvailable`).
fn available(device: DeviceKind, budget: Option<u64>) -> Result<(u64, String), String> {
    if let Some(b) = budget {
        return Ok((b, "--memory-budget".into()));
    }
    let dev = Device::open(device).map_err(|e| e.to_string())?;
    match dev.memory_info() {
        Some(m) => Ok((m.free_bytes(), format!("free on {}", dev.name()))),
        // Nothing reported: no check beyond what loading itself runs into.
        None => Ok((u64::MAX, format!("{} reports no memory size", dev.name()))),
    }
}

/// Loads every model (one engine and scheduler each, on its own device) behind one
/// [`MultiBackend`]. Refuses before loading anything when the weights alone exceed the memory
/// available (`memory_budget`, or what each device reports free), and after each load when the
/// weights plus KV caches so far exceed it; the error names each model's share.
pub fn start_all(
    models: &[EngineOptions],
    memory_budget: Option<u64>,
) -> Result<MultiBackend, String> {
    let paths: Vec<PathBuf> = models
        .iter()
        .map(|m| resolve(&m.model))
        .collect::<Result<_, _>>()?;
    let weights: Vec<u64> = paths
        .iter()
        .map(|p| weight_bytes(p))
        .collect::<Result<_, _>>()?;
    // Memory per device, checked once before anything is loaded.
    let mut budgets: Vec<(DeviceKind, u64, String)> = Vec::new();
    for m in models {
        if !budgets.iter().any(|(d, _, _)| *d == m.device) {
            let (b, source) = available(m.device, memory_budget)?;
            budgets.push((m.device, b, source));
        }
    }
    for (dev, budget, source) in &budgets {
        let on_dev: Vec<(usize, &EngineOptions)> = models
            .iter()
            .enumerate()
            .filter(|(_, m)| m.device == *dev)
            .collect();
        let need: u64 = on_dev.iter().map(|(i, _)| weights[*i]).sum();
        if need > *budget {
            let parts: Vec<String> = on_dev
                .iter()
                .map(|(i, m)| format!("{} {}", m.served_id(), gib(weights[*i])))
                .collect();
            return Err(format!(
                "cannot load {} model(s) on {dev:?}: their weights alone take {} ({}) but {} \
                 is available ({source}); serve fewer or smaller models",
                on_dev.len(),
                gib(need),
                parts.join(", "),
                gib(*budget)
            ));
        }
    }
    let mut used: Vec<(DeviceKind, u64, Vec<String>)> = Vec::new();
    let mut backends: Vec<Arc<dyn InferenceBackend>> = Vec::with_capacity(models.len());
    for (i, m) in models.iter().enumerate() {
        eprintln!(
            "pocket-server: loading {} as `{}` on {:?} ({} of {}) ...",
            m.model,
            m.served_id(),
            m.device,
            i + 1,
            models.len()
        );
        let (b, kv) = load(m, &paths[i]).map_err(|e| {
            format!(
                "cannot load model `{}` ({}, {} of {}): {e}",
                m.served_id(),
                m.model,
                i + 1,
                models.len()
            )
        })?;
        let (budget, source) = budgets
            .iter()
            .find(|(d, _, _)| *d == m.device)
            .map(|(_, b, s)| (*b, s.clone()))
            .unwrap_or((u64::MAX, String::new()));
        let entry = match used.iter_mut().find(|(d, _, _)| *d == m.device) {
            Some(e) => e,
            None => {
                used.push((m.device, 0, Vec::new()));
                used.last_mut().expect("just pushed")
            }
        };
        entry.1 += weights[i] + kv;
        entry.2.push(format!(
            "{}: weights {} + KV cache {}",
            m.served_id(),
            gib(weights[i]),
            gib(kv)
        ));
        if entry.1 > budget {
            return Err(format!(
                "cannot serve these models on {:?}: {} needed ({}) but {} is available \
                 ({source}); lower --ctx-size or --max-sequences, or serve fewer models",
                m.device,
                gib(entry.1),
                entry.2.join("; "),
                gib(budget)
            ));
        }
        backends.push(Arc::new(b));
    }
    MultiBackend::new(backends)
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
