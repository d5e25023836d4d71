//! GGUF and safetensors: zero-copy readers over memmap2, writers, and one tensor-store view.
//!
//! Shapes: [`gguf::GgufTensorInfo::dims`] is the GGUF file's order (innermost first, ggml `ne`);
//! everything called `shape` in this crate is row-major, outermost first (numpy/PyTorch order).
//!
//! ```no_run
//! let store = pocket_formats::TensorStore::open("model.gguf")?;
//! let q = store.tensor("blk.0.attn_q.weight")?;
//! println!("{} {:?} {} ({} bytes)", q.name, q.shape, q.format, q.data.len());
//! # Ok::<(), pocket_formats::FormatError>(())
//! ```

pub mod backing;
pub mod companion;
pub mod error;
pub mod format;
pub mod ggml_type;
pub mod gguf;
pub mod safetensors;
pub mod store;

pub use companion::{CompanionRole, WeightScheme};
pub use error::{FormatError, Result};
pub use format::TensorFormat;
pub use ggml_type::GgmlType;
pub use gguf::{GgufArray, GgufFile, GgufMetadata, GgufTensorInfo, GgufValue, GgufWriter};
pub use safetensors::{ModelConfig, SafetensorsCheckpoint, SafetensorsFile, SafetensorsWriter};
pub use store::{Companion, StoreKind, StoreMetadata, TensorStore, TensorView};
