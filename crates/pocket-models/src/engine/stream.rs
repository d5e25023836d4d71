//! Streaming generation: an iterator of events for one request, for programs that embed the
//! engine (the server drives [`Engine::step`] directly to batch many requests).

use super::{Engine, EngineError, FinishReason, GenerateParams, Result};
use crate::chat_template::{ChatMessage, RenderOptions};
use crate::model::SeqId;

/// Token counts of a finished request, as the OpenAI API reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// Tokens generated (the stop token included when one ended the request).
    pub completion_tokens: usize,
}

/// One event of a streamed generation.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamEvent {
    /// The token sampled at this step (`None` on a finish-only event).
    pub token: Option<u32>,
    /// Text safe to show now (may be empty while a UTF-8 character or stop string is pending).
    pub text: String,
    /// Log-probability of `token`.
    pub logprob: Option<f32>,
    /// The most likely alternatives at this step, `(token, logprob)`, when requested.
    pub top_logprobs: Vec<(u32, f32)>,
    /// Set on the last event.
    pub finish: Option<FinishReason>,
    /// Set on the last event.
    pub usage: Option<Usage>,
}

/// The events of one request, produced by stepping the engine as the iterator is advanced.
///
/// Dropping the stream early cancels the request and frees its cache blocks.
pub struct GenerationStream<'e> {
    engine: &'e mut Engine,
    id: SeqId,
    usage: Usage,
    done: bool,
}

impl Engine {
    /// Streams the generation of `prompt` (token ids) as [`StreamEvent`]s.
    ///
    /// ```no_run
    /// use pocket_models::{Engine, GenerateParams};
    /// let mut engine = Engine::builder().model("smollm2-135m-instruct").build()?;
    /// let ids = engine.encode_prompt("The capital of France is", true)?;
    /// for event in engine.generate_stream(ids, GenerateParams::default())? {
    ///     print!("{}", event?.text);
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn generate_stream(
        &mut self,
        prompt: Vec<u32>,
        params: GenerateParams,
    ) -> Result<GenerationStream<'_>> {
        let prompt_tokens = prompt.len();
        let id = self.add_sequence(prompt, params)?;
        Ok(GenerationStream {
            engine: self,
            id,
            usage: Usage {
                prompt_tokens,
                completion_tokens: 0,
            },
            done: false,
        })
    }

    /// Streams the assistant's reply to a conversation, rendered with the model's chat template.
    ///
    /// ```no_run
    /// use pocket_models::chat_template::ChatMessage;
    /// use pocket_models::{Engine, GenerateParams};
    /// let mut engine = Engine::builder().model("qwen2.5-coder-0.5b-instruct").build()?;
    /// let messages = [
    ///     ChatMessage::system("You are a helpful assistant."),
    ///     ChatMessage::user("Write a Python function that reverses a string."),
    /// ];
    /// let mut reply = String::new();
    /// for event in engine.chat(&messages, GenerateParams::default())? {
    ///     let event = event?;
    ///     reply.push_str(&event.text);
    ///     if let Some(usage) = event.usage {
    ///         eprintln!("{} prompt + {} completion tokens", usage.prompt_tokens, usage.completion_tokens);
    ///     }
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn chat(
        &mut self,
        messages: &[ChatMessage],
        params: GenerateParams,
    ) -> Result<GenerationStream<'_>> {
        let tok = self.tokenizer.as_ref().ok_or(EngineError::NoTokenizer)?;
        let tpl = self.template.as_ref().ok_or(EngineError::NoChatTemplate)?;
        let opts = RenderOptions {
            add_generation_prompt: true,
            bos_token: tok.bos_token().map(str::to_string),
            eos_token: tok.eos_token().map(str::to_string),
            ..Default::default()
        };
        let text = tpl.render(messages, &opts)?;
        let ids = tok.encode(&text, true, true)?;
        self.generate_stream(ids, params)
    }
}

impl Iterator for GenerationStream<'_> {
    type Item = Result<StreamEvent>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let events = match self.engine.step() {
                Ok(e) => e,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            };
            if events.is_empty() && !self.engine.seqs.contains_key(&self.id) {
                self.done = true;
                return None;
            }
            // Events of other sequences (someone else's requests on this engine) are not ours.
            let Some((_, ev)) = events.into_iter().find(|(sid, _)| *sid == self.id) else {
                continue;
            };
            if ev.token.is_some() {
                self.usage.completion_tokens += 1;
            }
            let finished = ev.finish.is_some();
            if let Some(FinishReason::Error(msg)) = &ev.finish {
                self.done = true;
                return Some(Err(EngineError::InvalidRequest(msg.clone())));
            }
            self.done = finished;
            return Some(Ok(StreamEvent {
                token: ev.token,
                text: ev.text,
                logprob: ev.logprob,
                top_logprobs: ev.top_logprobs,
                finish: ev.finish,
                usage: finished.then_some(self.usage),
            }));
        }
        None
    }
}

impl Drop for GenerationStream<'_> {
    fn drop(&mut self) {
        if !self.done {
            // Ignored: the sequence may already be gone if the last step finished it.
            let _ = self.engine.cancel(self.id);
        }
    }
}
