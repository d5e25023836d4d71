//! The engine: a loaded model, its KV cache, tokenizer, chat template and sampler, driven one
//! step at a time over a batch of sequences.
//!
//! `add_sequence` queues a prompt; each `step` runs one forward over every active sequence
//! (whole prompts for new ones, one token for decoding ones) and returns a [`TokenEvent`] per
//! sequence; `cancel` drops one. `generate` and `generate_text` are blocking conveniences on top.

mod builder;
mod error;
mod graphs;
mod sequence;
mod step;
mod stream;

use std::collections::BTreeMap;

pub use builder::{cache_dtype_by_name, default_cache_dtype, EngineBuilder};
pub use error::{EngineError, Result};
pub use sequence::{FinishReason, GenerateParams, TokenEvent};
pub use stream::{GenerationStream, StreamEvent, Usage};

use crate::chat_template::{ChatMessage, ChatTemplate, RenderOptions};
use crate::model::{KvCache, Model, SeqId};
use crate::sampling::{Sampler, StopChecker};
use crate::tokenizer::Tokenizer;
use sequence::Sequence;

/// The result of a blocking generation.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// Generated token ids (stop tokens excluded).
    pub ids: Vec<u32>,
    /// Generated text (stop strings excluded).
    pub text: String,
    /// Why it ended.
    pub finish: FinishReason,
}

/// A model ready to generate, with its cache and text tools.
pub struct Engine {
    model: Box<dyn Model>,
    cache: KvCache,
    tokenizer: Option<Tokenizer>,
    template: Option<ChatTemplate>,
    seqs: BTreeMap<SeqId, Sequence>,
    next_id: SeqId,
    max_batch_tokens: usize,
    /// Decode-step graphs and device sampling (used where the device and model support them).
    graphs: graphs::DecodeGraphs,
}

impl Engine {
    /// A builder: `Engine::builder().model("smollm2-135m-instruct").build()?`.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// The loaded model.
    pub fn model(&self) -> &dyn Model {
        self.model.as_ref()
    }

    /// The tokenizer, if the checkpoint has one.
    pub fn tokenizer(&self) -> Option<&Tokenizer> {
        self.tokenizer.as_ref()
    }

    /// The KV cache (for capacity checks).
    pub fn cache(&self) -> &KvCache {
        &self.cache
    }

    /// Sequences not yet finished.
    pub fn active(&self) -> usize {
        self.seqs.len()
    }

    /// Queues a prompt; it is prefilled by the next [`Engine::step`].
    pub fn add_sequence(&mut self, prompt: Vec<u32>, params: GenerateParams) -> Result<SeqId> {
        if prompt.is_empty() {
            return Err(EngineError::InvalidRequest("empty prompt".into()));
        }
        let limit = self.cache.config().max_seq_len;
        if prompt.len() >= limit {
            return Err(EngineError::InvalidRequest(format!(
                "prompt of {} tokens does not fit the context of {limit}",
                prompt.len()
            )));
        }
        let vocab = self.model.info().vocab_size;
        if let Some(&bad) = prompt.iter().find(|&&t| t as usize >= vocab) {
            return Err(EngineError::InvalidRequest(format!(
                "token {bad} outside the vocabulary of {vocab}"
            )));
        }
        let id = self.next_id;
        self.next_id += 1;
        let mut stop_ids: Vec<u32> = Vec::new();
        if !params.ignore_eos {
            if let Some(t) = &self.tokenizer {
                stop_ids.extend_from_slice(t.stop_token_ids());
            }
        }
        let seq = Sequence {
            tokens: prompt.clone(),
            pending: prompt,
            generated: 0,
            sampler: Sampler::new(params.sampling.clone(), id)?,
            stop: StopChecker::new(stop_ids, params.stop.clone()),
            decoder: crate::tokenizer::StreamDecoder::new(true),
            params,
        };
        self.seqs.insert(id, seq);
        Ok(id)
    }

    /// Drops a sequence and frees its cache blocks.
    pub fn cancel(&mut self, id: SeqId) -> Result<()> {
        self.seqs
            .remove(&id)
            .ok_or(EngineError::UnknownSequence(id))?;
        self.cache.free_sequence(id);
        Ok(())
    }

    /// Runs every queued sequence to completion, blocking; returns the generated ids and text.
    pub fn generate(&mut self, prompt: Vec<u32>, params: GenerateParams) -> Result<Generation> {
        self.generate_with(prompt, params, |_| {})
    }

    /// Like [`Engine::generate`], calling `on_text` with each piece of text as it is decoded.
    pub fn generate_with(
        &mut self,
        prompt: Vec<u32>,
        params: GenerateParams,
        mut on_text: impl FnMut(&str),
    ) -> Result<Generation> {
        let id = self.add_sequence(prompt, params)?;
        let mut out = Generation {
            ids: Vec::new(),
            text: String::new(),
            finish: FinishReason::Length,
        };
        loop {
            for (sid, ev) in self.step()? {
                if sid != id {
                    continue;
                }
                if let Some(t) = ev.token {
                    if self.is_text_token(t) || ev.finish != Some(FinishReason::Stop) {
                        out.ids.push(t);
                    }
                }
                if !ev.text.is_empty() {
                    on_text(&ev.text);
                    out.text.push_str(&ev.text);
                }
                if let Some(f) = ev.finish {
                    if let FinishReason::Error(e) = &f {
                        return Err(EngineError::InvalidRequest(e.clone()));
                    }
                    out.finish = f;
                    return Ok(out);
                }
            }
        }
    }

    /// Whether a token is ordinary text (not an end-of-generation token).
    fn is_text_token(&self, id: u32) -> bool {
        self.tokenizer
            .as_ref()
            .is_none_or(|t| !t.stop_token_ids().contains(&id))
    }

    /// Tokenizes `prompt`, through the chat template as one user turn unless `raw`.
    pub fn encode_prompt(&self, prompt: &str, raw: bool) -> Result<Vec<u32>> {
        let tok = self.tokenizer.as_ref().ok_or(EngineError::NoTokenizer)?;
        let text = if raw {
            prompt.to_string()
        } else {
            let tpl = self.template.as_ref().ok_or(EngineError::NoChatTemplate)?;
            let opts = RenderOptions {
                add_generation_prompt: true,
                bos_token: tok.bos_token().map(str::to_string),
                eos_token: tok.eos_token().map(str::to_string),
                ..Default::default()
            };
            tpl.render(&[ChatMessage::user(prompt)], &opts)?
        };
        Ok(tok.encode(&text, true, true)?)
    }

    /// Tokenizes and generates, streaming text to `on_text`.
    pub fn generate_text(
        &mut self,
        prompt: &str,
        raw: bool,
        params: GenerateParams,
        on_text: impl FnMut(&str),
    ) -> Result<Generation> {
        let ids = self.encode_prompt(prompt, raw)?;
        self.generate_with(ids, params, on_text)
    }
}
