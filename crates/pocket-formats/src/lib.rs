//! GGUF and safetensors: zero-copy readers over memmap2, a GGUF writer, and one tensor-store view.

pub mod ggml_type;

pub use ggml_type::GgmlType;
