//! A deterministic backend for tests: words instead of a model, with the real backend's contract
//! (admission limit, bounded queue, cache-block accounting, cancellation, stop strings, logprobs).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify, Semaphore};

use crate::backend::{
    BackendStats, CancelOnDrop, FinishReason, GenerationEvent, GenerationHandle, GenerationRequest,
    InferenceBackend, LogprobInfo, ModelInfo, Prompt, SubmitError, TokenLogprob,
};
use crate::stop::StopMatcher;

/// The fake vocabulary; token id `i` is `WORDS[i % WORDS.len()]` with a leading space.
pub const WORDS: [&str; 32] = [
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
    "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango",
    "uniform", "victor", "whiskey", "xray", "yankee", "zulu", "one", "two", "three", "four",
    "five", "six",
];

/// Size of the fake vocabulary (token ids at or above are rejected).
pub const FAKE_VOCAB: u32 = 32_000;

/// Tokens per fake KV-cache block.
pub const BLOCK_TOKENS: usize = 16;

/// Settings of a [`FakeBackend`].
#[derive(Debug, Clone)]
pub struct FakeConfig {
    /// Model ids served.
    pub models: Vec<String>,
    /// Context length in tokens.
    pub context_length: usize,
    /// Sequences generated at once.
    pub max_running: usize,
    /// Sequences allowed to wait for a slot; more get `QueueFull`.
    pub max_queue: usize,
    /// Pause before each generated token.
    pub token_delay: Duration,
    /// KV-cache blocks in all.
    pub cache_blocks: usize,
}

impl Default for FakeConfig {
    fn default() -> Self {
        Self {
            models: vec!["fake-model".to_string()],
            context_length: 256,
            max_running: 8,
            max_queue: 64,
            token_delay: Duration::from_millis(1),
            cache_blocks: 4096,
        }
    }
}

struct Shared {
    cfg: FakeConfig,
    slots: Semaphore,
    queued: AtomicUsize,
    running: AtomicUsize,
    blocks: AtomicUsize,
    nonce: AtomicU64,
}

/// A deterministic word generator implementing [`InferenceBackend`].
#[derive(Clone)]
pub struct FakeBackend {
    shared: Arc<Shared>,
}

impl FakeBackend {
    /// A fake backend with these settings.
    pub fn new(cfg: FakeConfig) -> Self {
        Self {
            shared: Arc::new(Shared {
                slots: Semaphore::new(cfg.max_running.max(1)),
                cfg,
                queued: AtomicUsize::new(0),
                running: AtomicUsize::new(0),
                blocks: AtomicUsize::new(0),
                nonce: AtomicU64::new(1),
            }),
        }
    }
}

/// Renders chat messages the way the fake "template" does.
pub fn render_chat(messages: &[crate::backend::ChatMessage]) -> String {
    let mut s = String::new();
    for m in messages {
        s.push_str(&format!("<{}> {}\n", m.role, m.content));
    }
    s.push_str("<assistant>");
    s
}

/// The fake tokenizer: one token per whitespace-separated word, ids from a hash.
pub fn tokenize(text: &str) -> Vec<u32> {
    text.split_whitespace()
        .map(|w| {
            let mut h = DefaultHasher::new();
            w.hash(&mut h);
            (h.finish() % WORDS.len() as u64) as u32
        })
        .collect()
}

fn token_text(id: u32) -> String {
    format!(" {}", WORDS[(id as usize) % WORDS.len()])
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn logprob_of(id: u32, rank: usize) -> f32 {
    -0.05 - rank as f32 * 0.5 - (id % 7) as f32 * 0.01
}

impl InferenceBackend for FakeBackend {
    fn models(&self) -> Vec<ModelInfo> {
        self.shared
            .cfg
            .models
            .iter()
            .map(|id| ModelInfo {
                id: id.clone(),
                created: 1_700_000_000,
                owned_by: "pocketllm".to_string(),
                context_length: self.shared.cfg.context_length,
            })
            .collect()
    }

    fn submit(&self, req: GenerationRequest) -> Result<GenerationHandle, SubmitError> {
        let cfg = &self.shared.cfg;
        if !cfg.models.contains(&req.model) {
            return Err(SubmitError::UnknownModel(req.model));
        }
        let prompt_ids = match &req.prompt {
            Prompt::Chat(m) => tokenize(&render_chat(m)),
            Prompt::Text(t) => tokenize(t),
            Prompt::Tokens(t) => {
                if let Some(bad) = t.iter().find(|&&t| t >= FAKE_VOCAB) {
                    return Err(SubmitError::Invalid {
                        param: Some("prompt".into()),
                        message: format!("token id {bad} is outside the vocabulary"),
                    });
                }
                t.clone()
            }
        };
        if prompt_ids.is_empty() {
            return Err(SubmitError::Invalid {
                param: Some("prompt".into()),
                message: "the prompt is empty".into(),
            });
        }
        if let Some(bad) = req.sampling.logit_bias.keys().find(|&&t| t >= FAKE_VOCAB) {
            return Err(SubmitError::Invalid {
                param: Some("logit_bias".into()),
                message: format!("logit_bias names token id {bad}, outside the vocabulary"),
            });
        }
        let ctx = cfg.context_length;
        if prompt_ids.len() >= ctx {
            return Err(SubmitError::PromptTooLong {
                prompt_tokens: prompt_ids.len(),
                context_length: ctx,
            });
        }
        if let Some(m) = req.max_tokens {
            if prompt_ids.len() + m > ctx {
                return Err(SubmitError::ContextExceeded {
                    prompt_tokens: prompt_ids.len(),
                    max_tokens: m,
                    requested: prompt_ids.len() + m,
                    context_length: ctx,
                });
            }
        }
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| SubmitError::Unavailable("no async runtime".into()))?;
        // Admission: a free slot, or room in the queue.
        let queued = self.shared.queued.load(Ordering::SeqCst);
        if self.shared.slots.available_permits() == 0 && queued >= cfg.max_queue {
            return Err(SubmitError::QueueFull { queued });
        }
        self.shared.queued.fetch_add(1, Ordering::SeqCst);

        let (tx, rx) = mpsc::unbounded_channel();
        let cancel = Arc::new(Notify::new());
        let cancel2 = cancel.clone();
        let shared = self.shared.clone();
        let nonce = shared.nonce.fetch_add(1, Ordering::Relaxed);
        runtime.spawn(async move {
            tokio::select! {
                _ = cancel2.notified() => {
                    shared.queued.fetch_sub(1, Ordering::SeqCst);
                }
                permit = shared.slots.acquire() => {
                    shared.queued.fetch_sub(1, Ordering::SeqCst);
                    let Ok(_permit) = permit else { return };
                    shared.running.fetch_add(1, Ordering::SeqCst);
                    tokio::select! {
                        _ = cancel2.notified() => {}
                        _ = generate(&shared, &req, &prompt_ids, nonce, &tx) => {}
                    }
                    shared.running.fetch_sub(1, Ordering::SeqCst);
                }
            }
        });
        Ok(GenerationHandle::new(
            rx,
            CancelOnDrop::new(move || cancel.notify_one()),
        ))
    }

    fn detokenize(&self, model: &str, tokens: &[u32]) -> Result<String, SubmitError> {
        if !self.shared.cfg.models.iter().any(|m| m == model) {
            return Err(SubmitError::UnknownModel(model.to_string()));
        }
        Ok(tokens.iter().map(|&t| token_text(t)).collect())
    }

    fn stats(&self) -> BackendStats {
        BackendStats {
            queued: self.shared.queued.load(Ordering::SeqCst),
            running: self.shared.running.load(Ordering::SeqCst),
            cache_blocks_used: self.shared.blocks.load(Ordering::SeqCst),
            cache_blocks_total: self.shared.cfg.cache_blocks,
        }
    }
}

/// Frees the blocks a sequence holds when it ends, however it ends.
struct Blocks<'a> {
    counter: &'a AtomicUsize,
    held: usize,
}

impl Blocks<'_> {
    fn grow_to(&mut self, tokens: usize) {
        let need = tokens.div_ceil(BLOCK_TOKENS);
        if need > self.held {
            self.counter.fetch_add(need - self.held, Ordering::SeqCst);
            self.held = need;
        }
    }
}

impl Drop for Blocks<'_> {
    fn drop(&mut self) {
        self.counter.fetch_sub(self.held, Ordering::SeqCst);
    }
}

async fn generate(
    shared: &Shared,
    req: &GenerationRequest,
    prompt: &[u32],
    nonce: u64,
    tx: &mpsc::UnboundedSender<GenerationEvent>,
) {
    let cfg = &shared.cfg;
    let mut blocks = Blocks {
        counter: &shared.blocks,
        held: 0,
    };
    blocks.grow_to(prompt.len());
    if tx
        .send(GenerationEvent::Started {
            prompt_tokens: prompt.len(),
        })
        .is_err()
    {
        return;
    }
    let mut h = DefaultHasher::new();
    prompt.hash(&mut h);
    let prompt_hash = h.finish();
    let mut rng = match (req.sampling.seed, req.sampling.temperature == 0.0) {
        (_, true) => prompt_hash,
        (Some(seed), false) => prompt_hash ^ seed.wrapping_mul(0x2545_F491_4F6C_DD1D),
        (None, false) => prompt_hash ^ nonce.wrapping_mul(0x9E37_79B9) ^ 0xABCD,
    };
    // The fake model "wants" to stop after 8..16 tokens, unless a +100 logit bias forces a token.
    let natural_len = 8 + (prompt_hash % 9) as usize;
    let limit = req
        .max_tokens
        .unwrap_or(usize::MAX)
        .min(cfg.context_length - prompt.len());
    let forced = req
        .sampling
        .logit_bias
        .iter()
        .find(|(_, &b)| b >= 100.0)
        .map(|(&t, _)| t);
    let mut stop = StopMatcher::new(&req.stop);
    let mut generated = 0usize;
    let reason = loop {
        if generated >= limit {
            break FinishReason::Length;
        }
        if forced.is_none() && generated >= natural_len {
            break FinishReason::Stop;
        }
        if !cfg.token_delay.is_zero() {
            tokio::time::sleep(cfg.token_delay).await;
        }
        let id = match forced {
            Some(t) => t,
            None => loop {
                let id = (splitmix(&mut rng) % WORDS.len() as u64) as u32;
                let banned = req
                    .sampling
                    .logit_bias
                    .get(&id)
                    .is_some_and(|&b| b <= -100.0);
                if !banned {
                    break id;
                }
            },
        };
        generated += 1;
        blocks.grow_to(prompt.len() + generated);
        let logprob = req.logprobs.map(|k| {
            let tl = |id: u32, rank: usize| TokenLogprob {
                token: token_text(id),
                bytes: token_text(id).into_bytes(),
                logprob: logprob_of(id, rank),
            };
            LogprobInfo {
                chosen: tl(id, 0),
                top: (0..k)
                    .map(|r| tl((id + r as u32) % WORDS.len() as u32, r))
                    .collect(),
            }
        });
        let out = stop.push(&token_text(id));
        let ev = GenerationEvent::Token {
            text: out.emit,
            token_id: id,
            logprob,
        };
        if tx.send(ev).is_err() {
            return;
        }
        if out.stopped {
            break FinishReason::Stop;
        }
    };
    let rest = stop.flush();
    if !rest.is_empty() {
        let _ = tx.send(GenerationEvent::Text(rest));
    }
    let _ = tx.send(GenerationEvent::Finished {
        reason,
        completion_tokens: generated,
    });
}
