//! The one error type of this crate: every malformed input maps to a variant that names the problem.

use std::path::PathBuf;

/// Everything that can go wrong while reading or writing GGUF and safetensors data.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// An operating-system error on a named file.
    #[error("{path}: {source}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// An I/O error while writing to a stream with no path.
    #[error("write failed: {0}")]
    Write(#[from] std::io::Error),
    /// The input ends before a field that must be there.
    #[error("truncated input: {what} at byte {offset} needs {need} bytes, only {have} remain")]
    Truncated {
        /// The field being read.
        what: String,
        /// Where it starts.
        offset: u64,
        /// Bytes it needs.
        need: u64,
        /// Bytes left in the input.
        have: u64,
    },
    /// The first four bytes are not `GGUF`.
    #[error("bad magic {found:02x?}: not a GGUF file (expected \"GGUF\")")]
    BadMagic {
        /// The bytes found.
        found: [u8; 4],
    },
    /// A GGUF version this reader does not handle (only 2 and 3 are).
    #[error("unsupported GGUF version {0} (supported: 2, 3)")]
    UnsupportedVersion(u32),
    /// A big-endian GGUF file (only little-endian is supported).
    #[error("big-endian GGUF (version {0} byte-swapped) is not supported")]
    BigEndian(u32),
    /// A count read from the file cannot fit in the bytes that remain.
    #[error("absurd {what} {count} at byte {offset}: at most {max} fit in the remaining input")]
    AbsurdCount {
        /// What is being counted.
        what: String,
        /// The count in the file.
        count: u64,
        /// Where the count was read.
        offset: u64,
        /// The most that could fit.
        max: u64,
    },
    /// A string is not valid UTF-8.
    #[error("{what} at byte {offset} is not valid UTF-8")]
    InvalidUtf8 {
        /// Which string.
        what: String,
        /// Where it starts.
        offset: u64,
    },
    /// A metadata value type id outside the GGUF specification.
    #[error("unknown metadata value type {id} for key `{key}` at byte {offset}")]
    UnknownValueType {
        /// The key being read.
        key: String,
        /// The type id found.
        id: u32,
        /// Where the id was read.
        offset: u64,
    },
    /// Arrays nested deeper than the reader allows.
    #[error("metadata key `{key}`: arrays nested deeper than {max} levels")]
    NestingTooDeep {
        /// The key being read.
        key: String,
        /// The nesting limit.
        max: usize,
    },
    /// The same metadata key appears twice.
    #[error("duplicate metadata key `{0}`")]
    DuplicateKey(String),
    /// The same tensor name appears twice.
    #[error("duplicate tensor `{0}`")]
    DuplicateTensor(String),
    /// `general.alignment` is zero, not a power of two, or absurdly large.
    #[error("invalid general.alignment {0}: must be a power of two between 1 and 2^30")]
    BadAlignment(u64),
    /// A tensor type id that gguf-py 0.19.0 does not define.
    #[error("tensor `{tensor}` has unknown ggml type id {id}")]
    UnknownTensorType {
        /// The tensor.
        tensor: String,
        /// The type id found.
        id: u32,
    },
    /// A tensor's dimensions are unusable (too many, overflow, not whole blocks, ...).
    #[error("tensor `{tensor}`: {reason}")]
    BadShape {
        /// The tensor.
        tensor: String,
        /// What is wrong.
        reason: String,
    },
    /// A tensor's bytes reach past the end of its data region.
    #[error(
        "tensor `{tensor}` out of bounds: bytes {start}..{end} but the data region holds {limit}"
    )]
    TensorOutOfBounds {
        /// The tensor.
        tensor: String,
        /// First byte (relative to the data region).
        start: u64,
        /// One past the last byte.
        end: u64,
        /// Size of the data region.
        limit: u64,
    },
    /// A tensor's offset is not a multiple of the file's alignment.
    #[error("tensor `{tensor}` misaligned: offset {offset} is not a multiple of {alignment}")]
    TensorMisaligned {
        /// The tensor.
        tensor: String,
        /// Its offset.
        offset: u64,
        /// The required alignment.
        alignment: u64,
    },
    /// Two tensors share bytes.
    #[error("tensors `{first}` and `{second}` overlap")]
    TensorOverlap {
        /// The tensor that starts first.
        first: String,
        /// The one that starts inside it.
        second: String,
    },
    /// A metadata key is absent.
    #[error("metadata key `{0}` is missing")]
    MissingKey(String),
    /// A metadata key holds a value of another type.
    #[error("metadata key `{key}` has type {found}, expected {expected}")]
    WrongType {
        /// The key.
        key: String,
        /// The type asked for.
        expected: &'static str,
        /// The type present.
        found: String,
    },
    /// A requested tensor does not exist.
    #[error("tensor `{0}` not found")]
    TensorNotFound(String),
    /// A safetensors header is malformed.
    #[error("safetensors header: {0}")]
    SafetensorsHeader(String),
    /// A safetensors dtype string this crate does not know.
    #[error("tensor `{tensor}` has unknown safetensors dtype `{dtype}`")]
    UnknownDtype {
        /// The tensor.
        tensor: String,
        /// The dtype string.
        dtype: String,
    },
    /// A sharded checkpoint index (`model.safetensors.index.json`) is malformed.
    #[error("{path}: bad safetensors index: {reason}")]
    BadIndex {
        /// The index file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// `config.json` is malformed.
    #[error("{path}: bad config.json: {reason}")]
    BadConfig {
        /// The config file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A path is neither a GGUF file, a safetensors file nor a checkpoint folder.
    #[error("{path}: {reason}")]
    UnknownFormat {
        /// The path.
        path: PathBuf,
        /// Why it was not recognised.
        reason: String,
    },
    /// An error inside a named file.
    #[error("{path}: {source}")]
    InFile {
        /// The file.
        path: PathBuf,
        /// What went wrong in it.
        source: Box<FormatError>,
    },
    /// A writer was used out of order or given inconsistent data.
    #[error("writer: {0}")]
    Writer(String),
}

/// Result with [`FormatError`].
pub type Result<T, E = FormatError> = std::result::Result<T, E>;

impl FormatError {
    /// An [`FormatError::Io`] for `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        FormatError::Io {
            path: path.into(),
            source,
        }
    }

    /// Wraps `self` with the file it occurred in (errors that already name a path are kept).
    pub fn in_file(self, path: &std::path::Path) -> Self {
        match self {
            e @ (FormatError::Io { .. }
            | FormatError::InFile { .. }
            | FormatError::BadIndex { .. }
            | FormatError::BadConfig { .. }
            | FormatError::UnknownFormat { .. }) => e,
            e => FormatError::InFile {
                path: path.to_path_buf(),
                source: Box::new(e),
            },
        }
    }

    /// The innermost error, without file context.
    pub fn root(&self) -> &FormatError {
        match self {
            FormatError::InFile { source, .. } => source.root(),
            e => e,
        }
    }
}
