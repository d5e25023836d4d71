//! safetensors: single files and sharded checkpoints over memmap2, `config.json`, and a writer.

mod checkpoint;
mod config;
mod file;
mod header;
mod writer;

pub use checkpoint::{open_indexed, SafetensorsCheckpoint, INDEX_FILE};
pub use config::ModelConfig;
pub use file::SafetensorsFile;
pub use header::{parse_layout, SafetensorsLayout, SafetensorsTensorInfo, MAX_HEADER_BYTES};
pub use writer::SafetensorsWriter;
