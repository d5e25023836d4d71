//! Errors raised by devices and ops.

/// An error from a device or an op; each names the op or resource involved.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// Tensor shapes or dtypes do not fit the op's contract.
    #[error("{op}: {msg}")]
    Shape {
        /// The op that rejected its arguments.
        op: &'static str,
        /// What was wrong.
        msg: String,
    },
    /// A tensor lives on another device than the op runs on.
    #[error("{op}: tensor `{tensor}` is on {found}, the op runs on {expected}")]
    WrongDevice {
        /// The op.
        op: &'static str,
        /// Which argument.
        tensor: &'static str,
        /// Where the tensor is.
        found: String,
        /// Where the op runs.
        expected: String,
    },
    /// The op or format has no implementation on this backend yet.
    #[error("{op} is not implemented on {device} for {what}")]
    Unsupported {
        /// The op.
        op: &'static str,
        /// The backend.
        device: String,
        /// The format or case that is missing.
        what: String,
    },
    /// The device could not be opened (no driver, no GPU, wrong ordinal).
    #[error("device unavailable: {0}")]
    Unavailable(String),
    /// Device memory ran out.
    #[error("out of device memory allocating {bytes} bytes on {device}")]
    OutOfMemory {
        /// Requested size.
        bytes: usize,
        /// The device.
        device: String,
    },
    /// A CUDA driver, launch or library call failed.
    #[error("CUDA error in {op}: {msg}")]
    Cuda {
        /// The op or call.
        op: &'static str,
        /// The driver's message.
        msg: String,
    },
    /// A quantized-format error from pocket-quant.
    #[error(transparent)]
    Quant(#[from] pocket_quant::QuantError),
}

/// Result alias for kernel operations.
pub type Result<T> = std::result::Result<T, KernelError>;

/// Builds a [`KernelError::Shape`].
pub(crate) fn shape_err(op: &'static str, msg: impl Into<String>) -> KernelError {
    KernelError::Shape {
        op,
        msg: msg.into(),
    }
}
