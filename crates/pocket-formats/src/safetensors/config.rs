//! `config.json` of a Hugging Face checkpoint, kept as JSON with typed getters that name the key.

use std::path::Path;

use serde_json::Value;

use crate::error::{FormatError, Result};

/// A parsed `config.json`: the raw JSON plus getters. Keys may be dotted paths
/// (`rope_scaling.factor`); getters also look inside `text_config` for multimodal checkpoints.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    json: Value,
}

impl ModelConfig {
    /// Reads and parses `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read(path).map_err(|e| FormatError::io(path, e))?;
        Self::from_slice(&text).map_err(|e| match e {
            FormatError::BadConfig { reason, .. } => FormatError::BadConfig {
                path: path.to_path_buf(),
                reason,
            },
            e => e,
        })
    }

    /// Parses JSON text; the top level must be an object.
    pub fn from_slice(bytes: &[u8]) -> Result<Self> {
        let bad = |reason: String| FormatError::BadConfig {
            path: "config.json".into(),
            reason,
        };
        let json: Value = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        if !json.is_object() {
            return Err(bad("top level is not an object".into()));
        }
        Ok(ModelConfig { json })
    }

    /// Wraps an existing JSON object.
    pub fn from_value(json: Value) -> Self {
        ModelConfig { json }
    }

    /// The raw JSON.
    pub fn json(&self) -> &Value {
        &self.json
    }

    /// The value at a dotted `key`, looked up at top level, then under `text_config`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        lookup(&self.json, key)
            .or_else(|| self.json.get("text_config").and_then(|t| lookup(t, key)))
            .filter(|v| !v.is_null())
    }

    /// The first architecture in `architectures` (`LlamaForCausalLM`, ...).
    pub fn architecture(&self) -> Option<&str> {
        self.get("architectures")?.as_array()?.first()?.as_str()
    }

    /// `model_type` (`llama`, `qwen2`, ...).
    pub fn model_type(&self) -> Option<&str> {
        self.get("model_type")?.as_str()
    }

    fn typed<'a, T>(
        &'a self,
        key: &str,
        expected: &'static str,
        f: impl Fn(&'a Value) -> Option<T>,
    ) -> Result<Option<T>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => f(v).map(Some).ok_or_else(|| FormatError::WrongType {
                key: key.to_string(),
                expected,
                found: json_type(v).to_string(),
            }),
        }
    }

    /// `key` as u64; errors name a missing or mistyped key.
    pub fn get_u64(&self, key: &str) -> Result<u64> {
        self.get_u64_opt(key)?
            .ok_or_else(|| FormatError::MissingKey(key.to_string()))
    }

    /// `key` as u64, `Ok(None)` when absent.
    pub fn get_u64_opt(&self, key: &str) -> Result<Option<u64>> {
        self.typed(key, "unsigned integer", Value::as_u64)
    }

    /// `key` as usize; errors name a missing or mistyped key.
    pub fn get_usize(&self, key: &str) -> Result<usize> {
        self.get_usize_opt(key)?
            .ok_or_else(|| FormatError::MissingKey(key.to_string()))
    }

    /// `key` as usize, `Ok(None)` when absent.
    pub fn get_usize_opt(&self, key: &str) -> Result<Option<usize>> {
        self.typed(key, "unsigned integer", |v| {
            v.as_u64().and_then(|x| usize::try_from(x).ok())
        })
    }

    /// `key` as f64 (integers accepted); errors name a missing or mistyped key.
    pub fn get_f64(&self, key: &str) -> Result<f64> {
        self.get_f64_opt(key)?
            .ok_or_else(|| FormatError::MissingKey(key.to_string()))
    }

    /// `key` as f64, `Ok(None)` when absent.
    pub fn get_f64_opt(&self, key: &str) -> Result<Option<f64>> {
        self.typed(key, "number", Value::as_f64)
    }

    /// `key` as bool; errors name a missing or mistyped key.
    pub fn get_bool(&self, key: &str) -> Result<bool> {
        self.get_bool_opt(key)?
            .ok_or_else(|| FormatError::MissingKey(key.to_string()))
    }

    /// `key` as bool, `Ok(None)` when absent.
    pub fn get_bool_opt(&self, key: &str) -> Result<Option<bool>> {
        self.typed(key, "bool", Value::as_bool)
    }

    /// `key` as a string; errors name a missing or mistyped key.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        self.get_str_opt(key)?
            .ok_or_else(|| FormatError::MissingKey(key.to_string()))
    }

    /// `key` as a string, `Ok(None)` when absent.
    pub fn get_str_opt(&self, key: &str) -> Result<Option<&str>> {
        self.typed(key, "string", Value::as_str)
    }
}

fn lookup<'a>(root: &'a Value, key: &str) -> Option<&'a Value> {
    if let Some(v) = root.get(key) {
        return Some(v);
    }
    key.split('.').try_fold(root, |v, part| v.get(part))
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(n) if n.is_i64() && n.as_i64().is_some_and(|x| x < 0) => "negative integer",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}
