//! The crate's error type.

use std::path::PathBuf;

/// Everything that can go wrong while generating, running or reporting.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A command-line or specification argument is wrong.
    #[error("{0}")]
    Usage(String),
    /// A preset name that does not exist.
    #[error("unknown preset `{0}` (known: {1})")]
    UnknownPreset(String, String),
    /// A format the generator cannot write for this preset.
    #[error("unsupported format `{0}`: {1}")]
    UnsupportedFormat(String, String),
    /// No vocabulary GGUF could be found.
    #[error("vocabulary file `{name}` not found (looked in: {searched}); pass --vocab-dir")]
    VocabNotFound {
        /// File name looked for.
        name: String,
        /// Directories searched.
        searched: String,
    },
    /// A file-format error from pocket-formats.
    #[error(transparent)]
    Format(#[from] pocket_formats::FormatError),
    /// An I/O error with the path involved.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// An I/O error without a path.
    #[error(transparent)]
    RawIo(#[from] std::io::Error),
    /// JSON (de)serialisation failed.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// An external tool (llama-bench, nvidia-smi) failed.
    #[error("{tool}: {msg}")]
    Tool {
        /// The tool.
        tool: String,
        /// What happened.
        msg: String,
    },
    /// The model under test failed.
    #[error("model: {0}")]
    Model(String),
}

impl BenchError {
    /// An I/O error at `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        BenchError::Io {
            path: path.into(),
            source,
        }
    }
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, BenchError>;
