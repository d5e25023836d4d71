//! Typed errors of the quantization crate.

use thiserror::Error;

/// Everything that can go wrong when decoding, encoding or multiplying quantized data.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum QuantError {
    /// A buffer is not a whole number of blocks of the format.
    #[error("{format}: {len} bytes is not a whole number of {block_bytes}-byte blocks")]
    PartialBlock {
        /// Format name.
        format: String,
        /// Buffer length in bytes.
        len: usize,
        /// Bytes per block.
        block_bytes: usize,
    },
    /// An element count is not a multiple of the block size.
    #[error("{format}: {elements} elements is not a multiple of the block size {block_size}")]
    NotBlockMultiple {
        /// Format name.
        format: String,
        /// Element count.
        elements: usize,
        /// Elements per block.
        block_size: usize,
    },
    /// A buffer has the wrong length for the shape it should hold.
    #[error("{what}: expected {expected} elements/bytes, got {got}")]
    LengthMismatch {
        /// Which buffer.
        what: &'static str,
        /// Expected length.
        expected: usize,
        /// Actual length.
        got: usize,
    },
    /// A shape is not valid for the operation (zero or overflowing dimensions, ...).
    #[error("bad shape: {0}")]
    BadShape(String),
    /// The format has no quantizer (gguf-py defines none and neither do we).
    #[error("{0}: quantization is not implemented for this format")]
    NoQuantizer(String),
    /// The format has no dequantizer or no dot product (integer types, ...).
    #[error("{0}: not supported for this operation")]
    Unsupported(String),
    /// A format needs companion scales (or a tensor scale) that were not given.
    #[error("{0}: companion scales are missing")]
    MissingScales(String),
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, QuantError>;
