//! Continuous-batching adapter: an [`InferenceBackend`] over any step-level engine.
//!
//! One scheduler thread owns the engine. Between two `step()` calls (a token boundary) it takes
//! new requests from a channel, admits waiting sequences while the batch has room, cancels those
//! whose client went away, and routes each produced token to its request's channel after
//! detokenizing it and checking stop strings. The waiting queue is bounded: a full one makes
//! `submit` fail with [`SubmitError::QueueFull`] (HTTP 429).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::thread;

use tokio::sync::mpsc;

use crate::backend::{
    BackendStats, CancelOnDrop, FinishReason, GenerationEvent, GenerationHandle, GenerationRequest,
    InferenceBackend, LogprobInfo, ModelInfo, Prompt, SamplingOptions, SubmitError, TokenLogprob,
};
use crate::stop::StopMatcher;

/// One token produced by [`StepEngine::step`] for one sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct StepToken {
    /// The sampled token id (`None` when the sequence ended without one, e.g. context full).
    pub token: Option<u32>,
    /// Log-probability of the token and the top alternatives `(id, logprob)`, when asked for.
    pub logprobs: Option<(f32, Vec<(u32, f32)>)>,
    /// Set on the sequence's last token: why it ended.
    pub finished: Option<FinishReason>,
    /// The token is an end-of-sequence marker: counted, not shown.
    pub is_eos: bool,
    /// The engine failed this sequence (it is gone from the engine).
    pub error: Option<String>,
}

/// What the adapter asks of an engine: sequences in, tokens out, one batch step at a time.
pub trait StepEngine: Send + 'static {
    /// Adds a sequence to the running batch; returns its engine id.
    fn add_sequence(
        &mut self,
        prompt: &[u32],
        sampling: &SamplingOptions,
        max_tokens: usize,
        top_logprobs: Option<usize>,
    ) -> Result<u64, String>;
    /// Runs one step of the batch; at most one token per running sequence.
    fn step(&mut self) -> Result<Vec<(u64, StepToken)>, String>;
    /// Drops a sequence and frees its cache now.
    fn cancel(&mut self, id: u64);
    /// KV-cache blocks `(used, total)`.
    fn cache_blocks(&self) -> (usize, usize);
}

/// Text side of a model: prompt encoding and token decoding.
pub trait TextCodec: Send + Sync + 'static {
    /// Renders and tokenizes a prompt (chat template for chat messages).
    fn encode(&self, prompt: &Prompt) -> Result<Vec<u32>, SubmitError>;
    /// Decodes ids to text (special tokens skipped; broken UTF-8 as U+FFFD).
    fn decode(&self, ids: &[u32]) -> String;
    /// The raw bytes of one token.
    fn token_bytes(&self, id: u32) -> Vec<u8>;
    /// Vocabulary size (ids at or above are invalid).
    fn vocab_size(&self) -> usize;
}

/// Limits of a [`SchedulerBackend`].
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// The model's id and metadata.
    pub model: ModelInfo,
    /// Sequences in the running batch at most.
    pub max_running: usize,
    /// Sequences waiting for a slot at most (429 beyond).
    pub max_queue: usize,
}

enum Command {
    /// Sequences admitted together, in order.
    Submit(Vec<Pending>),
    Cancel(u64),
}

struct Pending {
    id: u64,
    prompt: Vec<u32>,
    req: GenerationRequest,
    max_tokens: usize,
    tx: mpsc::UnboundedSender<GenerationEvent>,
}

struct Running {
    pending: Pending,
    generated: Vec<u32>,
    prefix_offset: usize,
    read_offset: usize,
    stop: StopMatcher,
}

struct Shared {
    waiting: AtomicUsize,
    running: AtomicUsize,
    cache: Mutex<(usize, usize)>,
}

/// An [`InferenceBackend`] that drives a [`StepEngine`] on its own thread.
pub struct SchedulerBackend {
    cfg: SchedulerConfig,
    codec: Arc<dyn TextCodec>,
    tx: Mutex<std_mpsc::Sender<Command>>,
    shared: Arc<Shared>,
    next_id: AtomicUsize,
}

impl SchedulerBackend {
    /// Starts the scheduler thread that owns `engine`.
    pub fn start<E: StepEngine>(
        engine: E,
        codec: Arc<dyn TextCodec>,
        cfg: SchedulerConfig,
    ) -> Self {
        let (tx, rx) = std_mpsc::channel();
        let shared = Arc::new(Shared {
            waiting: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            cache: Mutex::new(engine.cache_blocks()),
        });
        let s2 = shared.clone();
        let codec2 = codec.clone();
        let max_running = cfg.max_running.max(1);
        let _ = thread::Builder::new()
            .name("pocket-scheduler".into())
            .spawn(move || run(engine, codec2, rx, s2, max_running));
        Self {
            cfg,
            codec,
            tx: Mutex::new(tx),
            shared,
            next_id: AtomicUsize::new(1),
        }
    }

    /// Encodes and checks one request: its prompt tokens, the request and its token limit.
    fn prepare(
        &self,
        req: GenerationRequest,
    ) -> Result<(Vec<u32>, GenerationRequest, usize), SubmitError> {
        let prompt = self.codec.encode(&req.prompt)?;
        let vocab = self.codec.vocab_size();
        if let Some(bad) = prompt.iter().find(|&&t| t as usize >= vocab) {
            return Err(SubmitError::Invalid {
                param: Some("prompt".into()),
                message: format!("token id {bad} is outside the vocabulary of {vocab}"),
            });
        }
        if let Some(bad) = req
            .sampling
            .logit_bias
            .keys()
            .find(|&&t| t as usize >= vocab)
        {
            return Err(SubmitError::Invalid {
                param: Some("logit_bias".into()),
                message: format!(
                    "logit_bias names token id {bad}, outside the vocabulary of {vocab}"
                ),
            });
        }
        if prompt.is_empty() {
            return Err(SubmitError::Invalid {
                param: Some("prompt".into()),
                message: "the prompt is empty".into(),
            });
        }
        let ctx = self.cfg.model.context_length;
        if prompt.len() >= ctx {
            return Err(SubmitError::PromptTooLong {
                prompt_tokens: prompt.len(),
                context_length: ctx,
            });
        }
        let room = ctx - prompt.len();
        let max_tokens = match req.max_tokens {
            Some(m) if m > room => {
                return Err(SubmitError::ContextExceeded {
                    prompt_tokens: prompt.len(),
                    max_tokens: m,
                    requested: prompt.len() + m,
                    context_length: ctx,
                })
            }
            Some(m) => m,
            None => room,
        };
        Ok((prompt, req, max_tokens))
    }

    fn send(&self, c: Command) -> Result<(), SubmitError> {
        self.tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(c)
            .map_err(|_| SubmitError::Unavailable("the scheduler thread has stopped".into()))
    }
}

impl InferenceBackend for SchedulerBackend {
    fn models(&self) -> Vec<ModelInfo> {
        vec![self.cfg.model.clone()]
    }

    fn submit(&self, req: GenerationRequest) -> Result<GenerationHandle, SubmitError> {
        let mut handles = self.submit_all(vec![req])?;
        handles
            .pop()
            .ok_or_else(|| SubmitError::Unavailable("nothing submitted".into()))
    }

    /// Validates every request first, then enqueues them as one command, so the scheduler admits
    /// them at the same token boundary (where the batch has room): the `n` choices of a request
    /// then share their steps, and a seeded request meets the same batch every time it runs on an
    /// otherwise idle server.
    fn submit_all(
        &self,
        reqs: Vec<GenerationRequest>,
    ) -> Result<Vec<GenerationHandle>, SubmitError> {
        let mut prepared = Vec::with_capacity(reqs.len());
        for req in reqs {
            if req.model != self.cfg.model.id {
                return Err(SubmitError::UnknownModel(req.model));
            }
            prepared.push(self.prepare(req)?);
        }
        let k = prepared.len();
        let waiting = self.shared.waiting.load(Ordering::SeqCst);
        let running = self.shared.running.load(Ordering::SeqCst);
        if waiting + running + k > self.cfg.max_running + self.cfg.max_queue {
            return Err(SubmitError::QueueFull { queued: waiting });
        }
        self.shared.waiting.fetch_add(k, Ordering::SeqCst);
        let mut group = Vec::with_capacity(k);
        let mut handles = Vec::with_capacity(k);
        let cancel_tx = self.tx.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for (prompt, req, max_tokens) in prepared {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed) as u64;
            let (tx, rx) = mpsc::unbounded_channel();
            group.push(Pending {
                id,
                prompt,
                req,
                max_tokens,
                tx,
            });
            let cancel_tx = cancel_tx.clone();
            handles.push(GenerationHandle::new(
                rx,
                CancelOnDrop::new(move || {
                    let _ = cancel_tx.send(Command::Cancel(id));
                }),
            ));
        }
        if let Err(e) = self.send(Command::Submit(group)) {
            self.shared.waiting.fetch_sub(k, Ordering::SeqCst);
            // Dropping `handles` sends cancels to the stopped scheduler: nothing to undo.
            return Err(e);
        }
        Ok(handles)
    }

    fn detokenize(&self, model: &str, tokens: &[u32]) -> Result<String, SubmitError> {
        if model != self.cfg.model.id {
            return Err(SubmitError::UnknownModel(model.to_string()));
        }
        Ok(self.codec.decode(tokens))
    }

    fn stats(&self) -> BackendStats {
        let (used, total) = *self.shared.cache.lock().unwrap_or_else(|e| e.into_inner());
        BackendStats {
            queued: self.shared.waiting.load(Ordering::SeqCst),
            running: self.shared.running.load(Ordering::SeqCst),
            cache_blocks_used: used,
            cache_blocks_total: total,
        }
    }
}

fn logprob_info(codec: &dyn TextCodec, token: u32, lp: &(f32, Vec<(u32, f32)>)) -> LogprobInfo {
    let tl = |id: u32, logprob: f32| {
        let bytes = codec.token_bytes(id);
        TokenLogprob {
            token: String::from_utf8_lossy(&bytes).into_owned(),
            bytes,
            logprob,
        }
    };
    LogprobInfo {
        chosen: tl(token, lp.0),
        top: lp.1.iter().map(|&(id, l)| tl(id, l)).collect(),
    }
}

/// Incremental detokenization (prefix/read offsets): the new text since the last call, held back
/// while it ends in an incomplete UTF-8 sequence.
fn new_text(codec: &dyn TextCodec, r: &mut Running) -> String {
    let prefix = codec.decode(&r.generated[r.prefix_offset..r.read_offset]);
    let full = codec.decode(&r.generated[r.prefix_offset..]);
    if full.len() > prefix.len()
        && !full.ends_with('\u{FFFD}')
        && full.is_char_boundary(prefix.len())
    {
        r.prefix_offset = r.read_offset;
        r.read_offset = r.generated.len();
        full[prefix.len()..].to_string()
    } else {
        String::new()
    }
}

fn run<E: StepEngine>(
    mut engine: E,
    codec: Arc<dyn TextCodec>,
    rx: std_mpsc::Receiver<Command>,
    shared: Arc<Shared>,
    max_running: usize,
) {
    let mut waiting: VecDeque<Pending> = VecDeque::new();
    let mut running: HashMap<u64, Running> = HashMap::new();
    let mut engine_of: HashMap<u64, u64> = HashMap::new();
    let publish = |engine: &E, waiting: usize, running: usize| {
        shared.waiting.store(waiting, Ordering::SeqCst);
        shared.running.store(running, Ordering::SeqCst);
        *shared.cache.lock().unwrap_or_else(|e| e.into_inner()) = engine.cache_blocks();
    };
    loop {
        // Take commands: block when idle, drain when busy.
        let mut cmds = Vec::new();
        if running.is_empty() && waiting.is_empty() {
            match rx.recv() {
                Ok(c) => cmds.push(c),
                Err(_) => return,
            }
        }
        cmds.extend(rx.try_iter());
        for c in cmds {
            match c {
                Command::Submit(group) => waiting.extend(group),
                Command::Cancel(id) => {
                    waiting.retain(|p| p.id != id);
                    if let Some(eid) = engine_of.remove(&id) {
                        engine.cancel(eid);
                        running.remove(&eid);
                    }
                }
            }
        }
        // Admit at the token boundary.
        while running.len() < max_running {
            let Some(p) = waiting.pop_front() else { break };
            if p.tx.is_closed() {
                continue;
            }
            match engine.add_sequence(&p.prompt, &p.req.sampling, p.max_tokens, p.req.logprobs) {
                Ok(eid) => {
                    let _ = p.tx.send(GenerationEvent::Started {
                        prompt_tokens: p.prompt.len(),
                    });
                    engine_of.insert(p.id, eid);
                    let stop = StopMatcher::new(&p.req.stop);
                    running.insert(
                        eid,
                        Running {
                            pending: p,
                            generated: Vec::new(),
                            prefix_offset: 0,
                            read_offset: 0,
                            stop,
                        },
                    );
                }
                Err(e) => {
                    let _ = p.tx.send(GenerationEvent::Error(e));
                }
            }
        }
        publish(&engine, waiting.len(), running.len());
        if running.is_empty() {
            continue;
        }
        let events = match engine.step() {
            Ok(ev) => ev,
            Err(e) => {
                for (eid, r) in running.drain() {
                    let _ = r.pending.tx.send(GenerationEvent::Error(e.clone()));
                    engine.cancel(eid);
                    engine_of.remove(&r.pending.id);
                }
                publish(&engine, waiting.len(), 0);
                continue;
            }
        };
        for (eid, tok) in events {
            let Some(r) = running.get_mut(&eid) else {
                continue;
            };
            if let Some(e) = tok.error {
                let _ = r.pending.tx.send(GenerationEvent::Error(e));
                if let Some(r) = running.remove(&eid) {
                    engine_of.remove(&r.pending.id);
                }
                continue;
            }
            let mut done = tok.finished;
            let shown = tok.token.filter(|_| !tok.is_eos);
            let mut alive = true;
            if let Some(t) = shown {
                r.generated.push(t);
                let piece = new_text(codec.as_ref(), r);
                let out = r.stop.push(&piece);
                if out.stopped {
                    done = Some(FinishReason::Stop);
                }
                let logprob = match (&tok.logprobs, r.pending.req.logprobs) {
                    (Some(lp), Some(_)) => Some(logprob_info(codec.as_ref(), t, lp)),
                    _ => None,
                };
                alive = r
                    .pending
                    .tx
                    .send(GenerationEvent::Token {
                        text: out.emit,
                        token_id: t,
                        logprob,
                    })
                    .is_ok();
            }
            let completion_tokens = r.generated.len() + usize::from(tok.is_eos);
            if let Some(reason) = done {
                if reason != FinishReason::Stop || tok.finished.is_some() {
                    let rest = r.stop.flush();
                    if !rest.is_empty() {
                        let _ = r.pending.tx.send(GenerationEvent::Text(rest));
                    }
                }
                let _ = r.pending.tx.send(GenerationEvent::Finished {
                    reason,
                    completion_tokens,
                });
                alive = false;
            }
            if !alive {
                if let Some(r) = running.remove(&eid) {
                    engine_of.remove(&r.pending.id);
                }
                if tok.finished.is_none() {
                    engine.cancel(eid);
                }
            }
        }
        publish(&engine, waiting.len(), running.len());
    }
}
