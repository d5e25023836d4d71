//! Token ids to user-visible text: incremental detokenization followed by stop checks, the two
//! hold-back rules composed (incomplete UTF-8, possible start of a stop string).

use crate::tokenizer::{StreamDecoder, Tokenizer, TokenizerError};

use super::{StopChecker, StopStep};

/// Streams generated ids as text that is safe to show, stopping on stop ids and stop strings.
///
/// ```
/// # use pocket_models::tokenizer::{GgufVocab, Tokenizer};
/// use pocket_models::sampling::{StopReason, TextStream};
/// # let vocab = GgufVocab { model: "llama".into(),
/// #   tokens: ["<unk>", "<s>", "</s>", "\u{2581}a", "b", "c"].iter().map(|s| s.to_string()).collect(),
/// #   token_types: vec![2, 3, 3, 1, 1, 1], scores: vec![0.0; 6], eos_token_id: Some(2),
/// #   ..Default::default() };
/// let tok = Tokenizer::from_gguf_vocab(&vocab)?;
/// let mut stream = TextStream::new(&tok, true, vec!["bc".into()]);
/// assert_eq!(stream.push(&tok, 3)?.text, "a");
/// assert_eq!(stream.push(&tok, 4)?.text, ""); // "b" might start "bc"
/// let step = stream.push(&tok, 5)?;
/// assert_eq!((step.text.as_str(), step.stop), ("", Some(StopReason::String(0))));
/// # Ok::<(), pocket_models::tokenizer::TokenizerError>(())
/// ```
#[derive(Debug, Clone)]
pub struct TextStream {
    decoder: StreamDecoder,
    stop: StopChecker,
}

impl TextStream {
    /// Stops on the tokenizer's end-of-generation ids and on `stop_strings`.
    pub fn new(tok: &Tokenizer, skip_special: bool, stop_strings: Vec<String>) -> Self {
        Self::with_stop(
            tok,
            skip_special,
            StopChecker::new(tok.stop_token_ids().iter().copied(), stop_strings),
        )
    }

    /// Uses a caller-built stop checker (e.g. extra stop ids, or none).
    pub fn with_stop(tok: &Tokenizer, skip_special: bool, stop: StopChecker) -> Self {
        Self {
            decoder: tok.stream_decoder(skip_special),
            stop,
        }
    }

    /// Feeds one generated id.
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Result<StopStep, TokenizerError> {
        if self.stop.is_stop_token(id) {
            let mut step = self.stop.push(id, "");
            if step.stop.is_some() {
                // text held back only as incomplete UTF-8 is flushed before the stop
                let tail = self.decoder.finish(tok)?;
                step.text.push_str(&tail);
            }
            return Ok(step);
        }
        let text = self.decoder.push(tok, id)?;
        Ok(self.stop.push(id, &text))
    }

    /// Ends the stream for another reason (length limit): everything held back.
    pub fn finish(&mut self, tok: &Tokenizer) -> Result<String, TokenizerError> {
        let tail = self.decoder.finish(tok)?;
        let mut out = self.stop.push_text(&tail).text;
        out.push_str(&self.stop.finish());
        Ok(out)
    }

    /// Whether a stop condition has been met.
    pub fn is_stopped(&self) -> bool {
        self.stop.is_stopped()
    }
}
