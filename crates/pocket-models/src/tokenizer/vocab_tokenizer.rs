//! The tokenizer built from a GGUF vocabulary: special-token partitioning, then byte-level BPE or
//! SentencePiece per text fragment, and the reverse mapping from ids to bytes.

use super::bpe::{self, MergeTable, NO_TOKEN};
use super::bytes_unicode;
use super::fxhash::{map_with_capacity, FxHashMap};
use super::pretokenize::PreTokenizer;
use super::spm::{self, SpmVocab};
use super::vocab::{GgufVocab, TokenType, VocabModel};
use super::TokenizerError;

/// A piece of input text after special-token partitioning.
enum Fragment<'a> {
    Text(&'a str),
    Token(u32),
}

/// Tokenizer over a GGUF vocabulary.
#[derive(Debug)]
pub(crate) struct VocabTokenizer {
    pub(crate) model: VocabModel,
    pub(crate) tokens: Vec<String>,
    pub(crate) types: Vec<TokenType>,
    scores: Vec<f32>,
    pub(crate) token_to_id: FxHashMap<String, u32>,
    merges: MergeTable,
    pre: Option<PreTokenizer>,
    /// Control, user-defined and unknown tokens, longest text first.
    specials: Vec<u32>,
    byte_tokens: [Option<u32>; 256],
    /// BPE: the id of each byte's single-character token.
    byte_ids: [u32; 256],
    pub(crate) add_space_prefix: bool,
    unk: Option<u32>,
}

impl VocabTokenizer {
    /// Builds the tables from plain vocabulary data.
    pub(crate) fn new(v: &GgufVocab) -> Result<Self, TokenizerError> {
        let model = VocabModel::from_gguf_name(&v.model)
            .ok_or_else(|| TokenizerError::UnsupportedModel(v.model.clone()))?;
        if v.tokens.is_empty() {
            return Err(TokenizerError::InvalidVocab(
                "tokenizer.ggml.tokens is empty".into(),
            ));
        }
        let n = v.tokens.len();
        if !v.token_types.is_empty() && v.token_types.len() != n {
            return Err(TokenizerError::InvalidVocab(format!(
                "{} token types for {n} tokens",
                v.token_types.len()
            )));
        }
        if !v.scores.is_empty() && v.scores.len() != n {
            return Err(TokenizerError::InvalidVocab(format!(
                "{} scores for {n} tokens",
                v.scores.len()
            )));
        }
        let types: Vec<TokenType> = if v.token_types.is_empty() {
            vec![TokenType::Normal; n]
        } else {
            v.token_types
                .iter()
                .map(|&c| TokenType::from_code(c))
                .collect()
        };
        let mut token_to_id = map_with_capacity(n);
        for (i, t) in v.tokens.iter().enumerate() {
            token_to_id.insert(t.clone(), i as u32);
        }
        let mut merges = MergeTable::default();
        let mut pre = None;
        let mut byte_tokens = [None; 256];
        let mut byte_ids = [NO_TOKEN; 256];
        match model {
            VocabModel::BytePairEncoding => {
                merges.reserve(v.merges.len());
                let mut merged = String::new();
                for (rank, m) in v.merges.iter().enumerate() {
                    let Some((l, r)) = m.split_once(' ') else {
                        return Err(TokenizerError::InvalidVocab(format!(
                            "merge {rank} has no space: {m:?}"
                        )));
                    };
                    let (Some(&li), Some(&ri)) = (token_to_id.get(l), token_to_id.get(r)) else {
                        continue;
                    };
                    merged.clear();
                    merged.push_str(l);
                    merged.push_str(r);
                    if let Some(&mi) = token_to_id.get(merged.as_str()) {
                        merges.entry((li, ri)).or_insert((rank as u32, mi));
                    }
                }
                pre = Some(PreTokenizer::by_name(v.pre.as_deref())?);
                for (b, slot) in byte_ids.iter_mut().enumerate() {
                    let key = bytes_unicode::encode_bytes(&[b as u8]);
                    *slot = token_to_id.get(key.as_str()).copied().unwrap_or(NO_TOKEN);
                }
            }
            VocabModel::SentencePiece => {
                for (b, slot) in byte_tokens.iter_mut().enumerate() {
                    *slot = token_to_id.get(&format!("<0x{b:02X}>")).copied();
                }
            }
        }
        let mut specials: Vec<u32> = (0..n as u32)
            .filter(|&i| {
                matches!(
                    types[i as usize],
                    TokenType::Control | TokenType::UserDefined | TokenType::Unknown
                ) && !v.tokens[i as usize].is_empty()
            })
            .collect();
        specials.sort_by(|&a, &b| {
            v.tokens[b as usize]
                .len()
                .cmp(&v.tokens[a as usize].len())
                .then(a.cmp(&b))
        });
        let unk = v.unknown_token_id.filter(|&u| (u as usize) < n);
        Ok(Self {
            model,
            tokens: v.tokens.clone(),
            types,
            scores: v.scores.clone(),
            token_to_id,
            merges,
            pre,
            specials,
            byte_tokens,
            byte_ids,
            add_space_prefix: v
                .add_space_prefix
                .unwrap_or(model == VocabModel::SentencePiece),
            unk,
        })
    }

    /// Splits text at special tokens: user-defined always, control/unknown when `parse_special`.
    fn partition<'a>(&self, text: &'a str, parse_special: bool) -> Vec<Fragment<'a>> {
        let mut frags = if text.is_empty() {
            Vec::new()
        } else {
            vec![Fragment::Text(text)]
        };
        for &id in &self.specials {
            let ty = self.types[id as usize];
            if !parse_special && matches!(ty, TokenType::Control | TokenType::Unknown) {
                continue;
            }
            let pat = self.tokens[id as usize].as_str();
            if !frags
                .iter()
                .any(|f| matches!(f, Fragment::Text(t) if t.contains(pat)))
            {
                continue;
            }
            let mut next = Vec::with_capacity(frags.len() + 2);
            for f in frags {
                match f {
                    Fragment::Text(t) => {
                        let mut rest = t;
                        while let Some(pos) = rest.find(pat) {
                            if pos > 0 {
                                next.push(Fragment::Text(&rest[..pos]));
                            }
                            next.push(Fragment::Token(id));
                            rest = &rest[pos + pat.len()..];
                        }
                        if !rest.is_empty() {
                            next.push(Fragment::Text(rest));
                        }
                    }
                    tok => next.push(tok),
                }
            }
            frags = next;
        }
        frags
    }

    /// Tokenizes `text` without BOS/EOS.
    pub(crate) fn encode(
        &self,
        text: &str,
        parse_special: bool,
        out: &mut Vec<u32>,
    ) -> Result<(), TokenizerError> {
        let frags = self.partition(text, parse_special);
        let mut prev_special = true;
        for f in frags {
            match f {
                Fragment::Token(id) => {
                    out.push(id);
                    prev_special = true;
                }
                Fragment::Text(t) => {
                    match self.model {
                        VocabModel::BytePairEncoding => self.encode_bpe(t, out)?,
                        VocabModel::SentencePiece => {
                            let mut s = String::with_capacity(t.len() + 3);
                            if self.add_space_prefix && prev_special {
                                s.push('\u{2581}');
                            }
                            for c in t.chars() {
                                s.push(if c == ' ' { '\u{2581}' } else { c });
                            }
                            let sv = SpmVocab {
                                token_to_id: &self.token_to_id,
                                scores: &self.scores,
                                byte_tokens: &self.byte_tokens,
                                unk: self.unk,
                            };
                            spm::encode(&s, &sv, out);
                        }
                    }
                    prev_special = false;
                }
            }
        }
        Ok(())
    }

    fn encode_bpe(&self, text: &str, out: &mut Vec<u32>) -> Result<(), TokenizerError> {
        let Some(pre) = &self.pre else { return Ok(()) };
        let mut syms = Vec::new();
        let mut enc = String::new();
        let fallback = self.unk.unwrap_or(NO_TOKEN);
        for word in pre.split(text)? {
            if pre.ignore_merges() {
                enc.clear();
                bytes_unicode::encode_bytes_into(word.as_bytes(), &mut enc);
                if let Some(&id) = self.token_to_id.get(enc.as_str()) {
                    out.push(id);
                    continue;
                }
            }
            // one initial symbol per byte: each byte is one character of the byte-level alphabet
            syms.clear();
            syms.extend(word.bytes().map(|b| match self.byte_ids[b as usize] {
                NO_TOKEN => fallback,
                id => id,
            }));
            bpe::merge(&syms, &self.merges, out);
        }
        Ok(())
    }

    /// Appends the bytes a token stands for; control tokens only when `special`.
    pub(crate) fn token_bytes(
        &self,
        id: u32,
        special: bool,
        out: &mut Vec<u8>,
    ) -> Result<(), TokenizerError> {
        let text = self
            .tokens
            .get(id as usize)
            .ok_or(TokenizerError::UnknownId(id))?;
        match self.types[id as usize] {
            TokenType::Control | TokenType::Unknown => {
                if special {
                    out.extend_from_slice(text.as_bytes());
                }
            }
            TokenType::Unused => {}
            TokenType::UserDefined => out.extend_from_slice(text.as_bytes()),
            TokenType::Byte if self.model == VocabModel::SentencePiece => {
                match text
                    .strip_prefix("<0x")
                    .and_then(|h| h.strip_suffix('>'))
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(b) => out.push(b),
                    None => out.extend_from_slice(text.as_bytes()),
                }
            }
            _ => match self.model {
                VocabModel::BytePairEncoding => bytes_unicode::decode_to_bytes(text, out),
                VocabModel::SentencePiece => {
                    for c in text.chars() {
                        let c = if c == '\u{2581}' { ' ' } else { c };
                        let mut buf = [0u8; 4];
                        out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                    }
                }
            },
        }
        Ok(())
    }
}
