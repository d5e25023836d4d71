//! Plain-data description of a GGUF vocabulary (`tokenizer.ggml.*` metadata).

use serde::{Deserialize, Serialize};

/// The tokenizer algorithm a GGUF vocabulary names in `tokenizer.ggml.model`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum VocabModel {
    /// `llama`: SentencePiece-style, score-ordered merges, byte fallback, `▁` for spaces.
    SentencePiece,
    /// `gpt2`: byte-level BPE with merge ranks and a pre-tokenizer regex.
    BytePairEncoding,
}

impl VocabModel {
    /// Parses the `tokenizer.ggml.model` string; `None` for models this crate does not implement.
    pub fn from_gguf_name(name: &str) -> Option<Self> {
        match name {
            "llama" => Some(Self::SentencePiece),
            "gpt2" => Some(Self::BytePairEncoding),
            _ => None,
        }
    }
}

/// Attribute of one token (`tokenizer.ggml.token_type`, llama.cpp's numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TokenType {
    /// An ordinary piece of text.
    Normal,
    /// The unknown token.
    Unknown,
    /// A control token (BOS, EOS, chat markers): never produced from text unless special parsing is on.
    Control,
    /// A user-defined (added) token: always matched verbatim in text.
    UserDefined,
    /// An unused slot.
    Unused,
    /// A byte-fallback token `<0xNN>`.
    Byte,
}

impl TokenType {
    /// Converts the GGUF integer code (1..=6); unknown codes count as normal.
    pub fn from_code(code: i32) -> Self {
        match code {
            2 => Self::Unknown,
            3 => Self::Control,
            4 => Self::UserDefined,
            5 => Self::Unused,
            6 => Self::Byte,
            _ => Self::Normal,
        }
    }
}

/// Everything needed to build a tokenizer from a GGUF file's own vocabulary.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GgufVocab {
    /// `tokenizer.ggml.model` (`llama` or `gpt2`).
    pub model: String,
    /// `tokenizer.ggml.pre`: the pre-tokenizer name (BPE only).
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`: token text by id.
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.token_type`: GGUF token type codes by id (empty: all normal).
    pub token_types: Vec<i32>,
    /// `tokenizer.ggml.merges`: `"left right"` pairs in rank order (BPE).
    pub merges: Vec<String>,
    /// `tokenizer.ggml.scores`: merge scores by id (SentencePiece).
    pub scores: Vec<f32>,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos_token_id: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos_token_id: Option<u32>,
    /// `tokenizer.ggml.eot_token_id`.
    pub eot_token_id: Option<u32>,
    /// `tokenizer.ggml.unknown_token_id`.
    pub unknown_token_id: Option<u32>,
    /// `tokenizer.ggml.padding_token_id`.
    pub padding_token_id: Option<u32>,
    /// `tokenizer.ggml.add_bos_token` (absent: the model's default).
    pub add_bos_token: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`.
    pub add_eos_token: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix` (SentencePiece; absent: true).
    pub add_space_prefix: Option<bool>,
    /// `tokenizer.chat_template`, carried along for the chat template layer.
    pub chat_template: Option<String>,
}
