//! The architecture registry: `general.architecture` (GGUF) or `model_type` (config.json) picks
//! the model crate that loads a checkpoint.

use std::sync::Arc;

use pocket_formats::{StoreMetadata, TensorStore};
use pocket_kernels::Device;
use pocket_layers::{LayerError, Model};

/// Options every architecture's loader takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadOptions {
    /// Longest sequence the engine will run.
    pub max_seq_len: usize,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions { max_seq_len: 8192 }
    }
}

/// A registry failure.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The checkpoint names no architecture.
    #[error("checkpoint states no architecture (no general.architecture or model_type)")]
    NoArchitecture,
    /// No model crate handles the architecture.
    #[error("architecture `{name}` is not supported (supported: {supported})")]
    Unsupported {
        /// The architecture the checkpoint names.
        name: String,
        /// What this build supports.
        supported: String,
    },
    /// The model crate failed to load it.
    #[error(transparent)]
    Load(#[from] LayerError),
}

/// Every architecture name this build can load.
pub fn supported_architectures() -> Vec<&'static str> {
    let mut v = pocket_model_llama::ARCHITECTURES.to_vec();
    v.extend_from_slice(pocket_model_qwen35::ARCHITECTURES);
    v
}

/// The architecture a checkpoint names.
pub fn architecture_of(store: &TensorStore) -> Result<String, RegistryError> {
    match store.metadata() {
        StoreMetadata::Gguf(md) => md
            .architecture()
            .map(str::to_string)
            .map_err(|_| RegistryError::NoArchitecture),
        StoreMetadata::Safetensors { config, .. } => config
            .and_then(|c| c.model_type())
            .map(str::to_string)
            .ok_or(RegistryError::NoArchitecture),
    }
}

/// Loads a checkpoint with the model crate its architecture names.
pub fn load_model(
    store: Arc<TensorStore>,
    dev: &Device,
    opts: LoadOptions,
) -> Result<Box<dyn Model>, RegistryError> {
    let arch = architecture_of(&store)?;
    if pocket_model_llama::ARCHITECTURES.contains(&arch.as_str()) {
        let o = pocket_model_llama::LoadOptions {
            max_seq_len: opts.max_seq_len,
        };
        return Ok(Box::new(pocket_model_llama::LlamaModel::load(
            store, dev, o,
        )?));
    }
    if pocket_model_qwen35::ARCHITECTURES.contains(&arch.as_str()) {
        let o = pocket_model_qwen35::LoadOptions {
            max_seq_len: opts.max_seq_len,
            ..Default::default()
        };
        let model = pocket_model_qwen35::Qwen35Model::load(store, dev, o)?;
        // The vision tower and MTP head are not part of the text model: say so, once, at load.
        for note in model.notes() {
            eprintln!("qwen35: {note}");
        }
        return Ok(Box::new(model));
    }
    Err(RegistryError::Unsupported {
        name: arch,
        supported: supported_architectures().join(", "),
    })
}
