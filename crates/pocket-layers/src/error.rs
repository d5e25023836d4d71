//! Errors raised by layers, the KV cache and model construction.

use pocket_kernels::KernelError;

/// An error from a layer, the cache or a model; each names what was wrong.
#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    /// A device op failed.
    #[error(transparent)]
    Kernel(#[from] KernelError),
    /// A checkpoint file could not be read.
    #[error(transparent)]
    Format(#[from] pocket_formats::FormatError),
    /// A quantized-format error.
    #[error(transparent)]
    Quant(#[from] pocket_quant::QuantError),
    /// A layer was built from parts that do not fit together.
    #[error("{0}")]
    Shape(String),
    /// The KV cache has no free block left for a sequence.
    #[error("KV cache is full: sequence {seq} needs {needed} more blocks, {free} free")]
    CacheFull {
        /// The sequence that needed room.
        seq: u64,
        /// Blocks it needed.
        needed: usize,
        /// Blocks free.
        free: usize,
    },
    /// A sequence id the cache does not know.
    #[error("unknown sequence {0}")]
    UnknownSequence(u64),
    /// A sequence would grow past the model's or cache's context limit.
    #[error("sequence {seq} would reach {len} tokens, beyond the limit of {limit}")]
    ContextOverflow {
        /// The sequence.
        seq: u64,
        /// Its length after the step.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// A checkpoint is missing a tensor or has one of the wrong shape or type.
    #[error("checkpoint: {0}")]
    Checkpoint(String),
    /// A configuration value is missing or out of range.
    #[error("config: {0}")]
    Config(String),
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, LayerError>;
