//! PocketLLM: re-exports of the layered crates, so one dependency brings the engine.

pub use pocket_formats as formats;
pub use pocket_kernels as kernels;
pub use pocket_layers as layers;
pub use pocket_models as models;
pub use pocket_quant as quant;
