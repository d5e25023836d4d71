//! Engine errors.

use crate::chat_template::ChatTemplateError;
use crate::registry::RegistryError;
use crate::sampling::SamplingError;
use crate::store::StoreError;
use crate::tokenizer::TokenizerError;

/// An error from building or running the engine; each names what failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The model could not be resolved or fetched.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The checkpoint could not be read.
    #[error(transparent)]
    Format(#[from] pocket_formats::FormatError),
    /// No model crate could load it.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// A layer, the cache or a device op failed.
    #[error(transparent)]
    Layer(#[from] pocket_layers::LayerError),
    /// The device could not be opened or an op failed.
    #[error(transparent)]
    Kernel(#[from] pocket_kernels::KernelError),
    /// Tokenizing or detokenizing failed.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// The chat template failed.
    #[error(transparent)]
    Template(#[from] ChatTemplateError),
    /// Sampling parameters were invalid or sampling failed.
    #[error(transparent)]
    Sampling(#[from] SamplingError),
    /// The builder was not given a model.
    #[error("no model given to the engine builder")]
    NoModel,
    /// The checkpoint has no tokenizer (text APIs need one).
    #[error("the model has no tokenizer; use the token-id API")]
    NoTokenizer,
    /// The model has no chat template.
    #[error("the model has no chat template; use raw mode")]
    NoChatTemplate,
    /// A request is invalid (empty prompt, too long, ...).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// A sequence id the engine does not know.
    #[error("unknown sequence {0}")]
    UnknownSequence(u64),
}

/// Result alias of the engine.
pub type Result<T> = std::result::Result<T, EngineError>;
