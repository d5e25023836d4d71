//! Devices (CPU and CUDA), device tensors and typed op launchers.
//!
//! A model is written once against [`Device`]: every op takes device tensors and writes into a
//! preallocated output, so a decode step allocates nothing and can be captured as a CUDA graph.
//! The CPU backend runs through pocket-quant and rayon; the CUDA backend runs kernels compiled
//! ahead of time from `kernels/*.cu`.

pub mod attention;
pub mod backend;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod device;
pub mod error;
pub mod qkv_rope;
pub mod recurrent;
pub mod rope;
pub mod tensor;
pub mod weight;

pub use attention::{AttentionMeta, AttentionParams};
pub use backend::Backend;
pub use device::{Device, DeviceKind};
pub use error::{KernelError, Result};
pub use qkv_rope::{QkvBias, QkvRopeParams, QkvSource};
pub use recurrent::{DeltaRuleParams, HeadGrouping, RecurrentMeta};
pub use rope::RopeTable;
pub use tensor::{DType, Storage, Tensor};
pub use weight::{HostBytes, Weight, WeightStorage};
