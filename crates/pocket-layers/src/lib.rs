//! Building blocks shared by architectures: Linear, attention, MLP, norms, paged KV cache, and
//! the [`Model`] trait every architecture implements.
//!
//! Every block takes its inputs and a preallocated output on one [`pocket_kernels::Device`] and
//! reaches the hardware only through the `Backend` op contract, so a model written once against
//! these blocks runs on every device and weight format.

pub mod attention;
pub mod batch;
pub mod checkpoint;
pub mod deltanet;
pub mod error;
pub mod kv_cache;
pub mod linear;
pub mod mlp;
pub mod model;
pub mod norm;
pub mod scratch;
pub mod state_cache;

pub use attention::{Attention, AttentionScratch, QkvProj};
pub use batch::{BatchPlan, BatchTensors, SeqId};
pub use checkpoint::TensorSource;
pub use deltanet::{DeltaNetScratch, GatedDeltaNet, ProjPair};
pub use error::{LayerError, Result};
pub use kv_cache::{KvCache, KvCacheConfig};
pub use linear::{stack_projections, Linear};
pub use mlp::{GateUp, Mlp, MlpScratch};
pub use model::{Model, ModelInfo};
pub use norm::RmsNorm;
pub use state_cache::{StateBatch, StateCache, StateCacheConfig, StatePlan};
