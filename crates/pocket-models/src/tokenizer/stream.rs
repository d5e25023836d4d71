//! Incremental detokenization for streaming: emits text as soon as it is complete UTF-8, never a
//! partial character.

use super::{Tokenizer, TokenizerError};

/// Turns a stream of token ids into text deltas that are always whole characters.
///
/// ```
/// # use pocket_models::tokenizer::{GgufVocab, Tokenizer};
/// # let vocab = GgufVocab { model: "llama".into(),
/// #   tokens: ["<unk>", "<s>", "</s>", "<0xC3>", "<0xA9>", "\u{2581}a"].iter().map(|s| s.to_string()).collect(),
/// #   token_types: vec![2, 3, 3, 6, 6, 1], scores: vec![0.0; 6], ..Default::default() };
/// let tok = Tokenizer::from_gguf_vocab(&vocab)?;
/// let mut dec = tok.stream_decoder(true);
/// assert_eq!(dec.push(&tok, 5)?, "a");
/// assert_eq!(dec.push(&tok, 3)?, ""); // first byte of "é" held back
/// assert_eq!(dec.push(&tok, 4)?, "é");
/// assert_eq!(dec.finish(&tok)?, "");
/// # Ok::<(), pocket_models::tokenizer::TokenizerError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct StreamDecoder {
    skip_special: bool,
    /// Bytes not yet emitted (an incomplete UTF-8 sequence), GGUF vocabularies.
    pending: Vec<u8>,
    /// Whether any token has produced bytes yet (the SentencePiece dummy space is stripped once).
    seen_bytes: bool,
    /// Ids seen so far and the decode window offsets, tokenizer.json backend.
    ids: Vec<u32>,
    prefix_offset: usize,
    read_offset: usize,
}

impl StreamDecoder {
    /// A new decoder; `skip_special` drops control tokens from the text.
    pub fn new(skip_special: bool) -> Self {
        Self {
            skip_special,
            ..Self::default()
        }
    }

    /// Adds one token and returns the text that became complete (possibly empty).
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Result<String, TokenizerError> {
        if let Some(hf) = tok.hf() {
            self.ids.push(id);
            let prefix = hf.decode(
                &self.ids[self.prefix_offset..self.read_offset],
                self.skip_special,
            )?;
            let full = hf.decode(&self.ids[self.prefix_offset..], self.skip_special)?;
            if full.len() > prefix.len()
                && !full.ends_with('\u{FFFD}')
                && full.is_char_boundary(prefix.len())
            {
                let delta = full[prefix.len()..].to_string();
                self.prefix_offset = self.read_offset;
                self.read_offset = self.ids.len();
                return Ok(delta);
            }
            return Ok(String::new());
        }
        let start = self.pending.len();
        tok.append_token_bytes(id, !self.skip_special, &mut self.pending)?;
        if !self.seen_bytes && self.pending.len() > start {
            self.seen_bytes = true;
            tok.strip_first_space(&mut self.pending, start);
        }
        Ok(self.drain(false))
    }

    /// Ends the stream: whatever is still held back is returned (broken bytes as U+FFFD).
    pub fn finish(&mut self, tok: &Tokenizer) -> Result<String, TokenizerError> {
        if let Some(hf) = tok.hf() {
            let prefix = hf.decode(
                &self.ids[self.prefix_offset..self.read_offset],
                self.skip_special,
            )?;
            let full = hf.decode(&self.ids[self.prefix_offset..], self.skip_special)?;
            self.prefix_offset = self.ids.len();
            self.read_offset = self.ids.len();
            if full.len() > prefix.len() && full.is_char_boundary(prefix.len()) {
                return Ok(full[prefix.len()..].to_string());
            }
            return Ok(String::new());
        }
        Ok(self.drain(true))
    }

    fn drain(&mut self, flush: bool) -> String {
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (good, bad) = rest.split_at(e.valid_up_to());
                    out.push_str(std::str::from_utf8(good).unwrap_or_default());
                    match e.error_len() {
                        Some(n) => {
                            out.push('\u{FFFD}');
                            rest = &bad[n..];
                        }
                        None if flush => {
                            out.push('\u{FFFD}');
                            rest = &[];
                            break;
                        }
                        None => {
                            rest = bad;
                            break;
                        }
                    }
                }
            }
        }
        let keep = rest.len();
        let len = self.pending.len();
        self.pending.drain(..len - keep);
        out
    }
}
