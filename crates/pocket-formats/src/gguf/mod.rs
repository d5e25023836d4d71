//! GGUF v2/v3: reader over memmap2 (or a byte buffer), typed metadata, and a streaming writer.

mod cursor;
mod file;
mod metadata;
mod reader;
mod value;
mod writer;

pub use file::{GgufFile, GgufTensor};
pub use metadata::GgufMetadata;
pub use reader::{
    parse_layout, tensor_size, GgufLayout, GgufTensorInfo, DEFAULT_ALIGNMENT, GGUF_MAGIC,
    MAX_ARRAY_DEPTH, MAX_DIMS,
};
pub use value::{GgufArray, GgufValue, GgufValueType};
pub use writer::{GgufStreamWriter, GgufWriter};
