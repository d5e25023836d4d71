//! `EngineBuilder`: resolve a model name, open the device, load the model, size the cache.

use std::sync::Arc;

use pocket_formats::TensorStore;
use pocket_kernels::{DType, Device, DeviceKind};

use super::{Engine, EngineError, Result};
use crate::chat_template::ChatTemplate;
use crate::model::KvCache;
use crate::registry::{load_model, LoadOptions};
use crate::store::ModelStore;
use crate::tokenizer::Tokenizer;

/// Configures and builds an [`Engine`].
pub struct EngineBuilder {
    model: Option<String>,
    device: DeviceKind,
    max_seq_len: usize,
    cache_tokens: Option<usize>,
    cache_dtype: Option<DType>,
    max_batch_tokens: usize,
    store: Option<ModelStore>,
}

impl Default for EngineBuilder {
    fn default() -> Self {
        EngineBuilder {
            model: None,
            device: DeviceKind::Cpu,
            max_seq_len: 4096,
            cache_tokens: None,
            cache_dtype: None,
            max_batch_tokens: 4096,
            store: None,
        }
    }
}

/// The KV cache element type an engine on `device` gets unless told otherwise: f16 on a GPU
/// (llama.cpp's default cache type; half the memory and cache reads of f32), f32 on the CPU
/// (no conversion in its attention loops).
pub fn default_cache_dtype(device: DeviceKind) -> DType {
    match device {
        DeviceKind::Cpu => DType::F32,
        DeviceKind::Cuda(_) => DType::F16,
    }
}

/// A KV cache element type by its name (`f32`, `f16` or `bf16`, as [`DType::name`] spells
/// them); `None` for any other name.
pub fn cache_dtype_by_name(name: &str) -> Option<DType> {
    [DType::F32, DType::F16, DType::BF16]
        .into_iter()
        .find(|t| t.name() == name)
}

impl EngineBuilder {
    /// A store alias (`smollm2-135m-instruct`) or a path to a GGUF file or safetensors folder.
    pub fn model(mut self, name: impl Into<String>) -> Self {
        self.model = Some(name.into());
        self
    }

    /// The device to run on (default: CPU).
    pub fn device(mut self, kind: DeviceKind) -> Self {
        self.device = kind;
        self
    }

    /// Longest sequence (prompt + generation); capped at the model's context (default 4096).
    pub fn max_seq_len(mut self, n: usize) -> Self {
        self.max_seq_len = n;
        self
    }

    /// Tokens the KV cache holds across all sequences (default: `max_seq_len`).
    pub fn cache_tokens(mut self, n: usize) -> Self {
        self.cache_tokens = Some(n);
        self
    }

    /// KV cache element type (default: [`default_cache_dtype`] of the device).
    pub fn cache_dtype(mut self, dtype: DType) -> Self {
        self.cache_dtype = Some(dtype);
        self
    }

    /// Most tokens one step runs (prompts are admitted while they fit; default 4096).
    pub fn max_batch_tokens(mut self, n: usize) -> Self {
        self.max_batch_tokens = n.max(1);
        self
    }

    /// The model store used to resolve aliases (default: [`ModelStore::new`]).
    pub fn store(mut self, store: ModelStore) -> Self {
        self.store = Some(store);
        self
    }

    /// Resolves, loads and sizes everything.
    pub fn build(self) -> Result<Engine> {
        let name = self.model.ok_or(EngineError::NoModel)?;
        let store = self.store.unwrap_or_default();
        let resolved = store.resolve(&name)?;
        let tensors = Arc::new(TensorStore::open(&resolved.path)?);
        let dev = Device::open(self.device)?;
        let model = load_model(
            tensors.clone(),
            &dev,
            LoadOptions {
                max_seq_len: self.max_seq_len,
            },
        )?;
        let info = model.info().clone();
        let max_seq = self.max_seq_len.min(info.max_context);
        let cfg = info.kv_cache_config(
            self.cache_tokens.unwrap_or(max_seq),
            max_seq,
            self.cache_dtype
                .unwrap_or_else(|| default_cache_dtype(self.device)),
        );
        let cache = KvCache::new(&dev, cfg)?;
        let tokenizer = if let Some(g) = tensors.gguf() {
            Some(Tokenizer::from_gguf(g)?)
        } else {
            let p = tensors.path().join("tokenizer.json");
            if p.exists() {
                Some(Tokenizer::from_tokenizer_json(&p)?)
            } else {
                None
            }
        };
        let template = match tokenizer.as_ref().and_then(|t| t.chat_template()) {
            Some(src) => Some(ChatTemplate::new(src)?),
            None => None,
        };
        Ok(Engine {
            model,
            cache,
            tokenizer,
            template,
            seqs: Default::default(),
            next_id: 0,
            max_batch_tokens: self.max_batch_tokens,
            graphs: super::graphs::DecodeGraphs::from_env(),
        })
    }
}
