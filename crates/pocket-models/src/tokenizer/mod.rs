//! Tokenizers: GGUF vocabularies (byte-level BPE with llama.cpp's pre-tokenizers, and
//! SentencePiece-style with byte fallback) and Hugging Face `tokenizer.json` files.
//!
//! ```
//! use pocket_models::tokenizer::{GgufVocab, Tokenizer};
//! // A tiny SentencePiece-style vocabulary: <unk>, <s>, </s>, then pieces.
//! let vocab = GgufVocab {
//!     model: "llama".into(),
//!     tokens: ["<unk>", "<s>", "</s>", "\u{2581}", "h", "i", "\u{2581}h", "\u{2581}hi"]
//!         .iter().map(|s| s.to_string()).collect(),
//!     token_types: vec![2, 3, 3, 1, 1, 1, 1, 1],
//!     scores: vec![0.0, 0.0, 0.0, -1.0, -2.0, -2.0, -1.5, -0.5],
//!     bos_token_id: Some(1),
//!     eos_token_id: Some(2),
//!     ..Default::default()
//! };
//! let tok = Tokenizer::from_gguf_vocab(&vocab)?;
//! let ids = tok.encode("hi", true, false)?;
//! assert_eq!(ids, vec![1, 7]);
//! assert_eq!(tok.decode(&ids, true)?, "hi");
//! # Ok::<(), pocket_models::tokenizer::TokenizerError>(())
//! ```

mod bpe;
mod bytes_unicode;
mod fxhash;
mod gguf;
mod hf;
mod pretokenize;
mod spm;
mod stream;
mod vocab;
mod vocab_tokenizer;

use std::path::PathBuf;

pub use pretokenize::PreTokenizer;
pub use stream::StreamDecoder;
pub use vocab::{GgufVocab, TokenType, VocabModel};

use vocab_tokenizer::VocabTokenizer;

/// Errors from building or running a tokenizer.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// `tokenizer.ggml.model` names an algorithm this crate does not implement.
    #[error("unsupported tokenizer model {0:?} (supported: \"llama\" SentencePiece, \"gpt2\" byte-level BPE)")]
    UnsupportedModel(String),
    /// `tokenizer.ggml.pre` names a pre-tokenizer this crate does not know.
    #[error("unknown BPE pre-tokenizer {0:?} (tokenizer.ggml.pre)")]
    UnknownPreTokenizer(String),
    /// A pre-tokenizer regex failed to compile or to run.
    #[error("pre-tokenizer regex: {0}")]
    Regex(String),
    /// The vocabulary data is inconsistent.
    #[error("invalid vocabulary: {0}")]
    InvalidVocab(String),
    /// A token id outside the vocabulary.
    #[error("token id {0} is outside the vocabulary")]
    UnknownId(u32),
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A metadata key the vocabulary needs is missing or has the wrong type.
    #[error("GGUF metadata: {0}")]
    Metadata(String),
    /// The Hugging Face tokenizer reported an error.
    #[error("tokenizer.json: {0}")]
    HuggingFace(String),
}

#[derive(Debug)]
enum Backend {
    Vocab(Box<VocabTokenizer>),
    /// Two copies: one splitting special-token text into tokens, one treating it as text.
    Hf(Box<hf::HfPair>),
}

/// Token texts that end a turn or a generation when they are special tokens (as llama.cpp's EOG set).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|eom_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<\u{ff5c}end\u{2581}of\u{2581}sentence\u{ff5c}>",
    "<EOT>",
    "<|return|>",
    "<|call|>",
];

/// A tokenizer with its special-token policy (BOS/EOS, end-of-generation ids).
#[derive(Debug)]
pub struct Tokenizer {
    backend: Backend,
    bos: Option<u32>,
    eos: Option<u32>,
    eot: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    stop_ids: Vec<u32>,
    chat_template: Option<String>,
    bos_text: Option<String>,
    eos_text: Option<String>,
}

impl Tokenizer {
    /// Builds a tokenizer from a GGUF vocabulary given as plain data.
    pub fn from_gguf_vocab(v: &GgufVocab) -> Result<Self, TokenizerError> {
        let vt = VocabTokenizer::new(v)?;
        let n = vt.tokens.len() as u32;
        let valid = |id: Option<u32>| id.filter(|&i| i < n);
        let (bos, eos, eot) = (
            valid(v.bos_token_id),
            valid(v.eos_token_id),
            valid(v.eot_token_id),
        );
        // without the key: SentencePiece and the Llama 3 family add BOS (llama.cpp's defaults)
        let llama3 = matches!(
            v.pre.as_deref(),
            Some("llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "pixtral")
        );
        let add_bos = v
            .add_bos_token
            .unwrap_or(vt.model == VocabModel::SentencePiece || llama3)
            && bos.is_some();
        let add_eos = v.add_eos_token.unwrap_or(false) && eos.is_some();
        let mut stop_ids: Vec<u32> = [eos, eot].into_iter().flatten().collect();
        for t in EOG_TEXTS {
            if let Some(&id) = vt.token_to_id.get(*t) {
                if matches!(
                    vt.types[id as usize],
                    TokenType::Control | TokenType::UserDefined
                ) {
                    stop_ids.push(id);
                }
            }
        }
        stop_ids.sort_unstable();
        stop_ids.dedup();
        let text = |id: Option<u32>| id.map(|i| vt.tokens[i as usize].clone());
        Ok(Self {
            bos_text: text(bos),
            eos_text: text(eos),
            backend: Backend::Vocab(Box::new(vt)),
            bos,
            eos,
            eot,
            add_bos,
            add_eos,
            stop_ids,
            chat_template: v.chat_template.clone(),
        })
    }

    /// Loads the tokenizer of a model path: a folder holding `tokenizer.json`, a `tokenizer.json`
    /// file, or a GGUF file (its own vocabulary).
    pub fn from_path(path: &std::path::Path) -> Result<Self, TokenizerError> {
        if path.is_dir() {
            let json = path.join("tokenizer.json");
            if !json.exists() {
                return Err(TokenizerError::Io {
                    path: json,
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "checkpoint folder has no tokenizer.json",
                    ),
                });
            }
            return Self::from_tokenizer_json(&json);
        }
        if path.extension().is_some_and(|e| e == "json") {
            return Self::from_tokenizer_json(path);
        }
        Self::from_gguf_path(path)
    }

    /// Encodes text to ids. `add_special` adds BOS/EOS as the model asks; `parse_special` turns
    /// control-token text (e.g. `<|im_start|>`) into those tokens instead of plain text.
    pub fn encode(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        match &self.backend {
            Backend::Vocab(vt) => {
                let mut out = Vec::with_capacity(text.len() / 3 + 2);
                if add_special && self.add_bos {
                    out.extend(self.bos);
                }
                vt.encode(text, parse_special, &mut out)?;
                if add_special && self.add_eos {
                    out.extend(self.eos);
                }
                Ok(out)
            }
            Backend::Hf(t) => t.encode(text, add_special, parse_special),
        }
    }

    /// Decodes ids to text; `skip_special` drops control tokens. Invalid UTF-8 becomes U+FFFD.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, TokenizerError> {
        match &self.backend {
            Backend::Vocab(_) => {
                let mut bytes = Vec::new();
                let mut first = true;
                for &id in ids {
                    let start = bytes.len();
                    self.append_token_bytes(id, !skip_special, &mut bytes)?;
                    if first && bytes.len() > start {
                        self.strip_first_space(&mut bytes, start);
                        first = false;
                    }
                }
                Ok(String::from_utf8_lossy(&bytes).into_owned())
            }
            Backend::Hf(t) => t.decode(ids, skip_special),
        }
    }

    /// Appends the raw bytes of one token (GGUF vocabularies only; `None` for tokenizer.json).
    pub(crate) fn append_token_bytes(
        &self,
        id: u32,
        special: bool,
        out: &mut Vec<u8>,
    ) -> Result<bool, TokenizerError> {
        match &self.backend {
            Backend::Vocab(vt) => vt.token_bytes(id, special, out).map(|_| true),
            Backend::Hf(_) => Ok(false),
        }
    }

    /// SentencePiece decoding drops the dummy-prefix space of the first piece.
    pub(crate) fn strip_first_space(&self, bytes: &mut Vec<u8>, start: usize) {
        if let Backend::Vocab(vt) = &self.backend {
            if vt.model == VocabModel::SentencePiece
                && vt.add_space_prefix
                && bytes.get(start) == Some(&b' ')
            {
                bytes.remove(start);
            }
        }
    }

    pub(crate) fn hf(&self) -> Option<&hf::HfPair> {
        match &self.backend {
            Backend::Hf(t) => Some(t),
            Backend::Vocab(_) => None,
        }
    }

    /// Starts an incremental decoder for streaming output.
    pub fn stream_decoder(&self, skip_special: bool) -> StreamDecoder {
        StreamDecoder::new(skip_special)
    }

    /// Number of tokens in the vocabulary (including added tokens).
    pub fn vocab_size(&self) -> usize {
        match &self.backend {
            Backend::Vocab(vt) => vt.tokens.len(),
            Backend::Hf(t) => t.parse.get_vocab_size(true),
        }
    }

    /// The vocabulary string of a token (byte-level or `▁` encoded as stored).
    pub fn token_text(&self, id: u32) -> Option<String> {
        match &self.backend {
            Backend::Vocab(vt) => vt.tokens.get(id as usize).cloned(),
            Backend::Hf(t) => t.parse.id_to_token(id),
        }
    }

    /// The id of a vocabulary string, if present.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        match &self.backend {
            Backend::Vocab(vt) => vt.token_to_id.get(text).copied(),
            Backend::Hf(t) => t.parse.token_to_id(text),
        }
    }

    /// Whether a token is a control/special token (never part of ordinary text).
    pub fn is_special(&self, id: u32) -> bool {
        match &self.backend {
            Backend::Vocab(vt) => matches!(
                vt.types.get(id as usize),
                Some(TokenType::Control | TokenType::Unknown)
            ),
            Backend::Hf(t) => t.is_special(id),
        }
    }

    /// Beginning-of-sequence token id.
    pub fn bos_token_id(&self) -> Option<u32> {
        self.bos
    }

    /// End-of-sequence token id.
    pub fn eos_token_id(&self) -> Option<u32> {
        self.eos
    }

    /// End-of-turn token id, when the metadata names one.
    pub fn eot_token_id(&self) -> Option<u32> {
        self.eot
    }

    /// The BOS token's text (for chat templates' `bos_token`).
    pub fn bos_token(&self) -> Option<&str> {
        self.bos_text.as_deref()
    }

    /// The EOS token's text (for chat templates' `eos_token`).
    pub fn eos_token(&self) -> Option<&str> {
        self.eos_text.as_deref()
    }

    /// Whether `encode(.., add_special = true, ..)` prepends BOS.
    pub fn adds_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether `encode(.., add_special = true, ..)` appends EOS.
    pub fn adds_eos(&self) -> bool {
        self.add_eos
    }

    /// Every id that ends generation (EOS, EOT and the end-of-turn control tokens), sorted.
    pub fn stop_token_ids(&self) -> &[u32] {
        &self.stop_ids
    }

    /// The chat template carried by the model files, if any.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }
}
