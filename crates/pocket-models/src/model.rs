//! The model interface the engine drives, re-exported from pocket-layers (where model crates can
//! implement it without depending on this crate).

pub use pocket_layers::{BatchPlan, KvCache, KvCacheConfig, Model, ModelInfo, SeqId};
