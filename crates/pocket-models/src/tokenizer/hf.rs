//! Hugging Face `tokenizer.json` backend (the `tokenizers` crate), with the special-token policy
//! read from `tokenizer_config.json` when it sits beside it.

use std::collections::HashSet;
use std::path::Path;

use serde_json::Value;

use super::{Backend, Tokenizer, TokenizerError, EOG_TEXTS};

/// A `tokenizers::Tokenizer` twice: special-token text parsed, and special-token text kept as text.
#[derive(Debug)]
pub(crate) struct HfPair {
    pub(crate) parse: tokenizers::Tokenizer,
    plain: tokenizers::Tokenizer,
    special_ids: HashSet<u32>,
}

fn hf_err(e: impl std::fmt::Display) -> TokenizerError {
    TokenizerError::HuggingFace(e.to_string())
}

impl HfPair {
    pub(crate) fn encode(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        let t = if parse_special {
            &self.parse
        } else {
            &self.plain
        };
        Ok(t.encode(text, add_special)
            .map_err(hf_err)?
            .get_ids()
            .to_vec())
    }

    pub(crate) fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, TokenizerError> {
        self.parse.decode(ids, skip_special).map_err(hf_err)
    }

    pub(crate) fn is_special(&self, id: u32) -> bool {
        self.special_ids.contains(&id)
    }
}

/// Reads a token given in tokenizer_config.json as a string or as `{"content": ...}`.
fn token_field(cfg: &Value, key: &str) -> Option<String> {
    match cfg.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

impl Tokenizer {
    /// Loads `tokenizer.json`, plus `tokenizer_config.json` and `chat_template.jinja` from the
    /// same folder when present (the separate template file wins, as in transformers).
    pub fn from_tokenizer_json(path: &Path) -> Result<Self, TokenizerError> {
        let read = |p: &Path| {
            std::fs::read(p).map_err(|source| TokenizerError::Io {
                path: p.to_path_buf(),
                source,
            })
        };
        let json = read(path)?;
        let cfg_path = path.with_file_name("tokenizer_config.json");
        let cfg = if cfg_path.exists() {
            Some(read(&cfg_path)?)
        } else {
            None
        };
        let mut tok = Self::from_tokenizer_json_bytes(&json, cfg.as_deref())?;
        let tpl_path = path.with_file_name("chat_template.jinja");
        if tpl_path.exists() {
            let tpl = read(&tpl_path)?;
            tok.chat_template = Some(String::from_utf8_lossy(&tpl).into_owned());
        }
        Ok(tok)
    }

    /// Builds from the bytes of `tokenizer.json` and, optionally, `tokenizer_config.json`.
    pub fn from_tokenizer_json_bytes(
        json: &[u8],
        config: Option<&[u8]>,
    ) -> Result<Self, TokenizerError> {
        let parse = tokenizers::Tokenizer::from_bytes(json).map_err(hf_err)?;
        let mut plain = parse.clone();
        plain.set_encode_special_tokens(true);
        let cfg: Value = match config {
            Some(c) => serde_json::from_slice(c).map_err(hf_err)?,
            None => Value::Null,
        };
        let special_ids: HashSet<u32> = parse
            .get_added_tokens_decoder()
            .iter()
            .filter(|(_, t)| t.special)
            .map(|(&id, _)| id)
            .collect();
        let bos_text = token_field(&cfg, "bos_token");
        let eos_text = token_field(&cfg, "eos_token");
        let bos = bos_text.as_deref().and_then(|t| parse.token_to_id(t));
        let eos = eos_text.as_deref().and_then(|t| parse.token_to_id(t));
        let add_bos = cfg
            .get("add_bos_token")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let add_eos = cfg
            .get("add_eos_token")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let mut stop_ids: Vec<u32> = eos.into_iter().collect();
        for t in EOG_TEXTS {
            if let Some(id) = parse.token_to_id(t) {
                if special_ids.contains(&id) {
                    stop_ids.push(id);
                }
            }
        }
        stop_ids.sort_unstable();
        stop_ids.dedup();
        let chat_template = match cfg.get("chat_template") {
            Some(Value::String(s)) => Some(s.clone()),
            // a list of named templates: take "default"
            Some(Value::Array(a)) => a
                .iter()
                .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
                .and_then(|t| t.get("template")?.as_str().map(str::to_string)),
            _ => None,
        };
        Ok(Self {
            backend: Backend::Hf(Box::new(HfPair {
                parse,
                plain,
                special_ids,
            })),
            bos,
            eos,
            eot: None,
            add_bos,
            add_eos,
            stop_ids,
            chat_template,
            bos_text,
            eos_text,
        })
    }
}
